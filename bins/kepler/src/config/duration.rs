//! Durations written like Go's `time.Duration` strings, as upstream's config and flags use.

use std::str::FromStr;
use std::time::Duration;

use serde::{Deserialize, Deserializer};

/// A duration written like Go's `time.Duration` strings (`5s`, `500ms`, `1m30s`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

impl FromStr for GoDuration {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        parse_duration(text).map(GoDuration)
    }
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    // Go writes and reads a zero duration as a bare `0`.
    if text.trim() == "0" {
        return Ok(Duration::ZERO);
    }
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}); use forms like 5s, 500ms, 1m30s"))
}

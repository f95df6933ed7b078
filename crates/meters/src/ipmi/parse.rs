//! `ipmitool dcmi power reading` output, e.g.
//!
//! ```text
//!     Instantaneous power reading:                   220 Watts
//!     Minimum during sampling period:                 50 Watts
//!     Maximum during sampling period:                240 Watts
//!     Average power reading over sample period:      210 Watts
//!     IPMI timestamp:                           Tue Nov 24 18:00:00 2026
//!     Sampling period:                          00000005 Seconds.
//!     Power reading state is:                   activated
//! ```

/// The numbers of one DCMI Get Power Reading answer, in watts.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DcmiReading {
    pub current: f64,
    pub minimum: Option<f64>,
    pub maximum: Option<f64>,
    pub average: Option<f64>,
}

/// Why an output is not a usable power reading.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("no \"Instantaneous power reading\" line in the ipmitool output")]
    Missing,
    #[error("unreadable power value {0:?}")]
    Value(String),
    #[error("the BMC says its power reading is not active (\"Power reading state is: {0}\")")]
    Deactivated(String),
}

pub fn parse(output: &str) -> Result<DcmiReading, ParseError> {
    let mut current = None;
    let (mut minimum, mut maximum, mut average) = (None, None, None);
    for line in output.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let key = key.trim().to_ascii_lowercase();
        let value = value.trim();
        if key.starts_with("power reading state") {
            if !value.eq_ignore_ascii_case("activated") {
                return Err(ParseError::Deactivated(value.chars().take(40).collect()));
            }
            continue;
        }
        let slot = if key.starts_with("instantaneous power reading") {
            &mut current
        } else if key.starts_with("minimum during") {
            &mut minimum
        } else if key.starts_with("maximum during") {
            &mut maximum
        } else if key.starts_with("average power reading") {
            &mut average
        } else {
            continue;
        };
        *slot = Some(watts(value)?);
    }
    Ok(DcmiReading {
        current: current.ok_or(ParseError::Missing)?,
        minimum,
        maximum,
        average,
    })
}

/// `220 Watts` → 220.0; a negative, non-finite or unitless value is refused.
fn watts(value: &str) -> Result<f64, ParseError> {
    let bad = || ParseError::Value(value.chars().take(40).collect());
    let mut words = value.split_whitespace();
    let number: f64 = words.next().and_then(|n| n.parse().ok()).ok_or_else(bad)?;
    let unit = words.next().unwrap_or("");
    if !unit.eq_ignore_ascii_case("watts") || !number.is_finite() || number < 0.0 {
        return Err(bad());
    }
    Ok(number)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layout ipmitool 1.8.19 (Debian 12) prints; hand-written, as no BMC with DCMI was at
    /// hand to record one.
    const ACTIVE: &str = "
    Instantaneous power reading:                   220 Watts
    Minimum during sampling period:                 50 Watts
    Maximum during sampling period:                240 Watts
    Average power reading over sample period:      210 Watts
    IPMI timestamp:                           Tue Nov 24 18:00:00 2026
    Sampling period:                          00000005 Seconds.
    Power reading state is:                   activated

";

    #[test]
    fn reads_every_number() {
        assert_eq!(
            parse(ACTIVE).unwrap(),
            DcmiReading {
                current: 220.0,
                minimum: Some(50.0),
                maximum: Some(240.0),
                average: Some(210.0)
            }
        );
    }

    #[test]
    fn refuses_deactivated_missing_and_garbage() {
        let off = ACTIVE.replace(":                   activated", ": deactivated");
        assert!(matches!(parse(&off), Err(ParseError::Deactivated(_))));
        assert_eq!(parse("Error: no response"), Err(ParseError::Missing));
        assert_eq!(parse(""), Err(ParseError::Missing));
        for bad in ["abc Watts", "-5 Watts", "NaN Watts", "220", "220 Volts"] {
            let text = format!("Instantaneous power reading: {bad}\n");
            assert!(matches!(parse(&text), Err(ParseError::Value(_))), "{bad}");
        }
        let binary = String::from_utf8_lossy(&[0xff, 0x00, b':', 0xfe]).into_owned();
        assert!(parse(&binary).is_err());
    }
}

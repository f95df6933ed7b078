//! The traits that sources of usage and power implement, and how they explain unavailability.

use crate::energy::ZoneReading;
use crate::usage::UsageSnapshot;

/// Why a source or meter cannot be used on this host. Shown by `kepler probe` and logged once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    pub reason: String,
}

impl Unavailable {
    pub fn new(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
        }
    }
}

/// An error while reading a source that was available at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Other(String),
}

/// A node power meter: reads every zone it provides at one instant.
pub trait PowerMeter: Send {
    /// Short name used in config and logs (`rapl`, `hwmon`, `fake`, `model`, ...).
    fn name(&self) -> &str;
    /// Whether the numbers are measured by hardware or estimated by a model.
    fn estimated(&self) -> bool {
        false
    }
    /// Zone names this meter reports (before summing sockets), for probing and info metrics.
    fn zones(&self) -> Vec<String>;
    /// Appends one reading per zone to `out` (cleared by the caller).
    fn read(&mut self, out: &mut Vec<ZoneReading>) -> Result<(), ReadError>;
    /// Gives the meter the usage of the interval that ends now. Only estimating meters use it.
    fn observe_usage(&mut self, _previous: &UsageSnapshot, _current: &UsageSnapshot) {}
}

/// A source of node and per-process CPU usage.
pub trait UsageSource: Send {
    fn name(&self) -> &str;
    /// Takes a snapshot of node and process usage now.
    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError>;
}

//! Range checks of values that, left unchecked, would silently mean something else (a map of
//! 0 processes made 1), overflow the clock (an interval of millennia), or turn the agent into
//! a load generator (a model refreshed in a busy loop).

use std::time::Duration;

use kepler_core::{EnergyLimits, Watts};

use super::{Config, ConfigError};

/// The longest interval or period accepted: long enough for any real schedule, short enough
/// that adding it to the monotonic clock cannot overflow.
pub const MAX_PERIOD: Duration = Duration::from_secs(24 * 3600);

/// The shortest period between checks of a model for changes: each check of a URL model is
/// a download.
pub const MIN_REFRESH_PERIOD: Duration = Duration::from_secs(1);

impl Config {
    pub(super) fn check_limits(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Value {
            key: key.into(),
            message,
        };
        for (key, period) in [
            ("monitor.interval", self.monitor.interval.0),
            ("monitor.staleness", self.monitor.staleness.0),
            (
                "monitor.terminatedRetention",
                self.monitor.terminated_retention.0,
            ),
            ("estimator.refreshPeriod", self.estimator.refresh_period.0),
        ] {
            if period > MAX_PERIOD {
                return Err(invalid(
                    key,
                    format!(
                        "{} is too long; at most 24h",
                        humantime::format_duration(period)
                    ),
                ));
            }
        }
        if self.estimator.refresh_period.0 < MIN_REFRESH_PERIOD {
            return Err(invalid(
                "estimator.refreshPeriod",
                format!(
                    "{:?} would check (and download) the model in a busy loop; use at least 1s",
                    self.estimator.refresh_period.0
                ),
            ));
        }
        if self.ebpf.max_processes == 0 {
            return Err(invalid(
                "ebpf.maxProcesses",
                "must be at least 1: it is the number of processes the eBPF map can track".into(),
            ));
        }
        self.energy_limits()
            .map(|_| ())
            .map_err(|m| invalid("monitor.maxReadingWatts", m))
    }

    /// The bounds meter readings must respect (`monitor.maxReadingWatts`).
    pub fn energy_limits(&self) -> Result<EnergyLimits, String> {
        EnergyLimits::with_max_power(Watts(self.monitor.max_reading_watts))
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::super::{Loaded, Overrides};
    use super::*;

    fn checked(text: &str) -> Result<Config, String> {
        let Loaded { config, .. } =
            Config::from_yaml(text, Path::new("t.yaml")).map_err(|e| e.to_string())?;
        config.validate().map_err(|e| e.to_string())?;
        Ok(config)
    }

    #[test]
    fn values_that_meant_something_else_are_refused_by_key() {
        for (text, key) in [
            ("ebpf:\n  maxProcesses: 0\n", "ebpf.maxProcesses"),
            (
                "estimator:\n  refreshPeriod: 0s\n",
                "estimator.refreshPeriod",
            ),
            (
                "estimator:\n  refreshPeriod: 10ms\n",
                "estimator.refreshPeriod",
            ),
            ("monitor:\n  interval: 500000000000y\n", "monitor.interval"),
            ("monitor:\n  interval: 25h\n", "monitor.interval"),
            ("monitor:\n  staleness: 100y\n", "monitor.staleness"),
            (
                "monitor:\n  terminatedRetention: 100y\n",
                "monitor.terminatedRetention",
            ),
            (
                "monitor:\n  maxReadingWatts: 0\n",
                "monitor.maxReadingWatts",
            ),
            (
                "monitor:\n  maxReadingWatts: -5\n",
                "monitor.maxReadingWatts",
            ),
            (
                "monitor:\n  maxReadingWatts: .inf\n",
                "monitor.maxReadingWatts",
            ),
        ] {
            let err = checked(text).expect_err(text);
            assert!(err.contains(key), "{text}: {err}");
        }
        let c = checked(
            "monitor:\n  interval: 24h\n  maxReadingWatts: 500\nebpf:\n  maxProcesses: 1\n",
        )
        .unwrap();
        assert_eq!(c.energy_limits().unwrap().max_power, Watts(500.0));
        assert_eq!(
            Config::default().energy_limits().unwrap(),
            EnergyLimits::default()
        );
    }

    #[test]
    fn an_endless_config_file_is_refused_not_read_whole() {
        let err = Config::load(Some(Path::new("/dev/zero")), &Overrides::default()).unwrap_err();
        assert!(matches!(err, ConfigError::Unreadable(_)), "{err}");
        assert!(err.to_string().contains("/dev/zero"), "{err}");
    }
}

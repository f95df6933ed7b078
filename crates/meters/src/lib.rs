//! Node power meters for kepler-rs, each behind [`kepler_core::PowerMeter`]:
//!
//! - [`rapl::RaplMeter`] (`rapl`): Intel/AMD RAPL through the kernel's powercap sysfs;
//! - [`hwmon::HwmonMeter`] (`hwmon`): power and energy sensors of hwmon chips, the ACPI power
//!   meter included;
//! - [`fake::FakeMeter`] (`fake`): deterministic numbers for development on hosts without
//!   power hardware;
//! - [`model::ModelMeter`] (`model`): power estimated by a model, opened by
//!   [`model::open_model_meter`] (model choice, download and refresh all live in [`model`]).
//!
//! Meters read from the sysfs root they are given (`host.sysfs`), so every one of them runs on
//! fixture trees (see the `fixtures` feature). They report raw readings, one per socket or
//! sensor, with the counter's wrap point: summing same-name zones and unwrapping counters is
//! done once for all meters by [`kepler_core::zone_energies`]. When a meter cannot work on a
//! host, opening it says exactly why ([`Unavailable`]); [`probe`] collects those answers for
//! `kepler probe` and start-up logs.

pub mod fake;
pub mod hwmon;
pub mod model;
pub mod rapl;
mod sysfs;

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;

use std::path::PathBuf;

use kepler_core::{PowerMeter, Unavailable};

pub use fake::{Clock, FakeMeter, FakeSettings, ManualClock, MonotonicClock};
pub use hwmon::HwmonMeter;
pub use model::{
    open_model_meter, EstimatorSettings, ModelChoice, ModelFile, ModelMeter, ModelRefresh,
    OutputChoice, OutputType,
};
pub use rapl::RaplMeter;

/// The meter names [`open_meter`] knows.
pub const METER_NAMES: [&str; 3] = ["rapl", "hwmon", "fake"];

/// What the meters need from the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct MeterSettings {
    /// Root of sysfs (`host.sysfs`).
    pub sysfs: PathBuf,
    /// `rapl.zones`: zone names to keep; empty keeps all.
    pub rapl_zones: Vec<String>,
    /// `experimental.hwmon.zones`: zone names to keep; empty keeps all.
    pub hwmon_zones: Vec<String>,
    /// `dev.fake-cpu-meter`.
    pub fake: FakeSettings,
}

impl Default for MeterSettings {
    fn default() -> Self {
        MeterSettings {
            sysfs: PathBuf::from("/sys"),
            rapl_zones: Vec::new(),
            hwmon_zones: Vec::new(),
            fake: FakeSettings::default(),
        }
    }
}

/// Opens the meter called `name` (`rapl`, `hwmon` or `fake`, case-insensitive).
pub fn open_meter(
    name: &str,
    settings: &MeterSettings,
) -> Result<Box<dyn PowerMeter>, Unavailable> {
    let meter: Box<dyn PowerMeter> = match name.trim().to_ascii_lowercase().as_str() {
        "rapl" => Box::new(RaplMeter::open(&settings.sysfs, &settings.rapl_zones)?),
        "hwmon" => Box::new(HwmonMeter::open(&settings.sysfs, &settings.hwmon_zones)?),
        "fake" => Box::new(FakeMeter::new(&settings.fake)?),
        _ => return Err(Unavailable::new(format!("unknown meter {name}"))),
    };
    Ok(meter)
}

/// What probing one meter found.
#[derive(Clone, Debug, PartialEq)]
pub struct ProbeReport {
    pub name: String,
    /// The zones the meter would report (one per reading, so sockets repeat), or why it
    /// cannot be used.
    pub outcome: Result<Vec<String>, Unavailable>,
}

/// Tries to open each named meter, in order, and reports its zones or why it is unavailable.
/// The meters are closed again; nothing is kept.
pub fn probe(names: &[&str], settings: &MeterSettings) -> Vec<ProbeReport> {
    names
        .iter()
        .map(|&name| ProbeReport {
            name: name.to_string(),
            outcome: open_meter(name, settings).map(|m| m.zones()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_meter_is_unavailable() {
        let err = open_meter("nvml", &MeterSettings::default()).err().unwrap();
        assert_eq!(err.reason, "unknown meter nvml");
    }
}

//! Node power meters for kepler-rs, each behind [`kepler_core::PowerMeter`]:
//!
//! - [`rapl::RaplMeter`] (`rapl`): Intel/AMD RAPL through the kernel's powercap sysfs;
//! - [`msr::MsrMeter`] (`msr`): the same RAPL counters read from `/dev/cpu/*/msr`, opt-in;
//! - [`hwmon::HwmonMeter`]: power and energy sensors of hwmon chips (`hwmon`, CPU domain), and
//!   the ACPI power meter (`acpi`, platform domain);
//! - [`fake::FakeMeter`] (`fake`): deterministic numbers for development on hosts without
//!   power hardware;
//! - [`model::ModelMeter`] (`model`): power estimated by a model, opened by
//!   [`model::open_model_meter`] (model choice, download and refresh all live in [`model`]);
//! - [`gpu::GpuMeter`] (`nvml`, `amdgpu`, `fake-gpu`): one zone per GPU with the device's idle
//!   power and per-process shares.
//! - [`redfish`] (`redfish`) and [`ipmi`] (`ipmi`): platform power from the node's BMC, over
//!   Redfish or IPMI DCMI, behind the [`polled`] adapter.
//!
//! Meters read from the sysfs root they are given (`host.sysfs`), so every one of them runs on
//! fixture trees (see the `fixtures` feature). They report raw readings, one per socket or
//! sensor, with the counter's wrap point: summing same-name zones and unwrapping counters is
//! done once for all meters by [`kepler_core::zone_energies`]. When a meter cannot work on a
//! host, opening it says exactly why ([`kepler_core::Unavailable`]). The [`registry`] names
//! every meter, places it in a power domain's fallback chain and opens it, for the agent's
//! start-up selection and for `kepler probe`.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod fake;
pub mod gpu;
pub mod hwmon;
pub mod hwmon_rules;
pub mod ipmi;
pub mod model;
pub mod msr;
pub mod polled;
pub mod rapl;
pub mod redfish;
pub mod registry;
mod sysfs;

#[cfg(test)]
mod fuzz;

#[cfg(any(test, feature = "fixtures"))]
pub mod fixtures;

use std::path::PathBuf;
use std::time::Duration;

pub use fake::{Clock, FakeMeter, FakeSettings, ManualClock, MonotonicClock};
pub use hwmon::HwmonMeter;
pub use hwmon_rules::ChipRule;
pub use ipmi::{IpmiInterface, IpmiSettings};
pub use model::{
    open_model_meter, EstimatorSettings, ModelChoice, ModelFile, ModelMeter, ModelRefresh,
    OutputChoice, OutputType,
};
pub use msr::{MsrConfig, MsrMeter};
pub use polled::{PollTiming, Polled, PolledMeter, Poller, SlowDevice};
pub use rapl::RaplMeter;
pub use redfish::RedfishSettings;
pub use registry::{
    Attempt, Chain, DomainProbe, MeterName, OpenContext, OpenEstimator, ProbeRow, Selection,
    UnknownMeter,
};

/// Log filter directives every subscriber of a process using the BMC meters must add, whatever
/// level the user asks for: at trace level the HTTP stack hex-dumps whole requests, which
/// carry the Redfish login's password and session tokens. Its debug level redacts them.
pub const QUIET_LOG_TARGETS: [&str; 2] = ["ureq=debug", "ureq_proto=debug"];

/// What the meters need from the configuration.
#[derive(Clone, Debug, PartialEq)]
pub struct MeterSettings {
    /// Root of sysfs (`host.sysfs`).
    pub sysfs: PathBuf,
    /// Root of procfs (`host.procfs`): cpuinfo, and the DRM fdinfo the amdgpu meter reads.
    pub procfs: PathBuf,
    /// `monitor.interval`: how long meters must keep counting between two reads.
    pub interval: Duration,
    /// `rapl.zones`: zone names to keep; empty keeps all.
    pub rapl_zones: Vec<String>,
    /// `experimental.hwmon.zones`: zone names to keep; empty keeps all.
    pub hwmon_zones: Vec<String>,
    /// `experimental.hwmon.chipRules`: voltage/current pairing per chip.
    pub hwmon_chip_rules: Vec<ChipRule>,
    /// `dev.fake-cpu-meter`.
    pub fake: FakeSettings,
    /// `msr`.
    pub msr: MsrConfig,
    /// `experimental.gpu` and `dev.fake-gpu`.
    pub gpu: gpu::GpuSettings,
    /// The agent's node name (`kube.nodeName`, else the hostname): the BMC file's key when
    /// the Redfish section names no node.
    pub node_name: String,
    /// `monitor.interval`: how often slow meters ask their device.
    pub poll_interval: std::time::Duration,
    /// `experimental.platform.redfish`.
    pub redfish: RedfishSettings,
    /// `ipmi`.
    pub ipmi: IpmiSettings,
}

impl Default for MeterSettings {
    fn default() -> Self {
        MeterSettings {
            sysfs: PathBuf::from("/sys"),
            procfs: PathBuf::from("/proc"),
            interval: Duration::from_secs(5),
            rapl_zones: Vec::new(),
            hwmon_zones: Vec::new(),
            hwmon_chip_rules: Vec::new(),
            fake: FakeSettings::default(),
            msr: MsrConfig::default(),
            gpu: gpu::GpuSettings::default(),
            node_name: String::new(),
            poll_interval: std::time::Duration::from_secs(5),
            redfish: RedfishSettings::default(),
            ipmi: IpmiSettings::default(),
        }
    }
}

//! Power domains and the facts every zone carries from its meter into the snapshot.

use std::sync::Arc;

use crate::source::Provenance;

/// A part of the machine with its own fallback chain of meters (DESIGN §2). Zones of different
/// domains are attributed independently: conservation holds per zone in every domain.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum PowerDomain {
    /// CPU packages, cores, uncore and DRAM (RAPL, hwmon, models).
    #[default]
    Cpu,
    /// The whole machine as a BMC or the ACPI power meter sees it.
    Platform,
    /// Accelerators; shares usually come from the device's own per-process accounting.
    Gpu,
}

impl PowerDomain {
    pub const ALL: [PowerDomain; 3] = [PowerDomain::Cpu, PowerDomain::Platform, PowerDomain::Gpu];

    pub const fn as_str(self) -> &'static str {
        match self {
            PowerDomain::Cpu => "cpu",
            PowerDomain::Platform => "platform",
            PowerDomain::Gpu => "gpu",
        }
    }
}

impl std::fmt::Display for PowerDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Where a zone's numbers come from. One value is shared by every zone of a meter and travels
/// with the zone into the snapshot, so outputs never need a side channel to label a zone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ZoneMeta {
    pub domain: PowerDomain,
    /// The meter's registry name (`rapl`, `hwmon`, `fake`, `model`, ...).
    pub meter: Arc<str>,
    pub provenance: Provenance,
    /// The estimation model, for estimated zones.
    pub model: Option<Arc<str>>,
    /// False for meters that report dynamic power only (an estimate inside a VM): all of
    /// such a zone's energy is active and no idle policy applies to it.
    pub includes_idle: bool,
    /// For estimated zones, the model's expected error per zone, from its validation on
    /// data it was not trained on; empty for measured zones.
    pub expected_error: Arc<[ExpectedError]>,
    /// For estimated zones, why the meter estimates with this model (which built-in rule
    /// matched, or where the model file came from); `None` for measured zones.
    pub reason: Option<Arc<str>>,
}

/// How far an estimated zone is expected to be from the truth: the estimating model's mean
/// absolute error on measurements it was not trained on, in watts and relative to the
/// measured value. Dashboards draw a band of this width around the estimate.
#[derive(Clone, Debug, PartialEq)]
pub struct ExpectedError {
    /// The zone name the error belongs to (`package`, `dram`, `platform`).
    pub zone: Arc<str>,
    /// Mean absolute error.
    pub mae: crate::units::Watts,
    /// Mean absolute percentage error as a ratio (0.25 = 25 %).
    pub mape: f64,
}

// Errors are finite by construction (the model crate checks them), so equality is total.
impl Eq for ExpectedError {}

impl ZoneMeta {
    /// A measured CPU zone of the named meter, idle included: the common case.
    pub fn measured(meter: &str) -> ZoneMeta {
        ZoneMeta {
            domain: PowerDomain::Cpu,
            meter: Arc::from(meter),
            provenance: Provenance::Measured,
            model: None,
            includes_idle: true,
            expected_error: Arc::from([]),
            reason: None,
        }
    }
}

/// The physical device a zone measures, for zones that are one device each (GPUs). It travels
/// with the zone's readings into the snapshot, so outputs label a device's series (index, UUID,
/// model name, vendor) without a side channel; set once when the meter opens and shared.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeviceInfo {
    /// The device's index on this host (NVML's index, the DRM card number).
    pub index: u32,
    /// A stable identifier: NVML's UUID, a GPU instance's id, or the PCI address.
    pub uuid: Arc<str>,
    /// The model name the driver reports.
    pub name: Arc<str>,
    /// `nvidia`, `amd`, ...
    pub vendor: Arc<str>,
}

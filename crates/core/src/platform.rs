//! Platform power as the device itself breaks it down (a BMC's power supplies or power
//! controls): exported as upstream's `kepler_platform_watts`, next to the summed `platform`
//! zone that attribution uses.

use std::sync::Arc;

use crate::units::Watts;

/// Who reported a platform reading and what part of the machine it covers. Built once per
/// device answer and shared by every tick that reuses that answer.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PlatformLabels {
    /// The protocol: `redfish`, `ipmi`.
    pub source: String,
    /// The BMC's name in the configuration (never its address or credentials).
    pub bmc_id: String,
    /// The Redfish chassis the reading belongs to; empty where the protocol has none.
    pub chassis_id: String,
    /// The reading's id within its chassis (a power supply's or power control's `Id`).
    pub source_id: String,
    /// The device's own name for it.
    pub source_name: String,
    /// What kind of reading it is (`PowerSupply`, `PowerControl`, `DCMI`).
    pub source_type: String,
}

/// One platform reading with its labels: the detail behind the `platform` zone's total.
#[derive(Clone, Debug, PartialEq)]
pub struct PlatformPower {
    pub labels: Arc<PlatformLabels>,
    pub watts: Watts,
}

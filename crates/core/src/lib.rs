//! The centre of kepler-rs: units, the snapshots that flow between sources, attribution and
//! exporters, the traits sources and meters implement, and attribution itself. Nothing here
//! does I/O, so every rule can be tested with plain values.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod attribution;
pub mod energy;
pub mod features;
pub mod snapshot;
pub mod source;
pub mod split;
pub mod units;
pub mod usage;
pub mod workload;

pub use attribution::{AttributionConfig, Attributor, IdlePolicy, TerminatedPolicy, Tick};
pub use energy::{zone_energies, DeltaIssue, EnergySnapshot, ZoneEnergy, ZoneReading, ZoneSample};
pub use snapshot::{
    ContainerPower, IdlePolicyState, NodeZone, PodPower, PowerSnapshot, ProcessPower, VmPower,
    WorkloadState, ZoneValue, ZoneValues,
};
pub use source::{PowerMeter, Provenance, ReadError, Unavailable, UsageSource};
pub use units::{MicroJoules, Watts};
pub use usage::{
    CpuInfo, NodeCpuTimes, ProcessInfo, ProcessKey, ProcessUsage, TaskCounters, UsageSnapshot,
};
pub use workload::{
    Classifier, ContainerRef, NoWorkloads, PodRef, ProcessType, Runtime, VmRef, WorkloadIdentity,
};

//! The centre of kepler-rs: units, the snapshots that flow between sources, attribution and
//! exporters, the traits sources and meters implement, and attribution itself. Nothing here
//! does I/O, so every rule can be tested with plain values.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod attribution;
pub mod catalogue;
pub mod domain;
pub mod energy;
pub mod features;
pub mod health;
pub mod lifecycle;
pub mod platform;
pub mod plausible;
pub mod redact;
pub mod scratch;
pub mod snapshot;
pub mod source;
pub mod split;
pub mod units;
pub mod usage;
pub mod workload;

pub(crate) use scratch::FastMap;

pub use attribution::{AttributionConfig, Attributor, IdlePolicy, TerminatedPolicy, Tick};
pub use catalogue::{Catalogue, CatalogueView, ContainerNames, NameSource, PodNames};
pub use domain::{DeviceInfo, ExpectedError, PowerDomain, ZoneMeta};
pub use energy::{
    zone_energies, zone_energies_within, DeltaIssue, EnergySnapshot, ProcessShare, ProcessShares,
    ZoneEnergy, ZoneReading, ZoneSample, ZoneWeights,
};
pub use features::Feature;
pub use health::{
    ComponentHealth, ComponentKind, Health, RepeatLog, UnusableReason, REPEAT_LOG_WINDOW,
};
pub use lifecycle::{Background, BackgroundTask, StopSignal};
pub use platform::{PlatformLabels, PlatformPower};
pub use plausible::EnergyLimits;
pub use snapshot::{
    ContainerPower, IdlePolicyState, NodeZone, PodPower, PowerSnapshot, ProcessPower, VmPower,
    WorkloadState, ZoneValue, ZoneValues,
};
pub use source::{MeterInput, PowerMeter, Provenance, ReadError, Unavailable, UsageSource};
pub use units::{MicroJoules, Watts};
pub use usage::{
    CgroupUsage, CpuInfo, NodeCpuTimes, ProcessInfo, ProcessKey, ProcessUsage, TaskCounters,
    UsageSnapshot,
};
pub use workload::{
    Classifier, ContainerId, ContainerRef, NoWorkloads, PodRef, ProcessType, Runtime, VmId, VmRef,
    WorkloadIdentity,
};

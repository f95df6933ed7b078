//! The immutable result of one tick: what exporters encode.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::{DeviceInfo, ZoneMeta};
use crate::units::{MicroJoules, Watts};
use crate::usage::{ProcessInfo, ProcessKey};
use crate::workload::{ContainerRef, PodRef, VmRef};

/// One value per node zone. Inline up to four zones (package, core, uncore, dram), so a
/// snapshot of thousands of processes does not allocate once per process.
pub type ZoneValues = smallvec::SmallVec<[ZoneValue; 4]>;

/// Energy counter and current power of one workload (or the node) in one zone.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct ZoneValue {
    /// Monotonic since the agent started.
    pub energy: MicroJoules,
    /// Average over the last interval; 0 W when that interval had no reading for the zone.
    pub watts: Watts,
}

#[derive(Clone, Debug, PartialEq)]
pub struct NodeZone {
    pub zone: Arc<str>,
    pub path: Arc<str>,
    /// Domain, meter, provenance, model and whether idle is included: the zone's facts as of
    /// its last reading.
    pub meta: Arc<ZoneMeta>,
    /// The device the zone measures (GPU zones): index, UUID, model name, vendor.
    pub device: Option<Arc<DeviceInfo>>,
    pub total: ZoneValue,
    pub active: ZoneValue,
    pub idle: ZoneValue,
    /// Active energy of intervals in which no workload used CPU time, so nothing could take it.
    pub unattributed: MicroJoules,
    /// Active energy taken by processes that are not exported as series of their own (ended
    /// below the terminated-energy threshold, or beyond the terminated cap). Their containers,
    /// pods and VMs hold it; at process level, Σ of every process series' last value +
    /// `hidden` + `unattributed` = `active`. Its watts are this interval's part, so that
    /// Σ process watts + hidden watts = active watts in every snapshot where some process used
    /// CPU time.
    pub hidden: ZoneValue,
}

/// How idle power was separated from active power.
#[derive(Clone, Debug, PartialEq)]
pub enum IdlePolicyState {
    /// Upstream's rule: idle = (1 − usage ratio) × energy.
    Ratio,
    /// A fixed idle power per zone, configured or measured; `None` where not known yet (the
    /// ratio rule applies until then) and for zones whose meter leaves idle out.
    Baseline {
        configured: bool,
        watts: Vec<Option<Watts>>,
    },
}

impl IdlePolicyState {
    pub fn name(&self) -> &'static str {
        match self {
            IdlePolicyState::Ratio => "ratio",
            IdlePolicyState::Baseline { .. } => "baseline",
        }
    }
}

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum WorkloadState {
    Running,
    Terminated,
}

impl WorkloadState {
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadState::Running => "running",
            WorkloadState::Terminated => "terminated",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcessPower {
    pub key: ProcessKey,
    pub info: Arc<ProcessInfo>,
    pub state: WorkloadState,
    /// Cumulative CPU time as reported by the source.
    pub cpu_time: Duration,
    /// One value per entry of `PowerSnapshot::zones`.
    pub zones: ZoneValues,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ContainerPower {
    pub container: Arc<ContainerRef>,
    pub state: WorkloadState,
    /// CPU time of its processes observed since the agent started.
    pub cpu_time: Duration,
    pub zones: ZoneValues,
}

#[derive(Clone, Debug, PartialEq)]
pub struct PodPower {
    pub pod: Arc<PodRef>,
    pub state: WorkloadState,
    pub zones: ZoneValues,
}

#[derive(Clone, Debug, PartialEq)]
pub struct VmPower {
    pub vm: Arc<VmRef>,
    pub state: WorkloadState,
    pub zones: ZoneValues,
}

/// Everything known after one tick. Shared read-only with exporters.
#[derive(Clone, Debug, PartialEq)]
pub struct PowerSnapshot {
    /// Ticks computed so far, this one included.
    pub tick: u64,
    /// Length of the interval this snapshot describes.
    pub interval: Duration,
    /// Node CPU usage ratio over the interval.
    pub usage_ratio: f64,
    pub zones: Vec<NodeZone>,
    pub idle_policy: IdlePolicyState,
    pub processes: Vec<ProcessPower>,
    pub containers: Vec<ContainerPower>,
    pub pods: Vec<PodPower>,
    pub vms: Vec<VmPower>,
    /// Model features of the interval, when the agent is configured to export them.
    pub features: Option<Arc<crate::features::Features>>,
    /// The platform meter's per-device readings behind the `platform` zone (empty when the
    /// platform meter failed this tick or gives no breakdown).
    pub platform: Vec<crate::platform::PlatformPower>,
}

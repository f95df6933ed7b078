//! The attribution state machine: one call per tick turns usage and zone energy into a
//! `PowerSnapshot`. No I/O; every rule of DESIGN §5 lives here.
//!
//! A tick runs in phases, each in its own module:
//! 1. [`processes`]: CPU-time deltas per process, with the first-sight rule; [`remainders`]:
//!    the time of processes no listing shows, from cgroup usage counters;
//! 2. [`zones`]: per zone, node totals, the idle/active split, and the active energy divided
//!    among processes by the zone's weights (CPU time, or shares the meter supplied);
//! 3. [`groups`]: per-process energy credited, then rolled up to containers, pods and VMs,
//!    whose names are joined from the identity catalogue;
//! 4. [`retention`]: workloads not seen end, and ended ones expire or are capped;
//! 5. [`build`]: the immutable snapshot.

mod build;
mod groups;
mod processes;
mod remainders;
mod retention;
mod zones;

use std::sync::Arc;
use std::time::Duration;

use crate::catalogue::Catalogue;
use crate::energy::ZoneEnergy;
use crate::snapshot::{PowerSnapshot, ProcessPower, WorkloadState, ZoneValue, ZoneValues};
use crate::split::Splitter;
use crate::units::{MicroJoules, Watts};
use crate::usage::{NodeCpuTimes, ProcessKey, UsageSnapshot};
use crate::workload::PodRef;

use groups::GroupSums;
use processes::ProcessEntry;
use zones::NodeZoneState;

/// How idle power is told apart from active power.
#[derive(Clone, Debug, PartialEq)]
pub enum IdlePolicy {
    /// idle = (1 − usage ratio) × energy (upstream Kepler).
    Ratio,
    /// idle = a fixed power per zone × interval, capped at the zone's energy. `configured`
    /// gives the watts for every zone; otherwise each zone's baseline is the lowest power seen
    /// in an interval whose usage ratio was at most `low_usage_ratio`.
    Baseline {
        configured: Option<Watts>,
        low_usage_ratio: f64,
    },
}

/// Which ended workloads are still exported, and for how long.
#[derive(Clone, Debug, PartialEq)]
pub struct TerminatedPolicy {
    /// How long an ended workload stays in snapshots.
    pub retention: Duration,
    /// Keep at most this many ended processes (the most energetic); `None` for no limit.
    pub max: Option<usize>,
    /// Ended processes below this energy (all zones together) are not kept.
    pub min_energy: MicroJoules,
}

impl Default for TerminatedPolicy {
    fn default() -> Self {
        TerminatedPolicy {
            retention: Duration::from_secs(300),
            max: Some(500),
            min_energy: MicroJoules(10_000_000),
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct AttributionConfig {
    pub idle: IdlePolicy,
    pub terminated: TerminatedPolicy,
}

impl Default for AttributionConfig {
    fn default() -> Self {
        AttributionConfig {
            idle: IdlePolicy::Ratio,
            terminated: TerminatedPolicy::default(),
        }
    }
}

/// One tick's inputs.
pub struct Tick<'a> {
    pub usage: &'a UsageSnapshot,
    /// Zone energy over the interval, of every domain; `None` when there is no meter (usage is
    /// still tracked).
    pub energy: Option<&'a [ZoneEnergy]>,
    pub interval: Duration,
}

struct Workload<R> {
    reference: R,
    zones: ZoneValues,
    cpu_time: Duration,
    seen_tick: u64,
    /// Uptime at which it was first found ended.
    ended_at: Option<Duration>,
}

impl<R> Workload<R> {
    fn new(reference: R) -> Self {
        Workload {
            reference,
            zones: ZoneValues::new(),
            cpu_time: Duration::ZERO,
            seen_tick: 0,
            ended_at: None,
        }
    }

    fn total_energy(&self) -> u64 {
        self.zones.iter().map(|z| z.energy.0).sum()
    }

    fn state(&self) -> WorkloadState {
        if self.ended_at.is_some() {
            WorkloadState::Terminated
        } else {
            WorkloadState::Running
        }
    }
}

use crate::FastMap;

/// Accumulates energy per node zone and per workload across ticks.
pub struct Attributor {
    config: AttributionConfig,
    tick: u64,
    previous_node: Option<NodeCpuTimes>,
    previous_uptime: Option<Duration>,
    zones: Vec<NodeZoneState>,
    processes: FastMap<ProcessKey, ProcessEntry>,
    /// Hidden processes listed in the last tick, by key: the CPU time they were last read at,
    /// all a late report of one needs (its part then goes to the hidden energy too). Held
    /// apart so that under churn the thousands of them a tick cost a few bytes each, not a
    /// whole entry, and the exported table holds only what it exports.
    held: FastMap<ProcessKey, Duration>,
    containers: FastMap<String, Workload<groups::ContainerGroup>>,
    pods: FastMap<String, Workload<Arc<PodRef>>>,
    vms: FastMap<String, Workload<groups::VmGroup>>,
    // Reused buffers.
    /// CPU-time delta per listed process this tick, in nanoseconds (the default weights),
    /// then one weight per remainder.
    weights: Vec<u64>,
    keys: Vec<ProcessKey>,
    /// Per zone of this tick: (zone index, each process's share).
    tick_energy: Vec<(usize, Vec<u64>)>,
    /// Weights of a zone whose meter supplied shares, aligned with `keys`.
    share_weights: Vec<u64>,
    group_sums: GroupSums,
    /// Indices into `keys` of this tick's listings of ended or hidden processes.
    listed_ended: Vec<usize>,
    /// The cgroups whose usage counters the source reads, by the name it gives them.
    cgroups: FastMap<Arc<str>, remainders::CgroupState>,
    /// This tick's remainders, weighted in `weights` after the processes.
    remainders: remainders::Remainders,
    splitter: Splitter,
    /// The key last inserted for each pid, to find an ended process whose pid is reused.
    latest_by_pid: FastMap<u32, ProcessKey>,
    source_counts_from_start: bool,
    catalogue: Arc<Catalogue>,
    /// The catalogue generation the groups' names were last joined at.
    joined_generation: Option<u64>,
    /// A process list handed back by [`Attributor::recycle`], empty, for the next snapshot.
    spare_processes: Vec<ProcessPower>,
}

impl Attributor {
    pub fn new(config: AttributionConfig) -> Self {
        Attributor {
            config,
            tick: 0,
            previous_node: None,
            previous_uptime: None,
            zones: Vec::new(),
            processes: FastMap::default(),
            held: FastMap::default(),
            containers: FastMap::default(),
            pods: FastMap::default(),
            vms: FastMap::default(),
            weights: Vec::new(),
            keys: Vec::new(),
            tick_energy: Vec::new(),
            share_weights: Vec::new(),
            group_sums: GroupSums::default(),
            listed_ended: Vec::new(),
            cgroups: FastMap::default(),
            remainders: remainders::Remainders::default(),
            splitter: Splitter::default(),
            latest_by_pid: FastMap::default(),
            source_counts_from_start: false,
            catalogue: Arc::new(Catalogue::new()),
            joined_generation: None,
            spare_processes: Vec::new(),
        }
    }

    /// For sources whose cumulative CPU times start at zero when the source starts (eBPF): a
    /// task first seen after the first snapshot then counts all the CPU time it reports, since
    /// all of it was used after the previous snapshot.
    pub fn counting_from_source_start(mut self) -> Self {
        self.source_counts_from_start = true;
        self
    }

    /// Names of containers, pods and VMs come from `catalogue`, joined at every tick.
    pub fn with_catalogue(mut self, catalogue: Arc<Catalogue>) -> Self {
        self.catalogue = catalogue;
        self.joined_generation = None;
        self
    }

    pub fn config(&self) -> &AttributionConfig {
        &self.config
    }

    /// Takes back a snapshot that nothing reads any more: the next snapshot's process list is
    /// built in its list's allocation. A list of ~1,000 processes (136 bytes each) is above
    /// glibc's mmap threshold, which the agent holds at 128 KiB: made afresh, it was mapped
    /// and faulted in page by page at every tick (36 faults a tick at 1,000 processes), then
    /// unmapped. A list left from a burst is cut back (see [`crate::scratch`]).
    pub fn recycle(&mut self, snapshot: PowerSnapshot) {
        let mut list = snapshot.processes;
        list.clear();
        crate::scratch::trim_vec(&mut list, self.processes.len());
        self.spare_processes = list;
    }

    /// Advances one tick and returns the snapshot describing it.
    pub fn tick(&mut self, input: Tick<'_>) -> PowerSnapshot {
        self.tick += 1;
        let usage = input.usage;
        let ratio = self
            .previous_node
            .map(|prev| usage.node.usage_ratio_since(&prev))
            .unwrap_or(0.0);

        self.observe_processes(usage);
        self.observe_remainders(usage);
        self.attribute_zones(input.energy, ratio, input.interval);
        self.credit_and_roll_up(input.interval);
        self.end_unseen(usage.uptime);
        self.prune(usage.uptime, input.interval);
        self.previous_node = Some(usage.node);
        self.previous_uptime = Some(usage.uptime);
        self.snapshot(ratio, input.interval)
    }
}

/// Restarts a workload's per-tick power when it is first credited in a tick.
fn zero_watts(zones: &mut [ZoneValue]) {
    zones.iter_mut().for_each(|z| z.watts = Watts(0.0));
}

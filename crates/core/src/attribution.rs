//! The attribution state machine: one call per tick turns usage and zone energy into a
//! `PowerSnapshot`. No I/O; every rule of DESIGN §5 lives here.

use std::collections::HashMap;
use std::hash::BuildHasherDefault;
use std::sync::Arc;
use std::time::Duration;

use crate::energy::ZoneEnergy;
use crate::snapshot::{
    ContainerPower, IdlePolicyState, NodeZone, PodPower, PowerSnapshot, ProcessPower, VmPower,
    WorkloadState, ZoneValue, ZoneValues,
};
use crate::split::Splitter;
use crate::units::{MicroJoules, Watts};
use crate::usage::{NodeCpuTimes, ProcessInfo, ProcessKey, UsageSnapshot};
use crate::workload::{ContainerRef, PodRef, VmRef};

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
    /// Zone energy over the interval; `None` when there is no meter (usage is still tracked).
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

struct ProcessEntry {
    info: Arc<ProcessInfo>,
    /// Tick whose energy the `watts` fields describe; a source may list a key twice in one
    /// snapshot (an exit record beside the live entry), and both shares must add up.
    energy_tick: u64,
    /// Last cumulative CPU time read from the source.
    last_cpu_time: Duration,
    workload: Workload<()>,
}

struct NodeZoneState {
    zone: Arc<str>,
    path: Arc<str>,
    total: ZoneValue,
    active: ZoneValue,
    idle: ZoneValue,
    unattributed: MicroJoules,
    baseline: Option<Watts>,
}

/// Maps looked up once or twice per process per tick. Keys are pids and start times, and ids
/// from cgroup paths or command lines: nothing an outsider can choose freely enough to flood a
/// bucket, so the fast non-keyed hash of rustc is used instead of SipHash.
type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<rustc_hash::FxHasher>>;

/// The workload of this id in `map`, created from `reference` if new. Called once per group
/// per tick (members are gathered first), so copying the id for the lookup is cheap.
fn group<'m, R: Clone>(
    map: &'m mut FastMap<String, Workload<R>>,
    id: &str,
    reference: &R,
) -> &'m mut Workload<R> {
    map.entry(id.to_string())
        .or_insert_with(|| Workload::new(reference.clone()))
}

/// Accumulates energy per node zone and per workload across ticks.
pub struct Attributor {
    config: AttributionConfig,
    tick: u64,
    previous_node: Option<NodeCpuTimes>,
    previous_uptime: Option<Duration>,
    zones: Vec<NodeZoneState>,
    processes: FastMap<ProcessKey, ProcessEntry>,
    containers: FastMap<String, Workload<Arc<ContainerRef>>>,
    pods: FastMap<String, Workload<Arc<PodRef>>>,
    vms: FastMap<String, Workload<Arc<VmRef>>>,
    // Reused buffers.
    weights: Vec<u64>,
    keys: Vec<ProcessKey>,
    /// Per zone of this tick: (zone index, each process's share).
    tick_energy: Vec<(usize, Vec<u64>)>,
    group_sums: GroupSums,
    splitter: Splitter,
    /// The key last inserted for each pid, to find an ended process whose pid is reused.
    latest_by_pid: FastMap<u32, ProcessKey>,
    source_counts_from_start: bool,
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
            containers: FastMap::default(),
            pods: FastMap::default(),
            vms: FastMap::default(),
            weights: Vec::new(),
            keys: Vec::new(),
            tick_energy: Vec::new(),
            group_sums: GroupSums::default(),
            splitter: Splitter::default(),
            latest_by_pid: FastMap::default(),
            source_counts_from_start: false,
        }
    }

    /// For sources whose cumulative CPU times start at zero when the source starts (eBPF): a
    /// task first seen after the first snapshot then counts all the CPU time it reports, since
    /// all of it was used after the previous snapshot.
    pub fn counting_from_source_start(mut self) -> Self {
        self.source_counts_from_start = true;
        self
    }

    pub fn config(&self) -> &AttributionConfig {
        &self.config
    }

    fn zone_index(&mut self, energy: &ZoneEnergy) -> usize {
        if let Some(i) = self.zones.iter().position(|z| z.zone == energy.zone) {
            return i;
        }
        self.zones.push(NodeZoneState {
            zone: energy.zone.clone(),
            path: energy.path.clone(),
            total: ZoneValue::default(),
            active: ZoneValue::default(),
            idle: ZoneValue::default(),
            unattributed: MicroJoules::ZERO,
            baseline: None,
        });
        self.zones.len() - 1
    }

    /// Splits a zone's energy into (idle, active) under the configured policy, learning the
    /// measured baseline on the way.
    fn idle_active(
        &mut self,
        zone: usize,
        energy: MicroJoules,
        ratio: f64,
        interval: Duration,
    ) -> (MicroJoules, MicroJoules) {
        let by_ratio = || {
            let idle = MicroJoules(((1.0 - ratio) * energy.0 as f64).round() as u64).min(energy);
            (idle, energy - idle)
        };
        match self.config.idle.clone() {
            IdlePolicy::Ratio => by_ratio(),
            IdlePolicy::Baseline {
                configured,
                low_usage_ratio,
            } => {
                let baseline = match configured {
                    Some(w) => Some(w),
                    None => {
                        let state = &mut self.zones[zone];
                        if ratio <= low_usage_ratio && interval > Duration::ZERO {
                            let power = energy.over(interval);
                            if state.baseline.is_none_or(|b| power.0 < b.0) {
                                state.baseline = Some(power);
                            }
                        }
                        state.baseline
                    }
                };
                match baseline {
                    Some(w) => {
                        let idle = w.during(interval).min(energy);
                        (idle, energy - idle)
                    }
                    None => by_ratio(),
                }
            }
        }
    }

    /// Advances one tick and returns the snapshot describing it.
    pub fn tick(&mut self, input: Tick<'_>) -> PowerSnapshot {
        self.tick += 1;
        let tick = self.tick;
        let usage = input.usage;
        let ratio = self
            .previous_node
            .map(|prev| usage.node.usage_ratio_since(&prev))
            .unwrap_or(0.0);

        // CPU time deltas per process. A process first seen now counts all its CPU time only if
        // it started after the previous snapshot; otherwise this reading is its baseline.
        self.weights.clear();
        self.keys.clear();
        let mut ended_with_reused_pid = Vec::new();
        for process in &usage.processes {
            // A task first seen now counts all its CPU time when it started after the previous
            // snapshot, or when the source counts from its own start (then everything it
            // reports after its first snapshot was used since that snapshot).
            let counts_fully = self.previous_uptime.is_some_and(|prev| {
                process.key.start_time >= prev || self.source_counts_from_start
            });
            let entry = match self.processes.entry(process.key) {
                std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
                std::collections::hash_map::Entry::Vacant(e) => {
                    // A reused pid: the ended process of the same pid goes, or both would
                    // export the same label set (the pid, not the start time, is the label).
                    if let Some(old) = self.latest_by_pid.insert(process.key.pid, process.key) {
                        if old != process.key {
                            ended_with_reused_pid.push(old);
                        }
                    }
                    e.insert(ProcessEntry {
                        info: process.info.clone(),
                        energy_tick: 0,
                        last_cpu_time: if counts_fully {
                            Duration::ZERO
                        } else {
                            process.cpu_time
                        },
                        workload: Workload::new(()),
                    })
                }
            };
            // CPU time never goes backwards for one task; if a source says it did, count none.
            let delta = process.cpu_time.saturating_sub(entry.last_cpu_time);
            entry.last_cpu_time = entry.last_cpu_time.max(process.cpu_time);
            entry.workload.cpu_time = entry.last_cpu_time;
            entry.workload.seen_tick = tick;
            if !Arc::ptr_eq(&entry.info, &process.info) {
                entry.info = process.info.clone();
            }
            if process.exited {
                entry.workload.ended_at = Some(usage.uptime);
            } else {
                entry.workload.ended_at = None;
            }
            self.keys.push(process.key);
            self.weights
                .push(u64::try_from(delta.as_nanos()).unwrap_or(u64::MAX));
        }

        for old in ended_with_reused_pid {
            if self
                .processes
                .get(&old)
                .is_some_and(|p| p.workload.ended_at.is_some() && p.workload.seen_tick != tick)
            {
                self.processes.remove(&old);
            }
        }

        // Energy per zone: node totals, idle/active, and the active part split by CPU time.
        let zone_count_before = self.zones.len();
        let mut tick_energy = std::mem::take(&mut self.tick_energy);
        let mut used = 0;
        // Watts describe this interval: a zone without energy this tick (a failed read, a
        // dropped sample) shows 0 W at every level alike, not last tick's power.
        for state in &mut self.zones {
            for value in [&mut state.total, &mut state.active, &mut state.idle] {
                value.watts = Watts(0.0);
            }
        }
        if let Some(energies) = input.energy {
            for energy in energies {
                let z = self.zone_index(energy);
                let (idle, active) = self.idle_active(z, energy.energy, ratio, input.interval);
                let state = &mut self.zones[z];
                state.path = energy.path.clone();
                state.total.energy += energy.energy;
                state.total.watts = energy.energy.over(input.interval);
                state.idle.energy += idle;
                state.idle.watts = idle.over(input.interval);
                state.active.energy += active;
                state.active.watts = active.over(input.interval);
                if tick_energy.len() <= used {
                    tick_energy.push((z, Vec::new()));
                }
                let slot = &mut tick_energy[used];
                slot.0 = z;
                if !self.splitter.split(active.0, &self.weights, &mut slot.1) {
                    state.unattributed += active;
                }
                used += 1;
            }
        }
        tick_energy.truncate(used);
        let zone_count = self.zones.len();
        if zone_count != zone_count_before {
            for entry in self.processes.values_mut() {
                entry
                    .workload
                    .zones
                    .resize(zone_count, ZoneValue::default());
            }
        }

        // Per-process energy this tick, rolled up to containers, pods and VMs.
        let interval = input.interval;
        let mut sums = std::mem::take(&mut self.group_sums);
        let mut this_tick = vec![MicroJoules::ZERO; zone_count];
        for (i, key) in self.keys.iter().enumerate() {
            let Some(entry) = self.processes.get_mut(key) else {
                continue;
            };
            entry
                .workload
                .zones
                .resize(zone_count, ZoneValue::default());
            this_tick.iter_mut().for_each(|e| *e = MicroJoules::ZERO);
            // A key can be listed twice in one snapshot (an exit record beside the live
            // entry): the first listing restarts this tick's power, later ones add to it.
            if entry.energy_tick != tick {
                entry.energy_tick = tick;
                for value in entry.workload.zones.iter_mut() {
                    value.watts = Watts(0.0);
                }
            }
            for (z, parts) in &tick_energy {
                let part = MicroJoules(parts.get(i).copied().unwrap_or(0));
                this_tick[*z] = part;
                let value = &mut entry.workload.zones[*z];
                value.energy += part;
                value.watts = Watts(value.watts.0 + part.over(interval).0);
            }
            let cpu_delta = Duration::from_nanos(self.weights.get(i).copied().unwrap_or(0));
            let ended = entry.workload.ended_at.is_some();
            let identity = &entry.info.workload;
            if let Some(container) = &identity.container {
                gather(
                    &mut sums.containers,
                    container,
                    &this_tick,
                    cpu_delta,
                    ended,
                );
                if let Some(pod) = &container.pod {
                    gather(&mut sums.pods, pod, &this_tick, cpu_delta, ended);
                }
            }
            if let Some(vm) = &identity.vm {
                gather(&mut sums.vms, vm, &this_tick, cpu_delta, ended);
            }
        }
        self.tick_energy = tick_energy;
        let at = (interval, tick);
        apply(&mut self.containers, &mut sums.containers, |c| &c.id, at);
        apply(&mut self.pods, &mut sums.pods, |p| &p.id, at);
        apply(&mut self.vms, &mut sums.vms, |v| &v.id, at);
        self.group_sums = sums;

        self.end_unseen(usage.uptime);
        self.prune(usage.uptime);
        self.previous_node = Some(usage.node);
        self.previous_uptime = Some(usage.uptime);
        self.snapshot(ratio, input.interval)
    }

    /// Workloads not seen this tick have ended: their power drops to zero, their energy stays.
    fn end_unseen(&mut self, now: Duration) {
        let tick = self.tick;
        let processes = self.processes.values_mut().map(|p| &mut p.workload);
        for w in processes {
            end_if_unseen(w, tick, now);
        }
        for w in self.containers.values_mut() {
            end_if_unseen(w, tick, now);
        }
        for w in self.pods.values_mut() {
            end_if_unseen(w, tick, now);
        }
        for w in self.vms.values_mut() {
            end_if_unseen(w, tick, now);
        }
    }

    fn prune(&mut self, now: Duration) {
        let policy = &self.config.terminated;
        let tick = self.tick;
        let expired = |ended: Option<Duration>| {
            ended.is_some_and(|at| now.saturating_sub(at) > policy.retention)
        };
        // A process that took a share of this tick stays in this tick's snapshot whatever its
        // total, so the exported process power adds up to the node's active power; the
        // threshold and the cap apply from the next tick on.
        let prunable =
            |p: &ProcessEntry| p.workload.ended_at.is_some() && p.workload.seen_tick != tick;
        let before = self.processes.len();
        self.processes.retain(|_, p| {
            !prunable(p)
                || (!expired(p.workload.ended_at)
                    && p.workload.total_energy() >= policy.min_energy.0)
        });
        if let Some(max) = policy.max {
            let mut ended: Vec<(u64, ProcessKey)> = self
                .processes
                .iter()
                .filter(|(_, p)| prunable(p))
                .map(|(k, p)| (p.workload.total_energy(), *k))
                .collect();
            if ended.len() > max {
                ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                for (_, key) in ended.iter().skip(max) {
                    self.processes.remove(key);
                }
            }
        }
        if self.processes.len() != before {
            let processes = &self.processes;
            self.latest_by_pid
                .retain(|_, key| processes.contains_key(key));
        }
        self.containers.retain(|_, w| !expired(w.ended_at));
        self.pods.retain(|_, w| !expired(w.ended_at));
        self.vms.retain(|_, w| !expired(w.ended_at));
        // Churning containers must not grow memory within the retention time either.
        if let Some(max) = policy.max {
            cap_ended(&mut self.containers, max, tick);
            cap_ended(&mut self.pods, max, tick);
            cap_ended(&mut self.vms, max, tick);
        }
    }

    fn snapshot(&self, usage_ratio: f64, interval: Duration) -> PowerSnapshot {
        let zone_count = self.zones.len();
        let padded = |zones: &ZoneValues| {
            let mut z = zones.clone();
            z.resize(zone_count, ZoneValue::default());
            z
        };
        PowerSnapshot {
            tick: self.tick,
            interval,
            usage_ratio,
            zones: self
                .zones
                .iter()
                .map(|z| NodeZone {
                    zone: z.zone.clone(),
                    path: z.path.clone(),
                    total: z.total,
                    active: z.active,
                    idle: z.idle,
                    unattributed: z.unattributed,
                })
                .collect(),
            idle_policy: match &self.config.idle {
                IdlePolicy::Ratio => IdlePolicyState::Ratio,
                IdlePolicy::Baseline { configured, .. } => IdlePolicyState::Baseline {
                    configured: configured.is_some(),
                    watts: self
                        .zones
                        .iter()
                        .map(|z| configured.or(z.baseline))
                        .collect(),
                },
            },
            processes: self
                .processes
                .iter()
                .map(|(key, p)| ProcessPower {
                    key: *key,
                    info: p.info.clone(),
                    state: p.workload.state(),
                    cpu_time: p.workload.cpu_time,
                    zones: padded(&p.workload.zones),
                })
                .collect(),
            containers: self
                .containers
                .values()
                .map(|c| ContainerPower {
                    container: c.reference.clone(),
                    state: c.state(),
                    cpu_time: c.cpu_time,
                    zones: padded(&c.zones),
                })
                .collect(),
            pods: self
                .pods
                .values()
                .map(|p| PodPower {
                    pod: p.reference.clone(),
                    state: p.state(),
                    zones: padded(&p.zones),
                })
                .collect(),
            vms: self
                .vms
                .values()
                .map(|v| VmPower {
                    vm: v.reference.clone(),
                    state: v.state(),
                    zones: padded(&v.zones),
                })
                .collect(),
            features: None,
        }
    }
}

/// This tick's energy of one group, gathered under the address of the shared reference its
/// processes carry: the group's id is then hashed once per tick, not once per member.
struct GroupSum<R> {
    reference: Arc<R>,
    energy: smallvec::SmallVec<[MicroJoules; 4]>,
    cpu: Duration,
    all_ended: bool,
}

type SumsByRef<R> = FastMap<usize, GroupSum<R>>;

#[derive(Default)]
struct GroupSums {
    containers: SumsByRef<ContainerRef>,
    pods: SumsByRef<PodRef>,
    vms: SumsByRef<VmRef>,
}

fn gather<R>(
    sums: &mut SumsByRef<R>,
    reference: &Arc<R>,
    energy: &[MicroJoules],
    cpu: Duration,
    ended: bool,
) {
    let sum = sums
        .entry(Arc::as_ptr(reference) as usize)
        .or_insert_with(|| GroupSum {
            reference: reference.clone(),
            energy: smallvec::smallvec![MicroJoules::ZERO; energy.len()],
            cpu: Duration::ZERO,
            all_ended: true,
        });
    for (total, part) in sum.energy.iter_mut().zip(energy) {
        *total += *part;
    }
    sum.cpu += cpu;
    sum.all_ended &= ended;
}

/// Adds this tick's gathered sums to the groups' accumulators, keyed by id. Two references
/// with the same id (a classifier that re-created one) land in the same group.
fn apply<R>(
    groups: &mut FastMap<String, Workload<Arc<R>>>,
    sums: &mut SumsByRef<R>,
    id: impl Fn(&R) -> &String,
    (interval, tick): (Duration, u64),
) {
    for (_, sum) in sums.drain() {
        let w = group(groups, id(&sum.reference), &sum.reference);
        add_tick(w, &sum.energy, interval, tick, sum.cpu, sum.all_ended);
    }
}

/// Keeps at most `max` ended groups (the most energetic), never one active this tick.
fn cap_ended<R>(groups: &mut FastMap<String, Workload<R>>, max: usize, tick: u64) {
    let mut ended: Vec<(u64, &String)> = groups
        .iter()
        .filter(|(_, w)| w.ended_at.is_some() && w.seen_tick != tick)
        .map(|(id, w)| (w.total_energy(), id))
        .collect();
    if ended.len() <= max {
        return;
    }
    ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let drop: Vec<String> = ended
        .iter()
        .skip(max)
        .map(|(_, id)| (*id).clone())
        .collect();
    for id in drop {
        groups.remove(&id);
    }
}

/// Adds one tick's gathered energy to a group workload (container, pod, VM). A group is
/// running while any of its processes is.
fn add_tick<R>(
    w: &mut Workload<R>,
    energy: &[MicroJoules],
    interval: Duration,
    tick: u64,
    cpu_delta: Duration,
    process_ended: bool,
) {
    if w.seen_tick != tick {
        // First member seen this tick: restart the per-tick power sums.
        w.zones.resize(energy.len(), ZoneValue::default());
        w.zones.iter_mut().for_each(|z| z.watts = Watts(0.0));
        w.seen_tick = tick;
        w.ended_at = if process_ended { w.ended_at } else { None };
    } else if !process_ended {
        w.ended_at = None;
    }
    w.zones.resize(energy.len(), ZoneValue::default());
    for (value, part) in w.zones.iter_mut().zip(energy) {
        value.energy += *part;
        value.watts = Watts(value.watts.0 + part.over(interval).0);
    }
    w.cpu_time += cpu_delta;
}

fn end_if_unseen<R>(w: &mut Workload<R>, tick: u64, now: Duration) {
    if w.seen_tick != tick && w.ended_at.is_none() {
        w.ended_at = Some(now);
    }
    if w.seen_tick != tick {
        w.zones.iter_mut().for_each(|z| z.watts = Watts(0.0));
    }
}

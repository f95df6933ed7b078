//! `EbpfSource`: the `UsageSource` fed by the BPF maps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::Ebpf;
use kepler_core::{
    Classifier, Feature, ProcessInfo, ProcessKey, ProcessUsage, ReadError, TaskCounters,
    Unavailable, UsageSnapshot, UsageSource,
};
use kepler_sources::ProcfsReader;

use crate::abi::{kstat, names, CpuState, ExitRecord, TaskTotals};
use crate::cgroups::{cgroup2_mount, cgroup_v1_mount, CgroupResolver};
use crate::loader::{self, Probes};
use crate::{proc, EbpfSettings, EbpfStats};

/// Snapshots an exited process's totals are kept, to merge late pieces of the same group.
const ENDED_TTL: u32 = 3;
/// Each live entry that did not move since the previous snapshot is checked against /proc
/// about once every this many snapshots, to collect those whose process is gone.
const GC_EVERY: usize = 12;
/// At most this many such checks (one /proc read each) per snapshot: on a host with thousands
/// of idle processes the round takes longer instead of reading thousands of files at once.
const GC_BATCH: usize = 256;
/// Exited groups held while snapshots fail (one drain of a 4 MiB ring is at most ~30.8k):
/// beyond this, new ones are dropped and counted rather than held without bound.
const MAX_PENDING: usize = 1 << 16;

/// Exited groups by key: their totals (pieces merged) and what the exit records add.
type Exits = HashMap<ProcessKey, (TaskTotals, ExitInfo)>;

/// Usage from the BPF programs: every thread group's CPU time since load, exited ones once.
pub struct EbpfSource {
    ebpf: Ebpf,
    exits: RingBuf<MapData>,
    probes: Probes,
    _counters: Option<crate::perf::Counters>,
    /// The host's `/proc`: node CPU times, and process descriptions read as the procfs
    /// source reads them.
    procfs: ProcfsReader,
    classifier: Arc<dyn Classifier>,
    cgroups: CgroupResolver,
    /// The cpu controller's v1 hierarchy on hybrid hosts (`None` on cgroup2-only hosts).
    cpu_cgroups: CgroupResolver,
    known: HashMap<ProcessKey, Known>,
    ended: HashMap<ProcessKey, Ended>,
    /// Exit records drained but not reported yet: they stay here until a snapshot succeeds.
    pending: Exits,
    /// Exited groups dropped because `pending` was full (added to the kernel's `exits_lost`).
    pending_lost: u64,
    /// The last tgid checked by the round-robin collection of gone processes.
    gc_cursor: u32,
    stats: Arc<EbpfStats>,
    snapshots: u64,
}

/// The largest reading so far of a process's cumulative CPU time, which is what is reported.
/// Every reading is at most the true value at its instant (a running stretch can be missed, as
/// when the task leaves its CPU between the map read and the running-stretch read, but it is
/// never counted twice), so the largest is also the most exact one, and reporting it keeps
/// cumulative time from going back when a read misses a stretch that an earlier one saw.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct Reported(u64);

impl Reported {
    /// Takes a new reading and returns the value to report.
    fn update(&mut self, reading_ns: u64) -> u64 {
        self.0 = self.0.max(reading_ns);
        self.0
    }
}

/// A live process already described.
struct Known {
    info: Arc<ProcessInfo>,
    seen: u64,
    /// cpu_ns at the previous snapshot: a gone process's entry stops moving.
    last_cpu_ns: u64,
    reported: Reported,
}

/// What an exit record adds to the totals.
#[derive(Clone, Debug, Default)]
struct ExitInfo {
    comm: String,
    cpu_cgroup_id: u64,
}

/// An exited process reported recently.
struct Ended {
    totals: TaskTotals,
    info: Arc<ProcessInfo>,
    reported: Reported,
    ttl: u32,
}

/// Adds one piece of a group's totals to what `exits` holds for it (a group can be handed over
/// in pieces when its threads exit on several CPUs at once).
fn merge_exit(exits: &mut Exits, key: ProcessKey, totals: TaskTotals, info: ExitInfo) {
    match exits.get_mut(&key) {
        Some((t, e)) => {
            t.add(&totals);
            if e.comm.is_empty() {
                *e = info;
            }
        }
        None => {
            exits.insert(key, (totals, info));
        }
    }
}

/// Up to `n` of `ids`, in order after `cursor` and wrapping around, so that successive calls
/// cover every id in turn even as the set changes; `cursor` moves to the last one taken.
fn round_robin(mut ids: Vec<u32>, cursor: &mut u32, n: usize) -> Vec<u32> {
    ids.sort_unstable();
    let split = ids.partition_point(|&id| id <= *cursor);
    let (before, after) = ids.split_at(split);
    let picked: Vec<u32> = after.iter().chain(before).take(n).copied().collect();
    if let Some(&last) = picked.last() {
        *cursor = last;
    }
    picked
}

impl EbpfSource {
    /// Loads and attaches the programs. `procfs` is the host's `/proc` (process descriptions,
    /// `/proc/stat`); `classifier` decides each process's workload once.
    pub fn new(
        procfs: impl Into<PathBuf>,
        classifier: Arc<dyn Classifier>,
        settings: EbpfSettings,
    ) -> Result<Self, Unavailable> {
        let procfs = ProcfsReader::new(procfs)?;
        let loaded = loader::load(&settings)?;
        let mountinfo =
            std::fs::read_to_string(procfs.root().join("self/mountinfo")).unwrap_or_default();
        let cgroup_root = settings
            .cgroup2_root
            .clone()
            .or_else(|| cgroup2_mount(&mountinfo));
        let cpu_root = cgroup_v1_mount(&mountinfo, "cpu");
        if cgroup_root.is_none() {
            tracing::warn!("no cgroup2 mount found: exited processes keep no cgroup path");
        }
        Ok(EbpfSource {
            ebpf: loaded.ebpf,
            exits: loaded.exits,
            probes: loaded.probes,
            _counters: loaded._counters,
            procfs,
            classifier,
            cgroups: CgroupResolver::new(cgroup_root),
            cpu_cgroups: CgroupResolver::new(cpu_root),
            known: HashMap::new(),
            ended: HashMap::new(),
            pending: HashMap::new(),
            pending_lost: 0,
            gc_cursor: 0,
            stats: Arc::new(EbpfStats::default()),
            snapshots: 0,
        })
    }

    /// Which optional probes are on, and why the others are not.
    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// Self-metrics, updated at each snapshot; the handle stays valid after the source is
    /// boxed as a `dyn UsageSource`.
    pub fn stats(&self) -> Arc<EbpfStats> {
        self.stats.clone()
    }

    fn key(&self, tgid: u32, start_ns: u64) -> ProcessKey {
        ProcessKey {
            pid: tgid,
            start_time: self.procfs.floor_to_tick(Duration::from_nanos(start_ns)),
        }
    }

    fn counters(&self, t: &TaskTotals) -> Box<TaskCounters> {
        let page = self.probes.page_cache.is_active();
        let irq = self.probes.softirq.is_active();
        let hw = self.probes.hw_counters.is_active();
        let on = |flag: bool, v: u64| flag.then_some(v);
        Box::new(TaskCounters {
            cpu_cycles: on(hw, t.cycles),
            cpu_instructions: on(hw, t.instructions),
            cache_misses: on(hw, t.cache_misses),
            page_cache_hits: on(page, t.page_cache_hits),
            irq_net_rx: on(irq, t.irq_net_rx),
            irq_net_tx: on(irq, t.irq_net_tx),
            irq_block: on(irq, t.irq_block),
            context_switches: Some(t.switches),
        })
    }

    /// Describes a process from /proc when it is still there and is the same process (same
    /// start time), else from what BPF knows: the comm it recorded and the cgroup by id, with
    /// the procfs source's precedence (a non-root cpu-controller v1 path, else the unified one).
    fn describe(
        &mut self,
        key: ProcessKey,
        t: &TaskTotals,
        exit: Option<&ExitInfo>,
    ) -> ProcessInfo {
        let from_proc = self.procfs.describe(key.pid).filter(|d| d.key == key);
        let mut info = match from_proc {
            Some(d) => d.info,
            None => {
                let cpu_path = exit
                    .filter(|e| e.cpu_cgroup_id != 0)
                    .and_then(|e| self.cpu_cgroups.resolve(e.cpu_cgroup_id))
                    .filter(|p| &**p != "/");
                let path = cpu_path.or_else(|| self.cgroups.resolve(t.cgroup_id));
                ProcessInfo {
                    comm: exit.map(|e| e.comm.clone()).unwrap_or_default(),
                    cgroup_path: path.map(|p| p.to_string()).unwrap_or_default(),
                    kernel_thread: t.flags & TaskTotals::KERNEL_THREAD != 0,
                    ..Default::default()
                }
            }
        };
        info.cgroup_id = (t.cgroup_id != 0).then_some(t.cgroup_id);
        info.workload = self.classifier.classify(&info);
        info
    }

    /// Drains the exits ring into `pending`, merging pieces of the same group.
    fn drain_exits(&mut self) {
        let mut malformed = 0u64;
        let mut records = Vec::new();
        while let Some(item) = self.exits.next() {
            match ExitRecord::parse(&item) {
                Some(r) => records.push(r),
                None => malformed += 1,
            }
        }
        let mut lost = 0u64;
        for r in records {
            let key = self.key(r.tgid, r.totals.start_ns);
            if self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&key) {
                lost += 1;
                continue;
            }
            let info = ExitInfo {
                comm: r.comm(),
                cpu_cgroup_id: r.cpu_cgroup_id,
            };
            merge_exit(&mut self.pending, key, r.totals, info);
        }
        if malformed > 0 {
            tracing::warn!(malformed, "short records in the exits ring");
            self.stats
                .malformed_records
                .fetch_add(malformed, Ordering::Relaxed);
        }
        if lost > 0 {
            tracing::warn!(lost, "exited processes dropped: snapshots keep failing");
            self.pending_lost = self.pending_lost.saturating_add(lost);
            self.stats.exits_lost.fetch_add(lost, Ordering::Relaxed);
        }
    }

    /// The process map, by tgid.
    fn read_live(&self) -> Result<HashMap<u32, TaskTotals>, ReadError> {
        let map = self
            .ebpf
            .map(names::TASKS)
            .ok_or_else(|| ReadError::Other("eBPF: tasks map missing".into()))?;
        let tasks: BpfHashMap<&MapData, u32, TaskTotals> = BpfHashMap::try_from(map)
            .map_err(|e| ReadError::Other(format!("eBPF: tasks map: {e}")))?;
        let mut out = HashMap::new();
        let mut errors = 0u64;
        let mut first_error = None;
        // aya skips entries deleted between listing and reading them (they are in the exits
        // ring). When the entry the listing stands on is deleted, the kernel starts the listing
        // over, so an entry can come twice: keyed by tgid, the later (larger) reading wins.
        for item in tasks.iter() {
            match item {
                Ok((tgid, t)) => {
                    out.insert(tgid, t);
                }
                // A failed lookup skips its entry, a failed listing ends the iteration; what was
                // not read is reported, cumulative, by the next snapshot.
                Err(e) => {
                    errors += 1;
                    first_error.get_or_insert(e);
                }
            }
        }
        if let Some(error) = first_error {
            tracing::warn!(%error, errors, "reading the eBPF process map");
            self.stats
                .map_read_errors
                .fetch_add(errors, Ordering::Relaxed);
        }
        Ok(out)
    }

    /// The stretch each running task has been on its CPU so far, by (tgid, start_ns). Read
    /// after the task map: a task that switched out in between then has its stretch in
    /// neither read (reported next time) rather than in both.
    fn read_running(&self) -> HashMap<(u32, u64), u64> {
        let mut out = HashMap::new();
        let Some(map) = self.ebpf.map(names::CPU_STATE) else {
            return out;
        };
        let Ok(arr) = PerCpuArray::<&MapData, CpuState>::try_from(map) else {
            return out;
        };
        // The clock is read first: a stretch measured up to an instant before the read is never
        // more than the task has run (a later instant would count time after it left the CPU).
        let now = proc::monotonic_ns();
        let Ok(values) = arr.get(&0, 0) else {
            return out;
        };
        for cs in values.iter() {
            if cs.cur_tgid != 0 && cs.last_ns != 0 {
                *out.entry((cs.cur_tgid, cs.cur_start_ns)).or_insert(0) +=
                    now.saturating_sub(cs.last_ns);
            }
        }
        out
    }

    fn read_kstats(&self) {
        let Some(map) = self.ebpf.map(names::KSTATS) else {
            return;
        };
        let Ok(arr) = Array::<&MapData, u64>::try_from(map) else {
            return;
        };
        let get = |i: u32| arr.get(&i, 0).unwrap_or(0);
        self.stats
            .tasks_full
            .store(get(kstat::TASKS_FULL), Ordering::Relaxed);
        self.stats.exits_lost.store(
            get(kstat::EXITS_LOST).saturating_add(self.pending_lost),
            Ordering::Relaxed,
        );
        self.stats
            .tgid_reused
            .store(get(kstat::TGID_REUSED), Ordering::Relaxed);
    }

    /// Removes live entries whose process is gone without an exit record (a race the kernel
    /// side cannot close) and reports them as exited, so the map cannot fill with them. Only
    /// entries that did not move since the previous snapshot are suspects, and only a bounded
    /// batch of them is checked against /proc per snapshot.
    fn collect_gone(&mut self, live: &HashMap<u32, TaskTotals>) -> Vec<(ProcessKey, TaskTotals)> {
        let idle: Vec<u32> = live
            .iter()
            .filter(|(tgid, t)| {
                self.known
                    .get(&self.key(**tgid, t.start_ns))
                    .is_some_and(|k| k.last_cpu_ns == t.cpu_ns)
            })
            .map(|(tgid, _)| *tgid)
            .collect();
        let budget = idle.len().div_ceil(GC_EVERY).min(GC_BATCH);
        let suspects: Vec<(u32, ProcessKey)> = round_robin(idle, &mut self.gc_cursor, budget)
            .into_iter()
            .filter_map(|tgid| {
                let key = self.key(tgid, live.get(&tgid)?.start_ns);
                (self.procfs.process_key(tgid) != Some(key)).then_some((tgid, key))
            })
            .collect();
        if suspects.is_empty() {
            return Vec::new();
        }
        let Some(map) = self.ebpf.map_mut(names::TASKS) else {
            return Vec::new();
        };
        let Ok(mut tasks) = BpfHashMap::<&mut MapData, u32, TaskTotals>::try_from(map) else {
            return Vec::new();
        };
        let mut gone = Vec::new();
        for (tgid, key) in suspects {
            let Some(t) = live.get(&tgid) else {
                continue;
            };
            // Re-read just before removing. No entry: the kernel handed it to the exits ring
            // since the map was read, and the ring reports it. Another start time: the tgid now
            // belongs to a new process, which is alive.
            let Ok(cur) = tasks.get(&tgid, 0) else {
                continue;
            };
            if cur.start_ns != t.start_ns {
                continue;
            }
            // The delete decides who owns the entry: if the kernel moved it to the ring since
            // the re-read, this delete fails and the ring record reports the process; reporting
            // it here as well would count its whole lifetime twice. (The window left, a move
            // and a reuse of the same tgid between these two calls, takes a pid wrap-around
            // within microseconds.)
            if tasks.remove(&tgid).is_ok() {
                gone.push((key, cur));
            }
        }
        self.stats
            .gc_removed
            .fetch_add(gone.len() as u64, Ordering::Relaxed);
        gone
    }
}

impl UsageSource for EbpfSource {
    fn name(&self) -> &str {
        "ebpf"
    }

    /// The programs count from when they were loaded, not from each task's start.
    fn counts_from_start(&self) -> bool {
        true
    }

    fn features(&self) -> Vec<Feature> {
        let mut features = vec![Feature::BpfCpuTimeMs];
        if self.probes.page_cache.is_active() {
            features.push(Feature::BpfPageCacheHit);
        }
        if self.probes.softirq.is_active() {
            features.extend([
                Feature::BpfBlockIrq,
                Feature::BpfNetRxIrq,
                Feature::BpfNetTxIrq,
            ]);
        }
        if self.probes.hw_counters.is_active() {
            features.extend([
                Feature::CpuCycles,
                Feature::CpuInstructions,
                Feature::CacheMiss,
            ]);
        }
        features
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        self.snapshots += 1;
        let n = self.snapshots;
        self.cgroups.begin_snapshot();
        self.cpu_cgroups.begin_snapshot();
        let uptime = proc::uptime(&self.procfs)?;
        let node = self.procfs.read_node_cpu_times()?;
        // Exits first: a group that ends between the two reads is then missed by both this
        // time and reported next time, rather than reported twice. Drained records wait in
        // `pending`, so that a failed map read does not lose them.
        self.drain_exits();
        let live = self.read_live()?;
        let mut exited = std::mem::take(&mut self.pending);
        for (key, t) in self.collect_gone(&live) {
            // Added, not replaced: an earlier piece of the same group may be in the ring.
            merge_exit(&mut exited, key, t, ExitInfo::default());
        }
        let mut running = self.read_running();
        self.read_kstats();

        // A running task without an entry yet (on its CPU since before the first switch the
        // program saw) is reported with its running stretch alone.
        let mut tasks: Vec<(u32, TaskTotals, u64)> = live
            .iter()
            .map(|(tgid, t)| (*tgid, *t, running.remove(&(*tgid, t.start_ns)).unwrap_or(0)))
            .collect();
        tasks.extend(running.into_iter().map(|((tgid, start_ns), ns)| {
            let t = TaskTotals {
                start_ns,
                ..Default::default()
            };
            (tgid, t, ns)
        }));

        let mut processes = Vec::with_capacity(tasks.len() + exited.len());
        for (tgid, t, running_ns) in &tasks {
            let key = self.key(*tgid, t.start_ns);
            // A piece of a group that already ended (a thread still leaving): its time comes
            // in a later exit record and is reported with the group's final total.
            if exited.contains_key(&key) || self.ended.contains_key(&key) {
                continue;
            }
            let stale = match self.known.get(&key) {
                None => true,
                // Re-read when the process moved to another cgroup (e.g. a runtime placing a
                // container's first process after forking it).
                Some(k) => k.info.cgroup_id != Some(t.cgroup_id) && t.cgroup_id != 0,
            };
            if stale {
                let info = Arc::new(self.describe(key, t, None));
                match self.known.get_mut(&key) {
                    // A new description keeps what was reported.
                    Some(k) => k.info = info,
                    None => {
                        let k = Known {
                            info,
                            seen: n,
                            last_cpu_ns: t.cpu_ns,
                            reported: Reported::default(),
                        };
                        self.known.insert(key, k);
                    }
                }
            }
            let Some(k) = self.known.get_mut(&key) else {
                continue;
            };
            k.seen = n;
            k.last_cpu_ns = t.cpu_ns;
            let cpu_ns = k.reported.update(t.cpu_ns.saturating_add(*running_ns));
            let info = k.info.clone();
            processes.push(ProcessUsage {
                key,
                cpu_time: Duration::from_nanos(cpu_ns),
                info,
                exited: false,
                counters: Some(self.counters(t)),
            });
        }

        for (key, (piece, exit)) in exited {
            let (totals, info, mut reported) = match self.ended.remove(&key) {
                Some(mut e) => {
                    e.totals.add(&piece);
                    (e.totals, e.info, e.reported)
                }
                None => {
                    let known = self.known.remove(&key);
                    let reported = known.as_ref().map(|k| k.reported).unwrap_or_default();
                    let info = match known {
                        Some(k) if !k.info.comm.is_empty() || exit.comm.is_empty() => k.info,
                        _ => Arc::new(self.describe(key, &piece, Some(&exit))),
                    };
                    (piece, info, reported)
                }
            };
            let cpu_ns = reported.update(totals.cpu_ns);
            processes.push(ProcessUsage {
                key,
                cpu_time: Duration::from_nanos(cpu_ns),
                info: info.clone(),
                exited: true,
                counters: Some(self.counters(&totals)),
            });
            self.ended.insert(
                key,
                Ended {
                    totals,
                    info,
                    reported,
                    ttl: ENDED_TTL + 1,
                },
            );
        }
        self.ended.retain(|_, e| {
            e.ttl -= 1;
            e.ttl > 0
        });
        // Processes that left the map without a record we saw (map full, GC elsewhere).
        self.known
            .retain(|_, k| n.saturating_sub(k.seen) < ENDED_TTL as u64);
        self.stats
            .tracked_processes
            .store(live.len() as u64, Ordering::Relaxed);
        Ok(UsageSnapshot {
            uptime,
            node,
            processes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reported_cpu_time_never_decreases() {
        // Readings of one process, each map value plus the running stretch seen by the second
        // read: the third leaves its CPU between the two reads, so its reading misses the
        // stretch that the second one counted while it ran.
        let readings = [100, 250, 200, 240, 300];
        let mut r = Reported::default();
        let reported: Vec<u64> = readings.iter().map(|&ns| r.update(ns)).collect();
        assert_eq!(reported, [100, 250, 250, 250, 300]);
        // The exact total (an exit record) is reported as it is once past the readings.
        assert_eq!(r.update(310), 310);
        assert!(reported.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn round_robin_covers_every_id_in_turn() {
        let ids: Vec<u32> = (1..=10).collect();
        let mut cursor = 0;
        let mut rounds = Vec::new();
        for _ in 0..4 {
            rounds.push(round_robin(ids.clone(), &mut cursor, 3));
        }
        assert_eq!(
            rounds,
            [vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9], vec![10, 1, 2]]
        );
        // The set changes between rounds: the walk carries on after the last id checked.
        let mut cursor = 5;
        assert_eq!(round_robin(vec![9, 2, 5, 7], &mut cursor, 2), [7, 9]);
        assert_eq!(round_robin(vec![9, 2, 5, 7], &mut cursor, 2), [2, 5]);
        assert_eq!(cursor, 5);
        assert!(round_robin(Vec::new(), &mut cursor, 3).is_empty());
        assert!(round_robin(vec![1, 2], &mut cursor, 0).is_empty());
        assert_eq!(cursor, 5);
    }

    /// Sets or deletes the process map's entry for `tgid`, as the kernel would.
    fn set_entry(src: &mut EbpfSource, tgid: u32, entry: Option<TaskTotals>) {
        let map = src.ebpf.map_mut(names::TASKS).unwrap();
        let mut tasks = BpfHashMap::<&mut MapData, u32, TaskTotals>::try_from(map).unwrap();
        match entry {
            Some(t) => tasks.insert(tgid, t, 0).unwrap(),
            None => tasks.remove(&tgid).unwrap(),
        }
    }

    #[test]
    fn gone_entries_are_reported_only_when_the_delete_wins() {
        let test = "gone_entries_are_reported_only_when_the_delete_wins";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let settings = EbpfSettings {
            page_cache: false,
            softirq: false,
            hw_counters: false,
            ..Default::default()
        };
        let mut src =
            EbpfSource::new("/proc", Arc::new(kepler_core::NoWorkloads), settings).unwrap();
        // No process has this tgid (pid_max is at most 2^22), so /proc says it is gone and the
        // kernel never touches the entry.
        const TGID: u32 = u32::MAX - 1;
        let entry = TaskTotals {
            start_ns: 1_000_000_000,
            cpu_ns: 5_000_000,
            switches: 3,
            ..Default::default()
        };
        let key = src.key(TGID, entry.start_ns);
        let reports = |snap: &UsageSnapshot| -> Vec<(Duration, bool)> {
            let mine = snap.processes.iter().filter(|p| p.key == key);
            mine.map(|p| (p.cpu_time, p.exited)).collect()
        };
        set_entry(&mut src, TGID, Some(entry));
        // First sight: reported live, and known from now on.
        let snap = src.snapshot().unwrap();
        assert_eq!(reports(&snap), [(Duration::from_millis(5), false)]);

        // The kernel hands the entry to the exits ring after the map was read: the ring
        // reports it, so collection must not.
        let live = src.read_live().unwrap();
        set_entry(&mut src, TGID, None);
        src.gc_cursor = TGID - 1;
        assert!(src.collect_gone(&live).is_empty());

        // The tgid now belongs to a new process (another start time): not removed.
        set_entry(&mut src, TGID, Some(entry));
        let live = src.read_live().unwrap();
        let reused = TaskTotals {
            start_ns: entry.start_ns + 1_000_000_000,
            ..entry
        };
        set_entry(&mut src, TGID, Some(reused));
        src.gc_cursor = TGID - 1;
        assert!(src.collect_gone(&live).is_empty());
        assert_eq!(src.read_live().unwrap().get(&TGID), Some(&reused));
        assert_eq!(src.stats.gc_removed.load(Ordering::Relaxed), 0);

        // Gone, and the delete wins: reported once, as exited, with its totals.
        set_entry(&mut src, TGID, Some(entry));
        src.gc_cursor = TGID - 1;
        let snap = src.snapshot().unwrap();
        assert_eq!(reports(&snap), [(Duration::from_millis(5), true)]);
        assert!(!src.read_live().unwrap().contains_key(&TGID));
        assert_eq!(src.stats.gc_removed.load(Ordering::Relaxed), 1);
        let snap = src.snapshot().unwrap();
        assert!(reports(&snap).is_empty());
    }

    #[test]
    fn drained_exits_survive_a_failed_map_read() {
        let test = "drained_exits_survive_a_failed_map_read";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let settings = EbpfSettings {
            page_cache: false,
            softirq: false,
            hw_counters: false,
            ..Default::default()
        };
        let mut src =
            EbpfSource::new("/proc", Arc::new(kepler_core::NoWorkloads), settings).unwrap();
        src.snapshot().unwrap();
        let mut child = std::process::Command::new("true").spawn().unwrap();
        let pid = child.id();
        child.wait().unwrap();
        // The record is written at the child's last switch, which can follow the wake-up.
        std::thread::sleep(Duration::from_millis(100));
        // Without its process map the source cannot read live entries: the snapshot fails
        // after draining the ring.
        let _tasks = src.ebpf.take_map(names::TASKS).unwrap();
        assert!(src.snapshot().is_err());
        let held: Vec<_> = src.pending.keys().filter(|k| k.pid == pid).collect();
        assert_eq!(
            held.len(),
            1,
            "the exited child is held for the next snapshot"
        );
    }

    #[test]
    fn exit_pieces_add_up() {
        let key = ProcessKey {
            pid: 7,
            start_time: Duration::from_secs(1),
        };
        let piece = |cpu_ns| TaskTotals {
            cpu_ns,
            switches: 1,
            ..Default::default()
        };
        let named = ExitInfo {
            comm: "worker".into(),
            cpu_cgroup_id: 3,
        };
        let mut exits = Exits::new();
        merge_exit(&mut exits, key, piece(10), ExitInfo::default());
        merge_exit(&mut exits, key, piece(5), named.clone());
        merge_exit(&mut exits, key, piece(1), ExitInfo::default());
        let (t, info) = &exits[&key];
        assert_eq!((t.cpu_ns, t.switches), (16, 3));
        assert_eq!((info.comm.as_str(), info.cpu_cgroup_id), ("worker", 3));
    }
}

//! `EbpfSource`: the `UsageSource` fed by the BPF maps.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use aya::maps::{Array, HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::Ebpf;
use kepler_core::{
    Classifier, ProcessInfo, ProcessKey, ProcessUsage, ReadError, TaskCounters, Unavailable,
    UsageSnapshot, UsageSource,
};
use kepler_sources::ProcfsReader;

use crate::abi::{kstat, names, CpuState, ExitRecord, TaskTotals};
use crate::cgroups::{cgroup2_mount, cgroup_v1_mount, CgroupResolver};
use crate::loader::{self, Probes};
use crate::{proc, EbpfSettings, EbpfStats};

/// Snapshots an exited process's totals are kept, to merge late pieces of the same group.
const ENDED_TTL: u32 = 3;
/// Every this many snapshots, live entries of processes that are gone are collected.
const GC_EVERY: u64 = 12;

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
    stats: Arc<EbpfStats>,
    snapshots: u64,
}

/// A live process already described.
struct Known {
    info: Arc<ProcessInfo>,
    seen: u64,
    /// cpu_ns at the previous snapshot: a gone process's entry stops moving.
    last_cpu_ns: u64,
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
    ttl: u32,
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

    /// Drains the exits ring, merging pieces of the same group.
    fn drain_exits(&mut self) -> HashMap<ProcessKey, (TaskTotals, ExitInfo)> {
        let mut out: HashMap<ProcessKey, (TaskTotals, ExitInfo)> = HashMap::new();
        let mut malformed = 0u64;
        let mut records = Vec::new();
        while let Some(item) = self.exits.next() {
            match ExitRecord::parse(&item) {
                Some(r) => records.push(r),
                None => malformed += 1,
            }
        }
        for r in records {
            let key = self.key(r.tgid, r.totals.start_ns);
            let info = ExitInfo {
                comm: r.comm(),
                cpu_cgroup_id: r.cpu_cgroup_id,
            };
            match out.get_mut(&key) {
                Some((t, e)) => {
                    t.add(&r.totals);
                    if e.comm.is_empty() {
                        *e = info;
                    }
                }
                None => {
                    out.insert(key, (r.totals, info));
                }
            }
        }
        if malformed > 0 {
            tracing::warn!(malformed, "short records in the exits ring");
            self.stats
                .malformed_records
                .fetch_add(malformed, Ordering::Relaxed);
        }
        out
    }

    fn read_live(&self) -> Result<Vec<(u32, TaskTotals)>, ReadError> {
        let map = self
            .ebpf
            .map(names::TASKS)
            .ok_or_else(|| ReadError::Other("eBPF: tasks map missing".into()))?;
        let tasks: BpfHashMap<&MapData, u32, TaskTotals> = BpfHashMap::try_from(map)
            .map_err(|e| ReadError::Other(format!("eBPF: tasks map: {e}")))?;
        let mut out = Vec::new();
        let mut errors = 0u64;
        for item in tasks.iter() {
            match item {
                Ok(kv) => out.push(kv),
                // An entry deleted between listing and reading it: it is in the exits ring.
                Err(_) => errors += 1,
            }
        }
        if errors > 0 {
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
        let Ok(values) = arr.get(&0, 0) else {
            return out;
        };
        let now = proc::monotonic_ns();
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
        self.stats
            .exits_lost
            .store(get(kstat::EXITS_LOST), Ordering::Relaxed);
        self.stats
            .tgid_reused
            .store(get(kstat::TGID_REUSED), Ordering::Relaxed);
    }

    /// Removes live entries whose process is gone without an exit record (a race the kernel
    /// side cannot close) and reports them as exited, so the map cannot fill with them.
    fn collect_gone(&mut self, live: &[(u32, TaskTotals)]) -> Vec<(ProcessKey, TaskTotals)> {
        let mut gone = Vec::new();
        for (tgid, t) in live {
            let key = self.key(*tgid, t.start_ns);
            let still_moving = self
                .known
                .get(&key)
                .is_none_or(|k| k.last_cpu_ns != t.cpu_ns);
            if still_moving {
                continue;
            }
            let alive = self.procfs.process_key(*tgid) == Some(key);
            if !alive {
                gone.push((key, *t));
            }
        }
        if let Some(map) = self.ebpf.map_mut(names::TASKS) {
            if let Ok(mut tasks) = BpfHashMap::<&mut MapData, u32, TaskTotals>::try_from(map) {
                for (key, _) in &gone {
                    let _ = tasks.remove(&key.pid);
                }
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

    fn features(&self) -> Vec<String> {
        use kepler_core::features as f;
        let mut names = vec![f::BPF_CPU_TIME_MS];
        if self.probes.page_cache.is_active() {
            names.push("bpf_page_cache_hit");
        }
        if self.probes.softirq.is_active() {
            names.extend(["bpf_block_irq", "bpf_net_rx_irq", "bpf_net_tx_irq"]);
        }
        if self.probes.hw_counters.is_active() {
            names.extend(["cpu_cycles", "cpu_instructions", "cache_miss"]);
        }
        names.into_iter().map(String::from).collect()
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        self.snapshots += 1;
        let n = self.snapshots;
        self.cgroups.begin_snapshot();
        self.cpu_cgroups.begin_snapshot();
        let uptime = proc::uptime(&self.procfs)?;
        let node = self.procfs.read_node_cpu_times()?;
        // Exits first: a group that ends between the two reads is then missed by both this
        // time and reported next time, rather than reported twice.
        let mut exited = self.drain_exits();
        let live = self.read_live()?;
        if n.is_multiple_of(GC_EVERY) {
            for (key, t) in self.collect_gone(&live) {
                exited.entry(key).or_insert((t, ExitInfo::default()));
            }
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
                self.known.insert(
                    key,
                    Known {
                        info,
                        seen: n,
                        last_cpu_ns: t.cpu_ns,
                    },
                );
            }
            let Some(k) = self.known.get_mut(&key) else {
                continue;
            };
            k.seen = n;
            k.last_cpu_ns = t.cpu_ns;
            let info = k.info.clone();
            processes.push(ProcessUsage {
                key,
                cpu_time: Duration::from_nanos(t.cpu_ns.saturating_add(*running_ns)),
                info,
                exited: false,
                counters: Some(self.counters(t)),
            });
        }

        for (key, (piece, exit)) in exited {
            let (totals, info) = match self.ended.remove(&key) {
                Some(mut e) => {
                    e.totals.add(&piece);
                    (e.totals, e.info)
                }
                None => {
                    let info = match self.known.remove(&key) {
                        Some(k) if !k.info.comm.is_empty() || exit.comm.is_empty() => k.info,
                        _ => Arc::new(self.describe(key, &piece, Some(&exit))),
                    };
                    (piece, info)
                }
            };
            processes.push(ProcessUsage {
                key,
                cpu_time: Duration::from_nanos(totals.cpu_ns),
                info: info.clone(),
                exited: true,
                counters: Some(self.counters(&totals)),
            });
            self.ended.insert(
                key,
                Ended {
                    totals,
                    info,
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
        self.stats.snapshots.fetch_add(1, Ordering::Relaxed);
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

//! `EbpfSource`: the `UsageSource` fed by the BPF maps. This side only reads (maps, the exit
//! ring, /proc) and acts (deletes, descriptions); what the readings mean is decided by the
//! pure [`Reconciler`].

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use aya::maps::{Array, HashMap as BpfHashMap, Map, MapData, PerCpuArray, RingBuf};
use kepler_core::{
    Classifier, Feature, ProcessInfo, ProcessKey, ReadError, Unavailable, UsageSnapshot,
    UsageSource,
};
use kepler_sources::cgroups::{Counting, UsageCounters};
use kepler_sources::ProcfsReader;

use crate::abi::{kstat, names, CpuState, ExitRecord, TaskTotals};
use crate::cgroups::{cgroup2_mount, cgroup_v1_mount, CgroupResolver};
use crate::exits::ExitPolicy;
use crate::loader;
use crate::map_batch::{BatchError, BatchMap};
use crate::map_read::{LoadedTasks, TaskReader};
use crate::mapped::{map_array, Mapping};
use crate::probes::{OptionalProbe, ProbeState, Probes};
use crate::reconcile::{ExitInfo, FastMap, Host, Keys, Measured, Observed, Reconciler, Sighting};
use crate::{proc, unseen, EbpfSettings, EbpfStats};

mod drain;
mod exits;
mod iterator;
mod pass_groups;

/// Usage from the BPF programs: every thread group's CPU time (since load with `sched_switch`
/// accounting, since its start with the task iterator), exited ones once.
pub struct EbpfSource {
    ebpf: loader::Attached,
    exits: RingBuf<MapData>,
    probes: Probes,
    /// Hardware counters opened in this process, closed when detached.
    counters: Option<crate::perf::Counters>,
    /// The host's `/proc`: node CPU times, and process descriptions read as the procfs
    /// source reads them.
    procfs: ProcfsReader,
    classifier: Arc<dyn Classifier>,
    cgroups: CgroupResolver,
    /// The cpu controller's v1 hierarchy on hybrid hosts (`None` on cgroup2-only hosts).
    cpu_cgroups: CgroupResolver,
    /// The host mounts a v1 `cpu` or `cpuacct` hierarchy, where /proc shows a process in its
    /// exit in the root (see [`crate::reconcile::Sighting::Ending`]).
    v1_hierarchies: bool,
    reconciler: Reconciler,
    /// This snapshot's map readings, kept allocated from one snapshot to the next.
    observed: Observed,
    /// This snapshot's descriptions of gone processes (see [`Gone`]).
    gone_descriptions: FastMap<Gone, Arc<ProcessInfo>>,
    reader: TaskReader,
    /// The process map's layout, once the kernel confirmed it (see [`crate::map_batch::Checked`]).
    tasks_layout: Option<crate::map_batch::Checked>,
    stats: Arc<EbpfStats>,
    accounting: Accounting,
    /// Whether a snapshot was taken: the accounting can change only before the first.
    snapshot_taken: bool,
    /// Processes the task iterator does not visit (see [`crate::unseen`]).
    unseen: Vec<unseen::Unseen>,
    /// Iterator accounting: the passes' mapped output, when the kernel lets it be mapped.
    pass_reads: Option<iterator::PassReads>,
    /// The `kstats` array, mapped: read every snapshot without a syscall. `None` when it
    /// cannot be (each count is then looked up).
    kstats: Option<Mapping<u64>>,
    /// The `slots` array, mapped: per-switch accounting's groups read as their entry plus
    /// their slot. A source that cannot map it is not made: it would miss what switches
    /// charged to slots.
    slots: crate::slots::PagedSlots,
    /// The tgids whose entries the snapshot under way deleted (see `Io::deleted`); the vector
    /// is kept between snapshots for its room.
    deleted: Vec<u32>,
    /// Snapshot interval, and the node's fork and switch counts and when they were read, at
    /// load: what the choice of accounting weighs.
    interval: Duration,
    loaded_counts: Option<((u64, u64), Instant)>,
    /// The exits each interval brought, and how often the ring is drained between snapshots.
    drains: drain::Drains,
    /// With the task iterator, whether ended processes come exact from `kepler_exit` or are
    /// counted through the cgroups (see [`crate::exits`]), and what that needs: the cgroups'
    /// usage counters, the groups of the last whole pass and the cgroups that count them (their entries are
    /// deleted when they go), the node's counts at the last snapshot, and whether a turn to
    /// exact exits completes at this snapshot.
    exit_policy: ExitPolicy,
    cgroup_counters: Option<UsageCounters>,
    pass_groups: pass_groups::PassGroups,
    last_counts: Option<((u64, u64), Instant)>,
    turning_exact: bool,
    /// Until when counted exits are not chosen by `auto`: a process was found whose
    /// workload's cgroup has no counter here (see `kepler_sources::cgroups::Uncounted`).
    uncounted_until: Option<Instant>,
}

/// How CPU time gets into the process map.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Accounting {
    /// `sched_switch` charges each stretch on a CPU to the task leaving it: the cost follows
    /// the switch rate. Needed while hardware counters, softirqs or page-cache hits are
    /// counted per task.
    Switch,
    /// The task iterator reads the scheduler's own runtime of every thread once per snapshot:
    /// the cost follows the number of threads, and a switch costs nothing.
    Iterator,
}

/// Which counters the attached probes keep current.
fn measured(probes: &Probes) -> Measured {
    Measured {
        page_cache: probes.page_cache.is_active(),
        softirq: probes.softirq.is_active(),
        hw_counters: probes.hw_counters.is_active(),
    }
}

impl Keys for ProcfsReader {
    fn key(&self, tgid: u32, start_ns: u64) -> ProcessKey {
        ProcessKey {
            pid: tgid,
            start_time: self.floor_to_tick(Duration::from_nanos(start_ns)),
        }
    }
}

/// Everything a gone process's description is made of: the comm its exit record kept (as
/// the kernel's 16 bytes), its cgroup ids and whether it was a kernel thread. Processes gone
/// alike share one description within a snapshot: under churn thousands a snapshot differ
/// only by pid, and one description each was most of the agent's memory at 1,000 exits a
/// second (they live until the attribution forgets the process).
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
struct Gone {
    comm: [u8; 16],
    cpu_cgroup_id: u64,
    cgroup_id: u64,
    kernel_thread: bool,
}

impl Gone {
    fn new(t: &TaskTotals, exit: Option<&ExitInfo>) -> Gone {
        Gone {
            comm: exit.map_or([0; 16], |e| e.comm),
            cpu_cgroup_id: exit.map_or(0, |e| e.cpu_cgroup_id),
            cgroup_id: t.cgroup_id,
            kernel_thread: t.flags & TaskTotals::KERNEL_THREAD != 0,
        }
    }
}

/// Deletes `tgid`'s entry from the process map; true when this delete removed it.
fn delete_entry(map: &mut Map, tgid: u32) -> bool {
    BpfHashMap::<_, u32, TaskTotals>::try_from(map).is_ok_and(|mut t| t.remove(&tgid).is_ok())
}

/// Deletes the entries of `tgids` from the process map and pushes those this call removed onto
/// `removed` (the others were gone already): in batches where the kernel allows it.
fn delete_entries(map: &mut Map, tgids: &[u32], removed: &mut Vec<u32>) {
    let mut rest = tgids;
    if let Map::HashMap(data) = &*map {
        if let Ok(batch) = BatchMap::<u32, TaskTotals>::new(data) {
            while !rest.is_empty() {
                let (done, why) = batch.delete(rest);
                removed.extend(rest.iter().take(done));
                rest = rest.get(done..).unwrap_or_default();
                match why {
                    None => return,
                    // Handed to the exits ring since the map was read: not ours.
                    Some(BatchError::NotFound) => rest = rest.get(1..).unwrap_or_default(),
                    Some(e) => {
                        tracing::debug!(error = %e, "deleting entries one by one");
                        break;
                    }
                }
            }
        }
    }
    removed.extend(rest.iter().copied().filter(|&tgid| delete_entry(map, tgid)));
}

/// The host as the reconciliation sees it during one snapshot: /proc, the cgroup trees, the
/// classifier and the process map, borrowed from the source.
struct Io<'a> {
    procfs: &'a mut ProcfsReader,
    classifier: &'a dyn Classifier,
    cgroups: &'a mut CgroupResolver,
    cpu_cgroups: &'a mut CgroupResolver,
    /// `None` if the map is missing: then nothing is collected.
    tasks: Option<&'a mut Map>,
    /// With per-switch accounting, the slots an entry read again is added its slot from.
    slots: Option<&'a crate::slots::PagedSlots>,
    /// The tgids whose entries this snapshot deleted: their slots are freed after it (see
    /// `slots`).
    deleted: &'a mut Vec<u32>,
    gone_descriptions: &'a mut FastMap<Gone, Arc<ProcessInfo>>,
    /// The host mounts a v1 `cpu` or `cpuacct` hierarchy (see [`Sighting::Ending`]).
    v1_hierarchies: bool,
}

impl Keys for Io<'_> {
    fn key(&self, tgid: u32, start_ns: u64) -> ProcessKey {
        self.procfs.key(tgid, start_ns)
    }
}

impl Io<'_> {
    /// `info` with its cgroup id set from `t` and its workload classified.
    fn classified(&self, key: ProcessKey, t: &TaskTotals, mut info: ProcessInfo) -> ProcessInfo {
        info.cgroup_id = (t.cgroup_id != 0).then_some(t.cgroup_id);
        info.workload = self.classifier.classify_process(key.pid, &info);
        info
    }
}

impl Host for Io<'_> {
    fn is_alive(&mut self, key: ProcessKey) -> bool {
        self.procfs.process_key(key.pid) == Some(key)
    }

    fn entry(&mut self, tgid: u32) -> Option<TaskTotals> {
        let tasks = BpfHashMap::<_, u32, TaskTotals>::try_from(&**self.tasks.as_ref()?).ok()?;
        let mut t = tasks.get(&tgid, 0).ok()?;
        if let Some(slots) = self.slots {
            crate::slots::add_slot(tgid, &mut t, slots);
        }
        Some(t)
    }

    fn delete(&mut self, tgid: u32) -> bool {
        let deleted = self
            .tasks
            .as_deref_mut()
            .is_some_and(|map| delete_entry(map, tgid));
        if deleted {
            self.deleted.push(tgid);
        }
        deleted
    }

    fn delete_each(&mut self, tgids: &[u32], removed: &mut Vec<u32>) {
        if let Some(map) = self.tasks.as_deref_mut() {
            let from = removed.len();
            delete_entries(map, tgids, removed);
            self.deleted
                .extend(removed.get(from..).unwrap_or_default().iter().copied());
        }
    }

    /// From /proc when the process is still there, the same process (same start time), and
    /// /proc still says where it ran (see [`Sighting::Ending`]).
    fn describe_live(&mut self, key: ProcessKey, t: &TaskTotals) -> Sighting {
        match self.procfs.describe(key.pid).filter(|d| d.key == key) {
            Some(d) if d.group_ending && self.v1_hierarchies => Sighting::Ending,
            Some(d) => Sighting::Described(Arc::new(self.classified(key, t, d.info))),
            None => Sighting::Gone,
        }
    }

    /// What BPF knows: the comm an exit record holds and the cgroup by id, with the procfs
    /// source's precedence (a non-root cpu-controller v1 path, else the unified one). An exit
    /// record comes from the group's last switch: the process is gone, or a zombie whose /proc
    /// says no more than the record (no cmdline, same comm; its v1 paths the root). Looking
    /// it up anyway cost a failed open per short-lived process, the largest part of the
    /// agent's CPU under 1,000 spawns a second.
    fn describe(
        &mut self,
        key: ProcessKey,
        t: &TaskTotals,
        exit: Option<&ExitInfo>,
    ) -> Arc<ProcessInfo> {
        let alike = Gone::new(t, exit);
        if let Some(info) = self.gone_descriptions.get(&alike) {
            return info.clone();
        }
        let cpu_path = exit
            .filter(|e| e.cpu_cgroup_id != 0)
            .and_then(|e| self.cpu_cgroups.resolve(e.cpu_cgroup_id))
            .filter(|p| &**p != "/");
        let path = cpu_path.or_else(|| self.cgroups.resolve(t.cgroup_id));
        let info = ProcessInfo {
            comm: exit.map(ExitInfo::comm).unwrap_or_default(),
            cgroup_path: path.map(|p| p.to_string()).unwrap_or_default(),
            kernel_thread: t.flags & TaskTotals::KERNEL_THREAD != 0,
            ..Default::default()
        };
        let info = Arc::new(self.classified(key, t, info));
        self.gone_descriptions.insert(alike, info.clone());
        info
    }
}

impl EbpfSource {
    /// Loads and attaches the programs. `procfs` is the host's `/proc` (process descriptions,
    /// `/proc/stat`); `classifier` decides each process's workload once.
    pub fn new(
        procfs: impl Into<PathBuf>,
        classifier: Arc<dyn Classifier>,
        settings: EbpfSettings,
    ) -> Result<Self, Unavailable> {
        let mut procfs = ProcfsReader::new(procfs)?;
        let loaded = loader::load(&settings)?;
        let loaded_counts = procfs
            .read_node_stat()
            .ok()
            .as_ref()
            .and_then(exits::counts)
            .map(|c| (c, Instant::now()));
        let mountinfo =
            std::fs::read_to_string(procfs.root().join("self/mountinfo")).unwrap_or_default();
        let counting = Counting::from_mountinfo(&mountinfo);
        if let Some(counting) = &counting {
            procfs.name_usage_cgroups(counting);
        }
        let cgroup_root = settings
            .cgroup2_root
            .clone()
            .or_else(|| cgroup2_mount(&mountinfo));
        let cpu_root = cgroup_v1_mount(&mountinfo, "cpu");
        let v1_hierarchies =
            cpu_root.is_some() || counting.as_ref().is_some_and(|c| c.cpuacct.is_some());
        if cgroup_root.is_none() {
            tracing::warn!("no cgroup2 mount found: exited processes keep no cgroup path");
        }
        let measured = measured(&loaded.probes);
        let kstats = map_array(&loaded.ebpf, names::KSTATS)
            .inspect_err(|error| tracing::debug!(%error, "kstats looked up, not mapped"))
            .ok();
        let slots = crate::slots::PagedSlots::of(&loaded.ebpf)
            .map_err(|e| loader::unavailable("mapping the slots array", &e))?;
        Ok(EbpfSource {
            ebpf: loaded.ebpf,
            exits: loaded.exits,
            probes: loaded.probes,
            counters: loaded.counters,
            procfs,
            classifier,
            cgroups: CgroupResolver::new(cgroup_root),
            cpu_cgroups: CgroupResolver::new(cpu_root),
            v1_hierarchies,
            reconciler: {
                let mut r = Reconciler::new(measured);
                r.set_interval(settings.interval);
                r
            },
            observed: Observed::default(),
            gone_descriptions: FastMap::default(),
            reader: TaskReader::default(),
            tasks_layout: None,
            stats: Arc::new(EbpfStats::default()),
            accounting: Accounting::Switch,
            snapshot_taken: false,
            unseen: Vec::new(),
            pass_reads: None,
            kstats,
            slots,
            deleted: Vec::new(),
            interval: settings.interval,
            loaded_counts,
            drains: drain::Drains::new(loader::ring_size(settings.exit_buffer_bytes)),
            exit_policy: ExitPolicy::new(settings.exits),
            cgroup_counters: counting.map(UsageCounters::new),
            pass_groups: pass_groups::PassGroups::default(),
            last_counts: None,
            turning_exact: false,
            uncounted_until: None,
        })
    }

    /// How CPU time is accounted now.
    pub fn accounting(&self) -> Accounting {
        self.accounting
    }

    /// Changes how ended processes are learnt with the task iterator from the next snapshot
    /// on (`ebpf.exits`); a turn between exact and counted exits completes within two.
    pub fn set_exits(&mut self, exits: crate::Exits) {
        self.exit_policy = ExitPolicy::new(exits);
    }

    /// Which optional probes are on, and why the others are not.
    pub fn probes(&self) -> &Probes {
        &self.probes
    }

    /// Detaches an active optional probe, which then counts nothing more; from the next
    /// snapshot on its counters are reported as unknown. A failure leaves it attached.
    fn detach(&mut self, probe: OptionalProbe) {
        if !self.probes.state(probe).is_active() {
            return;
        }
        match self.ebpf.detach(probe) {
            Ok(()) => {
                if probe == OptionalProbe::HwCounters {
                    self.counters = None;
                }
                *self.probes.state_mut(probe) = ProbeState::Unneeded;
                self.reconciler.set_measured(measured(&self.probes));
                tracing::info!(
                    probe = probe.name(),
                    "eBPF probe detached: no meter or output reads what it counts"
                );
            }
            Err(why) => tracing::warn!(probe = probe.name(), %why, "could not detach eBPF probe"),
        }
    }

    /// Self-metrics, updated at each snapshot; the handle stays valid after the source is
    /// boxed as a `dyn UsageSource`.
    pub fn stats(&self) -> Arc<EbpfStats> {
        self.stats.clone()
    }

    /// Drains the exits ring into the reconciler, which holds the records until a snapshot
    /// succeeds. Returns how many records it took.
    fn drain_exits(&mut self) -> u64 {
        let mut malformed = 0u64;
        let mut drained = 0u64;
        // Straight from the ring into the reconciler, without a list of records in between.
        let exits = &mut self.exits;
        let records = std::iter::from_fn(|| loop {
            let item = exits.next()?;
            drained += 1;
            match ExitRecord::parse(&item) {
                Some(r) => return Some(r),
                None => malformed += 1,
            }
        });
        let lost = self.reconciler.queue_exits(&self.procfs, records);
        self.drains.drained(drained);
        if malformed > 0 {
            tracing::warn!(malformed, "short records in the exits ring");
            self.stats
                .malformed_records
                .fetch_add(malformed, Ordering::Relaxed);
        }
        if lost > 0 {
            tracing::warn!(lost, "exited processes dropped: snapshots keep failing");
            self.stats.exits_lost.fetch_add(lost, Ordering::Relaxed);
        }
        drained
    }

    /// The process map, by tgid, into `observed.live`.
    fn read_live(&mut self) -> Result<(), ReadError> {
        let map = self
            .ebpf
            .map(names::TASKS)
            .ok_or_else(|| ReadError::Other("eBPF: tasks map missing".into()))?;
        let report = self.reader.read(
            &LoadedTasks::new(map, &mut self.tasks_layout),
            &mut self.observed.live,
        );
        // After the map: see `slots` for why in this order. With the task iterator the slots
        // hold what switches charged before the turn, which its readings count already.
        let slotted = if self.accounting == Accounting::Switch {
            crate::slots::add_slots(&mut self.observed.live, &self.slots)
        } else {
            0
        };
        self.stats
            .slotted_processes
            .store(slotted as u64, Ordering::Relaxed);
        if let Some(error) = report.first_error {
            tracing::warn!(%error, errors = report.errors, "reading the eBPF process map");
            self.stats
                .map_read_errors
                .fetch_add(report.errors, Ordering::Relaxed);
        }
        Ok(())
    }

    /// The stretch each running task has been on its CPU so far, by (tgid, start_ns). Read
    /// after the task map: a task that switched out in between then has its stretch in
    /// neither read (reported next time) rather than in both.
    fn read_running(&mut self) {
        let out = &mut self.observed.running;
        out.clear();
        let Some(map) = self.ebpf.map(names::CPU_STATE) else {
            return;
        };
        let Ok(arr) = PerCpuArray::<&MapData, CpuState>::try_from(map) else {
            return;
        };
        // The clock is read first: a stretch measured up to an instant before the read is never
        // more than the task has run (a later instant would count time after it left the CPU).
        let now = proc::monotonic_ns();
        let Ok(values) = arr.get(&0, 0) else {
            return;
        };
        for cs in values.iter() {
            if cs.cur_tgid != 0 && cs.last_ns != 0 {
                *out.entry((cs.cur_tgid, cs.cur_start_ns)).or_insert(0) +=
                    now.saturating_sub(cs.last_ns);
            }
        }
    }

    /// One of the kernel side's counts (`kstat`); 0 when it cannot be read.
    fn kstat(&self, which: u32) -> u64 {
        if let Some(kstats) = &self.kstats {
            return usize::try_from(which)
                .ok()
                .and_then(|i| kstats.get(i))
                .unwrap_or(0);
        }
        self.ebpf
            .map(names::KSTATS)
            .and_then(|map| Array::<&MapData, u64>::try_from(map).ok())
            .and_then(|arr| arr.get(&which, 0).ok())
            .unwrap_or(0)
    }

    fn read_kstats(&self) {
        let get = |i: u32| self.kstat(i);
        self.stats
            .tasks_full
            .store(get(kstat::TASKS_FULL), Ordering::Relaxed);
        self.stats.exits_lost.store(
            get(kstat::EXITS_LOST).saturating_add(self.reconciler.pending_lost()),
            Ordering::Relaxed,
        );
        self.stats
            .tgid_reused
            .store(get(kstat::TGID_REUSED), Ordering::Relaxed);
        self.stats
            .exits_deferred
            .store(get(kstat::EXITS_DEFERRED), Ordering::Relaxed);
    }
}

impl UsageSource for EbpfSource {
    fn name(&self) -> &str {
        "ebpf"
    }

    fn skipped_inputs(&self) -> u64 {
        self.cgroup_counters
            .as_ref()
            .map_or(0, UsageCounters::unreadable)
    }

    /// `sched_switch` counts from when it was loaded, and a process gets an entry when it
    /// first runs. The task iterator reads the scheduler's count, which runs from each task's
    /// start, but every task alive at a snapshot is in it, and a process alive at the first
    /// snapshot is reported relative to its reading there, once it has run since: a process
    /// first reported after the first snapshot used all it reports since the one before (or
    /// ended unseen just before it, and is reported when its exit comes), except one that
    /// started before the first snapshot without being in it, which is left out.
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

    fn retain_features(&mut self, needed: &[Feature]) -> Vec<Feature> {
        for probe in OptionalProbe::ALL {
            if !probe.features().iter().any(|f| needed.contains(f)) {
                self.detach(probe);
            }
        }
        self.choose_accounting();
        self.features()
    }

    fn drain_every(&self) -> Option<Duration> {
        self.drains.every()
    }

    /// Exit records wait in the reconciler for the next snapshot, as a drain at its start
    /// would have left them.
    fn drain(&mut self) {
        if !self.reconciler.room_for_drains() {
            return;
        }
        let drained = self.drain_exits();
        self.drains.between_snapshots(drained);
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        self.cgroups.begin_snapshot();
        self.cpu_cgroups.begin_snapshot();
        let uptime = proc::uptime(&self.procfs)?;
        let stat = self.procfs.read_node_stat()?;
        let mut cgroups = Vec::new();
        self.read_counters(stat.forks, &mut cgroups);
        self.snapshot_taken = true;
        // Exits first: a group that ends between the two reads is then missed by both this
        // time and reported next time, rather than reported twice. Drained records wait in
        // the reconciler, so that a failed map read does not lose them.
        self.drain_exits();
        match self.accounting {
            Accounting::Switch => {
                self.read_live()?;
                self.read_running();
            }
            // No running stretches: its readings include the stretch a task is running now, as
            // of its last tick.
            Accounting::Iterator => {
                self.reconciler.iterator_snapshot(uptime);
                let whole = self.run_pass();
                self.read_pass(whole)?;
                self.read_unseen();
                self.keep_this_pass(whole);
            }
        }
        self.read_kstats();
        self.drains.snapshot(
            self.stats.exits_deferred.load(Ordering::Relaxed),
            Instant::now(),
        );
        self.stats
            .tracked_processes
            .store(self.observed.live.len() as u64, Ordering::Relaxed);
        let tasks = self.ebpf.map_mut(names::TASKS);
        let mut io = Io {
            procfs: &mut self.procfs,
            classifier: &*self.classifier,
            cgroups: &mut self.cgroups,
            cpu_cgroups: &mut self.cpu_cgroups,
            tasks,
            slots: (self.accounting == Accounting::Switch).then_some(&self.slots),
            deleted: &mut self.deleted,
            gone_descriptions: &mut self.gone_descriptions,
            v1_hierarchies: self.v1_hierarchies,
        };
        let step = self.reconciler.step(&mut io, &mut self.observed);
        if self.accounting == Accounting::Switch && !self.deleted.is_empty() {
            if let Some(map) = self.ebpf.map_mut(names::SLOTS) {
                crate::slots::free_slots_of(map, &self.slots, &self.deleted);
            }
        }
        self.deleted.clear();
        // Kept one snapshot only: cgroup paths and classifications are looked at afresh in
        // each, and a description does not outlive the processes that share it.
        let described = self.gone_descriptions.len();
        self.gone_descriptions.clear();
        crate::reconcile::trim_map(&mut self.gone_descriptions, described);
        self.observed.live.trim(self.reader.batch_room());
        self.stats
            .gc_removed
            .fetch_add(step.gc_removed, Ordering::Relaxed);
        if self.accounting == Accounting::Iterator {
            self.follow_exits(&stat, &step.processes, &mut cgroups);
        }
        Ok(UsageSnapshot {
            uptime,
            node: stat.cpu,
            processes: step.processes,
            cgroups,
        })
    }
}

#[cfg(test)]
mod tests {
    //! The I/O side's wiring, against the real maps (root only). The rules themselves are
    //! tested on the pure code in `reconcile`.

    use crate::live_table::LiveTable;

    use super::*;

    /// Exact exits, whatever the machine's load: these tests read what kepler_exit hands over.
    fn bare_source() -> EbpfSource {
        let settings = EbpfSettings {
            page_cache: false,
            softirq: false,
            hw_counters: false,
            exits: crate::Exits::Exact,
            ..Default::default()
        };
        EbpfSource::new("/proc", Arc::new(kepler_core::NoWorkloads), settings).unwrap()
    }

    /// [`bare_source`] turned to the task iterator.
    fn iterator_source() -> EbpfSource {
        let mut src = bare_source();
        src.use_task_iterator().unwrap();
        src
    }

    fn tasks(src: &mut EbpfSource) -> BpfHashMap<&mut MapData, u32, TaskTotals> {
        BpfHashMap::try_from(src.ebpf.map_mut(names::TASKS).unwrap()).unwrap()
    }

    /// The host as a snapshot of `src` sees it, with per-switch accounting's slots.
    fn io(src: &mut EbpfSource) -> Io<'_> {
        Io {
            procfs: &mut src.procfs,
            classifier: &*src.classifier,
            cgroups: &mut src.cgroups,
            cpu_cgroups: &mut src.cpu_cgroups,
            tasks: src.ebpf.map_mut(names::TASKS),
            slots: Some(&src.slots),
            deleted: &mut src.deleted,
            gone_descriptions: &mut src.gone_descriptions,
            v1_hierarchies: src.v1_hierarchies,
        }
    }

    /// Runs a little and sleeps, `n` times: this thread leaves its CPU at each sleep.
    fn switch_often(n: u32) {
        for _ in 0..n {
            let end = Instant::now() + Duration::from_micros(300);
            while Instant::now() < end {
                std::hint::black_box(0u64);
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The test process's reading, its entry plus its slot; `None` when it has no entry.
    fn my_reading(src: &mut EbpfSource) -> Option<TaskTotals> {
        src.read_live().unwrap();
        src.observed.live.get(&std::process::id()).copied()
    }

    /// Entries deleted by user space take their slots with them: a process whose entry went
    /// (here every entry, as after a trial pass of the task iterator) makes it again at its
    /// next switch and is read again, rather than charging a slot that nothing reads.
    #[test]
    fn a_process_whose_entry_was_deleted_is_read_again() {
        let test = "a_process_whose_entry_was_deleted_is_read_again";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = bare_source();
        switch_often(40);
        let before = my_reading(&mut src).expect("an entry");
        let held = crate::slots::add_slot(std::process::id(), &mut before.clone(), &src.slots);
        assert!(held, "this process holds a slot: {before:?}");
        src.clear_entries();
        switch_often(40);
        let after = my_reading(&mut src).expect("the entry made again");
        assert!(after.cpu_ns > 0 && after.switches >= 20, "{after:?}");

        // One entry deleted as the collection of gone processes deletes it.
        let me = std::process::id();
        let mut io = io(&mut src);
        assert!(io.delete(me));
        assert_eq!(io.deleted, &[me]);
        let deleted = std::mem::take(io.deleted);
        let freed = crate::slots::free_slots_of(
            src.ebpf.map_mut(names::SLOTS).unwrap(),
            &src.slots,
            &deleted,
        );
        assert_eq!(freed, 1);
        switch_often(40);
        let again = my_reading(&mut src).expect("the entry made again");
        assert!(again.switches >= 20, "{again:?}");
        // Pages are mapped as their slots are read, not all at once (each stays resident once
        // mapped): this process's at least, and not every one.
        let pages = src.slots.mapped_pages();
        let all = crate::slots::SlotArray::len(&src.slots).div_ceil(64);
        assert!(pages > 0 && pages < all, "{pages} of {all} pages mapped");
    }

    #[test]
    fn gone_entry_is_collected_through_the_map_once() {
        let test = "gone_entry_is_collected_through_the_map_once";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = bare_source();
        // No process has this tgid (pid_max is at most 2^22), so /proc says it is gone and the
        // kernel never touches the entry.
        const TGID: u32 = u32::MAX - 1;
        let entry = TaskTotals {
            start_ns: 1_000_000_000,
            cpu_ns: 5_000_000,
            switches: 3,
            ..Default::default()
        };
        let key = src.procfs.key(TGID, entry.start_ns);
        tasks(&mut src).insert(TGID, entry, 0).unwrap();
        // The round robin reaches the largest tgid within about GC_EVERY snapshots (at the
        // default 5 s interval) of it being idle; the bound only keeps a broken collection
        // from looping for ever.
        let mut reports = Vec::new();
        for _ in 0..50 {
            let snap = src.snapshot().unwrap();
            let mine = snap.processes.iter().filter(|p| p.key == key);
            reports.extend(mine.map(|p| (p.cpu_time, p.exited)));
            if reports.last().is_some_and(|r| r.1) {
                break;
            }
        }
        let (exits, lives): (Vec<(Duration, bool)>, Vec<_>) = reports.iter().partition(|r| r.1);
        assert_eq!(exits, [(Duration::from_millis(5), true)], "{reports:?}");
        assert!(lives.iter().all(|r| r.0 == Duration::from_millis(5)));
        assert!(tasks(&mut src).get(&TGID, 0).is_err(), "entry deleted");
        assert_eq!(src.stats.gc_removed.load(Ordering::Relaxed), 1);
        let snap = src.snapshot().unwrap();
        assert!(snap.processes.iter().all(|p| p.key != key));
    }

    #[test]
    fn batch_and_entry_by_entry_reads_agree_on_the_real_map() {
        let test = "batch_and_entry_by_entry_reads_agree_on_the_real_map";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        use crate::map_read::{LoadedTasks, TaskMap};
        let mut src = bare_source();
        // 3,000 entries no process can own (tgids above pid_max), so the kernel leaves them as
        // they are while both reads run; the real processes' entries move meanwhile.
        const N: u32 = 3_000;
        let fake = |i: u32| TaskTotals {
            start_ns: u64::from(i) + 1,
            cpu_ns: u64::from(i) * 1_000,
            switches: u64::from(i),
            cgroup_id: 1,
            ..Default::default()
        };
        {
            let mut tasks = tasks(&mut src);
            for i in 0..N {
                tasks.insert(u32::MAX - i, fake(i), 0).unwrap();
            }
        }
        // This process's own entry appears at a switch-out of one of its threads, but not at
        // a CPU's first switch since the programs were loaded (no start time to charge from):
        // sleep until one has been counted.
        let me = std::process::id();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while tasks(&mut src).get(&me, 0).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "no entry for this process"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        let mut layout = None;
        let map = LoadedTasks::new(src.ebpf.map(names::TASKS).unwrap(), &mut layout);
        assert!(layout.is_some(), "the layout check is kept");
        // One entry per batch at first: the kernel refuses any bucket of two or more
        // (ENOSPC), so the batch must grow for the read to finish.
        let mut reader = TaskReader::with_first_batch(1);
        let mut batched = LiveTable::default();
        let report = reader.read(&map, &mut batched);
        assert!(report.batched, "this kernel takes batch lookups (5.6+)");
        assert_eq!(report.errors, 0);
        assert!(reader.batch_room() > 1, "some bucket held two entries");
        let mut one_by_one = LiveTable::default();
        map.for_each_entry(&mut |item| {
            let (tgid, t) = item.unwrap();
            one_by_one.insert(tgid, t);
        });
        let mine = |m: &LiveTable| -> Vec<(u32, TaskTotals)> {
            let mut v: Vec<_> = m
                .iter()
                .filter(|(tgid, _)| **tgid > u32::MAX - N)
                .map(|(tgid, t)| (*tgid, *t))
                .collect();
            v.sort_unstable_by_key(|e| e.0);
            v
        };
        let expected: Vec<_> = (0..N).rev().map(|i| (u32::MAX - i, fake(i))).collect();
        assert_eq!(mine(&batched), expected);
        assert_eq!(mine(&one_by_one), expected);
        // Both reads hold a real entry too (this process's, seen above).
        assert!(batched.contains_key(&me) && one_by_one.contains_key(&me));
        // And the default reader, as snapshots use it, through the kept check.
        let mut reader = TaskReader::default();
        let mut again = LiveTable::default();
        let map = LoadedTasks::new(src.ebpf.map(names::TASKS).unwrap(), &mut layout);
        assert!(reader.read(&map, &mut again).batched);
        assert!(reader.batching());
        assert_eq!(mine(&again), expected);
    }

    #[test]
    fn batch_delete_removes_what_it_finds_and_skips_what_it_does_not() {
        let test = "batch_delete_removes_what_it_finds_and_skips_what_it_does_not";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = bare_source();
        // tgids above pid_max: entries the kernel never touches. Every seventh is not in the
        // map, as when the kernel handed an entry over since the map was read.
        let tgids: Vec<u32> = (0..3_000).map(|i| u32::MAX - i).collect();
        let present: Vec<u32> = tgids.iter().copied().filter(|t| t % 7 != 0).collect();
        {
            let mut tasks = tasks(&mut src);
            for &tgid in &present {
                tasks.insert(tgid, TaskTotals::default(), 0).unwrap();
            }
        }
        // The kernel's own answer: it stops at the first key it cannot delete.
        let Some(Map::HashMap(data)) = src.ebpf.map(names::TASKS) else {
            panic!("tasks is a hash map");
        };
        let batch = BatchMap::<u32, TaskTotals>::new(data).unwrap();
        let absent = *tgids.iter().find(|t| *t % 7 == 0).unwrap();
        let (done, why) = batch.delete(&[present[0], absent, present[1]]);
        assert_eq!(done, 1, "{why:?}");
        assert!(matches!(why, Some(BatchError::NotFound)), "{why:?}");

        let mut io = io(&mut src);
        let mut removed = Vec::new();
        io.delete_each(&tgids, &mut removed);
        let expected: Vec<u32> = present.iter().copied().skip(1).collect();
        assert_eq!(removed, expected);
        let tasks = tasks(&mut src);
        assert!(tgids.iter().all(|t| tasks.get(t, 0).is_err()), "all gone");
    }

    #[test]
    fn entries_marked_exited_are_collected_together() {
        let test = "entries_marked_exited_are_collected_together";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = bare_source();
        src.snapshot().unwrap();
        // As the kernel leaves them when the exit ring is full; two cgroups.
        const N: u32 = 500;
        let marked = |i: u32| TaskTotals {
            start_ns: 1_000_000_000,
            cgroup_id: u64::from(i % 2) + 1,
            cpu_ns: 1_000_000 * u64::from(i + 1),
            flags: TaskTotals::EXITED,
            ..Default::default()
        };
        {
            let mut tasks = tasks(&mut src);
            for i in 0..N {
                tasks.insert(u32::MAX - i, marked(i), 0).unwrap();
            }
        }
        let snap = src.snapshot().unwrap();
        let mut got: Vec<(u32, u64, bool)> = snap
            .processes
            .iter()
            .filter(|p| p.key.pid > u32::MAX - N)
            .map(|p| (p.key.pid, p.cpu_time.as_nanos() as u64, p.exited))
            .collect();
        got.sort_unstable();
        let expected: Vec<_> = (0..N)
            .rev()
            .map(|i| (u32::MAX - i, marked(i).cpu_ns, true))
            .collect();
        assert_eq!(got, expected);
        // Gone alike, described once: one description per cgroup, shared.
        let mut descriptions: Vec<(*const ProcessInfo, Option<u64>)> = snap
            .processes
            .iter()
            .filter(|p| p.key.pid > u32::MAX - N)
            .map(|p| (Arc::as_ptr(&p.info), p.info.cgroup_id))
            .collect();
        descriptions.sort_unstable();
        descriptions.dedup();
        let mut cgroups: Vec<Option<u64>> = descriptions.iter().map(|d| d.1).collect();
        cgroups.sort_unstable();
        assert_eq!(cgroups, [Some(1), Some(2)], "{descriptions:?}");
        assert_eq!(src.stats.gc_removed.load(Ordering::Relaxed), u64::from(N));
        let tasks = tasks(&mut src);
        assert!((0..N).all(|i| tasks.get(&(u32::MAX - i), 0).is_err()));
        let snap = src.snapshot().unwrap();
        assert!(snap.processes.iter().all(|p| p.key.pid <= u32::MAX - N));
    }

    /// Burns `d` of this thread's CPU time; returns all it used so far.
    fn burn(d: Duration) -> Duration {
        kepler_testkit::cpu::burn_cpu(d);
        kepler_testkit::cpu::thread_cpu()
    }

    #[test]
    fn with_the_iterator_switches_are_not_charged_and_final_ones_are_seen() {
        let test = "with_the_iterator_switches_are_not_charged_and_final_ones_are_seen";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = iterator_source();
        let me = std::process::id();
        let entry = |src: &mut EbpfSource| tasks(src).get(&me, 0).unwrap();
        src.run_pass();
        let before = entry(&mut src);
        // CPU time and switches in this thread, which kepler_switch would charge to the entry;
        // only a pass may change what it says of the live threads.
        for _ in 0..20 {
            burn(Duration::from_millis(1));
            std::thread::sleep(Duration::from_millis(1));
        }
        let between = entry(&mut src);
        assert_eq!(
            (between.cpu_ns, between.switches),
            (before.cpu_ns, before.switches)
        );
        // A thread that ends: its final switch adds all of its runtime to the ended part
        // (other tests' threads of this process may add theirs too).
        let used = std::thread::spawn(|| burn(Duration::from_millis(20)))
            .join()
            .unwrap();
        let used = u64::try_from(used.as_nanos()).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(2);
        while entry(&mut src).dead_ns < before.dead_ns + used
            && std::time::Instant::now() < deadline
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(entry(&mut src).dead_ns >= before.dead_ns + used);
        src.run_pass();
        assert!(entry(&mut src).cpu_ns >= before.cpu_ns + used + 20_000_000);
    }

    /// With the task iterator every process is read at every snapshot (reported once it runs),
    /// pid 1 included, which this VM's kernel leaves out of every iterator pass: the source
    /// reads it from /proc instead.
    #[test]
    fn the_task_iterator_reads_every_process() {
        let test = "the_task_iterator_reads_every_process";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = iterator_source();
        src.snapshot().unwrap();
        let proc = std::path::Path::new("/proc");
        let before = unseen::pids(proc);
        src.snapshot().unwrap();
        let after = unseen::pids(proc);
        let missing: Vec<u32> = before
            .intersection(&after)
            .filter(|p| !src.observed.live.contains_key(p))
            .copied()
            .collect();
        assert!(missing.is_empty(), "not read: {missing:?}");
        let init = src.observed.live.get(&1);
        assert!(init.is_some_and(|t| t.cpu_ns > 0), "pid 1: {init:?}");
    }

    #[test]
    fn a_pass_reads_from_its_output_what_the_map_holds() {
        let test = "a_pass_reads_from_its_output_what_the_map_holds";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = iterator_source();
        assert!(src.pass_reads.is_some(), "pass_out could not be mapped");
        // The first read after the turn is a whole one; the next come from the output.
        src.snapshot().unwrap();
        assert!(src.run_pass());
        src.read_pass(true).unwrap();
        let from_output = src.observed.live.clone();
        assert_eq!(src.pass_reads.as_ref().map(|r| r.since_full()), Some(1));
        src.read_live().unwrap();
        let from_map = src.observed.live.clone();
        // What a pass rewrites is what its slots say; the map may also hold entries made
        // since (a thread's final switch), and the processes the iterator does not visit.
        let fields = |t: &TaskTotals| {
            (
                (t.start_ns, t.cgroup_id, t.cpu_ns, t.switches, t.flags),
                (t.sig_ns, t.sig_switches, t.pass),
            )
        };
        let me = std::process::id();
        assert_eq!(
            from_output.get(&me).map(fields),
            from_map.get(&me).map(fields)
        );
        // Only the slots in use are mapped; more are mapped as a pass needs them.
        let reads = src.pass_reads.as_mut().unwrap();
        let pass = reads.pass_id().unwrap();
        assert_eq!(reads.out_mut().mapped(), crate::pass_out::FIRST_SLOTS);
        let more = 3 * crate::pass_out::FIRST_SLOTS;
        reads.out_mut().reserve(more).unwrap();
        assert_eq!(reads.out_mut().mapped(), more.next_power_of_two());
        let again: LiveTable = reads
            .out_mut()
            .slots(from_output.len())
            .map(|slot| {
                let t = TaskTotals {
                    pass,
                    ..slot.totals()
                };
                (slot.tgid, t)
            })
            .collect();
        assert_eq!(again, from_output);
        let agree = from_output
            .iter()
            .filter(|(tgid, t)| from_map.get(tgid).map(fields) == Some(fields(t)))
            .count();
        // A group whose thread ended between the two reads differs; a handful at most.
        assert!(
            agree + 10 >= from_output.len() && from_output.len() + 10 >= from_map.len(),
            "{agree} of {} slots agree with {} entries",
            from_output.len(),
            from_map.len()
        );
    }

    #[test]
    fn with_the_iterator_an_exit_deferred_is_read_from_the_map_at_once() {
        let test = "with_the_iterator_an_exit_deferred_is_read_from_the_map_at_once";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = iterator_source();
        src.snapshot().unwrap();
        src.snapshot().unwrap();
        // As the kernel leaves a group that ended with the exit ring full: marked, in the map
        // only (no task is left for a pass to meet). Started after the first snapshot, so all
        // of its time counts.
        const TGID: u32 = u32::MAX - 7;
        let start = crate::proc::clock(libc::CLOCK_BOOTTIME).unwrap();
        let marked = TaskTotals {
            start_ns: u64::try_from(start.as_nanos()).unwrap(),
            cpu_ns: 5_000_000,
            switches: 2,
            flags: TaskTotals::EXITED,
            ..Default::default()
        };
        tasks(&mut src).insert(TGID, marked, 0).unwrap();
        let reported = |snap: &UsageSnapshot| -> Vec<(Duration, bool)> {
            let mine = snap.processes.iter().filter(|p| p.key.pid == TGID);
            mine.map(|p| (p.cpu_time, p.exited)).collect()
        };
        // A read from the pass output does not see it...
        assert_eq!(reported(&src.snapshot().unwrap()), []);
        // ...until the kernel counts a deferred exit, as it does when it marks one: then the
        // next snapshot reads the whole map and reports it.
        {
            let map = src.ebpf.map_mut(names::KSTATS).unwrap();
            let mut kstats = Array::<&mut MapData, u64>::try_from(map).unwrap();
            let deferred = kstats.get(&kstat::EXITS_DEFERRED, 0).unwrap();
            kstats.set(kstat::EXITS_DEFERRED, deferred + 1, 0).unwrap();
        }
        // Read through the mapping, which sees what the map holds.
        assert!(src.kstats.is_some(), "kstats could not be mapped");
        let counted = src.kstat(kstat::EXITS_DEFERRED);
        assert!(counted >= 1);
        src.kstats = None;
        assert_eq!(counted, src.kstat(kstat::EXITS_DEFERRED));
        src.kstats = map_array(&src.ebpf, names::KSTATS).ok();
        let snap = src.snapshot().unwrap();
        assert_eq!(reported(&snap), [(Duration::from_millis(5), true)]);
        assert!(tasks(&mut src).get(&TGID, 0).is_err(), "entry collected");
    }

    #[test]
    fn drained_exits_survive_a_failed_map_read() {
        let test = "drained_exits_survive_a_failed_map_read";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let mut src = bare_source();
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
        assert_eq!(
            src.reconciler.pending_pids().filter(|&p| p == pid).count(),
            1,
            "the exited child is held for the next snapshot"
        );
    }
}

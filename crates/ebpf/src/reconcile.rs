//! Reconciliation: what the BPF side handed over in one snapshot (live entries of the process
//! map, running stretches, drained exit records) merged with what earlier snapshots reported,
//! into the snapshot's process list. No I/O here: the few questions that need the host (is a
//! process still in /proc, what is it, the process map's entry now, did a delete win) go
//! through [`Host`], so tests drive every rule with a fake one and without root.

mod baseline;
mod basis;
mod gc;
mod kept;
mod recent;

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{ProcessInfo, ProcessKey, ProcessUsage, TaskCounters};

pub(crate) use self::basis::Basis;

use self::baseline::Baselines;
use self::kept::Kept;
use self::recent::Recent;
use crate::abi::{ExitRecord, TaskTotals};
use crate::live_table::LiveTable;

/// Snapshots an exited process's totals are kept after its report, to merge late pieces of the
/// same group: one, the same hold the attribution gives an ended process it hides (kepler-core
/// `attribution::retention`). A piece merged later than the attribution's hold would be a
/// cumulative total for a key it no longer knows, counted again from zero; reported on its own
/// instead, it counts once. Under churn every exit is held this long, so each snapshot more
/// held thousands of totals and descriptions (megabytes at 1,000 exits a second).
const ENDED_TTL: u32 = 1;
/// Snapshots a known process may be missing from the map before it is forgotten.
const KNOWN_TTL: u32 = 3;
/// Exited groups held while snapshots fail (one drain of a 256 KiB ring is at most ~1.7k):
/// beyond this, new ones are dropped and counted rather than held without bound.
const MAX_PENDING: usize = 1 << 16;

pub(crate) use kepler_core::scratch::{trim_map, trim_vec, FastMap};

/// How a (tgid, start time in ns) pair read from BPF becomes the key procfs would give the
/// same process: the start time floored to a clock tick.
pub(crate) trait Keys {
    fn key(&self, tgid: u32, start_ns: u64) -> ProcessKey;
}

/// What the reconciliation asks of the host while merging one snapshot.
pub(crate) trait Host: Keys {
    /// Whether the process with this key still runs (`/proc/<pid>/stat` gives the same key).
    fn is_alive(&mut self, key: ProcessKey) -> bool;
    /// The process map's entry for `tgid` now; `None` when there is none.
    fn entry(&mut self, tgid: u32) -> Option<TaskTotals>;
    /// Deletes `tgid`'s entry from the process map; true when this delete removed it.
    fn delete(&mut self, tgid: u32) -> bool;
    /// Deletes the entries of `tgids` and pushes those this call removed onto `removed` (the
    /// others were gone already). One batch where the kernel allows it.
    fn delete_each(&mut self, tgids: &[u32], removed: &mut Vec<u32>) {
        removed.extend(tgids.iter().copied().filter(|&tgid| self.delete(tgid)));
    }
    /// Describes a process from what BPF knows of it: `totals` and, for an ended one, what its
    /// exit record adds; its workload classified and its cgroup id set from `totals`.
    /// Processes described alike may share one description.
    fn describe(
        &mut self,
        key: ProcessKey,
        totals: &TaskTotals,
        exit: Option<&ExitInfo>,
    ) -> Arc<ProcessInfo>;
    /// Describes a process a pass read alive from what /proc shows of it now, classified, its
    /// cgroup id set from `totals`.
    fn describe_live(&mut self, key: ProcessKey, totals: &TaskTotals) -> Sighting;
}

/// What /proc shows, a moment after the pass, of a process the pass read alive.
pub(crate) enum Sighting {
    /// The process, described.
    Described(Arc<ProcessInfo>),
    /// The process, its whole group in its exit, on a host with a v1 `cpu` or `cpuacct`
    /// hierarchy: the kernel then shows it in the root of each v1 hierarchy
    /// (`proc_cgroup_show`), so /proc no longer says where it ran. It is reported at its end
    /// instead, by its exit record (described from the cgroup the record names), or, on the
    /// kernel basis, by its cgroup's counter.
    Ending,
    /// No such process: it was reaped since the pass (or another took its pid).
    Gone,
}

/// What an exit record adds to the totals.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ExitInfo {
    /// The command name as the kernel keeps it: NUL-padded bytes, not always UTF-8. Held as
    /// they are rather than as a `String`: one allocation less per exit, and a description
    /// made from it (`ExitInfo::comm`) is shared by every exit alike.
    pub comm: [u8; 16],
    pub cpu_cgroup_id: u64,
}

impl ExitInfo {
    /// The command name, lossily decoded.
    pub(crate) fn comm(&self) -> String {
        crate::abi::comm_text(&self.comm)
    }

    /// A record's command name with every byte after its end zeroed: the kernel copies the
    /// name up to its NUL into ring memory that earlier records used, so what follows is left
    /// over, and exits alike must compare alike (they share one description).
    pub(crate) fn comm_bytes(mut comm: [u8; 16]) -> [u8; 16] {
        if let Some(end) = comm.iter().position(|&b| b == 0) {
            comm.iter_mut().skip(end).for_each(|b| *b = 0);
        }
        comm
    }

    pub(crate) fn has_no_comm(&self) -> bool {
        self.comm.first().is_none_or(|&b| b == 0)
    }
}

/// Which optional counters the loaded probes measure; the others are reported as unknown.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Measured {
    pub page_cache: bool,
    pub softirq: bool,
    pub hw_counters: bool,
}

impl Measured {
    /// A reading's counters, or none while no optional probe counts anything: then nothing
    /// reads them (they feed only the model features, whose CPU time comes from the reading
    /// itself), and a box per process per snapshot was ~1,000 allocations and frees a second
    /// with 1,000 processes at a 1 s interval.
    fn counters(&self, t: &TaskTotals) -> Option<Box<TaskCounters>> {
        if !(self.page_cache || self.softirq || self.hw_counters) {
            return None;
        }
        let on = |flag: bool, v: u64| flag.then_some(v);
        let hw = self.hw_counters;
        Some(Box::new(TaskCounters {
            cpu_cycles: on(hw, t.cycles),
            cpu_instructions: on(hw, t.instructions),
            cache_misses: on(hw, t.cache_misses),
            page_cache_hits: on(self.page_cache, t.page_cache_hits),
            irq_net_rx: on(self.softirq, t.irq_net_rx),
            irq_net_tx: on(self.softirq, t.irq_net_tx),
            irq_block: on(self.softirq, t.irq_block),
            context_switches: Some(t.switches),
        }))
    }
}

/// What the maps held at this snapshot. Kept by the source from one snapshot to the next so
/// that the tables keep their allocations.
#[derive(Clone, Debug, Default)]
pub(crate) struct Observed {
    /// The process map, by tgid.
    pub live: LiveTable,
    /// The stretch each running group has been on its CPU so far, by (tgid, start_ns), read
    /// after the map. A step takes these out.
    pub running: FastMap<(u32, u64), u64>,
    /// Whether `live` is a whole task iterator pass: on the kernel basis a group it does not
    /// hold has then ended.
    pub whole_pass: bool,
}

/// The result of one snapshot's merge.
#[derive(Debug, Default)]
pub(crate) struct Step {
    pub processes: Vec<ProcessUsage>,
    /// Entries of gone processes removed from the map and reported as exited.
    pub gc_removed: u64,
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

/// One live entry of a step, on the basis readings are taken on, with the running stretch read
/// for it.
struct LiveReading<'a> {
    tgid: u32,
    totals: &'a TaskTotals,
    running_ns: u64,
}

/// A live process already described.
struct Known {
    info: Arc<ProcessInfo>,
    /// The cgroup id it was described in: another one means it moved, and is described again.
    cgroup_id: u64,
    /// The last snapshot that saw it.
    seen: u64,
    /// cpu_ns at the previous snapshot: a gone process's entry stops moving.
    last_cpu_ns: u64,
    reported: Reported,
    /// Its group leader's start and the switches it last reported, for its last report when
    /// it is found gone.
    start_ns: u64,
    switches: u64,
}

/// An exited process reported recently.
struct Ended {
    totals: Kept,
    info: Arc<ProcessInfo>,
    reported: Reported,
    /// Found gone from a pass and reported on what it reported last (see [`Basis::Kernel`]):
    /// a record that comes after is on another basis, and adds nothing.
    last: bool,
}

/// Exited groups by key: their totals (pieces merged) and what the exit records add. Under
/// churn it holds every exit of an interval (thousands), so the totals are kept compact.
type Exits = FastMap<ProcessKey, (Kept, ExitInfo)>;

/// Adds one piece of a group's totals to what `exits` holds for it (a group can be handed over
/// in pieces when its threads exit on several CPUs at once).
fn merge_exit(exits: &mut Exits, key: ProcessKey, totals: TaskTotals, info: ExitInfo) {
    match exits.get_mut(&key) {
        Some((kept, e)) => {
            let mut t = kept.totals();
            t.add(&totals);
            *kept = Kept::new(&t);
            if e.has_no_comm() {
                *e = info;
            }
        }
        None => {
            exits.insert(key, (Kept::new(&totals), info));
        }
    }
}

/// The state carried from one snapshot to the next.
pub(crate) struct Reconciler {
    measured: Measured,
    /// Which of a pass's readings live entries are taken on.
    basis: Basis,
    /// Whether the task iterator reads the live entries (see [`Reconciler::use_iterator`]).
    iterator: bool,
    /// With the task iterator: the uptime of its first snapshot. A process that started before
    /// then and was not in that snapshot is not reported: what the scheduler counted for it
    /// runs from its start, and nothing says how much of it came before (it was ending during
    /// the first pass, or the map was full then).
    iterator_since: Option<Duration>,
    /// With the task iterator: each reading of the first step, what that process's later
    /// readings are reported relative to (see [`baseline`]).
    baselines: Baselines,
    known: FastMap<ProcessKey, Known>,
    ended: Recent<Ended>,
    /// Exit records drained but not reported yet: they stay here until a snapshot succeeds.
    pending: Exits,
    /// Exited groups dropped because `pending` was full, since the start.
    pending_lost: u64,
    /// The last tgid checked by the round-robin collection of gone processes.
    gc_cursor: u32,
    /// Snapshots over which that collection checks every idle entry once ([`gc::gc_every`]).
    gc_every: usize,
    /// Idle entries counted since its last check, short of `gc_every`: a check is due for each
    /// `gc_every` of them.
    gc_owed: usize,
    /// Snapshots merged so far (failed ones are not: they saw nothing).
    steps: u64,
    /// Scratch space of a step, kept allocated: the idle tgids the collection of gone
    /// processes picks from. It grows with the process count; made afresh every snapshot it
    /// was a block above glibc's mmap threshold, faulted in anew. (`pending` is taken for the
    /// step and given back empty, its allocation kept: one table of exits, not one filling
    /// while another is reported.)
    idle: Vec<u32>,
    /// Entries the kernel marked exited, and those of them this snapshot removed.
    marked: Vec<u32>,
    removed: Vec<u32>,
    gone: Vec<(ProcessKey, TaskTotals)>,
}

impl Reconciler {
    pub(crate) fn new(measured: Measured) -> Self {
        Reconciler {
            measured,
            basis: Basis::FinalSwitch,
            iterator: false,
            iterator_since: None,
            baselines: Baselines::default(),
            known: FastMap::default(),
            ended: Recent::new(ENDED_TTL),
            pending: FastMap::default(),
            pending_lost: 0,
            gc_cursor: 0,
            gc_every: gc::GC_EVERY,
            gc_owed: 0,
            steps: 0,
            idle: Vec::new(),
            marked: Vec::new(),
            removed: Vec::new(),
            gone: Vec::new(),
        }
    }

    /// Snapshots are taken every `interval`: the collection of gone processes spreads its
    /// checks of idle entries over [`gc::GC_PERIOD`] of them.
    pub(crate) fn set_interval(&mut self, interval: Duration) {
        self.gc_every = gc::gc_every(interval);
    }

    /// From the next step on, counters are reported as `measured` says.
    pub(crate) fn set_measured(&mut self, measured: Measured) {
        self.measured = measured;
    }

    /// From the next step on, the live entries are the task iterator's: each thread's time as
    /// the scheduler counted it since the thread's start, and every group's end is handed over
    /// at the final switch of its last thread. Entries of gone processes are then not looked
    /// for in /proc: a process is gone from there when it is reaped, which may come before
    /// its threads' final switches, and an entry taken then would count those threads again
    /// when their final runtime arrives. Called before the first step, whose readings become
    /// the baselines of the processes then alive (see [`baseline`]).
    pub(crate) fn use_iterator(&mut self) {
        self.iterator = true;
    }

    /// Notes the uptime of a snapshot with the task iterator; the first one counts.
    pub(crate) fn iterator_snapshot(&mut self, uptime: Duration) {
        if self.iterator && self.iterator_since.is_none() {
            self.iterator_since = Some(uptime);
        }
    }

    /// Whether `key` is met for the first time now, but started before the task iterator's
    /// first snapshot (see `iterator_since`) and was not in it.
    fn began_unseen(&self, key: &ProcessKey) -> bool {
        self.steps > 1
            && self
                .iterator_since
                .is_some_and(|since| key.start_time < since)
            && !self.baselines.contains(key)
            && !self.known.contains_key(key)
            && !self.ended.contains_key(key)
    }

    /// Whether this process was reported before (live, or exited in the last steps).
    fn reported_before(&self, key: &ProcessKey) -> bool {
        self.known.contains_key(key) || self.ended.contains_key(key)
    }

    /// Exited groups dropped so far because too many were held (snapshots kept failing).
    pub(crate) fn pending_lost(&self) -> u64 {
        self.pending_lost
    }

    /// Whether exits drained between snapshots may still be held: past half of
    /// [`MAX_PENDING`] (snapshots failing while exits pour in) the ring is left to fill, and
    /// what it cannot take is deferred to the process map, which loses nothing, rather than
    /// drained here towards a bound where exits are dropped.
    pub(crate) fn room_for_drains(&self) -> bool {
        self.pending.len() < MAX_PENDING / 2
    }

    /// The pids of the exited groups held for the next step.
    #[cfg(test)]
    pub(crate) fn pending_pids(&self) -> impl Iterator<Item = u32> + '_ {
        self.pending.keys().map(|k| k.pid)
    }

    /// Holds drained exit records until the next [`step`](Self::step), merging pieces of the
    /// same group. Returns how many groups were dropped because [`MAX_PENDING`] were held.
    pub(crate) fn queue_exits(
        &mut self,
        keys: &impl Keys,
        records: impl IntoIterator<Item = ExitRecord>,
    ) -> u64 {
        let mut lost = 0u64;
        for r in records {
            let key = keys.key(r.tgid, r.totals.start_ns);
            if self.pending.len() >= MAX_PENDING && !self.pending.contains_key(&key) {
                lost += 1;
                continue;
            }
            let info = ExitInfo {
                comm: ExitInfo::comm_bytes(r.comm),
                cpu_cgroup_id: r.cpu_cgroup_id,
            };
            merge_exit(&mut self.pending, key, r.totals, info);
        }
        self.pending_lost = self.pending_lost.saturating_add(lost);
        lost
    }

    /// Merges one snapshot: the exits queued since the last step, entries of gone processes
    /// collected now, and the live entries with their running stretches.
    pub(crate) fn step(&mut self, host: &mut impl Host, observed: &mut Observed) -> Step {
        self.steps += 1;
        let Observed {
            live,
            running,
            whole_pass,
        } = observed;
        let mut exited = std::mem::take(&mut self.pending);
        self.drop_records_of_read_groups(&mut exited);
        let mut gone = self.collect_gone(host, live);
        let gc_removed = gone.len() as u64;
        for (key, t) in gone.drain(..) {
            // Added, not replaced: an earlier piece of the same group may be in the ring.
            merge_exit(&mut exited, key, t, ExitInfo::default());
        }
        trim_vec(&mut gone, gc_removed as usize);
        self.gone = gone;

        // With the task iterator the first step reads every process's baseline and reports
        // none of them: relative to itself, each has used nothing yet.
        let first_iterator_step = self.iterator && self.steps == 1;
        let mut processes = Vec::with_capacity(live.len() + running.len() + exited.len());
        // Taken from the entries as they were read, not gathered into a list first: with
        // ~1,060 processes that list was a copy of ~160 KB (152 bytes an entry) a snapshot.
        let basis = self.basis;
        for (tgid, t) in live.iter() {
            let running_ns = running.remove(&(*tgid, t.start_ns)).unwrap_or(0);
            let reading = basis.reading(t);
            let live = LiveReading {
                tgid: *tgid,
                totals: &reading,
                running_ns,
            };
            self.take_live(host, live, &exited, first_iterator_step, &mut processes);
        }
        // A running task without an entry yet (on its CPU since before the first switch the
        // program saw) is reported with its running stretch alone.
        for ((tgid, start_ns), running_ns) in running.drain() {
            let totals = TaskTotals {
                start_ns,
                ..Default::default()
            };
            let live = LiveReading {
                tgid,
                totals: &totals,
                running_ns,
            };
            self.take_live(host, live, &exited, first_iterator_step, &mut processes);
        }
        self.end_absent(*whole_pass, &mut processes);
        let n_exited = exited.len();
        self.ended.reserve(n_exited);
        for (key, (kept, exit)) in exited.drain() {
            let piece = kept.totals();
            if self.began_unseen(&key) {
                continue;
            }
            let since = self.baselines.exited(key, &piece, self.steps);
            // Ended without having run since the first snapshot.
            if !since.used && !self.reported_before(&key) {
                continue;
            }
            processes.extend(self.exited_usage(host, key, since.totals, &exit));
        }
        trim_map(&mut exited, n_exited);
        self.pending = exited;

        self.ended.advance();
        // Processes that left the map without a record we saw (map full, GC elsewhere).
        let n = self.steps;
        self.known
            .retain(|_, k| n.saturating_sub(k.seen) < u64::from(KNOWN_TTL));
        self.baselines.forget_older(n, u64::from(KNOWN_TTL));
        Step {
            processes,
            gc_removed,
        }
    }

    /// Adds a live reading to `processes`, unless it is held back: a piece of a group that
    /// ended, a group seen beginning before the first snapshot, the first iterator step's
    /// baselines, or a process quiet since the first snapshot.
    fn take_live(
        &mut self,
        host: &mut impl Host,
        live: LiveReading<'_>,
        exited: &Exits,
        first_iterator_step: bool,
        processes: &mut Vec<ProcessUsage>,
    ) {
        let key = host.key(live.tgid, live.totals.start_ns);
        // A piece of a group that already ended (a thread still leaving): its time comes
        // in a later exit record and is reported with the group's final total.
        if exited.contains_key(&key) {
            return;
        }
        // Held for as long as the leftover lasts, however fast snapshots follow each other:
        // reported as live, its own small total would read as time going back.
        if self.ended.refresh(&key) || self.began_unseen(&key) {
            return;
        }
        if first_iterator_step {
            self.baselines.set(key, live.totals, self.steps);
            return;
        }
        let since = self.baselines.live(key, live.totals, self.steps);
        // Quiet since the first snapshot. (One reported before stays reported, even if a
        // pass missed a thread of it: a report never goes back.)
        if !since.used && !self.reported_before(&key) {
            return;
        }
        processes.extend(self.live_usage(host, key, &since.totals, live.running_ns));
    }

    /// A live process's reading; described when first seen or when it moved to another cgroup.
    /// `None` when it is first seen ending or gone and so held back (see [`Self::sighted`]).
    fn live_usage(
        &mut self,
        host: &mut impl Host,
        key: ProcessKey,
        t: &TaskTotals,
        running_ns: u64,
    ) -> Option<ProcessUsage> {
        let n = self.steps;
        let k = match self.known.entry(key) {
            Entry::Occupied(o) => {
                let k = o.into_mut();
                // Described again when it moved to another cgroup (e.g. a runtime placing a
                // container's first process after forking it); what was reported stays, and
                // so does the description /proc can no longer improve on.
                if t.cgroup_id != 0 && k.cgroup_id != t.cgroup_id {
                    if let Some(info) = Self::sighted(self.basis, host, key, t) {
                        k.info = info;
                        k.cgroup_id = t.cgroup_id;
                    }
                }
                k
            }
            Entry::Vacant(v) => v.insert(Known {
                info: Self::sighted(self.basis, host, key, t)?,
                cgroup_id: t.cgroup_id,
                seen: n,
                last_cpu_ns: t.cpu_ns,
                reported: Reported::default(),
                start_ns: t.start_ns,
                switches: 0,
            }),
        };
        k.seen = n;
        k.last_cpu_ns = t.cpu_ns;
        k.switches = t.switches;
        let cpu_ns = k.reported.update(t.cpu_ns.saturating_add(running_ns));
        Some(ProcessUsage {
            key,
            cpu_time: Duration::from_nanos(cpu_ns),
            info: k.info.clone(),
            exited: false,
            counters: self.measured.counters(t),
        })
    }

    /// The description of a process a pass read alive, or `None` to hold it back from this
    /// snapshot: it loses nothing, as its end reports all its time. One ending where /proc
    /// cannot say where it ran is reported at its end (see [`Sighting::Ending`]): described
    /// from /proc it would be credited to the root's workload, and on the kernel basis also
    /// to its own cgroup's, by that cgroup's counter. One gone is held back too on the kernel
    /// basis: its description could name no usage counter, so its cgroup's would credit its
    /// time again. On the final-switch basis it is described from what BPF knows, and its
    /// record later names it.
    fn sighted(
        basis: Basis,
        host: &mut impl Host,
        key: ProcessKey,
        t: &TaskTotals,
    ) -> Option<Arc<ProcessInfo>> {
        match host.describe_live(key, t) {
            Sighting::Described(info) => Some(info),
            Sighting::Ending => None,
            Sighting::Gone if basis == Basis::Kernel => None,
            Sighting::Gone => Some(host.describe(key, t, None)),
        }
    }

    /// An exited group's final reading. A late piece of a group reported recently adds to its
    /// totals and reports them again, unless the group was found gone from a pass (it was then
    /// reported on the kernel basis, and a record is on the other).
    fn exited_usage(
        &mut self,
        host: &mut impl Host,
        key: ProcessKey,
        piece: TaskTotals,
        exit: &ExitInfo,
    ) -> Option<ProcessUsage> {
        let (totals, info, mut reported) = match self.ended.remove(&key) {
            Some(e) if e.last => {
                self.ended.insert(key, e);
                return None;
            }
            Some(e) => {
                let mut totals = e.totals.totals();
                totals.add(&piece);
                (totals, e.info, e.reported)
            }
            None => {
                let known = self.known.remove(&key);
                let reported = known.as_ref().map(|k| k.reported).unwrap_or_default();
                let info = match known {
                    // Described while alive: /proc told more (exe, cmdline) than BPF can.
                    Some(k) if !k.info.comm.is_empty() || exit.has_no_comm() => k.info,
                    _ => host.describe(key, &piece, Some(exit)),
                };
                (piece, info, reported)
            }
        };
        let cpu_ns = reported.update(totals.cpu_ns);
        let usage = ProcessUsage {
            key,
            cpu_time: Duration::from_nanos(cpu_ns),
            info: info.clone(),
            exited: true,
            counters: self.measured.counters(&totals),
        };
        let ended = Ended {
            totals: Kept::new(&totals),
            info,
            reported,
            last: false,
        };
        self.ended.insert(key, ended);
        Some(usage)
    }
}

#[cfg(test)]
mod tests;

//! Iterator accounting on the source's side: choosing it, turning to it, and each snapshot's
//! pass (see `bpf/kepler.bpf.c` and [`crate::accounting`]).

use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::time::Duration;

use aya::maps::{HashMap as BpfHashMap, Map, MapData};
use kepler_core::ReadError;

use super::{Accounting, EbpfSource};
use crate::abi::{kstat, names, PassFill, TaskTotals};
use crate::exits::Rates;
use crate::live_table::LiveTable;
use crate::mapped::{map_array, Mapping};
use crate::pass_out::PassOut;
use crate::probes::OptionalProbe;
use crate::reconcile::{Basis, Keys};
use crate::{proc, unseen, HostLoad};

/// Why the source stays with `sched_switch` when it weighed the host.
const SWITCH_CHEAPER: &str = "sched_switch (a task iterator pass per snapshot would cost more)";

impl EbpfSource {
    /// Turns to iterator accounting, before the first snapshot: `kepler_exit`, which acts
    /// only on a thread's final switch, takes `kepler_switch`'s place on `sched_switch`, and
    /// each snapshot runs the task iterator. Returns why not when it stays with `sched_switch`
    /// accounting (see `iterator_blocked`).
    pub fn use_task_iterator(&mut self) -> Result<(), String> {
        if self.accounting == Accounting::Iterator {
            return Ok(());
        }
        self.iterator_blocked()?;
        let unseen = self.find_unseen();
        self.turn_to_iterator(unseen, None)?;
        tracing::info!("eBPF accounting: task iterator (asked for)");
        Ok(())
    }

    /// Chooses the accounting that costs this host less (see [`HostLoad`]), where the task
    /// iterator can be used at all; logs which and why.
    pub(super) fn choose_accounting(&mut self) {
        if let Err(why) = self.iterator_blocked() {
            tracing::info!(%why, "eBPF accounting: sched_switch");
            return;
        }
        let Some(load) = self.host_load() else {
            tracing::info!("eBPF accounting: sched_switch (/proc says nothing of the load)");
            return;
        };
        if !load.prefers_iterator(self.interval) {
            self.log_choice(&load, SWITCH_CHEAPER);
            return;
        }
        // Which processes a pass misses (read from /proc instead, at a price) is known only
        // after one.
        let unseen = self.find_unseen();
        let root = self.procfs.root().to_path_buf();
        let load = HostLoad {
            unseen_threads: unseen.iter().map(|&pid| unseen::threads(&root, pid)).sum(),
            ..load
        };
        if !load.prefers_iterator(self.interval) {
            self.clear_entries();
            self.log_choice(&load, SWITCH_CHEAPER);
            return;
        }
        let rates = Rates {
            forks_per_s: load.forks_per_s,
            switches_per_s: load.switches_per_s,
        };
        match self.turn_to_iterator(unseen, Some(rates)) {
            Ok(()) => self.log_choice(
                &load,
                "task iterator once per snapshot (charging every switch would cost more)",
            ),
            Err(why) => {
                self.clear_entries();
                tracing::info!(%why, "eBPF accounting: sched_switch");
            }
        }
    }

    /// Logs the accounting chosen and the figures it was chosen on.
    fn log_choice(&self, load: &HostLoad, chosen: &str) {
        tracing::info!(
            threads = load.threads,
            quiet_processes = load.quiet_processes,
            unseen_threads = load.unseen_threads,
            switches_per_s = load.switches_per_s.round(),
            interval = ?self.interval,
            "eBPF accounting: {chosen}"
        );
    }

    /// Deletes every entry of the process map, after a pass when the source stays with
    /// `sched_switch`: the pass made one for every process, which `sched_switch` only makes
    /// for those that run. Gone before the first snapshot, they cost nothing and lose nothing
    /// (a process that runs again gets its entry back, counting from then). The slots go too,
    /// after the entries: a group holding one would otherwise charge it with no entry to be
    /// read by (see `crate::slots`).
    pub(super) fn clear_entries(&mut self) {
        if self.read_live().is_err() {
            return;
        }
        let tgids: Vec<u32> = self.observed.live.keys().copied().collect();
        if let Some(map) = self.ebpf.map_mut(names::TASKS) {
            // One gone meanwhile (its group ended) needs no delete.
            super::delete_entries(map, &tgids, &mut Vec::new());
        }
        if let Some(map) = self.ebpf.map_mut(names::SLOTS) {
            // Only the slots of the entries read: all 16,384 read through the mapping would
            // leave 1 MiB of it resident.
            crate::slots::free_slots_of(map, &self.slots, &tgids);
        }
    }

    /// Why the task iterator cannot be used: none on this kernel, an optional probe still
    /// counting per switch, or a snapshot taken already (the attribution must know from its
    /// first snapshot on how the readings count).
    fn iterator_blocked(&self) -> Result<(), String> {
        if self.snapshot_taken {
            return Err("snapshots were taken with sched_switch accounting already".into());
        }
        if self.ebpf.iter_link().is_none() {
            return Err(format!("task iterator {}", self.probes.task_iterator));
        }
        match OptionalProbe::ALL
            .into_iter()
            .find(|p| self.probes.state(*p).is_active())
        {
            Some(probe) => Err(format!("{} counts per switch", probe.name())),
            None => Ok(()),
        }
    }

    /// Turns to iterator accounting, with exits exact or counted as the setting and the node's
    /// `rates` since load say (see [`crate::exits`]).
    fn turn_to_iterator(&mut self, unseen: Vec<u32>, rates: Option<Rates>) -> Result<(), String> {
        self.pass_reads = PassReads::new(&self.ebpf);
        let basis = self.initial_basis(rates);
        let turned = match basis {
            Basis::FinalSwitch => self.ebpf.put_exit_in_switch_place(),
            Basis::Kernel => self.ebpf.take_switch_out(),
        };
        if let Err(why) = turned {
            self.pass_reads = None;
            return Err(why);
        }
        self.accounting = Accounting::Iterator;
        self.stats.task_iterator.store(true, Ordering::Relaxed);
        self.stats
            .exits_counted
            .store(basis == Basis::Kernel, Ordering::Relaxed);
        self.reconciler.use_iterator();
        self.reconciler
            .rebase(&self.procfs, &LiveTable::default(), basis);
        tracing::info!(
            exits = match basis {
                Basis::FinalSwitch => "exact (kepler_exit)",
                Basis::Kernel => "counted through cgroup usage counters",
            },
            "eBPF task iterator"
        );
        if !unseen.is_empty() {
            tracing::info!(
                pids = ?unseen,
                "the task iterator does not visit these processes: read from /proc instead"
            );
        }
        let root = self.procfs.root().to_path_buf();
        self.unseen = unseen
            .into_iter()
            .map(|pid| unseen::Unseen::new(&root, pid))
            .collect();
        Ok(())
    }

    /// The host's threads, switch rate (measured since load, over at least a second: a shorter
    /// window is waited out) and processes that did not run since load (no entry in the map).
    /// `None` when /proc or the map does not say. No unseen threads yet.
    fn host_load(&mut self) -> Option<HostLoad> {
        // A whole second, because much of what wakes does so once a second, often in step
        // (timers started together): a quarter-second window read 1,000 such processes as 420
        // switches/s where a second reads 2,080, and most of them as quiet.
        const WINDOW: Duration = Duration::from_secs(1);
        let (at_load, since) = self.loaded_counts?;
        if let Some(rest) = WINDOW.checked_sub(since.elapsed()) {
            std::thread::sleep(rest);
        }
        let now = self
            .procfs
            .read_node_stat()
            .ok()
            .as_ref()
            .and_then(super::exits::counts)?;
        let elapsed = since.elapsed().as_secs_f64();
        self.read_live().ok()?;
        let ran = self.observed.live.len() as u64;
        let processes = unseen::pids(self.procfs.root()).len() as u64;
        Some(HostLoad {
            threads: proc::threads(&self.procfs)?,
            unseen_threads: 0,
            quiet_processes: processes.saturating_sub(ran),
            switches_per_s: now.1.saturating_sub(at_load.1) as f64 / elapsed,
            forks_per_s: now.0.saturating_sub(at_load.0) as f64 / elapsed,
        })
    }

    /// One pass of the task iterator, which rewrites every live group's entry; false when it
    /// failed (or there is no iterator), and what it wrote may be part of a pass.
    pub(super) fn run_pass(&mut self) -> bool {
        let Some(link) = self.ebpf.iter_link() else {
            return false;
        };
        match crate::task_iter::run_pass(link) {
            Ok(()) => true,
            Err(error) => {
                tracing::warn!(%error, "eBPF task iterator pass failed: readings stay as they were");
                self.stats.map_read_errors.fetch_add(1, Ordering::Relaxed);
                false
            }
        }
    }

    /// The processes /proc lists before and after a pass that the pass did not read (see
    /// [`crate::unseen`]).
    fn find_unseen(&mut self) -> Vec<u32> {
        let root = self.procfs.root().to_path_buf();
        let before = unseen::pids(&root);
        self.run_pass();
        if self.read_live().is_err() {
            return Vec::new();
        }
        let after = unseen::pids(&root);
        let missed: Vec<u32> = before
            .intersection(&after)
            .filter(|pid| !self.observed.live.contains_key(pid))
            .copied()
            .collect();
        // The iterator skips ended threads on purpose (their final switch counts them).
        missed
            .into_iter()
            .filter(|&pid| matches!(self.procfs.process_key_ended(pid), Some((_, false))))
            .collect()
    }

    /// Puts the processes the iterator does not visit into `observed.live`, from /proc: their
    /// live threads' runtime, plus their ended threads' part that `kepler_exit` keeps in their
    /// entry (if one of them ended already).
    pub(super) fn read_unseen(&mut self) {
        for process in &mut self.unseen {
            let pid = process.pid;
            let Some(unseen::UnseenReading {
                key,
                runtime_ns: runtime,
                slices,
            }) = process.read(&mut self.procfs)
            else {
                continue;
            };
            let start_ns = u64::try_from(key.start_time.as_nanos()).unwrap_or(u64::MAX);
            let ended = self
                .observed
                .live
                .get(&pid)
                .filter(|t| self.procfs.key(pid, t.start_ns) == key)
                .copied()
                .unwrap_or_default();
            let cpu_ns = ended.dead_ns.saturating_add(runtime);
            let switches = ended.dead_switches.saturating_add(slices);
            // /proc has no reading of the kernel's basis per thread group in ns: both are the
            // same here, what its released threads left aside (their cgroup's counter holds it).
            let totals = TaskTotals {
                start_ns,
                cgroup_id: ended.cgroup_id,
                cpu_ns,
                switches,
                sig_ns: cpu_ns,
                sig_switches: switches,
                ..ended
            };
            self.observed.live.insert(pid, totals);
        }
    }
}

/// Snapshots between two reads of the whole process map while passes are read from their
/// output: the entries no pass rewrites (a group whose every thread is leaving; an entry made
/// after the pass) are then in a reading at least once a minute at a 5 s interval.
const FULL_READ_EVERY: u32 = 12;

/// Reading passes from `pass_out` rather than from the process map, and when not to.
pub(super) struct PassReads {
    out: PassOut,
    /// `pass_fill`, mapped.
    fill: Mapping<PassFill>,
    /// Snapshots since the process map was last read whole.
    since_full: u32,
    /// The `kstats` counts of exits deferred (their entries wait in the map, marked) and of
    /// passes that ran out of slots, at the last whole read: a change means the map holds
    /// what the slots do not.
    counts_at_full: (u64, u64),
}

impl PassReads {
    /// `None` when the arrays cannot be mapped (a kernel before 5.5, or maps without the
    /// flag): every pass is then read from the process map, as before.
    fn new(ebpf: &crate::loader::Attached) -> Option<PassReads> {
        let Some(Map::Array(data)) = ebpf.map(names::PASS_OUT) else {
            return None;
        };
        let mapped = data
            .info()
            .map_err(|e| std::io::Error::other(e.to_string()))
            .and_then(|info| {
                let slots = usize::try_from(info.max_entries()).unwrap_or(0);
                PassOut::map(data.fd().as_fd(), slots)
            });
        match mapped.and_then(|out| Ok((out, map_array(ebpf, names::PASS_FILL)?))) {
            Ok((out, fill)) => Some(PassReads {
                out,
                fill,
                since_full: FULL_READ_EVERY,
                counts_at_full: (0, 0),
            }),
            Err(error) => {
                tracing::info!(%error, "task iterator passes are read from the process map");
                None
            }
        }
    }

    /// The number of the last pass (its iterator session).
    pub(super) fn pass_id(&self) -> Option<u32> {
        self.fill.get(0).map(|f| f.pass)
    }

    #[cfg(test)]
    pub(super) fn since_full(&self) -> u32 {
        self.since_full
    }

    #[cfg(test)]
    pub(super) fn out_mut(&mut self) -> &mut PassOut {
        &mut self.out
    }
}

impl EbpfSource {
    /// The readings of the pass just run (`whole`: it ran to its end) into `observed.live`:
    /// from the pass output, unless the process map may hold entries the pass did not rewrite
    /// that a reading needs (exits deferred, a pass out of slots or cut short, the periodic
    /// whole read), in which case the whole map is read.
    pub(super) fn read_pass(&mut self, whole: bool) -> Result<(), ReadError> {
        if self.pass_reads.is_none() {
            return self.read_live();
        }
        let counts = (
            self.kstat(kstat::EXITS_DEFERRED),
            self.kstat(kstat::PASS_OUT_FULL),
        );
        let Some(reads) = self.pass_reads.as_mut() else {
            return self.read_live();
        };
        let fill = reads.fill.get(0);
        reads.since_full += 1;
        let used = match fill {
            Some(fill)
                if whole
                    && reads.since_full < FULL_READ_EVERY
                    && counts == reads.counts_at_full =>
            {
                fill.used
            }
            _ => {
                reads.since_full = 0;
                reads.counts_at_full = counts;
                return self.read_live();
            }
        };
        let used = usize::try_from(used).unwrap_or(usize::MAX);
        if let Err(error) = reads.out.reserve(used) {
            tracing::warn!(%error, "mapping more of the task iterator's output");
            self.pass_reads = None;
            return self.read_live();
        }
        let live = &mut self.observed.live;
        live.clear();
        // A tgid met twice in a pass (reused within it) keeps the later slot, the entry the map
        // holds after the pass.
        let pass = fill.map_or(0, |f| f.pass);
        live.extend(reads.out.slots(used).map(|slot| {
            let t = TaskTotals {
                pass,
                ..slot.totals()
            };
            (slot.tgid, t)
        }));
        self.unseen_entries();
        Ok(())
    }

    /// The process map's entries of the processes the iterator does not visit, which hold
    /// their ended threads' part (`read_unseen` adds their live threads from /proc).
    fn unseen_entries(&mut self) {
        let Some(map) = self.ebpf.map(names::TASKS) else {
            return;
        };
        let Ok(tasks) = BpfHashMap::<&MapData, u32, TaskTotals>::try_from(map) else {
            return;
        };
        for process in &self.unseen {
            if let Ok(t) = tasks.get(&process.pid, 0) {
                self.observed.live.insert(process.pid, t);
            }
        }
    }
}

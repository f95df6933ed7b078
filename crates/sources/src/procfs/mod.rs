//! The procfs usage source: node CPU times from `/proc/stat`, per-process CPU time from
//! `/proc/<pid>/stat` (between `stat` reads from the group's CPU clock where the tree is of
//! the agent's own pid namespace, else from the main thread's `schedstat` where that thread is
//! the whole process and no task started, and a kernel thread's held `schedstat`: [`credit`],
//! [`clock`]), new processes found at the pids given out since where the tree is the agent's
//! own and by a listing elsewhere ([`discover`]),
//! what identifies a process read once when it first appears, and the usage counters of the
//! cgroups that count the processes ([`crate::cgroups`]), through which the time of processes
//! no scan saw reaches their container, pod or VM. The processes of a cgroup in which nothing
//! ran since the scan before are not read at all ([`ProcfsSource::taken_unread`]).
//!
//! The reads themselves are in [`ProcfsReader`], public so that other sources (eBPF) read node
//! CPU times and describe processes exactly as this one does.

mod budget;
mod clock;
mod credit;
mod discover;
mod parse;
pub(crate) mod read;
mod reader;

#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod held_tests;
#[cfg(test)]
mod leader_tests;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fmt::Write as _;
use std::fs::{self, File};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::{
    Classifier, ProcessInfo, ProcessKey, ProcessUsage, ReadError, Unavailable, UsageSnapshot,
    UsageSource,
};

use crate::cgroups::{Counting, UsageCounters};

pub use clock::read_clock;
pub use reader::{NodeStat, ProcessDescription, ProcessState, ProcfsReader};

use credit::{Credit, Runtime};
use discover::Discovery;

use parse::{PidStat, PF_KTHREAD};
use read::io_error;

/// A process as last seen, so its identity is read once per (pid, start time).
struct Cached {
    start_ticks: u64,
    info: Arc<ProcessInfo>,
    /// The snapshot that last saw the pid; older entries are evicted after each scan.
    generation: u64,
    /// Its `stat`, kept open to be read again each scan (see [`MAX_HELD_STAT_FILES`]).
    stat: Option<File>,
    /// Its `schedstat`, kept open while it has one thread (see [`credit`]), within the same
    /// bound, where the group's CPU clock cannot be read ([`clock`]): a kernel thread's, and
    /// any single-threaded process's.
    schedstat: Option<File>,
    credit: Credit,
    /// Its main thread was asleep at its last `stat` read and has not run since: it must run
    /// before it can end, and then moves its cgroup's counter (see
    /// [`ProcfsSource::read_unmoved`]).
    asleep: bool,
}

/// How many `stat` files stay open between scans, at most. Reading one again through the
/// same descriptor costs one `pread` instead of a path lookup, an open, two reads and a close:
/// 2.9 instead of 7.5 µs per process here, 4.1 instead of 10 µs with 1,000 more processes
/// (`bench/procfs_pread.py`). Each costs a descriptor and ~4.3 KiB of kernel memory, though
/// (procfs keeps the file's text buffer while it is open), so only the first processes seen
/// are held: all of them on most nodes, the long-lived ones on larger ones, for at most
/// ~4.3 MiB. Where the group's CPU clock cannot be read, as many `schedstat` files may be held
/// beside them, for kernel threads and other single-threaded processes (~4 KiB each likewise).
const MAX_HELD_STAT_FILES: usize = 1024;

/// The longest a process is read through its main thread's `schedstat` before its `stat` is
/// read again (when no task starts on the node; a kernel thread whatever starts): an exec or a
/// kernel thread's new name, which `stat` shows and `schedstat` does not, is then seen within
/// this time.
const STAT_AT_LEAST_EVERY: Duration = Duration::from_secs(30);

/// How a scan may read the processes it knows (see [`credit`]).
#[derive(Clone, Copy, Default)]
struct ScanReads {
    /// Through the main thread's `schedstat` where it stands for the process, or the group's
    /// CPU clock: no task was created since the scan before.
    by_leader: bool,
    /// Kernel threads through their held `schedstat` even when tasks were created: a kernel
    /// thread's group never gains a thread (kthreadd starts each one as a group of its own),
    /// so its main thread is always the whole of it, and a held file reads its own process
    /// or fails, so no process that took the pid since can pass for it. On a node where
    /// something starts every second (probes, cron, a build) the kernel threads, most of
    /// the processes of an idle node, are then no longer read through `stat` every scan.
    kthreads_by_leader: bool,
    /// Read single-threaded processes' `schedstat` (or any process's CPU clock) after their
    /// `stat`, so the next scan may read them by it: this scan or the one before saw no task
    /// created.
    baselines: bool,
    /// Through the group's CPU clock whether or not tasks were created, where the tree is of
    /// the agent's own pid namespace: the clock counts every thread, those that started and
    /// ended since the scan before too, and a pid that may have changed hands since is
    /// checked after the scan ([`ProcfsSource::check_read_by_pid`]). On a node where
    /// something starts every second (probes, cron, a build) no scan is quiet, and every
    /// process would otherwise be read through `stat`.
    by_clock: bool,
}

/// How [`ProcfsSource::load_held_stat`] read a `stat`.
enum HeldRead {
    /// Through the file kept for the pid.
    Kept,
    /// Through a file opened now, to be kept.
    Opened(File),
    /// Not, the file budget being spent: the caller reads by path.
    None,
    /// Not: no process is at the pid any more. A read by path would fail the same way, at the
    /// cost of another failed open: under churn a listing names many processes that ended
    /// before the scan came to them.
    Gone,
}

/// Why [`ProcfsSource::read_process`] reported no usage for a pid.
enum Missed {
    /// Its files could not be read, or it is gone: [`ProcfsSource::ended`] tells which.
    Unread,
    /// Left to its cgroup's counter as a process in its exit (see `zombies_to_counters`): as
    /// good as ended for the scan's completeness.
    LeftToCounters,
}

/// What [`ProcfsSource::read_unmoved`] found of a known process.
enum Unmoved {
    /// Its cgroup is quiet and it was asleep: here it is as last read.
    Unread(ProcessUsage),
    /// Its cgroup is quiet, but it ran after its last `stat` read.
    StateUnknown,
    No,
}

/// Reads usage from a procfs tree (`host.procfs`, normally `/proc`).
pub struct ProcfsSource {
    reader: ProcfsReader,
    classifier: Arc<dyn Classifier>,
    cache: HashMap<u32, Cached>,
    generation: u64,
    last_count: usize,
    /// `stat` files held now (an upper bound within a scan, exact after it).
    held: usize,
    /// `schedstat` files held now, likewise.
    held_schedstat: usize,
    /// The most of each kind that may be held in this scan: [`budget::held_stat_budget`] of
    /// `held_cap`.
    held_budget: usize,
    held_cap: usize,
    /// The open-file limit the budget is a share of, asked for now and then.
    file_limit: budget::FileLimit,
    /// The node's fork count read before the last scan that found every process (a listing of
    /// the tree that read every process it named, or a probe of the pids given out: see
    /// [`discover`]), kept while each scan since read every process known. While the count
    /// stays the same no process can have started, so the known ones are read without a
    /// listing (which costs about as much as reading every `stat` again).
    listed_at_forks: Option<u64>,
    /// The last pid given out, read at the start of that scan (after the fork count): every
    /// process at a pid given out up to it is known ([`discover`]).
    discovered_to: Option<u64>,
    /// How the last scan found new processes, for the tests that check that a scan probed
    /// rather than listed.
    #[cfg(test)]
    discovery: Discovery,
    /// Buffers of [`Self::read_known`], kept between scans.
    known_pids: Vec<u32>,
    pid_name: String,
    /// Whether `schedstat` counts runtime on this tree (procfs' own, with the kernel's
    /// scheduler statistics).
    schedstat_counts: bool,
    /// Whether the tree is of this process's pid namespace, so that a pid's CPU clock is of
    /// the process the tree lists under it ([`clock::tree_is_own`]).
    group_clock: bool,
    /// The processes this scan read through their CPU clock, checked after it
    /// ([`Self::check_read_by_pid`]); kept between scans as a buffer.
    read_by_pid: Vec<u32>,
    /// The most pids the kernel gives out, read once ([`clock::pid_max`]).
    pid_max: Option<u64>,
    /// The last pid given out and the fork count, both read at the start of the scan before:
    /// a pid the kernel gave out since may have changed hands since that scan's reads.
    pid_cursor_before: (Option<u64>, Option<u64>),
    /// The node's fork count at the scan before, and whether it had moved then.
    forks_before: Option<u64>,
    quiet_before: bool,
    /// Uptime at the last scan that read every process through `stat`.
    all_stat_at: Option<Duration>,
    reads: ScanReads,
    /// The usage counters of the cgroups that count the processes, where the agent sees a
    /// counting hierarchy (see [`crate::cgroups`]): the time of processes that started and
    /// ended between two scans, and of the last moments of those that ended, reaches their
    /// cgroup's workload through them.
    counters: Option<UsageCounters>,
    /// Whether a process first met with its whole group in its exit
    /// ([`PidStat::group_ending`]) is left out of the snapshot, its time left to its cgroup's
    /// counter: so it is where the counters read a v1 `cpuacct` hierarchy. There its `cgroup`
    /// file shows the root, while its cgroup's counter holds all its time, which reaches that
    /// cgroup's workload as the time of an ended process no scan saw. Reported, it would be
    /// counted twice, in the root and in its cgroup's remainder. On the unified hierarchy the
    /// file still names its cgroup.
    zombies_to_counters: bool,
    /// Processes the last scan took unread (see [`Self::read_unmoved`]).
    taken_unread: usize,
}

impl ProcfsSource {
    /// Checks that the tree has readable `stat` and `uptime` files; processes are read on
    /// each `snapshot()`.
    pub fn new(procfs_root: PathBuf, classifier: Arc<dyn Classifier>) -> Result<Self, Unavailable> {
        let mut source = ProcfsSource {
            reader: ProcfsReader::new(procfs_root)?,
            classifier,
            cache: HashMap::new(),
            generation: 0,
            last_count: 0,
            held: 0,
            held_schedstat: 0,
            held_budget: 0,
            held_cap: MAX_HELD_STAT_FILES,
            file_limit: budget::FileLimit::default(),
            listed_at_forks: None,
            discovered_to: None,
            #[cfg(test)]
            discovery: Discovery::List,
            known_pids: Vec::new(),
            pid_name: String::new(),
            schedstat_counts: false,
            group_clock: false,
            read_by_pid: Vec::new(),
            pid_max: None,
            pid_cursor_before: (None, None),
            forks_before: None,
            quiet_before: false,
            all_stat_at: None,
            reads: ScanReads::default(),
            counters: None,
            zombies_to_counters: false,
            taken_unread: 0,
        };
        let reader = &mut source.reader;
        reader
            .read_node_cpu_times()
            .and_then(|_| reader.read_uptime())
            .map_err(|e| Unavailable::new(format!("procfs at {}: {e}", reader.root().display())))?;
        source.schedstat_counts = source.reader.schedstat_counts();
        source.group_clock = clock::tree_is_own(source.reader.root());
        source.pid_max = clock::pid_max(source.reader.root());
        if let Some(counting) = Counting::detect(source.reader.root()) {
            source.reader.name_usage_cgroups(&counting);
            source.zombies_to_counters = counting.cpuacct.is_some();
            source.counters = Some(UsageCounters::new(counting));
        }
        Ok(source)
    }

    /// How many processes the last scan took as they were, unread: those of the cgroups in
    /// which nothing ran since the scan before (see [`Self::read_unmoved`]).
    pub fn taken_unread(&self) -> usize {
        self.taken_unread
    }

    /// Reads the process's `stat` into the reader's buffer through a held file: the one kept
    /// for `pid`, else a new one while the budget allows.
    fn load_held_stat(&mut self, pid: u32, pid_name: &OsStr) -> HeldRead {
        if let Some(cached) = self.cache.get_mut(&pid) {
            if let Some(file) = &cached.stat {
                if self.reader.load_stat_at(file).is_ok() {
                    return HeldRead::Kept;
                }
                // Its process is gone; the pid may name another one now, unless its clock says
                // that no thread group is there (a clock read costs a tenth of a failed open).
                cached.stat = None;
                if self.ended(pid) {
                    return HeldRead::Gone;
                }
            }
        }
        if self.held >= self.held_budget {
            return HeldRead::None;
        }
        let read = self
            .reader
            .open_stat(pid_name)
            .and_then(|file| self.reader.load_stat_at(&file).map(|()| file));
        match read {
            Ok(file) => {
                self.held += 1;
                HeldRead::Opened(file)
            }
            Err(e) if read::is_vanished(&e) => HeldRead::Gone,
            // Anything else is read by path, which logs it.
            Err(_) => HeldRead::None,
        }
    }

    /// The process at `pid` through the runtime its baseline was read from, the main thread's
    /// `schedstat` or the group's CPU clock, where [`Credit`] lets it stand for the whole
    /// process this scan; `None` where not, or when the read fails (the caller then reads
    /// `stat`). A `schedstat` not held is read by path (while no task starts, no other
    /// process can have taken the pid), and the clock by pid, checked after the scan
    /// ([`Self::check_read_by_pid`]).
    fn read_by_leader(&mut self, pid: u32, pid_name: &OsStr) -> Option<ProcessUsage> {
        let generation = self.generation;
        let cached = self.cache.get_mut(&pid)?;
        if !cached.credit.leader_suffices(generation) {
            return None;
        }
        let runtime = match cached.credit.leader_runtime() {
            Some(Runtime::Group(_)) => {
                let read = clock::group_runtime(pid).map(Runtime::Group);
                if read.is_some() {
                    self.read_by_pid.push(pid);
                }
                read
            }
            _ => match &cached.schedstat {
                Some(file) => self.reader.read_runtime_at(file),
                None => self.reader.read_runtime(pid_name),
            }
            .map(Runtime::Leader),
        };
        let Some(runtime) = runtime else {
            // Gone, or an odd line: `stat` says which.
            cached.schedstat = None;
            return None;
        };
        cached.generation = generation;
        // Still asleep only if it has not run since: a thread that ran may be ending now.
        cached.asleep &= cached.credit.leader_runtime() == Some(runtime);
        Some(ProcessUsage {
            key: ProcessKey {
                pid,
                start_time: parse::ticks_to_duration(cached.start_ticks, self.reader.user_hz()),
            },
            cpu_time: cached.credit.credit_leader(runtime, generation),
            info: cached.info.clone(),
            exited: false,
            counters: None,
        })
    }

    /// Reads the runtime of a process just read through `stat`, for the next scan's
    /// [`Self::read_by_leader`]: a single thread's through its `schedstat`, held while the
    /// budget allows; else the group's CPU clock where the tree allows; else that `schedstat`
    /// by path. (A process reused the pid since its `stat` read only if a task started, and
    /// then the next scan reads `stat` again.)
    fn read_leader_baseline(&mut self, pid: u32, pid_name: &OsStr) {
        let Some(cached) = self.cache.get_mut(&pid) else {
            return;
        };
        let through_schedstat = self.schedstat_counts && cached.credit.single();
        // Where the clock can be read no `schedstat` is held, a kernel thread's neither: the
        // clock is read whatever starts, the pids given out since checked after the scan, and
        // costs about half a held file's `pread` (`bench/procfs_clock.sh`).
        let hold = through_schedstat && !self.group_clock;
        if hold && cached.schedstat.is_none() && self.held_schedstat < self.held_budget {
            if let Ok(file) = self.reader.open_schedstat(pid_name) {
                self.held_schedstat += 1;
                cached.schedstat = Some(file);
            }
        }
        let runtime = match &cached.schedstat {
            Some(file) if through_schedstat => {
                self.reader.read_runtime_at(file).map(Runtime::Leader)
            }
            _ if self.group_clock => clock::group_runtime(pid).map(Runtime::Group),
            None if through_schedstat => self.reader.read_runtime(pid_name).map(Runtime::Leader),
            _ => None,
        };
        match runtime {
            Some(runtime) => cached.credit.set_leader(runtime, self.generation),
            None => cached.schedstat = None,
        }
    }

    /// The process at `pid` as last read, unread, where the cgroup that counts it is quiet
    /// ([`UsageCounters::check_quiet`]: no task in it ran since the scan before) and its main
    /// thread was asleep at its last read. Its CPU time is then what it was, and the pid still
    /// names it, even in a scan after tasks started elsewhere: it could not end (nor the pid go
    /// to another process) without running its exit in that cgroup.
    fn read_unmoved(&mut self, pid: u32) -> Unmoved {
        let Some(counters) = self.counters.as_ref() else {
            return Unmoved::No;
        };
        let Some(cached) = self.cache.get_mut(&pid) else {
            return Unmoved::No;
        };
        let quiet = cached
            .info
            .usage_cgroup
            .as_deref()
            .is_some_and(|cgroup| counters.quiet(cgroup));
        if !quiet {
            return Unmoved::No;
        }
        if !cached.asleep {
            return Unmoved::StateUnknown;
        }
        cached.generation = self.generation;
        cached.credit.carry_leader(self.generation);
        self.taken_unread += 1;
        Unmoved::Unread(ProcessUsage {
            key: ProcessKey {
                pid,
                start_time: parse::ticks_to_duration(cached.start_ticks, self.reader.user_hz()),
            },
            cpu_time: cached.credit.credited(),
            info: cached.info.clone(),
            exited: false,
            counters: None,
        })
    }

    fn read_process(&mut self, pid: u32, pid_name: &OsStr) -> Result<ProcessUsage, Missed> {
        let by_leader = match self.read_unmoved(pid) {
            Unmoved::Unread(usage) => return Ok(usage),
            // Its `stat` tells whether it is asleep, for the next scan.
            Unmoved::StateUnknown => false,
            Unmoved::No => {
                self.reads.by_leader || self.kthread_held_leader(pid) || self.clock_baseline(pid)
            }
        };
        if by_leader {
            if let Some(usage) = self.read_by_leader(pid, pid_name) {
                return Ok(usage);
            }
        }
        let usage = self.read_by_stat(pid, pid_name)?;
        // The group's clock is taken whether or not tasks start, for processes of any thread
        // count, kernel threads too. Elsewhere so is a kernel thread's `schedstat` where it is
        // or can be held: only a held one may be read while tasks start.
        let baseline = self.cache.get(&pid).is_some_and(|c| {
            let holds = c.schedstat.is_some() || self.held_schedstat < self.held_budget;
            let single = c.credit.single();
            (self.reads.baselines && single)
                || self.group_clock
                || (single && self.schedstat_counts && c.info.kernel_thread && holds)
        });
        if baseline {
            self.read_leader_baseline(pid, pid_name);
        }
        Ok(usage)
    }

    /// Whether `pid` is a kernel thread whose held `schedstat` this scan may read it through
    /// (see [`ScanReads::kthreads_by_leader`]; [`Self::read_by_leader`] checks its baseline).
    fn kthread_held_leader(&self, pid: u32) -> bool {
        self.reads.kthreads_by_leader
            && self
                .cache
                .get(&pid)
                .is_some_and(|c| c.info.kernel_thread && c.schedstat.is_some())
    }

    /// Whether `pid` has a baseline of its group's CPU clock this scan may read it through
    /// (see [`ScanReads::by_clock`]; [`Self::read_by_leader`] checks that it is the last
    /// scan's).
    fn clock_baseline(&self, pid: u32) -> bool {
        self.reads.by_clock
            && self
                .cache
                .get(&pid)
                .is_some_and(|c| matches!(c.credit.leader_runtime(), Some(Runtime::Group(_))))
    }

    fn read_by_stat(&mut self, pid: u32, pid_name: &OsStr) -> Result<ProcessUsage, Missed> {
        let user_hz = self.reader.user_hz();
        let held = self.load_held_stat(pid, pid_name);
        let stat = match held {
            HeldRead::None => self.reader.read_stat(pid_name),
            HeldRead::Gone => return Err(Missed::Unread),
            HeldRead::Kept | HeldRead::Opened(_) => self.reader.parse_loaded_stat(pid),
        };
        let opened = match held {
            HeldRead::Opened(file) => Some(file),
            HeldRead::Kept | HeldRead::None | HeldRead::Gone => None,
        };
        let stat = stat.ok_or(Missed::Unread)?;
        let (group_ending, leader) = (stat.group_ending(), stat.leader());
        let PidStat {
            comm,
            asleep,
            flags,
            utime,
            stime,
            threads,
            start_time,
            ..
        } = stat;
        let key = ProcessKey {
            pid,
            start_time: parse::ticks_to_duration(start_time, user_hz),
        };
        let stat_time = parse::ticks_to_duration(utime.saturating_add(stime), user_hz);
        let comm = String::from_utf8_lossy(comm);
        let kernel_thread = flags & PF_KTHREAD != 0;
        // A changed comm on the same (pid, start time) means an exec: refresh what was cached.
        // A kernel thread renames itself without one (a kworker's name shows the work queue it
        // serves), keeping its cgroup, so only the name is new.
        let cached = self.cache.get_mut(&pid).filter(|c| {
            c.start_ticks == start_time
                && (c.info.comm == comm || (kernel_thread && c.info.kernel_thread))
        });
        let (info, cpu_time) = match cached {
            Some(cached) => {
                cached.generation = self.generation;
                cached.asleep = asleep;
                if opened.is_some() {
                    cached.stat = opened;
                }
                let cpu_time = cached.credit.credit_stat(stat_time, threads);
                if cached.info.comm != comm {
                    let mut info = ProcessInfo::clone(&cached.info);
                    info.comm = comm.into_owned();
                    info.workload = self.classifier.classify_process(pid, &info);
                    cached.info = Arc::new(info);
                }
                (cached.info.clone(), cpu_time)
            }
            None => {
                let first_met = self
                    .cache
                    .get(&pid)
                    .is_none_or(|c| c.start_ticks != start_time);
                // See `zombies_to_counters`.
                if first_met && group_ending && self.zombies_to_counters {
                    return Err(Missed::LeftToCounters);
                }
                let comm = comm.into_owned();
                let mut info = self
                    .reader
                    .read_identity(pid_name, comm, kernel_thread, leader)
                    .ok_or(Missed::Unread)?;
                info.workload = self.classifier.classify_process(pid, &info);
                let info = Arc::new(info);
                // A file already held for this pid showed the new process, so it stays. The
                // same process after an exec keeps its credit and `schedstat`; another one
                // that took the pid starts afresh (a held `schedstat` reads the old one).
                let fresh = Credit::new(stat_time, threads);
                let (kept, schedstat, mut credit) = match self.cache.remove(&pid) {
                    Some(c) if c.start_ticks == start_time => (c.stat, c.schedstat, c.credit),
                    Some(c) => (c.stat, None, fresh),
                    None => (None, None, fresh),
                };
                let stat = opened.or(kept);
                let cpu_time = credit.credit_stat(stat_time, threads);
                self.cache.insert(
                    pid,
                    Cached {
                        start_ticks: start_time,
                        info: info.clone(),
                        generation: self.generation,
                        stat,
                        schedstat,
                        credit,
                        asleep,
                    },
                );
                (info, cpu_time)
            }
        };
        Ok(ProcessUsage {
            key,
            cpu_time,
            info,
            exited: false,
            counters: None,
        })
    }
}

impl UsageSource for ProcfsSource {
    fn name(&self) -> &str {
        "procfs"
    }

    fn skipped_inputs(&self) -> u64 {
        self.counters.as_ref().map_or(0, UsageCounters::unreadable)
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        // Uptime is read before the scan: a process that starts during the scan and is missed
        // then has a start time after this uptime, so the next tick counts all its CPU time.
        // The fork count is read before it too: a process started after it counts, so the next
        // scan finds it.
        let NodeStat {
            cpu: node, forks, ..
        } = self.reader.read_node_stat()?;
        // The last pid given out, after the fork count: every task the count includes has a
        // pid up to it ([`discover`]), and it covers every task created from the scan before
        // to the end of this one for the check of pids read through their clock
        // (`check_read_by_pid`). Not read again while the fork count stands.
        let last_pid = if self.group_clock {
            clock::unmoved_last_pid(self.pid_cursor_before, forks)
                .or_else(|| self.reader.read_last_pid())
        } else {
            None
        };
        let uptime = self.reader.read_uptime()?;
        // Read before the scan: a process that starts after it is not in the counters yet.
        let mut cgroups = Vec::new();
        if let Some(counters) = &mut self.counters {
            counters.read_if_ended(forks, &mut cgroups);
            counters.check_quiet();
        }
        self.generation = self.generation.wrapping_add(1);
        self.taken_unread = 0;
        self.held_budget =
            budget::held_stat_budget(self.file_limit.at(Instant::now()), self.held_cap);
        self.reads = self.scan_reads(forks, uptime);
        let mut processes = Vec::with_capacity(self.last_count + self.last_count / 8 + 16);
        let discovery = self.discovery(forks, last_pid);
        let complete = match discovery {
            Discovery::Known => self.read_known(&mut processes, None),
            Discovery::Probe { after, to } => self.read_known(&mut processes, Some((after, to))),
            Discovery::List => self.read_listed(&mut processes)?,
        };
        let known = self.cache.len();
        let before = std::mem::replace(&mut self.pid_cursor_before, (last_pid, forks));
        let complete = self.check_read_by_pid(before, &mut processes) && complete;
        // A process not read and not known to have ended (unreadable this time, or at a pid
        // that changed hands) makes the next scan list again.
        self.listed_at_forks = forks.filter(|_| complete);
        // A scan that found nothing new found every process only as far as the last one that
        // looked: a task created between its fork count and its cursor readings is still to
        // be found.
        self.discovered_to = match discovery {
            Discovery::Known => self.discovered_to,
            Discovery::Probe { .. } | Discovery::List => last_pid,
        }
        .filter(|_| complete);
        #[cfg(test)]
        {
            self.discovery = discovery;
        }
        let generation = self.generation;
        self.cache.retain(|_, c| c.generation == generation);
        if let Some(counters) = &mut self.counters {
            if self.cache.len() < known {
                counters.note_gone();
            }
            counters.note_listed(&processes);
            counters.read_new(&mut cgroups);
        }
        (self.held, self.held_schedstat) = self.cache.values().fold((0, 0), |(s, r), c| {
            (
                s + usize::from(c.stat.is_some()),
                r + usize::from(c.schedstat.is_some()),
            )
        });
        self.last_count = processes.len();
        Ok(UsageSnapshot {
            uptime,
            node,
            processes,
            cgroups,
        })
    }
}

impl ProcfsSource {
    /// How this scan may read processes, from the node's fork count (`None`: unknown) and the
    /// uptime before it.
    fn scan_reads(&mut self, forks: Option<u64>, uptime: Duration) -> ScanReads {
        let quiet = forks.is_some() && forks == self.forks_before;
        let stat_recent = self
            .all_stat_at
            .is_some_and(|at| uptime.saturating_sub(at) < STAT_AT_LEAST_EVERY);
        let runtime_reads = self.schedstat_counts || self.group_clock;
        let leader_may = runtime_reads && stat_recent;
        let by_leader = leader_may && quiet;
        // Kernel threads are read through `stat` only by a scan that reads every process so.
        if !leader_may {
            self.all_stat_at = Some(uptime);
        }
        // Under steady churn no scan is quiet, and the baselines would never be used (but
        // kernel threads', see `read_process`).
        let baselines = runtime_reads && (quiet || self.quiet_before);
        self.forks_before = forks;
        self.quiet_before = quiet;
        ScanReads {
            by_leader,
            kthreads_by_leader: self.schedstat_counts && stat_recent,
            baselines,
            by_clock: self.group_clock && stat_recent,
        }
    }

    /// Whether the process at `pid`, which the scan's read just missed, has ended or was left
    /// to the counters in its exit.
    fn missed_has_ended(&self, pid: u32, missed: Missed) -> bool {
        match missed {
            Missed::LeftToCounters => true,
            Missed::Unread => self.ended(pid),
        }
    }

    /// Whether the process at `pid`, which a read just missed, has ended: no thread group is at
    /// its pid any more, where the tree is this process's own. A process that ended is no
    /// process left unknown, so the next scan need not look for it; one unreadable, or that
    /// cannot be told, is.
    fn ended(&self, pid: u32) -> bool {
        self.group_clock && clock::group_runtime(pid).is_none()
    }

    /// Reads every process the tree lists; true when each one listed was read, or has ended.
    fn read_listed(&mut self, processes: &mut Vec<ProcessUsage>) -> Result<bool, ReadError> {
        let root = self.reader.root();
        let dir = fs::read_dir(root).map_err(|e| io_error(root, e))?;
        let mut complete = true;
        for entry in dir {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::debug!(error = %e, "skipping unreadable procfs entry");
                    complete = false;
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(pid) = parse::parse_pid(name.as_bytes()) else {
                continue;
            };
            // Under churn many of the pids listed are gone by the time the scan comes to them.
            // One the source does not know is then passed over at the cost of a clock read
            // (~0.2 µs) rather than of a failed open (~3 µs: the kernel makes and drops a
            // dentry for it).
            if !self.cache.contains_key(&pid) && self.ended(pid) {
                continue;
            }
            match self.read_process(pid, &name) {
                Ok(process) => processes.push(process),
                Err(missed) => complete &= self.missed_has_ended(pid, missed),
            }
        }
        Ok(complete)
    }

    /// Reads the processes the last scan read, and with `probe` those at pids given out
    /// within it that it did not know ([`discover`]), in pid order as a listing gives them;
    /// true when each one was read, or has ended.
    fn read_known(&mut self, processes: &mut Vec<ProcessUsage>, probe: Option<(u64, u64)>) -> bool {
        let mut pids = std::mem::take(&mut self.known_pids);
        pids.clear();
        pids.extend(self.cache.keys().copied());
        if let Some((after, to)) = probe {
            self.add_new_pids(after, to, &mut pids);
        }
        pids.sort_unstable();
        let mut name = std::mem::take(&mut self.pid_name);
        let mut complete = true;
        for &pid in &pids {
            name.clear();
            // Writing to a String cannot fail.
            let _ = write!(name, "{pid}");
            match self.read_process(pid, OsStr::new(&name)) {
                Ok(process) => processes.push(process),
                Err(missed) => complete &= self.missed_has_ended(pid, missed),
            }
        }
        self.known_pids = pids;
        self.pid_name = name;
        complete
    }
}

/// Checks a procfs tree for `kepler probe`; the detail says what was found.
pub fn probe(procfs_root: &Path) -> Result<String, Unavailable> {
    let mut source = ProcfsSource::new(
        procfs_root.to_path_buf(),
        Arc::new(kepler_core::NoWorkloads),
    )?;
    let processes = fs::read_dir(procfs_root)
        .map_err(|e| Unavailable::new(format!("listing {}: {e}", procfs_root.display())))?
        .filter_map(Result::ok)
        .filter(|e| parse::parse_pid(e.file_name().as_bytes()).is_some())
        .count();
    let uptime = source
        .reader
        .read_uptime()
        .map_err(|e| Unavailable::new(e.to_string()))?;
    let cgroups = cgroup_layout(procfs_root);
    Ok(format!(
        "procfs at {}: {processes} processes, USER_HZ {}, uptime {}s, cgroups {cgroups}",
        procfs_root.display(),
        source.reader.user_hz(),
        uptime.as_secs()
    ))
}

/// Describes the cgroup layout as seen from `<root>/self/cgroup`, for the probe detail.
fn cgroup_layout(procfs_root: &Path) -> &'static str {
    let Ok(content) = fs::read_to_string(procfs_root.join("self/cgroup")) else {
        return "unknown";
    };
    let unified = content.lines().any(|l| l.starts_with("0::"));
    let v1 = content
        .lines()
        .any(|l| !l.starts_with("0::") && !l.is_empty());
    match (v1, unified) {
        (true, true) => "hybrid (v1 controllers and unified v2)",
        (true, false) => "v1",
        (false, true) => "v2",
        (false, false) => "unknown",
    }
}

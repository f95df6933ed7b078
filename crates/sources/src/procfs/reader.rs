//! [`ProcfsReader`]: the procfs reads every usage source shares. The procfs source scans with
//! it each tick; the eBPF source uses it for node CPU times and to describe a process once, so
//! both sources read a process's identity, and derive its key, with the same code.

use std::ffi::{OsStr, OsString};
use std::fs::{self, File};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{NodeCpuTimes, ProcessInfo, ProcessKey, ReadError, Unavailable};

use super::parse::{self, Leader, PidStat, PF_KTHREAD};
use crate::bounded::open_nonblocking;

use super::read::{io_error, is_procfs, is_vanished, parse_error, user_hz, Buffer};
use crate::cgroups::{Counting, Uncounted, UsageNames};

/// Threads of a process whose main thread left that are tried for one still running
/// ([`ProcfsReader::live_thread`]): enough for a process whose threads end one after another,
/// while one with thousands of threads costs a bounded number of reads.
const LIVE_THREAD_TRIES: usize = 16;

/// What `/proc/<pid>` tells about a process, as [`ProcfsReader::describe`] reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessDescription {
    /// The key the procfs source reports the process under: its pid and start time.
    pub key: ProcessKey,
    /// `comm`, `exe`, `cmdline`, `cgroup_path` and `kernel_thread`; the rest (cgroup id,
    /// workload) is left at its default for the caller to fill in.
    pub info: ProcessInfo,
    /// Its whole group was in its exit: its main thread exiting or ended, no other thread
    /// left. The v1 lines of its `cgroup` file then show the root, wherever it ran.
    pub group_ending: bool,
}

/// What a process's `stat` says of it as a whole ([`ProcfsReader::state_at`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ProcessState {
    pub key: ProcessKey,
    /// Its main thread has ended (a zombie, or being reaped); its other threads may still run.
    pub leader_ended: bool,
    /// Its threads as the kernel counts them (`num_threads`), an ended leader among them until
    /// the whole group ends.
    pub threads: u64,
}

/// What `<root>/stat` says of the node ([`ProcfsReader::read_node_stat`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NodeStat {
    pub cpu: NodeCpuTimes,
    /// Tasks (processes and threads) created since boot, the `processes` line, when the file
    /// is procfs' own: while it stays the same no process has started. `None` for a fixture
    /// tree, whose processes may change without it, and for a file without the line.
    pub forks: Option<u64>,
    /// Context switches since boot (`ctxt`), all CPUs; `None` without the line.
    pub switches: Option<u64>,
}

/// Reads a procfs tree (`/proc`, or a fixture with the same layout) into a reused buffer.
///
/// Tick counts are converted with the USER_HZ asked of the C library once, at construction.
pub struct ProcfsReader {
    root: PathBuf,
    user_hz: u64,
    buf: Buffer,
    /// `<root>/<pid>/<file>`, rebuilt in place for each read so it allocates only while growing.
    path: PathBuf,
    /// `<root>/stat`, read every tick.
    node_stat: TickFile,
    /// `<root>/uptime`, read every tick until it is found to be procfs' own (see
    /// [`Self::read_uptime`]); never held.
    uptime: TickFile,
    /// `<root>/loadavg`, for the last pid given out ([`Self::read_last_pid`]).
    loadavg: TickFile,
    /// Set once `<root>/uptime` was found to be procfs' own: uptime is then read from the
    /// clock it prints, without a read of the file.
    uptime_by_clock: bool,
    /// Whether a fixture's `stat` counts forks as the kernel's would (tests of the source's
    /// listing rule); the kernel's own is always trusted.
    fixture_counts_forks: bool,
    /// Opens of a process's `stat`, held or by path: how the tests see a vanished process
    /// tried once, not twice.
    #[cfg(test)]
    pub(crate) stat_opens: usize,
    /// Names the cgroup that counts each process described, where the source reads counters.
    usage_names: Option<UsageNames>,
}

/// A file read every tick, held open once read when it is procfs' own: a `pread` makes the
/// kernel write it afresh, without an open and a close around it. A file of a fixture tree is
/// opened each time, as it may be replaced between reads.
struct TickFile {
    path: PathBuf,
    held: Option<File>,
}

impl TickFile {
    fn new(path: PathBuf) -> Self {
        TickFile { path, held: None }
    }

    /// The file to read, and whether it is procfs' own. A failed read drops it rather than
    /// [`put_back`](Self::put_back) it, so the next read opens the path again.
    fn take(&mut self) -> Result<(File, bool), ReadError> {
        if let Some(file) = self.held.take() {
            return Ok((file, true));
        }
        let file = open_nonblocking(&self.path).map_err(|e| io_error(&self.path, e))?;
        let live = is_procfs(&file);
        Ok((file, live))
    }

    fn put_back(&mut self, file: File, live: bool) {
        if live {
            self.held = Some(file);
        }
    }
}

impl ProcfsReader {
    /// A reader of the tree at `procfs_root`. Nothing is read yet; fails only when USER_HZ
    /// cannot be had (no tick count could then be converted).
    pub fn new(procfs_root: impl Into<PathBuf>) -> Result<Self, Unavailable> {
        let root = procfs_root.into();
        let user_hz = user_hz().ok_or_else(|| Unavailable::new("sysconf(_SC_CLK_TCK) failed"))?;
        Ok(ProcfsReader {
            node_stat: TickFile::new(root.join("stat")),
            uptime: TickFile::new(root.join("uptime")),
            loadavg: TickFile::new(root.join("loadavg")),
            uptime_by_clock: false,
            fixture_counts_forks: false,
            #[cfg(test)]
            stat_opens: 0,
            usage_names: None,
            path: PathBuf::with_capacity(root.as_os_str().len() + 32),
            root,
            user_hz,
            buf: Buffer::new(),
        })
    }

    /// From now on each process described also gets the cgroup that counts it
    /// ([`ProcessInfo::usage_cgroup`]) in the hierarchies `counting` has mounted.
    pub fn name_usage_cgroups(&mut self, counting: &Counting) {
        self.usage_names = Some(UsageNames::new(counting));
    }

    /// The cgroup that counts process `pid` (see [`Self::name_usage_cgroups`]): `Ok(None)`
    /// when no cgroup is named, the source names none, or the process is gone.
    pub fn usage_cgroup(&mut self, pid: u32) -> Result<Option<Arc<str>>, Uncounted> {
        if self.usage_names.is_none() {
            return Ok(None);
        }
        self.set_path(OsStr::new(&pid.to_string()), "cgroup");
        match (self.buf.read_all(&self.path), self.usage_names.as_mut()) {
            (Ok(content), Some(names)) => names.of(&String::from_utf8_lossy(content)),
            _ => Ok(None),
        }
    }

    /// The procfs root this reader reads.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// USER_HZ: clock ticks per second, the unit of procfs times.
    pub fn user_hz(&self) -> u64 {
        self.user_hz
    }

    /// Node CPU times from the aggregate `cpu` line of `<root>/stat`: user + nice + system +
    /// idle + iowait + irq + softirq + steal as the total (guest time is already inside user
    /// and nice, so it is not added again), plus idle and iowait. Only the first line is read.
    pub fn read_node_cpu_times(&mut self) -> Result<NodeCpuTimes, ReadError> {
        self.load_node_stat(false)?;
        self.parse_node_cpu()
    }

    /// [`read_node_cpu_times`](Self::read_node_cpu_times) and the fork count, from the whole of
    /// `<root>/stat` (the kernel writes all of it for any read, so only the copy is longer).
    pub fn read_node_stat(&mut self) -> Result<NodeStat, ReadError> {
        let counts_forks = self.load_node_stat(true)?;
        let cpu = self.parse_node_cpu()?;
        let forks = counts_forks
            .then(|| parse::parse_forks(self.buf.bytes()))
            .flatten();
        let switches = parse::parse_stat_count(self.buf.bytes(), b"ctxt ");
        Ok(NodeStat {
            cpu,
            forks,
            switches,
        })
    }

    /// Reads `<root>/stat` into the buffer, its first line or all of it; true when its fork
    /// count is the kernel's.
    fn load_node_stat(&mut self, whole: bool) -> Result<bool, ReadError> {
        let (file, live) = self.node_stat.take()?;
        let read = if whole {
            self.buf.read_all_at(&file)
        } else {
            self.buf.read_first_line_at(&file)
        };
        read.map_err(|e| io_error(&self.node_stat.path, e))?;
        self.node_stat.put_back(file, live);
        Ok(live || self.fixture_counts_forks)
    }

    fn parse_node_cpu(&self) -> Result<NodeCpuTimes, ReadError> {
        let cpu = parse::parse_cpu_line(self.buf.bytes())
            .ok_or_else(|| parse_error(&self.node_stat.path, "no valid aggregate `cpu` line"))?;
        Ok(NodeCpuTimes {
            total: parse::ticks_to_duration(cpu.total, self.user_hz),
            idle: parse::ticks_to_duration(cpu.idle, self.user_hz),
            iowait: parse::ticks_to_duration(cpu.iowait, self.user_hz),
        })
    }

    /// Makes [`read_node_stat`](Self::read_node_stat) report a fixture's fork count.
    #[cfg(test)]
    pub(crate) fn count_fixture_forks(&mut self) {
        self.fixture_counts_forks = true;
    }

    /// Time since boot from `<root>/uptime`, exact to the digits the kernel prints. Once the
    /// file was found to be procfs' own, from [`Self::uptime_by_clock`], what the file prints
    /// (to the tick) without its ~5 µs read: the file is printed from the reader's clock, in
    /// the reader's time namespace, whichever procfs mount it is read through.
    pub(crate) fn read_uptime(&mut self) -> Result<Duration, ReadError> {
        if self.uptime_by_clock {
            return self.uptime_by_clock();
        }
        let (file, live) = self.uptime.take()?;
        let path = &self.uptime.path;
        let content = self.buf.read_all_at(&file).map_err(|e| io_error(path, e))?;
        let uptime =
            parse::parse_uptime(content).ok_or_else(|| parse_error(path, "no uptime in seconds"));
        // Never held: procfs' own is not read again, a fixture's is opened at each read.
        drop(file);
        self.uptime_by_clock = live && uptime.is_ok();
        uptime
    }

    /// Time since boot including suspend (CLOCK_BOOTTIME, the clock of `/proc/uptime` and of
    /// process start times), floored to a tick as start times are. Flooring keeps a process
    /// started after this instant at a start time ≥ this uptime, which is how attribution
    /// decides that all of its CPU time belongs to the coming interval.
    pub fn uptime_by_clock(&self) -> Result<Duration, ReadError> {
        let now = super::clock::read_clock(libc::CLOCK_BOOTTIME)
            .map_err(|e| ReadError::Other(format!("clock_gettime(CLOCK_BOOTTIME): {e}")))?;
        Ok(self.floor_to_tick(now))
    }

    /// The last pid the kernel gave out in this process's pid namespace, the last field of
    /// `<root>/loadavg`: it moves whenever a task is created there or below. `None` when the
    /// file is not procfs' own (a fixture's says nothing of the kernel) or is unreadable.
    pub(crate) fn read_last_pid(&mut self) -> Option<u64> {
        let (file, live) = self.loadavg.take().ok()?;
        if !live {
            return None;
        }
        let last = parse::parse_last_pid(self.buf.read_all_at(&file).ok()?);
        self.loadavg.put_back(file, live);
        last
    }

    /// `since_boot` (a CLOCK_BOOTTIME reading, such as a task's `start_boottime`) as procfs
    /// shows it: floored to whole clock ticks like the kernel's `nsec_to_clock_t`, then
    /// converted back as this reader converts start times. So a start time a BPF program reads
    /// in ns gives the same [`ProcessKey`] as `/proc/<pid>/stat`.
    pub fn floor_to_tick(&self, since_boot: Duration) -> Duration {
        let ticks = parse::duration_to_ticks(since_boot, self.user_hz);
        parse::ticks_to_duration(ticks, self.user_hz)
    }

    /// The key of the process now at `pid` (from its `stat` alone); `None` when there is none
    /// or its `stat` is unreadable. Cheaper than [`describe`](Self::describe) for checking
    /// that a process is still alive.
    pub fn process_key(&mut self, pid: u32) -> Option<ProcessKey> {
        self.process_key_ended(pid).map(|(key, _)| key)
    }

    /// [`process_key`](Self::process_key), with whether the process's main thread has ended
    /// (a zombie, or being reaped; its other threads may still run).
    pub fn process_key_ended(&mut self, pid: u32) -> Option<(ProcessKey, bool)> {
        let user_hz = self.user_hz;
        let stat = self.read_stat(OsStr::new(&pid.to_string()))?;
        let key = ProcessKey {
            pid,
            start_time: parse::ticks_to_duration(stat.start_time, user_hz),
        };
        Some((key, stat.ended))
    }

    /// What the `stat` of `pid` held open says of the process as a whole, in one `pread`.
    /// An error when it is gone or its line is unreadable (`InvalidData`).
    pub fn state_at(&mut self, pid: u32, stat: &File) -> io::Result<ProcessState> {
        let user_hz = self.user_hz;
        let line = self.buf.read_all_at(stat)?;
        let stat = parse::parse_pid_stat(line)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "odd stat line"))?;
        Ok(ProcessState {
            key: ProcessKey {
                pid,
                start_time: parse::ticks_to_duration(stat.start_time, user_hz),
            },
            leader_ended: stat.ended,
            threads: stat.threads,
        })
    }

    /// Reads everything that identifies the process now at `pid`, the way the procfs source
    /// does for a new process: `stat` (comm, kernel-thread flag, start time), then `exe` and
    /// `cmdline` (not for kernel threads, which have neither, nor for an ended main thread,
    /// which no longer has them) and `cgroup`. `None` when the process is gone, or exits while
    /// being read; other read errors leave that field empty. Callers compare
    /// [`ProcessDescription::key`] with theirs to detect a reused pid.
    pub fn describe(&mut self, pid: u32) -> Option<ProcessDescription> {
        let pid_name = pid.to_string();
        let pid_name = OsStr::new(&pid_name);
        let user_hz = self.user_hz;
        let stat = self.read_stat(pid_name)?;
        let (group_ending, leader) = (stat.group_ending(), stat.leader());
        let PidStat {
            comm,
            flags,
            start_time,
            ..
        } = stat;
        let comm = String::from_utf8_lossy(comm).into_owned();
        let key = ProcessKey {
            pid,
            start_time: parse::ticks_to_duration(start_time, user_hz),
        };
        let info = self.read_identity(pid_name, comm, flags & PF_KTHREAD != 0, leader)?;
        Some(ProcessDescription {
            key,
            info,
            group_ending,
        })
    }

    /// Opens `<root>/<pid_name>/stat` to be held and read again with [`Self::load_stat_at`]
    /// or [`Self::state_at`]. Held open, the file keeps reading the process it was opened for:
    /// once that one is gone its reads fail (`ESRCH`) rather than show another that took the
    /// pid.
    pub fn open_stat(&mut self, pid_name: &OsStr) -> io::Result<File> {
        self.set_path(pid_name, "stat");
        #[cfg(test)]
        {
            self.stat_opens += 1;
        }
        crate::bounded::open_nonblocking(&self.path)
    }

    /// Opens `<root>/<pid_name>/schedstat` to be held and read with
    /// [`Self::read_runtime_at`]; like a held `stat`, it reads its own process or fails.
    pub(crate) fn open_schedstat(&mut self, pid_name: &OsStr) -> io::Result<File> {
        self.set_path(pid_name, "schedstat");
        crate::bounded::open_nonblocking(&self.path)
    }

    /// The main thread's runtime in ns from a held `schedstat`; `None` when it is gone or its
    /// line is odd.
    pub(crate) fn read_runtime_at(&mut self, file: &File) -> Option<u64> {
        parse::parse_schedstat_runtime(self.buf.read_all_at(file).ok()?)
    }

    /// [`Self::read_runtime_at`] by path, for a process whose `schedstat` is not held.
    pub(crate) fn read_runtime(&mut self, pid_name: &OsStr) -> Option<u64> {
        self.set_path(pid_name, "schedstat");
        parse::parse_schedstat_runtime(self.buf.read_all(&self.path).ok()?)
    }

    /// Whether this tree's `schedstat` files count runtime: procfs' own, and the kernel keeps
    /// them (without `sched_info_on` they read `0 0 0`, so this process, which has run, would
    /// show none).
    pub(crate) fn schedstat_counts(&mut self) -> bool {
        self.set_path(OsStr::new("self"), "schedstat");
        let Ok(file) = crate::bounded::open_nonblocking(&self.path) else {
            return false;
        };
        is_procfs(&file) && self.read_runtime_at(&file).is_some_and(|ns| ns > 0)
    }

    /// Reads a held `stat` for [`Self::parse_loaded_stat`]. An error when the read fails: the
    /// process the file was opened on is gone (`ESRCH`; its pid may be in use again).
    pub(crate) fn load_stat_at(&mut self, file: &File) -> io::Result<()> {
        self.buf.read_all_at(file).map(|_| ())
    }

    /// Parses the `stat` that [`Self::load_stat_at`] read; `None` (logged) when it is odd.
    pub(crate) fn parse_loaded_stat(&self, pid: u32) -> Option<PidStat<'_>> {
        let stat = parse::parse_pid_stat(self.buf.bytes());
        if stat.is_none() {
            tracing::debug!(pid, "skipping process with odd stat line");
        }
        stat
    }

    /// Reads and parses `<root>/<pid_name>/stat`; `None` (logged unless the process simply
    /// vanished) when it cannot be read or parsed.
    pub(crate) fn read_stat(&mut self, pid_name: &OsStr) -> Option<PidStat<'_>> {
        self.set_path(pid_name, "stat");
        #[cfg(test)]
        {
            self.stat_opens += 1;
        }
        if let Err(e) = self.buf.read_all(&self.path) {
            if !is_vanished(&e) {
                tracing::debug!(path = %self.path.display(), error = %e, "skipping process");
            }
            return None;
        }
        let stat = parse::parse_pid_stat(self.buf.bytes());
        if stat.is_none() {
            tracing::debug!(path = %self.path.display(), "skipping process with odd stat line");
        }
        stat
    }

    /// Reads what identifies a process besides its `stat`. `None` when it exited meanwhile.
    /// The comm comes from `stat` (the kernel prints the same name in `stat` and `comm`),
    /// saving an open. `leader` is what `stat` says of the main thread: where it has left
    /// other threads running, their files are read instead (see [`Leader::LeftOthers`]).
    pub(crate) fn read_identity(
        &mut self,
        pid_name: &OsStr,
        comm: String,
        kernel_thread: bool,
        leader: Leader,
    ) -> Option<ProcessInfo> {
        let thread_dir;
        let (dir, leader) = match leader {
            Leader::LeftOthers => match self.live_thread(pid_name) {
                Some(found) => {
                    thread_dir = found;
                    (thread_dir.as_os_str(), Leader::Live)
                }
                // None found in time (each ended meanwhile): what the main thread still shows.
                None => (pid_name, Leader::Ended),
            },
            leader => (pid_name, leader),
        };
        let mut info = ProcessInfo {
            comm,
            kernel_thread,
            ..ProcessInfo::default()
        };
        // Kernel threads have no executable and an empty command line. Nor has a main thread
        // that ended: both are read through its memory map, which it let go at exit, so they
        // would read empty. Under churn most new processes a scan finds are such zombies,
        // and this saves four syscalls each.
        if !kernel_thread && leader == Leader::Live {
            self.set_path(dir, "exe");
            // Unreadable for other users' processes without CAP_SYS_PTRACE, and for zombies.
            info.exe = fs::read_link(&self.path)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.set_path(dir, "cmdline");
            info.cmdline = parse::parse_cmdline(self.read_cmdline()?);
        }
        self.set_path(dir, "cgroup");
        let cgroup = String::from_utf8_lossy(read_optional(&mut self.buf, &self.path)?);
        info.cgroup_path = parse::select_cgroup_path(&cgroup).to_owned();
        match self.usage_names.as_mut().map(|n| n.of(&cgroup)) {
            Some(Ok(name)) => info.usage_cgroup = name,
            Some(Err(Uncounted)) => info.usage_uncounted = true,
            None => {}
        }
        Some(info)
    }

    /// `<pid>/task/<tid>` for a thread of process `pid_name` other than its main one that is
    /// neither exiting nor ended, among the first [`LIVE_THREAD_TRIES`] listed; `None` when
    /// there is none.
    fn live_thread(&mut self, pid_name: &OsStr) -> Option<OsString> {
        self.set_path(pid_name, "task");
        let tids = fs::read_dir(&self.path).ok()?;
        let mut dir = OsString::new();
        for entry in tids.filter_map(Result::ok).take(LIVE_THREAD_TRIES) {
            let tid = entry.file_name();
            if tid == pid_name || parse::parse_pid(tid.as_bytes()).is_none() {
                continue;
            }
            dir.clear();
            dir.push(pid_name);
            dir.push("/task/");
            dir.push(&tid);
            // A thread's own `stat`: what it calls the main thread's leaving is this thread's.
            if self
                .read_stat(&dir)
                .is_some_and(|stat| !stat.leader_leaving())
            {
                return Some(dir);
            }
        }
        None
    }

    /// Points `self.path` at `<root>/<pid>/<file>` without allocating once it has grown.
    fn set_path(&mut self, pid: &OsStr, file: &str) {
        self.path.clear();
        self.path.push(&self.root);
        self.path.push(pid);
        self.path.push(file);
    }

    /// Reads the start of `self.path` (a `cmdline`, which a process can make endless): `None`
    /// when the process vanished, empty content on other errors.
    fn read_cmdline(&mut self) -> Option<&[u8]> {
        if let Err(e) = self
            .buf
            .read_prefix(&self.path, crate::bounded::limits::CMDLINE)
        {
            if is_vanished(&e) {
                return None;
            }
            tracing::debug!(path = %self.path.display(), error = %e, "reading as empty");
            return Some(&[]);
        }
        Some(self.buf.bytes())
    }
}

/// The file at `path` into `buf`; empty (logged) when it cannot be read, `None` when its
/// process is gone.
fn read_optional<'b>(buf: &'b mut Buffer, path: &Path) -> Option<&'b [u8]> {
    if let Err(e) = buf.read_all(path) {
        if is_vanished(&e) {
            return None;
        }
        tracing::debug!(path = %path.display(), error = %e, "reading as empty");
        return Some(&[]);
    }
    Some(buf.bytes())
}

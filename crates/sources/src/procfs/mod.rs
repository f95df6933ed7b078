//! The procfs usage source: node CPU times from `/proc/stat`, per-process CPU time from
//! `/proc/<pid>/stat`, and what identifies a process read once when it first appears.

mod cpuinfo;
mod parse;
mod read;

use std::collections::HashMap;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    Classifier, NodeCpuTimes, ProcessInfo, ProcessKey, ProcessUsage, ReadError, Unavailable,
    UsageSnapshot, UsageSource,
};

pub use cpuinfo::read_cpu_info;
use parse::{PidStat, PF_KTHREAD};
use read::{io_error, is_vanished, parse_error, user_hz, Buffer};

/// A process as last seen, so its identity is read once per (pid, start time).
struct Cached {
    start_ticks: u64,
    info: Arc<ProcessInfo>,
    /// The snapshot that last saw the pid; older entries are evicted after each scan.
    generation: u64,
}

/// Reads usage from a procfs tree (`host.procfs`, normally `/proc`).
pub struct ProcfsSource {
    root: PathBuf,
    classifier: Arc<dyn Classifier>,
    user_hz: u64,
    cache: HashMap<u32, Cached>,
    generation: u64,
    buf: Buffer,
    path: PathBuf,
    stat_path: PathBuf,
    uptime_path: PathBuf,
    last_count: usize,
}

impl ProcfsSource {
    /// Checks that the tree has readable `stat` and `uptime` files; processes are read on
    /// each `snapshot()`.
    pub fn new(procfs_root: PathBuf, classifier: Arc<dyn Classifier>) -> Result<Self, Unavailable> {
        let user_hz = user_hz().ok_or_else(|| Unavailable::new("sysconf(_SC_CLK_TCK) failed"))?;
        let mut source = ProcfsSource {
            stat_path: procfs_root.join("stat"),
            uptime_path: procfs_root.join("uptime"),
            path: PathBuf::with_capacity(procfs_root.as_os_str().len() + 32),
            root: procfs_root,
            classifier,
            user_hz,
            cache: HashMap::new(),
            generation: 0,
            buf: Buffer::new(),
            last_count: 0,
        };
        source
            .read_node()
            .and_then(|_| source.read_uptime())
            .map_err(|e| Unavailable::new(format!("procfs at {}: {e}", source.root.display())))?;
        Ok(source)
    }

    fn read_node(&mut self) -> Result<NodeCpuTimes, ReadError> {
        let path = &self.stat_path;
        let content = self
            .buf
            .read_first_line(path)
            .map_err(|e| io_error(path, e))?;
        let cpu = parse::parse_cpu_line(content)
            .ok_or_else(|| parse_error(path, "no valid aggregate `cpu` line"))?;
        Ok(NodeCpuTimes {
            total: parse::ticks_to_duration(cpu.total, self.user_hz),
            idle: parse::ticks_to_duration(cpu.idle, self.user_hz),
            iowait: parse::ticks_to_duration(cpu.iowait, self.user_hz),
        })
    }

    fn read_uptime(&mut self) -> Result<Duration, ReadError> {
        let path = &self.uptime_path;
        let content = self.buf.read_all(path).map_err(|e| io_error(path, e))?;
        parse::parse_uptime(content).ok_or_else(|| parse_error(path, "no uptime in seconds"))
    }

    /// Points `self.path` at `<root>/<pid>/<file>` without allocating once it has grown.
    fn set_path(&mut self, pid: &OsStr, file: &str) {
        self.path.clear();
        self.path.push(&self.root);
        self.path.push(pid);
        self.path.push(file);
    }

    fn read_process(&mut self, pid: u32, pid_name: &OsStr) -> Option<ProcessUsage> {
        self.set_path(pid_name, "stat");
        let content = match self.buf.read_all(&self.path) {
            Ok(content) => content,
            Err(e) => {
                if !is_vanished(&e) {
                    tracing::debug!(path = %self.path.display(), error = %e, "skipping process");
                }
                return None;
            }
        };
        let Some(stat) = parse::parse_pid_stat(content) else {
            tracing::debug!(path = %self.path.display(), "skipping process with odd stat line");
            return None;
        };
        let PidStat {
            comm,
            flags,
            utime,
            stime,
            start_time,
        } = stat;
        let key = ProcessKey {
            pid,
            start_time: parse::ticks_to_duration(start_time, self.user_hz),
        };
        let cpu_time = parse::ticks_to_duration(utime.saturating_add(stime), self.user_hz);
        let comm = String::from_utf8_lossy(comm);
        // A changed comm on the same (pid, start time) means an exec: refresh what was cached.
        let cached = self
            .cache
            .get_mut(&pid)
            .filter(|c| c.start_ticks == start_time && c.info.comm == comm);
        let info = match cached {
            Some(cached) => {
                cached.generation = self.generation;
                cached.info.clone()
            }
            None => {
                let comm = comm.into_owned();
                let info = self.read_info(pid_name, comm, flags & PF_KTHREAD != 0)?;
                self.cache.insert(
                    pid,
                    Cached {
                        start_ticks: start_time,
                        info: info.clone(),
                        generation: self.generation,
                    },
                );
                info
            }
        };
        Some(ProcessUsage {
            key,
            cpu_time,
            info,
            exited: false,
            counters: None,
        })
    }

    /// Reads what identifies a new process. `None` when it exited meanwhile. The comm comes
    /// from `stat` (the kernel prints the same name in `stat` and `comm`), saving an open.
    fn read_info(
        &mut self,
        pid_name: &OsStr,
        comm: String,
        kernel_thread: bool,
    ) -> Option<Arc<ProcessInfo>> {
        let mut info = ProcessInfo {
            comm,
            kernel_thread,
            ..ProcessInfo::default()
        };
        // Kernel threads have no executable and an empty command line.
        if !kernel_thread {
            self.set_path(pid_name, "exe");
            // Unreadable for other users' processes without CAP_SYS_PTRACE, and for zombies.
            info.exe = fs::read_link(&self.path)
                .map(|p| p.to_string_lossy().into_owned())
                .unwrap_or_default();
            self.set_path(pid_name, "cmdline");
            info.cmdline = parse::parse_cmdline(self.read_optional()?);
        }
        self.set_path(pid_name, "cgroup");
        let cgroup = String::from_utf8_lossy(self.read_optional()?);
        info.cgroup_path = parse::select_cgroup_path(&cgroup).to_owned();
        info.workload = self.classifier.classify(&info);
        Some(Arc::new(info))
    }

    /// Reads `self.path`: `None` when the process vanished, empty content on other errors.
    fn read_optional(&mut self) -> Option<&[u8]> {
        if let Err(e) = self.buf.read_all(&self.path) {
            if is_vanished(&e) {
                return None;
            }
            tracing::debug!(path = %self.path.display(), error = %e, "reading as empty");
            return Some(&[]);
        }
        Some(self.buf.bytes())
    }
}

impl UsageSource for ProcfsSource {
    fn name(&self) -> &str {
        "procfs"
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        // Uptime is read before the scan: a process that starts during the scan and is missed
        // then has a start time after this uptime, so the next tick counts all its CPU time.
        let node = self.read_node()?;
        let uptime = self.read_uptime()?;
        self.generation = self.generation.wrapping_add(1);
        let mut processes = Vec::with_capacity(self.last_count + self.last_count / 8 + 16);
        let dir = fs::read_dir(&self.root).map_err(|e| io_error(&self.root, e))?;
        for entry in dir {
            let entry = match entry {
                Ok(entry) => entry,
                Err(e) => {
                    tracing::debug!(error = %e, "skipping unreadable procfs entry");
                    continue;
                }
            };
            let name = entry.file_name();
            let Some(pid) = parse::parse_pid(name.as_bytes()) else {
                continue;
            };
            if let Some(process) = self.read_process(pid, &name) {
                processes.push(process);
            }
        }
        let generation = self.generation;
        self.cache.retain(|_, c| c.generation == generation);
        self.last_count = processes.len();
        Ok(UsageSnapshot {
            uptime,
            node,
            processes,
        })
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
        .read_uptime()
        .map_err(|e| Unavailable::new(e.to_string()))?;
    let cgroups = cgroup_layout(procfs_root);
    Ok(format!(
        "procfs at {}: {processes} processes, USER_HZ {}, uptime {}s, cgroups {cgroups}",
        procfs_root.display(),
        source.user_hz,
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

//! Helpers of the live tests: child processes (the test binary re-executed in a "mode"), CPU
//! burning, and a test cgroup that looks like a container.

#![allow(dead_code)]

use std::ffi::CString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

/// Environment variable that turns the test binary into a helper child.
pub const CHILD_ENV: &str = "KEPLER_EBPF_TEST_CHILD";
/// The test function that runs the child modes.
pub const CHILD_TEST: &str = "child_entry_point";

pub fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// Prints why `test` is skipped, or fails it when tools are required.
pub fn skip(test: &str, reason: &str) {
    kepler_testkit::tools::skip(&format!("SKIP {test}: {reason}"));
}

/// True (and a printed reason) when a live test cannot run here; fails the test instead when
/// tools are required.
pub fn skip_unless_root(test: &str) -> bool {
    if is_root() {
        return false;
    }
    skip(test, "needs root to load eBPF programs (CI runs as root)");
    true
}

/// This test binary, re-executed to run only `CHILD_TEST` in `mode`.
pub fn child_command(exe: &Path, mode: &str) -> Command {
    let mut cmd = Command::new(exe);
    cmd.args([
        "--exact",
        CHILD_TEST,
        "--nocapture",
        "--test-threads=1",
        "-q",
    ])
    .env(CHILD_ENV, mode)
    .stdout(std::process::Stdio::null());
    cmd
}

pub use kepler_testkit::cpu::burn_cpu;

/// For `d` of wall time, `threads` threads each alternate a short burn with a short sleep, so
/// that they leave and re-enter their CPUs thousands of times a second.
pub fn pulse(threads: u32, d: Duration) {
    let end = std::time::Instant::now() + d;
    let workers: Vec<_> = (0..threads)
        .map(|_| {
            std::thread::spawn(move || {
                while std::time::Instant::now() < end {
                    burn_cpu(Duration::from_micros(300));
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect();
    for w in workers {
        let _ = w.join();
    }
}

/// Starts `threads` threads, thread `i` burning `(i + 1) × each` and ending, and ends the
/// process while the last still burns: threads end early, late, and with the group.
pub fn staggered(threads: u32, each: Duration) {
    for i in 0..threads {
        std::thread::spawn(move || burn_cpu(each * (i + 1)));
    }
    burn_cpu(each * threads.saturating_sub(1));
    // SAFETY: ends the process (every thread, the one still burning among them) at once.
    unsafe { libc::_exit(0) };
}

/// Forks `n` children one after the other, each burning `each` and exiting. With `naps`, a
/// child burns `each` in `naps + 1` pieces with a 1 ms sleep between two: it leaves its CPU
/// that many times before its final switch.
pub fn fork_burst(n: u32, each: Duration, naps: u32) {
    for _ in 0..n {
        // SAFETY: the child only burns CPU (clock_gettime), sleeps and calls _exit.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            for _ in 0..naps {
                burn_cpu(each / (naps + 1));
                std::thread::sleep(Duration::from_millis(1));
            }
            burn_cpu(each / (naps + 1));
            // SAFETY: leaving the forked child without running the parent's destructors.
            unsafe { libc::_exit(0) };
        }
        if pid > 0 {
            let mut status = 0;
            // SAFETY: waiting for our own child.
            unsafe { libc::waitpid(pid, &mut status, 0) };
        }
    }
}

/// Waits for `pid` and returns its exit status and CPU time (user + system) from wait4.
pub fn wait_cpu(pid: u32) -> (i32, Duration) {
    let mut status = 0;
    // SAFETY: zeroed rusage is a valid value to be overwritten.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: waiting for our own child with valid out-pointers.
    unsafe { libc::wait4(pid as libc::pid_t, &mut status, 0, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    (status, tv(ru.ru_utime) + tv(ru.ru_stime))
}

/// The CPU time the scheduler counted for `pid`'s live threads (their `schedstat`).
pub fn scheduler_runtime(pid: u32) -> Duration {
    let ns: u64 = std::fs::read_dir(format!("/proc/{pid}/task"))
        .unwrap()
        .flatten()
        .filter_map(|t| std::fs::read_to_string(t.path().join("schedstat")).ok())
        .filter_map(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        .sum();
    Duration::from_nanos(ns)
}

fn mounts() -> String {
    std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default()
}

/// The first cgroup2 mount of this machine.
pub fn cgroup2_mount() -> Option<PathBuf> {
    mounts().lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        (right.split_whitespace().next()? == "cgroup2")
            .then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// The mount of the cgroup-v1 hierarchy carrying `controller`, if any.
pub fn cgroup_v1_mount(controller: &str) -> Option<PathBuf> {
    mounts().lines().find_map(|l| {
        let (left, right) = l.split_once(" - ")?;
        let mut r = right.split_whitespace();
        let ok = r.next()? == "cgroup" && r.nth(1)?.split(',').any(|o| o == controller);
        ok.then(|| left.split_whitespace().nth(4).map(PathBuf::from))?
    })
}

/// Where a test cgroup's CPU usage is read.
enum Usage {
    /// cgroup2 `cpu.stat` `usage_usec`.
    CpuStat(PathBuf),
    /// cgroup-v1 `cpuacct.usage`, in ns.
    Cpuacct(PathBuf),
}

/// A cgroup `kepler-ebpf-test-<pid>-<tag>/<64 hex>` in one or more hierarchies (same relative
/// path in each), removed on drop.
pub struct TestCgroup {
    dirs: Vec<PathBuf>,
    usage: Usage,
    pub container_id: String,
}

impl TestCgroup {
    fn make(roots: &[&Path], tag: &str) -> std::io::Result<(Vec<PathBuf>, String)> {
        let seed = (std::process::id() as u64) << 16 ^ tag.bytes().map(u64::from).sum::<u64>();
        let container_id: String = (0..4u64)
            .map(|i| {
                format!(
                    "{:016x}",
                    seed.wrapping_mul(0x9e37_79b9_7f4a_7c15 ^ (i + 1))
                )
            })
            .collect();
        let rel = format!(
            "kepler-ebpf-test-{}-{tag}/{container_id}",
            std::process::id()
        );
        let mut dirs = Vec::new();
        for root in roots {
            let dir = root.join(&rel);
            std::fs::create_dir_all(&dir)?;
            dirs.push(dir);
        }
        Ok((dirs, container_id))
    }

    /// In the cgroup2 hierarchy, accounted by its `cpu.stat`.
    pub fn create_v2(root: &Path, tag: &str) -> std::io::Result<TestCgroup> {
        let (dirs, container_id) = Self::make(&[root], tag)?;
        let usage = Usage::CpuStat(dirs[0].join("cpu.stat"));
        Ok(TestCgroup {
            dirs,
            usage,
            container_id,
        })
    }

    /// In the v1 `cpu` and `cpuacct` hierarchies (a hybrid host's container runtime layout),
    /// accounted by `cpuacct.usage`; the unified cgroup is left as it is.
    pub fn create_v1(cpu: &Path, cpuacct: &Path, tag: &str) -> std::io::Result<TestCgroup> {
        let roots: Vec<&Path> = if cpu == cpuacct {
            vec![cpu]
        } else {
            vec![cpu, cpuacct]
        };
        let (dirs, container_id) = Self::make(&roots, tag)?;
        let usage = Usage::Cpuacct(dirs[dirs.len() - 1].join("cpuacct.usage"));
        Ok(TestCgroup {
            dirs,
            usage,
            container_id,
        })
    }

    /// The cgroup's own CPU accounting (precise: summed from scheduler runtime).
    pub fn usage(&self) -> Duration {
        match &self.usage {
            Usage::CpuStat(p) => {
                let stat = std::fs::read_to_string(p).unwrap_or_default();
                let usec = stat
                    .lines()
                    .find_map(|l| l.strip_prefix("usage_usec "))
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                Duration::from_micros(usec)
            }
            Usage::Cpuacct(p) => {
                let ns = std::fs::read_to_string(p)
                    .ok()
                    .and_then(|v| v.trim().parse().ok())
                    .unwrap_or(0);
                Duration::from_nanos(ns)
            }
        }
    }

    /// Makes `cmd`'s process join this cgroup (in every hierarchy) before it execs.
    pub fn join_on_exec(&self, cmd: &mut Command) {
        let procs: Vec<CString> = self
            .dirs
            .iter()
            .map(|d| {
                CString::new(d.join("cgroup.procs").to_string_lossy().as_bytes())
                    .expect("no NUL in path")
            })
            .collect();
        // SAFETY: the closure only uses open/write/close, async-signal-safe, on paths built
        // before fork.
        unsafe {
            cmd.pre_exec(move || {
                for p in &procs {
                    let fd = libc::open(p.as_ptr(), libc::O_WRONLY);
                    if fd < 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    let n = libc::write(fd, b"0".as_ptr().cast(), 1);
                    libc::close(fd);
                    if n != 1 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
    }
}

impl Drop for TestCgroup {
    fn drop(&mut self) {
        for dir in &self.dirs {
            // Exited tasks can hold the cgroup for a moment after their parent reaped them.
            for _ in 0..50 {
                if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            if let Some(parent) = dir.parent() {
                let _ = std::fs::remove_dir(parent);
            }
        }
    }
}

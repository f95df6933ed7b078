//! A process's CPU time from its POSIX CPU clock: `clock_gettime` on the clock the kernel keeps
//! for every thread group, looked up by pid. It gives the whole group's scheduler runtime in
//! ns, the threads that ended included, in one system call with no file to open, hold or
//! format. `/proc/<pid>/schedstat` gives only the main thread's, and its `pread` runs procfs'
//! text formatting: with caches as cold as a 1 s interval leaves them, 0.9–1.3 µs a process
//! through the clock against 2.0–2.4 µs through a held `schedstat` and ~7 µs through one
//! opened by path (`bench/procfs_clock.sh`).
//!
//! The clock names a pid, not a process: it is read only for a procfs tree of this process's
//! own pid namespace ([`tree_is_own`]), and a process read through it at a pid the kernel gave
//! out again since the scan before is checked after the scan
//! ([`ProcfsSource::check_read_by_pid`]; see also [`super::credit`]).

use std::fs::File;
use std::io;
use std::path::Path;
use std::time::Duration;

use kepler_core::{ProcessKey, ProcessUsage};

use super::ProcfsSource;

/// The kernel's clock id for the scheduler runtime of the thread group `pid`
/// (`MAKE_PROCESS_CPUCLOCK(pid, CPUCLOCK_SCHED)`); `None` for 0, which would name the caller.
fn process_sched_clock(pid: u32) -> Option<libc::clockid_t> {
    const CPUCLOCK_SCHED: libc::clockid_t = 2;
    let pid = libc::clockid_t::try_from(pid).ok().filter(|&p| p > 0)?;
    Some((!pid).wrapping_shl(3) | CPUCLOCK_SCHED)
}

/// The scheduler runtime (ns) of the thread group whose leader is `pid` in this process's pid
/// namespace: its live threads' and its ended threads'. `None` when no such group exists (it
/// was reaped, or `pid` names a thread that leads none).
pub(crate) fn group_runtime(pid: u32) -> Option<u64> {
    let runtime = read_clock(process_sched_clock(pid)?).ok()?;
    u64::try_from(runtime.as_nanos()).ok()
}

/// Reads clock `id` (`clock_gettime`): the kernel refuses a pid's CPU clock where no thread
/// group is at that pid. The agent's one wrapper of the call, for every clock it reads.
pub fn read_clock(id: libc::clockid_t) -> io::Result<Duration> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec, which `ts` is, and reads nothing else.
    if unsafe { libc::clock_gettime(id, &mut ts) } != 0 {
        return Err(io::Error::last_os_error());
    }
    match (u64::try_from(ts.tv_sec), u32::try_from(ts.tv_nsec)) {
        (Ok(secs), Ok(nanos)) if nanos < 1_000_000_000 => Ok(Duration::new(secs, nanos)),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("clock {id} read {}.{:09}", ts.tv_sec, ts.tv_nsec),
        )),
    }
}

/// Whether the procfs tree at `root` is of this process's own pid namespace, so that a pid it
/// lists names the same process to [`group_runtime`]: it is a procfs mount, and its `self`
/// names this process by the pid the kernel gives it here. A fixture tree, or the host's
/// `/proc` mounted into a container with a pid namespace of its own, is not.
pub(crate) fn tree_is_own(root: &Path) -> bool {
    let own = std::process::id();
    let procfs = File::open(root).is_ok_and(|dir| super::read::is_procfs(&dir));
    let self_pid = std::fs::read_link(root.join("self"))
        .ok()
        .and_then(|target| target.to_str()?.parse::<u32>().ok());
    procfs && self_pid == Some(own) && group_runtime(own).is_some()
}

/// Whether the kernel may have given out `pid` while its last pid given out went from `before`
/// to `after`: it hands pids out in rising order from its cursor, coming round to the lowest
/// free one past the top, so those given out lie in `(before, after]`, or past `before` and up
/// to `after` where it came round. (Unless it came round to `before` again, which takes as many
/// tasks as there are free pids; the caller rules that out.)
pub(crate) fn given_out_between(pid: u64, before: u64, after: u64) -> bool {
    if before <= after {
        before < pid && pid <= after
    } else {
        pid > before || pid <= after
    }
}

/// The last pid given out as the scan before read it, where the fork count is still the one
/// read ahead of it then (`before`: that last pid and that count): no task was created since,
/// so none took a pid. `None` where it must be read again. (A fork that fails after taking
/// its pid, on a cgroup's pid limit say, gives one out without counting; the older pid then
/// starts the range of pids given out, checked after the scan, before where the kernel's cursor
/// is: that checks more pids, not fewer.)
pub(crate) fn unmoved_last_pid(
    (last_pid, forks_then): (Option<u64>, Option<u64>),
    forks: Option<u64>,
) -> Option<u64> {
    match (last_pid, forks_then, forks) {
        (Some(last_pid), Some(then), Some(now)) if then == now => Some(last_pid),
        _ => None,
    }
}

/// The most pids the kernel gives out (`<root>/sys/kernel/pid_max`); `None` when unreadable.
pub(crate) fn pid_max(root: &Path) -> Option<u64> {
    let text = std::fs::read_to_string(root.join("sys/kernel/pid_max")).ok()?;
    text.trim().parse().ok()
}

impl ProcfsSource {
    /// Makes sure that each process this scan read through its CPU clock was the process its
    /// pid named when it was identified. The clock names a pid, which goes to another process
    /// only when the kernel gives it out again; the pids it gave out from the start of the
    /// scan before (`before`: the last pid and the fork count read then, ahead of that scan's
    /// reads) to the end of this one lie between that last pid and the one after this scan
    /// ([`given_out_between`]). Each process read at such a pid (each one, where the last pid
    /// cannot be read, or so many tasks started that the kernel may have come round) is
    /// checked through its `stat`: one gone by now, or another at its pid, is taken out of the
    /// snapshot as ended (where the agent reads cgroup counters, its last time reaches its
    /// cgroup through them). True when none was. An unmoved last pid is taken as no task
    /// created: to come back to it the kernel would have to give out every free pid in between.
    pub(super) fn check_read_by_pid(
        &mut self,
        (last_pid, forks): (Option<u64>, Option<u64>),
        processes: &mut Vec<ProcessUsage>,
    ) -> bool {
        if self.read_by_pid.is_empty() {
            return true;
        }
        let after = self.reader.read_last_pid();
        let given_out = match (last_pid, after) {
            (Some(before), Some(after)) if before == after => None,
            (Some(before), Some(after)) if self.few_tasks_since(forks) => Some((before, after)),
            // Every pid: the range check cannot tell.
            _ => Some((0, u64::MAX)),
        };
        let mut complete = true;
        if let Some((before, after)) = given_out {
            let user_hz = self.reader.user_hz();
            let pids = std::mem::take(&mut self.read_by_pid);
            for &pid in pids
                .iter()
                .filter(|&&pid| given_out_between(u64::from(pid), before, after))
            {
                let known = self.cache.get(&pid).map(|c| ProcessKey {
                    pid,
                    start_time: super::parse::ticks_to_duration(c.start_ticks, user_hz),
                });
                if known.is_none() || self.reader.process_key(pid) != known {
                    tracing::debug!(pid, "read through its clock while its pid changed hands");
                    processes.retain(|p| p.key.pid != pid);
                    self.cache.remove(&pid);
                    complete = false;
                }
            }
            // Handed back as a buffer for the next scan (emptied below).
            self.read_by_pid = pids;
        }
        self.read_by_pid.clear();
        complete
    }

    /// Whether fewer tasks were created since the fork count `forks` was read than would bring
    /// the kernel's pid cursor round to where it was: half the pids there are.
    fn few_tasks_since(&mut self, forks: Option<u64>) -> bool {
        let (Some(forks), Some(pid_max)) = (forks, self.pid_max) else {
            return false;
        };
        self.reader
            .read_node_stat()
            .ok()
            .and_then(|stat| stat.forks)
            .is_some_and(|now| now.saturating_sub(forks) < pid_max / 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    fn schedstat_runtime(path: &str) -> u64 {
        let text = std::fs::read(path).unwrap();
        super::super::parse::parse_schedstat_runtime(&text).unwrap()
    }

    #[test]
    fn pids_given_out_lie_past_the_cursor_and_come_round() {
        assert!(given_out_between(11, 10, 12) && given_out_between(12, 10, 12));
        assert!(!given_out_between(10, 10, 12) && !given_out_between(13, 10, 12));
        assert!(!given_out_between(11, 10, 10), "nothing given out");
        // Came round past the top: from 4,000,000 up, then 300 up to 305.
        assert!(given_out_between(4_100_000, 4_000_000, 305));
        assert!(given_out_between(301, 4_000_000, 305));
        assert!(!given_out_between(306, 4_000_000, 305));
        assert!(!given_out_between(3_999_999, 4_000_000, 305));
        assert!(pid_max(Path::new("/proc")).is_some_and(|max| max >= 300));
        assert_eq!(pid_max(Path::new("/nonexistent")), None);
    }

    #[test]
    fn the_last_pid_stands_while_no_task_was_created() {
        assert_eq!(unmoved_last_pid((Some(700), Some(41)), Some(41)), Some(700));
        assert_eq!(unmoved_last_pid((Some(700), Some(41)), Some(42)), None);
        // Unread then, or no fork count (a fixture tree): read.
        assert_eq!(unmoved_last_pid((None, Some(41)), Some(41)), None);
        assert_eq!(unmoved_last_pid((Some(700), None), None), None);
        assert_eq!(unmoved_last_pid((Some(700), Some(41)), None), None);
    }

    #[test]
    fn this_hosts_proc_is_our_own_and_a_fixture_tree_is_not() {
        assert!(tree_is_own(Path::new("/proc")));
        let fixture = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(std::process::id().to_string(), fixture.path().join("self"))
            .unwrap();
        assert!(!tree_is_own(fixture.path()), "not a procfs mount");
        assert_eq!(process_sched_clock(0), None);
        assert_eq!(group_runtime(0), None);
    }

    /// The clock counts every thread of the group, those that ended too: a thread that burned
    /// CPU and was joined is in it, and not in the main thread's `schedstat`.
    #[test]
    fn the_clock_counts_the_ended_threads_of_a_group() {
        let pid = std::process::id();
        let before = group_runtime(pid).unwrap();
        let main_before = schedstat_runtime("/proc/thread-self/schedstat");
        let burned = std::thread::spawn(|| {
            let thread_start = schedstat_runtime("/proc/thread-self/schedstat");
            let start = Instant::now();
            while schedstat_runtime("/proc/thread-self/schedstat") - thread_start < 20_000_000 {
                assert!(start.elapsed() < Duration::from_secs(60), "never ran");
            }
            schedstat_runtime("/proc/thread-self/schedstat") - thread_start
        })
        .join()
        .unwrap();
        let after = group_runtime(pid).unwrap();
        let main_after = schedstat_runtime("/proc/thread-self/schedstat");
        // Other test threads may run meanwhile: the group's growth is at least the joined
        // thread's, which the main thread's runtime does not show.
        assert!(after - before >= burned, "{} < {burned}", after - before);
        assert!(main_after - main_before < burned);
    }

    /// Another process's clock is read by its pid, and matches its own `schedstat` (one
    /// thread) to within what it ran between the two reads.
    #[test]
    fn another_process_is_read_by_its_pid_and_a_reaped_one_is_not() {
        let mut child = std::process::Command::new("sh")
            .args([
                "-c",
                "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done; exec sleep 60",
            ])
            .spawn()
            .unwrap();
        let pid = child.id();
        let start = Instant::now();
        // Until it sleeps: its runtime then stands still.
        loop {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
            let state = stat.rsplit_once(") ").unwrap().1.as_bytes()[0];
            if state == b'S'
                && std::fs::read_dir(format!("/proc/{pid}/task"))
                    .unwrap()
                    .count()
                    == 1
            {
                let a = group_runtime(pid).unwrap();
                let s = schedstat_runtime(&format!("/proc/{pid}/schedstat"));
                let b = group_runtime(pid).unwrap();
                if a == b {
                    // One thread that never had another: the group's time is that thread's.
                    assert_eq!(a, s);
                    break;
                }
            }
            assert!(start.elapsed() < Duration::from_secs(60), "never slept");
            std::thread::sleep(Duration::from_millis(20));
        }
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(group_runtime(pid), None, "reaped");
    }
}

//! How a scan finds the processes it does not know yet. Listing the tree costs 1.3–2.7 µs an
//! entry with caches as cold as a 1 s interval leaves them (~180 µs for the ~70 processes of an
//! idle node, ~1.4 ms with 1,000 more), and a scan had to list whenever a task had started
//! anywhere on the node since the last listing: every scan under churn, every few seconds on
//! most nodes.
//!
//! Where the tree is of the agent's own pid namespace ([`super::clock::tree_is_own`]), a new
//! process can only be at a pid the kernel gave out since the last scan that found every
//! process: the kernel hands pids out in rising order from a cursor, coming round past the top
//! ([`super::clock::given_out_between`]), and the last one given out is in `/proc/loadavg`.
//! So such a scan reads the processes it knows and asks the CPU clock of each pid given out
//! since whether it leads a thread group (~0.3 µs a pid, none of them a file), instead of
//! listing the tree; it lists where that range is larger than a listing would cost, where the
//! cursor may have come all the way round, or where it cannot be read
//! (`bench/procfs_discover.sh`).
//!
//! The fork count is read before the cursor at each scan's start, so that every task the count
//! includes has a pid the cursor covers: a scan that found every process up to its cursor
//! reading found every task its fork count counts, and an unmoved fork count then means that
//! nothing is left to find. A pid given out out of turn (`clone3` with `set_tid`, which needs
//! `CAP_CHECKPOINT_RESTORE` and is how CRIU restores processes) does not move the cursor: such
//! a process is found by the next scan that reads every process through `stat` and sees the
//! fork count moved, which lists the tree (at most [`super::STAT_AT_LEAST_EVERY`] later).

use super::clock::group_runtime;
use super::ProcfsSource;

/// How a probe of one pid compares with listing one entry (`bench/procfs_discover.sh`:
/// 0.23–0.27 against 1.3–2.7 µs), with room to spare.
const PROBES_PER_LISTED_ENTRY: usize = 4;
/// Pids probed rather than a listing made however few processes the scan knows.
const PROBES_ANYWAY: usize = 64;

/// How a scan finds the processes it does not know yet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Discovery {
    /// No task was created since the last scan that found every process: the known ones are
    /// all there is.
    Known,
    /// The known ones, and whatever leads a thread group at a pid given out after the first
    /// cursor reading and up to the second.
    Probe { after: u64, to: u64 },
    /// A listing of the tree.
    List,
}

/// How many pids the kernel gave out while its cursor went from `after` to `to`, coming round
/// below `pid_max` where `to` is lower.
fn pids_given_out(after: u64, to: u64, pid_max: u64) -> u64 {
    if after <= to {
        to - after
    } else {
        pid_max
            .saturating_sub(after.saturating_add(1))
            .saturating_add(to)
    }
}

/// Each pid the kernel may have given out while its cursor went from `after` to `to`.
fn each_pid_given_out(after: u64, to: u64, pid_max: u64) -> impl Iterator<Item = u64> {
    let (upper, came_round) = if after <= to {
        (to, None)
    } else {
        (pid_max.saturating_sub(1), Some(1..=to))
    };
    (after.saturating_add(1)..=upper).chain(came_round.into_iter().flatten())
}

impl ProcfsSource {
    /// How this scan finds new processes, from the fork count and the pid cursor read at its
    /// start.
    pub(super) fn discovery(&self, forks: Option<u64>, last_pid: Option<u64>) -> Discovery {
        let Some(forks) = forks else {
            return Discovery::List;
        };
        if self.listed_at_forks == Some(forks) {
            return Discovery::Known;
        }
        // A scan that reads every process through `stat` lists too, for what a pid given out
        // out of turn hides.
        if !self.reads.by_clock {
            return Discovery::List;
        }
        let (Some(after), Some(to), Some(listed_at), Some(pid_max)) = (
            self.discovered_to,
            last_pid,
            self.listed_at_forks,
            self.pid_max,
        ) else {
            return Discovery::List;
        };
        // So many tasks that the cursor may have come round past where it was.
        if forks.saturating_sub(listed_at) >= pid_max / 2 {
            return Discovery::List;
        }
        let listing = self.cache.len() * PROBES_PER_LISTED_ENTRY + PROBES_ANYWAY;
        if pids_given_out(after, to, pid_max) > listing as u64 {
            return Discovery::List;
        }
        Discovery::Probe { after, to }
    }

    /// Adds to `pids` each pid given out from `after` to `to` that this source does not know
    /// and that leads a thread group now (a pid given to a thread of an older process, or
    /// whose process ended, leads none).
    pub(super) fn add_new_pids(&self, after: u64, to: u64, pids: &mut Vec<u32>) {
        let Some(pid_max) = self.pid_max else {
            return;
        };
        for pid in each_pid_given_out(after, to, pid_max) {
            let Ok(pid) = u32::try_from(pid) else {
                continue;
            };
            if !self.cache.contains_key(&pid) && group_runtime(pid).is_some() {
                pids.push(pid);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Duration;

    use kepler_core::{NoWorkloads, UsageSource};

    use super::super::held_tests::{alone, spawn};

    fn this_host() -> ProcfsSource {
        let source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
        assert!(source.group_clock, "/proc is this process's own");
        source
    }

    /// A process started between two scans is found through the pids given out since (the
    /// scan lists nothing), and so is one started while tasks keep starting. On a machine so
    /// busy that a scan lists instead (more pids given out than a listing costs, or a process
    /// ending during the listing), the next attempt tries again.
    #[test]
    fn a_process_started_between_scans_is_found_through_the_pids_given_out() {
        let _alone = alone();
        let _forker = spawn("while :; do /bin/true; sleep 0.05; done");
        let mut source = this_host();
        let mut probed = 0;
        for _ in 0..40 {
            source.snapshot().unwrap();
            let child = spawn("exec sleep 60");
            let pid = child.0.id();
            let snapshot = source.snapshot().unwrap();
            let found = snapshot.processes.iter().find(|p| p.key.pid == pid);
            // Found whichever way the scan looked.
            assert!(found.is_some(), "{pid} not found ({:?})", source.discovery);
            if matches!(source.discovery, Discovery::Probe { .. }) {
                probed += 1;
                if probed == 3 {
                    return;
                }
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("only {probed} of 40 scans probed the pids given out");
    }

    /// A pid given out to a thread of a known process, or to a process that ended before the
    /// scan, leads no thread group: the probe takes neither for a new process (a `stat` by
    /// path would have found the thread, whose directory procfs serves though it lists none).
    #[test]
    fn a_thread_or_a_reaped_process_at_a_pid_given_out_is_no_new_process() {
        let _alone = alone();
        let mut source = this_host();
        let own = std::process::id();
        for _ in 0..40 {
            source.snapshot().unwrap();
            let (tid_tx, tid_rx) = std::sync::mpsc::channel();
            let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
            let thread = std::thread::spawn(move || {
                // SAFETY: gettid has no preconditions.
                tid_tx.send(unsafe { libc::gettid() } as u32).unwrap();
                let _ = done_rx.recv();
            });
            let tid = tid_rx.recv().unwrap();
            let mut reaped = std::process::Command::new("true").spawn().unwrap();
            let reaped_pid = reaped.id();
            reaped.wait().unwrap();
            let snapshot = source.snapshot().unwrap();
            let probe = source.discovery;
            done_tx.send(()).unwrap();
            thread.join().unwrap();
            assert!(snapshot.processes.iter().any(|p| p.key.pid == own));
            for pid in [tid, reaped_pid] {
                assert!(
                    snapshot.processes.iter().all(|p| p.key.pid != pid),
                    "{pid} taken for a process ({probe:?})"
                );
            }
            if let Discovery::Probe { after, to } = probe {
                assert!(super::super::clock::given_out_between(
                    u64::from(tid),
                    after,
                    to
                ));
                return;
            }
        }
        panic!("no scan of 40 probed the pids given out");
    }

    /// When a scan probes, lists, or reads only the processes it knows.
    #[test]
    fn a_scan_probes_only_what_costs_less_than_a_listing_and_can_be_trusted() {
        let mut source = this_host();
        source.snapshot().unwrap();
        source.reads.by_clock = true;
        source.listed_at_forks = Some(1_000);
        source.discovered_to = Some(5_000);
        source.pid_max = Some(100_000);
        let known = source.cache.len() as u64;
        assert!(known > 0);
        let most = known * 4 + 64;
        let d = |s: &ProcfsSource, forks, last| s.discovery(Some(forks), Some(last));
        assert_eq!(d(&source, 1_000, 5_000), Discovery::Known);
        assert_eq!(
            d(&source, 1_000, 5_100),
            Discovery::Known,
            "no task created"
        );
        assert_eq!(
            d(&source, 1_010, 5_000 + most),
            Discovery::Probe {
                after: 5_000,
                to: 5_000 + most
            }
        );
        assert_eq!(
            d(&source, 1_010, 5_001 + most),
            Discovery::List,
            "a listing costs less"
        );
        // Come round past the top: from 99,990 up, then 1 up to 7.
        source.discovered_to = Some(99_990);
        assert_eq!(
            d(&source, 1_010, 7),
            Discovery::Probe {
                after: 99_990,
                to: 7
            }
        );
        assert_eq!(
            d(&source, 51_000, 7),
            Discovery::List,
            "may have come round"
        );
        assert_eq!(source.discovery(None, Some(7)), Discovery::List);
        assert_eq!(source.discovery(Some(1_010), None), Discovery::List);
        source.discovered_to = None;
        assert_eq!(
            d(&source, 1_010, 7),
            Discovery::List,
            "nothing found to a cursor"
        );
        source.discovered_to = Some(99_990);
        source.reads.by_clock = false;
        assert_eq!(d(&source, 1_010, 7), Discovery::List, "a scan through stat");
        source.pid_max = None;
        source.reads.by_clock = true;
        assert_eq!(d(&source, 1_010, 7), Discovery::List);
    }

    #[test]
    fn the_pids_given_out_run_from_past_the_cursor_and_come_round_below_the_top() {
        let each = |a, t, m| each_pid_given_out(a, t, m).collect::<Vec<_>>();
        assert_eq!(each(10, 13, 100), [11, 12, 13]);
        assert_eq!(pids_given_out(10, 13, 100), 3);
        assert_eq!(each(10, 10, 100), Vec::<u64>::new());
        assert_eq!(pids_given_out(10, 10, 100), 0);
        // Came round: 98 and 99 (pids stay below pid_max), then from the bottom up to 2.
        assert_eq!(each(97, 2, 100), [98, 99, 1, 2]);
        assert_eq!(pids_given_out(97, 2, 100), 4);
        assert_eq!(each(99, 0, 100), Vec::<u64>::new());
        assert_eq!(pids_given_out(99, 0, 100), 0);
        // Every pid counted is one iterated.
        for (a, t) in [(5, 9), (90, 7), (0, 99), (98, 98)] {
            assert_eq!(each(a, t, 100).len() as u64, pids_given_out(a, t, 100));
            assert!(each(a, t, 100)
                .iter()
                .all(|&p| super::super::clock::given_out_between(p, a, t) && p < 100));
        }
    }
}

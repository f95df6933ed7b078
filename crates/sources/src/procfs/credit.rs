//! The CPU time the procfs source credits a process: from its `stat`, and between `stat` reads
//! from its main thread's `schedstat` where that thread is the whole process.
//!
//! Why: the kernel writes a `stat` line field by field, with the memory and signal figures a
//! usage source never reads; `schedstat` is three numbers. Read through a held file, `stat`
//! costs ~3 µs a process here, `schedstat` under 1 µs, and with a thousand processes at a 1 s
//! interval the `stat` reads are most of the agent's CPU.
//!
//! `schedstat`'s runtime is the main thread's alone, and `stat`'s time is the whole group's,
//! including threads that have ended, in clock ticks. The main thread's runtime is the group's
//! CPU time over an interval only when no other thread lived in it: the process had one thread
//! at its last `stat` read and no task was created anywhere on the node since the previous scan
//! (`/proc/stat`'s `processes` did not move), so none can have started and ended unseen; or it
//! is a kernel thread, whose group never has another thread, read through a `schedstat` held
//! since before (so the pid cannot have gone to another process). Only then is the leader's
//! delta credited, exactly, in ns.
//!
//! On a tree of the agent's own pid namespace the group's CPU clock ([`super::clock`]) gives
//! the whole group's runtime in ns, ended threads included, whatever its thread count and
//! whatever starts meanwhile: its delta is the group's CPU time over the interval, exactly. It
//! names a pid rather than a process, so a process read through it at a pid the kernel gave
//! out again since the scan before is checked through its `stat` after the scan
//! (`ProcfsSource::check_read_by_pid`). A kernel thread's held `schedstat`, which reads its
//! own process or fails, is still read where one is held. A delta is only ever taken between
//! two readings of one kind ([`Runtime`]).
//!
//! A `stat` read credits `max(credited, stat time)`. So what is credited never goes back, and
//! never runs ahead of the truth R (the group's runtime: the leader's delta is at most R's, and
//! `stat`'s time is R rounded down to clock ticks); nor does it fall further behind R than one
//! `stat` rounding, as a `stat` read brings it up to `stat`'s time. A process read only through
//! `stat` is credited exactly `stat`'s time, as before.

use std::time::Duration;

/// A runtime in ns, and what it is of: the two count different things, so a delta is only
/// taken between two of one kind.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Runtime {
    /// The main thread's, from its `schedstat`.
    Leader(u64),
    /// The whole thread group's, ended threads included, from its CPU clock.
    Group(u64),
}

impl Runtime {
    /// `self - before` where both are of one kind.
    fn since(self, before: Runtime) -> Option<u64> {
        match (before, self) {
            (Runtime::Leader(a), Runtime::Leader(b)) | (Runtime::Group(a), Runtime::Group(b)) => {
                // The kernel's counters only grow; a smaller value would be another task's,
                // and credits nothing rather than a wrapped difference.
                Some(b.saturating_sub(a))
            }
            _ => None,
        }
    }
}

/// What has been credited to one process, and what the next runtime delta is taken from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Credit {
    credited: Duration,
    /// `num_threads` at the last `stat` read.
    threads: u64,
    /// The runtime last read, and the scan (generation) that read it.
    leader: Option<(Runtime, u64)>,
}

impl Credit {
    /// A process seen for the first time: its `stat` time and thread count.
    pub fn new(stat_time: Duration, threads: u64) -> Self {
        Credit {
            credited: stat_time,
            threads,
            leader: None,
        }
    }

    /// What a `stat` read credits; it forgets the leader's runtime read before (a baseline
    /// must be read after this `stat`, or a leader delta would count time `stat` just did).
    pub fn credit_stat(&mut self, stat_time: Duration, threads: u64) -> Duration {
        self.credited = self.credited.max(stat_time);
        self.threads = threads;
        self.leader = None;
        self.credited
    }

    /// The runtime read in scan `generation`, right after its `stat`.
    pub fn set_leader(&mut self, runtime: Runtime, generation: u64) {
        self.leader = Some((runtime, generation));
    }

    /// One thread at the last `stat` read: its leader's runtime may stand for it next scan.
    pub fn single(&self) -> bool {
        self.threads == 1
    }

    /// Whether the runtime read in the scan before `generation` may stand for the process: it
    /// was read in that scan, and it is the group's, or the main thread's of a process that
    /// had one thread at its last `stat` read. The caller adds, for the main thread's, that no
    /// task was created since that scan or that the process is a kernel thread read through a
    /// held file; for the group's, that its pid is checked after the scan.
    pub fn leader_suffices(&self, generation: u64) -> bool {
        self.leader.is_some_and(|(runtime, read_in)| {
            read_in.wrapping_add(1) == generation
                && (self.single() || matches!(runtime, Runtime::Group(_)))
        })
    }

    /// What has been credited so far.
    pub fn credited(&self) -> Duration {
        self.credited
    }

    /// The runtime at its last read, if one may still be credited from.
    pub fn leader_runtime(&self) -> Option<Runtime> {
        self.leader.map(|(runtime, _)| runtime)
    }

    /// Carries the leader's runtime read in the scan before into scan `generation`, which found
    /// that the process did not run since (see
    /// [`crate::cgroups::UsageCounters::check_quiet`]): it still holds, and may be credited
    /// from in the scan after.
    pub fn carry_leader(&mut self, generation: u64) {
        if let Some((_, read_in)) = &mut self.leader {
            if read_in.wrapping_add(1) == generation {
                *read_in = generation;
            }
        }
    }

    /// Credits the runtime since the scan before (see [`Self::leader_suffices`]); nothing
    /// when the reading before was of the other kind.
    pub fn credit_leader(&mut self, runtime: Runtime, generation: u64) -> Duration {
        if let Some(delta) = self.leader.and_then(|(before, _)| runtime.since(before)) {
            self.credited = self.credited.saturating_add(Duration::from_nanos(delta));
        }
        self.leader = Some((runtime, generation));
        self.credited
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const TICK: Duration = Duration::from_millis(10);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn a_stat_read_never_takes_back_what_the_leader_credited() {
        let mut c = Credit::new(ms(100), 1);
        c.set_leader(Runtime::Leader(100_000_000), 1);
        assert!(c.leader_suffices(2));
        assert_eq!(c.credit_leader(Runtime::Leader(107_000_000), 2), ms(107));
        // `stat` still shows 100 ms (rounded down to the tick): nothing goes back.
        assert_eq!(c.credit_stat(ms(100), 1), ms(107));
        assert_eq!(c.credit_stat(ms(120), 1), ms(120));
    }

    #[test]
    fn the_leader_stands_for_the_process_only_when_single_and_read_the_scan_before() {
        let mut c = Credit::new(ms(0), 1);
        assert!(!c.leader_suffices(1), "no baseline yet");
        c.set_leader(Runtime::Leader(5), 3);
        assert!(!c.leader_suffices(3) && c.leader_suffices(4) && !c.leader_suffices(5));
        c.credit_stat(ms(0), 2);
        c.set_leader(Runtime::Leader(5), 4);
        assert!(!c.leader_suffices(5), "two threads at the last stat read");
        c.credit_stat(ms(0), 1);
        assert!(!c.leader_suffices(5), "a stat read forgets the baseline");
    }

    /// The group's clock counts every thread: it stands for a process of any thread count.
    #[test]
    fn the_groups_runtime_stands_for_a_process_of_several_threads() {
        let mut c = Credit::new(ms(30), 4);
        c.set_leader(Runtime::Group(31_000_000), 7);
        assert!(c.leader_suffices(8) && !c.leader_suffices(9));
        assert_eq!(
            c.credit_leader(Runtime::Group(45_500_000), 8),
            ms(30) + ms(14) + ms(1) / 2
        );
    }

    #[test]
    fn a_smaller_runtime_or_one_of_the_other_kind_credits_nothing() {
        let mut c = Credit::new(ms(50), 1);
        c.set_leader(Runtime::Leader(60_000_000), 1);
        assert_eq!(c.credit_leader(Runtime::Leader(10), 2), ms(50));
        assert_eq!(c.credit_leader(Runtime::Leader(2_000_010), 3), ms(52));
        // A group's runtime counts ended threads the main thread's never did: no delta across.
        assert_eq!(c.credit_leader(Runtime::Group(900_000_000), 4), ms(52));
        assert_eq!(c.credit_leader(Runtime::Group(901_000_000), 5), ms(53));
        assert_eq!(c.credit_leader(Runtime::Leader(3_000_010), 6), ms(53));
    }

    /// One scan of a simulated process: how long it ran before the scan, and whether the scan
    /// read it through a runtime (else `stat`, with a baseline or without).
    #[derive(Clone, Debug)]
    enum Scan {
        Leader(u64),
        Stat { ran_us: u64, baseline: bool },
    }

    fn scans() -> impl Strategy<Value = Vec<Scan>> {
        let scan = prop_oneof![
            (0u64..50_000).prop_map(Scan::Leader),
            (0u64..50_000, any::<bool>())
                .prop_map(|(ran_us, baseline)| Scan::Stat { ran_us, baseline }),
        ];
        proptest::collection::vec(scan, 1..60)
    }

    proptest! {
        /// Whatever the order of `stat` and runtime reads, the credit never goes back, never
        /// exceeds the process's true runtime and never trails it by a clock tick or more:
        /// a single-threaded process read through its main thread, or one with `threads`
        /// threads through its group's clock, which counts the threads that ended (`ended_us`
        /// of them before the first scan).
        #[test]
        fn credit_stays_within_a_tick_below_the_truth(
            start_us in 0u64..1_000_000,
            ended_us in 0u64..1_000_000,
            threads in 1u64..4,
            scans in scans(),
        ) {
            let stat_time = |truth: u64| {
                let ticks = truth / 10_000_000;
                TICK * u32::try_from(ticks).unwrap()
            };
            // The group's runtime; a single thread's is all of it, it never had another.
            let group = threads > 1;
            let mut truth = (start_us + if group { ended_us } else { 0 }) * 1_000;
            let reading = |truth: u64| if group { Runtime::Group(truth) } else { Runtime::Leader(truth) };
            let mut credit = Credit::new(stat_time(truth), threads);
            let mut last = stat_time(truth);
            for (i, scan) in scans.iter().enumerate() {
                let generation = i as u64 + 1;
                let now = match *scan {
                    Scan::Leader(ran_us) if credit.leader_suffices(generation) => {
                        truth += ran_us * 1_000;
                        credit.credit_leader(reading(truth), generation)
                    }
                    Scan::Leader(ran_us) | Scan::Stat { ran_us, baseline: false } => {
                        truth += ran_us * 1_000;
                        credit.credit_stat(stat_time(truth), threads)
                    }
                    Scan::Stat { ran_us, baseline: true } => {
                        truth += ran_us * 1_000;
                        let now = credit.credit_stat(stat_time(truth), threads);
                        credit.set_leader(reading(truth), generation);
                        now
                    }
                };
                let truth = Duration::from_nanos(truth);
                prop_assert!(now >= last, "went back: {now:?} after {last:?}");
                prop_assert!(now <= truth, "{now:?} above the truth {truth:?}");
                prop_assert!(truth - now < TICK, "{now:?} a tick or more below {truth:?}");
                last = now;
            }
        }
    }
}

//! Which accounting costs less on this host: `sched_switch` charging every switch, or the
//! task iterator reading every thread once per snapshot (and `sched_switch` acting on final
//! switches only). The figures are this project's measurements on its development VM
//! (docs/benchmarks.md, "Task iterator accounting"); what they weigh is read from the host when
//! the choice is made, once, before the first snapshot.

use std::time::Duration;

/// What per-switch charging costs beyond the iterator mode's final-switch program, per switch
/// (`bench/ebpf_sched_switch.sh`, both ways): 995–1,653 ns against ~400 at idle, 1,120–1,328
/// against 430–630 at 100 spawns/s (the exits' own records in both), 717–722 against
/// 299–334 at 1,000 spawns/s, 170–176 against 49–54 under a switch storm.
const SWITCH_SAVED_NS: f64 = 600.0;
/// What one pass costs per thread, the iterator's walk and the program (`examples/ebpf_hold
/// --iterator`: 1.0 ms with 1,081 threads, 110 µs with ~150).
const PASS_NS_PER_THREAD: f64 = 1_000.0;
/// What reading one thread of a process the iterator does not visit costs, a `pread` of its
/// `schedstat`, its held `stat` shared among them (`bench/unseen_read.sh`, caches as cold as a
/// read a second leaves them: 72–80 µs for pid 1's 15 threads, 143–155 µs before `stat` was
/// held and the task directory listed only on a change).
const UNSEEN_NS_PER_THREAD: f64 = 5_000.0;
/// What a process that did not run since load costs the iterator per snapshot: its entry,
/// rewritten by the pass and read back with the map (`examples/ebpf_hold --iterator`: the map
/// read 0.5 ms with ~1,070 processes). It is not reported (readings count from the first
/// snapshot, see `reconcile::baseline`); `sched_switch` has no entry for it at all.
const QUIET_NS_PER_PROCESS: f64 = 500.0;

/// The load the choice weighs.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct HostLoad {
    /// Threads on the host.
    pub threads: u64,
    /// Threads of the processes the iterator does not visit, read from /proc instead.
    pub unseen_threads: u64,
    /// Processes that did not run since load: `sched_switch` has no entry for them, the
    /// iterator reads them at every snapshot.
    pub quiet_processes: u64,
    /// Context switches per second, all CPUs.
    pub switches_per_s: f64,
    /// Tasks created per second (processes and threads): with the switch rate, what exact
    /// exits would cost (see [`crate::exits`]).
    pub forks_per_s: f64,
}

impl HostLoad {
    /// Whether a pass per `interval` costs less than per-switch charging.
    pub fn prefers_iterator(&self, interval: Duration) -> bool {
        let interval_s = interval.as_secs_f64();
        if interval_s <= 0.0 {
            return false;
        }
        let pass_ns = self.threads as f64 * PASS_NS_PER_THREAD
            + self.unseen_threads as f64 * UNSEEN_NS_PER_THREAD
            + self.quiet_processes as f64 * QUIET_NS_PER_PROCESS;
        pass_ns / interval_s < self.switches_per_s * SWITCH_SAVED_NS
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(threads: u64, switches_per_s: f64) -> HostLoad {
        HostLoad {
            threads,
            unseen_threads: 0,
            quiet_processes: 0,
            switches_per_s,
            forks_per_s: 0.0,
        }
    }

    #[test]
    fn busy_hosts_use_the_iterator_and_idle_crowded_ones_do_not() {
        let five = Duration::from_secs(5);
        // 1,000 processes waking every second: ~2k switches/s, ~1.1k threads.
        assert!(load(1_100, 2_000.0).prefers_iterator(five));
        // 10,000 sleeping threads and few switches: a pass costs more than switches do.
        assert!(!load(10_000, 300.0).prefers_iterator(five));
        // The interval weighs in: the same host read every second passes five times as often.
        let middle = load(1_000, 500.0);
        assert!(middle.prefers_iterator(five));
        assert!(!middle.prefers_iterator(Duration::from_secs(1)));
        assert!(!middle.prefers_iterator(Duration::ZERO));
        // So do threads read from /proc.
        let idle = load(150, 300.0);
        assert!(idle.prefers_iterator(five));
        let unseen = HostLoad {
            unseen_threads: 300,
            ..idle
        };
        assert!(!unseen.prefers_iterator(five));
        // And processes it would read that sched_switch would not (1,000 asleep).
        let asleep = HostLoad {
            quiet_processes: 1_000,
            ..load(1_100, 500.0)
        };
        assert!(load(1_100, 500.0).prefers_iterator(five));
        assert!(!asleep.prefers_iterator(five));
    }
}

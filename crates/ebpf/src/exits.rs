//! How the task iterator learns of ended processes, and when to change that.
//!
//! Exact exits ([`Basis::FinalSwitch`]) run `kepler_exit` on every context switch of the node
//! and hand every ended group over in a record: each exit is exact, and a process that lived
//! between two passes is reported on its own. Under churn that is the agent's largest cost
//! (~1.1 µs an exit in the kernel and ~2.4 µs in user space, and ~100–300 ns for each switch
//! of the node, docs/benchmarks.md), while the processes it reports are short-lived ones that
//! attribution hides anyway. Counted exits ([`Basis::Kernel`]) leave `sched_switch` alone: a
//! group gone from a pass has ended, and what no pass saw (processes that lived between two
//! passes, the last moments of those that ended) reaches its cgroup's workload through the
//! cgroup's usage counter. Containers, pods, VMs and the node stay exact; only those
//! short-lived processes lose series of their own.

use std::time::{Duration, Instant};

use crate::reconcile::Basis;

/// The `ebpf.exits` setting.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Exits {
    /// Exact while they cost the node little, counted beyond (see [`ExitPolicy`]).
    #[default]
    Auto,
    /// Always exact: every process reported, whatever the churn costs.
    Exact,
    /// Always counted through the cgroups' usage counters.
    Cgroups,
}

/// What `kepler_exit` costs per context switch of the node: a call that returns at once but
/// for final switches (`bench/ebpf_exit_parts.sh`: ~107 ns at 600–1,000 switches a second,
/// ~300 with the caches of an idle node).
const EXIT_PROG_NS_PER_SWITCH: f64 = 150.0;
/// What an exact exit costs, its record in the kernel and its reconciliation in user space
/// (`bench/ebpf_exit_parts.sh`: 1.1 µs and ~2.4 µs at 100 spawns a second).
const EXACT_EXIT_NS: f64 = 3_500.0;
/// What exact exits may cost the node before the source counts exits instead: 50 µs a second,
/// 0.005 % of a core, a quarter of what the agent costs an idle node at a 5 s interval.
const BUDGET_NS_PER_S: f64 = 50_000.0;
/// How long exact exits must stay under half the budget before the source turns back to them:
/// a turn costs a pass's worth of rebasing, and churn comes in bursts.
const CALM_FOR: Duration = Duration::from_secs(60);

/// The node's rates over an interval, from `/proc/stat`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Rates {
    /// Tasks created a second (processes and threads).
    pub forks_per_s: f64,
    pub switches_per_s: f64,
}

impl Rates {
    /// From two readings of the node's fork and switch counts, `elapsed` apart.
    pub(crate) fn between(
        before: (u64, u64),
        after: (u64, u64),
        elapsed: Duration,
    ) -> Option<Rates> {
        let s = elapsed.as_secs_f64();
        if s <= 0.0 {
            return None;
        }
        Some(Rates {
            forks_per_s: after.0.saturating_sub(before.0) as f64 / s,
            switches_per_s: after.1.saturating_sub(before.1) as f64 / s,
        })
    }

    /// What exact exits cost the node at these rates, in ns a second.
    pub(crate) fn exact_exits_cost(&self) -> f64 {
        self.switches_per_s * EXIT_PROG_NS_PER_SWITCH + self.forks_per_s * EXACT_EXIT_NS
    }
}

/// Chooses the basis snapshot by snapshot.
#[derive(Debug)]
pub(crate) struct ExitPolicy {
    setting: Exits,
    /// Since when exact exits would have cost under half the budget, while counted.
    calm_since: Option<Instant>,
}

impl ExitPolicy {
    pub(crate) fn new(setting: Exits) -> Self {
        ExitPolicy {
            setting,
            calm_since: None,
        }
    }

    /// Whether the basis follows the rates (`auto`) rather than a fixed setting.
    pub(crate) fn weighs(&self) -> bool {
        self.setting == Exits::Auto
    }

    /// The basis for the interval that starts now, on `current`, given the rates of the one
    /// that ended (`None`: not known, nothing changes).
    pub(crate) fn next(&mut self, current: Basis, rates: Option<Rates>, now: Instant) -> Basis {
        match self.setting {
            Exits::Exact => return Basis::FinalSwitch,
            Exits::Cgroups => return Basis::Kernel,
            Exits::Auto => {}
        }
        let Some(rates) = rates else {
            return current;
        };
        let cost = rates.exact_exits_cost();
        match current {
            Basis::FinalSwitch if cost > BUDGET_NS_PER_S => {
                self.calm_since = None;
                Basis::Kernel
            }
            Basis::FinalSwitch => Basis::FinalSwitch,
            Basis::Kernel if cost >= BUDGET_NS_PER_S / 2.0 => {
                self.calm_since = None;
                Basis::Kernel
            }
            Basis::Kernel => {
                let since = *self.calm_since.get_or_insert(now);
                if now.saturating_duration_since(since) >= CALM_FOR {
                    self.calm_since = None;
                    Basis::FinalSwitch
                } else {
                    Basis::Kernel
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(forks_per_s: f64, switches_per_s: f64) -> Option<Rates> {
        Some(Rates {
            forks_per_s,
            switches_per_s,
        })
    }

    #[test]
    fn churn_and_busy_switching_turn_to_counted_exits_and_calm_turns_back() {
        let t0 = Instant::now();
        let mut p = ExitPolicy::new(Exits::Auto);
        let exact = Basis::FinalSwitch;
        // An idle node (this project's VM: ~70 switches a second, no forks) stays exact.
        assert_eq!(p.next(exact, rates(0.0, 72.0), t0), exact);
        assert_eq!(p.next(exact, rates(2.0, 100.0), t0), exact);
        assert_eq!(p.next(exact, None, t0), exact);
        // 100 spawns a second, or 1,000 processes waking every second (~2k switches).
        assert_eq!(p.next(exact, rates(100.0, 1_000.0), t0), Basis::Kernel);
        assert_eq!(p.next(exact, rates(0.0, 2_000.0), t0), Basis::Kernel);
        // Back only after a minute under half the budget; a busy interval restarts it.
        let counted = Basis::Kernel;
        let at = |s: u64| t0 + Duration::from_secs(s);
        assert_eq!(p.next(counted, rates(0.0, 72.0), at(0)), counted);
        assert_eq!(p.next(counted, rates(0.0, 72.0), at(30)), counted);
        assert_eq!(p.next(counted, rates(10.0, 72.0), at(40)), counted);
        assert_eq!(p.next(counted, rates(0.0, 72.0), at(50)), counted);
        assert_eq!(p.next(counted, rates(0.0, 72.0), at(100)), counted);
        assert_eq!(p.next(counted, rates(0.0, 72.0), at(110)), exact);
        // Unknown rates change nothing.
        assert_eq!(p.next(counted, None, at(500)), counted);
    }

    #[test]
    fn fixed_settings_do_not_weigh() {
        let t0 = Instant::now();
        let mut exact = ExitPolicy::new(Exits::Exact);
        assert_eq!(
            exact.next(Basis::Kernel, rates(1e6, 1e6), t0),
            Basis::FinalSwitch
        );
        let mut counted = ExitPolicy::new(Exits::Cgroups);
        assert_eq!(
            counted.next(Basis::FinalSwitch, rates(0.0, 0.0), t0),
            Basis::Kernel
        );
    }

    #[test]
    fn rates_come_from_two_readings() {
        let r = Rates::between((100, 1_000), (600, 6_000), Duration::from_secs(5)).unwrap();
        assert_eq!(
            r,
            Rates {
                forks_per_s: 100.0,
                switches_per_s: 1_000.0
            }
        );
        assert!((r.exact_exits_cost() - 500_000.0).abs() < 1e-6);
        assert_eq!(Rates::between((0, 0), (1, 1), Duration::ZERO), None);
        // Counters that went back (a fixture) read as nothing.
        let back = Rates::between((5, 5), (1, 1), Duration::from_secs(1)).unwrap();
        assert_eq!(back.exact_exits_cost(), 0.0);
    }
}

//! Task iterator readings made relative to the first snapshot. The scheduler counts a thread's
//! time from its start; for a process already running at the first snapshot, the reading then
//! is its baseline, and what it reports afterwards is its reading less that. Like
//! `sched_switch` readings (which count from load) they then count from the agent's start, and
//! a process that has not run since is not reported at all: the same processes are exported
//! whichever way the source accounts, and the quiet ones cost no series.
//!
//! When the source turns from one of a pass's two readings to the other (see
//! [`super::Basis`]), each live process's baseline moves by the difference between the two in
//! the same pass, so that what it reports goes on from where it was: a baseline may then be
//! negative (the new reading is short of what was reported).

use kepler_core::ProcessKey;

use super::FastMap;
use crate::abi::TaskTotals;

/// What is left to take off a process's readings, and the last step that met it.
#[derive(Clone, Copy, Debug)]
struct Baseline {
    cpu_ns: i64,
    switches: i64,
    seen: u64,
}

fn signed(v: u64) -> i64 {
    i64::try_from(v).unwrap_or(i64::MAX)
}

/// A reading less the baseline, and whether the process used CPU time since.
#[derive(Clone, Copy, Debug)]
pub(super) struct Rebased {
    pub totals: TaskTotals,
    pub used: bool,
}

#[derive(Default)]
pub(super) struct Baselines {
    by_key: FastMap<ProcessKey, Baseline>,
}

impl Baselines {
    /// Notes a reading of the first snapshot as its process's baseline.
    pub(super) fn set(&mut self, key: ProcessKey, t: &TaskTotals, step: u64) {
        let b = Baseline {
            cpu_ns: signed(t.cpu_ns),
            switches: signed(t.switches),
            seen: step,
        };
        self.by_key.insert(key, b);
    }

    pub(super) fn contains(&self, key: &ProcessKey) -> bool {
        self.by_key.contains_key(key)
    }

    /// A live reading less its process's baseline, if it has one. A reading can fall short of
    /// the baseline for a snapshot (a thread missed by one pass): that reads as nothing used.
    pub(super) fn live(&mut self, key: ProcessKey, t: &TaskTotals, step: u64) -> Rebased {
        match self.by_key.get_mut(&key) {
            None => Rebased {
                totals: *t,
                used: true,
            },
            Some(b) => {
                b.seen = step;
                less(b, t)
            }
        }
    }

    /// A piece of an exited group (its threads' final time since their start) less what is
    /// left of the group's baseline, which the piece uses up as far as it goes: the pieces of
    /// a group handed over in several add up to its total, and the baseline is taken off that
    /// once, whichever piece comes first.
    pub(super) fn exited(&mut self, key: ProcessKey, piece: &TaskTotals, step: u64) -> Rebased {
        match self.by_key.get_mut(&key) {
            None => Rebased {
                totals: *piece,
                used: true,
            },
            Some(b) => {
                let rebased = less(b, piece);
                b.cpu_ns = b.cpu_ns.saturating_sub(signed(piece.cpu_ns)).max(0);
                b.switches = b.switches.saturating_sub(signed(piece.switches)).max(0);
                b.seen = step;
                rebased
            }
        }
    }

    /// Moves `key`'s baseline by `cpu_ns` and `switches` (the new reading less the old one, in
    /// the same pass), so that its next readings, taken the new way, report on from where the
    /// old ones left off.
    pub(super) fn shift(&mut self, key: ProcessKey, cpu_ns: i64, switches: i64, step: u64) {
        let b = self.by_key.entry(key).or_insert(Baseline {
            cpu_ns: 0,
            switches: 0,
            seen: step,
        });
        b.cpu_ns = b.cpu_ns.saturating_add(cpu_ns);
        b.switches = b.switches.saturating_add(switches);
        b.seen = step;
    }

    /// Forgets the processes not met for `ttl` steps: gone, or ended and their pieces in.
    pub(super) fn forget_older(&mut self, step: u64, ttl: u64) {
        self.by_key.retain(|_, b| step.saturating_sub(b.seen) < ttl);
    }
}

fn less(b: &Baseline, t: &TaskTotals) -> Rebased {
    let minus = |v: u64, base: i64| {
        let left = i128::from(v) - i128::from(base);
        u64::try_from(left.max(0)).unwrap_or(u64::MAX)
    };
    Rebased {
        totals: TaskTotals {
            cpu_ns: minus(t.cpu_ns, b.cpu_ns),
            switches: minus(t.switches, b.switches),
            ..*t
        },
        used: i128::from(t.cpu_ns) > i128::from(b.cpu_ns),
    }
}

//! Task iterator readings made relative to the first snapshot. The scheduler counts a thread's
//! time from its start; for a process already running at the first snapshot, the reading then
//! is its baseline, and what it reports afterwards is its reading less that. Like
//! `sched_switch` readings (which count from load) they then count from the agent's start, and
//! a process that has not run since is not reported at all: the same processes are exported
//! whichever way the source accounts, and the quiet ones cost no series.

use kepler_core::ProcessKey;

use super::FastMap;
use crate::abi::TaskTotals;

/// What is left to take off a process's readings, and the last step that met it.
#[derive(Clone, Copy, Debug)]
struct Baseline {
    cpu_ns: u64,
    switches: u64,
    seen: u64,
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
            cpu_ns: t.cpu_ns,
            switches: t.switches,
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
                b.cpu_ns = b.cpu_ns.saturating_sub(piece.cpu_ns);
                b.switches = b.switches.saturating_sub(piece.switches);
                b.seen = step;
                rebased
            }
        }
    }

    /// Forgets the processes not met for `ttl` steps: gone, or ended and their pieces in.
    pub(super) fn forget_older(&mut self, step: u64, ttl: u64) {
        self.by_key.retain(|_, b| step.saturating_sub(b.seen) < ttl);
    }
}

fn less(b: &Baseline, t: &TaskTotals) -> Rebased {
    Rebased {
        totals: TaskTotals {
            cpu_ns: t.cpu_ns.saturating_sub(b.cpu_ns),
            switches: t.switches.saturating_sub(b.switches),
            ..*t
        },
        used: t.cpu_ns > b.cpu_ns,
    }
}

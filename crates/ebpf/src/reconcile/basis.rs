//! Which of a task iterator pass's two readings of a group is reported, and what follows from
//! it: how a group's end is learnt, and how the source turns from one to the other while
//! processes run.

use std::time::Duration;

use kepler_core::{ProcessKey, ProcessUsage};

use super::kept::Kept;
use super::{Ended, Keys, Reconciler, Reported};
use crate::abi::TaskTotals;
use crate::live_table::LiveTable;

/// A pass reads each live group two ways (`bpf/kepler.bpf.c`, `kepler_iter`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum Basis {
    /// The group's ended threads as `kepler_exit` adds them at their final switches, plus its
    /// live threads (`cpu_ns`). Every group's end comes as an exit record, with its last
    /// moments: processes that lived between two passes are reported too.
    #[default]
    FinalSwitch,
    /// What the group's released threads left in its `signal_struct`, plus its live threads
    /// (`sig_ns`): no program runs on `sched_switch`. A group gone from a whole pass has
    /// ended; its last moments, and the processes no pass met, reach their cgroup through
    /// the cgroup's usage counter, which the source then reads.
    Kernel,
}

impl Basis {
    /// `t` with its reading on this basis as its CPU time and switches.
    pub(crate) fn reading(self, t: &TaskTotals) -> TaskTotals {
        match self {
            Basis::FinalSwitch => *t,
            Basis::Kernel => t.on_kernel_basis(),
        }
    }
}

impl Reconciler {
    /// The basis live readings are taken on now.
    pub(crate) fn basis(&self) -> Basis {
        self.basis
    }

    /// Takes the readings on `to` from the next step on. `live` is a pass read after the last
    /// step (both readings of each group): each live process's baseline moves by what the two
    /// differ, so that what it reports goes on from where it was. Before the first step
    /// (`live` empty) this only sets the basis.
    pub(crate) fn rebase(&mut self, keys: &impl Keys, live: &LiveTable, to: Basis) {
        if to == self.basis {
            return;
        }
        for (tgid, t) in live {
            let key = keys.key(*tgid, t.start_ns);
            // Left out on either basis (its time before the first snapshot is unknown).
            if self.began_unseen(&key) {
                continue;
            }
            let (old, new) = (self.basis.reading(t), to.reading(t));
            let diff = |new: u64, old: u64| {
                let d = i128::from(new) - i128::from(old);
                i64::try_from(d).unwrap_or(if d < 0 { i64::MIN } else { i64::MAX })
            };
            self.baselines.shift(
                key,
                diff(new.cpu_ns, old.cpu_ns),
                diff(new.switches, old.switches),
                self.steps,
            );
        }
        self.basis = to;
    }

    /// On the kernel basis, exit records name groups a pass read (they come from the turn
    /// between bases, or are a reused tgid's leftover entry): those end by absence, on what
    /// they reported, and their records are dropped. Records of groups no pass met (a process
    /// that lived between two passes while `kepler_exit` ran) stay.
    pub(super) fn drop_records_of_read_groups(&self, exited: &mut super::Exits) {
        if self.basis == Basis::Kernel {
            exited.retain(|key, _| !(self.known.contains_key(key) || self.baselines.contains(key)));
        }
    }

    /// On the kernel basis, after a whole pass: the reported processes it did not meet have
    /// ended. Each is reported once more, exited, at what it reported last; held as ended so
    /// that no later record of it adds to that.
    pub(super) fn end_absent(&mut self, whole_pass: bool, processes: &mut Vec<ProcessUsage>) {
        if self.basis != Basis::Kernel || !whole_pass {
            return;
        }
        let step = self.steps;
        let gone: Vec<ProcessKey> = self
            .known
            .iter()
            .filter(|(_, k)| k.seen != step)
            .map(|(key, _)| *key)
            .collect();
        for key in gone {
            let Some(k) = self.known.remove(&key) else {
                continue;
            };
            let totals = TaskTotals {
                start_ns: k.start_ns,
                cgroup_id: k.cgroup_id,
                cpu_ns: k.reported.0,
                switches: k.switches,
                ..TaskTotals::default()
            };
            processes.push(ProcessUsage {
                key,
                cpu_time: Duration::from_nanos(k.reported.0),
                info: k.info.clone(),
                exited: true,
                counters: self.measured.counters(&totals),
            });
            self.ended.insert(
                key,
                Ended {
                    totals: Kept::new(&totals),
                    info: k.info,
                    reported: Reported(k.reported.0),
                    last: true,
                },
            );
        }
    }
}

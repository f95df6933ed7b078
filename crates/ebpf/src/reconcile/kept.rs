//! A group's totals as user space keeps them from one snapshot to the next: exits waiting for
//! a snapshot, ended groups held for late pieces. Under churn both hold thousands (every exit
//! of an interval, and of the last snapshot), and the whole of each `TaskTotals` (136 bytes) is
//! mostly zeros: the event counts are there only where a probe counted any.

use crate::abi::TaskTotals;

#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) enum Kept {
    /// No event counts: what reconciliation reads of the rest, inline.
    Plain {
        start_ns: u64,
        cgroup_id: u64,
        cpu_ns: u64,
        switches: u64,
        flags: u32,
    },
    Counted(Box<TaskTotals>),
}

impl Kept {
    /// Keeps what [`Kept::totals`] gives back: all but the task iterator's working fields
    /// (`pass`, `slot`, the ended threads' part, the kernel-basis reading), which no exit is
    /// read for.
    pub(super) fn new(t: &TaskTotals) -> Self {
        let counts = [
            t.page_cache_hits,
            t.irq_net_tx,
            t.irq_net_rx,
            t.irq_block,
            t.cycles,
            t.instructions,
            t.cache_misses,
        ];
        if counts.iter().all(|&n| n == 0) {
            Kept::Plain {
                start_ns: t.start_ns,
                cgroup_id: t.cgroup_id,
                cpu_ns: t.cpu_ns,
                switches: t.switches,
                flags: t.flags,
            }
        } else {
            Kept::Counted(Box::new(*t))
        }
    }

    pub(super) fn totals(&self) -> TaskTotals {
        match self {
            &Kept::Plain {
                start_ns,
                cgroup_id,
                cpu_ns,
                switches,
                flags,
            } => TaskTotals {
                start_ns,
                cgroup_id,
                cpu_ns,
                switches,
                flags,
                ..TaskTotals::default()
            },
            Kept::Counted(t) => **t,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_is_kept_gives_back_what_is_read() {
        let plain = TaskTotals {
            start_ns: 7,
            cgroup_id: 9,
            cpu_ns: 100,
            switches: 3,
            flags: TaskTotals::KERNEL_THREAD,
            ..Default::default()
        };
        let kept = Kept::new(&plain);
        assert!(matches!(kept, Kept::Plain { .. }));
        assert_eq!(kept.totals(), plain);
        let counted = TaskTotals {
            page_cache_hits: 1,
            ..plain
        };
        assert!(matches!(Kept::new(&counted), Kept::Counted(_)));
        assert_eq!(Kept::new(&counted).totals(), counted);
        // The iterator's working fields are not kept.
        let working = TaskTotals {
            dead_ns: 5,
            slot: 2,
            ..plain
        };
        assert_eq!(Kept::new(&working).totals(), plain);
        assert!(
            std::mem::size_of::<Kept>() <= 48,
            "{}",
            std::mem::size_of::<Kept>()
        );
    }
}

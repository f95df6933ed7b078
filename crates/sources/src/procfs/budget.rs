//! How many `stat` and `schedstat` files a scan may hold open: a share of the open-file limit,
//! which is asked for now and then rather than at every scan.

use std::io;
use std::time::{Duration, Instant};

/// How long the open-file limit asked for stands. The agent's HTTP server raises the limit
/// after this source is made, and an operator may change it on a running agent (`prlimit`),
/// so it is asked again: at every scan while the source is young, once in this long after.
/// Asked at every scan, the `prlimit64` call was ~2.5 % of a tick at a 1 s interval at idle
/// (docs/benchmarks.md). Late by up to this long, a lowered limit only lets the source hold
/// files its new budget would not: the budget bounds holding, not reading.
const FILE_LIMIT_STANDS: Duration = Duration::from_secs(30);

/// The soft limit on open descriptors as last asked for (`None`: it could not be read).
#[derive(Debug, Default)]
pub(super) struct FileLimit {
    limit: Option<u64>,
    /// When it was first asked for, and last.
    first: Option<Instant>,
    last: Option<Instant>,
}

impl FileLimit {
    /// The limit at `now`, from [`crate::bounded::open_file_limit`] when due.
    pub(super) fn at(&mut self, now: Instant) -> Option<u64> {
        self.at_with(now, crate::bounded::open_file_limit)
    }

    /// The limit at `now`, from `ask` when the one held no longer stands.
    pub(super) fn at_with(
        &mut self,
        now: Instant,
        ask: impl FnOnce() -> io::Result<u64>,
    ) -> Option<u64> {
        let due = match (self.first, self.last) {
            (Some(first), Some(last)) => {
                now.saturating_duration_since(first) < FILE_LIMIT_STANDS
                    || now.saturating_duration_since(last) >= FILE_LIMIT_STANDS
            }
            _ => true,
        };
        if due {
            self.limit = ask().ok();
            self.first.get_or_insert(now);
            self.last = Some(now);
        }
        self.limit
    }
}

/// `cap`, or fewer under a small open-file limit: an eighth of it at most for each of `stat`
/// and `schedstat`, the rest being for connections, meters and model files. None where the
/// limit is unknown.
pub(super) fn held_stat_budget(limit: Option<u64>, cap: usize) -> usize {
    limit.map_or(0, |limit| {
        usize::try_from(limit / 8).unwrap_or(usize::MAX).min(cap)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::cell::Cell;

    #[test]
    fn the_limit_is_asked_at_every_scan_while_young_then_once_in_a_while() {
        let asked = Cell::new(0u64);
        let ask = || {
            asked.set(asked.get() + 1);
            Ok(1_000 * asked.get())
        };
        let mut limit = FileLimit::default();
        let t0 = Instant::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        // Young: asked each time, and each answer is taken.
        assert_eq!(limit.at_with(at(0), ask), Some(1_000));
        assert_eq!(limit.at_with(at(1), ask), Some(2_000));
        assert_eq!(limit.at_with(at(29), ask), Some(3_000));
        // Past its youth: an answer stands for FILE_LIMIT_STANDS from when it was asked.
        assert_eq!(limit.at_with(at(30), ask), Some(3_000));
        assert_eq!(limit.at_with(at(58), ask), Some(3_000));
        assert_eq!(asked.get(), 3);
        assert_eq!(limit.at_with(at(59), ask), Some(4_000));
        assert_eq!(limit.at_with(at(60), ask), Some(4_000));
        assert_eq!(limit.at_with(at(88), ask), Some(4_000));
        assert_eq!(limit.at_with(at(89), ask), Some(5_000));
        assert_eq!(asked.get(), 5);
        // An unreadable limit is none, and is asked for again when due.
        let mut failing = FileLimit::default();
        let refused = || Err(io::Error::from_raw_os_error(libc::EPERM));
        assert_eq!(failing.at_with(at(0), refused), None);
        assert_eq!(failing.at_with(at(40), || Ok(64)), Some(64));
    }

    #[test]
    fn the_budget_is_an_eighth_of_the_limit_within_the_cap() {
        assert_eq!(held_stat_budget(Some(1_024), 1_024), 128);
        assert_eq!(held_stat_budget(Some(1 << 20), 1_024), 1_024);
        assert_eq!(held_stat_budget(Some(u64::MAX), 7), 7);
        assert_eq!(held_stat_budget(Some(7), 1_024), 0);
        assert_eq!(held_stat_budget(None, 1_024), 0);
    }

    #[test]
    fn this_process_has_a_limit() {
        let mut limit = FileLimit::default();
        assert!(limit.at(Instant::now()).is_some_and(|l| l > 0));
    }
}

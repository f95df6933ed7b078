//! Draining the exit ring between snapshots when exits come faster than one ring's worth an
//! interval. A full ring defers exits to the process map (`kepler_agent_ebpf_exits_deferred_total`):
//! nothing is lost, but every deferred exit costs a map update in the kernel and then a read
//! of the whole map, a collection and a delete in user space, and the tables those need stay
//! resident. At 1,000 exits a second and a 5 s interval two thirds of the exits took that path
//! and the agent held ~2 MB more for it; a drain every ~1.2 s instead keeps every exit in the
//! ring. Where snapshots alone keep up (the common case) there are no drains and no extra
//! wake-ups.

use std::time::{Duration, Instant};

/// The ring's share the next interval may fill between two drains: the rest is room for a rate
/// that rises before the next snapshot measures it.
const FILL_NUMERATOR: u64 = 3;
const FILL_DENOMINATOR: u64 = 4;

/// Drains come no closer than this; at rates beyond what it allows, the excess is deferred.
pub(crate) const MIN_PERIOD: Duration = Duration::from_millis(100);

/// Bytes one exit takes in the ring: the record and the ring's 8-byte header, rounded to 8.
pub(crate) fn record_bytes() -> u64 {
    let record = std::mem::size_of::<crate::abi::ExitRecord>() as u64;
    (record + 8).next_multiple_of(8)
}

/// How often to drain a ring of `ring_records` exits, given that the last interval (`elapsed`
/// long) brought `exits`: often enough that a ring-share ([`FILL_NUMERATOR`] /
/// [`FILL_DENOMINATOR`]) fills between two drains. `None` when that takes longer than the
/// interval, so snapshots alone keep up.
pub(crate) fn period(ring_records: u64, exits: u64, elapsed: Duration) -> Option<Duration> {
    if exits == 0 || elapsed.is_zero() {
        return None;
    }
    let share = ring_records.saturating_mul(FILL_NUMERATOR) / FILL_DENOMINATOR;
    // Converted once, so that no integer overflows for any input.
    let period = elapsed.as_secs_f64() * share as f64 / exits as f64;
    let period = Duration::try_from_secs_f64(period).unwrap_or(Duration::MAX);
    (period < elapsed).then_some(period.max(MIN_PERIOD))
}

/// What one interval brought, and the period it sets.
#[derive(Debug)]
pub(crate) struct Drains {
    ring_records: u64,
    /// Records drained since the last snapshot (the snapshot's own drain included).
    drained: u64,
    /// The kernel's count of deferred exits at the last snapshot.
    deferred_at_snapshot: u64,
    last_snapshot: Instant,
    every: Option<Duration>,
}

impl Drains {
    pub(crate) fn new(ring_bytes: u32) -> Self {
        Drains {
            ring_records: u64::from(ring_bytes) / record_bytes(),
            drained: 0,
            deferred_at_snapshot: 0,
            last_snapshot: Instant::now(),
            every: None,
        }
    }

    pub(crate) fn drained(&mut self, records: u64) {
        self.drained = self.drained.saturating_add(records);
    }

    /// After a drain between snapshots that took `records` (counted already): one that found
    /// the ring past its share means exits come faster than the last interval's rate, so
    /// drains come twice as often until the next snapshot measures the rate again.
    pub(crate) fn between_snapshots(&mut self, records: u64) {
        if records >= self.share() {
            self.every = self.every.map(|e| (e / 2).max(MIN_PERIOD));
        }
    }

    fn share(&self) -> u64 {
        self.ring_records.saturating_mul(FILL_NUMERATOR) / FILL_DENOMINATOR
    }

    /// Ends an interval at a snapshot: its exits are the records drained and those deferred
    /// since the last one (`deferred_total` is the kernel's count since load).
    pub(crate) fn snapshot(&mut self, deferred_total: u64, now: Instant) {
        let deferred = deferred_total.saturating_sub(self.deferred_at_snapshot);
        let exits = self.drained.saturating_add(deferred);
        let elapsed = now.saturating_duration_since(self.last_snapshot);
        let every = period(self.ring_records, exits, elapsed);
        if every.is_some() != self.every.is_some() {
            match every {
                Some(every) => tracing::info!(
                    exits,
                    ?elapsed,
                    ring_records = self.ring_records,
                    ?every,
                    "exits come faster than the exit ring holds an interval: draining it between snapshots"
                ),
                None => tracing::info!(exits, ?elapsed, "exit ring: snapshots alone keep up again"),
            }
        }
        self.every = every;
        self.drained = 0;
        self.deferred_at_snapshot = deferred_total;
        self.last_snapshot = now;
    }

    pub(crate) fn every(&self) -> Option<Duration> {
        self.every
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RING: u64 = 1_600;

    #[test]
    fn snapshots_alone_keep_up_below_three_quarters_of_the_ring() {
        let five = Duration::from_secs(5);
        assert_eq!(period(RING, 0, five), None);
        assert_eq!(period(RING, 500, five), None);
        // 1,200 records fill exactly three quarters: a drain at the snapshot is in time.
        assert_eq!(period(RING, 1_200, five), None);
        assert_eq!(period(RING, 1_000, Duration::ZERO), None);
    }

    #[test]
    fn the_period_fills_three_quarters_at_the_last_rate() {
        let five = Duration::from_secs(5);
        // 1,000 a second: 1,200 records take 1.2 s.
        let p = period(RING, 5_000, five).unwrap();
        assert!((p.as_secs_f64() - 1.2).abs() < 1e-9, "{p:?}");
        // Twice the rate, half the period.
        let q = period(RING, 10_000, five).unwrap();
        assert!((q.as_secs_f64() - 0.6).abs() < 1e-9, "{q:?}");
        // A 1 s interval with the same rate: snapshots come before the ring fills.
        assert_eq!(period(RING, 1_000, Duration::from_secs(1)), None);
        // Beyond what the floor allows, drains stay at the floor.
        assert_eq!(period(RING, 10_000_000, five), Some(MIN_PERIOD));
        assert_eq!(period(RING, u64::MAX, five), Some(MIN_PERIOD));
        assert_eq!(
            period(RING, u64::MAX, Duration::MAX),
            Some(Duration::from_secs(1_200))
        );
        assert_eq!(period(u64::MAX, 2, Duration::MAX), None);
    }

    #[test]
    fn an_interval_counts_drained_and_deferred_exits() {
        let t0 = Instant::now();
        let mut d = Drains::new(256 << 10);
        assert_eq!(d.ring_records, (256 << 10) / 176);
        d.last_snapshot = t0;
        d.drained(1_000);
        // 1,000 drained and 4,000 deferred in 5 s.
        d.snapshot(4_000, t0 + Duration::from_secs(5));
        let every = d.every().unwrap();
        assert!(every < Duration::from_millis(1_300), "{every:?}");
        // The next interval, drained between snapshots: a drain within the ring's share
        // leaves the period, one past it halves it, down to the floor.
        d.drained(900);
        d.between_snapshots(900);
        assert_eq!(d.every(), Some(every));
        d.drained(1_300);
        d.between_snapshots(1_300);
        assert_eq!(d.every(), Some(every / 2));
        for _ in 0..20 {
            d.between_snapshots(1_300);
        }
        assert_eq!(d.every(), Some(MIN_PERIOD));
        d.drained(2_800);
        // The snapshot measures the rate again: 5,000 in 5 s, no more deferred.
        d.snapshot(4_000, t0 + Duration::from_secs(10));
        assert_eq!(d.every(), Some(every));
        // The churn ends.
        d.drained(10);
        d.snapshot(4_000, t0 + Duration::from_secs(15));
        assert_eq!(d.every(), None);
    }
}

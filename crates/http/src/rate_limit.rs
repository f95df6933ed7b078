//! exporter-toolkit's `rate_limit`: a token bucket over every request to the server, refilled
//! one token per `interval` up to `burst`; a request finding it empty gets 429 Too Many
//! Requests before any other work (basic auth's bcrypt included).

use std::sync::{Mutex, PoisonError};
use std::time::{Duration, Instant};

/// `rate_limit` as configured: at most `burst` requests at once, one more per `interval`.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct RateLimit {
    pub interval: Duration,
    pub burst: u32,
}

/// The bucket shared by every connection.
#[derive(Debug)]
pub(crate) struct Bucket {
    limit: RateLimit,
    /// Tokens left and when they were counted.
    state: Mutex<(f64, Instant)>,
}

impl Bucket {
    pub(crate) fn new(limit: RateLimit, now: Instant) -> Bucket {
        Bucket {
            limit,
            state: Mutex::new((f64::from(limit.burst), now)),
        }
    }

    /// Whether the bucket would be full at `now`: its owner has been quiet long enough to be
    /// forgotten.
    pub(crate) fn is_full(&self, now: Instant) -> bool {
        let state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, since) = *state;
        let refill =
            now.saturating_duration_since(since).as_secs_f64() / self.limit.interval.as_secs_f64();
        tokens + refill >= f64::from(self.limit.burst)
    }

    /// Takes a token at `now` if there is one.
    pub(crate) fn allow(&self, now: Instant) -> bool {
        let mut state = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let (tokens, since) = *state;
        let refill =
            now.saturating_duration_since(since).as_secs_f64() / self.limit.interval.as_secs_f64();
        let tokens = (tokens + refill).min(f64::from(self.limit.burst));
        if tokens >= 1.0 {
            *state = (tokens - 1.0, now);
            true
        } else {
            *state = (tokens, now);
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bursts_then_one_per_interval() {
        let t0 = Instant::now();
        let b = Bucket::new(
            RateLimit {
                interval: Duration::from_secs(1),
                burst: 3,
            },
            t0,
        );
        assert!(b.allow(t0) && b.allow(t0) && b.allow(t0));
        assert!(!b.allow(t0), "burst spent");
        assert!(!b.allow(t0 + Duration::from_millis(500)));
        assert!(
            b.allow(t0 + Duration::from_millis(1000)),
            "one token per interval"
        );
        assert!(!b.allow(t0 + Duration::from_millis(1100)));
        // Refills cap at the burst.
        let later = t0 + Duration::from_secs(100);
        assert!((0..3).all(|_| b.allow(later)));
        assert!(!b.allow(later));
    }
}

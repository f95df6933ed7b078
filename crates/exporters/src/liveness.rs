//! Whether the sampling thread is alive: `/healthz` answers 503 once no tick has completed for
//! longer than the stall limit. A sampler stuck in a read (a hung device file) otherwise
//! leaves a process that answers HTTP but measures nothing, and Kubernetes never restarts it.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The last completed tick, as milliseconds since `origin`, and the limit of silence.
#[derive(Debug)]
pub struct Liveness {
    origin: Instant,
    last_ms: AtomicU64,
    /// 0: not watched (ticks on demand, or before the sampler starts).
    stall_after_ms: AtomicU64,
}

impl Default for Liveness {
    fn default() -> Self {
        Liveness {
            origin: Instant::now(),
            last_ms: AtomicU64::new(0),
            stall_after_ms: AtomicU64::new(0),
        }
    }
}

impl Liveness {
    fn now_ms(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Starts watching: from now on, `limit` without a [`Liveness::beat`] is a stall.
    pub fn watch(&self, limit: Duration) {
        self.beat();
        let ms = u64::try_from(limit.as_millis()).unwrap_or(u64::MAX).max(1);
        self.stall_after_ms.store(ms, Ordering::Relaxed);
    }

    /// A tick completed (successfully or not: the thread is alive).
    pub fn beat(&self) {
        self.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// `Err` with the reason when the sampler has been silent past the limit.
    pub fn check(&self) -> Result<(), String> {
        let limit = self.stall_after_ms.load(Ordering::Relaxed);
        if limit == 0 {
            return Ok(());
        }
        let silent = self
            .now_ms()
            .saturating_sub(self.last_ms.load(Ordering::Relaxed));
        if silent > limit {
            return Err(format!(
                "sampler stalled: no tick completed for {:.1}s (limit {:.1}s)",
                silent as f64 / 1e3,
                limit as f64 / 1e3
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn silence_past_the_limit_is_a_stall_and_a_beat_ends_it() {
        let l = Liveness::default();
        assert!(l.check().is_ok(), "unwatched");
        l.watch(Duration::from_millis(30));
        assert!(l.check().is_ok());
        // Polled rather than slept: a busy machine only makes the stall longer.
        let deadline = Instant::now() + Duration::from_secs(30);
        while l.check().is_ok() {
            assert!(Instant::now() < deadline);
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(l.check().unwrap_err().contains("sampler stalled"));
        l.beat();
        assert!(l.check().is_ok());
    }
}

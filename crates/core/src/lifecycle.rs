//! The stop signal the agent's background threads share: one call stops them all, and a
//! thread that sleeps between rounds wakes at once instead of finishing its sleep.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

/// Cloned into every background thread of a service; see the module docs.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    inner: Arc<(Mutex<bool>, Condvar)>,
}

impl StopSignal {
    pub fn new() -> Self {
        Self::default()
    }

    /// Stops every holder of a clone.
    pub fn stop(&self) {
        let (stopped, wake) = &*self.inner;
        *stopped.lock().unwrap_or_else(PoisonError::into_inner) = true;
        wake.notify_all();
    }

    pub fn is_stopped(&self) -> bool {
        *self.inner.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sleeps for `timeout` unless stopped first; returns true when stopped.
    pub fn wait(&self, timeout: Duration) -> bool {
        let (stopped, wake) = &*self.inner;
        let deadline = Instant::now().checked_add(timeout);
        let mut guard = stopped.lock().unwrap_or_else(PoisonError::into_inner);
        while !*guard {
            let left = match deadline {
                Some(deadline) => deadline.saturating_duration_since(Instant::now()),
                // A timeout too large to represent: wait until stopped.
                None => Duration::from_secs(3600),
            };
            if deadline.is_some() && left.is_zero() {
                return false;
            }
            guard = wake
                .wait_timeout(guard, left)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stop_wakes_a_sleeping_thread() {
        let stop = StopSignal::new();
        let sleeper = stop.clone();
        let thread = std::thread::spawn(move || sleeper.wait(Duration::from_secs(3600)));
        stop.stop();
        assert!(thread.join().unwrap());
        assert!(stop.is_stopped());
        assert!(stop.wait(Duration::ZERO));
    }

    #[test]
    fn without_a_stop_the_wait_times_out() {
        assert!(!StopSignal::new().wait(Duration::from_millis(1)));
    }
}

//! The agent's service runtime: it owns every background thread (the sampler, model refresh,
//! pollers) and their one stop signal, so there is a single shutdown path and no detached
//! loop outlives it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kepler_core::StopSignal;
use tracing::{error, warn};

/// How long shutdown waits for background threads. A thread stuck in a blocking read (a
/// hung device file) is left behind rather than holding the process up: the process exits.
const GRACE: Duration = Duration::from_secs(5);

/// See the module docs.
pub struct Service {
    stop: StopSignal,
    /// Each thread with whether its work has returned (set by its [`Running`] guard).
    threads: Vec<(String, JoinHandle<()>, Arc<AtomicBool>)>,
    running: Arc<(Mutex<usize>, Condvar)>,
    grace: Duration,
}

impl Default for Service {
    fn default() -> Self {
        Service {
            stop: StopSignal::new(),
            threads: Vec::new(),
            running: Arc::default(),
            grace: GRACE,
        }
    }
}

impl Service {
    pub fn new() -> Self {
        Self::default()
    }

    /// How long [`Service::shutdown`] waits for threads (default [`GRACE`]).
    pub fn with_grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// The signal every background thread of this service watches.
    pub fn stop_signal(&self) -> StopSignal {
        self.stop.clone()
    }

    /// Starts a named background thread; it is given the stop signal and must return soon
    /// after the signal fires.
    pub fn spawn(
        &mut self,
        name: &str,
        work: impl FnOnce(StopSignal) + Send + 'static,
    ) -> std::io::Result<()> {
        let stop = self.stop.clone();
        let running = self.running.clone();
        *running.0.lock().unwrap_or_else(PoisonError::into_inner) += 1;
        let returned = Arc::new(AtomicBool::new(false));
        let guard = Running(running.clone(), returned.clone());
        let spawned = std::thread::Builder::new()
            .name(name.to_string())
            .spawn(move || {
                let _guard = guard;
                work(stop);
            });
        match spawned {
            Ok(handle) => {
                self.threads.push((name.to_string(), handle, returned));
                Ok(())
            }
            Err(e) => Err(e),
        }
    }

    /// Stops every thread and waits for them, at most the grace period in all; returns how
    /// many were left behind.
    pub fn shutdown(self) -> usize {
        self.stop.stop();
        let deadline = Instant::now() + self.grace;
        let (count, done) = &*self.running;
        let mut left = count.lock().unwrap_or_else(PoisonError::into_inner);
        while *left > 0 {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            left = done
                .wait_timeout(left, deadline - now)
                .unwrap_or_else(PoisonError::into_inner)
                .0;
        }
        let stuck = *left;
        drop(left);
        let mut left_behind = 0;
        for (name, handle, returned) in self.threads {
            // A thread whose work has returned may not have ended yet (std records its result
            // after the guard has counted it out): it is joined, which takes moments. Testing
            // only `is_finished` called it stuck whenever the waker preempted it there, which
            // the agent's shutdown did nearly every time.
            if returned.load(Ordering::Acquire) || handle.is_finished() {
                // Release builds abort on panic, so a join error only shows up in debug builds.
                if handle.join().is_err() {
                    error!(thread = name, "background thread panicked");
                }
            } else {
                left_behind += 1;
                warn!(
                    thread = name,
                    "background thread did not stop in time; leaving it"
                );
            }
        }
        if stuck > 0 {
            warn!(threads = stuck, "shutting down with threads still blocked");
        }
        left_behind
    }
}

/// Counts a thread as running until its work ends, however it ends, and marks it returned.
struct Running(Arc<(Mutex<usize>, Condvar)>, Arc<AtomicBool>);

impl Drop for Running {
    fn drop(&mut self) {
        self.1.store(true, Ordering::Release);
        let (count, done) = &*self.0;
        let mut count = count.lock().unwrap_or_else(PoisonError::into_inner);
        *count = count.saturating_sub(1);
        done.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shutdown_stops_sleeping_threads() {
        let mut service = Service::new();
        let (tx, rx) = std::sync::mpsc::channel();
        service
            .spawn("sleeper", move |stop| {
                let stopped = stop.wait(Duration::from_secs(3600));
                let _ = tx.send(stopped);
            })
            .unwrap();
        assert_eq!(service.shutdown(), 0);
        // The thread ran to its end within shutdown: its answer is already there.
        assert_eq!(rx.try_recv(), Ok(true), "woken by the stop signal");
    }

    #[test]
    fn shutdown_does_not_wait_for_a_stuck_thread() {
        let mut service = Service::new().with_grace(Duration::from_millis(50));
        let (unblock, blocked) = std::sync::mpsc::channel::<()>();
        let (tx, rx) = std::sync::mpsc::channel();
        service
            .spawn("stuck", move |_stop| {
                // Ignores the stop signal, like a read blocked on a hung device file.
                let _ = blocked.recv();
                let _ = tx.send(());
            })
            .unwrap();
        assert_eq!(service.shutdown(), 1);
        assert!(
            rx.try_recv().is_err(),
            "shutdown returned while it was stuck"
        );
        unblock.send(()).unwrap();
        rx.recv().unwrap();
    }

    #[test]
    fn threads_that_return_on_stop_are_never_left_behind() {
        // The waker (shutdown) often preempts a thread between its guard counting it out and
        // its end; such a thread must be joined, not reported stuck.
        for _ in 0..300 {
            let mut service = Service::new();
            for name in ["a", "b"] {
                service
                    .spawn(name, |stop| {
                        stop.wait(Duration::from_secs(3600));
                    })
                    .unwrap();
            }
            assert_eq!(service.shutdown(), 0);
        }
    }
}

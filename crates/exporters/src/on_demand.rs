//! Upstream's `monitor.interval: 0`: no fixed schedule; a scrape that finds the latest snapshot
//! older than `monitor.staleness` asks the sampling thread for a tick and waits for it. The tick
//! itself still runs on the sampling thread, never on the request path, and scrapers that arrive
//! while a tick is asked for or running share that tick.

use std::sync::{Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use tokio::sync::watch;

/// The meeting point of scrapers (async) and the sampling thread (blocking).
pub struct RefreshOnScrape {
    staleness: Duration,
    state: Mutex<Generations>,
    wake: Condvar,
    done: watch::Sender<u64>,
}

#[derive(Default)]
struct Generations {
    /// Ticks asked for so far.
    requested: u64,
    /// The last request a finished tick answered.
    completed: u64,
    /// When the last tick finished.
    last_tick: Option<Instant>,
    stopping: bool,
}

/// What the sampling thread should do next.
#[derive(Debug, PartialEq, Eq)]
pub enum Wait {
    /// Tick, then call [`RefreshOnScrape::completed`] with this generation.
    Tick(u64),
    Stop,
}

impl RefreshOnScrape {
    pub fn new(staleness: Duration) -> Self {
        RefreshOnScrape {
            staleness,
            state: Mutex::new(Generations::default()),
            wake: Condvar::new(),
            done: watch::channel(0).0,
        }
    }

    fn lock(&self) -> MutexGuard<'_, Generations> {
        // The guarded counters stay consistent even if a holder panicked.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Called by a scraper: the generation to wait for, or `None` when the latest tick is
    /// fresher than the staleness limit.
    pub fn request(&self) -> Option<u64> {
        let mut g = self.lock();
        if g.last_tick.is_some_and(|t| t.elapsed() <= self.staleness) {
            return None;
        }
        if g.requested == g.completed {
            g.requested += 1;
            self.wake.notify_all();
        }
        // Otherwise a tick is already asked for or running: share it.
        Some(g.requested)
    }

    /// Waits (asynchronously) until a tick at least as new as a fresh request has finished, or
    /// `limit` passed (then the caller serves the snapshot it has).
    pub async fn refresh(&self, limit: Duration) -> bool {
        let Some(generation) = self.request() else {
            return true;
        };
        let mut done = self.done.subscribe();
        tokio::time::timeout(limit, done.wait_for(|&g| g >= generation))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// Called by the sampling thread: blocks until a scrape asks for a tick or [`stop`] is
    /// called.
    ///
    /// [`stop`]: RefreshOnScrape::stop
    pub fn wait(&self) -> Wait {
        let mut g = self.lock();
        loop {
            if g.stopping {
                return Wait::Stop;
            }
            if g.requested > g.completed {
                return Wait::Tick(g.requested);
            }
            g = self.wake.wait(g).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Called by the sampling thread after the tick for `generation` was published (also for
    /// ticks nobody asked for, such as the first, with generation 0).
    pub fn completed(&self, generation: u64) {
        let mut g = self.lock();
        g.completed = g.completed.max(generation);
        g.last_tick = Some(Instant::now());
        let completed = g.completed;
        drop(g);
        self.done.send_replace(completed);
    }

    /// Wakes the sampling thread to end.
    pub fn stop(&self) {
        self.lock().stopping = true;
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[test]
    fn fresh_snapshots_need_no_tick_and_stale_ones_share_one() {
        let r = RefreshOnScrape::new(Duration::from_secs(3600));
        // Nothing computed yet: the first scrapers ask for one tick and share it.
        assert_eq!(r.request(), Some(1));
        assert_eq!(r.request(), Some(1));
        assert_eq!(r.wait(), Wait::Tick(1));
        // Still running (not completed): a late scraper shares it too.
        assert_eq!(r.request(), Some(1));
        r.completed(1);
        // Fresh now.
        assert_eq!(r.request(), None);

        let r = RefreshOnScrape::new(Duration::ZERO);
        r.completed(0);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(r.request(), Some(1));
        r.completed(1);
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(r.request(), Some(2), "stale again: a new tick");
        r.stop();
        assert_eq!(r.wait(), Wait::Stop);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_scrapers_wait_for_one_tick_on_the_sampling_thread() {
        let r = Arc::new(RefreshOnScrape::new(Duration::from_secs(3600)));
        let ticks = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let sampler = {
            let (r, ticks) = (r.clone(), ticks.clone());
            std::thread::spawn(move || {
                while let Wait::Tick(g) = r.wait() {
                    ticks.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    r.completed(g);
                }
            })
        };
        let scrapes: Vec<_> = (0..8)
            .map(|_| {
                let r = r.clone();
                tokio::spawn(async move { r.refresh(Duration::from_secs(30)).await })
            })
            .collect();
        for s in scrapes {
            assert!(s.await.unwrap());
        }
        assert_eq!(ticks.load(std::sync::atomic::Ordering::SeqCst), 1);
        r.stop();
        sampler.join().unwrap();
    }
}

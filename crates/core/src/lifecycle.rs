//! The stop signal the agent's background threads share: one call stops them all, and a
//! thread that sleeps between rounds wakes at once instead of finishing its sleep. And the
//! background work components ask for when they are opened ([`Background`]), which the
//! agent's service runtime starts under that signal, so no component spawns a thread of its
//! own that nothing can stop.

use std::sync::{Arc, Condvar, Mutex, PoisonError};
use std::time::{Duration, Instant};

use crate::health::{ComponentHealth, ComponentKind};

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

type Work = Box<dyn FnOnce(StopSignal, Arc<ComponentHealth>) + Send>;

/// Work a component needs done on a thread of its own while the agent runs (refreshing a
/// model, polling a slow device). It must return soon after its stop signal fires, and
/// reports through the health handle it is given.
pub struct BackgroundTask {
    thread: String,
    kind: ComponentKind,
    component: String,
    work: Work,
}

impl std::fmt::Debug for BackgroundTask {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BackgroundTask")
            .field("thread", &self.thread)
            .field("kind", &self.kind)
            .field("component", &self.component)
            .finish_non_exhaustive()
    }
}

impl BackgroundTask {
    /// `thread` names the thread; `kind`/`component` name the health entry it reports to.
    pub fn new(
        thread: impl Into<String>,
        kind: ComponentKind,
        component: impl Into<String>,
        work: impl FnOnce(StopSignal, Arc<ComponentHealth>) + Send + 'static,
    ) -> Self {
        BackgroundTask {
            thread: thread.into(),
            kind,
            component: component.into(),
            work: Box::new(work),
        }
    }

    pub fn thread_name(&self) -> &str {
        &self.thread
    }

    pub fn kind(&self) -> ComponentKind {
        self.kind
    }

    pub fn component(&self) -> &str {
        &self.component
    }

    /// Runs the work on the calling thread until it ends or `stop` fires.
    pub fn run(self, stop: StopSignal, health: Arc<ComponentHealth>) {
        (self.work)(stop, health)
    }
}

/// Where components opened at start-up leave the background work they need. The agent
/// starts every task under its stop signal; `kepler probe`, which opens components only to
/// describe them, drops them unstarted.
#[derive(Debug, Default)]
pub struct Background {
    tasks: Mutex<Vec<BackgroundTask>>,
}

impl Background {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&self, task: BackgroundTask) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// The tasks left so far, in the order they were pushed; the list is emptied.
    pub fn take(&self) -> Vec<BackgroundTask> {
        std::mem::take(&mut *self.tasks.lock().unwrap_or_else(PoisonError::into_inner))
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

    #[test]
    fn background_tasks_are_handed_over_once_and_run_with_their_health() {
        let background = Background::new();
        let (tx, rx) = std::sync::mpsc::channel();
        background.push(BackgroundTask::new(
            "t",
            ComponentKind::ModelRefresh,
            "model",
            move |stop, health| {
                health.set_down();
                let _ = tx.send(stop.is_stopped());
            },
        ));
        let tasks = background.take();
        assert!(background.take().is_empty());
        let [task] = <[BackgroundTask; 1]>::try_from(tasks).unwrap();
        assert_eq!(
            (task.thread_name(), task.kind(), task.component()),
            ("t", ComponentKind::ModelRefresh, "model")
        );
        let health = crate::Health::new().register(task.kind(), task.component());
        let stop = StopSignal::new();
        stop.stop();
        task.run(stop, health.clone());
        assert_eq!(rx.try_recv(), Ok(true));
        assert!(!health.is_up());
    }
}

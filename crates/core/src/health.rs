//! Health of the agent's components, reported the same way by all of them: whether each is
//! up, and how many errors it has met. Exported as `kepler_agent_component_up` and
//! `kepler_agent_component_errors_total`; failures that would otherwise only reach a log line
//! are counted here. Components the agent may not use (too few privileges) are registered down
//! with their reason (`kepler_agent_component_unavailable_info`), and [`RepeatLog`] keeps a
//! warning that recurs every tick from flooding the log while the counters stay exact.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

/// The kind of a component: the `component` label.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ComponentKind {
    /// A usage source (procfs, eBPF).
    Source,
    /// A power meter.
    Meter,
    /// An output the snapshots are published to.
    Output,
    /// A background poller (a BMC, a pod informer).
    Poller,
    /// Background refresh of an estimation model.
    ModelRefresh,
    /// An HTTP server.
    Server,
}

impl ComponentKind {
    pub const fn as_str(self) -> &'static str {
        match self {
            ComponentKind::Source => "source",
            ComponentKind::Meter => "meter",
            ComponentKind::Output => "output",
            ComponentKind::Poller => "poller",
            ComponentKind::ModelRefresh => "model_refresh",
            ComponentKind::Server => "server",
        }
    }
}

/// Why a component the agent tried cannot be used: the `reason` label.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum UnusableReason {
    /// The host has it, but the agent's user or capabilities may not read it.
    PermissionDenied,
}

impl UnusableReason {
    pub const fn as_str(self) -> &'static str {
        match self {
            UnusableReason::PermissionDenied => "permission_denied",
        }
    }
}

/// One component's state. Cheap to update from any thread.
#[derive(Debug)]
pub struct ComponentHealth {
    kind: ComponentKind,
    name: String,
    up: AtomicBool,
    errors: AtomicU64,
    unusable: Mutex<Option<UnusableReason>>,
}

impl ComponentHealth {
    pub fn kind(&self) -> ComponentKind {
        self.kind
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::Relaxed)
    }

    pub fn errors(&self) -> u64 {
        self.errors.load(Ordering::Relaxed)
    }

    /// Why the component could not be used at all, if that is why it is down.
    pub fn unusable(&self) -> Option<UnusableReason> {
        *self.unusable.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The component works (again). Returns true when it was down, so callers can log the
    /// recovery once.
    pub fn set_up(&self) -> bool {
        *self.unusable.lock().unwrap_or_else(PoisonError::into_inner) = None;
        !self.up.swap(true, Ordering::Relaxed)
    }

    /// The component failed and cannot do its work until it recovers. Counts one error and
    /// returns true when it was up, so callers log the failure once rather than every tick.
    pub fn set_down(&self) -> bool {
        self.errors.fetch_add(1, Ordering::Relaxed);
        self.up.swap(false, Ordering::Relaxed)
    }

    /// An error the component survived (a dropped sample, a skipped record): counted, and the
    /// component stays up.
    pub fn count_error(&self) {
        self.count_errors(1);
    }

    /// `n` errors the component survived.
    pub fn count_errors(&self, n: u64) {
        self.errors.fetch_add(n, Ordering::Relaxed);
    }
}

/// Every component of one agent, in registration order.
#[derive(Debug, Default)]
pub struct Health {
    components: Mutex<Vec<Arc<ComponentHealth>>>,
}

impl Health {
    pub fn new() -> Self {
        Self::default()
    }

    /// The handle of the component `kind`/`name`, registered as up on first use.
    pub fn register(&self, kind: ComponentKind, name: &str) -> Arc<ComponentHealth> {
        let mut components = self
            .components
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(known) = components.iter().find(|c| c.kind == kind && c.name == name) {
            return known.clone();
        }
        let component = Arc::new(ComponentHealth {
            kind,
            name: name.to_string(),
            up: AtomicBool::new(true),
            errors: AtomicU64::new(0),
            unusable: Mutex::new(None),
        });
        components.push(component.clone());
        component
    }

    /// Registers `kind`/`name` as a component the agent tried and may not use: down, one
    /// error, and `reason` for the unavailable-info metric. A meter whose file is root-only
    /// and eBPF without its capabilities show up here, so that a dashboard tells "absent"
    /// from "the agent is not allowed to".
    pub fn register_unusable(
        &self,
        kind: ComponentKind,
        name: &str,
        reason: UnusableReason,
    ) -> Arc<ComponentHealth> {
        let component = self.register(kind, name);
        component.set_down();
        *component
            .unusable
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some(reason);
        component
    }

    /// A copy of the list, for encoding.
    pub fn components(&self) -> Vec<Arc<ComponentHealth>> {
        self.components
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

/// How often a repeated warning is logged again, with the number held back meanwhile.
pub const REPEAT_LOG_WINDOW: Duration = Duration::from_secs(60);

/// Decides which occurrences of one recurring warning (a sample dropped every tick) reach the
/// log: the first, then at most one per window, which says how many were held back since the
/// previous line. The health counters count every occurrence; this only spares the log.
#[derive(Clone, Debug)]
pub struct RepeatLog {
    window: Duration,
    last: Option<Duration>,
    held: u64,
}

impl Default for RepeatLog {
    fn default() -> Self {
        RepeatLog::new(REPEAT_LOG_WINDOW)
    }
}

impl RepeatLog {
    pub const fn new(window: Duration) -> Self {
        RepeatLog {
            window,
            last: None,
            held: 0,
        }
    }

    /// One occurrence at `now` (any monotonic clock, the same for every call). `Some(held)`:
    /// log this one and say that `held` occurrences before it were not logged; `None`: hold
    /// it back.
    pub fn occur(&mut self, now: Duration) -> Option<u64> {
        let due = match self.last {
            None => true,
            Some(last) => now.saturating_sub(last) >= self.window,
        };
        if !due {
            self.held += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.held))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transitions_are_reported_once_and_errors_counted() {
        let health = Health::new();
        let meter = health.register(ComponentKind::Meter, "rapl");
        assert!(meter.is_up());
        assert!(meter.set_down(), "first failure is news");
        assert!(!meter.set_down(), "second is not");
        assert_eq!(meter.errors(), 2);
        assert!(meter.set_up());
        assert!(!meter.set_up());
        meter.count_error();
        assert_eq!(meter.errors(), 3);
        let again = health.register(ComponentKind::Meter, "rapl");
        assert!(Arc::ptr_eq(&meter, &again));
        health.register(ComponentKind::Output, "stdout");
        assert_eq!(health.components().len(), 2);
    }

    #[test]
    fn unusable_components_are_down_with_their_reason() {
        let health = Health::new();
        let rapl = health.register_unusable(
            ComponentKind::Meter,
            "rapl",
            UnusableReason::PermissionDenied,
        );
        assert!(!rapl.is_up());
        assert_eq!(rapl.errors(), 1);
        assert_eq!(rapl.unusable(), Some(UnusableReason::PermissionDenied));
        assert_eq!(
            health.register(ComponentKind::Source, "procfs").unusable(),
            None
        );
        rapl.set_up();
        assert_eq!(
            rapl.unusable(),
            None,
            "a component that works is no longer unusable"
        );
    }

    #[test]
    fn repeats_are_logged_once_per_window_with_the_count_held_back() {
        let mut log = RepeatLog::new(Duration::from_secs(60));
        let at = Duration::from_secs;
        assert_eq!(log.occur(at(100)), Some(0), "the first is logged");
        let held: Vec<_> = (101..=159).map(|s| log.occur(at(s))).collect();
        assert!(held.iter().all(Option::is_none), "{held:?}");
        assert_eq!(
            log.occur(at(160)),
            Some(59),
            "a minute later, with the count"
        );
        assert_eq!(log.occur(at(161)), None);
        assert_eq!(
            log.occur(at(400)),
            Some(1),
            "a quiet spell logs the next at once"
        );
    }
}

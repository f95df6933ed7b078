//! Health of the agent's components, reported the same way by all of them: whether each is
//! up, and how many errors it has met. Exported as `kepler_agent_component_up` and
//! `kepler_agent_component_errors_total`; failures that would otherwise only reach a log line
//! are counted here.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

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

/// One component's state. Cheap to update from any thread.
#[derive(Debug)]
pub struct ComponentHealth {
    kind: ComponentKind,
    name: String,
    up: AtomicBool,
    errors: AtomicU64,
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

    /// The component works (again). Returns true when it was down, so callers can log the
    /// recovery once.
    pub fn set_up(&self) -> bool {
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
        self.errors.fetch_add(1, Ordering::Relaxed);
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
        });
        components.push(component.clone());
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
}

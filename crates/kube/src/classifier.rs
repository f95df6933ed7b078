//! The classifier wrapper that tells the informer about containers it has not listed yet.

use std::sync::Arc;

use kepler_core::{Classifier, ProcessInfo, WorkloadIdentity};

use crate::nudge::Nudge;

/// Classifies with `inner`; a new process in a pod's container the informer does not know
/// asks for an early poll (rate-limited by the informer), so a new pod's names appear without
/// waiting a whole poll interval.
pub struct NudgingClassifier {
    inner: Arc<dyn Classifier>,
    nudge: Nudge,
}

impl NudgingClassifier {
    pub fn new(inner: Arc<dyn Classifier>, nudge: Nudge) -> Self {
        NudgingClassifier { inner, nudge }
    }
}

impl Classifier for NudgingClassifier {
    fn classify(&self, info: &ProcessInfo) -> WorkloadIdentity {
        self.inner.classify(info)
    }

    fn classify_process(&self, pid: u32, info: &ProcessInfo) -> WorkloadIdentity {
        let identity = self.inner.classify_process(pid, info);
        if let Some(container) = identity.container.as_ref().filter(|c| c.pod_id.is_some()) {
            self.nudge.seen(&container.id);
        }
        identity
    }
}

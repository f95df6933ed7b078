//! The Prometheus output.

use std::sync::Arc;

use super::{Output, OutputError, Publication};
use crate::state::{AgentState, Readiness};

/// The Prometheus output: keeps the latest snapshot in the [`AgentState`] that `/metrics`
/// encodes on each scrape, and readiness in step with it.
pub struct PrometheusOutput {
    state: Arc<AgentState>,
}

impl PrometheusOutput {
    pub fn new(state: Arc<AgentState>) -> Self {
        PrometheusOutput { state }
    }
}

impl Output for PrometheusOutput {
    fn name(&self) -> &str {
        "prometheus"
    }

    fn publish(&mut self, publication: &Publication) -> Result<(), OutputError> {
        self.state
            .publish(publication.snapshot.clone(), publication.stats);
        if publication.has_energy && !self.state.readiness().is_ready() {
            self.state.set_readiness(Readiness::Ready);
        }
        Ok(())
    }
}

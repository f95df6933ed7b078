//! A real Prometheus scraping local targets every second, for the tests that train from it
//! (`serve --retrain`, `train --prometheus`): kepler-testkit's, which the agent's Prometheus
//! tests use too, without rule files.

use std::path::Path;

use kepler_testkit::prometheus::Prometheus;

/// Prometheus scraping `targets`; its API port.
pub fn start_prometheus(dir: &Path, targets: &[u16]) -> (Prometheus, u16) {
    kepler_testkit::prometheus::start_prometheus(dir, targets, &[])
}

//! Outputs: where each tick's snapshot goes. The agent publishes every snapshot to a list of
//! outputs, each a small module behind [`Output`]; adding one (JSON lines, OTLP, a passthrough
//! tree) is one new module plus one line where the agent builds its list.

mod prometheus;
mod stdout;

pub use prometheus::PrometheusOutput;
pub use stdout::{summary, StdoutOutput};

use std::sync::Arc;

use kepler_core::PowerSnapshot;

use crate::context::AgentStats;

/// What one tick hands to every output.
#[derive(Clone, Debug)]
pub struct Publication {
    pub snapshot: Arc<PowerSnapshot>,
    pub stats: AgentStats,
    /// Whether this tick turned meter readings into energy (the agent is ready once one has).
    pub has_energy: bool,
}

/// An output failed to take a snapshot; the agent counts it and goes on with the others.
#[derive(Debug, thiserror::Error)]
pub enum OutputError {
    #[error("writing: {0}")]
    Io(#[from] std::io::Error),
    /// The output's reader is gone for good (stdout piped into `head`, which exited): as any
    /// filter in a pipeline, the agent stops rather than write to nobody every tick.
    #[error("{0}: the reader went away")]
    Closed(&'static str),
    #[error("{0}")]
    Other(String),
}

/// A destination of snapshots. `publish` runs on the sampling thread after every tick, so it
/// must be quick: an output that talks to the network hands the snapshot to its own task.
pub trait Output: Send {
    /// Short name for logs and the health metrics (`prometheus`, `stdout`, ...).
    fn name(&self) -> &str;
    fn publish(&mut self, publication: &Publication) -> Result<(), OutputError>;
}

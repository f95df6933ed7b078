//! Upstream keys that exist so upstream's files load unchanged: the `debug` section,
//! `exporter.prometheus.debugCollectors`, and upstream's habit of writing `""` for "not set".

use serde::{Deserialize, Deserializer};

use super::{closed_choice, Enabled};

closed_choice! {
    /// `exporter.prometheus.debugCollectors`: the agent's own process metrics.
    pub enum DebugCollector {
        /// Upstream's Go runtime collector; this agent has no Go runtime and exports its
        /// thread count (`process_threads`) instead.
        Go = "go",
        /// The standard `process_*` metrics of the agent itself, from /proc/self.
        Process = "process",
    }
}

/// The `debug` section. `pprof.enabled` serves CPU and heap profiles at upstream's
/// `/debug/pprof/` paths (see `crate::profiling`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DebugConfig {
    pub pprof: Enabled,
}

/// Reads an optional string-like value where an empty string means "not set", as upstream's
/// files write it (`web.configFile: ""`, `kube.config: ""`).
pub fn empty_as_none<'de, D, T>(d: D) -> Result<Option<T>, D::Error>
where
    D: Deserializer<'de>,
    T: From<String>,
{
    let text = Option::<String>::deserialize(d)?;
    Ok(text.filter(|t| !t.trim().is_empty()).map(T::from))
}

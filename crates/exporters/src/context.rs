//! What the encoder needs besides the snapshot: static facts about the node and the build, and
//! the few things about the agent itself that change between ticks.

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{CpuInfo, Health};

use crate::level::MetricsLevel;
use crate::self_process::{OwnProcess, SelfCollectors};

/// Labels of `kepler_build_info`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BuildInfo {
    pub arch: String,
    pub branch: String,
    pub revision: String,
    pub version: String,
    /// Version of the Rust toolchain that built the agent; exported in the `goversion` label
    /// (upstream's name, kept for dashboards).
    pub rust_version: String,
}

impl Default for BuildInfo {
    /// The target architecture, and `unknown` for what only the binary's build knows.
    fn default() -> Self {
        BuildInfo {
            arch: std::env::consts::ARCH.to_string(),
            branch: "unknown".to_string(),
            revision: "unknown".to_string(),
            version: "unknown".to_string(),
            rust_version: "unknown".to_string(),
        }
    }
}

/// The agent's own counters, updated every tick.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct AgentStats {
    /// How long the last tick took (reading sources and meters, attribution).
    pub last_tick_duration: Duration,
    /// Ticks computed since start-up.
    pub ticks: u64,
    /// The eBPF source's own counters, when it is the usage source.
    pub ebpf: Option<EbpfCounts>,
}

#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct EbpfCounts {
    /// Processes or exits the programs could not record (maps or exit buffer full).
    pub dropped: u64,
    /// Processes in the per-process map.
    pub tracked: u64,
    /// Exits the full exit ring could not take, collected later from the process map without
    /// loss of CPU time: a steady rise means the ring is small for the node's exit rate.
    pub exits_deferred: u64,
    /// CPU time read by a task iterator once per interval, not charged at every switch.
    pub task_iterator: bool,
    /// With the task iterator, ended processes counted through their cgroups' usage counters
    /// rather than handed over exact at their final switch.
    pub exits_counted: bool,
}

/// Everything [`crate::encode()`] needs besides the snapshot.
#[derive(Clone, Debug)]
pub struct ExportContext {
    /// Value of the constant `node_name` label.
    pub node_name: String,
    pub levels: MetricsLevel,
    pub build: BuildInfo,
    /// One entry per logical CPU. Shared so that per-tick updates of the context (agent stats)
    /// do not copy it.
    pub cpu_info: Arc<[CpuInfo]>,
    pub agent: AgentStats,
    /// Up/down and error counts of every component, read live at each scrape.
    pub health: Arc<Health>,
    /// Which `process_*` families are exported (upstream's debugCollectors).
    pub self_collectors: SelfCollectors,
    /// Where those families are read from, at each encode; `None` leaves them out.
    pub own_process: Option<Arc<dyn OwnProcess>>,
    /// What the agent's HTTP server turned away, read live at each scrape; `None` where no
    /// server serves this context (tests, golden output).
    pub http_refusals: Option<Arc<kepler_http::Refusals>>,
}

impl ExportContext {
    /// A context with every level enabled, default build info and nothing else known yet.
    pub fn new(node_name: impl Into<String>) -> Self {
        ExportContext {
            node_name: node_name.into(),
            levels: MetricsLevel::ALL,
            build: BuildInfo::default(),
            cpu_info: Arc::from(Vec::new()),
            agent: AgentStats::default(),
            health: Arc::new(Health::new()),
            self_collectors: SelfCollectors::default(),
            own_process: None,
            http_refusals: None,
        }
    }
}

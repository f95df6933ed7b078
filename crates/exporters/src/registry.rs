//! The metric registry: one static descriptor per family. The descriptors are the single source
//! of truth for names, help texts, types and label names; the encoder, the docs table and the
//! lint tests all read them.
//!
//! A descriptor's label names are a const array `[&str; N]`, and a sample must pass exactly `N`
//! label values (see [`crate::encode::FamilyWriter::sample`]), so a missing or extra label is a
//! compile error rather than a malformed line at scrape time.

use crate::level::Level;

/// The two Prometheus types we use.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum MetricType {
    Counter,
    Gauge,
}

impl MetricType {
    pub const fn as_str(self) -> &'static str {
        match self {
            MetricType::Counter => "counter",
            MetricType::Gauge => "gauge",
        }
    }
}

/// A metric family with `N` variable labels.
#[derive(Debug)]
pub struct Desc<const N: usize> {
    /// Sample name as exposed in the text format (counters end in `_total`).
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricType,
    pub labels: [&'static str; N],
    /// The level that enables the family; `None` for families that are always exported.
    pub level: Option<Level>,
    /// Whether samples carry the constant `node_name` label (after the variable labels).
    pub node_name: bool,
}

impl<const N: usize> Desc<N> {
    /// The family name: OpenMetrics names a counter family without its `_total` suffix.
    pub fn family_name(&self) -> &'static str {
        match self.kind {
            MetricType::Counter => self.name.strip_suffix("_total").unwrap_or(self.name),
            MetricType::Gauge => self.name,
        }
    }
}

/// Object-safe view of a descriptor, for listing families of different label counts together.
pub trait Describe: Sync {
    fn name(&self) -> &'static str;
    fn help(&self) -> &'static str;
    fn kind(&self) -> MetricType;
    fn labels(&self) -> &[&'static str];
    fn level(&self) -> Option<Level>;
    fn node_name(&self) -> bool;
}

impl<const N: usize> Describe for Desc<N> {
    fn name(&self) -> &'static str {
        self.name
    }
    fn help(&self) -> &'static str {
        self.help
    }
    fn kind(&self) -> MetricType {
        self.kind
    }
    fn labels(&self) -> &[&'static str] {
        &self.labels
    }
    fn level(&self) -> Option<Level> {
        self.level
    }
    fn node_name(&self) -> bool {
        self.node_name
    }
}

const ZONE: [&str; 2] = ["zone", "path"];
const PROCESS: [&str; 8] = [
    "pid",
    "comm",
    "exe",
    "type",
    "state",
    "container_id",
    "vm_id",
    "zone",
];
const PROCESS_SECONDS: [&str; 6] = ["pid", "comm", "exe", "type", "container_id", "vm_id"];
const CONTAINER: [&str; 6] = [
    "container_id",
    "container_name",
    "runtime",
    "state",
    "zone",
    "pod_id",
];
const CONTAINER_SECONDS: [&str; 5] = [
    "container_id",
    "container_name",
    "runtime",
    "state",
    "pod_id",
];
const POD: [&str; 5] = ["pod_id", "pod_name", "pod_namespace", "state", "zone"];
const VM: [&str; 5] = ["vm_id", "vm_name", "hypervisor", "state", "zone"];

const fn node<const N: usize>(
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    labels: [&'static str; N],
) -> Desc<N> {
    Desc {
        name,
        help,
        kind,
        labels,
        level: Some(Level::Node),
        node_name: true,
    }
}

const fn at<const N: usize>(
    level: Level,
    name: &'static str,
    help: &'static str,
    kind: MetricType,
    labels: [&'static str; N],
) -> Desc<N> {
    Desc {
        name,
        help,
        kind,
        labels,
        level: Some(level),
        node_name: true,
    }
}

use MetricType::{Counter, Gauge};

// --- Node level (upstream names) ---

pub static NODE_CPU_JOULES: Desc<2> = node(
    "kepler_node_cpu_joules_total",
    "Energy consumption of cpu at node level in joules",
    Counter,
    ZONE,
);
pub static NODE_CPU_WATTS: Desc<2> = node(
    "kepler_node_cpu_watts",
    "Power consumption of cpu at node level in watts",
    Gauge,
    ZONE,
);
pub static NODE_CPU_ACTIVE_JOULES: Desc<2> = node(
    "kepler_node_cpu_active_joules_total",
    "Energy consumption of cpu in active state at node level in joules",
    Counter,
    ZONE,
);
pub static NODE_CPU_ACTIVE_WATTS: Desc<2> = node(
    "kepler_node_cpu_active_watts",
    "Power consumption of cpu in active state at node level in watts",
    Gauge,
    ZONE,
);
pub static NODE_CPU_IDLE_JOULES: Desc<2> = node(
    "kepler_node_cpu_idle_joules_total",
    "Energy consumption of cpu in idle state at node level in joules",
    Counter,
    ZONE,
);
pub static NODE_CPU_IDLE_WATTS: Desc<2> = node(
    "kepler_node_cpu_idle_watts",
    "Power consumption of cpu in idle state at node level in watts",
    Gauge,
    ZONE,
);
pub static NODE_CPU_USAGE_RATIO: Desc<0> = node(
    "kepler_node_cpu_usage_ratio",
    "CPU usage ratio of a node (value between 0.0 and 1.0)",
    Gauge,
    [],
);

// --- Node level (ours) ---

pub static NODE_CPU_UNATTRIBUTED_JOULES: Desc<2> = node(
    "kepler_node_cpu_unattributed_joules_total",
    "Energy consumption of cpu in active state at node level in joules that no workload could take, because no task used CPU time in its interval",
    Counter,
    ZONE,
);
pub static NODE_CPU_HIDDEN_PROCESS_JOULES: Desc<2> = node(
    "kepler_node_cpu_hidden_process_joules_total",
    "Energy consumption of cpu in active state at node level in joules taken by processes that are not exported as series of their own, because they ended below monitor.minTerminatedEnergyThreshold or beyond monitor.maxTerminated, or were never listed (started and ended between two readings, found by their cgroup's usage counter); their containers, pods and VMs include it",
    Counter,
    ZONE,
);
pub static NODE_CPU_HIDDEN_PROCESS_WATTS: Desc<2> = node(
    "kepler_node_cpu_hidden_process_watts",
    "Power consumption of cpu in active state at node level in watts taken in the last interval by processes that are not exported as series of their own; with it, the process series add up to the active power",
    Gauge,
    ZONE,
);
pub static NODE_CPU_ZONE_INFO: Desc<6> = node(
    "kepler_node_cpu_zone_info",
    "Power meter that feeds each cpu zone at node level; source is measured (hardware), estimated (model), synthetic (the development fake meter) or unknown, model names the estimation model, reason says why that model was chosen",
    Gauge,
    ["zone", "path", "meter", "source", "model", "reason"],
);
pub static NODE_CPU_ZONE_ESTIMATE_ERROR_WATTS: Desc<3> = node(
    "kepler_node_cpu_zone_estimate_error_watts",
    "Expected error of an estimated cpu zone at node level in watts: the estimation model's mean absolute error on measurements it was not trained on, for a band around the estimate; measured zones have none",
    Gauge,
    ["zone", "path", "model"],
);
pub static NODE_CPU_ZONE_ESTIMATE_ERROR_RATIO: Desc<3> = node(
    "kepler_node_cpu_zone_estimate_error_ratio",
    "Expected relative error of an estimated cpu zone at node level: the estimation model's mean absolute percentage error on measurements it was not trained on, as a ratio (0.25 = 25 %); measured zones have none",
    Gauge,
    ["zone", "path", "model"],
);
pub static NODE_CPU_IDLE_POLICY_INFO: Desc<2> = node(
    "kepler_node_cpu_idle_policy_info",
    "How idle power of cpu at node level is told apart from active power: policy ratio (upstream, idle = (1 - usage ratio) x energy) or baseline; baseline is configured, measured, pending (not measured yet, the ratio rule applies) or none",
    Gauge,
    ["policy", "baseline"],
);
pub static NODE_CPU_IDLE_BASELINE_WATTS: Desc<2> = node(
    "kepler_node_cpu_idle_baseline_watts",
    "Idle power baseline of cpu at node level in watts, configured or measured, used by the baseline idle policy",
    Gauge,
    ZONE,
);

/// Upstream's platform family: each reading of the platform meter as the device reports it
/// (a BMC's power supplies or power controls, IPMI DCMI), beside the summed `platform` zone of
/// the cpu families. Readings that are parts of others (a CPU power control) are listed too,
/// so summing the series may count watts twice; the `platform` zone does not.
pub static PLATFORM_WATTS: Desc<6> = node(
    "kepler_platform_watts",
    "Power consumption of the platform as reported by its BMC in watts, per reading: source is redfish or ipmi, bmc_id the BMC's name in the configuration, chassis_id, source_id, source_name and source_type (PowerSupply, PowerControl, DCMI) identify the reading",
    Gauge,
    [
        "source",
        "bmc_id",
        "chassis_id",
        "source_id",
        "source_name",
        "source_type",
    ],
);

// --- Workloads ---

pub static PROCESS_CPU_JOULES: Desc<8> = at(
    Level::Process,
    "kepler_process_cpu_joules_total",
    "Energy consumption of cpu at process level in joules",
    Counter,
    PROCESS,
);
pub static PROCESS_CPU_WATTS: Desc<8> = at(
    Level::Process,
    "kepler_process_cpu_watts",
    "Power consumption of cpu at process level in watts",
    Gauge,
    PROCESS,
);
pub static PROCESS_CPU_SECONDS: Desc<6> = at(
    Level::Process,
    "kepler_process_cpu_seconds_total",
    "Total user and system time of cpu at process level in seconds",
    Counter,
    PROCESS_SECONDS,
);
pub static CONTAINER_CPU_JOULES: Desc<6> = at(
    Level::Container,
    "kepler_container_cpu_joules_total",
    "Energy consumption of cpu at container level in joules",
    Counter,
    CONTAINER,
);
pub static CONTAINER_CPU_WATTS: Desc<6> = at(
    Level::Container,
    "kepler_container_cpu_watts",
    "Power consumption of cpu at container level in watts",
    Gauge,
    CONTAINER,
);
pub static CONTAINER_CPU_SECONDS: Desc<5> = at(
    Level::Container,
    "kepler_container_cpu_seconds_total",
    "Total user and system time of cpu at container level in seconds, observed since the agent started",
    Counter,
    CONTAINER_SECONDS,
);
pub static POD_CPU_JOULES: Desc<5> = at(
    Level::Pod,
    "kepler_pod_cpu_joules_total",
    "Energy consumption of cpu at pod level in joules",
    Counter,
    POD,
);
pub static POD_CPU_WATTS: Desc<5> = at(
    Level::Pod,
    "kepler_pod_cpu_watts",
    "Power consumption of cpu at pod level in watts",
    Gauge,
    POD,
);
pub static VM_CPU_JOULES: Desc<5> = at(
    Level::Vm,
    "kepler_vm_cpu_joules_total",
    "Energy consumption of cpu at vm level in joules",
    Counter,
    VM,
);
pub static VM_CPU_WATTS: Desc<5> = at(
    Level::Vm,
    "kepler_vm_cpu_watts",
    "Power consumption of cpu at vm level in watts",
    Gauge,
    VM,
);

// --- GPUs (upstream names; one series per device, workloads summed over devices) ---

const GPU: [&str; 4] = ["gpu", "gpu_uuid", "gpu_name", "vendor"];
const PROCESS_GPU: [&str; 7] = [
    "pid",
    "comm",
    "exe",
    "type",
    "state",
    "container_id",
    "vm_id",
];
const CONTAINER_GPU: [&str; 5] = [
    "container_id",
    "container_name",
    "runtime",
    "state",
    "pod_id",
];
const POD_GPU: [&str; 4] = ["pod_id", "pod_name", "pod_namespace", "state"];

pub static NODE_GPU_JOULES: Desc<4> = node(
    "kepler_node_gpu_joules_total",
    "Energy consumption of gpu at node level in joules",
    Counter,
    GPU,
);
pub static NODE_GPU_WATTS: Desc<4> = node(
    "kepler_node_gpu_watts",
    "Power consumption of gpu at node level in watts",
    Gauge,
    GPU,
);
pub static NODE_GPU_ACTIVE_JOULES: Desc<4> = node(
    "kepler_node_gpu_active_joules_total",
    "Energy consumption of gpu in active state at node level in joules",
    Counter,
    GPU,
);
pub static NODE_GPU_ACTIVE_WATTS: Desc<4> = node(
    "kepler_node_gpu_active_watts",
    "Power consumption of gpu in active state at node level in watts",
    Gauge,
    GPU,
);
pub static NODE_GPU_IDLE_JOULES: Desc<4> = node(
    "kepler_node_gpu_idle_joules_total",
    "Energy consumption of gpu in idle state at node level in joules",
    Counter,
    GPU,
);
pub static NODE_GPU_IDLE_WATTS: Desc<4> = node(
    "kepler_node_gpu_idle_watts",
    "Power consumption of gpu in idle state at node level in watts",
    Gauge,
    GPU,
);
pub static NODE_GPU_INFO: Desc<6> = node(
    "kepler_node_gpu_info",
    "GPU devices at node level; meter is the GPU meter that reads it (nvml, amdgpu, fake-gpu), source is measured or synthetic",
    Gauge,
    ["gpu", "gpu_uuid", "gpu_name", "vendor", "meter", "source"],
);
pub static PROCESS_GPU_JOULES: Desc<7> = at(
    Level::Process,
    "kepler_process_gpu_joules_total",
    "Energy consumption of gpu at process level in joules, summed over the node's GPUs",
    Counter,
    PROCESS_GPU,
);
pub static PROCESS_GPU_WATTS: Desc<7> = at(
    Level::Process,
    "kepler_process_gpu_watts",
    "Power consumption of gpu at process level in watts, summed over the node's GPUs",
    Gauge,
    PROCESS_GPU,
);
pub static CONTAINER_GPU_JOULES: Desc<5> = at(
    Level::Container,
    "kepler_container_gpu_joules_total",
    "Energy consumption of gpu at container level in joules, summed over the node's GPUs",
    Counter,
    CONTAINER_GPU,
);
pub static CONTAINER_GPU_WATTS: Desc<5> = at(
    Level::Container,
    "kepler_container_gpu_watts",
    "Power consumption of gpu at container level in watts, summed over the node's GPUs",
    Gauge,
    CONTAINER_GPU,
);
pub static POD_GPU_JOULES: Desc<4> = at(
    Level::Pod,
    "kepler_pod_gpu_joules_total",
    "Energy consumption of gpu at pod level in joules, summed over the node's GPUs",
    Counter,
    POD_GPU,
);
pub static POD_GPU_WATTS: Desc<4> = at(
    Level::Pod,
    "kepler_pod_gpu_watts",
    "Power consumption of gpu at pod level in watts, summed over the node's GPUs",
    Gauge,
    POD_GPU,
);

// --- Always exported ---

/// Upstream's label set is kept so that existing dashboards keep working; `goversion` holds the
/// Rust toolchain version (there is no Go toolchain), and a dashboard that shows it still shows
/// the compiler that built the agent.
pub static BUILD_INFO: Desc<5> = Desc {
    name: "kepler_build_info",
    help: "A metric with a constant '1' value labeled with version, revision, branch, arch and the Rust toolchain version (in goversion) from which kepler was built",
    kind: Gauge,
    labels: ["arch", "branch", "revision", "version", "goversion"],
    level: None,
    // Upstream's build info has no node label; `instance` tells nodes apart.
    node_name: false,
};
pub static NODE_CPU_INFO: Desc<5> = Desc {
    name: "kepler_node_cpu_info",
    help: "CPU information from procfs",
    kind: Gauge,
    labels: [
        "processor",
        "vendor_id",
        "model_name",
        "physical_id",
        "core_id",
    ],
    level: None,
    // As upstream: a description of the hardware, not a power metric.
    node_name: false,
};
pub static AGENT_TICK_DURATION: Desc<0> = Desc {
    name: "kepler_agent_tick_duration_seconds",
    help: "Duration of the agent's last tick (reading usage and meters, attributing energy) in seconds",
    kind: Gauge,
    labels: [],
    level: None,
    node_name: true,
};
pub static AGENT_TICKS: Desc<0> = Desc {
    name: "kepler_agent_ticks_total",
    help: "Ticks the agent has computed since it started",
    kind: Counter,
    labels: [],
    level: None,
    node_name: true,
};
pub static AGENT_PROCESSES: Desc<0> = Desc {
    name: "kepler_agent_processes",
    help: "Processes in the latest snapshot, running and recently terminated",
    kind: Gauge,
    labels: [],
    level: None,
    node_name: true,
};

pub static AGENT_EBPF_DROPPED: Desc<0> = Desc {
    name: "kepler_agent_ebpf_dropped_total",
    help: "Processes and exits the eBPF programs could not record because a map or the exit buffer was full",
    kind: Counter,
    labels: [],
    level: None,
    node_name: true,
};
pub static AGENT_EBPF_EXITS_DEFERRED: Desc<0> = Desc {
    name: "kepler_agent_ebpf_exits_deferred_total",
    help: "Process exits the full eBPF exit buffer could not take, collected at a later snapshot without loss of CPU time",
    kind: Counter,
    labels: [],
    level: None,
    node_name: true,
};
pub static AGENT_EBPF_ACCOUNTING: Desc<2> = Desc {
    name: "kepler_agent_ebpf_accounting_info",
    help: "How the eBPF source accounts CPU time (1): accounting sched_switch (charged at every context switch) or task_iterator (read once per interval), whichever costs the node less, chosen at start; exits final_switch (each ended process handed over at its last switch) or cgroup_counters (ended processes reach their cgroup's workload through its usage counter, while exact exits would cost more than their budget or as ebpf.exits says)",
    kind: Gauge,
    labels: ["accounting", "exits"],
    level: None,
    node_name: true,
};
pub static AGENT_EBPF_TRACKED: Desc<0> = Desc {
    name: "kepler_agent_ebpf_tracked_processes",
    help: "Processes in the eBPF per-process map",
    kind: Gauge,
    labels: [],
    level: None,
    node_name: true,
};
pub static AGENT_COMPONENT_UP: Desc<2> = Desc {
    name: "kepler_agent_component_up",
    help: "Whether a component of the agent works (1) or has failed (0); component is source, meter, output, poller, model_refresh or server",
    kind: Gauge,
    labels: ["component", "name"],
    level: None,
    node_name: true,
};
pub static AGENT_COMPONENT_ERRORS: Desc<2> = Desc {
    name: "kepler_agent_component_errors_total",
    help: "Errors a component of the agent has met since the agent started, failures and skipped inputs alike",
    kind: Counter,
    labels: ["component", "name"],
    level: None,
    node_name: true,
};
pub static AGENT_COMPONENT_UNAVAILABLE: Desc<3> = Desc {
    name: "kepler_agent_component_unavailable_info",
    help: "Components the agent tried and may not use, with why (1 each): reason permission_denied means the host has it but the agent's user or capabilities may not read it (kepler probe names the file)",
    kind: Gauge,
    labels: ["component", "name", "reason"],
    level: None,
    node_name: true,
};
pub static AGENT_HTTP_REFUSED: Desc<1> = Desc {
    name: "kepler_agent_http_refused_total",
    help: "Connections and requests the agent's HTTP server turned away since it started: reason connection_limit (a connection waited for a free slot), unauthorized (401, basic auth) or rate_limited (429, rate limit or password-check budget)",
    kind: Counter,
    labels: ["reason"],
    level: None,
    node_name: true,
};
pub static NODE_FEATURE_RATE: Desc<1> = Desc {
    name: "kepler_node_model_feature_rate",
    help: "Model input feature of the last interval at node level, per second (bpf_cpu_time_ms is busy cpu milliseconds per second); exported with ebpf.exportFeatures",
    kind: Gauge,
    labels: ["feature"],
    level: Some(Level::Node),
    node_name: true,
};
pub static PROCESS_FEATURE_RATE: Desc<3> = Desc {
    name: "kepler_process_model_feature_rate",
    help: "Model input feature of the last interval at process level, per second; exported with ebpf.exportFeatures",
    kind: Gauge,
    labels: ["pid", "comm", "feature"],
    level: Some(Level::Process),
    node_name: true,
};

/// The standard `process_*` families of Prometheus client libraries, for upstream's
/// `debugCollectors`; no node label, as every other exporter exports them.
const fn own(name: &'static str, help: &'static str, kind: MetricType) -> Desc<0> {
    Desc {
        name,
        help,
        kind,
        labels: [],
        level: None,
        node_name: false,
    }
}
pub static PROCESS_CPU_SECONDS_SELF: Desc<0> = own(
    "process_cpu_seconds_total",
    "Total user and system CPU time spent in seconds",
    Counter,
);
pub static PROCESS_RESIDENT_MEMORY: Desc<0> = own(
    "process_resident_memory_bytes",
    "Resident memory size in bytes",
    Gauge,
);
pub static PROCESS_VIRTUAL_MEMORY: Desc<0> = own(
    "process_virtual_memory_bytes",
    "Virtual memory size in bytes",
    Gauge,
);
pub static PROCESS_OPEN_FDS: Desc<0> =
    own("process_open_fds", "Number of open file descriptors", Gauge);
pub static PROCESS_MAX_FDS: Desc<0> = own(
    "process_max_fds",
    "Maximum number of open file descriptors",
    Gauge,
);
pub static PROCESS_START_TIME: Desc<0> = own(
    "process_start_time_seconds",
    "Start time of the process since unix epoch in seconds",
    Gauge,
);
pub static PROCESS_THREADS: Desc<0> = own(
    "process_threads",
    "Number of OS threads in the process (exported for the go debug collector)",
    Gauge,
);

/// Every family, in the order they are encoded.
pub static ALL: &[&dyn Describe] = &[
    &BUILD_INFO,
    &NODE_CPU_INFO,
    &AGENT_TICK_DURATION,
    &AGENT_TICKS,
    &AGENT_PROCESSES,
    &AGENT_EBPF_DROPPED,
    &AGENT_EBPF_EXITS_DEFERRED,
    &AGENT_EBPF_TRACKED,
    &AGENT_EBPF_ACCOUNTING,
    &AGENT_COMPONENT_UP,
    &AGENT_COMPONENT_ERRORS,
    &AGENT_COMPONENT_UNAVAILABLE,
    &AGENT_HTTP_REFUSED,
    &PROCESS_CPU_SECONDS_SELF,
    &PROCESS_RESIDENT_MEMORY,
    &PROCESS_VIRTUAL_MEMORY,
    &PROCESS_OPEN_FDS,
    &PROCESS_MAX_FDS,
    &PROCESS_START_TIME,
    &PROCESS_THREADS,
    &NODE_FEATURE_RATE,
    &PROCESS_FEATURE_RATE,
    &NODE_CPU_JOULES,
    &NODE_CPU_WATTS,
    &NODE_CPU_ACTIVE_JOULES,
    &NODE_CPU_ACTIVE_WATTS,
    &NODE_CPU_IDLE_JOULES,
    &NODE_CPU_IDLE_WATTS,
    &NODE_CPU_USAGE_RATIO,
    &NODE_CPU_UNATTRIBUTED_JOULES,
    &NODE_CPU_HIDDEN_PROCESS_JOULES,
    &NODE_CPU_HIDDEN_PROCESS_WATTS,
    &NODE_CPU_ZONE_INFO,
    &NODE_CPU_ZONE_ESTIMATE_ERROR_WATTS,
    &NODE_CPU_ZONE_ESTIMATE_ERROR_RATIO,
    &NODE_CPU_IDLE_POLICY_INFO,
    &NODE_CPU_IDLE_BASELINE_WATTS,
    &PLATFORM_WATTS,
    &PROCESS_CPU_JOULES,
    &PROCESS_CPU_WATTS,
    &PROCESS_CPU_SECONDS,
    &CONTAINER_CPU_JOULES,
    &CONTAINER_CPU_WATTS,
    &CONTAINER_CPU_SECONDS,
    &POD_CPU_JOULES,
    &POD_CPU_WATTS,
    &VM_CPU_JOULES,
    &VM_CPU_WATTS,
    &NODE_GPU_JOULES,
    &NODE_GPU_WATTS,
    &NODE_GPU_ACTIVE_JOULES,
    &NODE_GPU_ACTIVE_WATTS,
    &NODE_GPU_IDLE_JOULES,
    &NODE_GPU_IDLE_WATTS,
    &NODE_GPU_INFO,
    &PROCESS_GPU_JOULES,
    &PROCESS_GPU_WATTS,
    &CONTAINER_GPU_JOULES,
    &CONTAINER_GPU_WATTS,
    &POD_GPU_JOULES,
    &POD_GPU_WATTS,
];

/// The content of `docs/metrics.md`, generated from [`ALL`].
pub fn metrics_markdown() -> String {
    let mut s = String::new();
    s.push_str("# Metrics\n\n");
    s.push_str(
        "<!-- Generated from crates/exporters/src/registry.rs; do not edit. Regenerate with \
         `UPDATE_DOCS=1 cargo test -p kepler-exporters`. -->\n\n",
    );
    s.push_str(
        "Served on `/metrics` in the Prometheus text format 0.0.4, or in OpenMetrics 1.0.0 when \
         the scraper's `Accept` header asks for `application/openmetrics-text`. Families marked \
         with a level are exported only when that level is enabled (`--metrics`, \
         `exporter.prometheus.metricsLevel`); the others always are. Labels in *italics* are \
         constant: `node_name` comes from `kube.nodeName`, else the hostname.\n\n",
    );
    s.push_str(
        "Joules are counters accumulated since the agent started; watts are the average power \
         over the last interval. `state` is `running` or `terminated` (ended workloads stay \
         for a retention time so that every scraper sees their final energy). `type` is \
         `regular`, `container` or `vm`; `container_id` and `vm_id` are empty for processes \
         outside a container or VM.\n\n",
    );
    s.push_str(
        "Short-lived processes do not become series of their own. A process that ends with \
         less energy (all zones together) than `monitor.minTerminatedEnergyThreshold` (10 J) is \
         not exported as `terminated`, not even in the interval it ended, and at most \
         `monitor.maxTerminated` (500) ended processes are, the most energetic; a running \
         process always is. The energy of those left out stays in their container, pod and VM \
         series and in the node's, and at process level in \
         `kepler_node_cpu_hidden_process_joules_total`: per zone, the last value of every \
         `kepler_process_cpu_joules_total` series plus the hidden and unattributed energy is \
         the active energy, to the micro-joule. Processes outside any container or VM are only \
         in that node-level sum once hidden. Processes that start and end between two readings \
         are listed one by one only by the eBPF source with exact exits; the procfs source, and \
         the eBPF source when it counts exits (`ebpf.exits`, \
         `kepler_agent_ebpf_accounting_info{exits=\"cgroup_counters\"}`), read the usage \
         counter of each cgroup that holds a listed process (`cpuacct.usage`, cgroup2 \
         `cpu.stat`), and credit what it moved beyond its listed processes to the cgroup's \
         container, pod or VM, hidden at process level: the same energy, without series of \
         their own. A cgroup none of whose processes is ever listed (all of them short-lived) \
         is not read, and on cgroup2-only hosts neither is the root cgroup.\n\n",
    );
    s.push_str(
        "`kepler_node_cpu_idle_policy_info` says `policy=\"none\"` when every zone comes from a \
         meter that reports dynamic power only (an estimate inside a VM): such zones are all \
         active power and no idle policy or baseline applies to them. \
         `kepler_agent_component_up` and `kepler_agent_component_errors_total` report every \
         component of the agent (usage source, meters, outputs, background pollers and model \
         refresh) the same way.\n\n",
    );
    s.push_str(
        "GPU families have one series per device at node level (`gpu` is the device index, \
         `gpu_uuid` NVML's UUID or the AMD card's unique id / PCI address). A GPU's idle power \
         is `experimental.gpu.idlePower`, else the lowest power seen while no compute process \
         ran (0 W until then); its active energy goes to the processes that used it, by their \
         utilisation samples, a lone process taking the whole device. Process, container and \
         pod GPU series sum their GPUs and appear once the workload has used one.\n\n",
    );
    s.push_str(
        "The `process_*` families describe the agent's own process, as in every Prometheus \
         client library, and follow `exporter.prometheus.debugCollectors` rather than a level: \
         `process` exports all but `process_threads`; `go` (upstream's Go runtime collector; \
         there is no Go runtime here) exports `process_threads`. Like those libraries, the \
         agent reads them from `/proc/self` at each scrape, not at each tick.\n\n",
    );
    s.push_str("| Name | Type | Labels | Help | Level |\n");
    s.push_str("|---|---|---|---|---|\n");
    for d in ALL {
        let mut labels: Vec<String> = d.labels().iter().map(|l| format!("`{l}`")).collect();
        if d.node_name() {
            labels.push("*`node_name`*".to_string());
        }
        let labels = if labels.is_empty() {
            "—".to_string()
        } else {
            labels.join(", ")
        };
        let level = d.level().map(|l| l.as_str()).unwrap_or("always");
        s.push_str(&format!(
            "| `{}` | {} | {} | {} | {} |\n",
            d.name(),
            d.kind().as_str(),
            labels,
            d.help().replace('|', "\\|"),
            level
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    fn valid_name(s: &str) -> bool {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
    }

    #[test]
    fn descriptors_follow_prometheus_naming() {
        let mut names = HashSet::new();
        for d in ALL {
            assert!(valid_name(d.name()), "{}", d.name());
            assert!(
                d.name().starts_with("kepler_") || d.name().starts_with("process_"),
                "{}",
                d.name()
            );
            assert!(names.insert(d.name()), "duplicate {}", d.name());
            assert_eq!(
                d.kind() == MetricType::Counter,
                d.name().ends_with("_total"),
                "{}: counters, and only counters, end in _total",
                d.name()
            );
            assert!(!d.help().is_empty() && !d.help().contains('\n'));
            let mut labels = HashSet::new();
            for l in d.labels() {
                assert!(valid_name(l) && !l.starts_with("__"), "{}: {l}", d.name());
                assert!(labels.insert(*l), "{}: duplicate label {l}", d.name());
                assert_ne!(
                    *l,
                    "node_name",
                    "{}: node_name is the constant label",
                    d.name()
                );
            }
        }
    }

    #[test]
    fn workload_energy_families_carry_node_name() {
        for d in ALL {
            if d.name().contains("joules") || d.name().contains("watts") {
                assert!(d.node_name(), "{}", d.name());
            }
        }
    }
}

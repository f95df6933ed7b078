//! docs/compatibility.md: every upstream Kepler config key, flag, metric family and endpoint
//! with its status here. The tables below are the source; the test checks each row against the
//! agent (keys parse without an unknown-key warning, flags parse, a key said to be warned about
//! is, metric families and paths exist or not as stated) and that the document is generated
//! from them. `UPDATE_DOCS=1 cargo test -p kepler --test compatibility` regenerates it.

use std::path::{Path, PathBuf};

use kepler_agent::cli::Cli;
use kepler_agent::config::Config;

/// How a row stands here.
#[derive(Copy, Clone, PartialEq, Eq)]
enum Status {
    /// Does what upstream's does.
    Same,
    /// Accepted; what it does differs, as the note says.
    Differs,
    /// Accepted and warned about at start-up: not implemented in this version.
    Warned,
    /// Not there.
    Missing,
}

impl Status {
    fn text(self) -> &'static str {
        match self {
            Status::Same => "supported",
            Status::Differs => "supported, differs",
            Status::Warned => "accepted, not implemented (warned)",
            Status::Missing => "not available",
        }
    }
}

use Status::*;

/// (key, a value to set it to in YAML, status, note)
const KEYS: &[(&str, &str, Status, &str)] = &[
    (
        "log.level",
        "debug",
        Same,
        "also `trace`; any case; `RUST_LOG` overrides",
    ),
    (
        "log.format",
        "json",
        Same,
        "Go slog's text and JSON line formats",
    ),
    ("host.sysfs", "/host/sys", Same, ""),
    ("host.procfs", "/host/proc", Same, ""),
    (
        "monitor.interval",
        "0s",
        Same,
        "`0`: a tick when a scrape finds the snapshot stale",
    ),
    ("monitor.staleness", "1s", Same, "used with `interval: 0`"),
    ("monitor.maxTerminated", "100", Same, ""),
    ("monitor.minTerminatedEnergyThreshold", "10", Same, ""),
    (
        "cpu.preferredMeters",
        "[rapl, hwmon]",
        Same,
        "an estimation model ends every chain",
    ),
    ("rapl.zones", "[package]", Same, ""),
    (
        "exporter.stdout.enabled",
        "true",
        Differs,
        "prints a per-tick summary, not upstream's tables",
    ),
    (
        "exporter.prometheus.enabled",
        "false",
        Same,
        "`/healthz`, `/readyz`, `/probe/*` stay served",
    ),
    (
        "exporter.prometheus.debugCollectors",
        "[go, process]",
        Differs,
        "`process`: the standard `process_*` metrics; `go`: `process_threads` (no Go runtime)",
    ),
    (
        "exporter.prometheus.metricsLevel",
        "[node, pod]",
        Same,
        "`[]` is every level, as upstream",
    ),
    (
        "debug.pprof.enabled",
        "true",
        Differs,
        "CPU and heap profiles (pprof format, gzipped) at `/debug/pprof/profile` and \
         `/debug/pprof/heap`; Go's runtime profiles (goroutine, block, mutex, ...) have no \
         equivalent",
    ),
    (
        "web.configFile",
        "\"\"",
        Differs,
        "`\"\"`: none; bcrypt costs above 14 refused, files size-limited (docs/security.md)",
    ),
    ("web.listenAddresses", "[\":28282\"]", Same, ""),
    (
        "kube.enabled",
        "true",
        Same,
        "pod informer: pod names, namespaces and container names. Off: no pods, as upstream",
    ),
    (
        "kube.config",
        "\"\"",
        Same,
        "`\"\"`: in-cluster; kubeconfig with token, tokenFile or client certificate (no exec plugins)",
    ),
    (
        "kube.nodeName",
        "node-1",
        Same,
        "also the `node_name` label",
    ),
    (
        "kube.podInformer.mode",
        "apiserver",
        Same,
        "`kubelet`: `/pods` polled; `apiserver`: list+watch of this node's pods",
    ),
    (
        "kube.podInformer.pollInterval",
        "15s",
        Differs,
        "kubelet polls; a container not listed yet triggers one early poll; `apiserver`: retry delay",
    ),
    (
        "experimental.platform.redfish.enabled",
        "true",
        Same,
        "the `redfish` meter of the platform domain, polled; needs `configFile`",
    ),
    ("experimental.platform.redfish.nodeName", "node-1", Same, ""),
    (
        "experimental.platform.redfish.configFile",
        "/etc/kepler/redfish.yaml",
        Same,
        "upstream's `nodes`/`bmcs` file",
    ),
    ("experimental.platform.redfish.httpTimeout", "5s", Same, ""),
    (
        "experimental.hwmon.enabled",
        "true",
        Differs,
        "v0.11.4; hwmon is always in the cpu chain",
    ),
    (
        "experimental.hwmon.forceEnabled",
        "true",
        Differs,
        "hwmon first in the cpu chain",
    ),
    ("experimental.hwmon.zones", "[power1]", Same, ""),
    (
        "experimental.hwmon.chipRules",
        "[{name: ina3221, useSameIndex: true}]",
        Differs,
        "pairs inN/currN of chips without power sensors; no built-in chip table, no label pairing",
    ),
    (
        "experimental.gpu.enabled",
        "true",
        Same,
        "the GPU domain: `dcgm` when `dcgmEndpoint` is set, then `nvml`, then `amdgpu`",
    ),
    ("experimental.gpu.idlePower", "0", Same, ""),
    (
        "experimental.gpu.dcgmEndpoint",
        "\"\"",
        Same,
        "the `dcgm` meter: polled, one zone per MIG instance; empty: no `dcgm` meter",
    ),
    ("dev.fake-cpu-meter.enabled", "true", Same, ""),
    ("dev.fake-cpu-meter.zones", "[package]", Same, ""),
];

/// (flag, a value or None for a boolean, status, note)
const FLAGS: &[(&str, Option<&str>, Status, &str)] = &[
    (
        "--config.file",
        Some("/etc/kepler/config.yaml"),
        Same,
        "before or after the subcommand",
    ),
    ("--log.level", Some("debug"), Same, ""),
    ("--log.format", Some("json"), Same, ""),
    ("--host.sysfs", Some("/host/sys"), Same, ""),
    ("--host.procfs", Some("/host/proc"), Same, ""),
    ("--monitor.interval", Some("5s"), Same, ""),
    ("--monitor.max-terminated", Some("-1"), Same, ""),
    ("--debug.pprof", None, Differs, "as `debug.pprof.enabled`"),
    ("--web.config-file", Some(""), Same, ""),
    ("--web.listen-address", Some(":28282"), Same, "repeatable"),
    (
        "--exporter.stdout",
        None,
        Differs,
        "as `exporter.stdout.enabled`",
    ),
    ("--exporter.prometheus", None, Same, ""),
    (
        "--metrics",
        Some("node"),
        Same,
        "repeatable; also comma-separated and `all`",
    ),
    ("--kube.enable", None, Same, "as `kube.enabled`"),
    (
        "--kube.config",
        Some("/kubeconfig"),
        Same,
        "as `kube.config`",
    ),
    ("--kube.node-name", Some("node-1"), Same, ""),
    ("--experimental.platform.redfish.enabled", None, Same, ""),
    (
        "--experimental.platform.redfish.node-name",
        Some("node-1"),
        Same,
        "",
    ),
    (
        "--experimental.platform.redfish.config-file",
        Some("/redfish.yaml"),
        Same,
        "",
    ),
    ("--experimental.hwmon.enabled", None, Differs, "v0.11.4"),
    ("--experimental.hwmon.force-enabled", None, Differs, ""),
    (
        "--experimental.hwmon.zones",
        Some("power1"),
        Same,
        "repeatable",
    ),
    ("--experimental.gpu.enabled", None, Same, ""),
    ("--experimental.gpu.idle-power", Some("17.5"), Same, ""),
    (
        "--experimental.gpu.dcgm-endpoint",
        Some("http://10.0.0.1:9400/metrics"),
        Same,
        "as the key",
    ),
];

/// (family, status, note)
const METRICS: &[(&str, Status, &str)] = &[
    (
        "kepler_node_cpu_joules_total",
        Differs,
        "counts from start-up; upstream's is the raw counter",
    ),
    ("kepler_node_cpu_watts", Same, ""),
    ("kepler_node_cpu_active_joules_total", Same, ""),
    ("kepler_node_cpu_active_watts", Same, ""),
    ("kepler_node_cpu_idle_joules_total", Same, ""),
    ("kepler_node_cpu_idle_watts", Same, ""),
    ("kepler_node_cpu_usage_ratio", Same, ""),
    ("kepler_node_cpu_info", Same, ""),
    ("kepler_process_cpu_joules_total", Same, ""),
    ("kepler_process_cpu_watts", Same, ""),
    ("kepler_process_cpu_seconds_total", Same, ""),
    ("kepler_container_cpu_joules_total", Same, ""),
    ("kepler_container_cpu_watts", Same, ""),
    ("kepler_pod_cpu_joules_total", Same, ""),
    ("kepler_pod_cpu_watts", Same, ""),
    ("kepler_vm_cpu_joules_total", Same, ""),
    ("kepler_vm_cpu_watts", Same, ""),
    (
        "kepler_build_info",
        Same,
        "`goversion` holds the Rust toolchain version",
    ),
    (
        "kepler_platform_watts",
        Same,
        "Redfish and IPMI readings, one series each",
    ),
    ("kepler_node_gpu_watts", Same, "one series per device"),
    (
        "kepler_node_gpu_joules_total",
        Same,
        "one series per device",
    ),
    ("kepler_process_gpu_watts", Same, ""),
    ("kepler_process_gpu_joules_total", Same, ""),
    ("kepler_container_gpu_watts", Same, ""),
    ("kepler_container_gpu_joules_total", Same, ""),
    ("kepler_pod_gpu_watts", Same, ""),
    ("kepler_pod_gpu_joules_total", Same, ""),
    (
        "process_cpu_seconds_total",
        Same,
        "`debugCollectors: [process]`",
    ),
    (
        "process_resident_memory_bytes",
        Same,
        "`debugCollectors: [process]`",
    ),
    (
        "process_virtual_memory_bytes",
        Same,
        "`debugCollectors: [process]`",
    ),
    ("process_open_fds", Same, "`debugCollectors: [process]`"),
    ("process_max_fds", Same, "`debugCollectors: [process]`"),
    (
        "process_start_time_seconds",
        Same,
        "`debugCollectors: [process]`",
    ),
    (
        "go_goroutines",
        Missing,
        "Go runtime metrics; `go` exports `process_threads`",
    ),
];

/// (path, status, note)
const ENDPOINTS: &[(&str, Status, &str)] = &[
    ("/metrics", Same, "text 0.0.4 or OpenMetrics by `Accept`"),
    ("/", Same, "landing page"),
    ("/probe/livez", Same, "the chart's liveness probe"),
    (
        "/probe/readyz",
        Same,
        "ready once a first interval has energy",
    ),
    ("/healthz", Same, "older manifests' probe"),
    ("/readyz", Same, "older manifests' probe"),
    ("/debug/pprof/", Same, "index; with `debug.pprof.enabled`"),
    (
        "/debug/pprof/profile",
        Same,
        "CPU profile, `seconds` (default 30, at most 600), sampled at 100 Hz",
    ),
    (
        "/debug/pprof/heap",
        Differs,
        "memory in use (`inuse_space`), sampled by jemalloc every 512 KiB; no `gc` parameter",
    ),
    ("/debug/pprof/allocs", Missing, "Go runtime profile"),
    ("/debug/pprof/block", Missing, "Go runtime profile"),
    ("/debug/pprof/goroutine", Missing, "Go runtime profile"),
    ("/debug/pprof/mutex", Missing, "Go runtime profile"),
    ("/debug/pprof/threadcreate", Missing, "Go runtime profile"),
    ("/debug/pprof/trace", Missing, "Go execution trace"),
    ("/debug/pprof/cmdline", Missing, "Go runtime endpoint"),
    ("/debug/pprof/symbol", Missing, "Go runtime endpoint"),
];

/// `a.b.c: v` as nested YAML.
fn nested_yaml(key: &str, value: &str) -> String {
    let parts: Vec<&str> = key.split('.').collect();
    let mut yaml = String::new();
    for (depth, part) in parts.iter().enumerate() {
        yaml.push_str(&"  ".repeat(depth));
        yaml.push_str(part);
        if depth + 1 == parts.len() {
            yaml.push_str(": ");
            yaml.push_str(value);
        } else {
            yaml.push(':');
        }
        yaml.push('\n');
    }
    yaml
}

#[test]
fn every_upstream_key_is_known_and_warned_about_as_stated() {
    for (key, value, status, _) in KEYS {
        let yaml = nested_yaml(key, value);
        let loaded = Config::from_yaml(&yaml, Path::new("compat.yaml"))
            .unwrap_or_else(|e| panic!("{key}: {e}"));
        assert!(
            loaded.unknown_keys.is_empty(),
            "{key}: {:?}",
            loaded.unknown_keys
        );
        let warned = loaded
            .config
            .not_implemented()
            .iter()
            .any(|w| w.starts_with(key));
        assert_eq!(
            warned,
            *status == Warned,
            "{key}: warned at start-up = {warned}"
        );
    }
}

#[test]
fn every_upstream_flag_parses() {
    for (flag, value, _, _) in FLAGS {
        let args: Vec<String> = match value {
            Some(v) => vec![format!("{flag}={v}")],
            None => vec![flag.to_string()],
        };
        Cli::parse_args(std::iter::once("kepler".to_string()).chain(args))
            .unwrap_or_else(|e| panic!("{flag}: {e}"));
        if value.is_none() {
            let negated = format!("--no-{}", &flag[2..]);
            Cli::parse_args(["kepler", negated.as_str()])
                .unwrap_or_else(|e| panic!("{negated}: {e}"));
        }
    }
    assert_eq!(
        FLAGS.len(),
        25,
        "upstream has 24 flags plus v0.11.4's hwmon.enabled"
    );
}

#[test]
fn metric_families_and_paths_exist_as_stated() {
    let families: Vec<&str> = kepler_exporters::registry::ALL
        .iter()
        .map(|d| d.name())
        .collect();
    for (name, status, _) in METRICS {
        assert_eq!(
            families.contains(name),
            *status != Missing,
            "{name}: exported = {}",
            families.contains(name)
        );
    }
    let paths: Vec<&str> = kepler_exporters::routes::PATHS
        .iter()
        .map(|p| p.0)
        .chain(kepler_agent::profiling::PATHS.iter().copied())
        .collect();
    for (path, status, _) in ENDPOINTS {
        assert_eq!(paths.contains(path), *status != Missing, "{path}");
    }
}

fn table<T>(out: &mut String, head: &str, rows: &[T], row: impl Fn(&T) -> (String, Status, &str)) {
    out.push_str(&format!("| {head} | Status | Notes |\n|---|---|---|\n"));
    for r in rows {
        let (name, status, note) = row(r);
        out.push_str(&format!("| {name} | {} | {note} |\n", status.text()));
    }
    out.push('\n');
}

fn document() -> String {
    let mut s = String::from(
        "# Compatibility with upstream Kepler\n\n\
         Every configuration key, flag, metric family and endpoint of upstream Kepler (v0.11 and \
         main), and how kepler-rs stands on each. Generated from \
         `bins/kepler/tests/compatibility.rs`, whose tests check every row against the agent; \
         regenerate with `UPDATE_DOCS=1 cargo test -p kepler --test compatibility`.\n\n\
         Upstream's own published files (`hack/config.yaml`, the Helm chart's `config:` values, \
         `manifests/k8s/configmap.yaml`) load without warnings and start the agent \
         (`bins/kepler/tests/upstream_configs.rs`). Keys of kepler-rs's own live in their own \
         sections (README, Configuration).\n\n",
    );
    s.push_str("## Configuration keys\n\n");
    table(&mut s, "Key", KEYS, |(k, _, st, n)| {
        (format!("`{k}`"), *st, n)
    });
    s.push_str(
        "## Flags\n\nBoolean flags take kingpin's forms: `--flag`, `--flag=false`, \
         `--no-flag`; a bad flag exits with status 1.\n\n",
    );
    table(&mut s, "Flag", FLAGS, |(f, _, st, n)| {
        (format!("`{f}`"), *st, n)
    });
    s.push_str("## Metric families\n\n");
    table(&mut s, "Family", METRICS, |(m, st, n)| {
        (format!("`{m}`"), *st, n)
    });
    s.push_str("## Endpoints\n\n");
    table(&mut s, "Path", ENDPOINTS, |(p, st, n)| {
        (format!("`{p}`"), *st, n)
    });
    s.push_str(
        "## Logs\n\nLines in Go slog's text or JSON form with `time`, `level`, `source` and \
         `msg`, on stdout (stderr when the stdout exporter is on, and for `kepler probe`); the \
         effective configuration is printed at start-up with text logs at info level.\n",
    );
    s
}

#[test]
fn docs_compatibility_md_is_current() {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/compatibility.md");
    let expected = document();
    if std::env::var("UPDATE_DOCS").as_deref() == Ok("1") {
        std::fs::write(&path, &expected).expect("writing docs/compatibility.md");
        return;
    }
    let current = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        current == expected,
        "{} is out of date: run `UPDATE_DOCS=1 cargo test -p kepler --test compatibility`",
        path.display()
    );
}

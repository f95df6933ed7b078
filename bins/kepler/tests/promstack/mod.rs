//! A real Prometheus scraping a real agent, for tests of PromQL written elsewhere (dashboards,
//! recording rules): a simulated powercap meter, a container-like cgroup running a named
//! process, a QEMU-like process, and a scripted GPU used by the container's process.
//!
//! Used as `mod common; mod promstack;` by the test files that need it.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::fake_kube::{pod, FakeKube};
use crate::common::*;
use kepler_testkit::prometheus::{start_prometheus, Prometheus};

/// The tool check of every test that needs one, for the files that use this stack.
pub use kepler_testkit::tools::{have, skip};

pub const VM_UUID: &str = "5f0c1a2e-8d4b-4c4e-9a1f-0123456789ab";
pub const VM_NAME: &str = "testvm";
/// The name the container's process carries in its environment.
pub const CONTAINER_NAME: &str = "testbox";
/// The command name of the process in the container-like cgroup.
pub const CONTAINER_COMM: &str = "stress-ng";

/// The repository root (two levels above this crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Percent-encodes a query parameter.
pub fn encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// What one instant query answered.
#[derive(Debug)]
pub enum Answer {
    /// The result vector (or a scalar, as one element).
    Data(Vec<serde_json::Value>),
    /// Prometheus refused the query (a parse or execution error): never worth waiting for.
    Error(String),
}

/// Runs a PromQL instant query.
pub fn query(port: u16, promql: &str) -> Answer {
    let path = format!("/api/v1/query?query={}", encode(promql));
    // A refused connection while Prometheus starts is "no data yet", not a query error.
    let Ok((_, body)) = http_get(port, &path) else {
        return Answer::Data(vec![]);
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    if json["status"] == "error" {
        return Answer::Error(format!("{}: {}", json["errorType"], json["error"]));
    }
    match &json["data"]["result"] {
        serde_json::Value::Array(items) => Answer::Data(items.clone()),
        serde_json::Value::Null => Answer::Data(vec![]),
        scalar => Answer::Data(vec![serde_json::json!({ "value": scalar })]),
    }
}

pub fn value(result: &serde_json::Value) -> f64 {
    result["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Polls until every query returns data, or the deadline passes; returns the queries that
/// never did, each with the last answer, so a failure lists all of them at once.
pub fn poll_all(port: u16, queries: &[String], limit: Duration) -> Vec<(String, String)> {
    let deadline = Instant::now() + limit;
    let mut pending: Vec<(String, String)> = queries
        .iter()
        .map(|q| (q.clone(), String::from("never asked")))
        .collect();
    loop {
        pending.retain_mut(|(q, last)| match query(port, q) {
            Answer::Data(items) if !items.is_empty() => false,
            Answer::Data(_) => {
                *last = "no data".into();
                true
            }
            Answer::Error(e) => {
                *last = e;
                true
            }
        });
        if pending.is_empty() || Instant::now() >= deadline {
            return pending;
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Polls one query until it returns data.
pub fn poll(port: u16, promql: &str, limit: Duration) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + limit;
    loop {
        if let Answer::Data(items) = query(port, promql) {
            if !items.is_empty() {
                return items;
            }
        }
        assert!(
            Instant::now() < deadline,
            "no result for {promql} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Everything a dashboard or a rule reads, running. Fields drop in declaration order:
/// Prometheus, the agent, the simulation, the workloads, and last the cgroup (removable only
/// once empty).
pub struct Stack {
    pub prometheus_port: u16,
    pub agent_port: u16,
    pub container_id: String,
    /// The QEMU-like process (busy: it always has CPU time, so always a process series).
    pub vm_pid: u32,
    prometheus: Prometheus,
    agent: Proc,
    _sim: PowercapSim,
    _sysfs: tempfile::TempDir,
    _dir: tempfile::TempDir,
    _vm: Proc,
    _container: Proc,
    _cgroup: TestCgroup,
    // Dropped in this order: the pod's process, then its cgroup, then the fake kubelet.
    _pod_load: Proc,
    _pod_cgroup: PodCgroup,
    _kubelet: FakeKube,
}

/// The pod the fake kubelet names: its uid, name, namespace and container.
pub const POD_NAME: &str = "web-1";
pub const POD_NAMESPACE: &str = "shop";
const POD_CONTAINER: &str = "nginx";
const NODE: &str = "stack-node";
const TOKEN: &str = "stack-token";

impl Stack {
    /// `None` (after `skip`) when a tool or root is missing.
    pub fn start(rule_files: &[PathBuf]) -> Option<Stack> {
        if !have("prometheus") || !have("stress-ng") {
            skip(
                "SKIP: prometheus or stress-ng not installed (bash scripts/setup.sh installs them)",
            );
            return None;
        }
        if !is_root() {
            skip("SKIP: needs root to place a workload in a container-like cgroup");
            return None;
        }
        let cgroup = TestCgroup::create(9).expect("a writable cgroup hierarchy");
        // The agent names a container from HOSTNAME or CONTAINER_NAME in its processes'
        // environment, whichever comes first: a clean environment keeps the host's HOSTNAME out.
        let container = Proc(
            Command::new("sh")
                .arg("-c")
                .arg(cgroup.enter_then(&format!("{CONTAINER_COMM} --cpu 1 --timeout 300s --quiet")))
                .env_clear()
                .env("PATH", std::env::var_os("PATH").unwrap_or_default())
                .env("CONTAINER_NAME", CONTAINER_NAME)
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("spawn the container's workload"),
        );
        let vm = Proc(
            Command::new("bash")
                .arg("-c")
                .arg(format!(
                    "exec -a qemu-system-x86_64 yes -- -uuid {VM_UUID} -name guest={VM_NAME},debug-threads=on"
                ))
                .stdout(Stdio::null())
                .spawn()
                .expect("spawn VM-like process"),
        );
        // A pod the fake kubelet names, with a light load so it always has watts. Its first
        // process wakes many times a second: the GPU's process must be seen by the eBPF
        // source in every interval for its GPU power to reach the pod.
        let pod_uid = format!("0000feed-aaaa-bbbb-cccc-{:012x}", std::process::id());
        let pod_container = format!("{}{:08x}", "0badc0de".repeat(7), std::process::id());
        let pod_cgroup =
            PodCgroup::create(&pod_uid, &pod_container).expect("a writable cgroup hierarchy");
        let pod_load = spawn_shell(&format!(
            "echo $$ > {}/cgroup.procs && exec env -i PATH=/usr/bin:/bin sh -c 'while :; do sleep 0.05; done'",
            pod_cgroup.dir.display()
        ));
        let kubelet = FakeKube::start(NODE, TOKEN);
        kubelet.set_pod(pod(
            &pod_uid,
            POD_NAME,
            POD_NAMESPACE,
            &[(POD_CONTAINER, &pod_container)],
        ));
        let sysfs = sysfs_dir();
        let sim = PowercapSim::start(
            sysfs.path(),
            &[("package-0", 50.0, 1 << 40), ("dram", 10.0, 1 << 40)],
        );
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("kepler.yaml");
        std::fs::write(
            &config,
            format!(
                // The default usage source (eBPF where it loads): stress-ng's workers blank
                // their environment, so the container's name must come from their parent.
                "host:\n  sysfs: {}\nmonitor:\n  interval: 1s\n\
                 kube:\n  enabled: true\n  nodeName: {NODE}\n  podInformer:\n    \
                 pollInterval: 1s\n    kubeletURL: {}\n    kubeletCAFile: {}\n    tokenFile: {}\n\
                 exporter:\n  prometheus:\n    debugCollectors: [go, process]\n\
                 dev:\n  fake-gpu:\n    enabled: true\n    devices:\n\
                 \x20     - watts: 80\n        processes: [{{pid: {}}}, {{pid: {}}}]\n",
                sysfs.path().display(),
                kubelet.url(),
                kubelet.ca_file().display(),
                kubelet.token_file().display(),
                container.pid(),
                pod_load.pid()
            ),
        )
        .expect("write kepler.yaml");
        let (agent, agent_port) = start_agent(&["--config.file", config.to_str().unwrap_or("")]);
        wait_ready(agent_port, Duration::from_secs(30));
        let (prometheus, prometheus_port) = start_prometheus(dir.path(), &[agent_port], rule_files);
        Some(Stack {
            prometheus_port,
            agent_port,
            container_id: cgroup.id.clone(),
            vm_pid: vm.pid(),
            prometheus,
            agent,
            _sim: sim,
            _sysfs: sysfs,
            _dir: dir,
            _vm: vm,
            _container: container,
            _cgroup: cgroup,
            _pod_load: pod_load,
            _pod_cgroup: pod_cgroup,
            _kubelet: kubelet,
        })
    }
}

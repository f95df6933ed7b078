//! The agent's output as real Prometheus tooling sees it: `promtool check metrics` accepts it,
//! and a real Prometheus server scrapes it and answers PromQL over node, process, container and
//! VM series.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kepler_testkit::prometheus::start_prometheus;
use kepler_testkit::tools::{have, skip};

#[test]
fn promtool_accepts_the_default_output() {
    if !have("promtool") {
        skip("SKIP: promtool not installed (bash scripts/setup.sh installs it)");
        return;
    }
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(
        sysfs.path(),
        &[("package-0", 30.0, 1 << 40), ("dram", 5.0, 1 << 40)],
    );
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval",
        "500ms",
    ]);
    wait_ready(port, Duration::from_secs(30));
    let (status, body) = http_get(port, "/metrics").unwrap();
    assert_eq!(status, 200);
    assert!(body.contains("kepler_process_cpu_joules_total{"), "{body}");
    let mut check = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    check
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let out = check.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "promtool rejected the output:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Runs a PromQL instant query; returns the result vector.
fn query(port: u16, promql: &str) -> Vec<serde_json::Value> {
    let encoded: String = promql
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect();
    let Ok((200, body)) = http_get(port, &format!("/api/v1/query?query={encoded}")) else {
        return Vec::new();
    };
    let json: serde_json::Value = serde_json::from_str(&body).unwrap_or_default();
    json["data"]["result"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn value(result: &serde_json::Value) -> f64 {
    result["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(f64::NAN)
}

/// Polls a query until it returns something (the first scrape lands seconds after start).
fn poll(port: u16, promql: &str, limit: Duration) -> Vec<serde_json::Value> {
    let deadline = Instant::now() + limit;
    loop {
        let result = query(port, promql);
        if !result.is_empty() {
            return result;
        }
        assert!(
            Instant::now() < deadline,
            "no result for {promql} within {limit:?}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
}

#[test]
fn prometheus_scrapes_node_process_container_and_vm_series() {
    if !have("prometheus") || !have("stress-ng") {
        skip("SKIP: prometheus or stress-ng not installed (bash scripts/setup.sh installs them)");
        return;
    }
    if !is_root() {
        skip("SKIP: needs root to place a workload in a container-like cgroup");
        return;
    }
    let cgroup = TestCgroup::create(1).expect("a writable cgroup hierarchy");
    let vm_uuid = "5f0c1a2e-8d4b-4c4e-9a1f-0123456789ab";
    let container_load = spawn_shell(&cgroup.enter_then("stress-ng --cpu 1 --timeout 90s --quiet"));
    let vm_load = Proc(
        Command::new("bash")
            .arg("-c")
            .arg(format!(
                "exec -a qemu-system-x86_64 yes -- -uuid {vm_uuid} -name guest=testvm,debug-threads=on"
            ))
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn VM-like process"),
    );

    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(
        sysfs.path(),
        &[("package-0", 50.0, 1 << 40), ("dram", 10.0, 1 << 40)],
    );
    let (_agent, agent_port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval",
        "1s",
    ]);
    wait_ready(agent_port, Duration::from_secs(30));
    let data = tempfile::tempdir().unwrap();
    let (_prometheus, port) = start_prometheus(data.path(), &[agent_port], &[]);

    let limit = Duration::from_secs(60);
    // One interval's watts follow when the simulator's thread last wrote the counter; on a
    // loaded machine a late write shows as one odd interval (93.7 W once at load 19). A wrong
    // computation is wrong in every interval, so the check waits for one that is right.
    let deadline = Instant::now() + limit;
    let node = loop {
        let node = poll(port, "kepler_node_cpu_watts{zone=\"package\"}", limit);
        assert_eq!(node.len(), 1);
        let node_watts = value(&node[0]);
        if (node_watts - 50.0).abs() < 1.0 {
            break node;
        }
        assert!(Instant::now() < deadline, "node package {node_watts} W");
        std::thread::sleep(Duration::from_millis(700));
    };
    assert!(node[0]["metric"]["node_name"]
        .as_str()
        .is_some_and(|n| !n.is_empty()));

    let processes = poll(
        port,
        // Processes that ended below the export threshold are not series; their power is
        // the node's hidden process power.
        "sum(kepler_process_cpu_watts{zone=\"package\"}) + on() kepler_node_cpu_hidden_process_watts{zone=\"package\"} - on() kepler_node_cpu_active_watts{zone=\"package\"}",
        limit,
    );
    assert!(value(&processes[0]).abs() < 1e-3, "{processes:?}");

    let container = poll(
        port,
        &format!(
            "kepler_container_cpu_watts{{container_id=\"{}\",zone=\"package\"}}",
            cgroup.id
        ),
        limit,
    );
    assert_eq!(container[0]["metric"]["runtime"], "docker");
    assert_eq!(container[0]["metric"]["state"], "running");
    let container_joules = poll(
        port,
        &format!(
            "kepler_container_cpu_joules_total{{container_id=\"{}\",zone=\"package\"}} > 0",
            cgroup.id
        ),
        limit,
    );
    assert!(value(&container_joules[0]) > 0.0);

    let vm = poll(
        port,
        &format!("kepler_vm_cpu_joules_total{{vm_id=\"{vm_uuid}\",zone=\"package\"}} > 0"),
        limit,
    );
    assert_eq!(vm[0]["metric"]["vm_name"], "testvm");
    assert_eq!(vm[0]["metric"]["hypervisor"], "kvm");
    let vm_process = poll(
        port,
        &format!("kepler_process_cpu_joules_total{{vm_id=\"{vm_uuid}\",type=\"vm\"}}"),
        limit,
    );
    assert!(!vm_process.is_empty());

    drop(vm_load);
    drop(container_load);
}

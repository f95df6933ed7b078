//! Optional eBPF probes cost a program run on every event they count (the softirq program
//! ran 220,000–290,000 times a second under loopback TCP traffic here, 4 % of a core). The
//! agent keeps one attached only when something reads its counts: an estimating model that
//! needs them, or `ebpf.exportFeatures`. Checked on the running agent's own descriptors: a
//! held BPF link names its tracepoint in `/proc/<pid>/fdinfo`. How it then accounts CPU time
//! (at every switch, or with a task iterator where no probe needs switches) is in its metrics.

mod common;

use std::time::Duration;

use common::*;
use kepler_testkit::tools::skip;

/// The tracepoints the agent's held BPF links attach to.
fn linked_tracepoints(pid: u32) -> Vec<String> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(format!("/proc/{pid}/fd")) else {
        return out;
    };
    for entry in entries.flatten() {
        let is_link = std::fs::read_link(entry.path())
            .is_ok_and(|t| t.to_string_lossy().ends_with("bpf_link"));
        if !is_link {
            continue;
        }
        let info = format!("/proc/{pid}/fdinfo/{}", entry.file_name().to_string_lossy());
        let text = std::fs::read_to_string(info).unwrap_or_default();
        out.extend(
            text.lines()
                .filter_map(|l| l.strip_prefix("tp_name:"))
                .map(|t| t.trim().to_string()),
        );
    }
    out
}

/// Runs the agent with a powercap meter and `yaml`, and returns the tracepoints it holds
/// links to once ready, and the accounting and exits its metrics name; `None` when eBPF did
/// not load here.
fn tracepoints_with(yaml: &str) -> Option<(Vec<String>, String, String)> {
    let dir = tempfile::tempdir().unwrap();
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 50.0, 1 << 40)]);
    let (agent, port) =
        start_agent_with_config(dir.path(), yaml, &["--host.sysfs", sysfs.path().to_str()?]);
    wait_ready(port, Duration::from_secs(60));
    let held = linked_tracepoints(agent.0.id());
    let samples = scrape(port);
    let accounting = select(&samples, "kepler_agent_ebpf_accounting_info", &[]);
    if accounting.is_empty() {
        return None;
    }
    assert_eq!(accounting.len(), 1, "one accounting");
    let labels = &accounting[0].labels;
    Some((held, labels["accounting"].clone(), labels["exits"].clone()))
}

#[test]
fn softirq_counting_is_attached_only_when_read() {
    if !is_root() {
        skip("SKIP: needs root to load eBPF");
        return;
    }
    // A measuring meter reads no features: at most sched_switch stays, and nothing when the
    // task iterator counts exits through the cgroups (a busy host, as while tests run).
    let Some((held, accounting, exits)) = tracepoints_with("ebpf:\n  enabled: true\n") else {
        skip("SKIP: the eBPF source did not load here");
        return;
    };
    let expected: &[&str] = if exits == "cgroup_counters" {
        assert_eq!(accounting, "task_iterator");
        &[]
    } else {
        &["sched_switch"]
    };
    assert_eq!(held, expected, "with a power meter and nothing exported");
    // Nothing needs switches counted: either accounting may cost the node less.
    assert!(
        ["sched_switch", "task_iterator"].contains(&accounting.as_str()),
        "{accounting}"
    );
    // Exits counted through the cgroups, where the iterator costs less: nothing on
    // sched_switch at all.
    let (held, accounting, exits) =
        tracepoints_with("ebpf:\n  enabled: true\n  exits: cgroups\n").expect("eBPF loaded");
    if accounting == "task_iterator" {
        assert_eq!(exits, "cgroup_counters");
        assert!(held.is_empty(), "counting exits: {held:?}");
    } else {
        assert_eq!(exits, "final_switch");
        assert_eq!(held, ["sched_switch"]);
    }
    // Exported features include the softirq counts: the probe stays, and charging at every
    // switch with it (its counts go to the entries sched_switch keeps).
    let (held, accounting, exits) =
        tracepoints_with("ebpf:\n  enabled: true\n  exportFeatures: true\n")
            .expect("eBPF loaded a moment ago");
    assert!(
        held.iter().any(|t| t == "softirq_entry") && held.iter().any(|t| t == "sched_switch"),
        "with exportFeatures: {held:?}"
    );
    assert_eq!(accounting, "sched_switch");
    assert_eq!(exits, "final_switch");
}

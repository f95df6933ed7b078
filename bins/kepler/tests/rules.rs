//! The recording rules of deploy/prometheus/recording-rules.yaml: promtool accepts them and
//! their unit tests pass, the Helm chart ships the same file, and a real Prometheus evaluating
//! them over a real agent's series records every rule that does not need Kubernetes.

mod common;
mod promstack;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use promstack::*;

fn rules_file() -> PathBuf {
    repo_root().join("deploy/prometheus/recording-rules.yaml")
}

/// Every rule's `record:` name, in file order.
fn recorded_names() -> Vec<String> {
    let text = std::fs::read_to_string(rules_file()).expect("read recording-rules.yaml");
    let doc: serde_yaml::Value = serde_yaml::from_str(&text).expect("recording-rules.yaml is YAML");
    let mut names = Vec::new();
    for group in doc["groups"].as_sequence().expect("groups") {
        for rule in group["rules"].as_sequence().expect("rules") {
            names.push(rule["record"].as_str().expect("a record name").to_string());
        }
    }
    names
}

#[test]
fn the_chart_ships_the_same_rules_file() {
    let canonical = std::fs::read(rules_file()).unwrap();
    let chart = std::fs::read(repo_root().join("deploy/helm/kepler/files/recording-rules.yaml"))
        .expect("deploy/helm/kepler/files/recording-rules.yaml");
    assert!(
        canonical == chart,
        "deploy/helm/kepler/files/recording-rules.yaml differs from deploy/prometheus/recording-rules.yaml; copy it"
    );
}

fn promtool(args: &[&str]) {
    let out = Command::new("promtool")
        .args(args)
        .current_dir(repo_root())
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool {args:?} failed:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn promtool_checks_the_rules_and_their_unit_tests_pass() {
    if !have("promtool") {
        skip("SKIP: promtool not installed (bash scripts/setup.sh installs it)");
        return;
    }
    promtool(&["check", "rules", "deploy/prometheus/recording-rules.yaml"]);
    promtool(&[
        "test",
        "rules",
        "deploy/prometheus/tests/recording-rules.test.yaml",
    ]);
}

#[test]
fn every_rule_records_data_from_a_real_agent() {
    let Some(stack) = Stack::start(&[rules_file()]) else {
        return;
    };
    let names = recorded_names();
    assert!(names.len() > 20, "{names:?}");
    // Namespace rules included: the stack's fake kubelet names its pod.
    assert!(
        names.iter().any(|n| n.starts_with("pod_namespace")),
        "{names:?}"
    );
    let missing = poll_all(stack.prometheus_port, &names, Duration::from_secs(90));
    assert!(missing.is_empty(), "rules without data: {missing:#?}");

    // The roll-ups agree with the agent: the node's package power is the simulated 50 W, the
    // cluster (one node) equals the node, and it is measured.
    let port = stack.prometheus_port;
    let node = poll(
        port,
        "node_name_zone:kepler_node_cpu_watts:sum{zone=\"package\"}",
        Duration::from_secs(30),
    );
    assert!((value(&node[0]) - 50.0).abs() < 1.0, "{node:?}");
    let measured = poll(
        port,
        "cluster_source:kepler_node_cpu_watts:sum{source=\"measured\"}",
        Duration::from_secs(30),
    );
    assert!((value(&measured[0]) - 60.0).abs() < 2.0, "{measured:?}");
    let ratio = poll(
        port,
        "cluster:kepler_node_cpu_watts:estimated_ratio",
        Duration::from_secs(30),
    );
    assert_eq!(value(&ratio[0]), 0.0, "{ratio:?}");
    let gpu = poll(
        port,
        "cluster:kepler_node_gpu_watts:sum",
        Duration::from_secs(30),
    );
    assert!((value(&gpu[0]) - 80.0).abs() < 10.0, "{gpu:?}");
}

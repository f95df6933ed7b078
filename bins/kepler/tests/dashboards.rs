//! Grafana dashboards against a real Prometheus scraping the real agent (simulated powercap
//! meter, a container-like cgroup with a named process, a QEMU-like process, a scripted GPU):
//! every query of upstream Kepler's v0.11 dashboard (recorded in tests/dashboards/) and every
//! query of ours (deploy/grafana/kepler-rs.json) returns data, Grafana variables substituted
//! as a user's selection would. Queries over pod names and namespaces need the pod informer
//! and are listed, not required, until this test gets a fake kubelet.

mod common;
mod promstack;

use std::collections::HashMap;
use std::time::Duration;

use promstack::*;

/// A dashboard query made runnable.
#[derive(Debug)]
struct Check {
    what: String,
    promql: String,
    /// For `label_values(selector, label)`: the label that must have a non-empty value.
    label: Option<String>,
}

/// Replaces `$name` and `${name}` with the selection; a variable with no selection is a test
/// bug (a dashboard gained a variable), so it panics.
fn substitute(expr: &str, vars: &HashMap<&str, String>) -> String {
    let mut out = String::new();
    let mut rest = expr;
    while let Some(at) = rest.find('$') {
        out.push_str(&rest[..at]);
        let after = &rest[at + 1..];
        let (name, len) = if let Some(braced) = after.strip_prefix('{') {
            let end = braced.find('}').expect("closing brace");
            (&braced[..end], end + 2)
        } else {
            let end = after
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .unwrap_or(after.len());
            (&after[..end], end)
        };
        let value = vars
            .get(name)
            .unwrap_or_else(|| panic!("no selection for variable ${name} in {expr}"));
        out.push_str(value);
        rest = &after[len..];
    }
    out.push_str(rest);
    out
}

/// `label_values(selector, label)` as a query whose result carries `label`; `query_result(e)`
/// as `e`; anything else as it is.
fn runnable(what: String, expr: &str) -> Check {
    let expr = expr.trim();
    if let Some(inner) = expr
        .strip_prefix("label_values(")
        .and_then(|e| e.strip_suffix(')'))
    {
        let (selector, label) = inner
            .rsplit_once(',')
            .expect("label_values(selector, label)");
        let label = label.trim().to_string();
        return Check {
            what,
            promql: format!("count by ({label}) ({})", selector.trim()),
            label: Some(label),
        };
    }
    if let Some(inner) = expr
        .strip_prefix("query_result(")
        .and_then(|e| e.strip_suffix(')'))
    {
        return Check {
            what,
            promql: inner.trim().to_string(),
            label: None,
        };
    }
    Check {
        what,
        promql: expr.to_string(),
        label: None,
    }
}

/// Runs every check until each has data (and a non-empty label where one is named), or 90 s
/// pass; returns the failures.
fn run(port: u16, checks: &[Check]) -> Vec<String> {
    let queries: Vec<String> = checks.iter().map(|c| c.promql.clone()).collect();
    let mut failures: Vec<String> = poll_all(port, &queries, Duration::from_secs(90))
        .into_iter()
        .map(|(q, why)| {
            let what = checks.iter().find(|c| c.promql == q).map(|c| &c.what);
            format!("{what:?}: {q}: {why}")
        })
        .collect();
    for check in checks {
        let Some(label) = &check.label else { continue };
        let Answer::Data(items) = query(port, &check.promql) else {
            continue;
        };
        let values: Vec<&str> = items
            .iter()
            .filter_map(|i| i["metric"][label.as_str()].as_str())
            .filter(|v| !v.is_empty())
            .collect();
        if values.is_empty() {
            failures.push(format!("{}: no non-empty {label} in {items:?}", check.what));
        }
    }
    failures
}

#[test]
fn upstream_and_our_dashboards_return_data() {
    let Some(stack) = Stack::start(&[]) else {
        return;
    };
    let port = stack.prometheus_port;

    // Upstream's dashboard, with the selections a user would make for this node's workloads.
    let text = include_str!("dashboards/upstream-v0.11.yaml");
    let doc: serde_yaml::Value = serde_yaml::from_str(text).unwrap();
    let vars: HashMap<&str, String> = HashMap::from([
        ("job", "kepler".to_string()),
        ("zone", ".*".to_string()),
        ("node", format!("127.0.0.1:{}", stack.agent_port)),
        ("process", stack.vm_pid.to_string()),
        ("container", CONTAINER_NAME.to_string()),
        ("vm", VM_NAME.to_string()),
        ("namespace", ".*".to_string()),
        ("pod", ".*".to_string()),
    ]);
    // Queries over pods need names from Kubernetes: the stack's fake kubelet gives them.
    let mut upstream = Vec::new();
    let mut kubernetes = 0;
    for q in doc["queries"].as_sequence().unwrap() {
        let what = format!("upstream {}", q["panel"].as_str().unwrap());
        let expr = substitute(q["expr"].as_str().unwrap(), &vars);
        kubernetes += usize::from(q["needs"].as_str() == Some("kubernetes"));
        upstream.push(runnable(what, &expr));
    }
    assert!(kubernetes >= 5, "the pod queries are marked");
    assert!(upstream.len() >= 20, "{upstream:?}");

    // Ours, with every node and zone selected ("All").
    let ours: serde_json::Value = serde_json::from_slice(
        &std::fs::read(repo_root().join("deploy/grafana/kepler-rs.json")).unwrap(),
    )
    .unwrap();
    let vars: HashMap<&str, String> = HashMap::from([
        ("job", "kepler".to_string()),
        ("node", ".*".to_string()),
        ("zone", ".*".to_string()),
        ("__rate_interval", "1m".to_string()),
        ("__range", "5m".to_string()),
    ]);
    let pod_panels = [
        "Top 10 pods by watts",
        "Top 10 pods by joules over the time range",
        "Top 10 namespaces by watts",
        "Top 10 namespaces by joules over the time range",
    ];
    let mut checks = Vec::new();
    let mut titles = Vec::new();
    for panel in ours["panels"].as_array().unwrap() {
        let title = panel["title"].as_str().unwrap_or_default().to_string();
        titles.push(title.clone());
        for target in panel["targets"].as_array().into_iter().flatten() {
            let expr = substitute(target["expr"].as_str().unwrap(), &vars);
            let what = format!("ours {title} ({})", target["refId"]);
            checks.push(runnable(what, &expr));
        }
    }
    for title in pod_panels {
        assert!(titles.iter().any(|t| t == title), "no panel {title}");
    }
    for var in ours["templating"]["list"].as_array().unwrap() {
        if var["type"] == "query" {
            let expr = substitute(var["query"]["query"].as_str().unwrap(), &vars);
            checks.push(runnable(format!("ours variable {}", var["name"]), &expr));
        }
    }
    assert!(checks.len() >= 25, "{checks:?}");

    let mut failures = run(port, &upstream);
    failures.extend(run(port, &checks));
    assert!(failures.is_empty(), "queries without data: {failures:#?}");

    // The container panel finds the named container, with its cgroup's id.
    let container = poll(
        port,
        &format!("kepler_container_cpu_watts{{container_name=\"{CONTAINER_NAME}\"}}"),
        Duration::from_secs(30),
    );
    assert_eq!(container[0]["metric"]["container_id"], stack.container_id);
    // The pod panels find the pod by the names the kubelet gave.
    poll(
        port,
        &format!(
            "kepler_pod_cpu_watts{{pod_name=\"{POD_NAME}\",pod_namespace=\"{POD_NAMESPACE}\"}}"
        ),
        Duration::from_secs(30),
    );
}

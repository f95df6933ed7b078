//! The Helm chart (deploy/helm/kepler), rendered by Helm's own library (deploy/helm/render.py):
//! with its defaults and with upstream Kepler's values files every object validates against
//! the Kubernetes schemas; the DaemonSet keeps upstream's facts; the agent accepts the rendered
//! config and flags and answers the rendered probes; deploy/k8s/ is the chart's output
//! (UPDATE_MANIFESTS=1 rewrites it).

mod common;
#[path = "helm/render.rs"]
mod render;

use std::path::{Path, PathBuf};
use std::time::Duration;

use render::*;
use serde_yaml::Value;

fn upstream_values() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/upstream-values.yaml")
}

fn checksum(objects: &[Value]) -> String {
    find(objects, "DaemonSet", None)["spec"]["template"]["metadata"]["annotations"]
        ["checksum/config"]
        .as_str()
        .expect("checksum/config annotation")
        .to_string()
}

#[test]
fn default_values_render_valid_objects_with_upstreams_facts_and_our_probes() {
    if !have_renderer() {
        return;
    }
    let objects = objects(&render(&chart_dir(), &[], &[]));
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "Service",
            "ServiceAccount"
        ]
    );
    assert_upstream_daemonset_facts(&objects);
    let c = agent_container(&objects);
    assert_eq!(probe_path(c, "livenessProbe"), "/healthz");
    assert_eq!(probe_path(c, "readinessProbe"), "/readyz");
    assert_eq!(c["securityContext"]["privileged"].as_bool(), Some(true));
    let config = assert_agent_accepts(&agent_config(&objects));
    assert_eq!(config.host.sysfs, Path::new("/host/sys"));
    assert_eq!(config.host.procfs, Path::new("/host/proc"));
}

#[test]
fn upstream_values_file_renders_valid_objects_and_a_config_the_agent_accepts() {
    if !have_renderer() {
        return;
    }
    let objects = objects(&render(&chart_dir(), &[&upstream_values()], &[]));
    assert_upstream_daemonset_facts(&objects);
    let c = agent_container(&objects);
    assert!(c["image"]
        .as_str()
        .is_some_and(|i| i.starts_with("quay.io/sustainable_computing_io/kepler:")));
    assert_eq!(probe_path(c, "livenessProbe"), "/probe/livez");
    assert_eq!(probe_path(c, "readinessProbe"), "/probe/readyz");
    let config = assert_agent_accepts(&agent_config(&objects));
    assert_eq!(config.monitor.max_terminated, 100);
}

/// Upstream's chart CI values: nameOverride, labels and annotations on every object, a
/// ServiceMonitor with labels of its own, a NetworkPolicy, resources.
#[test]
fn upstream_ci_values_name_label_and_annotate_every_object() {
    if !have_renderer() {
        return;
    }
    let file = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/upstream-ci-values.yaml");
    let objects = objects(&render(&chart_dir(), &[&file], &[]));
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "NetworkPolicy",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
    // The ServiceMonitor takes serviceMonitor.{labels,annotations} instead, as upstream's.
    for o in objects
        .iter()
        .filter(|o| o["kind"].as_str() != Some("ServiceMonitor"))
    {
        let meta = &o["metadata"];
        assert_eq!(meta["labels"]["test"].as_str(), Some("ci"), "{o:?}");
        assert_eq!(
            meta["labels"]["app.kubernetes.io/name"].as_str(),
            Some("kepler-test")
        );
        assert_eq!(
            meta["annotations"]["test.io/purpose"].as_str(),
            Some("ci-validation")
        );
        if o["kind"].as_str() != Some("ServiceAccount") {
            let name = meta["name"].as_str().unwrap_or_default();
            assert!(name.starts_with("kepler-kepler-test"), "{name}");
        }
    }
    let sm = find(&objects, "ServiceMonitor", None);
    assert_eq!(sm["metadata"]["labels"]["test"].as_str(), Some("true"));
    assert_eq!(sm["spec"]["endpoints"][0]["interval"].as_str(), Some("10s"));
    let pod = &find(&objects, "DaemonSet", None)["spec"]["template"];
    assert_eq!(
        pod["metadata"]["labels"]["environment"].as_str(),
        Some("test")
    );
    let c = agent_container(&objects);
    assert_eq!(c["resources"]["limits"]["memory"].as_str(), Some("512Mi"));
}

/// User labels that collide with the chart's: no key is written twice (the schema check
/// refuses duplicates), and the selector labels keep their values.
#[test]
fn colliding_labels_are_merged_and_the_selector_kept() {
    if !have_renderer() {
        return;
    }
    let set = r#"{"labels": {"app.kubernetes.io/name": "other", "app.kubernetes.io/part-of": "mine"},
                  "serviceMonitor": {"enabled": true, "labels": {"app.kubernetes.io/part-of": "sm"}}}"#;
    let objects = objects(&render(&chart_dir(), &[], &[set]));
    let ds = find(&objects, "DaemonSet", None);
    for labels in [
        &ds["metadata"]["labels"],
        &ds["spec"]["template"]["metadata"]["labels"],
    ] {
        assert_eq!(labels["app.kubernetes.io/name"].as_str(), Some("kepler"));
        assert_eq!(labels["app.kubernetes.io/part-of"].as_str(), Some("mine"));
    }
    let sm = find(&objects, "ServiceMonitor", None);
    assert_eq!(
        sm["metadata"]["labels"]["app.kubernetes.io/part-of"].as_str(),
        Some("sm")
    );
}

#[test]
fn config_checksum_changes_with_the_config_only() {
    if !have_renderer() {
        return;
    }
    let base = checksum(&objects(&render(&chart_dir(), &[], &[])));
    let same = checksum(&objects(&render(
        &chart_dir(),
        &[],
        &[r#"{"daemonset": {"resources": {"limits": {"memory": "256Mi"}}}}"#],
    )));
    let changed = checksum(&objects(&render(
        &chart_dir(),
        &[],
        &[r#"{"config": {"log": {"level": "debug"}}}"#],
    )));
    assert_eq!(base, same);
    assert_ne!(base, changed);
}

/// The rendered DaemonSet's flags and ConfigMap start the real agent, and the probes it
/// declares answer. Only the host paths (a DaemonSet's mounts) and the listen address
/// (loopback, a free port) are overridden; `--kube.enable` is left out, as there is no cluster.
#[test]
fn agent_starts_with_the_rendered_flags_and_config_and_answers_its_probes() {
    if !have_renderer() {
        return;
    }
    for files in [vec![], vec![upstream_values()]] {
        let files: Vec<&Path> = files.iter().map(PathBuf::as_path).collect();
        let objects = objects(&render(&chart_dir(), &files, &[]));
        let dir = tempfile::tempdir().expect("tempdir");
        let config = dir.path().join("config.yaml");
        std::fs::write(&config, agent_config(&objects)).expect("write config");
        let sysfs = common::sysfs_dir();
        let _sim = common::PowercapSim::start(sysfs.path(), &[("package-0", 20.0, 1 << 40)]);
        let c = agent_container(&objects);
        let mut args: Vec<String> = strings(&c["args"])
            .into_iter()
            .filter(|a| a != "--kube.enable")
            .map(|a| match a.as_str() {
                "--config.file=/etc/kepler/config.yaml" => {
                    format!("--config.file={}", config.display())
                }
                _ => a.replace("$(NODE_NAME)", "node-1"),
            })
            .collect();
        args.push(format!("--host.sysfs={}", sysfs.path().display()));
        args.push("--host.procfs=/proc".into());
        args.push("--monitor.interval=500ms".into());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (_agent, port) = common::start_agent(&args);
        common::wait_ready(port, Duration::from_secs(30));
        for probe in ["livenessProbe", "readinessProbe"] {
            let path = probe_path(c, probe);
            let (status, _) = common::http_get(port, &path).expect("probe");
            assert_eq!(status, 200, "{probe} {path}");
        }
    }
}

#[test]
fn plain_manifests_are_the_charts_output() {
    if !have_renderer() {
        return;
    }
    let k8s = repo_root().join("deploy/k8s");
    let rendered = render(&chart_dir(), &[&k8s.join("values.yaml")], &[]);
    let file = k8s.join("kepler.yaml");
    let header = "# Generated from deploy/helm/kepler with deploy/k8s/values.yaml by\n\
                  # bins/kepler/tests/helm_chart.rs; regenerate with UPDATE_MANIFESTS=1.\n";
    let expected = format!("{header}{rendered}");
    if std::env::var("UPDATE_MANIFESTS").as_deref() == Ok("1") {
        std::fs::write(&file, &expected).expect("write manifests");
    }
    let committed = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(
        committed == expected,
        "deploy/k8s/kepler.yaml differs from the chart's output; run \
         UPDATE_MANIFESTS=1 cargo test -p kepler --test helm_chart plain_manifests"
    );
    let objects = objects(&committed);
    assert!(kinds(&objects).contains(&"Namespace".to_string()));
    assert_upstream_daemonset_facts(&objects);
}

//! The Helm chart (deploy/helm/kepler), rendered by Helm's own library (deploy/helm/render.py):
//! with its defaults, with upstream Kepler's values file and with every option on, every object
//! validates against the Kubernetes schemas; the DaemonSet keeps upstream's facts; the agent
//! accepts the rendered config and flags and answers the rendered probes; deploy/k8s/ is the
//! chart's output (UPDATE_MANIFESTS=1 rewrites it).

mod common;
#[path = "helm/render.rs"]
mod render;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kepler_agent::config::Config;
use render::*;
use serde_yaml::Value;

fn upstream_values() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/helm/upstream-values.yaml")
}

/// The config the chart writes parses, with no key the agent would warn about.
fn assert_agent_accepts(config: &str) -> Config {
    let loaded = Config::from_yaml(config, Path::new("configmap"))
        .unwrap_or_else(|e| panic!("agent rejects the chart's config: {e}\n{config}"));
    assert!(
        loaded.unknown_keys.is_empty(),
        "unknown keys {:?} in\n{config}",
        loaded.unknown_keys
    );
    loaded.config
}

fn probe_path(container: &Value, probe: &str) -> String {
    container[probe]["httpGet"]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{probe} has no httpGet path: {container:?}"))
        .to_string()
}

/// Upstream's template facts, which its users' dashboards and tooling rely on.
fn assert_upstream_daemonset_facts(objects: &[Value]) {
    let c = agent_container(objects);
    let args = strings(&c["args"]);
    for arg in [
        "--config.file=/etc/kepler/config.yaml",
        "--kube.enable",
        "--kube.node-name=$(NODE_NAME)",
    ] {
        assert!(args.contains(&arg.to_string()), "{arg} not in {args:?}");
    }
    assert_eq!(c["ports"][0]["name"].as_str(), Some("http"));
    assert_eq!(c["ports"][0]["containerPort"].as_u64(), Some(28282));
    for (name, mount, host) in [
        ("sysfs", "/host/sys", "/sys"),
        ("procfs", "/host/proc", "/proc"),
    ] {
        let m = c["volumeMounts"]
            .as_sequence()
            .and_then(|v| v.iter().find(|m| m["name"].as_str() == Some(name)))
            .unwrap_or_else(|| panic!("no {name} mount"));
        assert_eq!(m["mountPath"].as_str(), Some(mount));
        assert_eq!(m["readOnly"].as_bool(), Some(true));
        let pod = &find(objects, "DaemonSet", None)["spec"]["template"]["spec"];
        let v = pod["volumes"]
            .as_sequence()
            .and_then(|v| v.iter().find(|v| v["name"].as_str() == Some(name)))
            .unwrap_or_else(|| panic!("no {name} volume"));
        assert_eq!(v["hostPath"]["path"].as_str(), Some(host));
    }
    let role = find(objects, "ClusterRole", None);
    let resources = strings(&role["rules"][0]["resources"]);
    for r in ["pods", "nodes", "nodes/proxy"] {
        assert!(
            resources.contains(&r.to_string()),
            "{r} not in {resources:?}"
        );
    }
    let name = find(objects, "DaemonSet", None)["metadata"]["name"].as_str();
    let service = find(objects, "Service", name);
    assert_eq!(service["spec"]["ports"][0]["port"].as_u64(), Some(28282));
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

const RULES: &str = "groups:\n  - name: kepler-test\n    rules:\n      - record: namespace:kepler_pod_cpu_watts:sum\n        expr: sum by (pod_namespace) (kepler_pod_cpu_watts)\n";

/// Every option of ours at once: its own namespace, named capabilities, TLS with basic auth,
/// the model server, ServiceMonitor, NetworkPolicy and PrometheusRule.
#[test]
fn every_option_renders_valid_objects() {
    if !have_renderer() {
        return;
    }
    let chart = chart_copy_with_rules(Some(RULES));
    let set = r#"{
        "namespace": {"create": true, "name": "power"},
        "daemonset": {"capabilities": {"enabled": true}},
        "tls": {"enabled": true, "cert": "CERT", "key": "KEY",
                "basicAuthUsers": {"prom": "$2y$10$abc"}},
        "modelServer": {"enabled": true},
        "serviceMonitor": {"enabled": true},
        "networkPolicy": {"enabled": true},
        "prometheusRule": {"enabled": true}
    }"#;
    let objects = objects(&render(&chart.path().join("kepler"), &[], &[set]));
    assert_eq!(
        kinds(&objects),
        [
            "ClusterRole",
            "ClusterRoleBinding",
            "ConfigMap",
            "DaemonSet",
            "Deployment",
            "Namespace",
            "NetworkPolicy",
            "PrometheusRule",
            "Secret",
            "Secret",
            "Service",
            "Service",
            "ServiceAccount",
            "ServiceMonitor"
        ]
    );
    for o in objects
        .iter()
        .filter(|o| o["kind"].as_str() != Some("Namespace"))
    {
        let cluster_wide = matches!(
            o["kind"].as_str(),
            Some("ClusterRole" | "ClusterRoleBinding")
        );
        let ns = o["metadata"]["namespace"].as_str();
        assert_eq!(ns, (!cluster_wide).then_some("power"), "{o:?}");
    }
    assert_upstream_daemonset_facts(&objects);

    let c = agent_container(&objects);
    let sc = &c["securityContext"];
    assert_eq!(sc["privileged"].as_bool(), Some(false));
    assert_eq!(strings(&sc["capabilities"]["drop"]), ["ALL"]);
    assert_eq!(
        strings(&sc["capabilities"]["add"]),
        ["BPF", "PERFMON", "SYS_PTRACE"]
    );
    assert!(
        strings(&c["args"]).contains(&"--web.config-file=/etc/kepler/web/web-config.yaml".into())
    );
    // Basic auth guards every path, so the probes check the port.
    assert_eq!(
        c["livenessProbe"]["tcpSocket"]["port"].as_str(),
        Some("http")
    );
    assert!(c["livenessProbe"]["httpGet"].is_null());

    let web = find(&objects, "Secret", Some("kepler-web-config"));
    let web: Value = serde_yaml::from_str(web["stringData"]["web-config.yaml"].as_str().unwrap())
        .expect("web config parses");
    assert_eq!(
        web["tls_server_config"]["cert_file"].as_str(),
        Some("/etc/kepler/tls/tls.crt")
    );
    assert_eq!(web["basic_auth_users"]["prom"].as_str(), Some("$2y$10$abc"));
    let tls = find(&objects, "Secret", Some("kepler-tls"));
    assert_eq!(tls["type"].as_str(), Some("kubernetes.io/tls"));
    assert_eq!(tls["data"]["tls.crt"].as_str(), Some("Q0VSVA=="));

    let ms = &find(&objects, "Deployment", None)["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(
        strings(&ms["args"]),
        ["serve", "--model-dir=/models", "--listen=:8100"]
    );
    let config = assert_agent_accepts(&agent_config(&objects));
    assert_eq!(
        config.estimator.model_server_url.as_deref(),
        Some("http://kepler-model-server.power.svc:8100")
    );
    // The agent's Service must not select the model server's pods, nor the reverse.
    let agent_svc = find(&objects, "Service", Some("kepler"));
    let ms_svc = find(&objects, "Service", Some("kepler-model-server"));
    assert_ne!(agent_svc["spec"]["selector"], ms_svc["spec"]["selector"]);

    let sm = find(&objects, "ServiceMonitor", None);
    assert_eq!(sm["spec"]["endpoints"][0]["port"].as_str(), Some("http"));
    assert_eq!(sm["spec"]["endpoints"][0]["scheme"].as_str(), Some("https"));
    let rule = find(&objects, "PrometheusRule", None);
    let file: Value = serde_yaml::from_str(RULES).expect("rules parse");
    assert_eq!(rule["spec"]["groups"], file["groups"]);
    promtool_accepts(&rule["spec"]);
}

/// The PrometheusRule's spec is a rules file Prometheus loads.
fn promtool_accepts(spec: &Value) {
    let found = std::process::Command::new("promtool")
        .arg("--version")
        .output();
    if found.is_err() {
        assert!(
            std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "promtool not installed (KEPLER_REQUIRE_TOOLS=1)"
        );
        eprintln!("SKIP promtool check: promtool not installed");
        return;
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("rules.yaml");
    std::fs::write(&file, serde_yaml::to_string(spec).expect("yaml")).expect("write rules");
    let out = std::process::Command::new("promtool")
        .args(["check", "rules"])
        .arg(&file)
        .output()
        .expect("run promtool");
    assert!(
        out.status.success(),
        "promtool: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn tls_without_basic_auth_probes_over_https() {
    if !have_renderer() {
        return;
    }
    let set = r#"{"tls": {"enabled": true, "existingSecret": "my-cert"}}"#;
    let objects = objects(&render(&chart_dir(), &[], &[set]));
    let c = agent_container(&objects);
    assert_eq!(
        c["readinessProbe"]["httpGet"]["scheme"].as_str(),
        Some("HTTPS")
    );
    assert_eq!(probe_path(c, "readinessProbe"), "/readyz");
    // The chart writes only the web config; the certificate is the user's Secret.
    assert_eq!(kinds(&objects).iter().filter(|k| *k == "Secret").count(), 1);
    let pod = &find(&objects, "DaemonSet", None)["spec"]["template"]["spec"];
    assert!(pod["volumes"].as_sequence().is_some_and(|v| v
        .iter()
        .any(|v| v["secret"]["secretName"].as_str() == Some("my-cert"))));
}

#[test]
fn incomplete_options_are_refused_with_a_reason() {
    if !have_renderer() {
        return;
    }
    // Values Helm renders but the API server would refuse are caught by the schemas.
    let err = try_render(
        &chart_dir(),
        &[],
        &[r#"{"daemonset": {"resources": {"limit": {}}}}"#],
    )
    .expect_err("a misspelt resources key");
    assert!(
        err.contains("DaemonSet/kepler") && err.contains("'limit'"),
        "{err}"
    );
    let err = try_render(&chart_dir(), &[], &[r#"{"tls": {"enabled": true}}"#])
        .expect_err("TLS without a certificate");
    assert!(err.contains("tls.existingSecret"), "{err}");
    let chart = chart_copy_with_rules(None);
    let err = try_render(
        &chart.path().join("kepler"),
        &[],
        &[r#"{"prometheusRule": {"enabled": true}}"#],
    )
    .expect_err("PrometheusRule without rules");
    assert!(err.contains("files/recording-rules.yaml"), "{err}");
    let chart = chart_copy_with_rules(Some("groups: [unclosed\n"));
    let err = try_render(
        &chart.path().join("kepler"),
        &[],
        &[r#"{"prometheusRule": {"enabled": true}}"#],
    )
    .expect_err("PrometheusRule with broken rules");
    assert!(err.contains("not YAML"), "{err}");
}

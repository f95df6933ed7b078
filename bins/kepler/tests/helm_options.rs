//! The chart's options of our own, rendered by Helm's library and schema-validated: its own
//! namespace, named capabilities, TLS (with and without basic auth), the model server,
//! ServiceMonitor, NetworkPolicy, PrometheusRule; and the refusals of incomplete options.

#[path = "helm/render.rs"]
mod render;

use render::*;
use serde_yaml::Value;

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

/// The images the chart runs: each Containerfile builds the package whose binary the chart's
/// container command names, installs it at that path, and copies only paths that exist.
#[test]
fn containerfiles_install_what_the_chart_runs() {
    if !have_renderer() {
        return;
    }
    let objects = objects(&render(
        &chart_dir(),
        &[],
        &[r#"{"modelServer": {"enabled": true}}"#],
    ));
    let agent = strings(&agent_container(&objects)["command"]);
    let ms = &find(&objects, "Deployment", None)["spec"]["template"]["spec"]["containers"][0];
    let server = strings(&ms["command"]);
    for (file, command, package) in [
        ("Containerfile.kepler", &agent, "kepler"),
        ("Containerfile.model-server", &server, "kepler-model-server"),
    ] {
        let text = std::fs::read_to_string(repo_root().join("deploy").join(file)).expect(file);
        assert_eq!(command.len(), 1, "{command:?}");
        let binary = &command[0];
        assert!(
            text.contains(&format!("cargo build --release --locked -p {package}")),
            "{file} does not build {package}"
        );
        let manifest = repo_root().join(format!("bins/{package}/Cargo.toml"));
        let cargo = std::fs::read_to_string(&manifest).expect("package manifest");
        assert!(
            cargo.contains(&format!("name = \"{package}\"")),
            "{manifest:?}"
        );
        assert!(
            text.contains(&format!("/out{binary} {binary}")),
            "{file} does not install {binary}"
        );
        for line in text
            .lines()
            .filter(|l| l.starts_with("COPY ") && !l.contains("--from"))
        {
            let words: Vec<&str> = line.split_whitespace().collect();
            for source in &words[1..words.len() - 1] {
                assert!(
                    repo_root().join(source).exists(),
                    "{file}: {source} missing"
                );
            }
        }
    }
}

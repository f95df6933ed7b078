//! Rendering the chart for tests: deploy/helm/render.py (Helm's own library, from the
//! helm-sdkpy wheel) in the venv that scripts/setup.sh makes, with schema validation.

// Each test binary that includes this module uses part of it.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Command;

use kepler_agent::config::Config;
use serde_yaml::Value;

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/helm/kepler")
}

/// The Kubernetes version whose schemas every object must satisfy.
pub const KUBE_VERSION: &str = "1.31.0";

fn python() -> PathBuf {
    repo_root().join(".venv-helm/bin/python")
}

/// Whether the renderer's venv exists; otherwise says why (and fails under
/// KEPLER_REQUIRE_TOOLS=1, as CI sets).
pub fn have_renderer() -> bool {
    if python().exists() {
        return true;
    }
    let reason = "SKIP: .venv-helm missing (bash scripts/setup.sh makes it)";
    assert!(
        std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{reason} (KEPLER_REQUIRE_TOOLS=1)"
    );
    eprintln!("{reason}");
    false
}

/// Renders `chart` with the values files and JSON overrides, validating every object.
/// Err carries the renderer's stderr (Helm's refusal or the invalid objects).
pub fn try_render(chart: &Path, files: &[&Path], set: &[&str]) -> Result<String, String> {
    let mut cmd = Command::new(python());
    cmd.arg(repo_root().join("deploy/helm/render.py"))
        .arg(chart)
        .args(["--validate", KUBE_VERSION, "--lint"]);
    for f in files {
        cmd.arg("-f").arg(f);
    }
    for s in set {
        cmd.args(["--set-json", s]);
    }
    let out = cmd.output().expect("run render.py");
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if out.status.success() {
        Ok(String::from_utf8(out.stdout).expect("utf-8 manifest"))
    } else {
        Err(stderr)
    }
}

pub fn render(chart: &Path, files: &[&Path], set: &[&str]) -> String {
    try_render(chart, files, set).unwrap_or_else(|e| panic!("chart did not render: {e}"))
}

/// The manifest's objects.
pub fn objects(manifest: &str) -> Vec<Value> {
    serde_yaml::Deserializer::from_str(manifest)
        .map(|d| serde::Deserialize::deserialize(d).expect("rendered YAML parses"))
        .filter(|v: &Value| !v.is_null())
        .collect()
}

/// The one object of this kind (and name, when given).
pub fn find<'a>(objects: &'a [Value], kind: &str, name: Option<&str>) -> &'a Value {
    let found: Vec<&Value> = objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some(kind))
        .filter(|o| name.is_none() || o["metadata"]["name"].as_str() == name)
        .collect();
    assert_eq!(found.len(), 1, "{kind} {name:?}: {found:?}");
    found[0]
}

pub fn kinds(objects: &[Value]) -> Vec<String> {
    let mut kinds: Vec<String> = objects
        .iter()
        .map(|o| o["kind"].as_str().unwrap_or("?").to_string())
        .collect();
    kinds.sort();
    kinds
}

pub fn strings(v: &Value) -> Vec<String> {
    v.as_sequence()
        .map(|s| {
            s.iter()
                .filter_map(|x| x.as_str().map(String::from))
                .collect()
        })
        .unwrap_or_default()
}

/// The agent container of the DaemonSet.
pub fn agent_container(objects: &[Value]) -> &Value {
    &find(objects, "DaemonSet", None)["spec"]["template"]["spec"]["containers"][0]
}

/// The ConfigMap's config.yaml.
pub fn agent_config(objects: &[Value]) -> String {
    find(objects, "ConfigMap", None)["data"]["config.yaml"]
        .as_str()
        .expect("config.yaml in the ConfigMap")
        .to_string()
}

/// A copy of the chart whose files/recording-rules.yaml is `rules` (the real file belongs to
/// the rules' owner; these tests only need one that parses).
pub fn chart_copy_with_rules(rules: Option<&str>) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    copy_dir(&chart_dir(), &dir.path().join("kepler"));
    let file = dir.path().join("kepler/files/recording-rules.yaml");
    match rules {
        Some(text) => {
            std::fs::create_dir_all(file.parent().expect("parent")).expect("mkdir files");
            std::fs::write(&file, text).expect("write rules");
        }
        None => {
            let _ = std::fs::remove_file(&file);
        }
    }
    dir
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read chart") {
        let entry = entry.expect("entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("type").is_dir() {
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy");
        }
    }
}

/// The config the chart writes parses, with no key the agent would warn about.
pub fn assert_agent_accepts(config: &str) -> Config {
    let loaded = Config::from_yaml(config, Path::new("configmap"))
        .unwrap_or_else(|e| panic!("agent rejects the chart's config: {e}\n{config}"));
    assert!(
        loaded.unknown_keys.is_empty(),
        "unknown keys {:?} in\n{config}",
        loaded.unknown_keys
    );
    loaded.config
}

pub fn probe_path(container: &Value, probe: &str) -> String {
    container[probe]["httpGet"]["path"]
        .as_str()
        .unwrap_or_else(|| panic!("{probe} has no httpGet path: {container:?}"))
        .to_string()
}

/// Upstream's template facts, which its users' dashboards and tooling rely on.
pub fn assert_upstream_daemonset_facts(objects: &[Value]) {
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

//! The real agent started with upstream Kepler's own published config files (tests/upstream/)
//! on a simulated powercap tree: it starts, serves /metrics with node power, and answers the
//! probes; with `exporter.prometheus.enabled: false` it keeps the probes and drops /metrics.

mod common;

use std::path::Path;
use std::time::Duration;

use common::*;

const UPSTREAM_FILES: [&str; 3] = [
    "hack-config.yaml",
    "helm-values-config.yaml",
    "k8s-configmap-config.yaml",
];

fn upstream_file(name: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/upstream")
        .join(name)
}

#[test]
fn agent_serves_with_each_upstream_config_file() {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    for name in UPSTREAM_FILES {
        let file = upstream_file(name);
        // The files point at /host/sys (a DaemonSet's mount); flags override them, as upstream.
        let (_agent, port) = start_agent(&[
            "--config.file",
            file.to_str().unwrap(),
            "--host.sysfs",
            sysfs.path().to_str().unwrap(),
            "--host.procfs=/proc",
            "--monitor.interval=500ms",
        ]);
        wait_ready(port, Duration::from_secs(30));
        let samples = scrape(port);
        let joules = one(
            &samples,
            "kepler_node_cpu_joules_total",
            &[("zone", "package")],
        );
        assert!(joules >= 0.0, "{name}");
        // hack/config.yaml asks for both debug collectors; the chart and manifest for `go`.
        let has = |family: &str| samples.iter().any(|s| s.name == family);
        assert!(has("process_threads"), "{name}");
        assert_eq!(
            has("process_open_fds"),
            name == "hack-config.yaml",
            "{name}"
        );
        assert_eq!(
            has("process_resident_memory_bytes"),
            name == "hack-config.yaml",
            "{name}"
        );
        for probe in ["/healthz", "/readyz", "/probe/livez", "/probe/readyz"] {
            let (status, _) = http_get(port, probe).unwrap();
            assert_eq!(status, 200, "{name} {probe}");
        }
    }
}

#[test]
fn prometheus_disabled_keeps_the_probes() {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval=500ms",
        "--exporter.prometheus=false",
        "--web.config-file=",
    ]);
    wait_ready(port, Duration::from_secs(30));
    assert_eq!(http_get(port, "/healthz").unwrap().0, 200);
    assert_eq!(http_get(port, "/metrics").unwrap().0, 404);
    let (status, page) = http_get(port, "/").unwrap();
    assert_eq!(status, 200);
    assert!(!page.contains("metrics"), "{page}");
}

#[test]
fn bad_flag_exits_with_status_one() {
    for args in [
        &["--no-such-flag"][..],
        &["--kube.enable=maybe"],
        &["--metrics", "gpu"],
    ] {
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_kepler"))
            .args(args)
            .stderr(std::process::Stdio::null())
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(1), "{args:?}");
    }
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_kepler"))
        .arg("--help")
        .stdout(std::process::Stdio::null())
        .status()
        .unwrap();
    assert_eq!(status.code(), Some(0));
}

/// The first log line on `stream` of an agent started with `args`.
fn first_log_line(args: &[&str], from_stderr: bool) -> String {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let mut child = Command::new(env!("CARGO_BIN_EXE_kepler"))
        .args(args)
        .arg("--web.listen-address=127.0.0.1:0")
        .env_remove("RUST_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let line = if from_stderr {
        let mut r = std::io::BufReader::new(child.stderr.take().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        line
    } else {
        let mut r = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        r.read_line(&mut line).unwrap();
        line
    };
    let _ = child.kill();
    let _ = child.wait();
    line
}

#[test]
fn logs_go_where_upstream_writes_them_in_slog_form() {
    let sysfs = sysfs_dir();
    let sysfs = sysfs.path().to_str().unwrap();
    // JSON on stdout.
    let line = first_log_line(&["--log.format=json", "--host.sysfs", sysfs], false);
    let v: serde_json::Value =
        serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line}: {e}"));
    assert_eq!(v["level"], "INFO", "{line}");
    assert_eq!(v["msg"], "Kepler version information", "{line}");
    assert!(v["time"].as_str().unwrap().ends_with('Z'), "{line}");
    assert!(
        v["source"]["file"].as_str().unwrap().ends_with("main.rs"),
        "{line}"
    );
    // Text on stderr when the stdout exporter owns stdout.
    let line = first_log_line(&["--exporter.stdout", "--host.sysfs", sysfs], true);
    assert!(line.starts_with("time="), "{line}");
    assert!(
        line.contains(" level=INFO source=kepler/src/main.rs:")
            && line.contains(" msg=\"Kepler version information\" version="),
        "{line}"
    );
}

/// `monitor.interval: 0`: no tick without a scrape; each scrape of a stale snapshot gets a
/// new tick, and scrapes within the staleness limit share one.
#[test]
fn zero_interval_ticks_on_scrape() {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("config.yaml");
    std::fs::write(&file, "monitor:\n  interval: 0s\n  staleness: 2s\n").unwrap();
    let (_agent, port) = start_agent(&[
        "--config.file",
        file.to_str().unwrap(),
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
    ]);
    // The readiness probe asks for the tick that readiness waits for.
    wait_ready(port, Duration::from_secs(30));
    let ticks = |samples: &[Sample]| one(samples, "kepler_agent_ticks_total", &[]);
    let first = ticks(&scrape(port));
    // Left alone well past any interval, the agent does not tick by itself.
    std::thread::sleep(Duration::from_millis(2500));
    let stale = ticks(&scrape(port));
    assert_eq!(stale, first + 1.0, "a stale snapshot gets exactly one tick");
    // Within the staleness limit, scrapes share that tick.
    let again = ticks(&scrape(port));
    assert_eq!(again, stale, "fresh snapshot: no new tick");
}

/// Without Kubernetes a container is named as upstream names it: from its process environment
/// (`CONTAINER_NAME` here), read once by the usage source's classifier.
#[test]
fn container_name_from_the_process_environment() {
    if !is_root() {
        eprintln!("SKIP: needs root to place a workload in a container-like cgroup");
        return;
    }
    let Some(cgroup) = TestCgroup::create(7) else {
        eprintln!("SKIP: no writable cgroup hierarchy");
        return;
    };
    // A shell loop, not stress-ng: stress-ng's workers overwrite their environment with
    // their process titles, so it names nothing (upstream reads the same file).
    let _load = spawn_shell(&cgroup.enter_then(
        "env CONTAINER_NAME=kepler-e2e sh -c 'while :; do i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done; sleep 0.05; done'",
    ));
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval=500ms",
    ]);
    wait_ready(port, Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let samples = scrape(port);
        let named = select(
            &samples,
            "kepler_container_cpu_seconds_total",
            &[("container_id", cgroup.id.as_str())],
        );
        if let Some(s) = named.first() {
            if s.labels.get("container_name").map(String::as_str) == Some("kepler-e2e") {
                return;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no container_name=kepler-e2e on {:?}",
            named.first().map(|s| &s.labels)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

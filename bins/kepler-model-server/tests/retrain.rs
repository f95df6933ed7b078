//! The loop closed: a metered agent (simulated RAPL whose power follows the real CPU load,
//! `ebpf.exportFeatures`) is scraped by a real Prometheus; `serve --retrain` trains from it
//! and publishes while serving, and the machine's `POST /model` answer moves from the
//! published EC2 pipeline to the retrained one; an agent with no meter on that machine
//! estimates with it, in agreement with the metered agent's measurements.
//!
//! An agent already running with another model file does not switch: its refresh refuses a
//! server that chooses a different file (crates/meters/src/model/fetch.rs, `Switched`);
//! it picks up new versions of the same file only.

mod support;

use std::time::{Duration, Instant};

use kepler_testkit::tools::{have, skip};
use support::powercap::{Agent, LoadPowercap};
use support::prometheus::start_prometheus;
use support::{client, copy_tree, pipeline, serve};

/// The sum of the `kepler_node_cpu_watts{zone="package",...}` samples; `None` without any.
fn package_watts(text: &str) -> Option<f64> {
    let values: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with("kepler_node_cpu_watts{zone=\"package\""))
        .map(|l| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok()))
        .collect::<Option<_>>()?;
    (!values.is_empty()).then(|| values.iter().sum())
}

/// Mean package watts of both agents over `n` reads a second apart (the same seconds).
fn mean_watts(a: &Agent, b: &Agent, n: usize) -> (f64, f64) {
    let (mut sa, mut sb, mut k) = (0.0, 0.0, 0);
    for _ in 0..n {
        if let (Some(x), Some(y)) = (
            a.metrics().as_deref().and_then(package_watts),
            b.metrics().as_deref().and_then(package_watts),
        ) {
            sa += x;
            sb += y;
            k += 1;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    assert!(k > 0, "no readings");
    (sa / k as f64, sb / k as f64)
}

/// The model `POST /model` chooses for this machine, as an agent without a meter asks.
fn chosen(server: &support::Serving) -> String {
    let cpus = std::thread::available_parallelism().expect("cpus").get();
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").expect("cpuinfo");
    let cpu = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')))
        .map(|(_, v)| v.trim().to_string())
        .expect("model name");
    let r = client()
        .post(server.url("/model"))
        .json(&serde_json::json!({
            "metrics": ["bpf_cpu_time_ms"], "output_type": "AbsPower", "source": "rapl-sysfs",
            "node_type": -1, "weight": true,
            "machine_spec": {"processor": cpu, "cores": cpus},
        }))
        .send()
        .expect("POST /model");
    r.headers()
        .get("x-kepler-model")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

fn retrain_runs(server: &support::Serving, outcome: &str) -> f64 {
    let text = client()
        .get(server.url("/metrics"))
        .send()
        .and_then(|r| r.text())
        .unwrap_or_default();
    let series = format!("kepler_model_server_retrain_runs_total{{outcome=\"{outcome}\"}} ");
    text.lines()
        .find_map(|l| l.strip_prefix(series.as_str()))
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[test]
fn retrained_models_reach_an_agent_without_a_meter() {
    if !have("prometheus") {
        skip("SKIP: prometheus not installed (bash scripts/setup.sh installs it)");
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let sysfs =
        tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().expect("tempdir"));
    let _sim = LoadPowercap::start(sysfs.path());
    let metered = Agent::start(
        work.path(),
        "metered",
        sysfs.path(),
        "ebpf:\n  enabled: false\n  exportFeatures: true\nmonitor:\n  interval: 1s\n",
    );
    let (_prometheus, prom_port) = start_prometheus(work.path(), &[metered.port]);

    // The published EC2 models give the meterless agent a model to start with.
    let models = tempfile::tempdir().expect("tempdir");
    copy_tree(&pipeline("ec2-0.7.11"), &models.path().join("ec2-0.7.11"));
    let prom_url = format!("http://127.0.0.1:{prom_port}");
    let server = serve(
        models.path(),
        &[
            "--retrain",
            "10s",
            "--retrain.prometheus",
            &prom_url,
            "--retrain.since",
            "10m",
            "--retrain.step",
            "1s",
        ],
    );

    // Before any retrain, this machine's request is answered from the EC2 pipeline.
    assert!(
        chosen(&server).starts_with("ec2-0.7.11/"),
        "{}",
        chosen(&server)
    );

    // An agent with no meter on this machine type, started before anything is retrained,
    // so it begins with the EC2 model and must switch without a restart.
    let empty = tempfile::tempdir().expect("tempdir");
    let meterless = Agent::start(
        work.path(),
        "meterless",
        empty.path(),
        &format!(
            "estimator:\n  modelServerURL: {}\n  cacheDir: {}\n  outputType: AbsPower\n  \
             refreshPeriod: 2s\nebpf:\n  enabled: false\nmonitor:\n  interval: 1s\n",
            server.base,
            work.path().join("cache").display()
        ),
    );
    // The server trains from Prometheus and publishes once it has enough rows.
    let deadline = Instant::now() + Duration::from_secs(180);
    while retrain_runs(&server, "published") < 1.0 {
        assert!(Instant::now() < deadline, "nothing was published");
        std::thread::sleep(Duration::from_secs(1));
    }
    // Now the same request gets the retrained pipeline: the machine type's own models.
    let model = chosen(&server);
    assert!(model.starts_with("retrained-"), "{model}");
    // The running meterless agent's refresh moves to the retrained file (its pointer names
    // it), and its estimates agree with what the metered agent measures over the same seconds.
    let pointer = work.path().join("cache/server/current");
    let served_file = model.rsplit('/').next().unwrap_or_default().to_string();
    let deadline = Instant::now() + Duration::from_secs(30);
    while std::fs::read_to_string(&pointer).unwrap_or_default().trim() != served_file {
        assert!(
            Instant::now() < deadline,
            "the agent did not switch to {served_file}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let (measured, estimated) = mean_watts(&metered, &meterless, 3);
        if (estimated - measured).abs() < 0.25 * measured {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "estimate {estimated} W, measured {measured} W (model {model})"
        );
    }
    // Later runs compare against what is served: published only when better, else kept.
    let deadline = Instant::now() + Duration::from_secs(60);
    while retrain_runs(&server, "published") + retrain_runs(&server, "kept") < 2.0 {
        assert!(Instant::now() < deadline, "no second retrain");
        std::thread::sleep(Duration::from_secs(1));
    }
}

//! Models over HTTP: from a URL and from a model server (`POST /model`), cached on disk,
//! reloaded without a restart when the served model changes.

mod common;

use std::time::{Duration, Instant};

use common::*;

fn published_model() -> String {
    std::fs::read_to_string(format!(
        "{}/../../data/kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json",
        env!("CARGO_MANIFEST_DIR")
    ))
    .expect("model file in data/")
}

fn package_watts(port: u16) -> f64 {
    one(
        &scrape(port),
        "kepler_node_cpu_watts",
        &[("zone", "package")],
    )
}

fn start(dir: &std::path::Path, estimator: &str) -> (Proc, u16) {
    let config = dir.join("kepler.yaml");
    std::fs::write(
        &config,
        format!(
            "estimator:\n  outputType: AbsPower\n  refreshPeriod: 1s\n  cacheDir: {}\n{estimator}",
            dir.join("cache").display()
        ),
    )
    .unwrap();
    let sysfs = dir.join("sys");
    std::fs::create_dir_all(&sysfs).unwrap();
    start_agent(&[
        "--config.file",
        config.to_str().unwrap(),
        "--host.sysfs",
        sysfs.to_str().unwrap(),
        "--monitor.interval",
        "500ms",
    ])
}

#[test]
fn a_model_at_a_url_is_cached_and_reloaded_when_it_changes() {
    let model = published_model();
    let server = TinyServer::start(&model);
    let dir = tempfile::tempdir().unwrap();
    let url = format!(
        "http://127.0.0.1:{}/models/SGDRegressorTrainer_0.json",
        server.port
    );
    let (_agent, port) = start(dir.path(), &format!("  model: {url}\n"));
    wait_ready(port, Duration::from_secs(30));
    let before = package_watts(port);
    // The published intercept is 143.812063 W; the load on this machine adds a few watts.
    assert!((143.8..170.0).contains(&before), "{before} W");
    assert!(dir.path().join("cache/SGDRegressorTrainer_0.json").exists());

    // The server starts serving a model whose intercept is 100 W higher.
    let bias = "143.81206324506658";
    assert!(model.contains(bias), "the file's package intercept moved");
    *server.body.lock().unwrap() = model.replacen(bias, "243.81206324506658", 1);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let now = package_watts(port);
        if now > before + 90.0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "still {now} W after the model changed"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn a_model_server_chooses_the_model_for_this_machine() {
    let server = TinyServer::start(&published_model());
    let dir = tempfile::tempdir().unwrap();
    let (_agent, port) = start(
        dir.path(),
        &format!(
            "  modelServerURL: http://127.0.0.1:{}\n  trainer: SGDRegressorTrainer\n",
            server.port
        ),
    );
    wait_ready(port, Duration::from_secs(30));
    assert!(package_watts(port) >= 143.8);
    let requests = server.requests.lock().unwrap().clone();
    let (method, path, body) = &requests[0];
    assert_eq!((method.as_str(), path.as_str()), ("POST", "/model"));
    let request: serde_json::Value = serde_json::from_str(body).unwrap();
    assert_eq!(request["output_type"], "AbsPower");
    assert_eq!(request["source"], "rapl-sysfs");
    assert_eq!(request["weight"], true);
    assert_eq!(request["trainer_name"], "SGDRegressorTrainer");
    assert!(request["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .any(|m| m == "bpf_cpu_time_ms"));
    let cores = request["machine_spec"]["cores"].as_u64().unwrap();
    assert_eq!(
        cores as usize,
        std::thread::available_parallelism().unwrap().get()
    );
}

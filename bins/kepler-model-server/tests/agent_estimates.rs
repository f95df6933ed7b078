//! The loop between the two binaries: an agent on a host without meters asks the model
//! server for a model for its machine (`estimator.modelServerURL`, the legacy `POST /model`)
//! and exports estimates from the model the server chose.

mod support;

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The agent binary, built beside this one by `cargo test --workspace` (or `cargo build`).
fn agent_binary() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_kepler-model-server"));
    let agent = dir.with_file_name("kepler");
    assert!(
        agent.exists(),
        "{} is missing: build the agent first (`cargo build -p kepler`; `cargo test --workspace` does)",
        agent.display()
    );
    agent
}

struct Agent(Child);

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn metrics(port: u16) -> Option<String> {
    let response = support::client()
        .get(format!("http://127.0.0.1:{port}/metrics"))
        .send()
        .ok()?;
    response.text().ok()
}

#[test]
fn an_agent_without_meters_estimates_with_the_model_the_server_chose() {
    let db = tempfile::tempdir().unwrap();
    support::copy_tree(
        &support::pipeline("ec2-0.7.11"),
        &db.path().join("ec2-0.7.11"),
    );
    let server = support::serve(db.path(), &[]);

    let work = tempfile::tempdir().unwrap();
    let sysfs = work.path().join("sys");
    std::fs::create_dir_all(&sysfs).unwrap();
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = work.path().join("kepler.yaml");
    std::fs::write(
        &config,
        format!(
            "estimator:\n  modelServerURL: {}\n  cacheDir: {}\nebpf:\n  enabled: false\n\
             monitor:\n  interval: 1s\nweb:\n  listenAddresses: [\"127.0.0.1:{port}\"]\n",
            server.base,
            work.path().join("cache").display()
        ),
    )
    .unwrap();
    let _agent = Agent(
        Command::new(agent_binary())
            .args(["--config.file", config.to_str().unwrap()])
            .args(["--host.sysfs", sysfs.to_str().unwrap()])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start the agent"),
    );

    // The estimated zones appear once the agent has downloaded the model and ticked twice.
    let started = Instant::now();
    let text = loop {
        if let Some(text) = metrics(port).filter(|t| t.contains("kepler_node_cpu_watts{")) {
            break text;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "no estimated power from the agent"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    let info: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("kepler_node_cpu_zone_info{zone=\"package\""))
        .collect();
    assert_eq!(info.len(), 1, "{text}");
    assert!(
        info[0].contains("meter=\"model\",source=\"estimated\""),
        "{}",
        info[0]
    );
    let model = info[0]
        .split("model=\"")
        .nth(1)
        .and_then(|rest| rest.split('"').next())
        .unwrap();

    // The model is one the server lists, and the agent cached it under the server's name.
    let listing: serde_json::Value = support::client()
        .get(server.url("/models"))
        .send()
        .unwrap()
        .json()
        .unwrap();
    let served: Vec<&str> = listing["models"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|m| m["name"].as_str())
        .collect();
    assert!(served.contains(&model), "{model} not among {served:?}");
    let cached = work
        .path()
        .join("cache/server")
        .join(format!("{model}.json"));
    assert!(cached.exists(), "{} missing", cached.display());
}

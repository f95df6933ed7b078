//! A simulated RAPL host whose power follows this machine's real CPU load, and the real
//! agent binary started on it: what `collect` and the retrain loop record from.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use kepler_meters::fixtures::PowercapTree;

/// Package watts at an idle and at a fully busy node.
pub const PACKAGE_IDLE_W: f64 = 10.0;
pub const PACKAGE_BUSY_W: f64 = 50.0;

/// The simulated package power at a node busy fraction (0…1).
pub fn package_watts(busy: f64) -> f64 {
    PACKAGE_IDLE_W + (PACKAGE_BUSY_W - PACKAGE_IDLE_W) * busy
}

/// (busy, total) jiffies of the whole node from /proc/stat.
fn cpu_jiffies() -> Option<(u64, u64)> {
    let stat = std::fs::read_to_string("/proc/stat").ok()?;
    let line = stat.lines().next()?.strip_prefix("cpu ")?;
    let v: Vec<u64> = line
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    let total: u64 = v.iter().take(8).sum();
    let idle = v.get(3)? + v.get(4)?;
    Some((total - idle, total))
}

/// A powercap tree (`package-0`) whose counter advances at [`package_watts`] of the node's
/// busy fraction over the last 100 ms.
pub struct LoadPowercap {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub sysfs: PathBuf,
}

impl LoadPowercap {
    pub fn start(sysfs: &Path) -> LoadPowercap {
        let tree =
            PowercapTree::create(sysfs, &[("package-0", 1 << 40)]).expect("powercap fixture");
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut energy_uj = 0f64;
            let mut last = Instant::now();
            let mut last_jiffies = cpu_jiffies().unwrap_or((0, 1));
            let mut last_sample = Instant::now();
            let mut busy = 0.0;
            while !flag.load(Ordering::Relaxed) {
                if last_sample.elapsed() >= Duration::from_millis(100) {
                    if let Some(now) = cpu_jiffies() {
                        let (db, dt) = (now.0 - last_jiffies.0, now.1 - last_jiffies.1);
                        if dt > 0 {
                            busy = db as f64 / dt as f64;
                        }
                        last_jiffies = now;
                    }
                    last_sample = Instant::now();
                }
                let now = Instant::now();
                energy_uj += package_watts(busy) * now.duration_since(last).as_secs_f64() * 1e6;
                last = now;
                tree.set_energy(0, energy_uj as u64)
                    .expect("write energy_uj");
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        LoadPowercap {
            stop,
            thread: Some(thread),
            sysfs: sysfs.to_path_buf(),
        }
    }
}

impl Drop for LoadPowercap {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The agent binary, built beside this one by `cargo test --workspace` (or `cargo build`).
pub fn agent_binary() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_BIN_EXE_kepler-model-server"));
    let agent = dir.with_file_name("kepler");
    assert!(
        agent.exists(),
        "{} is missing: build the agent first (`cargo build -p kepler`; `cargo test --workspace` does)",
        agent.display()
    );
    agent
}

/// A running agent, killed when dropped.
pub struct Agent {
    child: Child,
    pub port: u16,
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Agent {
    /// Starts the agent with `yaml` appended to a config that serves on a fresh loopback
    /// port, with eBPF off; waits until its `/metrics` answers.
    pub fn start(work: &Path, name: &str, sysfs: &Path, yaml: &str) -> Agent {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let config = work.join(format!("{name}.yaml"));
        std::fs::write(
            &config,
            format!("web:\n  listenAddresses: [\"127.0.0.1:{port}\"]\n{yaml}"),
        )
        .expect("agent config");
        let child = Command::new(agent_binary())
            .args(["--config.file", config.to_str().expect("path")])
            .args(["--host.sysfs", sysfs.to_str().expect("path")])
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("start the agent");
        let agent = Agent { child, port };
        let started = Instant::now();
        while agent.metrics().is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the agent never answered"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        agent
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn metrics(&self) -> Option<String> {
        let r = super::client()
            .get(format!("{}/metrics", self.url()))
            .send()
            .ok()?;
        r.status().is_success().then(|| r.text().ok()).flatten()
    }
}

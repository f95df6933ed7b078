//! A real Prometheus scraping local targets every second, for the tests that train from it
//! (`serve --retrain`, `train --prometheus`), and the tool check they share.

use std::process::{Child, Command, Stdio};

pub fn have(tool: &str) -> bool {
    Command::new("sh")
        .arg("-c")
        .arg(format!("command -v {tool}"))
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Skips unless `KEPLER_REQUIRE_TOOLS=1` (CI) makes a missing tool a failure.
pub fn skip(reason: &str) {
    assert!(
        std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{reason} (KEPLER_REQUIRE_TOOLS=1)"
    );
    eprintln!("{reason}");
}

pub struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub fn start_prometheus(dir: &std::path::Path, targets: &[u16]) -> (Killed, u16) {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    let config = dir.join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: kepler\n    \
             static_configs:\n      - targets: [{}]\n",
            targets.join(", ")
        ),
    )
    .expect("prometheus config");
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("tsdb").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    (Killed(child), port)
}

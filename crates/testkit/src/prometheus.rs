//! A real Prometheus on a loopback port, scraping local targets every second, for tests of the
//! PromQL written elsewhere (dashboards, recording rules) and of training from a live server.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The running server, killed and reaped when dropped.
pub struct Prometheus(Child);

impl Prometheus {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The `prometheus.yml` of [`start_prometheus`]: scrapes and rule evaluations every second,
/// one job over every target.
pub fn config_text(targets: &[u16], rule_files: &[PathBuf]) -> String {
    let mut text = String::from("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n");
    if !rule_files.is_empty() {
        text.push_str("rule_files:\n");
        for file in rule_files {
            text.push_str(&format!("  - '{}'\n", file.display()));
        }
    }
    let targets: Vec<String> = targets.iter().map(|p| format!("'127.0.0.1:{p}'")).collect();
    text.push_str(&format!(
        "scrape_configs:\n  - job_name: kepler\n    static_configs:\n      - targets: [{}]\n",
        targets.join(", ")
    ));
    text
}

/// Starts `prometheus` with its config and TSDB under `dir`, scraping `127.0.0.1:<target>` for
/// each of `targets` and evaluating `rule_files`; returns it and the port its API listens on.
/// The caller checks [`crate::tools::have`]`("prometheus")` first. Panics when it cannot
/// start, as the test cannot go on.
pub fn start_prometheus(dir: &Path, targets: &[u16], rule_files: &[PathBuf]) -> (Prometheus, u16) {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap_or_else(|e| panic!("a free port: {e}"));
    let config = dir.join("prometheus.yml");
    std::fs::write(&config, config_text(targets, rule_files))
        .unwrap_or_else(|e| panic!("write {}: {e}", config.display()));
    let child = Command::new("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap_or_else(|e| panic!("start prometheus: {e}"));
    (Prometheus(child), port)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_target_and_no_rules() {
        assert_eq!(
            config_text(&[9102], &[]),
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\nscrape_configs:\n  \
             - job_name: kepler\n    static_configs:\n      - targets: ['127.0.0.1:9102']\n"
        );
    }

    #[test]
    fn several_targets_and_rule_files() {
        let text = config_text(
            &[1, 2],
            &[PathBuf::from("/r/a.yml"), PathBuf::from("/r/b.yml")],
        );
        assert!(
            text.contains("rule_files:\n  - '/r/a.yml'\n  - '/r/b.yml'\n"),
            "{text}"
        );
        assert!(
            text.ends_with("targets: ['127.0.0.1:1', '127.0.0.1:2']\n"),
            "{text}"
        );
    }

    #[test]
    fn promtool_accepts_the_config() {
        if !crate::tools::have("promtool") {
            crate::tools::skip("SKIP: promtool not installed (bash scripts/setup.sh installs it)");
            return;
        }
        let dir = std::env::temp_dir().join(format!("kepler-testkit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let rules = dir.join("rules.yml");
        std::fs::write(
            &rules,
            "groups:\n  - name: g\n    rules:\n      - record: r:up\n        expr: up\n",
        )
        .unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, config_text(&[9102, 9103], &[rules])).unwrap();
        let out = Command::new("promtool")
            .arg("check")
            .arg("config")
            .arg(&config)
            .output()
            .unwrap();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(
            out.status.success(),
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

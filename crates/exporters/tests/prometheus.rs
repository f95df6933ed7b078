//! End to end with a real Prometheus server: it scrapes us (asking for OpenMetrics first, as
//! every Prometheus 2.x does) and must store the series with their labels intact. This is the
//! check of the OpenMetrics output that `promtool check metrics` (text format only) cannot do.
//! Skipped, with a note, where the `prometheus` binary is missing, unless
//! `KEPLER_REQUIRE_TOOLS=1` (CI sets it) makes that a failure.

mod support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_exporters::{router, AgentState, AgentStats};
use kepler_http::Server;

struct KillOnDrop(Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

async fn query(c: &reqwest::Client, base: &str, q: &str) -> Vec<serde_json::Value> {
    let Ok(r) = c
        .get(format!("{base}/api/v1/query"))
        .query(&[("query", q)])
        .send()
        .await
    else {
        return Vec::new();
    };
    let Ok(v) = r.json::<serde_json::Value>().await else {
        return Vec::new();
    };
    v["data"]["result"].as_array().cloned().unwrap_or_default()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_ingests_our_openmetrics_output() {
    if let Err(e) = Command::new("prometheus").arg("--version").output() {
        support::skip_missing_tool(&format!(
            "end-to-end scrape test: prometheus not runnable ({e})"
        ));
        return;
    }
    let state = Arc::new(AgentState::new(support::context()));
    state.publish(
        Arc::new(support::snapshot()),
        AgentStats {
            last_tick_duration: Duration::from_millis(4),
            ticks: 5,
            ebpf: None,
        },
    );
    let server = Server::bind(&["127.0.0.1:0".to_string()], None)
        .await
        .unwrap();
    let target = server.local_addrs()[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(router(state.clone()), async {
        let _ = stopped.await;
    }));

    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: kepler\n    static_configs:\n      - targets: ['{target}']\n"
        ),
    )
    .unwrap();
    let port = free_port();
    let _prometheus = KillOnDrop(
        Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.path().join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting prometheus"),
    );

    let base = format!("http://127.0.0.1:{port}");
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    // The first scrape lands several seconds after start (DESIGN §9): poll, never sleep blindly.
    let deadline = Instant::now() + Duration::from_secs(60);
    let ticks = loop {
        let r = query(&c, &base, "kepler_agent_ticks_total").await;
        if !r.is_empty() {
            break r;
        }
        assert!(
            Instant::now() < deadline,
            "prometheus never ingested our metrics"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    assert_eq!(ticks[0]["value"][1], "5");
    assert_eq!(ticks[0]["metric"]["node_name"], "node-1");

    let up = query(&c, &base, "up").await;
    assert_eq!(up[0]["value"][1], "1", "{up:?}");

    // Escaped label values come back as the original strings.
    let odd = query(
        &c,
        &base,
        "kepler_process_cpu_joules_total{pid=\"7\",zone=\"package\"}",
    )
    .await;
    assert_eq!(odd.len(), 1, "{odd:?}");
    assert_eq!(odd[0]["metric"]["comm"], "we\"ird\\name");
    assert_eq!(odd[0]["metric"]["exe"], "/opt/new\nline");
    assert_eq!(odd[0]["value"][1], "2");

    let node = query(&c, &base, "kepler_node_cpu_joules_total{zone=\"package\"}").await;
    assert_eq!(node[0]["value"][1], "123.456789");
    assert_eq!(
        node[0]["metric"]["path"],
        "/sys/class/powercap/intel-rapl:0"
    );

    // Every sample we expose was stored: compare with the scrape's own sample count.
    let scraped = query(&c, &base, "scrape_samples_scraped").await;
    let mut out = Vec::new();
    kepler_exporters::encode(
        Some(&support::snapshot()),
        &state.context(),
        kepler_exporters::Format::OpenMetrics,
        &mut out,
    );
    let expected = support::series(std::str::from_utf8(&out).unwrap());
    assert_eq!(scraped[0]["value"][1], expected.to_string());

    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

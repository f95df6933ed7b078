//! The exporter's router served by kepler-http on real sockets, as the agent serves it: content
//! negotiation, health and readiness, the landing page, and basic auth over all of them. The
//! HTTP mechanics themselves (TLS, auth, timeouts, addresses) are tested in crates/http.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_exporters::{router, AgentState, AgentStats, Format, Readiness};
use kepler_http::{HttpError, Server, WebConfig};
use reqwest::header::{ACCEPT, CONTENT_TYPE};
use reqwest::StatusCode;
use tokio::sync::oneshot;

const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

struct Running {
    addr: SocketAddr,
    state: Arc<AgentState>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), HttpError>>,
}

impl Running {
    async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within the grace period")
            .unwrap()
            .expect("serve returns Ok after shutdown");
    }
}

async fn start(web: Option<WebConfig>) -> Running {
    let state = Arc::new(AgentState::new(support::context()));
    let server = Server::bind(&["127.0.0.1:0".to_string()], web)
        .await
        .expect("bind");
    let addr = server.local_addrs()[0];
    assert_ne!(addr.port(), 0);
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(router(state.clone()), async {
        let _ = rx.await;
    }));
    Running {
        addr,
        state,
        stop: Some(tx),
        task,
    }
}

fn publish(state: &AgentState) {
    state.publish(
        Arc::new(support::snapshot()),
        AgentStats {
            last_tick_duration: Duration::from_millis(4),
            ticks: 1,
            ebpf: None,
        },
    );
}

fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_negotiates_the_format() {
    let srv = start(None).await;
    publish(&srv.state);
    let url = format!("http://{}/metrics", srv.addr);
    let c = client();

    let r = c.get(&url).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.headers()[CONTENT_TYPE], Format::TEXT_CONTENT_TYPE);
    let text = r.text().await.unwrap();
    assert!(
        text.contains("# TYPE kepler_node_cpu_joules_total counter\n"),
        "{text}"
    );
    assert!(!text.contains("# EOF"));

    let r = c
        .get(&url)
        .header(ACCEPT, PROMETHEUS_ACCEPT)
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.headers()[CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let text = r.text().await.unwrap();
    assert!(text.contains("# TYPE kepler_node_cpu_joules counter\n"));
    assert!(text.ends_with("# EOF\n"));

    let r = c
        .get(&url)
        .header(ACCEPT, "text/plain;version=0.0.4;q=0.9,*/*;q=0.1")
        .send()
        .await
        .unwrap();
    assert_eq!(r.headers()[CONTENT_TYPE], Format::TEXT_CONTENT_TYPE);

    // Concurrent scrapes get identical, complete bodies (pooled buffers are not shared).
    let bodies = futures_join(&c, &url, 8).await;
    assert!(bodies.windows(2).all(|w| w[0] == w[1]));
    srv.stop().await;
}

async fn futures_join(c: &reqwest::Client, url: &str, n: usize) -> Vec<String> {
    let mut tasks = Vec::new();
    for _ in 0..n {
        let (c, url) = (c.clone(), url.to_string());
        tasks.push(tokio::spawn(async move {
            c.get(&url).send().await.unwrap().text().await.unwrap()
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_readiness_and_landing_page() {
    let srv = start(None).await;
    let c = client();
    let base = format!("http://{}", srv.addr);

    let r = c.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(r.text().await.unwrap(), "ok");

    let r = c.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().await.unwrap().contains("no snapshot computed yet"));

    // Before the first snapshot /metrics still answers, with build and CPU info only.
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("kepler_build_info{"));
    assert!(!text.contains("kepler_node_cpu_joules_total"));

    publish(&srv.state);
    let r = c.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let text = c
        .get(format!("{base}/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(text.contains("kepler_node_cpu_joules_total{"));

    srv.state
        .set_readiness(Readiness::not_ready("meter rapl failed"));
    let r = c.get(format!("{base}/readyz")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(r.text().await.unwrap().contains("meter rapl failed"));

    let r = c.get(format!("{base}/")).send().await.unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let html = r.text().await.unwrap();
    for link in ["href=\"metrics\"", "href=\"healthz\"", "href=\"readyz\""] {
        assert!(html.contains(link), "{html}");
    }
    assert_eq!(
        c.get(format!("{base}/nope")).send().await.unwrap().status(),
        StatusCode::NOT_FOUND
    );
    srv.stop().await;
}

fn web_config(dir: &Path, yaml: &str) -> WebConfig {
    let path = dir.join("web.yml");
    std::fs::write(&path, yaml).unwrap();
    WebConfig::load(&path).unwrap()
}

/// The agent's endpoints sit behind the web config's basic auth; how auth itself behaves
/// (wrong users and passwords, the verification cache, headers) is kepler-http's to test.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_guards_every_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = web_config(
        dir.path(),
        &format!("basic_auth_users:\n  alice: '{hash}'\n"),
    );
    let srv = start(Some(web)).await;
    publish(&srv.state);
    let c = client();
    for path in ["/metrics", "/healthz", "/readyz", "/"] {
        let url = format!("http://{}{path}", srv.addr);
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(
            r.status(),
            StatusCode::UNAUTHORIZED,
            "{path} without credentials"
        );
        let r = c
            .get(&url)
            .basic_auth("alice", Some("s3cret"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path} with credentials");
    }
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_fails_while_the_sampler_is_stalled() {
    let srv = start(None).await;
    let c = client();
    let url = format!("http://{}/healthz", srv.addr);
    srv.state.liveness().watch(Duration::from_millis(100));
    assert_eq!(c.get(&url).send().await.unwrap().status(), StatusCode::OK);
    // No tick completes: within a generous deadline the probe must turn to 503.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let r = c.get(&url).send().await.unwrap();
        if r.status() == StatusCode::SERVICE_UNAVAILABLE {
            assert!(r.text().await.unwrap().contains("sampler stalled"));
            break;
        }
        assert!(std::time::Instant::now() < deadline, "healthz stayed 200");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    srv.state.liveness().beat();
    assert_eq!(c.get(&url).send().await.unwrap().status(), StatusCode::OK);
    let probe = format!("http://{}/probe/livez", srv.addr);
    assert_eq!(c.get(&probe).send().await.unwrap().status(), StatusCode::OK);
}

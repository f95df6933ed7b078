//! A trivial router served on a loopback port, and clients for it.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use axum::routing::{get, post};
use axum::Router;
use kepler_http::{HttpError, Server, WebConfig};
use tokio::sync::oneshot;

/// The routes every test serves; none of them knows about auth or TLS.
pub const ROUTES: [(&str, &str); 3] = [("/", "home"), ("/healthz", "ok"), ("/nested/a", "a")];

pub fn router() -> Router {
    Router::new()
        .route("/", get(|| async { "home" }))
        .route("/healthz", get(|| async { "ok" }))
        .route("/echo", post(|body: String| async move { body }))
        .nest("/nested", Router::new().route("/a", get(|| async { "a" })))
}

pub struct Running {
    pub addr: SocketAddr,
    pub tls: bool,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), HttpError>>,
}

impl Running {
    pub async fn stop(mut self) {
        let _ = self.stop.take().unwrap().send(());
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within the grace period")
            .unwrap()
            .expect("serve returns Ok after shutdown");
    }
}

pub async fn start(web: Option<WebConfig>) -> Running {
    start_router(web, router()).await
}

pub async fn start_router(web: Option<WebConfig>, router: Router) -> Running {
    let server = Server::bind(&["127.0.0.1:0".to_string()], web)
        .await
        .expect("bind");
    let addr = server.local_addrs()[0];
    assert_ne!(addr.port(), 0);
    let tls = server.is_tls();
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(router, async {
        let _ = rx.await;
    }));
    Running {
        addr,
        tls,
        stop: Some(tx),
        task,
    }
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(10))
        .build()
        .unwrap()
}

/// A client whose connections come from `ip` (any 127.0.0.0/8 address is loopback on Linux),
/// so that tests can play several clients.
pub fn client_from(ip: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .local_address(ip.parse::<std::net::IpAddr>().unwrap())
        .build()
        .unwrap()
}

pub fn web_config(dir: &Path, yaml: &str) -> WebConfig {
    let path = dir.join("web.yml");
    std::fs::write(&path, yaml).unwrap();
    WebConfig::load(&path).unwrap()
}

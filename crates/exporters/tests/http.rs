//! The server on real sockets: content negotiation, health and readiness, basic auth, TLS.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_exporters::{bind, AgentState, AgentStats, Format, Readiness, WebConfig};
use reqwest::header::{ACCEPT, CONTENT_TYPE, WWW_AUTHENTICATE};
use reqwest::StatusCode;
use tokio::sync::oneshot;

const PROMETHEUS_ACCEPT: &str = "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1";

struct Running {
    addr: SocketAddr,
    state: Arc<AgentState>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<Result<(), kepler_exporters::ServeError>>,
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
    let server = bind(&["127.0.0.1:0".to_string()], web).await.expect("bind");
    let addr = server.local_addrs()[0];
    assert_ne!(addr.port(), 0);
    let (tx, rx) = oneshot::channel::<()>();
    let task = tokio::spawn(server.serve(state.clone(), async {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_closes_the_listener() {
    let srv = start(None).await;
    let addr = srv.addr;
    srv.stop().await;
    assert!(tokio::net::TcpStream::connect(addr).await.is_err());
}

/// Opens a connection with the HTTP/2 preface and an empty SETTINGS frame (prior knowledge, no
/// upgrade) and returns what the server sends first, up to one frame header.
async fn answer_to_h2_preface(addr: SocketAddr) -> Vec<u8> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
    conn.write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0\0\x04\0\0\0\0\0")
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 64];
    // The timeout only turns a hang into a failure.
    tokio::time::timeout(Duration::from_secs(30), async {
        while answer.len() < 9 {
            match conn.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => answer.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await
    .expect("the server neither answered nor closed");
    answer
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_prior_knowledge_unless_http2_is_off() {
    // Default: the plain listener serves HTTP/2 to a client that opens with its preface; the
    // server's first frame is a SETTINGS frame (type 4, not an ACK).
    let srv = start(None).await;
    let answer = answer_to_h2_preface(srv.addr).await;
    assert!(
        answer.len() >= 9 && answer[3] == 0x04 && answer[4] & 1 == 0,
        "{answer:?}"
    );
    srv.stop().await;

    // `http2: false`: HTTP/1 only; the preface is not answered with HTTP/2.
    let dir = tempfile::tempdir().unwrap();
    let web = web_config(dir.path(), "http_server_config:\n  http2: false\n");
    assert!(web.http1_only);
    let srv = start(Some(web)).await;
    let answer = answer_to_h2_preface(srv.addr).await;
    assert!(
        answer.is_empty() || answer.starts_with(b"HTTP/1.1 "),
        "{:?}",
        String::from_utf8_lossy(&answer)
    );
    // HTTP/1.1 still works.
    let r = client()
        .get(format!("http://{}/healthz", srv.addr))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    srv.stop().await;
}

fn web_config(dir: &Path, yaml: &str) -> WebConfig {
    let path = dir.join("web.yml");
    std::fs::write(&path, yaml).unwrap();
    WebConfig::load(&path).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn basic_auth_guards_every_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = web_config(
        dir.path(),
        &format!(
            "basic_auth_users:\n  alice: '{hash}'\nhttp_server_config:\n  headers:\n    X-Content-Type-Options: nosniff\n"
        ),
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
        assert!(r.headers()[WWW_AUTHENTICATE]
            .to_str()
            .unwrap()
            .starts_with("Basic"));
        assert_eq!(r.headers()["x-content-type-options"], "nosniff");

        for (user, pass) in [("alice", "wrong"), ("bob", "s3cret"), ("alice", "")] {
            let r = c
                .get(&url)
                .basic_auth(user, Some(pass))
                .send()
                .await
                .unwrap();
            assert_eq!(
                r.status(),
                StatusCode::UNAUTHORIZED,
                "{path} as {user}:{pass}"
            );
        }
        // Twice: the second check is answered from the cache.
        for _ in 0..2 {
            let r = c
                .get(&url)
                .basic_auth("alice", Some("s3cret"))
                .send()
                .await
                .unwrap();
            assert_eq!(r.status(), StatusCode::OK, "{path} with credentials");
            assert_eq!(r.headers()["x-content-type-options"], "nosniff");
        }
    }
    // A cached success must not leak to another password.
    let r = c
        .get(format!("http://{}/metrics", srv.addr))
        .basic_auth("alice", Some("s3cret2"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_bad_credentials_does_not_lock_out_a_verified_scraper() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 6).unwrap();
    let web = web_config(
        dir.path(),
        &format!("basic_auth_users:\n  alice: '{hash}'\n"),
    );
    let srv = start(Some(web)).await;
    publish(&srv.state);
    let url = format!("http://{}/metrics", srv.addr);
    // Generous: the flood is served a few bcrypt runs at a time, and this box may be loaded.
    let c = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .unwrap();
    let alice = |c: &reqwest::Client| c.get(&url).basic_auth("alice", Some("s3cret")).send();
    assert_eq!(alice(&c).await.unwrap().status(), StatusCode::OK);

    let mut flood = tokio::task::JoinSet::new();
    for i in 0..48 {
        let (c, url) = (c.clone(), url.clone());
        flood.spawn(async move {
            let user = if i % 2 == 0 { "alice" } else { "mallory" };
            c.get(&url)
                .basic_auth(user, Some(format!("guess{i}")))
                .send()
                .await
                .map(|r| r.status())
        });
    }
    // Served from the credential cache, without queueing behind the flood's bcrypt runs.
    for _ in 0..5 {
        assert_eq!(alice(&c).await.unwrap().status(), StatusCode::OK);
    }
    // Every queued request still gets its answer.
    while let Some(result) = flood.join_next().await {
        assert_eq!(result.unwrap().unwrap(), StatusCode::UNAUTHORIZED);
    }
    srv.stop().await;
}

struct Pki {
    dir: tempfile::TempDir,
    server_cert_pem: String,
    client_identity_pem: String,
}

fn pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
        KeyUsagePurpose,
    };
    let dir = tempfile::tempdir().unwrap();
    let server =
        rcgen::generate_simple_self_signed(vec!["localhost".to_string(), "127.0.0.1".to_string()])
            .unwrap();
    let server_cert_pem = server.cert.pem();
    std::fs::write(dir.path().join("tls.crt"), &server_cert_pem).unwrap();
    std::fs::write(
        dir.path().join("tls.key"),
        server.signing_key.serialize_pem(),
    )
    .unwrap();

    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.path().join("ca.crt"), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);

    let mut client_params = CertificateParams::new(vec!["scraper".to_string()]).unwrap();
    client_params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let client_key = KeyPair::generate().unwrap();
    let client_cert = client_params.signed_by(&client_key, &issuer).unwrap();
    Pki {
        dir,
        server_cert_pem,
        client_identity_pem: format!("{}{}", client_cert.pem(), client_key.serialize_pem()),
    }
}

fn tls_client(pki: &Pki, identity: bool, max_tls12: bool) -> reqwest::Client {
    let mut b = reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(Duration::from_secs(10))
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(pki.server_cert_pem.as_bytes()).unwrap(),
        );
    if identity {
        b = b.identity(reqwest::Identity::from_pem(pki.client_identity_pem.as_bytes()).unwrap());
    }
    if max_tls12 {
        b = b.max_tls_version(reqwest::tls::Version::TLS_1_2);
    }
    b.build().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_with_a_self_signed_certificate() {
    let pki = pki();
    // Relative paths resolve against the web config's directory.
    let web = web_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    );
    let srv = start(Some(web)).await;
    publish(&srv.state);
    let port = srv.addr.port();

    for host in ["127.0.0.1", "localhost"] {
        let r = tls_client(&pki, false, false)
            .get(format!("https://{host}:{port}/metrics"))
            .send()
            .await
            .unwrap_or_else(|e| panic!("https to {host}: {e:?}"));
        assert_eq!(r.status(), StatusCode::OK);
        assert!(r
            .text()
            .await
            .unwrap()
            .contains("kepler_node_cpu_joules_total{"));
    }
    // TLS 1.2 is allowed by default.
    let r = tls_client(&pki, false, true)
        .get(format!("https://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // Plain HTTP to the TLS port gets no HTTP answer.
    let plain = client()
        .get(format!("http://127.0.0.1:{port}/healthz"))
        .send()
        .await;
    assert!(plain.is_err() || plain.unwrap().status() != StatusCode::OK);
    // A client that does not trust the certificate fails.
    let untrusting = reqwest::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .build()
        .unwrap();
    assert!(untrusting
        .get(format!("https://127.0.0.1:{port}/healthz"))
        .send()
        .await
        .is_err());
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_min_version_and_client_certificates() {
    let pki = pki();
    let web = web_config(
        pki.dir.path(),
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  min_version: TLS13\n  client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt\n",
    );
    let srv = start(Some(web)).await;
    let url = format!("https://127.0.0.1:{}/healthz", srv.addr.port());

    let r = tls_client(&pki, true, false)
        .get(&url)
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    // No client certificate: rejected in the handshake.
    assert!(tls_client(&pki, false, false)
        .get(&url)
        .send()
        .await
        .is_err());
    // TLS 1.2 only: below min_version.
    assert!(tls_client(&pki, true, true).get(&url).send().await.is_err());
    srv.stop().await;
}

#[tokio::test]
async fn bad_certificates_fail_at_bind() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tls.crt"), "not a pem").unwrap();
    std::fs::write(dir.path().join("tls.key"), "not a pem").unwrap();
    let web = web_config(
        dir.path(),
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    );
    let err = bind(&["127.0.0.1:0".to_string()], Some(web))
        .await
        .unwrap_err();
    assert!(
        err.to_string().contains("tls_server_config.cert_file"),
        "{err}"
    );
}

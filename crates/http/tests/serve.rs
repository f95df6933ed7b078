//! Serving on real sockets: any router, HTTP/2 prior knowledge, graceful shutdown.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use axum::routing::get;
use axum::Router;
use reqwest::StatusCode;
use support::{client, start, start_router, web_config, ROUTES};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serves_the_routes_it_is_given() {
    let srv = start(None).await;
    assert!(!srv.tls);
    let c = client();
    for (path, body) in ROUTES {
        let r = c
            .get(format!("http://{}{path}", srv.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        assert_eq!(r.text().await.unwrap(), body, "{path}");
    }
    let r = c
        .post(format!("http://{}/echo", srv.addr))
        .body("ping")
        .send()
        .await
        .unwrap();
    assert_eq!(r.text().await.unwrap(), "ping");
    assert_eq!(
        c.get(format!("http://{}/nope", srv.addr))
            .send()
            .await
            .unwrap()
            .status(),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_lets_a_request_in_flight_finish() {
    use std::sync::{Arc, Mutex};
    use tokio::sync::{mpsc, oneshot};

    // The handler tells the test it has started, then waits until the test releases it.
    let (entered_tx, mut entered) = mpsc::channel::<()>(1);
    let (release, released) = oneshot::channel::<()>();
    let released = Arc::new(Mutex::new(Some(released)));
    let router = Router::new().route(
        "/slow",
        get(move || {
            let entered_tx = entered_tx.clone();
            let released = released.lock().unwrap().take();
            async move {
                let _ = entered_tx.send(()).await;
                if let Some(released) = released {
                    let _ = released.await;
                }
                "done"
            }
        }),
    );
    let srv = start_router(None, router).await;
    let url = format!("http://{}/slow", srv.addr);
    let request = tokio::spawn(async move { client().get(url).send().await });
    entered.recv().await.expect("the handler started");

    // Shutdown starts while the request is in its handler: once the listener refuses new
    // connections, shutdown has begun. Only then does the handler finish.
    let addr = srv.addr;
    let stopping = tokio::spawn(srv.stop());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(addr).await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the listener stayed open after shutdown"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = release.send(());
    let response = request
        .await
        .unwrap()
        .expect("the in-flight request is answered");
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(response.text().await.unwrap(), "done");
    stopping.await.unwrap();
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_listen_address_serves() {
    let server = kepler_http::Server::bind(
        &["127.0.0.1:0".to_string(), "localhost:0".to_string()],
        None,
    )
    .await
    .unwrap();
    let addrs = server.local_addrs().to_vec();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(support::router(), async {
        let _ = stopped.await;
    }));
    for addr in &addrs {
        let r = client()
            .get(format!("http://{addr}/healthz"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), StatusCode::OK, "{addr}");
    }
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_answers_429_past_the_burst() {
    let dir = tempfile::tempdir().unwrap();
    // One token an hour: the burst is all this test gets.
    let web = support::web_config(
        dir.path(),
        "rate_limit:\n  interval: 1h\n  burst: 2\nhttp_server_config:\n  headers:\n    X-Test: yes\n",
    );
    let srv = start(Some(web)).await;
    let c = client();
    let url = format!("http://{}/nope", srv.addr);
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let r = c.get(&url).send().await.unwrap();
        assert_eq!(r.headers()["x-test"], "yes");
        statuses.push(r.status());
    }
    assert_eq!(
        statuses,
        [
            StatusCode::NOT_FOUND,
            StatusCode::NOT_FOUND,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    srv.stop().await;
}

//! The slow readers: hundreds of connections request a large `/metrics` and read a
//! byte now and then. Each scrape used to encode its own copy of the body and hold it for as
//! long as its reader took (300 readers of a 7 MB body: RSS from 47 MB to 1.2 GB). Now every
//! scrape of a snapshot shares one encoded body, so memory grows by a few bodies and a little
//! per connection, however many readers there are. Served in this process, exactly as the agent
//! serves it, so that the process's own RSS is the agent's.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_exporters::{router, AgentState, AgentStats};
use kepler_http::Server;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    kb * 1024
}

fn publish(state: &AgentState, tick: u64) {
    state.publish(
        Arc::new(support::synthetic(2_500, 4)),
        AgentStats {
            last_tick_duration: Duration::from_millis(4),
            ticks: tick,
            ebpf: None,
        },
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_readers_share_one_body_per_snapshot() {
    const READERS: usize = 300;
    let state = Arc::new(AgentState::new(support::context()));
    publish(&state, 1);
    let server = Server::bind(&["127.0.0.1:0".to_string()], None)
        .await
        .unwrap();
    assert!(
        server.max_connections() > READERS,
        "this test needs {READERS} connections"
    );
    let addr = server.local_addrs()[0];
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve(router(state.clone()), async {
        let _ = stopped.await;
    }));

    // One complete scrape: the body's size, and the warm-up of every buffer on the way.
    let body = reqwest::get(format!("http://{addr}/metrics"))
        .await
        .unwrap()
        .bytes()
        .await
        .unwrap();
    let body_len = body.len() as u64;
    drop(body);
    assert!(body_len > 2_000_000, "the body is only {body_len} bytes");
    let baseline = rss_bytes();

    // Readers with a tiny receive window, so that almost all of each response stays on the
    // server's side, and a tick loop publishing a new snapshot every second meanwhile.
    let mut readers = Vec::new();
    for _ in 0..READERS {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.set_recv_buffer_size(4096).unwrap();
        let mut conn = socket.connect(addr).await.unwrap();
        conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: k\r\n\r\n")
            .await
            .unwrap();
        readers.push(conn);
    }
    let ticking = {
        let state = state.clone();
        tokio::spawn(async move {
            for tick in 2.. {
                tokio::time::sleep(Duration::from_secs(1)).await;
                publish(&state, tick);
            }
        })
    };
    let mut peak = baseline;
    let started = Instant::now();
    let mut byte = [0u8; 1];
    while started.elapsed() < Duration::from_secs(10) {
        for conn in &mut readers {
            let _ = tokio::time::timeout(Duration::from_millis(1), conn.read(&mut byte)).await;
        }
        peak = peak.max(rss_bytes());
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    ticking.abort();
    let growth = peak.saturating_sub(baseline);
    // A copy per reader would be READERS × the body (600 MB and more); sharing costs the
    // bodies of the snapshots published meanwhile and some kilobytes per connection.
    let limit = 16 * body_len + 32 * 1024 * 1024;
    assert!(
        growth < limit,
        "RSS grew by {} MB with {READERS} slow readers of a {} MB body (limit {} MB)",
        growth >> 20,
        body_len >> 20,
        limit >> 20
    );
    eprintln!(
        "RSS {} MB → peak {} MB with {READERS} slow readers of a {:.1} MB body",
        baseline >> 20,
        peak >> 20,
        body_len as f64 / 1e6
    );
    drop(readers);
    let _ = stop.send(());
    serving.await.unwrap().unwrap();
}

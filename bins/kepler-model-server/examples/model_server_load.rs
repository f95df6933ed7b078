//! Load client for `bench/model_server_latency.sh`: C concurrent keep-alive connections each
//! sending the legacy `POST /model` request in a loop for D seconds; prints the latency
//! percentiles and the throughput. Plain HTTP/1.1 over tokio sockets, so that the client's
//! own cost per request stays far below the server's.
//!
//!   model_server_load ADDR CONCURRENCY SECONDS [BODY_JSON]

use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

const DEFAULT_BODY: &str = r#"{"metrics":["bpf_cpu_time_ms"],"output_type":"AbsPower","source":"rapl-sysfs","weight":true,"machine_spec":{"processor":"intel_xeon_platinum_8259cl","cores":96,"chips":2,"memory":373,"frequency":3500}}"#;

/// Reads one response; returns its status. Bodies are `Content-Length` framed (the server
/// never chunks these answers).
async fn read_response(conn: &mut TcpStream, buf: &mut Vec<u8>) -> std::io::Result<u16> {
    buf.clear();
    let mut chunk = [0u8; 16384];
    let header_end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buf[..header_end]).to_ascii_lowercase();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0);
    while buf.len() < header_end + length {
        let n = conn.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok(status)
}

async fn client(addr: String, body: String, until: Instant) -> (Vec<Duration>, u64) {
    let mut latencies = Vec::new();
    let mut errors = 0u64;
    let request = format!(
        "POST /model HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let mut buf = Vec::with_capacity(65536);
    'connect: while Instant::now() < until {
        let Ok(mut conn) = TcpStream::connect(&addr).await else {
            errors += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let _ = conn.set_nodelay(true);
        while Instant::now() < until {
            let sent = Instant::now();
            if conn.write_all(request.as_bytes()).await.is_err() {
                errors += 1;
                continue 'connect;
            }
            match read_response(&mut conn, &mut buf).await {
                Ok(200) => latencies.push(sent.elapsed()),
                Ok(_) => errors += 1,
                Err(_) => {
                    errors += 1;
                    continue 'connect;
                }
            }
        }
    }
    (latencies, errors)
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).copied().unwrap_or_default()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: model_server_load ADDR CONCURRENCY SECONDS [BODY_JSON]");
        std::process::exit(2);
    }
    let addr = args[1].clone();
    let concurrency: usize = args[2].parse().expect("CONCURRENCY");
    let secs: u64 = args[3].parse().expect("SECONDS");
    let body = args
        .get(4)
        .cloned()
        .unwrap_or_else(|| DEFAULT_BODY.to_string());
    let started = Instant::now();
    let until = started + Duration::from_secs(secs);
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| tokio::spawn(client(addr.clone(), body.clone(), until)))
        .collect();
    let mut all = Vec::new();
    let mut errors = 0;
    for t in tasks {
        let (l, e) = t.await.expect("client task");
        all.extend(l);
        errors += e;
    }
    let wall = started.elapsed().as_secs_f64();
    all.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1e3;
    println!(
        "requests {} errors {errors} throughput {:.0}/s p50 {:.2} ms p90 {:.2} ms p99 {:.2} ms max {:.2} ms",
        all.len(),
        all.len() as f64 / wall,
        ms(percentile(&all, 0.50)),
        ms(percentile(&all, 0.90)),
        ms(percentile(&all, 0.99)),
        ms(all.last().copied().unwrap_or_default()),
    );
}

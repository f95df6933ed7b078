//! `debug.pprof.enabled` / `--debug.pprof`: the real agent serves CPU and heap profiles at
//! upstream's `/debug/pprof/` paths, gzipped pprof protobuf as Go serves them, behind the same
//! basic auth as `/metrics`; without the option the paths are not served.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use common::*;
use pprof::protos::{Message, Profile};

/// A GET with optional basic auth; returns (status, body bytes).
fn get(port: u16, path: &str, auth: Option<(&str, &str)>) -> (u16, Vec<u8>) {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    get_on(stream, path, auth)
}

fn get_on(mut stream: TcpStream, path: &str, auth: Option<(&str, &str)>) -> (u16, Vec<u8>) {
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .expect("timeout");
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some((user, password)) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes()).expect("send");
    let mut response = Vec::new();
    stream.read_to_end(&mut response).expect("read");
    let split = response
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a header");
    let head = String::from_utf8_lossy(&response[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let mut body = response[split + 4..].to_vec();
    if head.contains("transfer-encoding: chunked") {
        body = dechunk(&body);
    }
    (status, body)
}

fn dechunk(mut data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = data.windows(2).position(|w| w == b"\r\n") {
        let size = std::str::from_utf8(&data[..end])
            .ok()
            .and_then(|s| usize::from_str_radix(s.trim(), 16).ok())
            .unwrap_or(0);
        let rest = &data[end + 2..];
        if size == 0 || rest.len() < size {
            break;
        }
        out.extend_from_slice(&rest[..size]);
        data = rest[size..].strip_prefix(b"\r\n").unwrap_or(&rest[size..]);
    }
    out
}

/// Gunzips and decodes a pprof profile; returns it with its sample types as (type, unit).
fn decode(body: &[u8]) -> (Profile, Vec<(String, String)>) {
    assert_eq!(
        &body[..2],
        [0x1f, 0x8b],
        "not gzip: {:?}",
        &body[..body.len().min(64)]
    );
    let mut raw = Vec::new();
    flate2::read::GzDecoder::new(body)
        .read_to_end(&mut raw)
        .expect("gunzip");
    let profile = Profile::decode(raw.as_slice()).expect("a pprof Profile");
    let string = |i: i64| profile.string_table[i as usize].clone();
    let types = profile
        .sample_type
        .iter()
        .map(|t| (string(t.ty), string(t.unit)))
        .collect();
    (profile, types)
}

fn start(extra: &[&str]) -> (Proc, u16, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("kepler.yaml");
    std::fs::write(
        &config,
        "dev:\n  fake-cpu-meter:\n    enabled: true\nmonitor:\n  interval: 100ms\n",
    )
    .unwrap();
    let mut args = vec!["--config.file", config.to_str().unwrap()];
    args.extend_from_slice(extra);
    let (agent, port) = start_agent(&args);
    (agent, port, dir)
}

#[test]
fn profiles_are_not_served_unless_asked_for() {
    let (_agent, port, _dir) = start(&[]);
    wait_ready(port, Duration::from_secs(30));
    for path in [
        "/debug/pprof/",
        "/debug/pprof/profile?seconds=1",
        "/debug/pprof/heap",
    ] {
        assert_eq!(get(port, path, None).0, 404, "{path}");
    }
}

#[test]
fn cpu_and_heap_profiles_behind_basic_auth() {
    let dir = tempfile::tempdir().unwrap();
    let web = dir.path().join("web.yaml");
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    std::fs::write(&web, format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
    let (_agent, port, _config) =
        start(&["--debug.pprof", "--web.config-file", web.to_str().unwrap()]);
    let auth = Some(("alice", "s3cret"));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    // Connections are refused until the agent listens.
    while TcpStream::connect(("127.0.0.1", port)).map_or(0, |s| get_on(s, "/readyz", auth).0) != 200
    {
        assert!(std::time::Instant::now() < deadline, "agent not ready");
        std::thread::sleep(Duration::from_millis(200));
    }

    for path in [
        "/debug/pprof/",
        "/debug/pprof/profile?seconds=1",
        "/debug/pprof/heap",
    ] {
        assert_eq!(get(port, path, None).0, 401, "{path} without credentials");
        assert_eq!(
            get(port, path, Some(("alice", "wrong"))).0,
            401,
            "{path} with a wrong password"
        );
    }

    let (status, index) = get(port, "/debug/pprof/", auth);
    assert_eq!(status, 200);
    let index = String::from_utf8_lossy(&index);
    assert!(
        index.contains("profile") && index.contains("heap"),
        "{index}"
    );

    assert_eq!(get(port, "/debug/pprof/profile?seconds=0", auth).0, 400);

    // Scrapes keep the agent busy while it profiles itself, so the profile has samples.
    let stop = Arc::new(AtomicBool::new(false));
    let load = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let _ = get(port, "/metrics", Some(("alice", "s3cret")));
            }
        })
    };
    let (status, body) = get(port, "/debug/pprof/profile?seconds=3", auth);
    stop.store(true, Ordering::Relaxed);
    load.join().unwrap();
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (cpu, types) = decode(&body);
    assert!(
        types.contains(&("cpu".to_string(), "nanoseconds".to_string())),
        "{types:?}"
    );
    assert!(
        !cpu.sample.is_empty(),
        "a CPU profile of a busy agent without samples"
    );
    assert!(
        cpu.duration_nanos >= 2_000_000_000,
        "{}",
        cpu.duration_nanos
    );

    let (status, body) = get(port, "/debug/pprof/heap", auth);
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let (_heap, types) = decode(&body);
    assert!(
        types.contains(&("inuse_space".to_string(), "bytes".to_string())),
        "{types:?}"
    );
}

//! The agent under hostile HTTP clients, as the issue reproduced it: with the usual small
//! open-file limit, a thousand idle connections took every descriptor and the sampler could no
//! longer open `/proc/stat`. The connection cap (derived from RLIMIT_NOFILE) keeps descriptors
//! for the sampler; connections beyond it wait in the listen backlog.

mod common;

use std::net::TcpStream;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, one, parse_metrics, sysfs_dir, wait_ready, PowercapSim, Proc};

/// The agent with its open-file limit (soft and hard) set to `nofile`.
fn start_agent_with_nofile(sysfs: &std::path::Path, nofile: u64) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_kepler"));
    cmd.arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args([
            "--host.sysfs",
            sysfs.to_str().unwrap(),
            "--monitor.interval",
            "500ms",
        ])
        .env("RUST_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit());
    // SAFETY: setrlimit is async-signal-safe and touches only the child's limits.
    unsafe {
        cmd.pre_exec(move || {
            let lim = libc::rlimit {
                rlim_cur: nofile,
                rlim_max: nofile,
            };
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    (Proc(cmd.spawn().expect("start kepler")), port)
}

/// Raises this test process's own soft open-file limit, so that it can hold the connections.
fn raise_own_nofile(want: u64) {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit/setrlimit read and write the struct we own.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim), 0);
        if lim.rlim_cur < want {
            lim.rlim_cur = want.min(lim.rlim_max);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &lim), 0);
        }
    }
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

fn ticks(port: u16) -> f64 {
    let (status, body) = common::http_get(port, "/metrics").expect("scrape");
    assert_eq!(status, 200);
    one(&parse_metrics(&body), "kepler_agent_ticks_total", &[])
}

#[test]
fn idle_connections_cannot_take_the_samplers_descriptors() {
    const NOFILE: u64 = 256;
    const IDLE: usize = 400;
    raise_own_nofile(4096);
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    let (agent, port) = start_agent_with_nofile(sysfs.path(), NOFILE);
    wait_ready(port, Duration::from_secs(60));
    let before = ticks(port);
    let t0 = Instant::now();

    // Connections that never send a request, more than the agent has descriptors. Connecting
    // succeeds even past the cap: the kernel completes handshakes into the listen backlog, and
    // past that the connect times out, which is fine too.
    let mut idle = Vec::new();
    for _ in 0..IDLE {
        let addr = ("127.0.0.1", port);
        if let Ok(addr) = std::net::ToSocketAddrs::to_socket_addrs(&addr).map(|mut a| a.next()) {
            if let Ok(c) = TcpStream::connect_timeout(&addr.unwrap(), Duration::from_millis(50)) {
                idle.push(c);
            }
        }
    }
    // Hold them for several ticks; the agent's descriptors stay well below its limit.
    let mut most = 0;
    while t0.elapsed() < Duration::from_secs(8) {
        most = most.max(open_fds(agent.pid()));
        std::thread::sleep(Duration::from_millis(250));
    }
    assert!(
        (most as u64) < NOFILE * 3 / 4,
        "the agent had {most} descriptors open of its {NOFILE}"
    );
    let held = t0.elapsed();
    drop(idle);

    // The sampler kept ticking meanwhile (every 500 ms; at least a third of them on a busy
    // machine). Scraping waits for a free connection slot, which the closes above give.
    let deadline = Instant::now() + Duration::from_secs(60);
    let after = loop {
        match common::http_get(port, "/metrics") {
            Ok((200, body)) => break one(&parse_metrics(&body), "kepler_agent_ticks_total", &[]),
            _ => {
                assert!(
                    Instant::now() < deadline,
                    "no scrape after the idle connections closed"
                );
                std::thread::sleep(Duration::from_millis(200));
            }
        }
    };
    // Connections beyond the cap waited for a slot, and the agent counted them.
    let refused = one(
        &parse_metrics(&common::http_get(port, "/metrics").expect("scrape").1),
        "kepler_agent_http_refused_total",
        &[("reason", "connection_limit")],
    );
    assert!(
        refused >= 1.0,
        "{refused} connections counted as waiting at the cap"
    );
    let expected = held.as_secs_f64() / 0.5;
    assert!(
        after - before >= expected / 3.0,
        "{} ticks in {held:?} while idle connections were held (expected about {expected:.0})",
        after - before
    );
}

/// A GET with basic auth when `auth` is given; returns (status, body).
fn get_as(port: u16, path: &str, auth: Option<(&str, &str)>) -> std::io::Result<(u16, String)> {
    use base64::Engine as _;
    use std::io::{Read, Write};
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    stream.set_read_timeout(Some(Duration::from_secs(60)))?;
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n");
    if let Some((user, password)) = auth {
        let token = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        request.push_str(&format!("Authorization: Basic {token}\r\n"));
    }
    request.push_str("\r\n");
    stream.write_all(request.as_bytes())?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let status = response
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((status, body))
}

#[test]
fn requests_refused_by_basic_auth_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let hash = bcrypt::hash("s3cret", 4).unwrap();
    let web = dir.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  alice: '{hash}'\n")).unwrap();
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 30.0, 1 << 40)]);
    let (_agent, port) = common::start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--web.config-file",
        web.to_str().unwrap(),
    ]);
    let alice = Some(("alice", "s3cret"));
    let deadline = Instant::now() + Duration::from_secs(60);
    while !matches!(get_as(port, "/healthz", alice), Ok((200, _))) {
        assert!(Instant::now() < deadline, "the agent never served");
        std::thread::sleep(Duration::from_millis(200));
    }
    let refused = [None, Some(("alice", "wrong")), Some(("bob", "s3cret"))];
    for auth in refused {
        assert_eq!(get_as(port, "/metrics", auth).unwrap().0, 401, "{auth:?}");
    }
    let (status, body) = get_as(port, "/metrics", alice).unwrap();
    assert_eq!(status, 200);
    // The body may come chunked; the counter's line is whole within a chunk.
    let line = body
        .lines()
        .find(|l| l.starts_with("kepler_agent_http_refused_total{reason=\"unauthorized\""))
        .unwrap_or_else(|| panic!("no unauthorized counter in\n{body}"));
    assert!(line.ends_with(" 3"), "{line}");
}

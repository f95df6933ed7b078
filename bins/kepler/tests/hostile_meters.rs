//! The real agent against lying or failing hardware files and a closed stdout: one socket's
//! `energy_uj` turning to garbage leaves the other zones counting; a counter read as 2^64−1
//! never enters the joules; `kepler probe | true` and an interval past the clock's range end
//! cleanly, without a panic.

mod common;

use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use kepler_meters::fixtures::PowercapTree;

const MAX: u64 = 262_143_328_850;
const WATTS: [f64; 3] = [40.0, 40.0, 8.0];

/// What the simulation writes into socket 1's counter.
const GOOD: u8 = 0;
const GARBAGE: u8 = 1;
const ALL_ONES: u8 = 2;

/// package-0, package-1 and dram counters at fixed watts; socket 1 as `mode` says.
fn simulate(sysfs: &std::path::Path, mode: Arc<AtomicU8>) -> Arc<AtomicU8> {
    let tree = PowercapTree::create(
        sysfs,
        &[("package-0", MAX), ("package-1", MAX), ("dram", MAX)],
    )
    .expect("powercap fixture");
    let stop = Arc::new(AtomicU8::new(0));
    let flag = stop.clone();
    let start = Instant::now();
    std::thread::spawn(move || {
        while flag.load(Ordering::Relaxed) == 0 {
            let t = start.elapsed().as_secs_f64();
            for (i, w) in WATTS.iter().enumerate() {
                let uj = (w * t * 1e6) as u64;
                let file = tree.zone_dir(i).expect("zone").join("energy_uj");
                match (i, mode.load(Ordering::Relaxed)) {
                    (1, GARBAGE) => std::fs::write(&file, "garbage\n").expect("write"),
                    (1, ALL_ONES) => tree.set_energy(i, u64::MAX).expect("write"),
                    _ => tree.set_energy(i, uj).expect("write"),
                }
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    });
    stop
}

fn joules(port: u16, zone: &str) -> f64 {
    one(
        &scrape(port),
        "kepler_node_cpu_joules_total",
        &[("zone", zone)],
    )
}

fn rapl_errors(port: u16) -> f64 {
    one(
        &scrape(port),
        "kepler_agent_component_errors_total",
        &[("component", "meter"), ("name", "rapl")],
    )
}

/// Polls until `dram` joules grew by `by` since `from`; fails after a generous deadline.
fn wait_dram_growth(port: u16, from: f64, by: f64) -> f64 {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let now = joules(port, "dram");
        if now >= from + by {
            return now;
        }
        assert!(
            Instant::now() < deadline,
            "dram stuck at {now} J (from {from} J)"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}

#[test]
fn a_broken_socket_leaves_the_other_zones_counting_and_lies_never_enter_the_counters() {
    let sysfs = sysfs_dir();
    let mode = Arc::new(AtomicU8::new(GOOD));
    let stop = simulate(sysfs.path(), mode.clone());
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval",
        "500ms",
    ]);
    wait_ready(port, Duration::from_secs(30));
    wait_dram_growth(port, 0.0, 1.0);

    for bad in [GARBAGE, ALL_ONES] {
        let errors = rapl_errors(port);
        let dram = joules(port, "dram");
        let package = joules(port, "package");
        mode.store(bad, Ordering::Relaxed);
        let started = Instant::now();
        // dram goes on: 8 W for at least 2 s.
        wait_dram_growth(port, dram, 16.0);
        let elapsed = started.elapsed().as_secs_f64() + 1.0;
        let package_after = joules(port, "package");
        // The package cannot have gained more than both sockets draw over the time.
        assert!(
            package_after - package <= 80.0 * elapsed,
            "package jumped {package} -> {package_after} J in {elapsed:.1} s"
        );
        assert!(rapl_errors(port) > errors, "broken socket not counted");
        mode.store(GOOD, Ordering::Relaxed);
        // The package zone comes back once socket 1 reads again.
        let deadline = Instant::now() + Duration::from_secs(60);
        while joules(port, "package") < package_after + 40.0 {
            assert!(Instant::now() < deadline, "package never recovered");
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    stop.store(1, Ordering::Relaxed);
}

#[test]
fn probe_into_a_closed_pipe_exits_cleanly() {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let sysfs = sysfs_dir();
    let out = Command::new(env!("CARGO_BIN_EXE_kepler"))
        .args(["probe", "--host.sysfs", sysfs.path().to_str().unwrap()])
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
}

#[test]
fn an_interval_past_the_clock_is_refused_not_a_panic() {
    let out = Command::new(env!("CARGO_BIN_EXE_kepler"))
        .args([
            "--monitor.interval",
            "500000000000y",
            "--web.listen-address",
            "127.0.0.1:0",
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!text.contains("panicked"), "{text}");
    assert!(!out.status.success());
    assert!(text.contains("monitor.interval"), "{text}");
}

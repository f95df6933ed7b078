//! Clients: the checker that verifies every tick's invariants, the paced, fast and slow
//! scrapers.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;
use crate::sim::*;
use crate::Plan;

#[derive(Default)]
pub(crate) struct Checks {
    pub(crate) ticks_checked: u64,
    pub(crate) scrapes: u64,
    pub(crate) failures: Vec<String>,
    /// Latency of the paced (once a second) scraper, ms.
    pub(crate) paced_ms: Vec<f64>,
    pub(crate) fast_scrapes: u64,
    pub(crate) fast_max_ms: f64,
    pub(crate) slow_bytes: u64,
}

/// Per-zone values of the previous checked tick, to see counters never decrease.
#[derive(Default)]
pub(crate) struct Previous {
    pub(crate) tick: f64,
    pub(crate) node: Vec<(String, f64)>,
    pub(crate) container: Vec<(String, f64)>,
}

pub(crate) fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-3 + 1e-9 * a.abs().max(b.abs())
}

/// `part` is more than `whole` beyond formatting round-off.
fn exceeds(part: f64, whole: f64) -> bool {
    part > whole + 1e-3 + 1e-9 * whole
}

/// The invariants of one scrape; `simulated_j(zone)` is the energy the simulation has
/// produced for that zone so far (an upper bound of what the agent may have counted).
pub(crate) fn check_tick(
    s: &[Sample],
    container: &str,
    previous: &mut Previous,
    simulated_j: &dyn Fn(&str) -> f64,
) -> Vec<String> {
    let mut bad = Vec::new();
    let tick = sum(s, "kepler_agent_ticks_total", &[]);
    if tick < previous.tick {
        bad.push(format!("ticks went back {} -> {tick}", previous.tick));
    }
    let zones: Vec<String> = select(s, "kepler_node_cpu_joules_total", &[])
        .iter()
        .filter_map(|x| x.labels.get("zone").cloned())
        .collect();
    for zone in &zones {
        let z = [("zone", zone.as_str())];
        // Joules and watts obey the same splits: total = active + idle, containers ≤ active.
        for (suffix, unit) in [("joules_total", "J"), ("watts", "W")] {
            let metric = |what: &str| sum(s, &format!("kepler_{what}_{suffix}"), &z);
            let total = metric("node_cpu");
            let active = metric("node_cpu_active");
            let idle = metric("node_cpu_idle");
            if !close(total, active + idle) {
                bad.push(format!(
                    "tick {tick} {zone}: total {total} {unit} != active {active} + idle {idle}"
                ));
            }
            let containers = metric("container_cpu");
            if exceeds(containers, active) {
                bad.push(format!(
                    "tick {tick} {zone}: containers hold {containers} {unit}, node active is {active} {unit}"
                ));
            }
        }
        let total = sum(s, "kepler_node_cpu_joules_total", &z);
        let active = sum(s, "kepler_node_cpu_active_joules_total", &z);
        let processes = sum(s, "kepler_process_cpu_joules_total", &z)
            + sum(s, "kepler_node_cpu_unattributed_joules_total", &z);
        if exceeds(processes, active) {
            bad.push(format!(
                "tick {tick} {zone}: processes + unattributed hold {processes} J, node active is {active} J"
            ));
        }
        let simulated = simulated_j(zone);
        if total > simulated * 1.02 + 1.0 {
            bad.push(format!(
                "tick {tick} {zone}: {total} J counted, the simulation produced {simulated:.1} J"
            ));
        }
        if let Some((_, before)) = previous.node.iter().find(|(n, _)| n == zone) {
            if total < *before {
                bad.push(format!(
                    "tick {tick} {zone}: node joules went back {before} -> {total}"
                ));
            }
        }
        let ours = sum(
            s,
            "kepler_container_cpu_joules_total",
            &[("zone", zone.as_str()), ("container_id", container)],
        );
        if let Some((_, before)) = previous.container.iter().find(|(n, _)| n == zone) {
            if ours < *before {
                bad.push(format!(
                    "tick {tick} {zone}: container joules went back {before} -> {ours}"
                ));
            }
        }
        set(&mut previous.node, zone, total);
        set(&mut previous.container, zone, ours);
    }
    previous.tick = tick;
    bad
}

pub(crate) fn set(v: &mut Vec<(String, f64)>, key: &str, value: f64) {
    match v.iter_mut().find(|(k, _)| k == key) {
        Some(e) => e.1 = value,
        None => v.push((key.to_string(), value)),
    }
}

pub(crate) struct Clients {
    pub(crate) threads: Vec<JoinHandle<()>>,
}

pub(crate) fn start_clients(
    port: u16,
    plan: &Plan,
    container: &str,
    sim: Arc<Sim>,
    stop: Arc<AtomicBool>,
    checks: Arc<Mutex<Checks>>,
) -> Clients {
    let mut threads = Vec::new();
    // The checker: every scrape parsed, every new tick checked.
    {
        let (stop, checks, container) = (stop.clone(), checks.clone(), container.to_string());
        threads.push(std::thread::spawn(move || {
            let mut previous = Previous::default();
            let simulated = |zone: &str| -> f64 {
                let t = sim.start.elapsed().as_secs_f64();
                match zone {
                    "package" => (WATTS[PACKAGE_0] + WATTS[PACKAGE_1]) * t,
                    "dram" => WATTS[DRAM] * t,
                    _ => 0.0,
                }
            };
            while !stop.load(Ordering::Relaxed) {
                let Ok((status, body)) = http_get(port, "/metrics") else {
                    checks.lock().unwrap().failures.push("scrape failed".into());
                    std::thread::sleep(Duration::from_millis(200));
                    continue;
                };
                let samples = parse_metrics(&body);
                let tick = sum(&samples, "kepler_agent_ticks_total", &[]);
                let new_tick = tick > previous.tick;
                let bad = check_tick(&samples, &container, &mut previous, &simulated);
                let mut c = checks.lock().unwrap();
                c.scrapes += 1;
                c.ticks_checked += u64::from(new_tick);
                if status != 200 {
                    c.failures.push(format!("/metrics answered {status}"));
                }
                c.failures.extend(bad);
            }
        }));
    }
    // The paced scraper, as Prometheus would: once a second, latency recorded.
    {
        let (stop, checks) = (stop.clone(), checks.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = matches!(http_get(port, "/metrics"), Ok((200, _)));
                let ms = t.elapsed().as_secs_f64() * 1e3;
                {
                    let mut c = checks.lock().unwrap();
                    c.paced_ms.push(ms);
                    if !ok {
                        c.failures.push("paced scrape failed".into());
                    }
                }
                std::thread::sleep(Duration::from_secs(1).saturating_sub(t.elapsed()));
            }
        }));
    }
    for _ in 0..plan.fast_scrapers {
        let (stop, checks) = (stop.clone(), checks.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let t = Instant::now();
                let ok = matches!(http_get(port, "/metrics"), Ok((200, _)));
                let ms = t.elapsed().as_secs_f64() * 1e3;
                let mut c = checks.lock().unwrap();
                c.fast_scrapes += 1;
                c.fast_max_ms = c.fast_max_ms.max(ms);
                if !ok {
                    c.failures.push("fast scrape failed".into());
                }
            }
        }));
    }
    // Slow readers: a byte a second, on a new connection every 10 s.
    for _ in 0..plan.slow_readers {
        let (stop, checks) = (stop.clone(), checks.clone());
        threads.push(std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut conn) = TcpStream::connect(("127.0.0.1", port)) else {
                    std::thread::sleep(Duration::from_secs(1));
                    continue;
                };
                let _ = conn.set_read_timeout(Some(Duration::from_secs(5)));
                let _ = conn.write_all(b"GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
                let opened = Instant::now();
                let mut byte = [0u8; 1];
                while opened.elapsed() < Duration::from_secs(10) && !stop.load(Ordering::Relaxed) {
                    if !matches!(conn.read(&mut byte), Ok(1)) {
                        break;
                    }
                    checks.lock().unwrap().slow_bytes += 1;
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        }));
    }
    Clients { threads }
}

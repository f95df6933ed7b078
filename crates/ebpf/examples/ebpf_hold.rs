//! Loads the eBPF source and takes a snapshot every second for a while, printing what it costs
//! (used by bench/ebpf_sched_switch.sh, and handy to try the source by hand).
//!
//! Usage: ebpf_hold [SECONDS] [--top N] [--iterator] [--interval SECONDS]

use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::features::features;
use kepler_core::{NoWorkloads, UsageSnapshot, UsageSource};
use kepler_ebpf::{EbpfSettings, EbpfSource};

fn cpu_time() -> Duration {
    // SAFETY: rusage is plain integers, for which all-zero bytes are a valid value.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: getrusage only writes into the struct it is given, which lives across the call.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(ru.ru_utime) + tv(ru.ru_stime)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seconds: u64 = args.get(1).and_then(|s| s.parse().ok()).unwrap_or(15);
    let top: usize = args
        .iter()
        .position(|a| a == "--top")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let started = Instant::now();
    let mut source = match EbpfSource::new("/proc", Arc::new(NoWorkloads), EbpfSettings::default())
    {
        Ok(s) => s,
        Err(e) => {
            eprintln!("unavailable: {e}");
            std::process::exit(2);
        }
    };
    if args.iter().any(|a| a == "--iterator") {
        // The per-switch probes would keep sched_switch accounting.
        source.retain_features(&[]);
        if let Err(why) = source.use_task_iterator() {
            eprintln!("no task iterator: {why}");
            std::process::exit(2);
        }
    }
    let interval = args
        .iter()
        .position(|a| a == "--interval")
        .and_then(|i| args.get(i + 1))
        .and_then(|s| s.parse().ok())
        .map_or(Duration::from_secs(1), Duration::from_secs_f64);
    println!(
        "loaded in {:?}: {}; accounting {:?}",
        started.elapsed(),
        source.probes(),
        source.accounting()
    );
    println!("ready");
    let stats = source.stats();
    let mut prev: Option<UsageSnapshot> = None;
    let mut snap_cpu = Duration::ZERO;
    let mut snap_wall = Duration::ZERO;
    let mut count = 0u32;
    let rounds = (seconds as f64 / interval.as_secs_f64()).round() as u64;
    for _ in 0..rounds {
        std::thread::sleep(interval);
        let (c0, w0) = (cpu_time(), Instant::now());
        let snap = match source.snapshot() {
            Ok(s) => s,
            Err(e) => {
                eprintln!("snapshot failed: {e}");
                continue;
            }
        };
        snap_wall += w0.elapsed();
        snap_cpu += cpu_time().saturating_sub(c0);
        count += 1;
        let exited = snap.processes.iter().filter(|p| p.exited).count();
        if let Some(p) = &prev {
            let f = features(p, &snap);
            println!(
                "processes {} (exited {exited}) node bpf_cpu_time_ms {:.0}/s page_cache {:?}",
                snap.processes.len(),
                f.node.bpf_cpu_time_ms,
                f.node.bpf_page_cache_hit.map(|v| v.round())
            );
            let mut rates = f.processes.clone();
            rates.sort_by(|a, b| b.1.bpf_cpu_time_ms.total_cmp(&a.1.bpf_cpu_time_ms));
            for (key, r) in rates.iter().take(top) {
                let comm = snap
                    .processes
                    .iter()
                    .find(|p| p.key == *key)
                    .map_or("?", |p| p.info.comm.as_str());
                println!(
                    "  {:>7} {:<16} {:>7.1} ms/s",
                    key.pid, comm, r.bpf_cpu_time_ms
                );
            }
        }
        prev = Some(snap);
    }
    if count > 0 {
        println!(
            "per snapshot: cpu {:?}, wall {:?} ({} snapshots); dropped {}",
            snap_cpu / count,
            snap_wall / count,
            count,
            stats.dropped()
        );
        println!("ebpf: {stats}");
    }
}

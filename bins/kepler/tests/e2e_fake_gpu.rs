//! The real agent with scripted GPUs selected by configuration (`dev.fake-gpu`) and two real
//! processes using them: GPU families with their labels, the shared device split 3:1, the
//! lone process taking its whole device, and GPU energy adding up per scrape.

mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn agent_exports_fake_gpus_split_among_real_processes() {
    let a = spawn_shell("exec sleep 60");
    let b = spawn_shell("exec sleep 60");
    let (pa, pb) = (a.pid(), b.pid());
    let dir = tempfile::tempdir().unwrap();
    let (_agent, port) = start_agent_with_config(
        dir.path(),
        &format!(
            // procfs lists every process each tick; eBPF only those scheduled in the interval,
            // and these sleepers are not.
            "ebpf:\n  enabled: false\ndev:\n  fake-cpu-meter:\n    enabled: true\n  fake-gpu:\n    enabled: true\n    devices:\n\
             \x20     - watts: 120\n        processes: [{{pid: {pa}, weight: 3}}, {{pid: {pb}, weight: 1}}]\n\
             \x20     - watts: 50\n        energy: true\n        processes: [{{pid: {pa}}}]\n"
        ),
        &[],
    );
    wait_ready(port, Duration::from_secs(30));

    let pid_a = pa.to_string();
    let pid_b = pb.to_string();
    let started = Instant::now();
    let samples = loop {
        let samples = scrape(port);
        let ticks = select(&samples, "kepler_agent_ticks_total", &[])
            .first()
            .map_or(0.0, |s| s.value);
        let seen = !select(
            &samples,
            "kepler_process_gpu_joules_total",
            &[("pid", &pid_b)],
        )
        .is_empty();
        if ticks >= 4.0 && seen {
            break samples;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no GPU series for pid {pid_b} after 30 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };

    let gpu0 = [
        ("gpu", "0"),
        ("gpu_uuid", "GPU-fake-0"),
        ("gpu_name", "Fake GPU"),
        ("vendor", "fake"),
    ];
    // gpu0 reports power: its energy is power × its meter's interval, and watts divide by the
    // tick's interval (timed by the CPU meter's reads, which a busy host can push apart);
    // gpu1 has an energy counter on its own clock, which a preempted read skews for one
    // interval. Hence margins; the splits below are exact within one scrape.
    let node0 = one(&samples, "kepler_node_gpu_watts", &gpu0);
    assert!((node0 - 120.0).abs() <= 12.0, "gpu0 reads {node0} W");
    let node1 = one(&samples, "kepler_node_gpu_watts", &[("gpu", "1")]);
    assert!((node1 - 50.0).abs() <= 15.0, "gpu1 reads {node1} W");
    assert_eq!(
        one(
            &samples,
            "kepler_node_gpu_info",
            &[("gpu", "1"), ("meter", "fake-gpu"), ("source", "synthetic")]
        ),
        1.0
    );
    // Never seen without a compute process and no idlePower: all of it is active.
    assert_eq!(
        one(&samples, "kepler_node_gpu_idle_watts", &[("gpu", "1")]),
        0.0
    );

    let watts_a = one(&samples, "kepler_process_gpu_watts", &[("pid", &pid_a)]);
    let watts_b = one(&samples, "kepler_process_gpu_watts", &[("pid", &pid_b)]);
    // a: 3/4 of gpu0 and all of gpu1; b: 1/4 of gpu0.
    assert!(
        (watts_a - (0.75 * node0 + node1)).abs() < 1e-3,
        "a {watts_a} W, gpu0 {node0} W"
    );
    assert!(
        (watts_b - 0.25 * node0).abs() < 1e-3,
        "b {watts_b} W, gpu0 {node0} W"
    );

    // Conservation in one scrape: the processes hold all of the GPUs' active energy.
    let active: f64 = select(&samples, "kepler_node_gpu_active_joules_total", &[])
        .iter()
        .map(|s| s.value)
        .sum();
    let processes: f64 = select(&samples, "kepler_process_gpu_joules_total", &[])
        .iter()
        .map(|s| s.value)
        .sum();
    assert!(active > 0.0);
    assert!(
        (active - processes).abs() < 1e-5,
        "node active {active} J, processes {processes} J"
    );
    // GPU zones are not cpu zones.
    assert!(select(&samples, "kepler_node_cpu_watts", &[("zone", "gpu0")]).is_empty());
}

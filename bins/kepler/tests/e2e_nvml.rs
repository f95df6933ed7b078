//! The real agent on a real NVIDIA GPU (`experimental.gpu.enabled`), with a real CUDA
//! process: the GPU's energy as the agent exports it against NVML's own energy counter read by
//! this test over the same window, idle power learnt before the workload started, and the
//! active energy held by the compute process. Skips without a GPU (CI has none);
//! `KEPLER_REQUIRE_GPU=1` turns the skip into a failure.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kepler_meters::gpu::nvml::NvmlGpu;
use kepler_meters::gpu::GpuBackend;
use kepler_testkit::cuda;

/// NVML's energy counter of device 0, in joules: the truth the agent's figure is held to.
fn nvml_joules(nvml: &mut NvmlGpu) -> f64 {
    let sample = nvml.sample(0).expect("NVML sample");
    let energy = sample.energy.expect("an energy counter (Volta and later)");
    energy.0 as f64 / 1e6
}

#[test]
fn agent_exports_real_gpu_energy_and_credits_the_compute_process() {
    let Some(mut nvml) = cuda::or_skip(NvmlGpu::open(), "no NVIDIA GPU") else {
        return;
    };
    let uuid = nvml.devices()[0].uuid.to_string();
    let dir = tempfile::tempdir().unwrap();
    // procfs lists every process each tick, so the CUDA process is listed however it sleeps;
    // the fake CPU meter keeps the CPU domain out of the way on hosts without RAPL.
    let (_agent, port) = start_agent_with_config(
        dir.path(),
        "ebpf:\n  enabled: false\nexperimental:\n  gpu:\n    enabled: true\n\
         dev:\n  fake-cpu-meter:\n    enabled: true\n",
        &[],
    );
    wait_ready(port, Duration::from_secs(30));
    // A few intervals with no compute process, so the agent learns the device's idle power.
    let started = Instant::now();
    loop {
        let samples = scrape(port);
        let ticks = sum(&samples, "kepler_agent_ticks_total", &[]);
        if ticks >= 3.0 {
            let info = select(
                &samples,
                "kepler_node_gpu_info",
                &[("gpu", "0"), ("gpu_uuid", &uuid), ("meter", "nvml")],
            );
            assert_eq!(info.len(), 1, "no nvml gpu_info for {uuid}: {info:?}");
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(30), "no ticks");
        std::thread::sleep(Duration::from_millis(250));
    }

    let Some(mut work) = cuda::or_skip(cuda::start(90), "NVIDIA GPU present, but") else {
        return;
    };
    let pid = work.pid().to_string();
    // CUDA start-up takes seconds; wait until the process holds GPU energy, then a few
    // intervals more for the load to settle.
    let started = Instant::now();
    loop {
        let samples = scrape(port);
        if sum(
            &samples,
            "kepler_process_gpu_joules_total",
            &[("pid", &pid)],
        ) > 0.0
        {
            break;
        }
        assert!(work.running(), "the CUDA workload ended early");
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "pid {pid} never held GPU energy"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    std::thread::sleep(Duration::from_secs(3));

    let before = scrape(port);
    let truth_before = nvml_joules(&mut nvml);
    std::thread::sleep(Duration::from_secs(15));
    let after = scrape(port);
    let truth_after = nvml_joules(&mut nvml);
    assert!(work.running(), "the CUDA workload ended inside the window");

    let gpu0 = [("gpu", "0")];
    let delta = |name: &str, labels: &[(&str, &str)]| {
        sum(&after, name, labels) - sum(&before, name, labels)
    };
    let node = delta("kepler_node_gpu_joules_total", &gpu0);
    let truth = truth_after - truth_before;
    let active = delta("kepler_node_gpu_active_joules_total", &gpu0);
    let idle = delta("kepler_node_gpu_idle_joules_total", &gpu0);
    let process = delta("kepler_process_gpu_joules_total", &[("pid", &pid)]);
    let processes = delta("kepler_process_gpu_joules_total", &[]);
    println!(
        "15 s window: NVML {truth:.1} J, agent node {node:.1} J (active {active:.1}, idle \
         {idle:.1}), pid {pid} {process:.1} J, all processes {processes:.1} J"
    );
    // The agent's figure lags by up to one interval at either end of the window; under a
    // steady load that shifts the window, not the rate.
    assert!(
        (node - truth).abs() <= 0.1 * truth,
        "agent {node} J against NVML {truth} J"
    );
    assert!(
        (active + idle - node).abs() < 1e-3 * node.max(1.0),
        "active {active} J + idle {idle} J against {node} J"
    );
    // Idle was learnt while no compute process ran, and the busy device draws more.
    let idle_watts = one(&after, "kepler_node_gpu_idle_watts", &gpu0);
    let watts = one(&after, "kepler_node_gpu_watts", &gpu0);
    assert!(
        idle_watts > 0.0 && idle_watts < watts,
        "idle {idle_watts} W, busy {watts} W"
    );
    // Conservation: no process holds more than the active energy; the only compute process
    // holds nearly all of it (another process on a shared machine may take a share).
    assert!(
        processes <= active + 1e-3 * active.max(1.0),
        "processes {processes} J, active {active} J"
    );
    assert!(
        process >= 0.5 * active && active > 0.0,
        "pid {pid} {process} J of {active} J active"
    );
}

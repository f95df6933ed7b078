//! The NVML meter on a real NVIDIA GPU, with a real compute process. Runs only where
//! `libnvidia-ml.so.1` loads and a GPU exists; elsewhere it prints why it did not run and
//! passes (a test that cannot run here must not pretend it did).
//!
//! The compute process is `kepler_testkit::cuda`'s. `KEPLER_REQUIRE_GPU=1` turns the skips
//! into failures.

use std::time::{Duration, Instant};

use kepler_core::{MeterInput, PowerMeter, ZoneSample};
use kepler_meters::gpu::nvml::NvmlGpu;
use kepler_meters::gpu::GpuMeter;
use kepler_testkit::cuda;

#[test]
fn real_gpu_power_and_a_real_compute_process() {
    let Some(backend) = cuda::or_skip(NvmlGpu::open(), "no NVIDIA GPU") else {
        return;
    };
    let mut meter = GpuMeter::new("nvml", Box::new(backend), None);
    let zones = meter.zones();
    assert!(!zones.is_empty());
    println!("NVML devices: {}", meter.detail().unwrap_or_default());
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    assert_eq!(out.len(), zones.len());
    for r in &out {
        let ok = match r.sample {
            ZoneSample::Power(w) => w.0 > 0.0,
            ZoneSample::Energy { counter, .. } => counter.0 > 0,
        };
        assert!(ok, "{} reads no power: {:?}", r.zone, r.sample);
        assert!(
            r.path.starts_with("GPU-") || r.path.starts_with("MIG-"),
            "{}",
            r.path
        );
    }

    let Some(mut child) = cuda::or_skip(cuda::start(30), "NVIDIA GPU present, but") else {
        return;
    };
    let pid = child.pid();
    // Poll until the driver lists the process with a share (CUDA start-up takes seconds).
    let deadline = Instant::now() + Duration::from_secs(60);
    let found = loop {
        out.clear();
        meter.read(&MeterInput::default(), &mut out).unwrap();
        let with_pid = out.iter().find(|r| {
            r.shares
                .as_ref()
                .is_some_and(|s| s.iter().any(|p| p.pid == pid && p.weight > 0))
        });
        if let Some(r) = with_pid {
            break Some(r.clone());
        }
        if Instant::now() > deadline || !child.running() {
            break None;
        }
        std::thread::sleep(Duration::from_millis(500));
    };
    let reading =
        found.unwrap_or_else(|| panic!("pid {pid} never appeared among NVML's compute processes"));
    println!(
        "compute process {pid} on {} ({}): shares {:?}, sample {:?}, idle {:?}",
        reading.zone, reading.path, reading.shares, reading.sample, reading.idle
    );
}

/// Two compute processes time-sharing one device: NVML's per-process SM samples must give
/// both a share in the same reading (else the meter would hand one of them the whole device).
#[test]
fn two_compute_processes_on_one_gpu_both_get_a_share() {
    let Some(backend) = cuda::or_skip(NvmlGpu::open(), "no NVIDIA GPU") else {
        return;
    };
    let mut meter = GpuMeter::new("nvml", Box::new(backend), None);
    let both = cuda::start(60).and_then(|a| Ok((a, cuda::start(60)?)));
    let Some((mut a, mut b)) = cuda::or_skip(both, "NVIDIA GPU present, but") else {
        return;
    };
    let (pa, pb) = (a.pid(), b.pid());
    let weight = |shares: &[kepler_core::ProcessShare], pid: u32| {
        shares.iter().find(|s| s.pid == pid).map_or(0, |s| s.weight)
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut out = Vec::new();
    loop {
        out.clear();
        meter.read(&MeterInput::default(), &mut out).unwrap();
        let both = out.iter().find_map(|r| {
            let shares = r.shares.as_deref()?;
            let (wa, wb) = (weight(shares, pa), weight(shares, pb));
            (wa > 0 && wb > 0).then_some((wa, wb))
        });
        if let Some((wa, wb)) = both {
            println!("pids {pa} and {pb} share the device {wa}:{wb}");
            break;
        }
        let last = out.iter().find_map(|r| r.shares.clone());
        assert!(a.running() && b.running(), "a CUDA workload ended early");
        assert!(
            Instant::now() < deadline,
            "pids {pa} and {pb} never both had a share; last shares {last:?}"
        );
        std::thread::sleep(Duration::from_secs(1));
    }
}

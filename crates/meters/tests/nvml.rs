//! The NVML meter on a real NVIDIA GPU, with a real compute process. Runs only where
//! `libnvidia-ml.so.1` loads and a GPU exists; elsewhere it prints why it did not run and
//! passes (a test that cannot run here must not pretend it did).
//!
//! The compute process is `python3` with PyTorch (or the command in `KEPLER_CUDA_WORKLOAD`,
//! run with `sh -c`, e.g. a CUDA sample binary): it must keep an SM busy for a few seconds.

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kepler_core::{MeterInput, PowerMeter, ZoneSample};
use kepler_meters::gpu::nvml::NvmlGpu;
use kepler_meters::gpu::GpuMeter;

const TORCH_LOAD: &str = "import torch,time\n\
x=torch.rand(4096,4096,device='cuda')\n\
end=time.time()+30\n\
while time.time()<end:\n    y=x@x\n    torch.cuda.synchronize()\n";

fn workload() -> Option<Child> {
    let mut cmd = match std::env::var("KEPLER_CUDA_WORKLOAD") {
        Ok(c) => {
            let mut cmd = Command::new("sh");
            cmd.args(["-c", &c]);
            cmd
        }
        Err(_) => {
            let has_torch = Command::new("python3")
                .args([
                    "-c",
                    "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)",
                ])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .is_ok_and(|s| s.success());
            if !has_torch {
                return None;
            }
            let mut cmd = Command::new("python3");
            cmd.args(["-c", TORCH_LOAD]);
            cmd
        }
    };
    cmd.stdout(Stdio::null()).spawn().ok()
}

struct Kill(Child);

impl Drop for Kill {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn real_gpu_power_and_a_real_compute_process() {
    let backend = match NvmlGpu::open() {
        Ok(b) => b,
        Err(why) => {
            println!("SKIP: no NVIDIA GPU: {why}");
            return;
        }
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

    let Some(child) = workload() else {
        println!("SKIP: NVIDIA GPU present but no CUDA workload (python3 with torch, or KEPLER_CUDA_WORKLOAD) to start");
        return;
    };
    let child = Kill(child);
    let pid = child.0.id();
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
        if Instant::now() > deadline {
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

//! A real CUDA compute process for the tests that need an NVIDIA GPU (the NVML meter's and the
//! agent's). It is `python3` with PyTorch running `bench/cuda_load.py`, or the command in
//! `KEPLER_CUDA_WORKLOAD` (run with `sh -c`, e.g. a CUDA sample binary), which must keep an SM
//! busy for the time the test needs.

use std::process::{Child, Command, Stdio};

/// The load itself, shared with the GPU scripts and benches.
const TORCH_LOAD: &str = include_str!("../../../bench/cuda_load.py");

/// A child process killed and reaped when dropped.
pub struct Workload(Child);

impl Workload {
    pub fn pid(&self) -> u32 {
        self.0.id()
    }

    /// Whether it is still running (a workload that died early would make the test's
    /// failure message misleading).
    pub fn running(&mut self) -> bool {
        matches!(self.0.try_wait(), Ok(None))
    }
}

impl Drop for Workload {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the workload for about `seconds`, or `None` (with the reason) when this host has no
/// way to run one: no `KEPLER_CUDA_WORKLOAD` and no python3 whose torch sees a GPU.
pub fn start(seconds: u32) -> Result<Workload, String> {
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
                return Err(
                    "no CUDA workload: no python3 whose torch sees a GPU, and no KEPLER_CUDA_WORKLOAD"
                        .into(),
                );
            }
            let mut cmd = Command::new("python3");
            // With `-c`, the arguments after the program are its `sys.argv[1:]`.
            cmd.args(["-c", TORCH_LOAD, &seconds.to_string()]);
            cmd
        }
    };
    cmd.stdout(Stdio::null())
        .spawn()
        .map(Workload)
        .map_err(|e| format!("the CUDA workload did not start: {e}"))
}

/// Skips the calling test for want of a GPU or a CUDA workload, with `reason` on stderr; fails
/// it instead where `KEPLER_REQUIRE_GPU=1` (set on machines that have one, so that a pass
/// there means the test ran). CI has no GPU and does not set it.
pub fn skip(reason: &str) {
    assert!(
        std::env::var("KEPLER_REQUIRE_GPU").as_deref() != Ok("1"),
        "{reason} (KEPLER_REQUIRE_GPU=1)"
    );
    eprintln!("SKIP: {reason}");
}

/// The value, or `None` after [`skip`] with `context` and the error: for the GPU and the
/// workload a test needs, `let Some(x) = or_skip(open(), "no NVIDIA GPU") else { return };`.
pub fn or_skip<T, E: std::fmt::Display>(result: Result<T, E>, context: &str) -> Option<T> {
    match result {
        Ok(value) => Some(value),
        Err(why) => {
            skip(&format!("{context}: {why}"));
            None
        }
    }
}

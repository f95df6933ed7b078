//! Load: steady spawns and fork storms inside the test's cgroup.

use std::io::Write;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::common::*;

/// Spawns `/bin/true` in the cgroup at up to `rate` a second until `stop`; returns how many
/// ran. `xargs`, moved into the cgroup, runs one per line the test feeds it (16 at a time,
/// reaping each), so the test only paces lines and pays no fork of its own. The pipe is kept
/// small, so a spawner that falls behind blocks the feeder instead of queueing a backlog.
pub(crate) fn spawn_steadily(procs: &Path, rate: u32, stop: Arc<AtomicBool>) -> JoinHandle<u64> {
    let mut xargs = Command::new("sh")
        .arg("-c")
        .arg(format!(
            "echo $$ > {} && exec xargs -P 16 -n 1 /bin/true",
            procs.display()
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start xargs");
    let mut input = xargs.stdin.take().expect("xargs stdin");
    // SAFETY: fcntl on a pipe descriptor we own; a refused size only leaves the default.
    unsafe { libc::fcntl(input.as_raw_fd(), libc::F_SETPIPE_SZ, 4096) };
    std::thread::spawn(move || {
        let start = Instant::now();
        let mut fed = 0u64;
        while !stop.load(Ordering::Relaxed) {
            let due = (start.elapsed().as_secs_f64() * f64::from(rate)) as u64;
            if fed >= due {
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
            let n = (due - fed).min(256);
            if input
                .write_all("x\n".repeat(n as usize).as_bytes())
                .is_err()
            {
                break;
            }
            fed += n;
        }
        // xargs runs what is left in the pipe, then exits.
        drop(input);
        let deadline = Instant::now() + Duration::from_secs(60);
        while matches!(xargs.try_wait(), Ok(None)) && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = xargs.kill();
        let _ = xargs.wait();
        fed
    })
}

/// `n` processes forked as fast as a shell can, 50 at a time, inside the cgroup.
pub(crate) fn fork_storm(procs: &Path, n: usize) -> Proc {
    spawn_shell(&format!(
        "echo $$ > {} && i=0; while [ $i -lt {n} ]; do j=0; \
         while [ $j -lt 50 ]; do /bin/true & j=$((j+1)); done; wait; i=$((i+50)); done",
        procs.display()
    ))
}

//! Burning a measured amount of CPU time in the calling thread, as the scheduler counts it
//! (`CLOCK_THREAD_CPUTIME_ID`), for tests that hold a source's readings to it.

use std::time::Duration;

/// The calling thread's CPU time so far.
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Spins until this thread has used `d` more CPU time. Async-signal-safe (tests call it in a
/// forked child).
pub fn burn_cpu(d: Duration) {
    let end = thread_cpu() + d;
    let mut x: u64 = 1;
    while thread_cpu() < end {
        for _ in 0..1000 {
            x = std::hint::black_box(x.wrapping_mul(6364136223846793005).wrapping_add(1));
        }
    }
}

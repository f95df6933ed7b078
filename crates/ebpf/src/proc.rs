//! The clocks the eBPF source reads itself. Everything read from procfs (node CPU times,
//! process descriptions and keys) goes through `kepler_sources::ProcfsReader`, shared with the
//! procfs source so both read and convert it alike.

use std::time::Duration;

use kepler_core::ReadError;
use kepler_sources::ProcfsReader;

// Read through the sources crate's one wrapper of `clock_gettime`.
pub(crate) use kepler_sources::procfs::read_clock as clock;

/// Time since boot, floored to a tick as process start times are (see
/// [`ProcfsReader::uptime_by_clock`]).
pub(crate) fn uptime(procfs: &ProcfsReader) -> Result<Duration, ReadError> {
    procfs.uptime_by_clock()
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    // CLOCK_MONOTONIC with a valid out-pointer cannot fail on Linux; 0 would count no stretch.
    let now = clock(libc::CLOCK_MONOTONIC).unwrap_or_default();
    u64::try_from(now.as_nanos()).unwrap_or(u64::MAX)
}

/// Threads on the host (`<procfs>/loadavg`, the number after the slash).
pub(crate) fn threads(procfs: &ProcfsReader) -> Option<u64> {
    let loadavg = std::fs::read_to_string(procfs.root().join("loadavg")).ok()?;
    let field = loadavg.split_whitespace().nth(3)?;
    field.split_once('/')?.1.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_read() {
        let procfs = ProcfsReader::new("/proc").unwrap();
        let up = uptime(&procfs).unwrap();
        assert!(up > Duration::ZERO);
        let hz = u128::from(procfs.user_hz());
        if 1_000_000_000 % hz == 0 {
            assert_eq!(up.as_nanos() % (1_000_000_000 / hz), 0, "whole ticks");
        }
        let (a, b) = (monotonic_ns(), monotonic_ns());
        assert!(a > 0 && b >= a);
    }

    #[test]
    fn the_host_load_reads() {
        let mut procfs = ProcfsReader::new("/proc").unwrap();
        let switches = |p: &mut ProcfsReader| p.read_node_stat().unwrap().switches.unwrap();
        let before = switches(&mut procfs);
        std::thread::sleep(Duration::from_millis(20));
        assert!(switches(&mut procfs) > before, "this thread slept");
        assert!(procfs.read_node_stat().unwrap().forks.is_some());
        // This test's own threads at least.
        assert!(threads(&procfs).unwrap() >= 2);
    }
}

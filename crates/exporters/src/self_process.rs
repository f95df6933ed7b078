//! The agent's own process metrics (`process_*`, as every Prometheus client library exports
//! them), read from `/proc/self` on the sampling thread so that scrapes only encode.

use std::fs;
use std::io;
use std::path::Path;

/// Which of upstream's `exporter.prometheus.debugCollectors` are on.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct SelfCollectors {
    /// `process`: CPU seconds, resident and virtual memory, open and max fds, start time.
    pub process: bool,
    /// `go`: upstream's Go runtime metrics. There is no Go runtime here; the nearest fact that
    /// is about the runtime rather than the process is its thread count (`process_threads`).
    pub runtime: bool,
}

impl SelfCollectors {
    pub fn any(self) -> bool {
        self.process || self.runtime
    }
}

/// One reading of the agent's own process.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_memory_bytes: u64,
    pub virtual_memory_bytes: u64,
    pub open_fds: u64,
    pub max_fds: u64,
    /// Unix time the process started, in seconds.
    pub start_time_seconds: f64,
    pub threads: u64,
}

/// Reads the agent's own process once per tick. The boot time and the clock tick rate do not
/// change while the agent runs, so they are read once, not every tick.
#[derive(Debug)]
pub struct SelfReader {
    me: std::path::PathBuf,
    boot_time: u64,
    ticks_per_second: f64,
}

impl SelfReader {
    /// Reads the calling process from `procfs` (the agent's own `/proc`, not the host's).
    pub fn new(procfs: &Path) -> io::Result<SelfReader> {
        let boot_time = parse_boot_time(&fs::read_to_string(procfs.join("stat"))?)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no btime in /proc/stat"))?;
        // SAFETY: sysconf only reads a constant of the C library.
        let ticks = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
        Ok(SelfReader {
            me: procfs.join("self"),
            boot_time,
            ticks_per_second: if ticks > 0 { ticks as f64 } else { 100.0 },
        })
    }

    pub fn read(&self) -> io::Result<ProcessStats> {
        let me = &self.me;
        let stat = fs::read_to_string(me.join("stat"))?;
        let status = fs::read_to_string(me.join("status"))?;
        let limits = fs::read_to_string(me.join("limits"))?;
        let open_fds = fs::read_dir(me.join("fd"))?.count() as u64;
        parse(
            &stat,
            &status,
            &limits,
            self.boot_time,
            self.ticks_per_second,
            open_fds,
        )
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "unexpected /proc/self format"))
    }
}

/// The boot time (Unix seconds) from `/proc/stat`'s `btime` line.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Parses the files [`SelfReader::read`] reads; `None` if a field is missing.
pub fn parse(
    stat: &str,
    status: &str,
    limits: &str,
    boot_time: u64,
    ticks_per_second: f64,
    open_fds: u64,
) -> Option<ProcessStats> {
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = &stat[stat.rfind(')')? + 1..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state); utime is field 14, stime 15, starttime 22.
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let cpu_ticks = field(14)? + field(15)?;
    let start_ticks = field(22)?;
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse::<u64>().ok())
    };
    let max_fds = limits
        .lines()
        .find_map(|l| l.strip_prefix("Max open files"))
        .and_then(|v| v.split_whitespace().next())
        // "unlimited" has no number; Prometheus' clients report the largest value then.
        .map(|v| v.parse::<u64>().unwrap_or(u64::MAX))?;
    Some(ProcessStats {
        cpu_seconds: cpu_ticks as f64 / ticks_per_second,
        resident_memory_bytes: kb("VmRSS:").unwrap_or(0) * 1024,
        virtual_memory_bytes: kb("VmSize:").unwrap_or(0) * 1024,
        open_fds,
        max_fds,
        start_time_seconds: boot_time as f64 + start_ticks as f64 / ticks_per_second,
        threads: kb("Threads:")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (kepler (x) y) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 130 0 0 20 0 7 0 123400 99999744 3000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
    const STATUS: &str = "Name:\tkepler\nVmPeak:\t  100000 kB\nVmSize:\t   97656 kB\nVmRSS:\t   12000 kB\nThreads:\t7\n";
    const LIMITS: &str = "Limit                     Soft Limit           Hard Limit           Units     \nMax cpu time              unlimited            unlimited            seconds   \nMax open files            1024                 524288               files     \n";
    const PROC_STAT: &str = "cpu  1 2 3 4\nbtime 1700000000\nprocesses 10\n";

    #[test]
    fn parses_the_standard_process_facts() {
        let boot = parse_boot_time(PROC_STAT).unwrap();
        let s = parse(STAT, STATUS, LIMITS, boot, 100.0, 9).unwrap();
        assert_eq!(s.cpu_seconds, 3.8);
        assert_eq!(s.resident_memory_bytes, 12000 * 1024);
        assert_eq!(s.virtual_memory_bytes, 97656 * 1024);
        assert_eq!(s.open_fds, 9);
        assert_eq!(s.max_fds, 1024);
        assert_eq!(s.start_time_seconds, 1700000000.0 + 1234.0);
        assert_eq!(s.threads, 7);
    }

    #[test]
    fn missing_fields_are_none_not_zero() {
        assert!(parse("1 (x) S 1 2", STATUS, LIMITS, 1, 100.0, 0).is_none());
        assert!(parse_boot_time("cpu 1\n").is_none());
        assert!(parse(STAT, STATUS, "", 1, 100.0, 0).is_none());
    }

    #[test]
    fn reads_this_process() {
        let s = SelfReader::new(Path::new("/proc")).unwrap().read().unwrap();
        assert!(s.threads >= 1 && s.resident_memory_bytes > 0 && s.open_fds > 0);
        assert!(s.max_fds >= s.open_fds && s.start_time_seconds > 1.0e9);
    }
}

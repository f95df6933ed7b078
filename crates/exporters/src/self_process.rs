//! The agent's own process metrics (`process_*`, as every Prometheus client library exports
//! them), read from `/proc/self` when a scrape encodes them, as those libraries read them: fresh
//! at each scrape, and not at all between scrapes. At a 1 s interval scraped every 5 s, reading
//! them at every tick cost 3–4 % of the agent's CPU on an idle node (docs/benchmarks.md, "The
//! agent's own process read at scrape time").
//!
//! A reading is three syscalls: `/proc/self/stat` is held open and read again from offset 0
//! (it alone has the CPU times, memory sizes and thread count that `status` and `limits` were
//! once parsed for), the open descriptors are counted by the kernel (`stat` of `/proc/self/fd`
//! gives their number since Linux 6.2; older kernels list the directory), and the descriptor
//! limit is `getrlimit`'s.

use std::fs::{self, File};
use std::io;
use std::path::{Path, PathBuf};

use kepler_sources::bounded::{open_file_limit, read_again_from_start};

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

/// The constants a reading is scaled by: they do not change while the agent runs.
#[derive(Copy, Clone, Debug, PartialEq)]
pub struct Scale {
    /// Boot time, Unix seconds (`btime` of `/proc/stat`).
    pub boot_time: u64,
    /// `_SC_CLK_TCK`: the unit of the CPU times and start time in `stat`.
    pub ticks_per_second: f64,
    /// The unit of `stat`'s resident set size.
    pub page_size: u64,
}

/// `/proc/self/stat` is one line of at most 52 numbers and a 64-byte name: far below this.
const STAT_MAX: usize = 4096;

/// What a scrape reads the agent's own process through: [`SelfReader`], or fixed readings
/// where the output must not depend on the process that renders it (golden files).
pub trait OwnProcess: Send + Sync + std::fmt::Debug {
    fn read(&self) -> io::Result<ProcessStats>;
}

/// Reads the agent's own process at each scrape.
#[derive(Debug)]
pub struct SelfReader {
    stat: File,
    fd_dir: PathBuf,
    scale: Scale,
}

impl SelfReader {
    /// Reads the calling process from `procfs` (the agent's own `/proc`, not the host's).
    pub fn new(procfs: &Path) -> io::Result<SelfReader> {
        let boot_time = parse_boot_time(&fs::read_to_string(procfs.join("stat"))?)
            .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidData, "no btime in /proc/stat"))?;
        // SAFETY: sysconf only reads constants of the C library and the kernel.
        let (ticks, page) = unsafe {
            (
                libc::sysconf(libc::_SC_CLK_TCK),
                libc::sysconf(libc::_SC_PAGESIZE),
            )
        };
        let me = procfs.join("self");
        Ok(SelfReader {
            // Opening resolves `self` once: the file stays this process's.
            stat: File::open(me.join("stat"))?,
            fd_dir: me.join("fd"),
            scale: Scale {
                boot_time,
                ticks_per_second: if ticks > 0 { ticks as f64 } else { 100.0 },
                page_size: u64::try_from(page).ok().filter(|&p| p > 0).unwrap_or(4096),
            },
        })
    }

    /// The number of open descriptors, not counting one opened to count them.
    fn open_fds(&self) -> io::Result<u64> {
        match fs::metadata(&self.fd_dir)?.len() {
            // Before Linux 6.2 the size is 0. It cannot be a true count: the reader holds
            // its stat file open. The listing counts its own descriptor too.
            0 => Ok((fs::read_dir(&self.fd_dir)?.count() as u64).saturating_sub(1)),
            n => Ok(n),
        }
    }
}

impl OwnProcess for SelfReader {
    fn read(&self) -> io::Result<ProcessStats> {
        let mut buf = [0u8; STAT_MAX];
        let len = read_again_from_start(&self.stat, &mut buf)?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "/proc/self/stat is too long")
        })?;
        // The command name may be any bytes; the numbers after it are ASCII.
        let stat = String::from_utf8_lossy(buf.get(..len).unwrap_or_default());
        parse(&stat, self.scale, self.open_fds()?, open_file_limit()?).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidData,
                "unexpected /proc/self/stat format",
            )
        })
    }
}

/// The boot time (Unix seconds) from `/proc/stat`'s `btime` line.
pub fn parse_boot_time(proc_stat: &str) -> Option<u64> {
    proc_stat
        .lines()
        .find_map(|l| l.strip_prefix("btime "))
        .and_then(|v| v.trim().parse::<u64>().ok())
}

/// Parses `/proc/self/stat`; `None` if a field is missing.
pub fn parse(stat: &str, scale: Scale, open_fds: u64, max_fds: u64) -> Option<ProcessStats> {
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    // `rest` starts at field 3 (state); rss, field 24, is the last one read. Only the fields
    // read are parsed: some others (tpgid) are -1.
    let mut fields = [""; 22];
    let mut words = rest.split_ascii_whitespace();
    for slot in &mut fields {
        *slot = words.next()?;
    }
    let field = |n: usize| fields.get(n - 3).and_then(|v| v.parse::<u64>().ok());
    let ticks = scale.ticks_per_second;
    Some(ProcessStats {
        // utime and stime.
        cpu_seconds: (field(14)? + field(15)?) as f64 / ticks,
        resident_memory_bytes: field(24)?.saturating_mul(scale.page_size),
        virtual_memory_bytes: field(23)?,
        open_fds,
        max_fds,
        start_time_seconds: scale.boot_time as f64 + field(22)? as f64 / ticks,
        threads: field(20)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const STAT: &str = "4242 (kepler (x) y) S 1 4242 4242 0 -1 4194560 2000 0 0 0 250 130 0 0 20 0 7 0 123400 99999744 3000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 3 0 0 0 0 0";
    const PROC_STAT: &str = "cpu  1 2 3 4\nbtime 1700000000\nprocesses 10\n";
    const SCALE: Scale = Scale {
        boot_time: 1700000000,
        ticks_per_second: 100.0,
        page_size: 4096,
    };

    #[test]
    fn parses_the_standard_process_facts() {
        assert_eq!(parse_boot_time(PROC_STAT), Some(SCALE.boot_time));
        let s = parse(STAT, SCALE, 9, 1024).unwrap();
        assert_eq!(s.cpu_seconds, 3.8);
        assert_eq!(s.resident_memory_bytes, 3000 * 4096);
        assert_eq!(s.virtual_memory_bytes, 99999744);
        assert_eq!(s.open_fds, 9);
        assert_eq!(s.max_fds, 1024);
        assert_eq!(s.start_time_seconds, 1700000000.0 + 1234.0);
        assert_eq!(s.threads, 7);
    }

    #[test]
    fn missing_fields_are_none_not_zero() {
        assert!(parse("1 (x) S 1 2", SCALE, 0, 0).is_none());
        assert!(parse("no parenthesis", SCALE, 0, 0).is_none());
        let garbled = STAT.replace(" 3000 ", " lots ");
        assert!(parse(&garbled, SCALE, 0, 0).is_none());
        assert!(parse_boot_time("cpu 1\n").is_none());
    }

    #[test]
    fn reads_this_process_as_its_text_files_show_it() {
        let reader = SelfReader::new(Path::new("/proc")).unwrap();
        let s = reader.read().unwrap();
        let status = fs::read_to_string("/proc/self/status").unwrap();
        let kb = |key: &str| -> u64 {
            let line = status.lines().find_map(|l| l.strip_prefix(key)).unwrap();
            line.split_whitespace().next().unwrap().parse().unwrap()
        };
        assert_eq!(s.virtual_memory_bytes, kb("VmSize:") * 1024);
        assert!(s.threads >= 1 && s.resident_memory_bytes > 0);
        assert!(s.start_time_seconds > 1.0e9);
        let limits = fs::read_to_string("/proc/self/limits").unwrap();
        let soft = limits
            .lines()
            .find_map(|l| l.strip_prefix("Max open files"))
            .and_then(|v| v.split_whitespace().next())
            .unwrap();
        assert_eq!(s.max_fds, soft.parse().unwrap_or(u64::MAX));
        // Other test threads open and close files meanwhile: count with them held still.
        let listed = fs::read_dir("/proc/self/fd").unwrap().count() as u64;
        assert!(
            s.open_fds >= 3 && s.open_fds.abs_diff(listed) <= 8,
            "{s:?} vs {listed}"
        );
    }

    #[test]
    fn the_held_stat_file_is_read_afresh_each_time() {
        let reader = SelfReader::new(Path::new("/proc")).unwrap();
        let before = reader.read().unwrap();
        // Spin until the kernel has charged this process 120 ms more (several clock ticks),
        // however busy the machine is.
        let cpu_now = || {
            let mut t = libc::timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            // SAFETY: clock_gettime writes one timespec, which `t` is.
            unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut t) };
            t.tv_sec as f64 + t.tv_nsec as f64 * 1e-9
        };
        let until = cpu_now() + 0.12;
        let mut x = 0u64;
        while cpu_now() < until {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = reader.read().unwrap();
        assert!(
            after.cpu_seconds >= before.cpu_seconds + 0.05,
            "{before:?} then {after:?}"
        );
    }
}

//! The few procfs reads the eBPF source still needs: node CPU times (`/proc/stat`), and a
//! process's description once per new process. Kept small on purpose: the procfs usage source
//! (kepler-sources) owns the full readers, and these can be swapped for its public API.

use std::path::Path;
use std::time::Duration;

use kepler_core::{NodeCpuTimes, ReadError};

const PF_KTHREAD: u64 = 0x0020_0000;

/// Length of one USER_HZ clock tick, the unit of `/proc/stat` and of process start times.
pub(crate) fn tick() -> Duration {
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    let hz = u64::try_from(hz).ok().filter(|&h| h > 0).unwrap_or(100);
    Duration::from_nanos(1_000_000_000 / hz)
}

/// `n` ticks as a duration.
pub(crate) fn ticks(n: u64, tick: Duration) -> Duration {
    Duration::from_nanos(n.saturating_mul(u64::try_from(tick.as_nanos()).unwrap_or(u64::MAX)))
}

/// Whole ticks in `d`, as a duration: what procfs shows for a time it keeps in ns.
pub(crate) fn floor_to_tick(d: Duration, tick: Duration) -> Duration {
    let t = tick.as_nanos().max(1);
    let ticks = d.as_nanos() / t;
    Duration::from_nanos(u64::try_from(ticks * t).unwrap_or(u64::MAX))
}

/// Time since boot including suspend (CLOCK_BOOTTIME, the clock of `start_boottime` and of
/// `/proc/uptime`), floored to a tick like process start times are. Flooring keeps a process
/// started after this instant at a start time ≥ this uptime, which is how attribution decides
/// that all of its CPU time belongs to the coming interval.
pub(crate) fn uptime(tick: Duration) -> Result<Duration, ReadError> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer.
    if unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) } != 0 {
        return Err(ReadError::Other(format!(
            "clock_gettime(CLOCK_BOOTTIME): {}",
            std::io::Error::last_os_error()
        )));
    }
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u32::try_from(ts.tv_nsec).unwrap_or(0);
    Ok(floor_to_tick(Duration::new(secs, nanos), tick))
}

/// CLOCK_MONOTONIC in ns: the clock of `bpf_ktime_get_ns`.
pub(crate) fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid out-pointer; CLOCK_MONOTONIC cannot fail on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    let secs = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nanos = u64::try_from(ts.tv_nsec).unwrap_or(0);
    secs.saturating_mul(1_000_000_000).saturating_add(nanos)
}

/// Parses the aggregate `cpu` line of `/proc/stat` (values in ticks).
pub(crate) fn parse_node_cpu(stat: &str, tick: Duration) -> Option<NodeCpuTimes> {
    let line = stat.lines().find(|l| l.starts_with("cpu "))?;
    let fields: Vec<u64> = line
        .split_ascii_whitespace()
        .skip(1)
        .map(|f| f.parse().ok())
        .collect::<Option<_>>()?;
    Some(NodeCpuTimes {
        total: ticks(fields.iter().fold(0u64, |a, &b| a.saturating_add(b)), tick),
        idle: ticks(*fields.get(3)?, tick),
        iowait: ticks(fields.get(4).copied().unwrap_or(0), tick),
    })
}

pub(crate) fn read_node_cpu(procfs: &Path, tick: Duration) -> Result<NodeCpuTimes, ReadError> {
    let path = procfs.join("stat");
    let text = std::fs::read_to_string(&path).map_err(|source| ReadError::Io {
        path: path.display().to_string(),
        source,
    })?;
    parse_node_cpu(&text, tick).ok_or_else(|| ReadError::Parse {
        path: path.display().to_string(),
        message: "no parsable aggregate cpu line".into(),
    })
}

/// What `/proc/<pid>` tells about a process, read once when it is first seen.
#[derive(Clone, Debug, Default, PartialEq)]
pub(crate) struct ProcDescription {
    /// Field 22 of `stat`, in ticks; compared with the BPF start time to detect pid reuse.
    pub start_ticks: u64,
    pub comm: String,
    pub kernel_thread: bool,
    pub exe: String,
    pub cmdline: Vec<String>,
    pub cgroup_path: String,
}

/// (comm, flags, starttime) from a `/proc/<pid>/stat` line. The comm is between the first `(`
/// and the last `)` because it may itself contain parentheses and spaces.
pub(crate) fn parse_pid_stat(stat: &str) -> Option<(String, u64, u64)> {
    let open = stat.find('(')?;
    let close = stat.rfind(')')?;
    let comm = stat.get(open + 1..close)?.to_string();
    let rest: Vec<&str> = stat.get(close + 1..)?.split_ascii_whitespace().collect();
    // rest[0] is field 3 (state): field n is rest[n - 3].
    let flags = rest.get(9 - 3)?.parse().ok()?;
    let start = rest.get(22 - 3)?.parse().ok()?;
    Some((comm, flags, start))
}

/// The cgroup path to describe a process by, with the procfs source's precedence so that both
/// sources classify a process alike: a non-root v1 path of the `cpu`/`cpuacct` controller
/// (what runtimes manage on hybrid hosts), then a non-root unified path, then any other non-root
/// v1 path; failing all, the unified path, else the first.
pub(crate) fn pick_cgroup_path(cgroup: &str) -> String {
    let (mut unified, mut cpu, mut other, mut first) = (None, None, None, None);
    for line in cgroup.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_), Some(ctrl), Some(path)) = (parts.next(), parts.next(), parts.next()) else {
            continue;
        };
        first.get_or_insert(path);
        let non_root = !path.is_empty() && path != "/";
        if ctrl.is_empty() {
            unified.get_or_insert(path);
        } else if non_root && ctrl.split(',').any(|c| c == "cpu" || c == "cpuacct") {
            cpu.get_or_insert(path);
        } else if non_root {
            other.get_or_insert(path);
        }
    }
    let unified_non_root = unified.filter(|p| !p.is_empty() && *p != "/");
    cpu.or(unified_non_root)
        .or(other)
        .or(unified)
        .or(first)
        .unwrap_or_default()
        .to_string()
}

/// Reads `stat`, `exe`, `cmdline` and `cgroup` of `pid`; `None` when it is gone or unreadable.
pub(crate) fn describe(procfs: &Path, pid: u32) -> Option<ProcDescription> {
    let dir = procfs.join(pid.to_string());
    let stat = std::fs::read_to_string(dir.join("stat")).ok()?;
    let (comm, flags, start_ticks) = parse_pid_stat(&stat)?;
    let kernel_thread = flags & PF_KTHREAD != 0;
    let (exe, cmdline) = if kernel_thread {
        (String::new(), Vec::new())
    } else {
        let exe = std::fs::read_link(dir.join("exe"))
            .map(|p| p.to_string_lossy().into_owned())
            .unwrap_or_default();
        let cmdline = std::fs::read(dir.join("cmdline"))
            .map(|raw| {
                raw.split(|&b| b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect()
            })
            .unwrap_or_default();
        (exe, cmdline)
    };
    let cgroup_path = std::fs::read_to_string(dir.join("cgroup"))
        .map(|c| pick_cgroup_path(&c))
        .unwrap_or_default();
    Some(ProcDescription {
        start_ticks,
        comm,
        kernel_thread,
        exe,
        cmdline,
        cgroup_path,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TICK: Duration = Duration::from_millis(10);

    #[test]
    fn node_cpu_sums_every_field() {
        let stat = "cpu  10 1 5 100 4 1 1 0 0 0\ncpu0 5 0 2 50 2 0 0 0 0 0\n";
        let n = parse_node_cpu(stat, TICK).unwrap();
        assert_eq!(n.total, Duration::from_millis(1220));
        assert_eq!(n.idle, Duration::from_secs(1));
        assert_eq!(n.iowait, Duration::from_millis(40));
        assert!(parse_node_cpu("intr 1\n", TICK).is_none());
        assert!(parse_node_cpu("cpu  1 x\n", TICK).is_none());
    }

    #[test]
    fn pid_stat_handles_odd_comms() {
        let mut fields = vec!["S"; 50];
        fields[9 - 3] = "4194560";
        fields[22 - 3] = "12345";
        let line = format!("77 (a) b (c)) {}", fields.join(" "));
        let (comm, flags, start) = parse_pid_stat(&line).unwrap();
        assert_eq!(comm, "a) b (c)");
        assert_eq!(flags, 4194560);
        assert_eq!(start, 12345);
        assert!(parse_pid_stat("77 (x) S 1").is_none());
    }

    #[test]
    fn cgroup_path_follows_the_procfs_precedence() {
        assert_eq!(
            pick_cgroup_path("0::/kubepods/pod1/abc\n"),
            "/kubepods/pod1/abc"
        );
        let hybrid = "4:memory:/m\n3:cpu,cpuacct:/docker/ff\n2:pids:/\n0::/system.slice/x\n";
        assert_eq!(pick_cgroup_path(hybrid), "/docker/ff");
        assert_eq!(pick_cgroup_path("4:memory:/m\n0::/u\n"), "/u");
        assert_eq!(pick_cgroup_path("4:memory:/m\n0::/\n"), "/m");
        assert_eq!(pick_cgroup_path("2:pids:/\n0::/\n"), "/");
        assert_eq!(pick_cgroup_path("1:name=systemd:/\n"), "/");
        assert_eq!(pick_cgroup_path("garbage"), "");
    }

    #[test]
    fn flooring_to_ticks() {
        assert_eq!(
            floor_to_tick(Duration::from_nanos(1_239_999_999), TICK),
            Duration::from_millis(1230)
        );
    }
}

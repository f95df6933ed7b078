//! Pure parsers for the procfs files the source reads. They take bytes, never panic, and return
//! `None` for anything they do not understand, so a malformed line never becomes a number.

use std::time::Duration;

/// The fields of `/proc/<pid>/stat` the source uses.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct PidStat<'a> {
    pub comm: &'a [u8],
    /// The thread has ended: a zombie (`Z`) or being reaped (`X`, `x`).
    pub ended: bool,
    /// The thread is not running nor runnable: asleep (`S`, `I`) or stopped (`T`, `t`). It
    /// must run again to end, all of its exit then. (`D` is left out: a thread may wait in it
    /// partway through its exit.)
    pub asleep: bool,
    pub flags: u64,
    pub utime: u64,
    pub stime: u64,
    /// `num_threads`: the group's threads, an ended leader among them until the group ends.
    pub threads: u64,
    pub start_time: u64,
}

impl PidStat<'_> {
    /// The main thread is exiting or has ended (`PF_EXITING`, `Z`/`X`). From here on the
    /// kernel shows it in the root of every v1 hierarchy of its `cgroup` file
    /// (`proc_cgroup_show`), so that file no longer says where it ran; the unified line does.
    pub(crate) fn leader_leaving(&self) -> bool {
        self.ended || self.flags & PF_EXITING != 0
    }

    /// The whole group is in its exit: its main thread is leaving and no other thread is left
    /// (`num_threads` 1).
    pub(crate) fn group_ending(&self) -> bool {
        self.leader_leaving() && self.threads <= 1
    }

    /// What the main thread's files can tell of the process (see [`Leader`]).
    pub(crate) fn leader(&self) -> Leader {
        if self.leader_leaving() && self.threads > 1 {
            Leader::LeftOthers
        } else if self.ended {
            Leader::Ended
        } else {
            Leader::Live
        }
    }
}

/// What a process's main thread can tell of it, from its `stat`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Leader {
    /// Alive (or in its exit, the last thread of its group): its files describe the process.
    Live,
    /// Ended, the last of its group: `exe` and `cmdline` are read through the memory map it let
    /// go at exit, so they read empty.
    Ended,
    /// Leaving while other threads run on: empty `exe` and `cmdline` once it ended, the root
    /// in its v1 cgroup lines from its exit on. A live thread's files describe the process.
    LeftOthers,
}

/// `PF_KTHREAD` from the kernel's `include/linux/sched.h`.
pub(crate) const PF_KTHREAD: u64 = 0x0020_0000;
/// `PF_EXITING` from the same header: the thread has begun its exit, before it is a zombie.
pub(crate) const PF_EXITING: u64 = 0x0000_0004;

/// Parses `/proc/<pid>/stat`. A comm may hold spaces and parentheses (`(a) b)`), so the fields
/// start after the LAST `)`: what the kernel writes after the comm never contains one.
pub(crate) fn parse_pid_stat(line: &[u8]) -> Option<PidStat<'_>> {
    let open = line.iter().position(|&b| b == b'(')?;
    let close = line.iter().rposition(|&b| b == b')')?;
    let comm = line.get(open + 1..close)?;
    let mut fields = line
        .get(close + 1..)?
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty());
    // `fields` starts at field 3 (state); the numbers are the man page's 1-based field numbers.
    let state = fields.next()?;
    let ended = matches!(state, b"Z" | b"X" | b"x");
    let asleep = matches!(state, b"S" | b"I" | b"T" | b"t");
    let flags = parse_u64(fields.nth(9 - 4)?)?;
    let utime = parse_u64(fields.nth(14 - 9 - 1)?)?;
    let stime = parse_u64(fields.next()?)?;
    let threads = parse_u64(fields.nth(20 - 15 - 1)?)?;
    let start_time = parse_u64(fields.nth(22 - 20 - 1)?)?;
    Some(PidStat {
        comm,
        ended,
        asleep,
        flags,
        utime,
        stime,
        threads,
        start_time,
    })
}

/// The `cpu` line of `/proc/stat`, in clock ticks.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuLine {
    /// user + nice + system + idle + iowait + irq + softirq + steal. guest and guest_nice are
    /// left out because the kernel already counts them in user and nice.
    pub total: u64,
    pub idle: u64,
    pub iowait: u64,
}

/// Finds the aggregate `cpu` line in `/proc/stat` content and sums it.
pub(crate) fn parse_cpu_line(content: &[u8]) -> Option<CpuLine> {
    let line = content
        .split(|&b| b == b'\n')
        .find(|l| l.starts_with(b"cpu ") || l.starts_with(b"cpu\t"))?;
    let mut values = [0u64; 8];
    let mut count = 0;
    for field in line
        .get(3..)?
        .split(u8::is_ascii_whitespace)
        .filter(|f| !f.is_empty())
        .take(values.len())
    {
        *values.get_mut(count)? = parse_u64(field)?;
        count += 1;
    }
    // user, nice, system, idle exist on every kernel; later fields were added over time.
    if count < 4 {
        return None;
    }
    Some(CpuLine {
        total: values.iter().try_fold(0u64, |acc, v| acc.checked_add(*v))?,
        idle: values[3],
        iowait: values[4],
    })
}

/// The `processes` line of `/proc/stat`: tasks (processes and threads) the kernel has created
/// since boot. `None` when the line is missing or odd.
pub(crate) fn parse_forks(content: &[u8]) -> Option<u64> {
    parse_stat_count(content, b"processes ")
}

/// The count on the line of `/proc/stat` that starts with `name` (`ctxt `, `processes `).
pub(crate) fn parse_stat_count(content: &[u8], name: &[u8]) -> Option<u64> {
    let line = content
        .split(|&b| b == b'\n')
        .find_map(|l| l.strip_prefix(name))?;
    parse_u64(line.trim_ascii())
}

/// The last field of `/proc/loadavg` ("0.00 0.01 0.05 1/123 4567"): the last pid given out.
pub(crate) fn parse_last_pid(content: &[u8]) -> Option<u64> {
    let line = content.split(|&b| b == b'\n').next()?;
    parse_u64(
        line.split(u8::is_ascii_whitespace)
            .rfind(|f| !f.is_empty())?,
    )
}

/// First field of `/proc/uptime` ("12345.67 ..."), parsed exactly: a float would round and
/// could put a process's start time after the uptime at which it was seen.
pub(crate) fn parse_uptime(content: &[u8]) -> Option<Duration> {
    let field = content
        .split(u8::is_ascii_whitespace)
        .find(|f| !f.is_empty())?;
    let (secs, frac) = match field.iter().position(|&b| b == b'.') {
        Some(dot) => (field.get(..dot)?, field.get(dot + 1..)?),
        None => (field, &b""[..]),
    };
    let secs = parse_u64(secs)?;
    if frac.len() > 9 || !frac.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut nanos: u32 = 0;
    for i in 0..9 {
        let digit = frac.get(i).map_or(0, |d| u32::from(d - b'0'));
        nanos = nanos * 10 + digit;
    }
    Some(Duration::new(secs, nanos))
}

/// Chooses the cgroup path that identifies a process's workload from `/proc/<pid>/cgroup`.
///
/// On a pure cgroup v2 host there is one `0::/path` line. On a hybrid host (v1 controllers plus
/// the unified hierarchy) the v1 controllers are what container runtimes manage: with the
/// cgroupfs driver a container sits in `cpu,cpuacct:/docker/<id>` while its unified line still
/// shows the runtime's service (`0::/system.slice/containerd.service`). So the order is: a v1
/// line with the `cpu` or `cpuacct` controller, then the unified line, then any other v1 line,
/// each only when it is not the root; failing all, the unified path, else the first path.
pub(crate) fn select_cgroup_path(content: &str) -> &str {
    let mut unified: Option<&str> = None;
    let mut cpu: Option<&str> = None;
    let mut other: Option<&str> = None;
    let mut first: Option<&str> = None;
    for line in content.lines() {
        let mut parts = line.splitn(3, ':');
        let (Some(_id), Some(controllers), Some(path)) = (parts.next(), parts.next(), parts.next())
        else {
            if !line.is_empty() {
                tracing::debug!(line, "ignoring odd cgroup line");
            }
            continue;
        };
        first.get_or_insert(path);
        let non_root = path != "/" && !path.is_empty();
        if controllers.is_empty() {
            unified.get_or_insert(path);
        } else if non_root && controllers.split(',').any(|c| c == "cpu" || c == "cpuacct") {
            cpu.get_or_insert(path);
        } else if non_root {
            other.get_or_insert(path);
        }
    }
    let unified_non_root = unified.filter(|p| *p != "/" && !p.is_empty());
    cpu.or(unified_non_root)
        .or(other)
        .or(unified)
        .or(first)
        .unwrap_or("")
}

/// Splits `/proc/<pid>/cmdline` (NUL-separated, NUL-terminated) into arguments.
pub(crate) fn parse_cmdline(content: &[u8]) -> Vec<String> {
    let content = content.strip_suffix(b"\0").unwrap_or(content);
    if content.is_empty() {
        return Vec::new();
    }
    content
        .split(|&b| b == 0)
        .map(|arg| String::from_utf8_lossy(arg).into_owned())
        .collect()
}

/// The runtime in ns, the first of the three numbers of `/proc/<pid>/schedstat` (`<runtime>
/// <wait> <time slices>`); `None` for anything else.
pub(crate) fn parse_schedstat_runtime(content: &[u8]) -> Option<u64> {
    let line = content.strip_suffix(b"\n").unwrap_or(content);
    let mut fields = line.split(|&b| b == b' ');
    let runtime = parse_u64(fields.next()?)?;
    parse_u64(fields.next()?)?;
    parse_u64(fields.next()?)?;
    fields.next().is_none().then_some(runtime)
}

/// A pid directory name: ASCII digits only, fitting in u32.
pub(crate) fn parse_pid(name: &[u8]) -> Option<u32> {
    u32::try_from(parse_u64(name)?).ok()
}

pub(crate) fn parse_u64(digits: &[u8]) -> Option<u64> {
    if digits.is_empty() {
        return None;
    }
    digits.iter().try_fold(0u64, |acc, &b| {
        if b.is_ascii_digit() {
            acc.checked_mul(10)?.checked_add(u64::from(b - b'0'))
        } else {
            None
        }
    })
}

/// Converts clock ticks to a duration without overflow or rounding for the usual USER_HZ.
pub(crate) fn ticks_to_duration(ticks: u64, user_hz: u64) -> Duration {
    if user_hz == 0 {
        return Duration::ZERO;
    }
    let secs = ticks / user_hz;
    let rest = ticks % user_hz;
    // rest < user_hz, so rest * 1e9 overflows only for a USER_HZ above ~1.8e10.
    let nanos = rest.saturating_mul(1_000_000_000) / user_hz;
    Duration::from_secs(secs) + Duration::from_nanos(nanos)
}

/// Whole clock ticks in `d`, rounded down like the kernel's `nsec_to_clock_t` (which turns a
/// task's `start_boottime` into the start time of `/proc/<pid>/stat`); saturates at `u64::MAX`.
pub(crate) fn duration_to_ticks(d: Duration, user_hz: u64) -> u64 {
    let whole = d.as_secs().saturating_mul(user_hz);
    // subsec_nanos < 1e9, so the product fits in u128 and the quotient is below user_hz.
    let part = u128::from(d.subsec_nanos()) * u128::from(user_hz) / 1_000_000_000;
    whole.saturating_add(u64::try_from(part).unwrap_or(u64::MAX))
}

#[cfg(test)]
mod tests;

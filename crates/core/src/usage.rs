//! What usage sources report: node CPU times and per-process CPU time, read at one instant.

use std::sync::Arc;
use std::time::Duration;

use crate::workload::WorkloadIdentity;

/// Cumulative node CPU times from `/proc/stat` (all CPUs together).
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeCpuTimes {
    /// user + nice + system + idle + iowait + irq + softirq + steal of the `cpu` line (guest
    /// time is already inside user and nice, so it is not added again).
    pub total: Duration,
    pub idle: Duration,
    pub iowait: Duration,
}

impl NodeCpuTimes {
    /// Share of CPU time spent busy between two readings: (Δtotal − Δidle − Δiowait) / Δtotal,
    /// clamped to [0, 1]; zero when no time passed or the counters went backwards.
    pub fn usage_ratio_since(&self, previous: &NodeCpuTimes) -> f64 {
        let total = self.total.saturating_sub(previous.total).as_secs_f64();
        if total <= 0.0 {
            return 0.0;
        }
        let idle = self.idle.saturating_sub(previous.idle).as_secs_f64()
            + self.iowait.saturating_sub(previous.iowait).as_secs_f64();
        ((total - idle) / total).clamp(0.0, 1.0)
    }
}

/// A task's identity across reads: pids are reused, so the start time is part of the key.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ProcessKey {
    pub pid: u32,
    /// Start time after boot (`/proc/<pid>/stat` field 22).
    pub start_time: Duration,
}

/// What is read once per process: it does not change while the process lives (an `exec`
/// changes comm/exe; sources refresh the info when they notice).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ProcessInfo {
    pub comm: String,
    pub exe: String,
    pub cmdline: Vec<String>,
    /// The cgroup path of the process as in `/proc/<pid>/cgroup`: on hybrid hosts the `cpu`
    /// controller's (container runtimes with the cgroupfs driver place it there), else the
    /// unified hierarchy's, else any non-root controller's.
    pub cgroup_path: String,
    /// Kernel cgroup id (inode of the cgroup directory) when the source knows it (eBPF).
    pub cgroup_id: Option<u64>,
    pub kernel_thread: bool,
    pub workload: WorkloadIdentity,
    /// The cgroup whose CPU usage counter counts this process, as the source names it in
    /// [`UsageSnapshot::cgroups`]; `None` where the source reads no such counter for it.
    pub usage_cgroup: Option<Arc<str>>,
    /// Whether the cgroup its workload is found in has no usage counter the source can read:
    /// the time of its children that no listing shows cannot be found for it.
    pub usage_uncounted: bool,
}

#[derive(Clone, Debug, PartialEq)]
pub struct ProcessUsage {
    pub key: ProcessKey,
    /// Cumulative user + system CPU time.
    pub cpu_time: Duration,
    pub info: Arc<ProcessInfo>,
    /// The task has exited and this is its final reading (sources that see exits, like eBPF,
    /// report it once).
    pub exited: bool,
    /// Cumulative event counts, when the source measures them (eBPF, perf counters); `None`
    /// also where it could but no optional probe counts (no meter or output reads them).
    pub counters: Option<Box<TaskCounters>>,
}

/// Cumulative per-task event counts; `None` where the source cannot measure that event.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskCounters {
    pub cpu_cycles: Option<u64>,
    pub cpu_instructions: Option<u64>,
    pub cache_misses: Option<u64>,
    pub page_cache_hits: Option<u64>,
    pub irq_net_rx: Option<u64>,
    pub irq_net_tx: Option<u64>,
    pub irq_block: Option<u64>,
    pub context_switches: Option<u64>,
}

/// A cgroup's CPU usage counter (`cpuacct.usage`, cgroup2 `cpu.stat` `usage_usec`), read by
/// the source after its processes: the kernel counts there every task that ran in the cgroup,
/// also those the source never listed (a process that started and ended between two
/// snapshots, the last moments of one that ended) or listed short of their truth. The
/// attribution credits what the counter moved beyond the listed processes' CPU time to the
/// cgroup's workload as the time of its ended processes (see `attribution::remainders`).
#[derive(Clone, Debug, PartialEq)]
pub struct CgroupUsage {
    /// The cgroup, as its processes' [`ProcessInfo::usage_cgroup`] name it.
    pub cgroup: Arc<str>,
    /// CPU time used by tasks in the cgroup (less that of the sub-cgroups also listed) since
    /// the reading of it the source reported last; `None` for its first reading, a baseline.
    /// A source may leave a cgroup out of snapshots in which nothing can have ended: the next
    /// reading then covers all of them.
    pub since_last: Option<Duration>,
    /// For a baseline (`since_last` is `None`): the nearest cgroup above it that the source
    /// reads too, whose counter held this one's time until now. What this cgroup's processes
    /// were credited before its baseline is then taken as that cgroup's, whose reading counted
    /// it: a cgroup read first only after its processes were listed is not counted twice.
    pub counted_in: Option<Arc<str>>,
    /// Whom that time belongs to: the workload of the cgroup's processes (none: the node's).
    pub workload: WorkloadIdentity,
}

/// Everything a usage source saw at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct UsageSnapshot {
    /// Time since boot when the snapshot was taken (same clock as process start times).
    pub uptime: Duration,
    pub node: NodeCpuTimes,
    pub processes: Vec<ProcessUsage>,
    /// Cgroup usage counters read with the processes, where the source reads them.
    pub cgroups: Vec<CgroupUsage>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn usage_ratio_counts_iowait_as_not_busy() {
        let a = NodeCpuTimes {
            total: Duration::from_secs(100),
            idle: Duration::from_secs(50),
            iowait: Duration::from_secs(10),
        };
        let b = NodeCpuTimes {
            total: Duration::from_secs(200),
            idle: Duration::from_secs(100),
            iowait: Duration::from_secs(20),
        };
        assert!((b.usage_ratio_since(&a) - 0.4).abs() < 1e-12);
        assert_eq!(a.usage_ratio_since(&b), 0.0);
    }
}

/// One logical CPU as `/proc/cpuinfo` describes it (the `kepler_node_cpu_info` labels).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuInfo {
    pub processor: String,
    pub vendor_id: String,
    pub model_name: String,
    pub physical_id: String,
    pub core_id: String,
}

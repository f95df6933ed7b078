//! Cgroups as the usage sources see them: where the hierarchies are mounted, which cgroup
//! counts a process's CPU time, and the usage counters of those cgroups, read beside the
//! processes so that the attribution can credit to a cgroup the time of its processes that no
//! listing shows (see [`kepler_core::CgroupUsage`]).
//!
//! The counters used are those that count each task's scheduler runtime, the figure the
//! sources read per process (`/proc/<pid>/stat` rounds it to clock ticks, `schedstat` and the
//! eBPF task iterator give it in ns): cgroup v1 `cpuacct.usage` and cgroup2 `cpu.stat`
//! `usage_usec` (checked on this project's VM: a burner's `schedstat` and both counters moved
//! by the same 633,536,864 ns).

mod counters;
mod mounts;
mod names;

use std::path::{Path, PathBuf};

pub use counters::UsageCounters;
pub use mounts::{cgroup2_mount, cgroup_v1_mount};
pub use names::{Uncounted, UsageNames};

/// A hierarchy with a CPU usage counter per cgroup.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum CountingHierarchy {
    /// cgroup v1 `cpuacct` (hybrid and v1 hosts): `cpuacct.usage`, in ns. Its root's counter
    /// counts every task of the node.
    Cpuacct,
    /// cgroup2: `cpu.stat` `usage_usec`. The root's own figure is the node's tick-sampled time
    /// (another basis, interrupts included), so it is not read.
    Unified,
}

impl CountingHierarchy {
    /// The prefix of the names of its cgroups (see [`UsageNames`]).
    fn prefix(self) -> &'static str {
        match self {
            CountingHierarchy::Cpuacct => "cpuacct:",
            CountingHierarchy::Unified => "unified:",
        }
    }

    /// The hierarchy and path of a cgroup's name.
    fn split(name: &str) -> Option<(CountingHierarchy, &str)> {
        [CountingHierarchy::Cpuacct, CountingHierarchy::Unified]
            .into_iter()
            .find_map(|h| Some((h, name.strip_prefix(h.prefix())?)))
    }
}

/// Where the counting hierarchies are mounted.
///
/// A process is counted where the classifier finds its workload (the procfs source's
/// precedence): in its v1 `cpuacct` cgroup when that is not the root (runtimes with the
/// cgroupfs driver place containers only in the v1 hierarchies on hybrid hosts), else in its
/// cgroup2 cgroup when that is not the root, else in the `cpuacct` root, which counts the whole
/// node. Cgroups of the two hierarchies are taken as holding different tasks, but the `cpuacct`
/// root, which holds them all.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Counting {
    pub cpuacct: Option<PathBuf>,
    pub unified: Option<PathBuf>,
}

impl Counting {
    /// The counting hierarchies a `mountinfo` file shows; `None` with neither.
    pub fn from_mountinfo(mountinfo: &str) -> Option<Counting> {
        let counting = Counting {
            cpuacct: cgroup_v1_mount(mountinfo, "cpuacct"),
            unified: cgroup2_mount(mountinfo),
        };
        (counting.cpuacct.is_some() || counting.unified.is_some()).then_some(counting)
    }

    /// The counting hierarchies of the mounts `<procfs>/self/mountinfo` lists (the agent's own
    /// view); `None` when it lists none or cannot be read (a fixture tree without one).
    pub fn detect(procfs_root: &Path) -> Option<Counting> {
        let mountinfo = std::fs::read_to_string(procfs_root.join("self/mountinfo")).ok()?;
        Counting::from_mountinfo(&mountinfo)
    }

    fn root(&self, hierarchy: CountingHierarchy) -> Option<&Path> {
        match hierarchy {
            CountingHierarchy::Cpuacct => self.cpuacct.as_deref(),
            CountingHierarchy::Unified => self.unified.as_deref(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_hierarchies_are_found() {
        let hybrid = "24 30 0:21 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                      30 24 0:26 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n\
                      35 24 0:30 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            Counting::from_mountinfo(hybrid),
            Some(Counting {
                cpuacct: Some("/sys/fs/cgroup/cpu,cpuacct".into()),
                unified: Some("/sys/fs/cgroup/unified".into()),
            })
        );
        let v2 = "35 24 0:30 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            Counting::from_mountinfo(v2),
            Some(Counting {
                cpuacct: None,
                unified: Some("/sys/fs/cgroup".into()),
            })
        );
        assert_eq!(
            Counting::from_mountinfo("1 2 0:1 / / rw - ext4 /dev/x rw\n"),
            None
        );
        assert_eq!(Counting::detect(Path::new("/nonexistent")), None);
        assert_eq!(
            CountingHierarchy::split("unified:/a"),
            Some((CountingHierarchy::Unified, "/a"))
        );
        assert_eq!(CountingHierarchy::split("/a"), None);
    }
}

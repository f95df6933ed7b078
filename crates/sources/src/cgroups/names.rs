//! Which cgroup counts a process, from its `/proc/<pid>/cgroup`.

use std::sync::Arc;

use kepler_core::scratch::FastMap;

use super::{Counting, CountingHierarchy};

/// Distinct names kept at most; past this the table starts again (the names already handed
/// out stay valid, they are only no longer shared with new ones).
const MAX_NAMES: usize = 1 << 14;

/// Names of the cgroups that count processes (`cpuacct:<path>`, `unified:<path>`), one shared
/// `Arc` per cgroup: processes of one cgroup then carry the same name, compared and hashed once
/// per cgroup.
#[derive(Debug)]
pub struct UsageNames {
    cpuacct: bool,
    unified: bool,
    interned: FastMap<String, Arc<str>>,
    scratch: String,
}

impl UsageNames {
    /// Names in the hierarchies `counting` has mounted.
    pub fn new(counting: &Counting) -> Self {
        UsageNames {
            cpuacct: counting.cpuacct.is_some(),
            unified: counting.unified.is_some(),
            interned: FastMap::default(),
            scratch: String::new(),
        }
    }

    /// The cgroup that counts the process whose `/proc/<pid>/cgroup` reads `content` (see
    /// [`Counting`] for which): `Ok(None)` when the file names none (cgroup2's root);
    /// [`Uncounted`] when no counter read here holds its cgroup's time apart: it sits in a v1
    /// `cpu` cgroup of its own (where its workload is found) that no `cpuacct` cgroup matches
    /// (a host that mounts `cpu` and `cpuacct` apart and uses only the first, as this
    /// project's VM's tests do), or its paths lie outside the agent's cgroup namespace
    /// (`/..`: an agent in a private cgroup namespace sees no other cgroup's counter).
    pub fn of(&mut self, content: &str) -> Result<Option<Arc<str>>, Uncounted> {
        let (mut cpuacct, mut cpu, mut unified) = (None, None, None);
        for line in content.lines() {
            let mut parts = line.splitn(3, ':');
            let (Some(_id), Some(controllers), Some(path)) =
                (parts.next(), parts.next(), parts.next())
            else {
                continue;
            };
            if controllers.is_empty() {
                unified.get_or_insert(path);
            } else if controllers.split(',').any(|c| c == "cpuacct") {
                cpuacct.get_or_insert(path);
            } else if controllers.split(',').any(|c| c == "cpu") {
                cpu.get_or_insert(path);
            }
        }
        let outside = |path: &str| path.split('/').any(|c| c == "..");
        let usable = |path: &&str| path.starts_with('/') && !outside(path);
        let (cpuacct, unified) = (
            cpuacct.filter(|_| self.cpuacct),
            unified.filter(|_| self.unified),
        );
        // Another cgroup namespace's (the agent's own is private): none of its counters can be
        // read from here.
        let elsewhere = cpuacct.is_some_and(outside) || unified.is_some_and(outside);
        let (cpuacct, unified) = (cpuacct.filter(usable), unified.filter(usable));
        if cpu.is_some_and(|p| p != "/") && cpu != cpuacct {
            return Err(Uncounted);
        }
        let (hierarchy, path) = match (cpuacct, unified) {
            (Some(p), _) if p != "/" => (CountingHierarchy::Cpuacct, p),
            (_, Some(p)) if p != "/" => (CountingHierarchy::Unified, p),
            (Some(root), _) => (CountingHierarchy::Cpuacct, root),
            _ if elsewhere => return Err(Uncounted),
            _ => return Ok(None),
        };
        self.scratch.clear();
        self.scratch.push_str(hierarchy.prefix());
        self.scratch.push_str(path);
        if let Some(name) = self.interned.get(&self.scratch) {
            return Ok(Some(name.clone()));
        }
        if self.interned.len() >= MAX_NAMES {
            self.interned.clear();
        }
        let name: Arc<str> = Arc::from(self.scratch.as_str());
        self.interned.insert(self.scratch.clone(), name.clone());
        Ok(Some(name))
    }
}

/// A process whose workload's cgroup has no usage counter here (see [`UsageNames::of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Uncounted;

#[cfg(test)]
mod tests {
    use super::*;

    /// A container of the cgroupfs driver on a hybrid host: in the v1 hierarchies only.
    const CGROUPFS: &str =
        "12:cpu,cpuacct:/docker/abc\n4:memory:/docker/abc\n0::/system.slice/containerd.service\n";
    /// This project's VM: v1 controllers at their roots, a cgroup2 cgroup of its own.
    const UNIFIED_ONLY: &str = "3:cpuset:/\n2:cpuacct:/\n1:cpu:/\n0::/bench/a\n";
    const ROOTS: &str = "2:cpuacct:/\n0::/\n";

    fn both() -> Counting {
        Counting {
            cpuacct: Some("/c".into()),
            unified: Some("/u".into()),
        }
    }

    fn unified_only() -> Counting {
        Counting {
            cpuacct: None,
            unified: Some("/u".into()),
        }
    }

    #[test]
    fn a_process_is_counted_where_its_workload_is_found() {
        let mut hybrid = UsageNames::new(&both());
        assert_eq!(
            hybrid.of(CGROUPFS).unwrap().as_deref(),
            Some("cpuacct:/docker/abc")
        );
        assert_eq!(
            hybrid.of(UNIFIED_ONLY).unwrap().as_deref(),
            Some("unified:/bench/a")
        );
        // The root of cpuacct counts every task: processes there are counted by it.
        assert_eq!(hybrid.of(ROOTS).unwrap().as_deref(), Some("cpuacct:/"));
        let mut v2 = UsageNames::new(&unified_only());
        assert_eq!(
            v2.of(CGROUPFS).unwrap().as_deref(),
            Some("unified:/system.slice/containerd.service")
        );
        assert_eq!(
            v2.of(ROOTS),
            Ok(None),
            "cgroup2's root counts another basis"
        );
    }

    #[test]
    fn a_cpu_cgroup_without_its_cpuacct_one_is_uncounted() {
        let mut hybrid = UsageNames::new(&both());
        // `cpu` mounted apart from `cpuacct`, the process in a `cpu` cgroup only.
        assert_eq!(
            hybrid.of("2:cpuacct:/\n1:cpu:/docker/abc\n0::/\n"),
            Err(Uncounted)
        );
        // The same path in both: counted in cpuacct.
        assert_eq!(
            hybrid
                .of("2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/\n")
                .unwrap()
                .as_deref(),
            Some("cpuacct:/docker/abc")
        );
        // At the root of cpu: nothing of its own there.
        assert_eq!(
            hybrid.of(UNIFIED_ONLY).unwrap().as_deref(),
            Some("unified:/bench/a")
        );
    }

    #[test]
    fn odd_lines_name_nothing_and_paths_outside_the_namespace_are_uncounted() {
        let mut v2 = UsageNames::new(&unified_only());
        assert_eq!(v2.of("0::/../../kubepods/pod1/c1\n"), Err(Uncounted));
        assert_eq!(v2.of("0::relative\n"), Ok(None));
        assert_eq!(v2.of("garbage\n\n::\n"), Ok(None));
        assert_eq!(v2.of(""), Ok(None));
        assert_eq!(
            v2.of("x:y\n0::/ok\n").unwrap().as_deref(),
            Some("unified:/ok")
        );
        let mut hybrid = UsageNames::new(&both());
        // Outside in cpuacct: counted in the cgroup2 cgroup instead.
        assert_eq!(
            hybrid.of("2:cpuacct:/../x\n0::/ok\n").unwrap().as_deref(),
            Some("unified:/ok")
        );
    }

    #[test]
    fn processes_of_one_cgroup_share_its_name() {
        let mut v2 = UsageNames::new(&unified_only());
        let a = v2.of("0::/a\n").unwrap().unwrap();
        let b = v2.of("1:name=systemd:/x\n0::/a\n").unwrap().unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &v2.of("0::/b\n").unwrap().unwrap()));
    }
}

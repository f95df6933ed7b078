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
    /// [`Counting`] for which): `None` when the file names none, or its path lies outside the
    /// agent's cgroup namespace (`/..`).
    pub fn of(&mut self, content: &str) -> Option<Arc<str>> {
        let (mut cpuacct, mut unified) = (None, None);
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
            }
        }
        let usable = |path: &&str| path.starts_with('/') && !path.split('/').any(|c| c == "..");
        let cpuacct = cpuacct.filter(|_| self.cpuacct).filter(usable);
        let unified = unified.filter(|_| self.unified).filter(usable);
        let (hierarchy, path) = match (cpuacct, unified) {
            (Some(p), _) if p != "/" => (CountingHierarchy::Cpuacct, p),
            (_, Some(p)) if p != "/" => (CountingHierarchy::Unified, p),
            (Some(root), _) => (CountingHierarchy::Cpuacct, root),
            _ => return None,
        };
        self.scratch.clear();
        self.scratch.push_str(hierarchy.prefix());
        self.scratch.push_str(path);
        if let Some(name) = self.interned.get(&self.scratch) {
            return Some(name.clone());
        }
        if self.interned.len() >= MAX_NAMES {
            self.interned.clear();
        }
        let name: Arc<str> = Arc::from(self.scratch.as_str());
        self.interned.insert(self.scratch.clone(), name.clone());
        Some(name)
    }
}

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
        assert_eq!(hybrid.of(CGROUPFS).as_deref(), Some("cpuacct:/docker/abc"));
        assert_eq!(hybrid.of(UNIFIED_ONLY).as_deref(), Some("unified:/bench/a"));
        // The root of cpuacct counts every task: processes there are counted by it.
        assert_eq!(hybrid.of(ROOTS).as_deref(), Some("cpuacct:/"));
        let mut v2 = UsageNames::new(&unified_only());
        assert_eq!(
            v2.of(CGROUPFS).as_deref(),
            Some("unified:/system.slice/containerd.service")
        );
        assert_eq!(v2.of(ROOTS), None, "cgroup2's root counts another basis");
    }

    #[test]
    fn odd_lines_and_paths_outside_the_namespace_name_nothing() {
        let mut v2 = UsageNames::new(&unified_only());
        assert_eq!(v2.of("0::/../../kubepods/pod1/c1\n"), None);
        assert_eq!(v2.of("0::relative\n"), None);
        assert_eq!(v2.of("garbage\n\n::\n"), None);
        assert_eq!(v2.of(""), None);
        assert_eq!(v2.of("x:y\n0::/ok\n").as_deref(), Some("unified:/ok"));
        let mut hybrid = UsageNames::new(&both());
        // Outside in cpuacct: counted in the cgroup2 cgroup instead.
        assert_eq!(
            hybrid.of("2:cpuacct:/../x\n0::/ok\n").as_deref(),
            Some("unified:/ok")
        );
    }

    #[test]
    fn processes_of_one_cgroup_share_its_name() {
        let mut v2 = UsageNames::new(&unified_only());
        let a = v2.of("0::/a\n").unwrap();
        let b = v2.of("1:name=systemd:/x\n0::/a\n").unwrap();
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &v2.of("0::/b\n").unwrap()));
    }
}

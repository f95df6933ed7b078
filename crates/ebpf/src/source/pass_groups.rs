//! With exits counted through the cgroups: the groups of the last whole pass, each with the
//! cgroup that counts it. Quiet processes are never described, but their cgroups' counters
//! hold their ended children, so every group's cgroup is read (from `/proc/<pid>/cgroup`, once
//! per group) and noted for the counters. Kept compact (24 bytes a group, sorted by tgid):
//! with 1,000 processes waking every second a table of each group's name cost ~100 KB.

use std::sync::Arc;

use kepler_core::WorkloadIdentity;
use kepler_sources::cgroups::Uncounted;

use crate::live_table::LiveTable;
use crate::reconcile::FastMap;

/// The cgroup that counts a group, as read from its `/proc/<pid>/cgroup`.
pub(super) type GroupCgroup = Result<Option<Arc<str>>, Uncounted>;

/// `Group::cgroup` for a group counted nowhere, and for one whose workload's cgroup has no
/// counter here.
const NOWHERE: u32 = u32::MAX;
const UNCOUNTED: u32 = u32::MAX - 1;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Group {
    tgid: u32,
    /// Index into `PassGroups::names`, or [`NOWHERE`] or [`UNCOUNTED`].
    cgroup: u32,
    /// What the cgroup was read for: the group (its leader's start) and its cgroup2 cgroup
    /// then (a runtime moves a container's first process after forking it).
    start_ns: u64,
    cgroup_id: u64,
}

/// A cgroup that counts groups, and the workload its path names.
struct Named {
    name: Arc<str>,
    workload: WorkloadIdentity,
}

#[derive(Default)]
pub(super) struct PassGroups {
    groups: Vec<Group>,
    next: Vec<Group>,
    names: Vec<Named>,
    by_name: FastMap<Arc<str>, u32>,
}

impl PassGroups {
    /// The tgids of the last pass that `live` (a whole pass since) does not hold.
    pub(super) fn gone(&self, live: &LiveTable) -> Vec<u32> {
        self.groups
            .iter()
            .map(|g| g.tgid)
            .filter(|tgid| !live.contains_key(tgid))
            .collect()
    }

    /// Takes `live` as the last pass: a group met before keeps its cgroup, another one's is
    /// `read` (a new name's workload is what `classify` makes of its path).
    pub(super) fn update(
        &mut self,
        live: &LiveTable,
        mut read: impl FnMut(u32) -> GroupCgroup,
        mut classify: impl FnMut(&str) -> WorkloadIdentity,
    ) {
        let mut next = std::mem::take(&mut self.next);
        next.clear();
        next.extend(live.iter().map(|(tgid, t)| Group {
            tgid: *tgid,
            cgroup: NOWHERE,
            start_ns: t.start_ns,
            cgroup_id: t.cgroup_id,
        }));
        next.sort_unstable_by_key(|g| g.tgid);
        for g in &mut next {
            let known = self
                .groups
                .binary_search_by_key(&g.tgid, |old| old.tgid)
                .ok()
                .and_then(|i| self.groups.get(i))
                .filter(|old| old.start_ns == g.start_ns && old.cgroup_id == g.cgroup_id);
            g.cgroup = match known {
                Some(old) => old.cgroup,
                None => match read(g.tgid) {
                    Ok(Some(name)) => self.intern(name, &mut classify),
                    Ok(None) => NOWHERE,
                    Err(Uncounted) => UNCOUNTED,
                },
            };
        }
        self.next = std::mem::replace(&mut self.groups, next);
        self.compact();
    }

    /// The cgroups that count the groups, each once, with the workload its path names.
    pub(super) fn cgroups(&self) -> impl Iterator<Item = (&Arc<str>, &WorkloadIdentity)> {
        self.names
            .iter()
            .zip(self.names_in_use())
            .filter(|(_, counting)| *counting)
            .map(|(named, _)| (&named.name, &named.workload))
    }

    /// Whether a group of the last pass sits in a cgroup without a counter here.
    pub(super) fn any_uncounted(&self) -> bool {
        self.groups.iter().any(|g| g.cgroup == UNCOUNTED)
    }

    pub(super) fn clear(&mut self) {
        *self = PassGroups::default();
    }

    fn intern(
        &mut self,
        name: Arc<str>,
        classify: &mut impl FnMut(&str) -> WorkloadIdentity,
    ) -> u32 {
        if let Some(&i) = self.by_name.get(&name) {
            return i;
        }
        let Ok(i) = u32::try_from(self.names.len()) else {
            return NOWHERE;
        };
        if i >= UNCOUNTED {
            return NOWHERE;
        }
        let path = name.split_once(':').map_or("", |(_, path)| path);
        let workload = classify(path);
        self.by_name.insert(name.clone(), i);
        self.names.push(Named { name, workload });
        i
    }

    /// Per name, whether a group of the last pass is counted in it.
    fn names_in_use(&self) -> Vec<bool> {
        let mut used = vec![false; self.names.len()];
        for g in &self.groups {
            if let Some(u) = usize::try_from(g.cgroup).ok().and_then(|i| used.get_mut(i)) {
                *u = true;
            }
        }
        used
    }

    /// Drops the names no group uses any more, once they are most of the table.
    fn compact(&mut self) {
        let used = self.names_in_use();
        let in_use = used.iter().filter(|u| **u).count();
        if self.names.len() <= 2 * in_use + 64 {
            return;
        }
        let mut renumbered = vec![NOWHERE; self.names.len()];
        let old = std::mem::take(&mut self.names);
        self.by_name.clear();
        for (i, named) in old.into_iter().enumerate() {
            if used.get(i).copied().unwrap_or(false) {
                let n = self.names.len() as u32;
                if let Some(r) = renumbered.get_mut(i) {
                    *r = n;
                }
                self.by_name.insert(named.name.clone(), n);
                self.names.push(named);
            }
        }
        for g in &mut self.groups {
            if let Some(&n) = usize::try_from(g.cgroup)
                .ok()
                .and_then(|i| renumbered.get(i))
            {
                g.cgroup = n;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::abi::TaskTotals;

    fn live(groups: &[(u32, u64, u64)]) -> LiveTable {
        groups
            .iter()
            .map(|&(tgid, start_ns, cgroup_id)| {
                let t = TaskTotals {
                    start_ns,
                    cgroup_id,
                    ..TaskTotals::default()
                };
                (tgid, t)
            })
            .collect()
    }

    fn named(p: &PassGroups) -> Vec<String> {
        let mut v: Vec<String> = p.cgroups().map(|(n, _)| n.to_string()).collect();
        v.sort();
        v
    }

    #[test]
    fn a_group_is_read_once_until_it_changes() {
        let mut p = PassGroups::default();
        let mut reads = Vec::new();
        let mut read = |tgid: u32| -> GroupCgroup {
            reads.push(tgid);
            match tgid {
                3 => Err(Uncounted),
                4 => Ok(None),
                _ => Ok(Some(Arc::from(format!("unified:/c{}", tgid % 2).as_str()))),
            }
        };
        let classify = |path: &str| WorkloadIdentity {
            process_type: if path == "/c1" {
                kepler_core::ProcessType::Container
            } else {
                kepler_core::ProcessType::Regular
            },
            ..WorkloadIdentity::default()
        };
        let first = live(&[(1, 10, 100), (2, 20, 100), (3, 30, 100), (4, 40, 100)]);
        p.update(&first, &mut read, classify);
        assert_eq!(named(&p), ["unified:/c0", "unified:/c1"]);
        assert!(p.any_uncounted());
        let c1 = p.cgroups().find(|(n, _)| &***n == "unified:/c1").unwrap().1;
        assert_eq!(c1.process_type, kepler_core::ProcessType::Container);
        // Met again alike: not read again. 1 is another process now (a reused tgid), 2 moved
        // to another cgroup, 3 is gone, 5 is new.
        let second = live(&[(1, 11, 100), (2, 20, 101), (4, 40, 100), (5, 50, 100)]);
        assert_eq!(p.gone(&second), [3]);
        p.update(&second, &mut read, classify);
        assert_eq!(reads, [1, 2, 3, 4, 1, 2, 5]);
        assert!(!p.any_uncounted());
        // Three groups in two cgroups: each cgroup once.
        assert_eq!(named(&p), ["unified:/c0", "unified:/c1"]);
        p.clear();
        assert_eq!(p.cgroups().count(), 0);
    }

    #[test]
    fn names_no_group_uses_go() {
        let mut p = PassGroups::default();
        let classify = |_: &str| WorkloadIdentity::default();
        // 200 groups in cgroups of their own, then one.
        let many: Vec<(u32, u64, u64)> = (0..200).map(|i| (i, 1, u64::from(i))).collect();
        p.update(
            &live(&many),
            |tgid| Ok(Some(Arc::from(format!("unified:/g{tgid}").as_str()))),
            classify,
        );
        assert_eq!(p.names.len(), 200);
        p.update(
            &live(&[(7, 1, 7), (500, 1, 500)]),
            |tgid| Ok(Some(Arc::from(format!("unified:/g{tgid}").as_str()))),
            classify,
        );
        assert_eq!(p.names.len(), 2);
        assert_eq!(named(&p), ["unified:/g500", "unified:/g7"]);
    }
}

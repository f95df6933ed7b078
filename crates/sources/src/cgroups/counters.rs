//! The usage counters of the cgroups that count the listed processes, read together once per
//! snapshot in which a task may have ended.

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::scratch::FastMap;
use kepler_core::{CgroupUsage, ProcessUsage, WorkloadIdentity};

use super::{Counting, CountingHierarchy};
use crate::procfs::read::Buffer;

/// Counter files held open at most, each a descriptor and a page of kernel memory while held;
/// beyond, a cgroup's counter is read by path (an open and a close more).
const MAX_HELD: usize = 256;

/// One cgroup whose counter is read.
#[derive(Debug, Default)]
struct Tracked {
    file: Option<File>,
    /// The counter (ns) at the reading last reported.
    last: Option<u64>,
    /// This read's counter, and what it moved since `last` less its tracked children's part.
    now: Option<u64>,
    moved: Option<i128>,
    /// What its children's counters moved beyond its own at the readings before (read a moment
    /// after it), taken from its next movement rather than reported as less than nothing.
    owed: i128,
    /// The nearest cgroup above it that is read too: its counter holds this one's.
    parent: Option<Arc<str>>,
    workload: WorkloadIdentity,
    /// Whether a process of this snapshot is counted in it.
    listed: bool,
}

/// The counters of the cgroups that count a source's listed processes (see
/// [`kepler_core::CgroupUsage`]). A cgroup is read right after the listing that first counts a
/// process in it (a baseline, [`Self::read_new`]), then before every listing after which a
/// task may have ended, and once more after its last process went (its last moments).
#[derive(Debug)]
pub struct UsageCounters {
    counting: Counting,
    tracked: FastMap<Arc<str>, Tracked>,
    /// Whether a cgroup came or went since the parents were worked out.
    tree_changed: bool,
    /// Whether a cgroup was noted since the last read: [`Self::read_new`] reads its baseline.
    added: bool,
    /// The node's fork count at the last read, and whether a listed process went since: while
    /// neither changes no task can have ended (see [`Self::read_if_ended`]).
    read_at_forks: Option<u64>,
    gone_since_read: bool,
    held: usize,
    held_cap: usize,
    path: PathBuf,
    buf: Buffer,
    /// Each read child's movement and its parent, reused by each read.
    moves: Vec<(Arc<str>, i128)>,
    /// Reads that failed for another reason than the cgroup being gone, since the start.
    unreadable: u64,
}

impl UsageCounters {
    pub fn new(counting: Counting) -> Self {
        let held_cap = crate::bounded::open_file_limit()
            .map(|limit| usize::try_from(limit / 16).unwrap_or(usize::MAX))
            .unwrap_or(0)
            .min(MAX_HELD);
        UsageCounters {
            counting,
            tracked: FastMap::default(),
            tree_changed: false,
            added: false,
            read_at_forks: None,
            gone_since_read: false,
            held: 0,
            held_cap,
            path: PathBuf::new(),
            buf: Buffer::new(),
            moves: Vec::new(),
            unreadable: 0,
        }
    }

    /// Cgroups read now.
    pub fn tracked(&self) -> usize {
        self.tracked.len()
    }

    /// Counter reads that failed other than because the cgroup was gone (malformed content,
    /// no permission), since the start.
    pub fn unreadable(&self) -> u64 {
        self.unreadable
    }

    /// Appends to `out` the readings of the counters of every cgroup that counted one of the
    /// processes last noted ([`Self::note_listed`]), when a task may have ended since the last
    /// read: the node's fork count `forks` moved (`None`: not known), or a listed process went
    /// ([`Self::note_gone`]). Otherwise nothing: the next reading then covers this snapshot too.
    ///
    /// Called before the processes are read: a process that starts after this read is then
    /// not in the counters yet, and counts fully when it is first listed; one started before
    /// it and listed later could be counted twice for the moments between. Each reading is
    /// what the counter moved since its last, less what its read children's counters moved
    /// (they hold their own processes). A cgroup whose processes were all gone at the last
    /// listing is read this once more (its processes' last moments), then dropped.
    pub fn read_if_ended(&mut self, forks: Option<u64>, out: &mut Vec<CgroupUsage>) {
        let may_have_ended = forks.is_none() || forks != self.read_at_forks || self.gone_since_read;
        if self.read(may_have_ended, out) {
            self.counted_at(forks);
        }
    }

    /// Notes that a listed process went: the next [`Self::read_if_ended`] reads.
    pub fn note_gone(&mut self) {
        self.gone_since_read = true;
    }

    /// Notes that every counter read has just been read at fork count `forks` (baselines taken
    /// by [`Self::read_new`] when a source starts counting).
    pub fn counted_at(&mut self, forks: Option<u64>) {
        self.read_at_forks = forks;
        self.gone_since_read = false;
    }

    /// [`Self::read_if_ended`] with whether a task may have ended given; true when it read.
    fn read(&mut self, may_have_ended: bool, out: &mut Vec<CgroupUsage>) -> bool {
        if !may_have_ended {
            return false;
        }
        self.added = false;
        self.find_parents_if_changed();
        self.read_counters(false);
        self.take_children_out();
        for (name, t) in &mut self.tracked {
            let Some(now) = t.now else {
                continue;
            };
            let since_last = t.moved.map(|moved| {
                let moved = moved - std::mem::take(&mut t.owed);
                if moved < 0 {
                    t.owed = -moved;
                }
                Duration::from_nanos(u64::try_from(moved.max(0)).unwrap_or(u64::MAX))
            });
            out.push(CgroupUsage {
                cgroup: name.clone(),
                counted_in: since_last.is_none().then(|| t.parent.clone()).flatten(),
                since_last,
                workload: t.workload.clone(),
            });
            t.last = Some(now);
        }
        let before = self.tracked.len();
        self.tracked.retain(|_, t| t.listed && t.now.is_some());
        if self.tracked.len() != before {
            self.tree_changed = true;
            self.held = self.tracked.values().filter(|t| t.file.is_some()).count();
        }
        true
    }

    /// Appends to `out` the baselines of the cgroups noted since the last read that have none:
    /// read right after the listing that first counted a process in them, each naming the read
    /// cgroup above it whose counter held its time until now ([`CgroupUsage::counted_in`]).
    /// What that cgroup then credits twice is the new one's time between the listing's read of
    /// its processes and this read: moments.
    pub fn read_new(&mut self, out: &mut Vec<CgroupUsage>) {
        if !std::mem::take(&mut self.added) {
            return;
        }
        self.find_parents_if_changed();
        self.read_counters(true);
        for (name, t) in &mut self.tracked {
            let (None, Some(now)) = (t.last, t.now) else {
                continue;
            };
            out.push(CgroupUsage {
                cgroup: name.clone(),
                since_last: None,
                counted_in: t.parent.clone(),
                workload: t.workload.clone(),
            });
            t.last = Some(now);
        }
    }

    /// Stops reading every cgroup: the next ones noted are read from baselines.
    pub fn forget(&mut self) {
        self.tracked.clear();
        self.held = 0;
        self.added = false;
        self.tree_changed = false;
        self.read_at_forks = None;
        self.gone_since_read = false;
    }

    /// Notes the cgroups that count this snapshot's processes, for the next [`Self::read`].
    pub fn note_listed(&mut self, processes: &[ProcessUsage]) {
        self.begin_listing();
        let mut previous: Option<&ProcessUsage> = None;
        for p in processes {
            let Some(name) = p.info.usage_cgroup.as_ref() else {
                continue;
            };
            // Listings keep a cgroup's processes together more often than not.
            let same = previous.is_some_and(|q| {
                q.info
                    .usage_cgroup
                    .as_ref()
                    .is_some_and(|n| Arc::ptr_eq(n, name))
                    && q.info.workload == p.info.workload
            });
            previous = Some(p);
            if !same {
                self.note(name, &p.info.workload);
            }
        }
    }

    /// Starts a listing: the cgroups [`Self::note`]d until the next read are those it reads
    /// again after that one.
    pub fn begin_listing(&mut self) {
        self.tracked.values_mut().for_each(|t| t.listed = false);
    }

    /// Notes that cgroup `name` counts a listed process, whose time beyond the listed
    /// processes' goes to `workload`: the workload of all its processes listed since
    /// [`Self::begin_listing`], or nobody's (the node's) when they differ.
    pub fn note(&mut self, name: &Arc<str>, workload: &WorkloadIdentity) {
        let t = match self.tracked.get_mut(name) {
            Some(t) => t,
            None => {
                self.added = true;
                self.tree_changed = true;
                self.tracked.entry(name.clone()).or_default()
            }
        };
        if !t.listed {
            t.listed = true;
            if t.workload != *workload {
                t.workload = workload.clone();
            }
        } else if t.workload != *workload && t.workload != WorkloadIdentity::default() {
            t.workload = WorkloadIdentity::default();
        }
    }

    /// Each cgroup's nearest read ancestor, after cgroups came or went.
    fn find_parents_if_changed(&mut self) {
        if std::mem::take(&mut self.tree_changed) {
            self.find_parents();
        }
    }

    fn find_parents(&mut self) {
        let parents: Vec<(Arc<str>, Option<Arc<str>>)> = self
            .tracked
            .keys()
            .map(|name| (name.clone(), nearest_ancestor(name, &self.tracked)))
            .collect();
        for (name, parent) in parents {
            if let Some(t) = self.tracked.get_mut(&name) {
                t.parent = parent;
            }
        }
    }

    /// Reads every tracked counter (`only_new`: of those without a baseline) into `now`, and
    /// what it moved since `last` into `moved`.
    fn read_counters(&mut self, only_new: bool) {
        let UsageCounters {
            counting,
            tracked,
            held,
            held_cap,
            path,
            buf,
            unreadable,
            ..
        } = self;
        for (name, t) in tracked.iter_mut() {
            if only_new && t.last.is_some() {
                continue;
            }
            let Some((hierarchy, cgroup)) = CountingHierarchy::split(name) else {
                t.now = None;
                continue;
            };
            let Some(root) = counting.root(hierarchy) else {
                t.now = None;
                continue;
            };
            path.clear();
            path.push(root);
            path.push(cgroup.trim_start_matches('/'));
            path.push(match hierarchy {
                CountingHierarchy::Cpuacct => "cpuacct.usage",
                CountingHierarchy::Unified => "cpu.stat",
            });
            if t.file.is_none() && *held < *held_cap {
                if let Ok(file) = crate::bounded::open_nonblocking(path) {
                    t.file = Some(file);
                    *held += 1;
                }
            }
            let read = match &t.file {
                Some(file) => buf.read_first_line_at(file),
                None => buf.read_all(path),
            };
            t.now = match read {
                Ok(bytes) => {
                    let value = parse_counter(hierarchy, bytes);
                    if value.is_none() {
                        *unreadable += 1;
                        tracing::warn!(path = %path.display(), "odd cgroup usage counter: not read");
                    }
                    value
                }
                Err(e) => {
                    // A removed cgroup's files fail (ENODEV held, ENOENT by path).
                    if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) {
                        *unreadable += 1;
                        tracing::debug!(path = %path.display(), error = %e, "cgroup usage counter unreadable");
                    }
                    None
                }
            };
            t.moved = match (t.last, t.now) {
                (Some(last), Some(now)) if now >= last => Some(i128::from(now - last)),
                _ => None,
            };
        }
    }

    /// Takes each read cgroup's movement out of its nearest read ancestor's.
    fn take_children_out(&mut self) {
        let mut moves = std::mem::take(&mut self.moves);
        moves.clear();
        moves.extend(
            self.tracked
                .values()
                .filter_map(|t| Some((t.parent.clone()?, t.moved?))),
        );
        for (parent, moved) in moves.drain(..) {
            if let Some(p) = self.tracked.get_mut(&parent) {
                p.moved = p.moved.map(|m| m - moved);
            }
        }
        self.moves = moves;
    }
}

/// The nearest ancestor of cgroup `name` among `tracked`: in its own hierarchy, else the
/// `cpuacct` root, which holds every task.
fn nearest_ancestor<V>(name: &str, tracked: &FastMap<Arc<str>, V>) -> Option<Arc<str>> {
    const NODE: &str = "cpuacct:/";
    let (hierarchy, mut at) = CountingHierarchy::split(name)?;
    let prefix = hierarchy.prefix();
    let mut candidate = String::with_capacity(name.len());
    while at != "/" {
        at = match at.rfind('/') {
            Some(0) => "/",
            Some(i) => at.get(..i)?,
            None => return None,
        };
        candidate.clear();
        candidate.push_str(prefix);
        candidate.push_str(at);
        if let Some((key, _)) = tracked.get_key_value(candidate.as_str()) {
            return Some(key.clone());
        }
    }
    if name == NODE {
        return None;
    }
    tracked.get_key_value(NODE).map(|(key, _)| key.clone())
}

/// A counter file's value in ns: `cpuacct.usage` is one number of ns, `cpu.stat` starts with
/// `usage_usec <µs>`.
fn parse_counter(hierarchy: CountingHierarchy, bytes: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(bytes).ok()?;
    let first = text.lines().next()?;
    match hierarchy {
        CountingHierarchy::Cpuacct => first.trim().parse().ok(),
        CountingHierarchy::Unified => first
            .strip_prefix("usage_usec ")?
            .trim()
            .parse::<u64>()
            .ok()?
            .checked_mul(1_000),
    }
}

#[cfg(test)]
mod tests;

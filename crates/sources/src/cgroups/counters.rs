//! The usage counters of the cgroups that count the listed processes, read together once per
//! snapshot in which a task may have ended, and checked before each listing for the cgroups in
//! which nothing ran ([`UsageCounters::check_quiet`]).

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

/// The fewest processes of the last listing a cgroup must count for its counter to be read
/// only to learn whether it is quiet: that read is one `pread`, as a held process's is, so it
/// pays only where it may spare several.
const QUIET_CHECK_MIN_PROCESSES: u32 = 4;

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
    /// How many processes of this snapshot are counted in it.
    listed: u32,
    /// The counter at the quiet check of the snapshot before, and whether it has not moved
    /// since (see [`UsageCounters::check_quiet`]).
    checked: Option<u64>,
    quiet: bool,
}

/// The counters of the cgroups that count a source's listed processes (see
/// [`kepler_core::CgroupUsage`]). A cgroup is read right after the listing that first counts a
/// process in it (a baseline, [`Self::read_new`]), then before every listing after which a
/// task may have ended, and once more after its last process went (its last moments).
#[derive(Debug)]
pub struct UsageCounters {
    tracked: FastMap<Arc<str>, Tracked>,
    /// Whether a cgroup came or went since the parents were worked out.
    tree_changed: bool,
    /// Whether a cgroup was noted since the last read: [`Self::read_new`] reads its baseline.
    added: bool,
    /// The node's fork count at the last read, and whether a listed process went since: while
    /// neither changes no task can have ended (see [`Self::read_if_ended`]).
    read_at_forks: Option<u64>,
    gone_since_read: bool,
    /// Whether this snapshot's [`Self::read_if_ended`] read every tracked counter, before its
    /// processes: the quiet check then needs no read of its own.
    read_this_snapshot: bool,
    reader: CounterReader,
    /// Each read child's movement and its parent, reused by each read.
    moves: Vec<(Arc<str>, i128)>,
}

/// Reads counter files, holding the first ones open.
#[derive(Debug)]
struct CounterReader {
    counting: Counting,
    held: usize,
    held_cap: usize,
    path: PathBuf,
    buf: Buffer,
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
            tracked: FastMap::default(),
            tree_changed: false,
            added: false,
            read_at_forks: None,
            gone_since_read: false,
            read_this_snapshot: false,
            reader: CounterReader {
                counting,
                held: 0,
                held_cap,
                path: PathBuf::new(),
                buf: Buffer::new(),
                unreadable: 0,
            },
            moves: Vec::new(),
        }
    }

    /// Cgroups read now.
    pub fn tracked(&self) -> usize {
        self.tracked.len()
    }

    /// Counter reads that failed other than because the cgroup was gone (malformed content,
    /// no permission), since the start.
    pub fn unreadable(&self) -> u64 {
        self.reader.unreadable
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
        self.read_this_snapshot = true;
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
        self.tracked.retain(|_, t| t.listed > 0 && t.now.is_some());
        if self.tracked.len() != before {
            self.tree_changed = true;
            self.reader.held = self.tracked.values().filter(|t| t.file.is_some()).count();
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

    /// Finds, before a listing's processes are read, the cgroups whose counter has not moved
    /// since this check in the snapshot before: no task in them ran in between, so none of
    /// their processes changed its CPU time, and none ended (an ending task runs its exit, for
    /// microseconds at least). Each [`Self::quiet`] one's processes may be taken as they were,
    /// unread. A counter read by this snapshot's [`Self::read_if_ended`] is checked as read;
    /// else one is read for the check only where it counts at least
    /// [`QUIET_CHECK_MIN_PROCESSES`] listed processes, and is not a root (the node's, never
    /// quiet). Called once per snapshot, after `read_if_ended` and before the processes: a
    /// check that skips a snapshot starts afresh.
    pub fn check_quiet(&mut self) {
        let read = std::mem::take(&mut self.read_this_snapshot);
        for (name, t) in self.tracked.iter_mut() {
            let now = if read {
                t.now
            } else if t.listed >= QUIET_CHECK_MIN_PROCESSES
                && CountingHierarchy::split(name).is_some_and(|(_, path)| path != "/")
            {
                self.reader.read(name, &mut t.file)
            } else {
                None
            };
            t.quiet = now.is_some() && now == t.checked;
            t.checked = now;
        }
    }

    /// Whether cgroup `name`'s counter has not moved since the snapshot before (see
    /// [`Self::check_quiet`]).
    pub fn quiet(&self, name: &str) -> bool {
        self.tracked.get(name).is_some_and(|t| t.quiet)
    }

    /// Stops reading every cgroup: the next ones noted are read from baselines.
    pub fn forget(&mut self) {
        self.tracked.clear();
        self.reader.held = 0;
        self.added = false;
        self.tree_changed = false;
        self.read_at_forks = None;
        self.gone_since_read = false;
        self.read_this_snapshot = false;
    }

    /// Notes the cgroups that count this snapshot's processes, for the next [`Self::read`].
    pub fn note_listed(&mut self, processes: &[ProcessUsage]) {
        self.begin_listing();
        // Listings keep a cgroup's processes together more often than not: each run of them
        // is noted once.
        let mut run: Option<(&ProcessUsage, &Arc<str>, u32)> = None;
        for p in processes {
            let Some(name) = p.info.usage_cgroup.as_ref() else {
                continue;
            };
            match &mut run {
                Some((q, n, count))
                    if Arc::ptr_eq(n, name) && q.info.workload == p.info.workload =>
                {
                    *count += 1;
                }
                _ => {
                    if let Some((q, n, count)) = run.replace((p, name, 1)) {
                        self.note_processes(n, &q.info.workload, count);
                    }
                }
            }
        }
        if let Some((q, n, count)) = run {
            self.note_processes(n, &q.info.workload, count);
        }
    }

    /// Starts a listing: the cgroups [`Self::note`]d until the next read are those it reads
    /// again after that one.
    pub fn begin_listing(&mut self) {
        self.tracked.values_mut().for_each(|t| t.listed = 0);
    }

    /// Notes that cgroup `name` counts a listed process, whose time beyond the listed
    /// processes' goes to `workload`: the workload of all its processes listed since
    /// [`Self::begin_listing`], or nobody's (the node's) when they differ.
    pub fn note(&mut self, name: &Arc<str>, workload: &WorkloadIdentity) {
        self.note_processes(name, workload, 1);
    }

    /// [`Self::note`] for `count` processes.
    fn note_processes(&mut self, name: &Arc<str>, workload: &WorkloadIdentity, count: u32) {
        let t = match self.tracked.get_mut(name) {
            Some(t) => t,
            None => {
                self.added = true;
                self.tree_changed = true;
                self.tracked.entry(name.clone()).or_default()
            }
        };
        if t.listed == 0 {
            if t.workload != *workload {
                t.workload = workload.clone();
            }
        } else if t.workload != *workload && t.workload != WorkloadIdentity::default() {
            t.workload = WorkloadIdentity::default();
        }
        t.listed = t.listed.saturating_add(count);
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
        for (name, t) in self.tracked.iter_mut() {
            if only_new && t.last.is_some() {
                continue;
            }
            t.now = self.reader.read(name, &mut t.file);
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

impl CounterReader {
    /// Cgroup `name`'s counter in ns, through `file` when held (opened and held here while
    /// the budget allows); `None` when gone or unreadable.
    fn read(&mut self, name: &str, file: &mut Option<File>) -> Option<u64> {
        let (hierarchy, cgroup) = CountingHierarchy::split(name)?;
        let root = self.counting.root(hierarchy)?;
        let path = &mut self.path;
        path.clear();
        path.push(root);
        path.push(cgroup.trim_start_matches('/'));
        path.push(match hierarchy {
            CountingHierarchy::Cpuacct => "cpuacct.usage",
            CountingHierarchy::Unified => "cpu.stat",
        });
        if file.is_none() && self.held < self.held_cap {
            if let Ok(opened) = crate::bounded::open_nonblocking(path) {
                *file = Some(opened);
                self.held += 1;
            }
        }
        let read = match file {
            Some(file) => self.buf.read_first_line_at(file),
            None => self.buf.read_all(path),
        };
        match read {
            Ok(bytes) => {
                let value = parse_counter(hierarchy, bytes);
                if value.is_none() {
                    self.unreadable += 1;
                    tracing::warn!(path = %path.display(), "odd cgroup usage counter: not read");
                }
                value
            }
            Err(e) => {
                // A removed cgroup's files fail (ENODEV held, ENOENT by path).
                if !matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENODEV)) {
                    self.unreadable += 1;
                    tracing::debug!(path = %path.display(), error = %e, "cgroup usage counter unreadable");
                }
                None
            }
        }
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

//! Processes the task iterator does not visit, read from /proc instead. This project's VM
//! kernel leaves pid 1 out of every task iterator pass (with a pid or tid parameter too), while
//! /proc and `sched_switch` see it; a kernel may have other such quirks. The source finds them
//! once, when it turns to the iterator, and reads each one's threads' scheduler runtime from
//! `/proc/<pid>/task/<tid>/schedstat`: the same count the iterator reads
//! (`se.sum_exec_runtime`), so the readings agree. The files stay open between snapshots (one
//! `pread` each, as the procfs source holds `stat` files).

use std::collections::BTreeSet;
use std::fs::File;
use std::path::{Path, PathBuf};

use kepler_sources::bounded::read_again_from_start;

use crate::reconcile::FastMap;

/// The pids in `<procfs>`.
pub(crate) fn pids(procfs: &Path) -> BTreeSet<u32> {
    let Ok(dir) = std::fs::read_dir(procfs) else {
        return BTreeSet::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect()
}

/// How many threads `pid` has (0 when gone).
pub(crate) fn threads(procfs: &Path, pid: u32) -> u64 {
    std::fs::read_dir(procfs.join(pid.to_string()).join("task")).map_or(0, |dir| dir.count() as u64)
}

/// One process's threads, with their `schedstat` files held open.
pub(crate) struct Unseen {
    pub pid: u32,
    task_dir: PathBuf,
    threads: FastMap<u32, File>,
    listed: Vec<u32>,
}

impl Unseen {
    pub(crate) fn new(procfs: &Path, pid: u32) -> Self {
        Unseen {
            pid,
            task_dir: procfs.join(pid.to_string()).join("task"),
            threads: FastMap::default(),
            listed: Vec::new(),
        }
    }

    /// What the scheduler counted for the live threads: runtime in ns and time slices (the
    /// nearest count to context switches that schedstat gives), without the leader's when
    /// `leader_ended` (a zombie leader stays listed; the other threads go when they end).
    /// `None` when the process is gone or shows no live thread.
    pub(crate) fn live_threads(&mut self, leader_ended: bool) -> Option<(u64, u64)> {
        let dir = std::fs::read_dir(&self.task_dir).ok()?;
        self.listed.clear();
        self.listed.extend(
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()),
        );
        let listed = &self.listed;
        // Threads gone since: their final runtime is in the group's ended part.
        self.threads.retain(|tid, _| listed.contains(tid));
        let mut total = (0u64, 0u64);
        let mut threads = 0;
        let mut buf = [0u8; 128];
        for &tid in &self.listed {
            if leader_ended && tid == self.pid {
                continue;
            }
            let file = match self.threads.entry(tid) {
                std::collections::hash_map::Entry::Occupied(o) => o.into_mut(),
                std::collections::hash_map::Entry::Vacant(v) => {
                    match File::open(self.task_dir.join(tid.to_string()).join("schedstat")) {
                        Ok(f) => v.insert(f),
                        Err(_) => continue,
                    }
                }
            };
            let Ok(Some(len)) = read_again_from_start(file, &mut buf) else {
                continue;
            };
            let text = std::str::from_utf8(buf.get(..len).unwrap_or_default()).unwrap_or("");
            let Some((runtime, slices)) = parse_schedstat(text) else {
                tracing::debug!(pid = self.pid, tid, "unreadable schedstat line {text:?}");
                continue;
            };
            total.0 = total.0.saturating_add(runtime);
            total.1 = total.1.saturating_add(slices);
            threads += 1;
        }
        (threads > 0).then_some(total)
    }
}

/// `<runtime ns> <wait ns> <time slices>`.
fn parse_schedstat(text: &str) -> Option<(u64, u64)> {
    let mut fields = text.split_whitespace();
    let runtime = fields.next()?.parse().ok()?;
    let slices = fields.nth(1)?.parse().ok()?;
    Some((runtime, slices))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schedstat_lines_parse_and_bad_ones_do_not() {
        assert_eq!(parse_schedstat("1500 20 7\n"), Some((1500, 7)));
        assert_eq!(parse_schedstat("1500 20"), None);
        assert_eq!(parse_schedstat("x 20 7"), None);
        assert_eq!(parse_schedstat(""), None);
    }

    #[test]
    fn threads_of_a_fixture_process_add_up_as_they_come_and_go() {
        let root = tempfile::tempdir().unwrap();
        let thread = |tid: u32, line: &str| {
            let dir = root.path().join("7/task").join(tid.to_string());
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(dir.join("schedstat"), line).unwrap();
        };
        for (tid, line) in [(7, "100 5 2\n"), (8, "250 0 3\n"), (9, "garbage\n")] {
            thread(tid, line);
        }
        let mut unseen = Unseen::new(root.path(), 7);
        assert_eq!(unseen.live_threads(false), Some((350, 5)));
        // A file held open reads what it holds now.
        thread(7, "400 5 4\n");
        std::fs::remove_dir_all(root.path().join("7/task/8")).unwrap();
        assert_eq!(unseen.live_threads(false), Some((400, 4)));
        // An ended leader's runtime is in the group's ended part: not read as live.
        thread(10, "30 0 1\n");
        assert_eq!(unseen.live_threads(true), Some((30, 1)));
        assert_eq!(Unseen::new(root.path(), 8).live_threads(false), None);
        assert_eq!(pids(root.path()), BTreeSet::from([7]));
        assert_eq!(threads(root.path(), 7), 3);
        assert_eq!(threads(root.path(), 8), 0);
    }
}

//! Processes the task iterator does not visit, read from /proc instead. This project's VM
//! kernel leaves pid 1 out of every task iterator pass (with a pid or tid parameter too), while
//! /proc and `sched_switch` see it; a kernel may have other such quirks. The source finds them
//! once, when it turns to the iterator, and reads each one's threads' scheduler runtime from
//! `/proc/<pid>/task/<tid>/schedstat`: the same count the iterator reads
//! (`se.sum_exec_runtime`), so the readings agree. The process's `stat` and its threads'
//! files stay open between snapshots (one `pread` each, as the procfs source holds `stat`
//! files), and its task directory is listed again only when the thread count in `stat` changes
//! or a thread's file fails.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::fs::File;
use std::path::{Path, PathBuf};

use kepler_core::ProcessKey;
use kepler_sources::bounded::read_again_from_start;
use kepler_sources::{ProcessState, ProcfsReader};

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

/// One process's threads, with its `stat` and their `schedstat` files held open.
pub(crate) struct Unseen {
    pub pid: u32,
    pid_name: String,
    task_dir: PathBuf,
    stat: Option<File>,
    threads: FastMap<u32, File>,
    listed: Vec<u32>,
}

/// What one snapshot reads of an unseen process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct UnseenReading {
    pub key: ProcessKey,
    /// What the scheduler counted for its live threads: runtime in ns and time slices (the
    /// nearest count to context switches that schedstat gives).
    pub runtime_ns: u64,
    pub slices: u64,
}

impl Unseen {
    pub(crate) fn new(procfs: &Path, pid: u32) -> Self {
        Unseen {
            pid,
            pid_name: pid.to_string(),
            task_dir: procfs.join(pid.to_string()).join("task"),
            stat: None,
            threads: FastMap::default(),
            listed: Vec::new(),
        }
    }

    /// The process now at the pid and its live threads' counts; `None` when it is gone or
    /// shows no live thread.
    pub(crate) fn read(&mut self, procfs: &mut ProcfsReader) -> Option<UnseenReading> {
        let state = self.state(procfs)?;
        let (runtime_ns, slices) = self.live_threads(state.leader_ended, state.threads)?;
        Some(UnseenReading {
            key: state.key,
            runtime_ns,
            slices,
        })
    }

    /// The process's `stat`, from the file held open (one `pread`). A held file that fails
    /// was opened on a process now gone: the pid is opened again, and its threads listed
    /// afresh.
    fn state(&mut self, procfs: &mut ProcfsReader) -> Option<ProcessState> {
        if let Some(stat) = &self.stat {
            if let Ok(state) = procfs.state_at(self.pid, stat) {
                return Some(state);
            }
            self.stat = None;
            self.listed.clear();
        }
        let stat = procfs.open_stat(OsStr::new(&self.pid_name)).ok()?;
        let state = procfs.state_at(self.pid, &stat).ok()?;
        self.stat = Some(stat);
        Some(state)
    }

    /// The live threads' runtime and time slices, without the leader's when `leader_ended`
    /// (a zombie leader stays listed and counted; the other threads go when they end). The
    /// task directory is listed again only when `threads` (the kernel's count) differs from
    /// the threads listed last time, or a held file fails (its thread ended): otherwise the
    /// same threads live on, as a thread that ended and another that started in its place would
    /// have failed a held file.
    fn live_threads(&mut self, leader_ended: bool, threads: u64) -> Option<(u64, u64)> {
        if self.listed.len() as u64 != threads {
            self.list()?;
        }
        let mut sum = self.sum(leader_ended);
        if sum.failed > 0 {
            self.list()?;
            sum = self.sum(leader_ended);
        }
        (sum.read > 0).then_some(sum.total)
    }

    /// Lists the task directory, keeping the files of the threads still there.
    fn list(&mut self) -> Option<()> {
        let dir = std::fs::read_dir(&self.task_dir).ok()?;
        self.listed.clear();
        self.listed.extend(
            dir.flatten()
                .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok()),
        );
        let listed = &self.listed;
        // Threads gone since: their final runtime is in the group's ended part.
        self.threads.retain(|tid, _| listed.contains(tid));
        Some(())
    }

    /// The listed threads' runtime and slices.
    fn sum(&mut self, leader_ended: bool) -> ThreadSum {
        let mut sum = ThreadSum::default();
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
                        Err(_) => {
                            sum.failed += 1;
                            continue;
                        }
                    }
                }
            };
            let Ok(Some(len)) = read_again_from_start(file, &mut buf) else {
                self.threads.remove(&tid);
                sum.failed += 1;
                continue;
            };
            let text = std::str::from_utf8(buf.get(..len).unwrap_or_default()).unwrap_or("");
            let Some((runtime, slices)) = parse_schedstat(text) else {
                tracing::debug!(pid = self.pid, tid, "unreadable schedstat line {text:?}");
                continue;
            };
            sum.total.0 = sum.total.0.saturating_add(runtime);
            sum.total.1 = sum.total.1.saturating_add(slices);
            sum.read += 1;
        }
        sum
    }
}

/// What [`Unseen::sum`] read: runtime and slices, threads read, and files that failed (their
/// threads ended).
#[derive(Default)]
struct ThreadSum {
    total: (u64, u64),
    read: usize,
    failed: usize,
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

    /// A fixture `/proc/7` whose `stat` says `state` and `threads`, started at tick 500.
    fn write_stat(root: &Path, state: &str, threads: u64) {
        let line =
            format!("7 (unseen) {state} 1 7 7 0 -1 0 0 0 0 0 1 1 0 0 20 0 {threads} 0 500 0 0\n");
        std::fs::write(root.join("7/stat"), line).unwrap();
    }

    /// A fixture thread `tid` of `/proc/7` whose `schedstat` is `line`.
    fn write_schedstat(root: &Path, tid: u32, line: &str) {
        let dir = root.join("7/task").join(tid.to_string());
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("schedstat"), line).unwrap();
    }

    #[test]
    fn threads_of_a_fixture_process_add_up_as_they_come_and_go() {
        let root = tempfile::tempdir().unwrap();
        let thread = |tid: u32, line: &str| write_schedstat(root.path(), tid, line);
        for (tid, line) in [(7, "100 5 2\n"), (8, "250 0 3\n"), (9, "garbage\n")] {
            thread(tid, line);
        }
        write_stat(root.path(), "S", 3);
        let mut procfs = ProcfsReader::new(root.path()).unwrap();
        let mut unseen = Unseen::new(root.path(), 7);
        let read = |unseen: &mut Unseen, procfs: &mut ProcfsReader| {
            unseen.read(procfs).map(|r| (r.runtime_ns, r.slices))
        };
        let first = unseen.read(&mut procfs).unwrap();
        assert_eq!((first.runtime_ns, first.slices), (350, 5));
        assert_eq!(first.key.pid, 7);
        assert_eq!(
            first.key.start_time,
            procfs.floor_to_tick(first.key.start_time)
        );
        // A file held open reads what it holds now.
        thread(7, "400 5 4\n");
        std::fs::remove_dir_all(root.path().join("7/task/8")).unwrap();
        write_stat(root.path(), "S", 2);
        assert_eq!(read(&mut unseen, &mut procfs), Some((400, 4)));
        // An ended leader's runtime is in the group's ended part: not read as live.
        thread(10, "30 0 1\n");
        write_stat(root.path(), "Z", 3);
        assert_eq!(read(&mut unseen, &mut procfs), Some((30, 1)));
        assert_eq!(Unseen::new(root.path(), 8).read(&mut procfs), None);
        assert_eq!(pids(root.path()), BTreeSet::from([7]));
        assert_eq!(threads(root.path(), 7), 3);
        assert_eq!(threads(root.path(), 8), 0);
    }

    #[test]
    fn the_task_directory_is_listed_again_only_when_the_count_changes() {
        let root = tempfile::tempdir().unwrap();
        let thread = |tid: u32, line: &str| write_schedstat(root.path(), tid, line);
        thread(7, "100 0 1\n");
        write_stat(root.path(), "S", 1);
        let mut procfs = ProcfsReader::new(root.path()).unwrap();
        let mut unseen = Unseen::new(root.path(), 7);
        let mut read = || unseen.read(&mut procfs).map(|r| r.runtime_ns);
        assert_eq!(read(), Some(100));
        // A thread the kernel does not count yet is not looked for...
        thread(8, "50 0 1\n");
        assert_eq!(read(), Some(100));
        // ...and is read as soon as it counts it.
        write_stat(root.path(), "S", 2);
        assert_eq!(read(), Some(150));
    }

    /// A thread of this process that lives until the returned sender is dropped, and its tid.
    fn parked_thread() -> (
        u32,
        std::sync::mpsc::Sender<()>,
        std::thread::JoinHandle<()>,
    ) {
        let (started, start) = std::sync::mpsc::channel::<u32>();
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let worker = std::thread::spawn(move || {
            // SAFETY: gettid has no preconditions.
            let tid = unsafe { libc::gettid() } as u32;
            started.send(tid).unwrap();
            let _ = stopped.recv();
        });
        (start.recv().unwrap(), stop, worker)
    }

    /// A thread that ends while another starts leaves the count as it was (unless other test
    /// threads came or went meanwhile): the ended one's held file fails, and the listing that
    /// follows finds the new one.
    #[test]
    fn a_thread_that_ends_and_one_that_starts_are_seen_on_the_real_procfs() {
        let mut procfs = ProcfsReader::new("/proc").unwrap();
        let mut unseen = Unseen::new(Path::new("/proc"), std::process::id());
        let (ended, stop, worker) = parked_thread();
        assert!(unseen.read(&mut procfs).is_some());
        assert!(unseen.listed.contains(&ended) && unseen.threads.contains_key(&ended));
        drop(stop);
        worker.join().unwrap();
        // A joined thread may still be listed for a moment, until the kernel releases it.
        let gone = Path::new("/proc/self/task").join(ended.to_string());
        let waited = std::time::Instant::now();
        while gone.exists() && waited.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let (started, _stop, _worker) = parked_thread();
        assert!(unseen.read(&mut procfs).is_some());
        assert!(!unseen.listed.contains(&ended) && !unseen.threads.contains_key(&ended));
        assert!(unseen.listed.contains(&started) && unseen.threads.contains_key(&started));
    }
}

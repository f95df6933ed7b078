//! `stat` files held between scans, against this host's `/proc`: a fixture root whose pid
//! entries are links to real processes, so a test can point a pid at another process the way
//! the kernel reuses one.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::{NoWorkloads, ProcessUsage, UsageSnapshot, UsageSource};

use super::parse;
use super::ProcfsSource;

/// Kills and reaps the child even when an assertion fails.
pub(super) struct Reaped(pub(super) Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

pub(super) fn spawn(script: &str) -> Reaped {
    Reaped(Command::new("sh").args(["-c", script]).spawn().unwrap())
}

/// A procfs root with node files and nothing else yet.
pub(super) fn fixture_root() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    fs::write(dir.path().join("stat"), "cpu  1 2 3 4 5 6 7 8 0 0\n").unwrap();
    fs::write(dir.path().join("uptime"), "100.00 0.00\n").unwrap();
    dir
}

/// Points `<root>/<fake_pid>` at the real process `pid`.
pub(super) fn link(root: &Path, fake_pid: u32, pid: u32) {
    let entry = root.join(fake_pid.to_string());
    let _ = fs::remove_file(&entry);
    symlink(format!("/proc/{pid}"), entry).unwrap();
}

/// utime + stime and start time of `pid`, read by path as the truth.
pub(super) fn truth(pid: u32) -> (Duration, Duration) {
    let text = fs::read(format!("/proc/{pid}/stat")).unwrap();
    let stat = parse::parse_pid_stat(&text).unwrap();
    let hz = super::read::user_hz().unwrap();
    (
        parse::ticks_to_duration(stat.utime + stat.stime, hz),
        parse::ticks_to_duration(stat.start_time, hz),
    )
}

/// How many of this test process's descriptors are `stat` files of `pid`.
fn held_for(pid: u32) -> usize {
    held(&format!("/proc/{pid}/stat"))
}

/// CPU time and start time the snapshot reports for `pid`.
pub(super) fn seen(snapshot: &UsageSnapshot, pid: u32) -> (Duration, Duration) {
    let found: Option<&ProcessUsage> = snapshot.processes.iter().find(|p| p.key.pid == pid);
    let p = found.unwrap_or_else(|| panic!("pid {pid} not in snapshot"));
    (p.cpu_time, p.key.start_time)
}

#[test]
fn a_held_stat_follows_the_process_cpu_time() {
    let _alone = alone();
    let burner = spawn("while :; do :; done");
    let pid = burner.0.id();
    let root = fixture_root();
    link(root.path(), 4242, pid);
    let mut source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();

    let mut last = Duration::ZERO;
    for round in 0..3 {
        // Let the burner run for several clock ticks, however busy the machine is.
        let (start_cpu, _) = truth(pid);
        let waited = Instant::now();
        while truth(pid).0 < start_cpu + Duration::from_millis(50) {
            assert!(
                waited.elapsed() < Duration::from_secs(60),
                "burner never ran"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let (before, started) = truth(pid);
        let snapshot = source.snapshot().unwrap();
        let (after, _) = truth(pid);
        let (cpu, start) = seen(&snapshot, 4242);
        assert!(
            before <= cpu && cpu <= after,
            "round {round}: {before:?} <= {cpu:?} <= {after:?}"
        );
        assert!(cpu > last, "round {round}: the held file read stale");
        assert_eq!(start, started);
        last = cpu;
        assert_eq!(
            held_for(pid),
            1,
            "round {round}: one file held for the process"
        );
    }
    drop(source);
    assert_eq!(held_for(pid), 0, "files are closed with the source");
}

#[test]
fn a_pid_that_names_another_process_is_read_afresh() {
    let _alone = alone();
    let first = spawn("sleep 60");
    let root = fixture_root();
    link(root.path(), 4243, first.0.id());
    let mut source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    let snapshot = source.snapshot().unwrap();
    let (_, first_start) = truth(first.0.id());
    assert_eq!(seen(&snapshot, 4243).1, first_start);
    assert_eq!(held_for(first.0.id()), 1);

    // The process ends and the pid comes back as another one: the file held for the first
    // reads no more, and the second is read by path and held instead.
    let first_pid = first.0.id();
    drop(first);
    // Start times are in clock ticks: make sure the second starts in a later one.
    std::thread::sleep(Duration::from_millis(30));
    let second = spawn("sleep 60");
    link(root.path(), 4243, second.0.id());
    let snapshot = source.snapshot().unwrap();
    let (cpu, second_start) = truth(second.0.id());
    assert!(second_start > first_start);
    let (seen_cpu, seen_start) = seen(&snapshot, 4243);
    assert_eq!(seen_start, second_start);
    assert!(seen_cpu <= cpu);
    assert_eq!(
        held_for(first_pid),
        0,
        "the ended process's file was let go"
    );
    assert_eq!(held_for(second.0.id()), 1);
}

#[test]
fn no_more_files_are_held_than_the_budget() {
    let _alone = alone();
    let sleepers: Vec<Reaped> = (0..3).map(|_| spawn("sleep 60")).collect();
    let root = fixture_root();
    for (i, s) in sleepers.iter().enumerate() {
        link(root.path(), 5000 + i as u32, s.0.id());
    }
    let mut source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    source.held_cap = 1;
    for _ in 0..2 {
        let snapshot = source.snapshot().unwrap();
        for (i, s) in sleepers.iter().enumerate() {
            let (_, started) = truth(s.0.id());
            assert_eq!(seen(&snapshot, 5000 + i as u32).1, started);
        }
        let held: usize = sleepers.iter().map(|s| held_for(s.0.id())).sum();
        assert_eq!(held, 1);
        assert_eq!(source.held, 1);
    }
    // A process gone from the listing frees its slot for another: at the end of the scan
    // that no longer finds it, for the scans after.
    let held_one = sleepers
        .iter()
        .position(|s| held_for(s.0.id()) == 1)
        .unwrap();
    fs::remove_file(root.path().join((5000 + held_one as u32).to_string())).unwrap();
    source.snapshot().unwrap();
    assert_eq!(source.held, 0);
    source.snapshot().unwrap();
    let others = sleepers.iter().enumerate().filter(|(i, _)| *i != held_one);
    assert_eq!(others.map(|(_, s)| held_for(s.0.id())).sum::<usize>(), 1);
}

#[test]
fn a_process_gone_before_its_stat_is_opened_is_tried_once() {
    let _alone = alone();
    let sleeper = spawn("sleep 60");
    let mut ended = Command::new("true").spawn().unwrap();
    let ended_pid = ended.id();
    ended.wait().unwrap();
    let root = fixture_root();
    link(root.path(), 4300, sleeper.0.id());
    // Listed, as a process that ends between the listing and its read is.
    link(root.path(), 4301, ended_pid);
    let mut source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();

    let opens = |source: &ProcfsSource| source.reader.stat_opens;
    let snapshot = source.snapshot().unwrap();
    assert_eq!(pids(&snapshot), [4300]);
    assert_eq!(opens(&source), 2, "one open each, held or not");
    let snapshot = source.snapshot().unwrap();
    assert_eq!(pids(&snapshot), [4300]);
    assert_eq!(
        opens(&source),
        3,
        "the held one read in place, the gone one tried once"
    );

    // With no file to hold, each is read by path: still one open each.
    let mut by_path = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    by_path.held_cap = 0;
    for scan in 1..=2 {
        let snapshot = by_path.snapshot().unwrap();
        assert_eq!(pids(&snapshot), [4300]);
        assert_eq!(opens(&by_path), 2 * scan, "scan {scan}");
    }
    assert_eq!(
        held_for(sleeper.0.id()),
        1,
        "only the first source holds a file"
    );
    drop(source);

    // Where the tree is the agent's own (here its pids are the real ones, and the source is
    // told so), the clock says the ended one is gone before any open.
    let own = fixture_root();
    link(own.path(), sleeper.0.id(), sleeper.0.id());
    link(own.path(), ended_pid, ended_pid);
    let mut source = ProcfsSource::new(own.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    source.group_clock = true;
    let snapshot = source.snapshot().unwrap();
    assert_eq!(pids(&snapshot), [sleeper.0.id()]);
    assert_eq!(opens(&source), 1, "the live one's only");
    // Its held file fails once it ends, and the clock says that no other process took the
    // pid: no open by path either.
    let sleeper_pid = sleeper.0.id();
    drop(sleeper);
    let snapshot = source.snapshot().unwrap();
    assert!(snapshot.processes.is_empty());
    assert_eq!(opens(&source), 1);
    assert_eq!(held_for(sleeper_pid), 0);
}

/// Taken by the tests that count this process's descriptors of procfs files, and by those
/// that scan this host's `/proc` (which hold files of every process, the others' included), so
/// that no count sees another test's files.
pub(super) static HELD_FILES: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// [`HELD_FILES`], taken even where a test that held it failed.
pub(super) fn alone() -> std::sync::MutexGuard<'static, ()> {
    HELD_FILES.lock().unwrap_or_else(|e| e.into_inner())
}

/// How many of this test process's descriptors are `target`.
pub(super) fn held(target: &str) -> usize {
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| fs::read_link(e.ok()?.path()).ok())
        .filter(|t| t.as_os_str() == target)
        .count()
}

#[test]
fn procfs_stat_is_held_and_read_afresh_its_uptime_read_by_clock_and_a_fixture_s_are_not() {
    let _alone = alone();
    let mut reader = super::ProcfsReader::new("/proc").unwrap();
    let before = held("/proc/stat");
    let first = reader.read_node_cpu_times().unwrap();
    assert_eq!(held("/proc/stat"), before + 1, "held after the first read");
    // Idle time counts too, so the node's total grows with the wall clock: a held file that
    // read stale would show the first total again.
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = first;
    while last.total == first.total && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
        last = reader.read_node_cpu_times().unwrap();
    }
    assert!(last.total > first.total, "the held file read stale");
    assert_eq!(held("/proc/stat"), before + 1, "one file, read again");
    // The uptime is read from the file once, then from the clock the file prints: no file
    // held, and what it gives lies between what the file says before and after.
    let file_uptime = || {
        let text = fs::read_to_string("/proc/uptime").unwrap();
        super::parse::parse_uptime(text.as_bytes()).unwrap()
    };
    let held_uptime = held("/proc/uptime");
    let up = reader.read_uptime().unwrap();
    assert_eq!(held("/proc/uptime"), held_uptime, "uptime held");
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(30));
        let file_before = file_uptime();
        let by_clock = reader.read_uptime().unwrap();
        let file_after = file_uptime();
        assert!(
            file_before <= by_clock && by_clock <= file_after && by_clock > up,
            "{file_before:?} <= {by_clock:?} <= {file_after:?}, after {up:?}"
        );
    }
    assert_eq!(held("/proc/uptime"), held_uptime);
    drop(reader);
    assert_eq!(held("/proc/stat"), before, "closed with the reader");

    let dir = fixture_root();
    let stat = dir.path().join("stat");
    let mut fixture = super::ProcfsReader::new(dir.path()).unwrap();
    fixture.read_node_cpu_times().unwrap();
    assert_eq!(
        held(stat.to_str().unwrap()),
        0,
        "a fixture file is not held"
    );
    // Nor is its uptime; one written anew is read anew.
    assert_eq!(fixture.read_uptime().unwrap(), Duration::from_secs(100));
    let uptime = dir.path().join("uptime");
    fs::write(&uptime, "200.50 0.00\n").unwrap();
    assert_eq!(
        fixture.read_uptime().unwrap(),
        Duration::from_millis(200_500)
    );
    assert_eq!(held(uptime.to_str().unwrap()), 0);
}

/// Sets the `processes` line of a fixture's `stat`.
pub(super) fn set_forks(root: &Path, forks: u64) {
    let text = format!("cpu  1 2 3 4 5 6 7 8 0 0\nctxt 10\nprocesses {forks}\n");
    fs::write(root.join("stat"), text).unwrap();
}

/// A fixture root whose `stat` counts 10 forks, `fake_pid` in it linked to the real `pid`, and
/// a source over it.
pub(super) fn fork_counted_tree(fake_pid: u32, pid: u32) -> (tempfile::TempDir, ProcfsSource) {
    let root = fixture_root();
    set_forks(root.path(), 10);
    link(root.path(), fake_pid, pid);
    let source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    (root, source)
}

fn pids(snapshot: &UsageSnapshot) -> Vec<u32> {
    let mut pids: Vec<u32> = snapshot.processes.iter().map(|p| p.key.pid).collect();
    pids.sort_unstable();
    pids
}

#[test]
fn without_a_fork_the_known_processes_are_read_and_the_tree_is_not_listed() {
    let first = spawn("sleep 60");
    let (root, mut source) = fork_counted_tree(4301, first.0.id());
    source.reader.count_fixture_forks();
    assert_eq!(pids(&source.snapshot().unwrap()), [4301]);

    // A process the count does not tell of is not looked for: the tree is not listed.
    let second = spawn("sleep 60");
    link(root.path(), 4302, second.0.id());
    let snapshot = source.snapshot().unwrap();
    assert_eq!(pids(&snapshot), [4301]);
    assert_eq!(seen(&snapshot, 4301).1, truth(first.0.id()).1);
    // Once the count moves, it is.
    set_forks(root.path(), 11);
    assert_eq!(pids(&source.snapshot().unwrap()), [4301, 4302]);
    assert_eq!(pids(&source.snapshot().unwrap()), [4301, 4302]);

    // A known process that ends is missed at the next scan without a listing (its held file
    // reads no more), and that scan lists the tree again at the next one.
    drop(first);
    assert_eq!(pids(&source.snapshot().unwrap()), [4302]);
    let third = spawn("sleep 60");
    link(root.path(), 4303, third.0.id());
    assert_eq!(pids(&source.snapshot().unwrap()), [4302, 4303]);
}

#[test]
fn a_fixture_tree_is_listed_at_every_scan_whatever_its_fork_count() {
    let first = spawn("sleep 60");
    let (root, mut source) = fork_counted_tree(4311, first.0.id());
    assert_eq!(pids(&source.snapshot().unwrap()), [4311]);
    let second = spawn("sleep 60");
    link(root.path(), 4312, second.0.id());
    assert_eq!(pids(&source.snapshot().unwrap()), [4311, 4312]);
}

#[test]
fn procfs_counts_forks_and_the_source_sees_processes_start_and_end() {
    let _alone = alone();
    let mut reader = super::ProcfsReader::new("/proc").unwrap();
    let before = reader.read_node_stat().unwrap().forks.unwrap();
    let mut source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
    source.snapshot().unwrap();
    let child = spawn("sleep 60");
    let pid = child.0.id();
    assert!(reader.read_node_stat().unwrap().forks.unwrap() > before);
    let snapshot = source.snapshot().unwrap();
    assert_eq!(seen(&snapshot, pid).1, truth(pid).1);
    drop(child);
    let snapshot = source.snapshot().unwrap();
    assert!(snapshot.processes.iter().all(|p| p.key.pid != pid));
}

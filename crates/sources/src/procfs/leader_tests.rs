//! Processes read through their main thread's `schedstat` between `stat` reads (see
//! [`super::credit`]), against real processes: fixture trees linked to them, where the test
//! sets the fork count, and this host's `/proc`, where the kernel does.

use std::fs;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{NoWorkloads, UsageSource};

use super::held_tests::{
    alone, fixture_root, fork_counted_tree, link, seen, set_forks, spawn, truth,
};
use super::parse::PF_KTHREAD;
use super::ProcfsSource;

const TICK: Duration = Duration::from_millis(10);

/// The main thread's runtime of `pid`, from its `schedstat`.
fn runtime(pid: u32) -> Duration {
    let text = fs::read(format!("/proc/{pid}/schedstat")).unwrap();
    Duration::from_nanos(super::parse::parse_schedstat_runtime(&text).unwrap())
}

fn threads(pid: u32) -> usize {
    fs::read_dir(format!("/proc/{pid}/task")).unwrap().count()
}

/// Waits until `pid` has run for 2 ms more, however busy the machine: a scan through the main
/// thread then credits a delta in ns that is no whole number of ticks.
fn run_a_while(pid: u32) {
    let start = runtime(pid);
    let waited = std::time::Instant::now();
    while runtime(pid) < start + Duration::from_millis(2) {
        assert!(
            waited.elapsed() < Duration::from_secs(30),
            "the burner never ran"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Scans once and checks what the single-threaded `pid`, listed as `listed_pid`, is credited:
/// never less than `last` (which it updates), never more than its runtime after the scan, and
/// less than a `stat` rounding behind its `stat` before it.
fn scan_single(
    source: &mut ProcfsSource,
    listed_pid: u32,
    pid: u32,
    last: &mut Duration,
) -> Duration {
    let stat_before = truth(pid).0;
    let cpu = seen(&source.snapshot().unwrap(), listed_pid).0;
    let runtime_after = runtime(pid);
    assert!(cpu >= *last, "went back: {cpu:?} after {last:?}");
    assert!(
        cpu <= runtime_after,
        "{cpu:?} above the runtime {runtime_after:?}"
    );
    assert!(
        cpu + 2 * TICK >= stat_before,
        "{cpu:?} behind stat's {stat_before:?}"
    );
    *last = cpu;
    cpu
}

/// A multiple of USER_HZ's tick: what `stat` alone gives (USER_HZ is 100 here).
fn whole_ticks(d: Duration) -> bool {
    d.as_nanos().is_multiple_of(TICK.as_nanos())
}

#[test]
fn a_single_threaded_process_is_read_through_its_main_thread_while_no_task_starts() {
    read_through_the_main_thread(None);
}

/// Beyond the budget of held files, `schedstat` is read by path.
#[test]
fn a_process_without_held_files_is_read_through_its_main_thread_too() {
    read_through_the_main_thread(Some(0));
}

fn read_through_the_main_thread(held_cap: Option<usize>) {
    assert_eq!(
        super::read::user_hz(),
        Some(100),
        "the tick below assumes USER_HZ 100"
    );
    let burner = spawn("while :; do :; done");
    let pid = burner.0.id();
    let (root, mut source) = fork_counted_tree(4401, pid);
    source.reader.count_fixture_forks();
    source.schedstat_counts = true;
    if let Some(cap) = held_cap {
        source.held_cap = cap;
    }
    let mut last = Duration::ZERO;
    let mut scan = |source: &mut ProcfsSource| {
        run_a_while(pid);
        scan_single(source, 4401, pid, &mut last)
    };
    // The first scan has no fork count before it, the second no runtime baseline: both read
    // `stat`, and the second the main thread's runtime after it.
    assert!(whole_ticks(scan(&mut source)));
    assert!(whole_ticks(scan(&mut source)));
    let held = source.cache.get(&4401).map(|c| c.schedstat.is_some());
    assert_eq!(held, Some(held_cap != Some(0)));
    // Now the delta of the runtime, in ns, is credited on top of `stat`'s ticks.
    assert!(!whole_ticks(scan(&mut source)));
    assert!(!whole_ticks(scan(&mut source)));
    // A task started: `stat` again, then its baseline, then the main thread again.
    set_forks(root.path(), 11);
    scan(&mut source);
    assert!(!whole_ticks(scan(&mut source)));
}

/// Writes `<dir>/stat` as `pid`'s, but flagged a kernel thread and with `ticks` of CPU time.
fn write_kernel_thread_stat(dir: &Path, pid: u32, ticks: u64) {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let (_, after_comm) = text.rsplit_once(") ").unwrap();
    let mut fields: Vec<String> = after_comm.split(' ').map(str::to_owned).collect();
    // After the comm: state, ppid, pgrp, session, tty, tpgid, flags, 4 fault counts, utime,
    // stime.
    let flags: u64 = fields[6].parse().unwrap();
    fields[6] = (flags | PF_KTHREAD).to_string();
    fields[11] = ticks.to_string();
    fields[12] = "0".into();
    let line = format!("{pid} (kworker/9:9) {}", fields.join(" "));
    fs::write(dir.join("stat"), line).unwrap();
}

/// A fixture tree whose `<root>/<fake_pid>` is a "kernel thread": a `stat` flagged as one with
/// `ticks` of CPU time over the real process `pid`'s `schedstat`; and a source reading it with
/// the fork count the test sets and `schedstat` counting.
fn kernel_thread_tree(fake_pid: u32, pid: u32, ticks: u64) -> (tempfile::TempDir, ProcfsSource) {
    let root = fixture_root();
    let kthread = root.path().join(fake_pid.to_string());
    fs::create_dir(&kthread).unwrap();
    write_kernel_thread_stat(&kthread, pid, ticks);
    symlink(format!("/proc/{pid}/schedstat"), kthread.join("schedstat")).unwrap();
    fs::write(kthread.join("cgroup"), "0::/\n").unwrap();
    let mut source = ProcfsSource::new(root.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    source.reader.count_fixture_forks();
    source.schedstat_counts = true;
    (root, source)
}

/// Kernel threads never gain a thread, so theirs is read through a held `schedstat` even
/// while tasks start on the node, until a `stat` is due; a user process beside them goes on
/// being read through `stat`. The "kernel thread" is a fixture `stat` flagged as one, over a
/// real burner's `schedstat`.
#[test]
fn a_kernel_thread_is_read_through_its_main_thread_while_tasks_start() {
    let burner = spawn("while :; do :; done");
    let pid = burner.0.id();
    let (root, mut source) = kernel_thread_tree(4403, pid, 0);
    let kthread = root.path().join("4403");
    link(root.path(), 4404, pid);
    let mut forks = 10;
    let mut scan = |source: &mut ProcfsSource| {
        // A task started before every scan.
        forks += 1;
        set_forks(root.path(), forks);
        run_a_while(pid);
        let snapshot = source.snapshot().unwrap();
        let user = seen(&snapshot, 4404).0;
        assert!(whole_ticks(user), "the user process read through stat");
        seen(&snapshot, 4403).0
    };
    // The first scan reads `stat`, and the main thread's runtime after it.
    assert_eq!(scan(&mut source), Duration::ZERO);
    assert!(source
        .cache
        .get(&4403)
        .is_some_and(|c| c.schedstat.is_some()));
    // Then the main thread's runtime, in ns: what it ran since the first scan.
    let mut last = Duration::ZERO;
    for _ in 0..3 {
        let cpu = scan(&mut source);
        assert!(!whole_ticks(cpu) && cpu > last, "{cpu:?} after {last:?}");
        assert!(cpu <= runtime(pid));
        last = cpu;
    }
    // 30 s on, a `stat` is due: it is read (the fixture's now says more than was credited),
    // then the main thread again.
    let ahead = last.as_millis() as u64 / 10 + 100;
    write_kernel_thread_stat(&kthread, pid, ahead);
    fs::write(root.path().join("uptime"), "131.00 0.00\n").unwrap();
    assert_eq!(scan(&mut source), TICK * ahead as u32);
    let cpu = scan(&mut source);
    assert!(!whole_ticks(cpu) && cpu > TICK * ahead as u32, "{cpu:?}");
}

/// Without a held `schedstat` (none may be held here) a kernel thread is read through `stat`
/// while tasks start: by path, its pid could name another process by now.
#[test]
fn a_kernel_thread_without_a_held_schedstat_is_read_through_stat_while_tasks_start() {
    let burner = spawn("while :; do :; done");
    let pid = burner.0.id();
    let (root, mut source) = kernel_thread_tree(4405, pid, 7);
    source.held_cap = 0;
    for forks in 11..15 {
        set_forks(root.path(), forks);
        run_a_while(pid);
        assert_eq!(seen(&source.snapshot().unwrap(), 4405).0, TICK * 7);
    }
}

#[test]
fn a_process_with_another_thread_is_read_through_stat() {
    let script = "exec python3 -c 'import threading, time\n\
                  threading.Thread(target=time.sleep, args=(60,), daemon=True).start()\n\
                  while True: pass'";
    let busy = spawn(script);
    let pid = busy.0.id();
    let waited = std::time::Instant::now();
    while threads(pid) < 2 {
        assert!(
            waited.elapsed() < Duration::from_secs(20),
            "python3 never started its thread"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (_root, mut source) = fork_counted_tree(4402, pid);
    source.reader.count_fixture_forks();
    source.schedstat_counts = true;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_millis(30));
        let before = truth(pid).0;
        let cpu = seen(&source.snapshot().unwrap(), 4402).0;
        let after = truth(pid).0;
        assert!(
            whole_ticks(cpu) && before <= cpu && cpu <= after,
            "{before:?} {cpu:?} {after:?}"
        );
    }
    // Asked of the source: the live tests beside this one hold every process's files.
    assert!(source
        .cache
        .get(&4402)
        .is_some_and(|c| c.schedstat.is_none()));
}

/// On this host's `/proc` the kernel's fork count decides: whichever way each scan reads the
/// process, its credit stays between `stat` before the scan and the runtime after it.
#[test]
fn on_this_host_a_burner_s_credit_stays_between_its_stat_and_its_runtime() {
    let _alone = alone();
    let burner = spawn("while :; do :; done");
    let pid = burner.0.id();
    let mut source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
    assert!(
        source.schedstat_counts,
        "this kernel's schedstat counts runtime"
    );
    let mut last = Duration::ZERO;
    let mut by_leader = 0;
    for _ in 0..12 {
        std::thread::sleep(Duration::from_millis(50));
        let cpu = scan_single(&mut source, pid, pid, &mut last);
        by_leader += usize::from(!whole_ticks(cpu));
    }
    eprintln!("{by_leader} of 12 scans read the burner through its main thread");
}

/// On this host's `/proc`, with a task started every few milliseconds: kernel threads are read
/// through their CPU clock, holding no file, each credited no more than its runtime and never
/// less than before. (A kernel thread's held `schedstat`, where the clock cannot be read, is
/// `a_kernel_thread_is_read_through_its_main_thread_while_tasks_start`.)
#[test]
fn on_this_host_kernel_threads_are_read_through_their_clock_while_tasks_start() {
    let _alone = alone();
    let _forker = spawn("while :; do /bin/true; sleep 0.005; done");
    let mut source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
    assert!(source.schedstat_counts);
    let mut last = std::collections::HashMap::new();
    let mut in_ns = 0;
    for _ in 0..8 {
        std::thread::sleep(Duration::from_millis(100));
        let snapshot = source.snapshot().unwrap();
        for p in snapshot.processes.iter().filter(|p| p.info.kernel_thread) {
            let Ok(text) = fs::read(format!("/proc/{}/schedstat", p.key.pid)) else {
                continue; // ended since
            };
            let Some(ns) = super::parse::parse_schedstat_runtime(&text) else {
                continue;
            };
            assert!(
                p.cpu_time <= Duration::from_nanos(ns),
                "{p:?} above {ns} ns"
            );
            let before = last.insert(p.key, p.cpu_time).unwrap_or_default();
            assert!(p.cpu_time >= before, "{p:?} went back from {before:?}");
            in_ns += usize::from(!whole_ticks(p.cpu_time));
        }
    }
    let kthreads: Vec<_> = source
        .cache
        .values()
        .filter(|c| c.info.kernel_thread)
        .collect();
    assert!(
        kthreads.iter().all(|c| c.schedstat.is_none()),
        "a schedstat held"
    );
    let by_clock = kthreads
        .iter()
        .filter(|c| {
            matches!(
                c.credit.leader_runtime(),
                Some(super::credit::Runtime::Group(_))
            )
        })
        .count();
    assert!(by_clock > 0, "no kernel thread read through its clock");
    assert!(in_ns > 0, "no credit in ns");
    eprintln!("{by_clock} kernel threads read through their clock; {in_ns} credits in ns");
}

/// Threads that start and end between two scans are counted: their start moves the fork count,
/// so the scan reads `stat`, which holds the time of the group's ended threads.
#[test]
fn on_this_host_the_time_of_threads_that_ended_between_scans_is_credited() {
    let script = "exec python3 -c 'import threading, time\n\
                  def burn():\n    t = time.time()\n    while time.time() - t < 0.03: pass\n\
                  while True:\n    threading.Thread(target=burn).start()\n    time.sleep(0.05)'";
    let _alone = alone();
    let parent = spawn(script);
    let pid = parent.0.id();
    let mut source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    for _ in 0..10 {
        std::thread::sleep(Duration::from_millis(150));
        let before = truth(pid).0;
        let cpu = seen(&source.snapshot().unwrap(), pid).0;
        let after = truth(pid).0;
        assert!(cpu + 2 * TICK >= before, "{cpu:?} behind stat's {before:?}");
        assert!(cpu <= after + 2 * TICK, "{cpu:?} above stat's {after:?}");
    }
}

/// On a tree of the agent's own pid namespace (here a fixture whose pids are the real ones,
/// the fork count set by the test), while no task starts: a process of several threads, and a
/// single-threaded one beyond the held files, are read through their group's CPU clock, in ns,
/// each credited no more than its group's runtime after the scan and never less than before.
#[test]
fn processes_are_read_through_their_group_clock_while_no_task_starts() {
    read_through_the_group_clock(false);
}

/// The same while a task starts before every scan: the clock counts threads that started and
/// ended too, and a pid that may have changed hands is checked after the scan.
#[test]
fn processes_are_read_through_their_group_clock_while_tasks_start() {
    read_through_the_group_clock(true);
}

fn read_through_the_group_clock(forks_move: bool) {
    let script = "exec python3 -c 'import threading, time\n\
                  def burn():\n    while True:\n        t = time.thread_time()\n\
                  \x20       while time.thread_time() - t < 0.002: pass\n\
                  \x20       time.sleep(0.008)\n\
                  for _ in range(2): threading.Thread(target=burn, daemon=True).start()\n\
                  time.sleep(600)'";
    let threaded = spawn(script);
    let burner = spawn("while :; do :; done");
    let (many, one) = (threaded.0.id(), burner.0.id());
    let waited = std::time::Instant::now();
    while threads(many) < 3 {
        assert!(waited.elapsed() < Duration::from_secs(20), "no threads");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (root, mut source) = fork_counted_tree(many, many);
    link(root.path(), one, one);
    source.reader.count_fixture_forks();
    source.schedstat_counts = true;
    source.held_cap = 0;
    source.group_clock = true;
    let mut last = std::collections::HashMap::new();
    let mut in_ns = std::collections::HashMap::new();
    let mut forks = 10;
    let mut scan = |source: &mut ProcfsSource,
                    in_ns: &mut std::collections::HashMap<u32, usize>| {
        std::thread::sleep(Duration::from_millis(30));
        if forks_move {
            forks += 1;
            set_forks(root.path(), forks);
        }
        let stat_before = [truth(many).0, truth(one).0];
        let snapshot = source.snapshot().unwrap();
        for (i, pid) in [many, one].into_iter().enumerate() {
            let cpu = seen(&snapshot, pid).0;
            let group = Duration::from_nanos(super::clock::group_runtime(pid).unwrap());
            assert!(cpu <= group, "{pid}: {cpu:?} above its group's {group:?}");
            assert!(
                cpu + 2 * TICK >= stat_before[i],
                "{pid}: {cpu:?} behind stat"
            );
            let before = last.insert(pid, cpu).unwrap_or_default();
            assert!(cpu >= before, "{pid}: went back from {before:?} to {cpu:?}");
            *in_ns.entry(pid).or_insert(0) += usize::from(!whole_ticks(cpu));
        }
    };
    // `stat` first, with a baseline of the clock (and without a fork count before it, or with
    // one that moved), then the clock.
    for _ in 0..6 {
        scan(&mut source, &mut in_ns);
    }
    for pid in [many, one] {
        let baseline = source.cache.get(&pid).unwrap().credit.leader_runtime();
        assert!(
            matches!(baseline, Some(super::credit::Runtime::Group(_))),
            "{pid}: {baseline:?}"
        );
        assert!(in_ns[&pid] >= 3, "{pid}: {} credits in ns", in_ns[&pid]);
    }
}

/// A process read through its CPU clock is checked after the scan where the pid cursor moved
/// or is unknown (a fixture has none): here its `stat` shows another process at its pid by
/// then (its entry is pointed at a sleeper), so it is taken out of the snapshot, and the next
/// scan lists the tree and finds the process now there.
#[test]
fn a_process_whose_pid_changed_hands_during_a_clock_scan_is_taken_out() {
    let burner = spawn("while :; do :; done");
    // Started a few ticks later: another start time, as a process that took the pid has.
    std::thread::sleep(Duration::from_millis(50));
    let sleeper = spawn("sleep 60");
    let pid = burner.0.id();
    assert_ne!(truth(pid).1, truth(sleeper.0.id()).1);
    let (root, mut source) = fork_counted_tree(pid, pid);
    source.reader.count_fixture_forks();
    source.schedstat_counts = true;
    source.group_clock = true;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(20));
        let snapshot = source.snapshot().unwrap();
        assert_eq!(seen(&snapshot, pid).1, truth(pid).1);
    }
    let baseline = source.cache.get(&pid).unwrap().credit.leader_runtime();
    assert!(
        matches!(baseline, Some(super::credit::Runtime::Group(_))),
        "{baseline:?}"
    );
    link(root.path(), pid, sleeper.0.id());
    let snapshot = source.snapshot().unwrap();
    assert!(
        snapshot.processes.iter().all(|p| p.key.pid != pid),
        "still reported"
    );
    assert!(!source.cache.contains_key(&pid));
    // Listed again: the process now at the pid, from its own `stat`.
    let snapshot = source.snapshot().unwrap();
    assert_eq!(seen(&snapshot, pid).1, truth(sleeper.0.id()).1);
}

/// This host's pid cursor moves with every task created, and a fixture has none.
#[test]
fn the_last_pid_of_this_host_moves_when_a_task_starts() {
    let mut reader = super::ProcfsReader::new("/proc").unwrap();
    let before = reader.read_last_pid().unwrap();
    std::process::Command::new("true").status().unwrap();
    assert_ne!(reader.read_last_pid(), Some(before));
    let mut fixture = super::ProcfsReader::new(fixture_root().path()).unwrap();
    assert_eq!(fixture.read_last_pid(), None);
}

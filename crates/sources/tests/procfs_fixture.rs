//! The procfs source on fake trees: parsing, odd entries, and the once-per-process cache.

mod common;

use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{write_node, write_process, FakeProcess};
use kepler_core::{
    Classifier, NoWorkloads, ProcessInfo, ProcessType, ReadError, UsageSnapshot, UsageSource,
    WorkloadIdentity,
};
use kepler_sources::{probe, ProcessDescription, ProcfsReader, ProcfsSource};

fn hz() -> u64 {
    // SAFETY: sysconf reads a C library constant.
    u64::try_from(unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).unwrap()
}

fn ticks(t: u64) -> Duration {
    Duration::from_nanos(t * 1_000_000_000 / hz())
}

/// Counts calls, and marks processes whose command line says "vm" as VMs.
#[derive(Default)]
struct Counting(AtomicUsize);

impl Classifier for Counting {
    fn classify(&self, info: &ProcessInfo) -> WorkloadIdentity {
        self.0.fetch_add(1, Ordering::SeqCst);
        let process_type = if info.cmdline.iter().any(|a| a == "vm") {
            ProcessType::Vm
        } else {
            ProcessType::Regular
        };
        WorkloadIdentity {
            process_type,
            ..WorkloadIdentity::default()
        }
    }
}

fn find(snapshot: &UsageSnapshot, pid: u32) -> Option<&kepler_core::ProcessUsage> {
    snapshot.processes.iter().find(|p| p.key.pid == pid)
}

fn basic_tree(root: &Path) {
    write_node(root, [100, 10, 50, 1000, 20, 3, 4, 5, 60, 6], "4321.50");
    write_process(
        root,
        &FakeProcess {
            pid: 1,
            utime: 300,
            stime: 200,
            start_ticks: 2,
            ..FakeProcess::default()
        },
    );
    write_process(
        root,
        &FakeProcess {
            pid: 77,
            comm: "we(ird) ) 1 2 name",
            utime: 7,
            stime: 3,
            start_ticks: 4000,
            exe: Some("/opt/odd (deleted)"),
            cmdline: &["/opt/odd", "--flag", "vm"],
            cgroup: "12:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/system.slice/containerd.service\n",
            ..FakeProcess::default()
        },
    );
    write_process(
        root,
        &FakeProcess {
            pid: 2,
            comm: "kthreadd",
            flags: 0x0020_8040,
            start_ticks: 0,
            exe: None,
            cmdline: &[],
            cgroup: "0::/\n",
            ..FakeProcess::default()
        },
    );
    // A pid directory without `stat`, one with a truncated stat, one with garbage, and
    // directories that are not pids.
    fs::create_dir_all(root.join("500")).unwrap();
    fs::create_dir_all(root.join("501")).unwrap();
    fs::write(root.join("501/stat"), "501 (trunc) S 1 501 501 0 -1 0 0 0").unwrap();
    fs::create_dir_all(root.join("502")).unwrap();
    fs::write(root.join("502/stat"), "not a stat line at all").unwrap();
    fs::create_dir_all(root.join("self")).unwrap();
    fs::create_dir_all(root.join("sys")).unwrap();
    fs::write(root.join("12a"), "").unwrap();
}

#[test]
fn node_uptime_and_processes() {
    let dir = tempfile::tempdir().unwrap();
    basic_tree(dir.path());
    let mut source = ProcfsSource::new(dir.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    assert_eq!(source.name(), "procfs");
    let snap = source.snapshot().unwrap();

    assert_eq!(snap.uptime, Duration::new(4321, 500_000_000));
    assert_eq!(
        snap.node.total,
        ticks(100 + 10 + 50 + 1000 + 20 + 3 + 4 + 5)
    );
    assert_eq!(snap.node.idle, ticks(1000));
    assert_eq!(snap.node.iowait, ticks(20));

    let mut pids: Vec<u32> = snap.processes.iter().map(|p| p.key.pid).collect();
    pids.sort_unstable();
    assert_eq!(pids, vec![1, 2, 77]);

    let init = find(&snap, 1).unwrap();
    assert_eq!(init.cpu_time, ticks(500));
    assert_eq!(init.key.start_time, ticks(2));
    assert_eq!(init.info.comm, "init");
    assert_eq!(init.info.exe, "/sbin/init");
    assert_eq!(init.info.cmdline, vec!["/sbin/init"]);
    assert_eq!(init.info.cgroup_path, "/init.scope");
    assert!(!init.info.kernel_thread);
    assert!(!init.exited);
    assert!(init.counters.is_none());

    let odd = find(&snap, 77).unwrap();
    assert_eq!(odd.info.comm, "we(ird) ) 1 2 name");
    assert_eq!(odd.cpu_time, ticks(10));
    assert_eq!(odd.key.start_time, ticks(4000));
    assert_eq!(odd.info.exe, "/opt/odd (deleted)");
    assert_eq!(odd.info.cmdline, vec!["/opt/odd", "--flag", "vm"]);
    assert_eq!(odd.info.cgroup_path, "/docker/abc");

    let kthread = find(&snap, 2).unwrap();
    assert!(kthread.info.kernel_thread);
    assert_eq!(kthread.info.exe, "");
    assert!(kthread.info.cmdline.is_empty());
    assert_eq!(kthread.info.cgroup_path, "/");
}

#[test]
fn unreadable_identity_files_read_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    basic_tree(dir.path());
    // No exe link (as for other users' processes); cmdline a directory (read error, not ENOENT).
    write_process(
        dir.path(),
        &FakeProcess {
            pid: 90,
            exe: None,
            ..FakeProcess::default()
        },
    );
    fs::remove_file(dir.path().join("90/cmdline")).unwrap();
    fs::create_dir(dir.path().join("90/cmdline")).unwrap();
    // A process whose cgroup file is gone has exited: it is skipped, not misclassified.
    write_process(
        dir.path(),
        &FakeProcess {
            pid: 91,
            ..FakeProcess::default()
        },
    );
    fs::remove_file(dir.path().join("91/cgroup")).unwrap();

    let mut source = ProcfsSource::new(dir.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    let snap = source.snapshot().unwrap();
    let p = find(&snap, 90).unwrap();
    assert_eq!(p.info.exe, "");
    assert!(p.info.cmdline.is_empty());
    assert_eq!(p.info.cgroup_path, "/init.scope");
    assert!(find(&snap, 91).is_none());
}

#[test]
fn identity_is_read_once_per_process_and_evicted_when_gone() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    basic_tree(root);
    let classifier = Arc::new(Counting::default());
    let mut source = ProcfsSource::new(root.to_path_buf(), classifier.clone()).unwrap();
    let calls = || classifier.0.load(Ordering::SeqCst);

    let first = source.snapshot().unwrap();
    assert_eq!(calls(), 3);
    assert_eq!(
        find(&first, 77).unwrap().info.workload.process_type,
        ProcessType::Vm
    );

    // CPU time moves, the identity files change: only stat is read again.
    let moved = FakeProcess {
        pid: 1,
        utime: 400,
        stime: 200,
        start_ticks: 2,
        cmdline: &["changed"],
        ..FakeProcess::default()
    };
    write_process(root, &moved);
    let second = source.snapshot().unwrap();
    assert_eq!(calls(), 3);
    let (a, b) = (find(&first, 1).unwrap(), find(&second, 1).unwrap());
    assert!(Arc::ptr_eq(&a.info, &b.info));
    assert_eq!(b.cpu_time, ticks(600));
    assert_eq!(b.info.cmdline, vec!["/sbin/init"]);

    // The pid is reused by a new process: new start time, identity read again.
    write_process(
        root,
        &FakeProcess {
            start_ticks: 9000,
            ..moved
        },
    );
    let third = source.snapshot().unwrap();
    assert_eq!(calls(), 4);
    let reused = find(&third, 1).unwrap();
    assert_eq!(reused.key.start_time, ticks(9000));
    assert_eq!(reused.info.cmdline, vec!["changed"]);

    // Same process after an exec: comm changed, identity read again.
    write_process(
        root,
        &FakeProcess {
            comm: "bash",
            start_ticks: 9000,
            cmdline: &["bash"],
            ..moved
        },
    );
    let fourth = source.snapshot().unwrap();
    assert_eq!(calls(), 5);
    assert_eq!(find(&fourth, 1).unwrap().info.comm, "bash");
    assert_eq!(find(&fourth, 1).unwrap().info.cmdline, vec!["bash"]);

    // A process that disappears is dropped from the cache; coming back it is new again.
    let gone = root.join("77");
    fs::rename(&gone, root.join("not-a-pid")).unwrap();
    let fifth = source.snapshot().unwrap();
    assert!(find(&fifth, 77).is_none());
    assert_eq!(calls(), 5);
    fs::rename(root.join("not-a-pid"), &gone).unwrap();
    let sixth = source.snapshot().unwrap();
    assert!(find(&sixth, 77).is_some());
    assert_eq!(calls(), 6);
}

#[test]
fn a_kernel_thread_that_renames_itself_keeps_its_identity_and_takes_the_name() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    basic_tree(root);
    let kworker = FakeProcess {
        pid: 30,
        comm: "kworker/0:1-events",
        flags: 0x0420_8060,
        start_ticks: 50,
        exe: None,
        cmdline: &[],
        cgroup: "0::/\n",
        ..FakeProcess::default()
    };
    write_process(root, &kworker);
    let classifier = Arc::new(Counting::default());
    let mut source = ProcfsSource::new(root.to_path_buf(), classifier.clone()).unwrap();
    let calls = || classifier.0.load(Ordering::SeqCst);
    let first = source.snapshot().unwrap();
    assert_eq!(calls(), 4);
    assert_eq!(find(&first, 30).unwrap().info.cgroup_path, "/");

    // It serves another work queue: the new name, classified again; its cgroup is not read
    // again (the file changed here only to show that).
    write_process(
        root,
        &FakeProcess {
            comm: "kworker/0:1-mm_percpu_wq",
            utime: 5,
            cgroup: "0::/elsewhere\n",
            ..kworker
        },
    );
    let second = source.snapshot().unwrap();
    assert_eq!(calls(), 5);
    let renamed = find(&second, 30).unwrap();
    assert_eq!(renamed.info.comm, "kworker/0:1-mm_percpu_wq");
    assert_eq!(renamed.info.cgroup_path, "/");
    assert!(renamed.info.kernel_thread);
    assert_eq!(renamed.cpu_time, ticks(5));
    let third = source.snapshot().unwrap();
    assert_eq!(calls(), 5, "the new name is kept");
    assert!(Arc::ptr_eq(&renamed.info, &find(&third, 30).unwrap().info));

    // A user process that changes its name has exec'd: everything is read again.
    write_process(
        root,
        &FakeProcess {
            comm: "renamed",
            cgroup: "0::/moved.scope\n",
            utime: 300,
            stime: 200,
            start_ticks: 2,
            ..FakeProcess::default()
        },
    );
    let fourth = source.snapshot().unwrap();
    assert_eq!(calls(), 6);
    assert_eq!(find(&fourth, 1).unwrap().info.cgroup_path, "/moved.scope");
}

#[test]
fn many_processes_scan() {
    let dir = tempfile::tempdir().unwrap();
    common::write_many(dir.path(), 300);
    let mut source = ProcfsSource::new(dir.path().to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    for _ in 0..2 {
        let snap = source.snapshot().unwrap();
        assert_eq!(snap.processes.len(), 300);
        let total: Duration = snap.processes.iter().map(|p| p.cpu_time).sum();
        assert_eq!(total, ticks((0..300).map(|i| i + 1).sum()));
    }
}

#[test]
fn unavailable_and_read_errors() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let new = || ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads));

    let reason = new().err().unwrap().reason;
    assert!(reason.contains("stat"), "{reason}");
    fs::write(root.join("stat"), "intr 1 2\n").unwrap();
    let reason = new().err().unwrap().reason;
    assert!(reason.contains("cpu"), "{reason}");
    write_node(root, [1, 0, 1, 10, 0, 0, 0, 0, 0, 0], "12.00");
    fs::remove_file(root.join("uptime")).unwrap();
    let reason = new().err().unwrap().reason;
    assert!(reason.contains("uptime"), "{reason}");
    assert!(probe(root).is_err());

    write_node(root, [1, 0, 1, 10, 0, 0, 0, 0, 0, 0], "12.00");
    let detail = probe(root).unwrap();
    assert!(detail.contains("0 processes"), "{detail}");
    let mut source = new().unwrap();
    assert!(source.snapshot().unwrap().processes.is_empty());
    fs::write(root.join("uptime"), "soon\n").unwrap();
    assert!(matches!(source.snapshot(), Err(ReadError::Parse { .. })));
    fs::remove_file(root.join("stat")).unwrap();
    assert!(matches!(source.snapshot(), Err(ReadError::Io { .. })));
}

#[test]
fn large_stat_file_only_first_line_matters() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_node(root, [1, 0, 1, 10, 0, 0, 0, 0, 0, 0], "12.00");
    let mut stat = String::from("cpu  7 0 3 90 0 0 0 0 0 0\n");
    for cpu in 0..2000 {
        stat.push_str(&format!("cpu{cpu} 1 2 3 4 5 6 7 8 9 10\n"));
    }
    fs::write(root.join("stat"), stat).unwrap();
    let mut source = ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    assert_eq!(source.snapshot().unwrap().node.total, ticks(100));
}

#[test]
fn reader_describes_processes_as_the_source_does() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    basic_tree(root);
    let mut source = ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    let snap = source.snapshot().unwrap();
    let mut reader = ProcfsReader::new(root).unwrap();
    assert_eq!(reader.root(), root);
    assert_eq!(reader.user_hz(), hz());

    assert_eq!(reader.read_node_cpu_times().unwrap(), snap.node);
    for p in &snap.processes {
        let d: ProcessDescription = reader.describe(p.key.pid).unwrap();
        assert_eq!(d.key, p.key);
        // NoWorkloads leaves the workload at its default, as describe does.
        assert_eq!(d.info, *p.info);
        assert_eq!(reader.process_key(p.key.pid), Some(p.key));
    }
    // No stat, a truncated or garbage one, no such pid: nothing to describe.
    for pid in [500, 501, 502, 4242] {
        assert_eq!(reader.describe(pid), None, "{pid}");
        assert_eq!(reader.process_key(pid), None, "{pid}");
    }
    // Exited while being read (cgroup gone): no description, though stat still gives a key.
    fs::remove_file(root.join("77/cgroup")).unwrap();
    assert_eq!(reader.describe(77), None);
    assert_eq!(
        reader.process_key(77).map(|k| k.start_time),
        Some(ticks(4000))
    );

    // A boot-clock instant anywhere inside tick 4000 floors to the start time procfs shows.
    let tick = Duration::from_nanos(1_000_000_000 / hz());
    for extra in [
        Duration::ZERO,
        Duration::from_nanos(1),
        tick - Duration::from_nanos(1),
    ] {
        assert_eq!(reader.floor_to_tick(ticks(4000) + extra), ticks(4000));
    }

    fs::remove_file(root.join("stat")).unwrap();
    assert!(matches!(
        reader.read_node_cpu_times(),
        Err(ReadError::Io { .. })
    ));
    fs::write(root.join("stat"), "intr 1 2\n").unwrap();
    assert!(matches!(
        reader.read_node_cpu_times(),
        Err(ReadError::Parse { .. })
    ));
}

/// Rewrites the `stat` at `path`: its state and `num_threads`.
fn set_state(path: &Path, state: &str, threads: u32) {
    let line = fs::read_to_string(path)
        .unwrap()
        .replacen(") S ", &format!(") {state} "), 1)
        .replacen(" 20 0 1 0 ", &format!(" 20 0 {threads} 0 "), 1);
    fs::write(path, line).unwrap();
}

#[test]
fn an_ended_main_thread_is_described_without_exe_or_cmdline() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_node(root, [10, 0, 10, 100, 0, 0, 0, 0, 0, 0], "100.00");
    let churned = FakeProcess {
        pid: 60,
        comm: "true",
        start_ticks: 9000,
        exe: Some("/usr/bin/true"),
        cmdline: &["true"],
        cgroup: "0::/churn.scope\n",
        ..FakeProcess::default()
    };
    write_process(root, &churned);
    let mut reader = ProcfsReader::new(root).unwrap();
    let alive = reader.describe(60).unwrap();
    assert_eq!(alive.info.exe, "/usr/bin/true");
    assert_eq!(alive.info.cmdline, ["true"]);
    assert!(!alive.group_ending);
    // In its exit (`PF_EXITING`), not a zombie yet: still described whole, but ending.
    write_process(
        root,
        &FakeProcess {
            flags: churned.flags | 0x4,
            ..churned
        },
    );
    let exiting = reader.describe(60).unwrap();
    assert_eq!(exiting.info, alive.info);
    assert!(exiting.group_ending);
    write_process(root, &churned);

    // The same process as a zombie: the kernel shows neither (`procfs_real` checks that), so
    // neither is read, whatever this tree holds; its cgroup still is.
    let stat = root.join("60/stat");
    set_state(&stat, "Z", 1);
    let zombie = reader.describe(60).unwrap();
    assert_eq!(zombie.key, alive.key);
    assert_eq!(zombie.info.exe, "");
    assert!(zombie.info.cmdline.is_empty());
    assert_eq!(zombie.info.cgroup_path, "/churn.scope");
    assert!(zombie.group_ending);
    let mut source = ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    let snap = source.snapshot().unwrap();
    assert_eq!(*find(&snap, 60).unwrap().info, zombie.info);
    // An ended main thread with other threads left (`num_threads` 3): the group goes on.
    write_process(root, &churned);
    set_state(&stat, "Z", 3);
    assert!(!reader.describe(60).unwrap().group_ending);
}

/// A process whose main thread ended while another thread runs on: the kernel shows the main
/// thread's `exe` and `cmdline` empty and the root in its v1 cgroup lines, so the process is
/// described from the live thread's files; with no live thread, from what the main thread
/// still shows.
#[test]
fn a_process_whose_main_thread_left_is_described_from_a_live_thread() {
    use kepler_sources::cgroups::Counting as Hierarchies;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_node(root, [10, 0, 10, 100, 0, 0, 0, 0, 0, 0], "100.00");
    let leader = FakeProcess {
        pid: 70,
        comm: "daemon",
        start_ticks: 500,
        exe: None,
        cmdline: &[],
        cgroup: "2:cpuacct:/\n1:cpu:/\n0::/system.slice/d.service\n",
        ..FakeProcess::default()
    };
    write_process(root, &leader);
    set_state(&root.join("70/stat"), "Z", 2);
    write_process(&root.join("70/task"), &leader);
    set_state(&root.join("70/task/70/stat"), "Z", 2);
    let worker = FakeProcess {
        pid: 71,
        exe: Some("/usr/sbin/daemon"),
        cmdline: &["daemon", "-f"],
        cgroup: "2:cpuacct:/docker/abc\n1:cpu:/docker/abc\n0::/system.slice/d.service\n",
        ..leader
    };
    write_process(&root.join("70/task"), &worker);
    set_state(&root.join("70/task/71/stat"), "S", 2);
    let hierarchies = Hierarchies {
        cpuacct: Some("/sys/fs/cgroup/cpuacct".into()),
        unified: Some("/sys/fs/cgroup/unified".into()),
    };
    let mut reader = ProcfsReader::new(root).unwrap();
    reader.name_usage_cgroups(&hierarchies);
    let described = reader.describe(70).unwrap();
    assert_eq!(described.info.exe, "/usr/sbin/daemon");
    assert_eq!(described.info.cmdline, ["daemon", "-f"]);
    assert_eq!(described.info.cgroup_path, "/docker/abc");
    assert_eq!(
        described.info.usage_cgroup.as_deref(),
        Some("cpuacct:/docker/abc")
    );
    assert!(!described.group_ending, "a thread runs on");
    let mut source = ProcfsSource::new(root.to_path_buf(), Arc::new(NoWorkloads)).unwrap();
    let snap = source.snapshot().unwrap();
    assert_eq!(find(&snap, 70).unwrap().info.exe, described.info.exe);
    assert_eq!(
        find(&snap, 70).unwrap().info.cgroup_path,
        described.info.cgroup_path
    );

    // The other thread is leaving too: the main thread's own files are all there is.
    set_state(&root.join("70/task/71/stat"), "Z", 2);
    let described = reader.describe(70).unwrap();
    assert_eq!(described.info.exe, "");
    assert!(described.info.cmdline.is_empty());
    assert_eq!(described.info.cgroup_path, "/system.slice/d.service");
    assert_eq!(
        described.info.usage_cgroup.as_deref(),
        Some("unified:/system.slice/d.service")
    );
}

//! The procfs source against this host's `/proc`, with child processes it starts itself.

use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::thread::sleep;
use std::time::Duration;

use kepler_core::{NoWorkloads, UsageSnapshot, UsageSource};
use kepler_sources::cgroups::Counting;
use kepler_sources::{probe, ProcfsReader, ProcfsSource};
use kepler_testkit::churn::Reaped;

fn source() -> ProcfsSource {
    ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap()
}

fn find(snapshot: &UsageSnapshot, pid: u32) -> &kepler_core::ProcessUsage {
    snapshot
        .processes
        .iter()
        .find(|p| p.key.pid == pid)
        .unwrap_or_else(|| panic!("pid {pid} not in snapshot"))
}

/// Waits (up to 60 s) until `/proc/<pid>/stat` shows the main thread ended (`Z`) with
/// `threads` threads counted, then checks what the kernel shows of it: no `exe`, an empty
/// `cmdline`.
fn await_ended_main_thread(pid: u32, threads: u32) {
    let stat = format!("/proc/{pid}/stat");
    let threads = threads.to_string();
    let mut waited = Duration::ZERO;
    while !std::fs::read_to_string(&stat)
        .unwrap()
        .rsplit_once(')')
        .is_some_and(|(_, rest)| {
            // From field 3 (state) on: `num_threads` is field 20.
            let fields: Vec<&str> = rest.split_whitespace().collect();
            fields.first() == Some(&"Z") && fields.get(17) == Some(&threads.as_str())
        })
    {
        assert!(
            waited < Duration::from_secs(60),
            "{pid}'s main thread never ended"
        );
        sleep(Duration::from_millis(5));
        waited += Duration::from_millis(5);
    }
    assert!(std::fs::read_link(format!("/proc/{pid}/exe")).is_err());
    assert!(std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap()
        .is_empty());
}

#[test]
fn finds_a_sleeping_child_with_its_identity() {
    let child = Reaped(Command::new("sleep").arg("30").spawn().unwrap());
    let pid = child.0.id();
    // Wait until the fork has exec'd sleep.
    for _ in 0..100 {
        if std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "sleep") {
            break;
        }
        sleep(Duration::from_millis(10));
    }
    let mut source = source();
    let snap = source.snapshot().unwrap();
    let p = find(&snap, pid);
    assert_eq!(p.info.comm, "sleep");
    assert_eq!(p.info.cmdline, vec!["sleep", "30"]);
    assert!(p.info.exe.ends_with("sleep"), "{}", p.info.exe);
    assert!(!p.info.kernel_thread);
    assert!(p.key.start_time <= snap.uptime + Duration::from_millis(10));
    assert!(snap.uptime - p.key.start_time < Duration::from_secs(10));
    // A child inherits the test's cgroup.
    let me = find(&snap, std::process::id());
    assert_eq!(p.info.cgroup_path, me.info.cgroup_path);
    assert!(
        p.info.cgroup_path.starts_with('/'),
        "{}",
        p.info.cgroup_path
    );

    // The shared reader (what the eBPF source describes processes with) agrees, naming the
    // cgroups that count processes as the source does where the host mounts one.
    let mut reader = ProcfsReader::new("/proc").unwrap();
    if let Some(counting) = Counting::detect(Path::new("/proc")) {
        reader.name_usage_cgroups(&counting);
        assert!(
            p.info.usage_cgroup.is_some(),
            "counted nowhere: {:?}",
            p.info
        );
    }
    let described = reader.describe(pid).unwrap();
    assert_eq!(described.key, p.key);
    assert_eq!(described.info, *p.info);

    assert!(snap.node.total > snap.node.idle);
    assert!(snap.uptime > Duration::ZERO);
    for kthread in snap.processes.iter().filter(|p| p.info.kernel_thread) {
        assert_eq!(kthread.info.exe, "");
        assert!(kthread.info.cmdline.is_empty());
    }
    assert!(probe(Path::new("/proc")).unwrap().contains("processes"));
}

#[test]
fn busy_child_accumulates_cpu_time() {
    let child = Reaped(
        Command::new("sh")
            .args(["-c", "while :; do :; done"])
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    let mut source = source();
    let before = source.snapshot().unwrap();
    sleep(Duration::from_millis(600));
    let after = source.snapshot().unwrap();
    let (a, b) = (find(&before, pid), find(&after, pid));
    assert_eq!(a.key, b.key);
    assert!(Arc::ptr_eq(&a.info, &b.info));
    let used = b.cpu_time - a.cpu_time;
    // Other work may share the CPUs, so the floor is low; the ceiling is one CPU for the
    // interval plus a tick of rounding at each end.
    assert!(used >= Duration::from_millis(20), "{used:?}");
    let wall = after.uptime - before.uptime;
    assert!(
        used <= wall + Duration::from_millis(20),
        "{used:?} > {wall:?}"
    );
    assert!(after.node.total > before.node.total);
    assert!(after.uptime > before.uptime);

    drop(child);
    let gone = source.snapshot().unwrap();
    assert!(gone.processes.iter().all(|p| p.key.pid != pid));
}

/// What lets the source skip `exe` and `cmdline` of a process whose main thread has ended: the
/// kernel shows neither for it, as the source then reports.
#[test]
fn a_zombie_shows_no_exe_nor_cmdline_and_is_described_so() {
    let child = Reaped(Command::new("true").spawn().unwrap());
    let pid = child.0.id();
    // Not reaped until `child` drops: it stays a zombie once it has run.
    await_ended_main_thread(pid, 1);

    let described = ProcfsReader::new("/proc").unwrap().describe(pid).unwrap();
    assert_eq!(described.info.comm, "true");
    assert_eq!(described.info.exe, "");
    assert!(described.info.cmdline.is_empty());
    // (Its cgroup is read as before. The kernel shows a zombie in the root of every v1
    // hierarchy and in its own cgroup on the unified one.)
    assert!(described.info.cgroup_path.starts_with('/'));
    let snap = source().snapshot().unwrap();
    let v1_counted = Counting::detect(Path::new("/proc")).is_some_and(|c| c.cpuacct.is_some());
    if v1_counted {
        // Its `cgroup` file shows it in the v1 roots: left to its cgroup's counter
        // (`cgroup_remainders` checks where its time goes).
        assert!(snap.processes.iter().all(|p| p.key.pid != pid));
        return;
    }
    let seen = &find(&snap, pid).info;
    assert_eq!(
        (&seen.comm, &seen.exe, &seen.cmdline, &seen.cgroup_path),
        (
            &described.info.comm,
            &described.info.exe,
            &described.info.cmdline,
            &described.info.cgroup_path
        )
    );
}

/// A process whose main thread ended while another runs on: the kernel shows the main
/// thread's `exe` and `cmdline` empty (and the root in its v1 cgroup lines), a live thread's
/// all there; the process is described from that thread.
#[test]
fn a_process_whose_main_thread_ended_is_described_from_a_live_thread() {
    let child = Reaped(
        Command::new("python3")
            .args([
                "-c",
                "import ctypes, threading, time\n\
                 threading.Thread(target=time.sleep, args=(60,)).start()\n\
                 ctypes.CDLL(None).pthread_exit(None)\n",
                "left-behind",
            ])
            .spawn()
            .unwrap(),
    );
    let pid = child.0.id();
    // The main thread ended, the sleeper runs on.
    await_ended_main_thread(pid, 2);

    let described = ProcfsReader::new("/proc").unwrap().describe(pid).unwrap();
    assert!(
        described.info.exe.contains("python"),
        "{:?}",
        described.info
    );
    assert_eq!(
        described.info.cmdline.last().map(String::as_str),
        Some("left-behind")
    );
    assert!(!described.group_ending);
    let snap = source().snapshot().unwrap();
    let seen = &find(&snap, pid).info;
    assert_eq!(
        (&seen.exe, &seen.cmdline, &seen.cgroup_path),
        (
            &described.info.exe,
            &described.info.cmdline,
            &described.info.cgroup_path
        )
    );
}

//! Live tests of the eBPF source: they load the real programs, so they need root (CI runs as
//! root) and print why they skip otherwise; with `KEPLER_REQUIRE_TOOLS=1` (CI sets it) a
//! missing privilege or tool fails them instead. Run with `cargo test -p kepler-ebpf -- --nocapture`
//! to see the measured numbers.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::*;
use kepler_core::{
    AttributionConfig, Attributor, Classifier, NoWorkloads, Tick, UsageSnapshot, UsageSource,
};
use kepler_ebpf::{Accounting, EbpfSettings, EbpfSource, Exits};
use kepler_workloads::CgroupClassifier;

/// The live tests measure CPU time; running them one at a time keeps them from competing.
static SERIAL: Mutex<()> = Mutex::new(());

/// Not a test: the helper child modes, reached when the binary is re-executed with CHILD_ENV.
#[test]
fn child_entry_point() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    let parts: Vec<&str> = mode.split(':').collect();
    match parts.as_slice() {
        ["burn", ms] => burn_cpu(Duration::from_millis(ms.parse().unwrap())),
        ["burn-sleep-burn", a, pause, b] => {
            burn_cpu(Duration::from_millis(a.parse().unwrap()));
            std::thread::sleep(Duration::from_millis(pause.parse().unwrap()));
            burn_cpu(Duration::from_millis(b.parse().unwrap()));
        }
        ["burst", n, ms, naps] => fork_burst(
            n.parse().unwrap(),
            Duration::from_millis(ms.parse().unwrap()),
            naps.parse().unwrap(),
        ),
        ["staggered", threads, ms] => staggered(
            threads.parse().unwrap(),
            Duration::from_millis(ms.parse().unwrap()),
        ),
        ["pulse", threads, ms] => pulse(
            threads.parse().unwrap(),
            Duration::from_millis(ms.parse().unwrap()),
        ),
        ["probe"] => match kepler_ebpf::probe("/proc", &EbpfSettings::default()) {
            Ok(what) => {
                println!("PROBE-OK {what}");
                std::process::exit(3);
            }
            Err(why) => {
                println!("PROBE-UNAVAILABLE {why}");
                std::process::exit(0);
            }
        },
        _ => panic!("unknown child mode {mode}"),
    }
    std::process::exit(0);
}

/// Both ways of accounting CPU time: each live test runs with each.
const ACCOUNTINGS: [Accounting; 2] = [Accounting::Switch, Accounting::Iterator];

/// The source with exact exits: these tests follow each process to its end.
fn source(classifier: Arc<dyn Classifier>, accounting: Accounting) -> EbpfSource {
    let settings = EbpfSettings {
        exits: Exits::Exact,
        ..EbpfSettings::default()
    };
    source_with(classifier, settings, accounting)
}

fn source_with(
    classifier: Arc<dyn Classifier>,
    settings: EbpfSettings,
    accounting: Accounting,
) -> EbpfSource {
    let mut src = match EbpfSource::new("/proc", classifier, settings) {
        Ok(s) => s,
        Err(e) => panic!("running as root, eBPF must load: {e}"),
    };
    if accounting == Accounting::Iterator {
        // The optional probes need sched_switch; these tests measure CPU time only.
        src.retain_features(&[]);
        if let Err(why) = src.use_task_iterator() {
            panic!("the task iterator must be usable on this kernel: {why}");
        }
    }
    assert_eq!(src.accounting(), accounting);
    src
}

#[test]
fn burning_child_is_credited_its_cpu_time() {
    if skip_unless_root("burning_child_is_credited_its_cpu_time") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in ACCOUNTINGS {
        burning_child_with(accounting);
    }
}

fn burning_child_with(accounting: Accounting) {
    let mut src = source(Arc::new(NoWorkloads), accounting);
    let s0 = src.snapshot().unwrap();
    let exe = std::env::current_exe().unwrap();
    // Reaped with wait4 below (for its rusage), not through `Child`.
    #[allow(clippy::zombie_processes)]
    let child = child_command(&exe, "burn:1500").spawn().unwrap();
    let pid = child.id();
    // Read the start time the procfs way while the child lives, to compare keys.
    std::thread::sleep(Duration::from_millis(100));
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let start_ticks: u64 = stat
        .rsplit_once(')')
        .unwrap()
        .1
        .split_whitespace()
        .nth(22 - 3)
        .unwrap()
        .parse()
        .unwrap();
    // Mid-run, the running stretch counts too: the credited time follows the kernel's own
    // runtime (schedstat) closely even if the child has not left its CPU for a while.
    std::thread::sleep(Duration::from_millis(700));
    let live = src.snapshot().unwrap();
    // Per-switch accounting charges a process that keeps switching to its slot.
    if accounting == Accounting::Switch {
        let stats = src.stats();
        let slotted = stats
            .slotted_processes
            .load(std::sync::atomic::Ordering::Relaxed);
        assert!(slotted > 0, "no process read with a slot: {stats}");
    }
    // Summed over threads: the harness burns in a test thread, not the main one.
    let runtime = scheduler_runtime(pid);
    let (status, rusage_cpu) = wait_cpu(pid);
    assert_eq!(status, 0, "child failed");
    let s1 = snapshots_until_exit(&mut src, pid).pop().unwrap();
    let s2 = src.snapshot().unwrap();

    let live_entry = live.processes.iter().find(|p| p.key.pid == pid);
    let live_entry = live_entry.expect("running child in the snapshot");
    assert!(!live_entry.exited);
    // SAFETY: sysconf has no preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let procfs_start = Duration::from_nanos(start_ticks * (1_000_000_000 / hz));
    assert_eq!(
        live_entry.key.start_time, procfs_start,
        "key must match /proc/<pid>/stat"
    );
    assert!(s0.processes.iter().all(|p| p.key != live_entry.key));
    println!(
        "{accounting:?}: burn mid-run: eBPF {:?}, schedstat just after {runtime:?}",
        live_entry.cpu_time
    );
    // eBPF counts wall time between switches, which includes the IRQ and steal time the
    // scheduler leaves out: allow it a few percent above.
    assert!(
        live_entry.cpu_time <= runtime.mul_f64(1.04) + Duration::from_millis(5)
            && live_entry.cpu_time + Duration::from_millis(50) >= runtime,
        "mid-run credit {:?} vs kernel runtime {runtime:?}",
        live_entry.cpu_time
    );

    let exited: Vec<_> = s1.processes.iter().filter(|p| p.key.pid == pid).collect();
    assert_eq!(exited.len(), 1, "the exited child is reported once");
    assert!(exited[0].exited);
    assert_eq!(exited[0].key, live_entry.key);
    assert!(
        s2.processes.iter().all(|p| p.key != live_entry.key),
        "not reported again after its exit"
    );
    let credited = exited[0].cpu_time;
    let err = (credited.as_secs_f64() - rusage_cpu.as_secs_f64()).abs() / rusage_cpu.as_secs_f64();
    println!(
        "{accounting:?}: burn: eBPF credited {credited:?}, kernel rusage {rusage_cpu:?} \
         (error {:.2}%), target 1.5 s",
        err * 100.0
    );
    assert!(err < 0.05, "credited {credited:?} vs rusage {rusage_cpu:?}");
    assert!(rusage_cpu >= Duration::from_millis(1500));
    // Counters come with a reading only while an optional probe counts: nothing else reads
    // them. Switches are counted with them.
    let probes = src.probes();
    let counting = [&probes.page_cache, &probes.softirq, &probes.hw_counters]
        .into_iter()
        .any(|p| p.is_active());
    match exited[0].counters.as_deref() {
        Some(c) => assert!(
            counting && c.context_switches.is_some_and(|n| n > 0),
            "context switches counted"
        ),
        None => assert!(!counting, "counters missing while {probes}"),
    }
}

/// Snapshots until one reports `pid` exited, for up to 3 s, and returns them (the last one
/// reports the exit unless time ran out). The exit comes at the process's final switch, which
/// can follow the wake-up of its parent; until then the process reads as it was.
fn snapshots_until_exit(src: &mut EbpfSource, pid: u32) -> Vec<UsageSnapshot> {
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut snaps = Vec::new();
    loop {
        let s = src.snapshot().unwrap();
        let reported = s.processes.iter().any(|p| p.key.pid == pid && p.exited);
        snaps.push(s);
        if reported || Instant::now() > deadline {
            return snaps;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What a process older than the source's first snapshot is credited is what it used after
/// that snapshot, in both accountings: `sched_switch` readings count from load and the first
/// snapshot is the attribution's baseline; task iterator readings count from the task's start
/// and are reported relative to that snapshot.
#[test]
fn a_process_older_than_the_first_snapshot_is_credited_what_it_used_since() {
    let test = "a_process_older_than_the_first_snapshot_is_credited_what_it_used_since";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in ACCOUNTINGS {
        older_process_with(accounting);
    }
}

fn older_process_with(accounting: Accounting) {
    let mut src = source(Arc::new(NoWorkloads), accounting);
    let exe = std::env::current_exe().unwrap();
    // Reaped with wait4 below (for its rusage), not through `Child`.
    #[allow(clippy::zombie_processes)]
    let child = child_command(&exe, "burn-sleep-burn:300:1500:400")
        .spawn()
        .unwrap();
    let pid = child.id();
    // The first snapshot while it sleeps, its CPU time then read from the scheduler.
    std::thread::sleep(Duration::from_millis(800));
    let first = src.snapshot().unwrap();
    let before = scheduler_runtime(pid);
    let (status, rusage_cpu) = wait_cpu(pid);
    assert_eq!(status, 0, "child failed");
    let last = snapshots_until_exit(&mut src, pid).pop().unwrap();
    let exit = last.processes.iter().find(|p| p.key.pid == pid && p.exited);
    let exited = exit
        .unwrap_or_else(|| panic!("{accounting:?}: no exit reported"))
        .cpu_time;
    let at_first = first
        .processes
        .iter()
        .find(|p| p.key.pid == pid)
        .map_or(Duration::ZERO, |p| p.cpu_time);
    let credited = exited.saturating_sub(at_first);
    let truth = rusage_cpu.saturating_sub(before);
    println!(
        "{accounting:?}: older process: first snapshot {at_first:?}, exit {exited:?}, credited \
         {credited:?}; rusage {rusage_cpu:?} less {before:?} before = {truth:?}"
    );
    assert!(truth >= Duration::from_millis(400));
    if accounting == Accounting::Iterator {
        // Relative to that snapshot it had used nothing yet: not reported there.
        assert_eq!(at_first, Duration::ZERO);
    }
    // eBPF counts wall time between switches, which includes IRQ time the scheduler leaves
    // out: a few percent above, never much below.
    assert!(
        credited + Duration::from_millis(20) >= truth
            && credited <= truth.mul_f64(1.05) + Duration::from_millis(20),
        "{accounting:?}: credited {credited:?} vs {truth:?}"
    );
}

/// A process whose threads end one after the other, the last ones with the process itself: the
/// time of every thread is credited to it, those ended early included, once.
#[test]
fn every_thread_of_an_ended_process_is_credited() {
    let test = "every_thread_of_an_ended_process_is_credited";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in ACCOUNTINGS {
        let mut src = source(Arc::new(NoWorkloads), accounting);
        let first = src.snapshot().unwrap();
        let exe = std::env::current_exe().unwrap();
        // Reaped with wait4 below (for its rusage), not through `Child`.
        #[allow(clippy::zombie_processes)]
        let child = child_command(&exe, "staggered:4:150").spawn().unwrap();
        let pid = child.id();
        let mut snaps = vec![first];
        // Snapshots while threads end, so that the process is seen live first.
        for _ in 0..4 {
            std::thread::sleep(Duration::from_millis(120));
            snaps.push(src.snapshot().unwrap());
        }
        let (_, rusage_cpu) = wait_cpu(pid);
        snaps.extend(snapshots_until_exit(&mut src, pid));
        snaps.push(src.snapshot().unwrap());
        let reports: Vec<_> = snaps
            .iter()
            .flat_map(|s| &s.processes)
            .filter(|p| p.key.pid == pid)
            .collect();
        assert!(
            reports.iter().any(|p| !p.exited),
            "{accounting:?}: seen live"
        );
        let ended: Vec<_> = reports.iter().filter(|p| p.exited).collect();
        assert!(!ended.is_empty(), "{accounting:?}: its end reported");
        let credited = reports.iter().map(|p| p.cpu_time).max().unwrap();
        let err =
            (credited.as_secs_f64() - rusage_cpu.as_secs_f64()).abs() / rusage_cpu.as_secs_f64();
        println!(
            "{accounting:?}: 4 threads ending one after the other: credited {credited:?}, \
             rusage {rusage_cpu:?} (error {:.2}%)",
            err * 100.0
        );
        assert!(rusage_cpu >= Duration::from_millis(1000), "{rusage_cpu:?}");
        assert!(
            err < 0.05,
            "{accounting:?}: credited {credited:?} vs rusage {rusage_cpu:?}"
        );
    }
}

/// A task that leaves its CPU between the map read and the running-stretch read is read
/// without that stretch, below what an earlier snapshot (which saw part of the stretch as
/// running) reported. Cumulative CPU time must still never decrease: snapshots taken back to
/// back while threads switch in and out thousands of times a second.
#[test]
fn cumulative_cpu_time_never_decreases() {
    if skip_unless_root("cumulative_cpu_time_never_decreases") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in ACCOUNTINGS {
        never_decreases_with(accounting);
    }
}

fn never_decreases_with(accounting: Accounting) {
    let mut src = source(Arc::new(NoWorkloads), accounting);
    let exe = std::env::current_exe().unwrap();
    let mut child = child_command(&exe, "pulse:4:2000").spawn().unwrap();
    let pid = child.id();
    let mut last: Option<Duration> = None;
    let (mut snapshots, mut decreases, mut worst) = (0u32, 0u32, Duration::ZERO);
    while child.try_wait().unwrap().is_none() {
        let snap = src.snapshot().unwrap();
        snapshots += 1;
        let Some(p) = snap.processes.iter().find(|p| p.key.pid == pid) else {
            continue;
        };
        if let Some(prev) = last {
            if p.cpu_time < prev {
                decreases += 1;
                worst = worst.max(prev - p.cpu_time);
            }
        }
        last = Some(last.map_or(p.cpu_time, |l| l.max(p.cpu_time)));
    }
    println!(
        "{accounting:?}: {snapshots} back-to-back snapshots of a pulsing child: {decreases} \
         decreases (largest {worst:?})"
    );
    assert!(snapshots > 50, "only {snapshots} snapshots");
    assert_eq!(
        decreases, 0,
        "cumulative CPU time went back (by up to {worst:?})"
    );
}

/// Exited processes of container `id` that `snaps` report.
fn exited_in(snaps: &[UsageSnapshot], id: &str) -> usize {
    snaps
        .iter()
        .flat_map(|s| &s.processes)
        .filter(|p| {
            p.exited
                && p.info
                    .workload
                    .container
                    .as_ref()
                    .is_some_and(|c| c.id == id)
        })
        .count()
}

/// CPU time the attribution credits to container `id` over consecutive `snaps` (processes
/// and, where the source reads cgroup counters, the time of those it did not list).
fn attributed_over(snaps: &[UsageSnapshot], id: &str, counts_from_start: bool) -> Duration {
    let mut attributor = Attributor::new(AttributionConfig::default());
    if counts_from_start {
        attributor = attributor.counting_from_source_start();
    }
    let mut last = None;
    for usage in snaps {
        last = Some(attributor.tick(Tick {
            usage,
            energy: None,
            interval: Duration::from_secs(1),
        }));
    }
    last.and_then(|s| {
        s.containers
            .iter()
            .find(|c| c.container.id == id)
            .map(|c| c.cpu_time)
    })
    .unwrap_or_default()
}

/// Runs `with` for each accounting, as root, with cgroup2 mounted (the test skips otherwise),
/// one live test at a time.
fn each_accounting_in_cgroup2(test: &str, with: fn(&std::path::Path, Accounting)) {
    if skip_unless_root(test) {
        return;
    }
    let Some(root) = cgroup2_mount() else {
        skip(test, "no cgroup2 mount");
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in ACCOUNTINGS {
        with(&root, accounting);
    }
}

/// Runs the burst scenario against one source: snapshots every `tick` while a launcher in a
/// container-like cgroup forks `n` processes of `each` CPU, burnt in `naps + 1` pieces (see
/// `fork_burst`). Returns (attributed to the container, the cgroup's own usage, exited
/// processes seen in the container).
fn burst_scenario(
    src: &mut dyn UsageSource,
    cgroup: &TestCgroup,
    (n, naps): (u32, u32),
    each: Duration,
    tick: Duration,
) -> (Duration, Duration, usize) {
    let exe = std::env::current_exe().unwrap();
    let mut snaps: Vec<UsageSnapshot> = vec![src.snapshot().unwrap()];
    let u0 = cgroup.usage();
    let mut cmd = child_command(&exe, &format!("burst:{n}:{}:{naps}", each.as_millis()));
    cgroup.join_on_exec(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut next = Instant::now() + tick;
    loop {
        std::thread::sleep(Duration::from_millis(20));
        let done = child.try_wait().unwrap();
        if done.is_some() || Instant::now() >= next {
            snaps.push(src.snapshot().unwrap());
            next += tick;
        }
        if let Some(status) = done {
            assert!(status.success(), "launcher failed");
            break;
        }
    }
    let used = cgroup.usage().saturating_sub(u0);
    let id = &cgroup.container_id;
    // An exit comes at its last thread's final switch, which can follow the wake-up of its
    // parent: a few more snapshots collect the last of them.
    let deadline = Instant::now() + Duration::from_secs(3);
    while exited_in(&snaps, id) <= n as usize && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        snaps.push(src.snapshot().unwrap());
    }
    let attributed = attributed_over(&snaps, id, src.counts_from_start());
    (attributed, used, exited_in(&snaps, id))
}

#[test]
fn short_lived_burst_reaches_its_container() {
    if skip_unless_root("short_lived_burst_reaches_its_container") {
        return;
    }
    let Some(root) = cgroup2_mount() else {
        skip(
            "short_lived_burst_reaches_its_container",
            "no cgroup2 mount",
        );
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    const N: u32 = 500;
    let each = Duration::from_millis(3);
    // One interval of the default monitor.interval: the whole burst fits in it.
    let tick = Duration::from_secs(5);
    let classifier: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());

    let mut ebpf_runs = Vec::new();
    for accounting in ACCOUNTINGS {
        let cg = TestCgroup::create_v2(&root, "ebpf").unwrap();
        let mut ebpf = source(classifier.clone(), accounting);
        let (attributed, used, exited) = burst_scenario(&mut ebpf, &cg, (N, 0), each, tick);
        ebpf_runs.push((accounting, attributed, used, exited));
    }

    let cg = TestCgroup::create_v2(&root, "procfs").unwrap();
    let mut procfs = kepler_sources::ProcfsSource::new("/proc".into(), classifier).unwrap();
    let (p_attributed, p_used, _) = burst_scenario(&mut procfs, &cg, (N, 0), each, tick);
    let procfs_share = p_attributed.as_secs_f64() / p_used.as_secs_f64();

    println!(
        "burst of {N} × {each:?} in one {tick:?} interval: procfs attributed {p_attributed:?} \
         of {p_used:?} ({:.1}%)",
        procfs_share * 100.0
    );
    for (accounting, attributed, used, exited) in ebpf_runs {
        let ebpf_share = attributed.as_secs_f64() / used.as_secs_f64();
        println!(
            "{accounting:?}: eBPF attributed {attributed:?} of the cgroup's {used:?} ({:.1}%, \
             {exited} exited processes)",
            ebpf_share * 100.0
        );
        assert!(
            exited > N as usize,
            "{accounting:?}: every short-lived process reported, got {exited}"
        );
        assert!(
            ebpf_share >= 0.95,
            "{accounting:?}: eBPF attributed only {:.1}%",
            ebpf_share * 100.0
        );
        assert!(
            ebpf_share <= 1.05,
            "{accounting:?}: eBPF attributed {:.1}%",
            ebpf_share * 100.0
        );
    }
}

/// A burst of exits far larger than the exit ring (one page: ~30 records): what does not fit
/// stays in the process map, marked, and is collected at the next snapshot, so the container
/// still gets all of its CPU time, every process is reported exited, and nothing counts as lost.
/// Each process sleeps three times: with per-switch accounting most of its time is then in its
/// slot, which the kernel adds to the entry it leaves marked.
#[test]
fn exits_beyond_a_full_ring_are_not_lost() {
    each_accounting_in_cgroup2("exits_beyond_a_full_ring_are_not_lost", full_ring_with);
}

fn full_ring_with(root: &std::path::Path, accounting: Accounting) {
    const N: u32 = 300;
    let each = Duration::from_millis(4);
    let tick = Duration::from_secs(5);
    let classifier: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());
    let settings = EbpfSettings {
        exit_buffer_bytes: 4096,
        exits: Exits::Exact,
        ..EbpfSettings::default()
    };
    let mut src = source_with(classifier, settings, accounting);
    let stats = src.stats();
    let cg = TestCgroup::create_v2(root, "ebpf-ring").unwrap();
    let (attributed, used, exited) = burst_scenario(&mut src, &cg, (N, 3), each, tick);
    // One more snapshot collects what the last one found marked.
    src.snapshot().unwrap();
    let share = attributed.as_secs_f64() / used.as_secs_f64();
    let deferred = stats
        .exits_deferred
        .load(std::sync::atomic::Ordering::Relaxed);
    println!(
        "{accounting:?}: burst of {N} × {each:?} through a one-page exit ring: attributed \
         {attributed:?} of {used:?} ({:.1}%), {exited} exited processes, {deferred} exits \
         deferred; {stats}",
        share * 100.0
    );
    assert!(deferred > 0, "the ring never filled: {stats}");
    assert_eq!(stats.dropped(), 0, "{stats}");
    assert!(exited > N as usize, "every process reported, got {exited}");
    assert!(share >= 0.95, "attributed only {:.1}%", share * 100.0);
    assert!(share <= 1.05, "attributed {:.1}%", share * 100.0);
}

/// Exits faster than the ring holds an interval: after an interval that overflowed it, the
/// source asks to be drained between snapshots (`drain_every`), and drained as it asks (as the
/// agent's waits between ticks do) the later intervals of the same churn stay in the ring: next
/// to nothing deferred, every process reported, the container credited what its cgroup used.
#[test]
fn a_ring_drained_between_snapshots_keeps_up_with_churn() {
    each_accounting_in_cgroup2(
        "a_ring_drained_between_snapshots_keeps_up_with_churn",
        drained_ring_with,
    );
}

fn drained_ring_with(root: &std::path::Path, accounting: Accounting) {
    const N: u32 = 1_500;
    let each = Duration::from_millis(3);
    let interval = Duration::from_secs(2);
    // ~200 records: well under what an interval brings.
    let settings = EbpfSettings {
        exit_buffer_bytes: 32 << 10,
        exits: Exits::Exact,
        ..EbpfSettings::default()
    };
    let classifier: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());
    let mut src = source_with(classifier, settings, accounting);
    let stats = src.stats();
    let deferred = || {
        stats
            .exits_deferred
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let cg = TestCgroup::create_v2(root, "ebpf-drained").unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut snaps = vec![src.snapshot().unwrap()];
    assert_eq!(src.drain_every(), None, "no exits yet");
    let u0 = cg.usage();
    let mut cmd = child_command(&exe, &format!("burst:{N}:{}:0", each.as_millis()));
    cg.join_on_exec(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut next = Instant::now() + interval;
    let mut drained = Instant::now();
    let mut first_interval = None;
    let mut drains = 0;
    let status = loop {
        std::thread::sleep(Duration::from_millis(10));
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() >= next {
            snaps.push(src.snapshot().unwrap());
            next += interval;
            first_interval.get_or_insert((deferred(), src.drain_every()));
        } else if src
            .drain_every()
            .is_some_and(|every| drained.elapsed() >= every)
        {
            src.drain();
            drains += 1;
            drained = Instant::now();
        }
    };
    assert!(status.success(), "launcher failed");
    let later_intervals = snaps.len().saturating_sub(2);
    let (overflowed, every) = first_interval.expect("the churn outlasted one interval");
    // The last exits come at their final switches, after the launcher's wait.
    std::thread::sleep(Duration::from_millis(200));
    snaps.push(src.snapshot().unwrap());
    let used = cg.usage().saturating_sub(u0);
    let later = deferred() - overflowed;
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(50));
        snaps.push(src.snapshot().unwrap());
    }
    let id = &cg.container_id;
    let attributed = attributed_over(&snaps, id, src.counts_from_start());
    let exited = exited_in(&snaps, id);
    let share = attributed.as_secs_f64() / used.as_secs_f64();
    println!(
        "{accounting:?}: {N} × {each:?} through a ~200-record ring, {interval:?} intervals: \
         {overflowed} exits deferred in the first, then drains every {every:?} ({drains} in \
         all) and {later} deferred in {later_intervals} more; {exited} exited processes, \
         attributed {attributed:?} of {used:?} ({:.1}%)",
        share * 100.0
    );
    assert!(overflowed > 0, "{accounting:?}: the ring never filled");
    let every = every.unwrap_or_else(|| panic!("{accounting:?}: no drains asked for"));
    assert!(every < interval, "{accounting:?}: {every:?}");
    assert!(later_intervals > 0, "the churn ended within two intervals");
    assert!(
        later * 2 <= overflowed * later_intervals as u64,
        "{accounting:?}: {later} deferred in {later_intervals} drained intervals, {overflowed} \
         in the first"
    );
    assert!(exited > N as usize, "every process reported, got {exited}");
    assert!(share >= 0.95, "attributed only {:.1}%", share * 100.0);
    assert!(share <= 1.05, "attributed {:.1}%", share * 100.0);
}

/// The same burst where the container exists only in the v1 cpu/cpuacct hierarchies (a hybrid
/// host's cgroupfs-driver runtime): exited processes reach it through the cpu cgroup id that
/// the exit record carries.
#[test]
fn short_lived_burst_reaches_a_v1_only_container() {
    if skip_unless_root("short_lived_burst_reaches_a_v1_only_container") {
        return;
    }
    // Not a missing tool but the host's layout: cgroup2-only hosts (most CI runners) have no
    // v1 hierarchy, so this skips even when tools are required.
    let (Some(cpu), Some(cpuacct)) = (cgroup_v1_mount("cpu"), cgroup_v1_mount("cpuacct")) else {
        println!(
            "SKIP short_lived_burst_reaches_a_v1_only_container: no v1 cpu/cpuacct hierarchy \
             (a cgroup2-only host)"
        );
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    const N: u32 = 500;
    let each = Duration::from_millis(3);
    for accounting in ACCOUNTINGS {
        let cg = TestCgroup::create_v1(&cpu, &cpuacct, "v1").unwrap();
        let mut ebpf = source(Arc::new(CgroupClassifier::new()), accounting);
        let (attributed, used, exited) =
            burst_scenario(&mut ebpf, &cg, (N, 0), each, Duration::from_secs(5));
        let share = attributed.as_secs_f64() / used.as_secs_f64();
        println!(
            "{accounting:?}: v1-only container, burst of {N} × {each:?}: eBPF attributed \
             {attributed:?} of cpuacct's {used:?} ({:.1}%, {exited} exited processes)",
            share * 100.0
        );
        assert!(
            exited > N as usize,
            "{accounting:?}: every short-lived process reported, got {exited}"
        );
        assert!(
            (0.95..=1.05).contains(&share),
            "{accounting:?}: eBPF attributed {:.1}%",
            share * 100.0
        );
    }
}

fn run_probe_child(setpriv_args: &[&str]) -> (i32, String) {
    // The unprivileged user must be able to execute the binary: copy it somewhere readable.
    let dir = tempfile::tempdir().unwrap();
    let exe = dir.path().join("live-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let inner = child_command(&exe, "probe");
    let mut cmd = std::process::Command::new("setpriv");
    cmd.args(setpriv_args)
        .arg(inner.get_program())
        .args(inner.get_args());
    for (k, v) in inner.get_envs() {
        if let Some(v) = v {
            cmd.env(k, v);
        }
    }
    let out = cmd.output().unwrap();
    let text =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    (out.status.code().unwrap_or(-1), text)
}

#[test]
fn loading_without_capabilities_fails_cleanly() {
    if skip_unless_root("loading_without_capabilities_fails_cleanly") {
        return;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        skip(
            "loading_without_capabilities_fails_cleanly",
            "setpriv not installed (util-linux)",
        );
        return;
    }
    let nobody = [
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
    ];
    let root_without_caps = ["--inh-caps=-all", "--bounding-set=-all"];
    for (who, args) in [
        ("nobody", &nobody[..]),
        ("root without capabilities", &root_without_caps[..]),
    ] {
        let (code, out) = run_probe_child(args);
        println!("{who}: exit {code}: {}", out.trim());
        assert_eq!(
            code, 0,
            "probe must report unavailability, not load or panic: {out}"
        );
        assert!(
            out.contains("PROBE-UNAVAILABLE eBPF: needs root or CAP_BPF and CAP_PERFMON"),
            "{out}"
        );
    }
}

#[test]
fn probe_as_root_lists_the_optional_probes() {
    if skip_unless_root("probe_as_root_lists_the_optional_probes") {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let what = kepler_ebpf::probe("/proc", &EbpfSettings::default()).unwrap();
    println!("{what}");
    for part in ["page cache hits", "softirqs", "hardware counters"] {
        assert!(what.contains(part), "{what}");
    }
    // Everything optional off: still loads.
    let bare = EbpfSettings {
        page_cache: false,
        softirq: false,
        hw_counters: false,
        ..Default::default()
    };
    let mut src = EbpfSource::new("/proc", Arc::new(NoWorkloads), bare).unwrap();
    assert!(!src.probes().page_cache.is_active());
    let snap = src.snapshot().unwrap();
    assert!(snap.node.total > Duration::ZERO);
    assert!(snap.uptime > Duration::ZERO);
    let c = snap.processes.iter().find_map(|p| p.counters.as_deref());
    assert!(c.is_none_or(|c| c.page_cache_hits.is_none() && c.cpu_cycles.is_none()));
}

/// Runs a launcher of `n` processes of `each` CPU in `cgroup` and waits for it, taking a
/// snapshot every 500 ms meanwhile.
fn run_burst(
    src: &mut EbpfSource,
    cgroup: &TestCgroup,
    n: u32,
    each: Duration,
) -> Vec<UsageSnapshot> {
    let exe = std::env::current_exe().unwrap();
    let mut cmd = child_command(&exe, &format!("burst:{n}:{}:0", each.as_millis()));
    cgroup.join_on_exec(&mut cmd);
    let mut child = cmd.spawn().unwrap();
    let mut snaps = Vec::new();
    let mut next = Instant::now() + Duration::from_millis(500);
    while child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(20));
        if Instant::now() >= next {
            snaps.push(src.snapshot().unwrap());
            next += Duration::from_millis(500);
        }
    }
    snaps
}

/// A process that stays in `cgroup`, so that its counter is read from before a burst.
fn resident(cgroup: &TestCgroup) -> std::process::Child {
    let mut cmd = std::process::Command::new("sleep");
    cmd.arg("60");
    cgroup.join_on_exec(&mut cmd);
    cmd.spawn().unwrap()
}

/// Exits counted through the cgroups (`ebpf.exits: cgroups`): nothing runs on `sched_switch`,
/// the short-lived processes of a burst are not reported one by one, and their container is
/// credited what its cgroup's counter says they used.
#[test]
fn counted_exits_reach_their_container() {
    let test = "counted_exits_reach_their_container";
    if skip_unless_root(test) {
        return;
    }
    let Some(root) = cgroup2_mount() else {
        skip(test, "no cgroup2 mount");
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    const N: u32 = 300;
    let cg = TestCgroup::create_v2(&root, "counted").unwrap();
    let mut sleeper = resident(&cg);
    let settings = EbpfSettings {
        exits: Exits::Cgroups,
        ..EbpfSettings::default()
    };
    let classifier: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());
    let mut src = source_with(classifier, settings, Accounting::Iterator);
    let stats = src.stats();
    assert!(stats
        .exits_counted
        .load(std::sync::atomic::Ordering::Relaxed));
    // The first snapshot lists the resident process and reads its cgroup's counter (a
    // baseline).
    let mut snaps = vec![src.snapshot().unwrap(), src.snapshot().unwrap()];
    let u0 = cg.usage();
    snaps.extend(run_burst(&mut src, &cg, N, Duration::from_millis(3)));
    snaps.push(src.snapshot().unwrap());
    let used = cg.usage().saturating_sub(u0);
    let id = &cg.container_id;
    let attributed = attributed_over(&snaps, id, src.counts_from_start());
    let share = attributed.as_secs_f64() / used.as_secs_f64();
    let exited = exited_in(&snaps, id);
    println!(
        "counted exits: burst of {N} × 3 ms: attributed {attributed:?} of the cgroup's {used:?} \
         ({:.1}%), {exited} processes reported one by one; {stats}",
        share * 100.0
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert!(
        used >= Duration::from_millis(500),
        "the burst used {used:?}"
    );
    assert!(
        (0.98..=1.02).contains(&share),
        "attributed {:.1}%",
        share * 100.0
    );
    assert!(
        exited < N as usize / 10,
        "{exited} short-lived processes reported"
    );
    assert_eq!(stats.dropped(), 0, "{stats}");
}

/// Turning from exact exits to counted ones and back while a container churns: every burst
/// is credited to the container, whichever way its exits were learnt, and what the resident
/// process reports goes on across both turns.
#[test]
fn turns_between_exact_and_counted_exits_lose_nothing() {
    let test = "turns_between_exact_and_counted_exits_lose_nothing";
    if skip_unless_root(test) {
        return;
    }
    let Some(root) = cgroup2_mount() else {
        skip(test, "no cgroup2 mount");
        return;
    };
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    const N: u32 = 200;
    let each = Duration::from_millis(3);
    let cg = TestCgroup::create_v2(&root, "turns").unwrap();
    let mut sleeper = resident(&cg);
    let classifier: Arc<dyn Classifier> = Arc::new(CgroupClassifier::new());
    let mut src = source(classifier, Accounting::Iterator);
    let stats = src.stats();
    let counted = || {
        stats
            .exits_counted
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let mut snaps = vec![src.snapshot().unwrap()];
    let u0 = cg.usage();
    let id = cg.container_id.clone();
    // Exact: each process of the burst is reported.
    snaps.extend(run_burst(&mut src, &cg, N, each));
    snaps.push(src.snapshot().unwrap());
    let exact_exits = exited_in(&snaps, &id);
    assert!(!counted());
    // Turned at the end of the next snapshot; the one after reads the counter's first move.
    src.set_exits(Exits::Cgroups);
    snaps.push(src.snapshot().unwrap());
    assert!(counted());
    snaps.extend(run_burst(&mut src, &cg, N, each));
    snaps.push(src.snapshot().unwrap());
    let counted_exits = exited_in(&snaps, &id) - exact_exits;
    // And back: kepler_exit is attached at the end of the next snapshot, the turn completes
    // at the end of the one after.
    src.set_exits(Exits::Exact);
    snaps.push(src.snapshot().unwrap());
    snaps.push(src.snapshot().unwrap());
    assert!(!counted());
    let before_third = exited_in(&snaps, &id);
    snaps.extend(run_burst(&mut src, &cg, N, each));
    snaps.push(src.snapshot().unwrap());
    let exact_again = exited_in(&snaps, &id) - before_third;
    let used = cg.usage().saturating_sub(u0);
    let attributed = attributed_over(&snaps, &id, src.counts_from_start());
    let share = attributed.as_secs_f64() / used.as_secs_f64();
    println!(
        "three bursts of {N} × {each:?}, exact, counted, exact: attributed {attributed:?} of \
         {used:?} ({:.1}%); exits reported one by one: {exact_exits}, {counted_exits}, \
         {exact_again}; {stats}",
        share * 100.0
    );
    let _ = sleeper.kill();
    let _ = sleeper.wait();
    assert_eq!(
        stats.exit_turns.load(std::sync::atomic::Ordering::Relaxed),
        2
    );
    assert!(exact_exits >= N as usize && exact_again >= N as usize);
    assert!(counted_exits < N as usize / 10, "{counted_exits}");
    assert!(
        (0.98..=1.02).contains(&share),
        "attributed {:.1}%",
        share * 100.0
    );
    assert_eq!(stats.dropped(), 0, "{stats}");
}

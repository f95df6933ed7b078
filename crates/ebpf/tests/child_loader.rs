//! The loader child (src/child.rs): maps handed over through the socket work, and every way
//! the child can fail (a crash, silence, no privilege, no program) gives a clear unavailable
//! reason within a bound and leaves no zombie. The child is this test binary re-executed in
//! a mode. Needs root like the live tests; with `KEPLER_REQUIRE_TOOLS=1` it fails instead of
//! skipping.

mod common;

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use common::*;
use kepler_core::{Feature, NoWorkloads, Unavailable, UsageSource};
use kepler_ebpf::{Accounting, EbpfSettings, EbpfSource, Exits, Loader, LoaderCommand, ProbeState};

/// One test at a time: each checks that it left no child behind, and the CPU-time check
/// wants the machine to itself.
static SERIAL: Mutex<()> = Mutex::new(());

/// Not a test: the loader child's modes, reached when the binary is re-executed with CHILD_ENV.
#[test]
fn child_entry_point() {
    let Ok(mode) = std::env::var(CHILD_ENV) else {
        return;
    };
    match mode.as_str() {
        "loader" => std::process::exit(kepler_ebpf::run_loader_child()),
        // Dies before answering, as an OOM kill or a crash in aya would.
        "loader-killed" => {
            // SAFETY: raising a signal at ourselves has no preconditions.
            unsafe { libc::raise(libc::SIGKILL) };
        }
        // Never answers, as a child stuck in the verifier would.
        "loader-hang" => std::thread::sleep(Duration::from_secs(3600)),
        // Loads as an unprivileged user: setuid away from root clears the capabilities.
        "loader-unprivileged" => {
            // SAFETY: plain syscalls on this process.
            let ok = unsafe { libc::setgid(65534) == 0 && libc::setuid(65534) == 0 };
            assert!(ok, "dropping to nobody");
            std::process::exit(kepler_ebpf::run_loader_child());
        }
        "burn" => burn_cpu(Duration::from_millis(600)),
        _ => panic!("unknown child mode {mode}"),
    }
    std::process::exit(0);
}

/// The test binary in `mode` as a loader command.
fn command(mode: &str, timeout: Duration) -> LoaderCommand {
    LoaderCommand {
        program: std::env::current_exe().unwrap(),
        args: [
            "--exact",
            CHILD_TEST,
            "--nocapture",
            "--test-threads=1",
            "-q",
        ]
        .map(Into::into)
        .to_vec(),
        env: vec![(CHILD_ENV.into(), mode.into())],
        timeout,
    }
}

/// Exact exits: the busy process is followed to its end.
fn settings(command: LoaderCommand) -> EbpfSettings {
    EbpfSettings {
        loader: Loader::Child(command),
        exits: Exits::Exact,
        ..EbpfSettings::default()
    }
}

fn start(command: LoaderCommand) -> Result<EbpfSource, Unavailable> {
    EbpfSource::new("/proc", Arc::new(NoWorkloads), settings(command))
}

/// Processes whose parent is this one, zombies included, as "pid state".
fn children() -> Vec<String> {
    let me = std::process::id().to_string();
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
            continue;
        };
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        if fields.get(1) == Some(&me.as_str()) {
            out.push(format!(
                "{} {}",
                entry.file_name().to_string_lossy(),
                fields[0]
            ));
        }
    }
    out
}

/// A source loaded by a loader child, as root must be able to.
fn start_as_root() -> EbpfSource {
    match start(command("loader", Duration::from_secs(120))) {
        Ok(s) => s,
        Err(e) => panic!("running as root, the loader child must load: {e}"),
    }
}

fn expect_unavailable(mode: &str, timeout: Duration) -> (Unavailable, Duration) {
    let started = Instant::now();
    let err = match start(command(mode, timeout)) {
        Ok(_) => panic!("{mode}: the source loaded"),
        Err(e) => e,
    };
    let took = started.elapsed();
    println!("{mode}: {took:?}: {err} (denied: {})", err.denied);
    assert!(children().is_empty(), "{mode}: left {:?}", children());
    (err, took)
}

#[test]
fn maps_from_a_loader_child_count_a_busy_process() {
    let test = "maps_from_a_loader_child_count_a_busy_process";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    for accounting in [Accounting::Switch, Accounting::Iterator] {
        busy_process_with(accounting);
    }
}

fn busy_process_with(accounting: Accounting) {
    let mut src = start_as_root();
    assert!(children().is_empty(), "loader left {:?}", children());
    println!("probes: {}", src.probes());
    if accounting == Accounting::Iterator {
        // Through the task iterator's link, received labelled among the descriptors.
        src.retain_features(&[]);
        src.use_task_iterator().unwrap();
    }
    assert_eq!(src.accounting(), accounting);
    let stats = src.stats();
    src.snapshot().unwrap();
    // Reaped with wait4 below (for its rusage), not through `Child`.
    #[allow(clippy::zombie_processes)]
    let burner = child_command(&std::env::current_exe().unwrap(), "burn")
        .spawn()
        .unwrap();
    let pid = burner.id();
    std::thread::sleep(Duration::from_millis(300));
    let live = src.snapshot().unwrap();
    let running = live.processes.iter().find(|p| p.key.pid == pid);
    assert!(
        running.is_some_and(|p| p.cpu_time >= Duration::from_millis(100)),
        "{accounting:?}: the burner read while it runs: {running:?}"
    );
    let (status, truth) = wait_cpu(pid);
    assert_eq!(status, 0, "burner failed");
    // The exit record is written at the child's last switch, which can follow the wake-up.
    std::thread::sleep(Duration::from_millis(100));
    let mut credited = Duration::ZERO;
    let mut exited = false;
    for _ in 0..2 {
        for p in src.snapshot().unwrap().processes {
            if p.key.pid == pid {
                credited = credited.max(p.cpu_time);
                exited |= p.exited;
            }
        }
    }
    println!("{accounting:?}: burner: eBPF {credited:?}, rusage {truth:?}; {stats}");
    assert!(exited, "the burner's exit came through the received ring");
    assert_eq!(stats.dropped(), 0, "{stats}");
    // Read through the received task map and exit ring: the eBPF figure follows the kernel's
    // own accounting (it also counts IRQ time, hence the margin above).
    assert!(
        credited + Duration::from_millis(50) >= truth
            && credited <= truth.mul_f64(1.1) + Duration::from_millis(50),
        "eBPF {credited:?} vs rusage {truth:?}"
    );
}

#[test]
fn a_killed_loader_is_unavailable_and_reaped() {
    let test = "a_killed_loader_is_unavailable_and_reaped";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let (err, took) = expect_unavailable("loader-killed", Duration::from_secs(120));
    assert!(
        err.reason.starts_with("eBPF: the loader process")
            && err.reason.contains("exited without an answer")
            && err.reason.contains("signal: 9"),
        "{err}"
    );
    assert!(!err.denied);
    // Seen at the child's exit, long before the timeout.
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn a_silent_loader_is_killed_at_the_timeout() {
    let test = "a_silent_loader_is_killed_at_the_timeout";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let (err, took) = expect_unavailable("loader-hang", Duration::from_secs(2));
    assert!(
        err.reason.contains("did not answer within 2s; killed"),
        "{err}"
    );
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(60), "{took:?}");
}

#[test]
fn an_unprivileged_loader_says_what_is_missing() {
    let test = "an_unprivileged_loader_says_what_is_missing";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let (err, _) = expect_unavailable("loader-unprivileged", Duration::from_secs(120));
    // The same typed reason as loading in the agent itself would give.
    assert!(err.denied, "{err}");
    assert!(
        err.reason
            .starts_with("eBPF: needs root or CAP_BPF and CAP_PERFMON"),
        "{err}"
    );
}

#[test]
fn a_missing_loader_program_is_unavailable() {
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let mut cmd = command("loader", Duration::from_secs(10));
    cmd.program = "/nonexistent/kepler".into();
    let err = match start(cmd) {
        Ok(_) => panic!("loaded without a loader"),
        Err(e) => e,
    };
    assert!(
        err.reason
            .starts_with("eBPF: starting the loader process (/nonexistent/kepler)"),
        "{err}"
    );
    assert!(children().is_empty(), "left {:?}", children());
}

/// The BPF objects this process holds descriptors to, as (kind, fdinfo text): kind is what
/// the descriptor links to (`anon_inode:bpf_link`, `anon_inode:bpf-prog`, ...).
fn held_bpf_objects() -> Vec<(String, String)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(kind) = std::fs::read_link(entry.path()) else {
            continue;
        };
        let kind = kind.to_string_lossy().into_owned();
        if !kind.contains("bpf") {
            continue;
        }
        let info = format!("/proc/self/fdinfo/{}", entry.file_name().to_string_lossy());
        if let Ok(text) = std::fs::read_to_string(info) {
            out.push((kind, text));
        }
    }
    out
}

fn fdinfo_field<'a>(text: &'a str, field: &str) -> Option<&'a str> {
    text.lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .map(str::trim)
}

/// The ids of the programs attached through links held here to tracepoint `tp`.
fn programs_linked_to(tp: &str) -> Vec<String> {
    held_bpf_objects()
        .iter()
        .filter(|(kind, text)| {
            kind.ends_with("bpf_link") && fdinfo_field(text, "tp_name") == Some(tp)
        })
        .filter_map(|(_, text)| fdinfo_field(text, "prog_id").map(String::from))
        .collect()
}

/// A probe handed over by a loader child is detached when nothing needs what it counts: its
/// link and program descriptors are closed, sched_switch stays, and its counters read as
/// unknown from then on. Kept while one of its features is needed.
#[test]
fn a_handed_over_probe_nothing_reads_is_detached() {
    let test = "a_handed_over_probe_nothing_reads_is_detached";
    if skip_unless_root(test) {
        return;
    }
    let _serial = SERIAL.lock().unwrap_or_else(PoisonError::into_inner);
    let mut src = start_as_root();
    assert!(src.probes().softirq.is_active(), "{}", src.probes());
    let softirq = programs_linked_to("softirq_entry");
    assert_eq!(softirq.len(), 1, "one softirq link held: {softirq:?}");
    let switch = programs_linked_to("sched_switch");
    assert_eq!(switch.len(), 1, "one sched_switch link held: {switch:?}");
    let irq = [
        Feature::BpfBlockIrq,
        Feature::BpfNetRxIrq,
        Feature::BpfNetTxIrq,
    ];

    let kept = src.retain_features(&[Feature::BpfCpuTimeMs, Feature::BpfNetRxIrq]);
    assert!(irq.iter().all(|f| kept.contains(f)), "{kept:?}");
    assert_eq!(
        programs_linked_to("softirq_entry"),
        softirq,
        "detached while needed"
    );

    let kept = src.retain_features(&[Feature::BpfCpuTimeMs]);
    assert!(!irq.iter().any(|f| kept.contains(f)), "{kept:?}");
    assert!(kept.contains(&Feature::BpfCpuTimeMs));
    assert_eq!(src.probes().softirq, ProbeState::Unneeded);
    assert!(
        programs_linked_to("softirq_entry").is_empty(),
        "softirq link still held"
    );
    let program_held = held_bpf_objects().iter().any(|(kind, text)| {
        kind.ends_with("bpf-prog") && fdinfo_field(text, "prog_id") == Some(softirq[0].as_str())
    });
    assert!(!program_held, "softirq program descriptor still held");
    // With nothing per switch left to count the source may have turned to the task iterator,
    // whose program of its own then holds sched_switch in kepler_switch's place.
    let now = programs_linked_to("sched_switch");
    assert_eq!(now.len(), 1, "one sched_switch link held: {now:?}");
    if src.accounting() == Accounting::Switch {
        assert_eq!(now, switch);
    }

    // Counting goes on, without the detached counters.
    src.snapshot().unwrap();
    burn_cpu(Duration::from_millis(50));
    let snap = src.snapshot().unwrap();
    let me = std::process::id();
    let mine = snap
        .processes
        .iter()
        .find(|p| p.key.pid == me)
        .expect("this process is counted");
    assert!(mine.cpu_time > Duration::ZERO);
    // Other optional probes may still count (the page cache, where other features kept it):
    // the detached one's counters then read as unknown; with none left, no counters come.
    match mine.counters.as_deref() {
        Some(c) => {
            assert!(src.probes().page_cache.is_active() || src.probes().hw_counters.is_active());
            assert_eq!(
                (c.irq_net_rx, c.irq_net_tx, c.irq_block),
                (None, None, None)
            );
            assert!(c.context_switches.is_some());
        }
        None => assert!(
            !src.probes().page_cache.is_active() && !src.probes().hw_counters.is_active(),
            "{}",
            src.probes()
        ),
    }
}

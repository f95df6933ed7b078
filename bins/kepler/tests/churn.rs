//! Issue 14: short-lived processes must not each become a series. A shell in a docker-like
//! cgroup starts 300 short busy children over a few intervals, as a build or a CGI server
//! does. The agent (eBPF source, as root) must export only a handful of those processes as
//! series, none of them terminated below `minTerminatedEnergyThreshold`, while the
//! container keeps their CPU time (compared with what the shell itself measured for them with
//! `times`) and the node's hidden-process energy holds their energy at process level.

mod common;

use std::collections::HashSet;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::*;
use kepler_testkit::tools::skip;

const CHILDREN: usize = 300;

/// User + system seconds of the four fields `times` prints (the shell's and its children's).
fn parse_times(text: &str) -> f64 {
    text.split_whitespace()
        .map(|t| {
            let (m, s) = t.trim_end_matches('s').split_once('m').expect("NmN.NNNs");
            m.parse::<f64>().expect("minutes") * 60.0 + s.parse::<f64>().expect("seconds")
        })
        .sum()
}

#[test]
fn short_lived_processes_stay_in_their_container_without_series_of_their_own() {
    if !is_root() {
        skip("SKIP: needs root to place processes in a container-like cgroup and load eBPF");
        return;
    }
    let cgroup = TestCgroup::create(14).expect("a writable cgroup hierarchy");
    // Exact exits: each short-lived process is followed to its end, and hidden.
    let yaml = "ebpf:\n  exits: exact\n";
    churn_in(yaml, 1, &cgroup.id, |cmd| cgroup.enter_then(cmd), None);
}

/// The same churn with exits counted through the cgroups (`ebpf.exits: cgroups`): nothing
/// runs on `sched_switch`; the children, never listed, reach their container through the
/// counter of its cgroup (cgroup2 here: a cgroup of the v1 `cpu` hierarchy alone has none).
#[test]
fn counted_exits_keep_short_lived_processes_in_their_container() {
    if !is_root() {
        skip("SKIP: needs root to place processes in a container-like cgroup and load eBPF");
        return;
    }
    let cgroup = UnifiedCgroup::create(15).expect("a cgroup2 hierarchy");
    let procs = cgroup.procs();
    let enter = |cmd: &str| format!("echo $$ > {} && exec {cmd}", procs.display());
    let yaml = "ebpf:\n  exits: cgroups\n";
    // At 5 s the task iterator costs this VM less than charging every switch; at 1 s it may
    // not, and sched_switch accounting has exact exits by construction.
    churn_in(yaml, 5, &cgroup.id, enter, Some(&cgroup));
}

/// Runs the agent with `yaml` at an interval of `interval_s` and a shell in the container `id`
/// (entered by the command `enter` makes) that starts the children; checks what is exported.
/// With `truth`, the container's CPU time is also held to its cgroup2 counter.
fn churn_in(
    yaml: &str,
    interval_s: u64,
    id: &str,
    enter: impl Fn(&str) -> String,
    truth: Option<&UnifiedCgroup>,
) {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 50.0, 1 << 40)]);
    let config = tempfile::tempdir().unwrap();
    let file = config.path().join("kepler.yaml");
    std::fs::write(&file, yaml).unwrap();
    let interval = format!("{interval_s}s");
    let (_agent, port) = start_agent(&[
        "--config.file",
        file.to_str().unwrap(),
        "--monitor.interval",
        &interval,
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
    ]);
    wait_ready(port, Duration::from_secs(60));
    let first = scrape(port);
    if select(&first, "kepler_agent_ebpf_tracked_processes", &[]).is_empty() {
        skip("SKIP: the eBPF source did not load; procfs cannot see processes between scans");
        return;
    }
    let before = truth.and_then(UnifiedCgroup::cpu_usage);

    // Each child spins a few milliseconds; the shell waits for each, then reports what it
    // and its children used. It waits three intervals first, for the agent to list it (and
    // read its cgroup's counter).
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("times");
    let script = dir.path().join("churn.sh");
    std::fs::write(
        &script,
        format!(
            "sleep {}\nn=0\nwhile [ $n -lt {CHILDREN} ]; do\n  sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'\n  n=$((n+1))\ndone\ntimes > {}\n",
            3 * interval_s,
            out.display()
        ),
    )
    .unwrap();
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(enter(&format!("sh {}", script.display())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the churning shell");

    let mut pids = HashSet::new();
    let mut scrapes = 0;
    let deadline = Instant::now() + Duration::from_secs(240);
    let mut finished = None;
    loop {
        let samples = scrape(port);
        scrapes += 1;
        for s in select(
            &samples,
            "kepler_process_cpu_joules_total",
            &[("container_id", id)],
        ) {
            pids.insert(s.labels["pid"].clone());
            if s.labels["state"] == "terminated" {
                let total: f64 = select(
                    &samples,
                    "kepler_process_cpu_joules_total",
                    &[("pid", &s.labels["pid"]), ("state", "terminated")],
                )
                .iter()
                .map(|s| s.value)
                .sum();
                assert!(
                    total >= 10.0,
                    "pid {} terminated with {total} J",
                    s.labels["pid"]
                );
            }
        }
        if finished.is_none() && shell.try_wait().unwrap().is_some() {
            finished = Some(Instant::now());
        }
        // Three more intervals after the shell ended, for its last exits to be reported.
        if finished.is_some_and(|t| t.elapsed() > Duration::from_secs(3 * interval_s)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the churn did not finish in time"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    let used = parse_times(&std::fs::read_to_string(&out).unwrap());
    let samples = scrape(port);

    // A handful of series (children alive at a tick instant, the shells), not hundreds.
    assert!(
        pids.len() <= CHILDREN / 10,
        "{} process series for {CHILDREN} children over {scrapes} scrapes",
        pids.len()
    );
    // The container counted its children's CPU time, which the shell measured itself.
    let container_cpu = one(
        &samples,
        "kepler_container_cpu_seconds_total",
        &[("container_id", id)],
    );
    assert!(
        (container_cpu - used).abs() <= 0.2 * used + 0.1,
        "container {container_cpu} s, the shell measured {used} s for itself and its children"
    );
    if let (Some(cgroup), Some(before)) = (truth, before) {
        let counted = cgroup
            .cpu_usage()
            .unwrap()
            .saturating_sub(before)
            .as_secs_f64();
        // The cgroup counts the shell's start too, before the agent's counter is read.
        assert!(
            (container_cpu - counted).abs() <= 0.05 * counted + 0.02,
            "container {container_cpu} s, its cgroup counted {counted} s"
        );
        let info = select(&first, "kepler_agent_ebpf_accounting_info", &[]);
        if info
            .iter()
            .any(|s| s.labels["accounting"] == "task_iterator")
        {
            assert_eq!(info[0].labels["exits"], "cgroup_counters");
        }
    }
    // And their energy, though no series of theirs holds it: more than its process series.
    let container_joules = one(
        &samples,
        "kepler_container_cpu_joules_total",
        &[("container_id", id), ("zone", "package")],
    );
    let in_series: f64 = select(
        &samples,
        "kepler_process_cpu_joules_total",
        &[("container_id", id), ("zone", "package")],
    )
    .iter()
    .map(|s| s.value)
    .sum();
    let hidden = one(
        &samples,
        "kepler_node_cpu_hidden_process_joules_total",
        &[("zone", "package")],
    );
    assert!(
        container_joules > in_series && hidden > 0.0,
        "container {container_joules} J, its process series {in_series} J, hidden {hidden} J"
    );
    eprintln!(
        "{} series for {CHILDREN} children; container {container_cpu:.2} s (shell: {used:.2} s), \
         {container_joules:.2} J, of which {in_series:.2} J in its series; node hidden {hidden:.2} J",
        pids.len()
    );
}

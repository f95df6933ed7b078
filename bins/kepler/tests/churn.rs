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
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 50.0, 1 << 40)]);
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval",
        "1s",
    ]);
    wait_ready(port, Duration::from_secs(60));
    let first = scrape(port);
    if select(&first, "kepler_agent_ebpf_tracked_processes", &[]).is_empty() {
        skip("SKIP: the eBPF source did not load; procfs cannot see processes between scans");
        return;
    }

    // Each child spins a few milliseconds; the shell waits for each, then reports what it
    // and its children used.
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("times");
    let script = dir.path().join("churn.sh");
    std::fs::write(
        &script,
        format!(
            "n=0\nwhile [ $n -lt {CHILDREN} ]; do\n  sh -c 'i=0; while [ $i -lt 3000 ]; do i=$((i+1)); done'\n  n=$((n+1))\ndone\ntimes > {}\n",
            out.display()
        ),
    )
    .unwrap();
    let mut shell = Command::new("sh")
        .arg("-c")
        .arg(cgroup.enter_then(&format!("sh {}", script.display())))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the churning shell");

    let id = cgroup.id.as_str();
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
        if finished.is_some_and(|t| t.elapsed() > Duration::from_secs(3)) {
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

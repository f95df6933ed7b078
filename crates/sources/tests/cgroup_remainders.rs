//! The procfs source with cgroup usage counters, against this host (root): processes that
//! start and end between two scans, which no scan sees, are credited to their cgroup's
//! workload, as much as the kernel counted in that cgroup.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    AttributionConfig, Attributor, Classifier, ContainerId, PowerSnapshot, ProcessInfo,
    ProcessType, Runtime, Tick, UsageSource, WorkloadIdentity,
};
use kepler_sources::cgroups::Counting;
use kepler_sources::{ProcfsReader, ProcfsSource};
use kepler_testkit::churn::{remove_cgroup, usage_of, ChurnCgroup, Reaped};

/// Classifies the processes counted in each of some cgroups as a container of its own.
#[derive(Default)]
struct Containers {
    /// Usage cgroup name and container.
    by_cgroup: Vec<(String, WorkloadIdentity)>,
}

impl Containers {
    /// Container `id` for the processes counted in cgroup2 cgroup `path`.
    fn with(self, path: &str, id: &str) -> Containers {
        self.named(format!("unified:{path}"), id)
    }

    /// Container `id` for the processes counted in the cgroup whose usage name is `name`.
    fn named(mut self, name: String, id: &str) -> Containers {
        let identity = WorkloadIdentity {
            process_type: ProcessType::Container,
            container: Some(Arc::new(ContainerId {
                id: id.to_string(),
                runtime: Runtime::Unknown,
                pod_id: None,
            })),
            vm: None,
        };
        self.by_cgroup.push((name, identity));
        self
    }
}

impl Classifier for Containers {
    fn classify(&self, info: &ProcessInfo) -> WorkloadIdentity {
        let found = info.usage_cgroup.as_ref().and_then(|c| {
            self.by_cgroup
                .iter()
                .find(|(name, _)| **name == **c)
                .map(|(_, identity)| identity.clone())
        });
        found.unwrap_or_default()
    }
}

/// A cgroup made under another, with a burner that moved itself into it first; killed and
/// removed when dropped.
struct Nested {
    dir: PathBuf,
    burner: Child,
}

impl Nested {
    /// Starts a burner of `count` shell iterations in a new cgroup `name` under `parent`.
    fn start(parent: &Path, name: &str, count: u32) -> Nested {
        let dir = parent.join(name);
        std::fs::create_dir(&dir).unwrap();
        let burner = Command::new("sh")
            .args([
                "-c",
                r#"echo $$ > "$1/cgroup.procs" || exit 1
                   j=0; while [ "$j" -lt "$2" ]; do j=$((j+1)); done"#,
                "burner",
            ])
            .arg(&dir)
            .arg(count.to_string())
            .spawn()
            .unwrap();
        Nested { dir, burner }
    }

    fn wait(&mut self) {
        let status = self.burner.wait().unwrap();
        assert!(status.success(), "the burner could not join its cgroup");
    }
}

impl Drop for Nested {
    fn drop(&mut self) {
        let _ = self.burner.kill();
        let _ = self.burner.wait();
        remove_cgroup(&self.dir);
    }
}

fn container_cpu(s: &PowerSnapshot, id: &str) -> Duration {
    s.containers
        .iter()
        .find(|c| c.container.id == id)
        .map_or(Duration::ZERO, |c| c.cpu_time)
}

/// Fails unless `credited` is within `slack` of `truth`, either way.
fn assert_close(credited: Duration, truth: Duration, slack: Duration) {
    assert!(
        credited + slack >= truth && credited <= truth + slack,
        "credited {credited:?}, the cgroup used {truth:?}"
    );
}

/// The procfs source and an attributor: each call takes a snapshot and attributes it.
fn ticker(classifier: Arc<dyn Classifier>) -> impl FnMut() -> PowerSnapshot {
    let mut source = ProcfsSource::new("/proc".into(), classifier).unwrap();
    let mut attributor = Attributor::new(AttributionConfig::default());
    move || {
        let usage = source.snapshot().unwrap();
        attributor.tick(Tick {
            usage: &usage,
            energy: None,
            interval: Duration::from_secs(1),
        })
    }
}

#[test]
fn processes_no_scan_sees_are_credited_to_their_cgroup() {
    let Some(mut cgroup) = ChurnCgroup::for_test("procfs-remainders") else {
        return;
    };
    let id = "remainders".to_string();
    let mut tick = ticker(Arc::new(Containers::default().with(&cgroup.path, &id)));
    // The first snapshot lists the spawner and reads its cgroup's counter (a baseline); the
    // spawner waits through the second.
    tick();
    tick();
    let before = cgroup.usage();
    let mut last = None;
    for _ in 0..3 {
        cgroup.churn(60, 3_000);
        last = Some(tick());
    }
    // Read before its scan, the last snapshot's counter holds the last round.
    let truth = cgroup.usage() - before;
    let credited = container_cpu(&last.unwrap(), &id);
    eprintln!("credited {credited:?} of the {truth:?} the cgroup used");
    // The spawner is read through `stat`, in clock ticks: its credit may trail by one.
    assert_close(credited, truth, Duration::from_millis(20) + truth / 100);
    // Almost all of it was the burners', which no scan listed.
    assert!(
        truth > Duration::from_millis(100),
        "the burners used {truth:?}"
    );
}

/// A container started under a cgroup whose counter is read already (on hybrid hosts, any
/// container under the `cpuacct` root): that counter held the container's time until the
/// container's own baseline, and neither workload is credited it twice.
#[test]
fn a_cgroup_made_under_a_read_one_is_counted_once() {
    let Some(mut cgroup) = ChurnCgroup::for_test("procfs-nested") else {
        return;
    };
    let mut tick = ticker(Arc::new(
        Containers::default()
            .with(&cgroup.path, "outer")
            .with(&format!("{}/inner", cgroup.path), "inner"),
    ));
    tick();
    tick();
    let before = cgroup.usage();
    // Started after the last snapshot: its first listing counts all its time.
    let mut inner = Nested::start(&cgroup.dir, "inner", 400_000);
    let mut last = None;
    for round in 0..4 {
        if round == 2 {
            inner.wait();
        }
        cgroup.churn(30, 3_000);
        last = Some(tick());
    }
    let last = last.unwrap();
    let inner_truth = usage_of(&inner.dir).unwrap();
    let outer_truth = (cgroup.usage() - before).saturating_sub(inner_truth);
    let (outer, inner_credit) = (container_cpu(&last, "outer"), container_cpu(&last, "inner"));
    eprintln!(
        "outer credited {outer:?} of {outer_truth:?}, inner {inner_credit:?} of {inner_truth:?}"
    );
    // Together exact but for clock ticks (processes are read through `stat`: a credit may
    // trail by one; the burner's moments before it joined its cgroup are in its own time only).
    let (credited, truth) = (outer + inner_credit, outer_truth + inner_truth);
    assert_close(credited, truth, Duration::from_millis(20) + truth / 100);
    // Apart, the outer cgroup takes the burner's time up to the inner one's baseline as its
    // credit then, which trails by up to a clock tick each of user and system time, and the
    // moments between its listing and that baseline. Counted twice, it would take a whole
    // interval's.
    for (credited, truth) in [(outer, outer_truth), (inner_credit, inner_truth)] {
        assert_close(credited, truth, Duration::from_millis(40) + truth / 50);
    }
    assert!(
        inner_truth > Duration::from_millis(100),
        "the inner burner used {inner_truth:?}"
    );
}

/// Processes a scan first meets as zombies, in a v1 `cpuacct` cgroup: the kernel shows an
/// exiting task in the root of every v1 hierarchy, so they are left to their cgroup's counter,
/// which credits their time to its workload once, and are not also reported in the root.
#[test]
fn zombies_in_a_v1_cgroup_are_credited_to_it_once() {
    let Some(cpuacct) = Counting::detect(Path::new("/proc")).and_then(|c| c.cpuacct) else {
        return;
    };
    let dir = cpuacct.join(format!("kepler-test-zombies-{}", std::process::id()));
    // Only root may make one.
    if std::fs::create_dir(&dir).is_err() {
        return;
    }
    let cgroup = V1Cgroup(dir);
    // Children of ~40 ms each, reaped only ~0.4 s after they end: most are zombies when a scan
    // meets them first.
    let mut spawner = Reaped(
        Command::new("python3")
            .args([
                "-c",
                r#"
import os, subprocess, sys, time
open(os.path.join(sys.argv[1], "cgroup.procs"), "w").write(str(os.getpid()))
burn = ["sh", "-c", "i=0; while [ $i -lt 40000 ]; do i=$((i+1)); done"]
children = []
while True:
    children.append((time.monotonic(), subprocess.Popen(burn)))
    while children and time.monotonic() - children[0][0] > 0.4:
        children.pop(0)[1].wait()
    time.sleep(0.15)
"#,
            ])
            .arg(&cgroup.0)
            .spawn()
            .unwrap(),
    );
    let usage = || {
        let ns = std::fs::read_to_string(cgroup.0.join("cpuacct.usage")).unwrap();
        Duration::from_nanos(ns.trim().parse().unwrap())
    };
    let name = format!(
        "cpuacct:/{}",
        cgroup.0.file_name().unwrap().to_string_lossy()
    );
    let mut tick = ticker(Arc::new(Containers::default().named(name, "zombies")));
    std::thread::sleep(Duration::from_millis(500));
    let started = ProcfsReader::new("/proc")
        .unwrap()
        .uptime_by_clock()
        .unwrap();
    tick();
    std::thread::sleep(Duration::from_secs(1));
    let first = tick();
    let before = usage();
    let credited_before = container_cpu(&first, "zombies");
    let mut last = first;
    for _ in 0..5 {
        std::thread::sleep(Duration::from_secs(1));
        last = tick();
    }
    let truth = usage() - before;
    let credited = container_cpu(&last, "zombies") - credited_before;
    let burners: Duration = last
        .processes
        .iter()
        .filter(|p| {
            p.info.comm == "sh"
                && p.key.start_time >= started
                && p.info.usage_cgroup.as_deref() == Some("cpuacct:/")
        })
        .map(|p| p.cpu_time)
        .sum();
    let _ = spawner.0.kill();
    let _ = spawner.0.wait();
    eprintln!("credited {credited:?} of the {truth:?} the cgroup used; in the root {burners:?}");
    assert!(
        truth > Duration::from_millis(300),
        "the burners used {truth:?}"
    );
    assert_close(credited, truth, Duration::from_millis(20) + truth / 100);
    assert_eq!(
        burners,
        Duration::ZERO,
        "zombies reported in the root as well"
    );
}

/// A v1 cgroup made by a test, removed (once its tasks are gone) when dropped.
struct V1Cgroup(PathBuf);

impl Drop for V1Cgroup {
    fn drop(&mut self) {
        remove_cgroup(&self.0);
    }
}

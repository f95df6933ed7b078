//! `kepler-model-server collect` against the real agent on a simulated RAPL host whose power
//! follows the machine's CPU load: a short plan records a dataset `train` accepts, a killed
//! run continues where its file ends, and `--dry-run` prints the plan and runs nothing.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kepler_models::dataset::Dataset;
use kepler_models::Feature;
use support::powercap::{package_watts, Agent, LoadPowercap};

/// Whether stress-ng is installed; when not, the test is skipped unless `KEPLER_REQUIRE_TOOLS=1`
/// (CI) makes that a failure.
fn have_stress_ng() -> bool {
    let found = Command::new("sh")
        .args(["-c", "command -v stress-ng"])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !found {
        assert!(
            std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "stress-ng missing (KEPLER_REQUIRE_TOOLS=1)"
        );
        eprintln!("SKIP: stress-ng not installed (bash scripts/setup.sh installs it)");
    }
    found
}

fn shm_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().expect("tempdir"))
}

/// A metered agent that exports its features, ticking every 250 ms.
fn metered_agent(work: &Path) -> (Agent, LoadPowercap, tempfile::TempDir) {
    let sysfs = shm_dir();
    let sim = LoadPowercap::start(sysfs.path());
    let agent = Agent::start(
        work,
        "metered",
        sysfs.path(),
        "ebpf:\n  enabled: false\n  exportFeatures: true\nmonitor:\n  interval: 250ms\n",
    );
    (agent, sim, sysfs)
}

/// Phases: idle 2s, cpu×1 at 50 % 3s, idle 2s, cpu×1 at 100 % 3s, idle 2s.
const PLAN: [&str; 10] = [
    "--stressors",
    "cpu",
    "--instances",
    "1",
    "--loads",
    "50,100",
    "--run",
    "3s",
    "--idle",
    "2s",
];

fn collect(out: &Path, agent: &Agent) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"));
    c.arg("collect")
        .arg("--out")
        .arg(out)
        .args([
            "--agent",
            &agent.url(),
            "--step",
            "500ms",
            "--freq-caps",
            "false",
        ])
        .args(PLAN)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::piped());
    c
}

/// The `phase` column of the file.
fn phases(path: &Path) -> Vec<usize> {
    std::fs::read_to_string(path)
        .expect("dataset")
        .lines()
        .skip(1)
        .map(|l| {
            l.rsplit(',')
                .next()
                .and_then(|p| p.parse().ok())
                .expect("phase")
        })
        .collect()
}

#[test]
fn a_short_plan_records_a_dataset_train_accepts() {
    if !have_stress_ng() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let (agent, _sim, _sysfs) = metered_agent(work.path());
    let out = work.path().join("run.csv");
    let started = Instant::now();
    let done = collect(&out, &agent).output().expect("run collect");
    let took = started.elapsed();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    assert!(
        took >= Duration::from_secs(12),
        "the plan takes 12 s, took {took:?}"
    );

    let data = Dataset::read_csv_file(&out).expect("the dataset reads");
    // 12 s at a 0.5 s step: 24 reads; a loaded machine may delay a few.
    assert!(data.len() >= 12, "{} rows", data.len());
    assert_eq!(data.skipped_rows, 0);
    let p = phases(&out);
    assert!(p.windows(2).all(|w| w[0] <= w[1]), "{p:?}");
    for phase in 0..5 {
        assert!(p.contains(&phase), "no row in phase {phase}: {p:?}");
    }
    // Each row's power is the simulated power of that row's CPU time: the columns line up.
    let cpus = std::thread::available_parallelism().expect("cpus").get() as f64;
    let cpu = data
        .feature(Feature::BpfCpuTimeMs)
        .expect("bpf_cpu_time_ms");
    let package = &data
        .power
        .iter()
        .find(|(c, _)| c == "package")
        .expect("package")
        .1;
    let expected: f64 = cpu
        .iter()
        .map(|ms| package_watts(ms / (cpus * 1000.0)))
        .sum::<f64>();
    let measured: f64 = package.iter().sum();
    assert!(
        (measured - expected).abs() < 0.15 * expected,
        "measured {measured} W vs {expected} W from the recorded CPU time"
    );
    let spec = data.spec.as_ref().expect("machine spec beside the dataset");
    assert_eq!(spec.cores, Some(cpus as u32));
    assert_eq!(spec.source.as_deref(), Some("rapl-sysfs"));

    let report =
        kepler_models::train::train_all(&data, &Default::default()).expect("train accepts it");
    assert!(!report.models.is_empty());
}

#[test]
fn a_killed_run_continues_where_its_file_ends() {
    if !have_stress_ng() {
        return;
    }
    let work = tempfile::tempdir().expect("tempdir");
    let (agent, _sim, _sysfs) = metered_agent(work.path());
    let out = work.path().join("run.csv");
    let mut first = collect(&out, &agent).spawn().expect("start collect");
    // Kill it (no chance to clean up) once it has recorded into the third phase.
    let deadline = Instant::now() + Duration::from_secs(120);
    while !out.exists() || !phases(&out).contains(&2) {
        assert!(Instant::now() < deadline, "collect never reached phase 3");
        assert!(
            first.try_wait().expect("wait").is_none(),
            "collect ended early"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    first.kill().expect("kill");
    first.wait().expect("reap");
    let before = std::fs::read_to_string(&out).expect("dataset");
    let before_phases = phases(&out);

    let started = Instant::now();
    let done = collect(&out, &agent).output().expect("run collect again");
    let took = started.elapsed();
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let after = std::fs::read_to_string(&out).expect("dataset");
    let complete = before.rfind('\n').map_or(0, |i| i + 1);
    assert!(
        after.starts_with(&before[..complete]),
        "the rows of the first run are kept"
    );
    assert_eq!(after.matches("timestamp").count(), 1, "one header");
    let p = phases(&out);
    assert!(
        p.windows(2).all(|w| w[0] <= w[1]),
        "earlier phases are not run again: {p:?}"
    );
    for phase in 0..5 {
        assert!(p.contains(&phase), "no row in phase {phase}: {p:?}");
    }
    // Phases 1 and 2 (5 s) were not run again: the rest of the plan is 7 s at most.
    assert!(before_phases.iter().all(|&x| x <= 2));
    assert!(
        took < Duration::from_secs(11),
        "the second run took {took:?}"
    );
    Dataset::read_csv_file(&out).expect("the dataset reads");
}

#[test]
fn dry_run_prints_the_plan_and_runs_nothing() {
    let work = tempfile::tempdir().expect("tempdir");
    let out = work.path().join("run.csv");
    let done = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .arg("collect")
        .arg("--out")
        .arg(&out)
        .args(["--dry-run", "--stress-ng", "/nonexistent/stress-ng"])
        .args(["--agent", "http://127.0.0.1:1"])
        .args(PLAN)
        .output()
        .expect("run collect");
    assert!(
        done.status.success(),
        "{}",
        String::from_utf8_lossy(&done.stderr)
    );
    let text = String::from_utf8_lossy(&done.stdout);
    assert!(text.contains("cpu ×1 at 50% for 3s"), "{text}");
    assert!(text.contains("cpu ×1 at 100% for 3s"), "{text}");
    assert!(text.contains("5 phases, 12s in all"), "{text}");
    assert!(!out.exists());
}

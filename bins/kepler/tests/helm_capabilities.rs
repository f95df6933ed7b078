//! The chart's capabilities mode (`daemonset.capabilities.enabled`) against the real agent:
//! uid 0 with only the rendered capability set, no privilege escalation, on a host whose RAPL
//! counters are root-only (mode 0400, as patched kernels make them). The agent must pick the
//! same usage source as with every capability, and read RAPL. Needs root to narrow the set.

mod common;
#[path = "helm/render.rs"]
mod render;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use render::*;

/// Starts the agent through `setpriv` (a no-op wrapper when `caps` is None).
fn start(caps: Option<&[String]>, args: &[String]) -> (Proc, u16) {
    let port = free_port();
    let mut cmd = Command::new("setpriv");
    if let Some(caps) = caps {
        let keep: String = caps
            .iter()
            .map(|c| format!(",+{}", c.to_lowercase()))
            .collect();
        cmd.arg(format!("--bounding-set=-all{keep}"))
            .args(["--inh-caps=-all", "--no-new-privs"]);
    }
    let child = cmd
        .arg(env!("CARGO_BIN_EXE_kepler"))
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(args)
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kepler through setpriv");
    (Proc(child), port)
}

/// The usage source the agent reports up, and its CPU energy so far.
fn source_and_energy(port: u16) -> (String, f64) {
    wait_ready(port, Duration::from_secs(30));
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        let samples = scrape(port);
        let source = select(
            &samples,
            "kepler_agent_component_up",
            &[("component", "source")],
        )
        .into_iter()
        .find(|s| s.value == 1.0)
        .and_then(|s| s.labels.get("name").cloned());
        let energy: f64 = select(&samples, "kepler_node_cpu_joules_total", &[])
            .iter()
            .map(|s| s.value)
            .sum();
        if let (Some(source), true) = (&source, energy > 0.0) {
            return (source.clone(), energy);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no source up or no energy: {source:?} {energy}"
        );
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn agent_runs_with_the_charts_capability_set_and_root_only_rapl() {
    if !is_root() {
        assert!(
            std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "needs root to narrow capabilities (KEPLER_REQUIRE_TOOLS=1)"
        );
        eprintln!("SKIP: needs root to narrow capabilities");
        return;
    }
    if !have_renderer() {
        return;
    }
    let objects = objects(&render(
        &chart_dir(),
        &[],
        &[r#"{"daemonset": {"capabilities": {"enabled": true}}}"#],
    ));
    let sc = &agent_container(&objects)["securityContext"];
    assert_eq!(sc["runAsUser"].as_u64(), Some(0));
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    let caps = strings(&sc["capabilities"]["add"]);

    // Files created from here on are owner-only, as the kernel makes energy_uj.
    // SAFETY: umask only changes this process's file creation mask.
    unsafe { libc::umask(0o277) };
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 25.0, 1 << 40)]);
    let energy_file = sysfs.path().join("class/powercap/intel-rapl:0/energy_uj");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !energy_file.exists() {
        assert!(std::time::Instant::now() < deadline, "no {energy_file:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mode = std::fs::metadata(&energy_file)
        .expect("energy_uj")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o400, "{energy_file:?}");

    let args = vec![
        format!("--host.sysfs={}", sysfs.path().display()),
        "--host.procfs=/proc".to_string(),
        "--monitor.interval=500ms".to_string(),
    ];
    let (full_source, _) = {
        let (_agent, port) = start(None, &args);
        source_and_energy(port)
    };
    let (_agent, port) = start(Some(&caps), &args);
    let (source, energy) = source_and_energy(port);
    assert_eq!(source, full_source, "capabilities {caps:?}");
    assert!(energy > 0.0);
    let samples = scrape(port);
    let rapl = select(
        &samples,
        "kepler_agent_component_up",
        &[("component", "meter"), ("name", "rapl")],
    );
    assert!(
        rapl.iter().any(|s| s.value == 1.0),
        "rapl meter not up: {rapl:?}"
    );
}

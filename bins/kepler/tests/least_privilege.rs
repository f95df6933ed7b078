//! The agent as `nobody` (uid 65534) with only the capabilities a source needs, started by
//! `setpriv` from root: with none it falls back to procfs, cannot read a root-only RAPL counter
//! (mode 0400, as the CVE-2020-8694 fix makes it), still serves on loopback, and says in
//! `kepler probe` and in its health metrics what it may not read and why. With CAP_BPF and
//! CAP_PERFMON as ambient capabilities the eBPF source loads. Needs root to change user.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::*;
use kepler_meters::fixtures::PowercapTree;
use kepler_testkit::tools::{have, skip};

/// Root, and `setpriv` to drop it; otherwise the test is skipped (or fails in CI).
fn can_drop_root() -> bool {
    if !is_root() {
        skip("least_privilege: needs root to change user with setpriv");
        return false;
    }
    if !have("setpriv") {
        skip("least_privilege: setpriv (util-linux) not installed");
        return false;
    }
    true
}

/// A powercap tree whose one counter is root's alone; everything else readable by anyone.
struct Host {
    _dir: tempfile::TempDir,
    sysfs: PathBuf,
    energy_uj: PathBuf,
}

fn host() -> Host {
    let dir = sysfs_dir();
    let sysfs = dir.path().join("sys");
    let tree = PowercapTree::create(&sysfs, &[("package-0", 1 << 40)]).unwrap();
    tree.set_energy(0, 5_000_000).unwrap();
    let energy_uj = tree.zone_dir(0).unwrap().join("energy_uj");
    for entry in walk(dir.path()) {
        let mode = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(mode)).unwrap();
    }
    std::fs::set_permissions(&energy_uj, std::fs::Permissions::from_mode(0o400)).unwrap();
    Host {
        _dir: dir,
        sysfs,
        energy_uj,
    }
}

fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut out = vec![dir.to_path_buf()];
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.is_symlink() {
            out.extend(walk(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The agent as uid/gid 65534 with exactly `caps` (setpriv names: `bpf`, `perfmon`): in the
/// bounding, inheritable and ambient sets, so that they survive the exec as a non-root user.
fn as_nobody(caps: &[&str]) -> Command {
    let set: String = caps.iter().map(|c| format!(",+{c}")).collect();
    let mut c = Command::new("setpriv");
    c.args([
        "--reuid=65534",
        "--regid=65534",
        "--clear-groups",
        &format!("--inh-caps=-all{set}"),
        &format!("--ambient-caps=-all{set}"),
        &format!("--bounding-set=-all{set}"),
        env!("CARGO_BIN_EXE_kepler"),
    ]);
    c
}

fn probe(mut command: Command, sysfs: &Path) -> String {
    let output = command
        .args(["probe", "--host.sysfs", sysfs.to_str().unwrap()])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kepler probe");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "probe failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn probe_line<'a>(report: &'a str, name: &str) -> &'a str {
    report
        .lines()
        .find(|l| l.trim_start().starts_with(&format!("{name} ")))
        .unwrap_or_else(|| panic!("no {name} line in:\n{report}"))
}

fn serve(mut command: Command, sysfs: &Path) -> (Proc, u16) {
    let port = free_port();
    let child = command
        .arg(format!("--web.listen-address=127.0.0.1:{port}"))
        .args(["--host.sysfs", sysfs.to_str().unwrap()])
        .args(["--monitor.interval", "500ms"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kepler through setpriv");
    let agent = Proc(child);
    wait_ready(port, Duration::from_secs(60));
    (agent, port)
}

/// The real uid of a running process, from its `/proc/<pid>/status`.
fn uid_of(pid: u32) -> u32 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("Uid:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn without_capabilities_the_agent_serves_and_names_what_it_may_not_read() {
    if !can_drop_root() {
        return;
    }
    let host = host();
    let counter = host.energy_uj.display().to_string();

    // As root the same tree reads: the failures below are the privilege, not the fixture.
    let as_root = probe(Command::new(env!("CARGO_BIN_EXE_kepler")), &host.sysfs);
    assert!(
        probe_line(&as_root, "rapl").contains("available      zones: package (measured)"),
        "{as_root}"
    );

    let report = probe(as_nobody(&[]), &host.sysfs);
    let rapl = probe_line(&report, "rapl");
    assert!(
        rapl.contains(&format!(
            "not available  permission denied reading {counter}"
        )) && rapl.contains("CVE-2020-8694"),
        "{rapl}"
    );
    assert!(
        probe_line(&report, "ebpf")
            .contains("not available  eBPF: needs root or CAP_BPF and CAP_PERFMON"),
        "{report}"
    );
    assert!(report.contains("  selected: procfs\n"), "{report}");
    assert!(
        report.contains("without CAP_SYS_PTRACE: exe and environ of other users' processes"),
        "{report}"
    );

    let (agent, port) = serve(as_nobody(&[]), &host.sysfs);
    assert_eq!(uid_of(agent.pid()), 65534, "the agent runs as nobody");
    let samples = scrape(port);
    let up = |component: &str, name: &str| {
        one(
            &samples,
            "kepler_agent_component_up",
            &[("component", component), ("name", name)],
        )
    };
    assert_eq!(up("source", "procfs"), 1.0);
    assert_eq!(up("source", "ebpf"), 0.0);
    assert_eq!(up("meter", "rapl"), 0.0);
    for (component, name) in [("source", "ebpf"), ("meter", "rapl")] {
        let info = one(
            &samples,
            "kepler_agent_component_unavailable_info",
            &[
                ("component", component),
                ("name", name),
                ("reason", "permission_denied"),
            ],
        );
        assert_eq!(info, 1.0, "{component}/{name}");
    }
    assert!(
        select(&samples, "kepler_agent_component_unavailable_info", &[]).len() == 2,
        "only what was denied is listed: {:?}",
        select(&samples, "kepler_agent_component_unavailable_info", &[])
    );
}

#[test]
fn with_bpf_and_perfmon_the_ebpf_source_loads_as_nobody() {
    if !can_drop_root() {
        return;
    }
    let host = host();
    let as_root = probe(Command::new(env!("CARGO_BIN_EXE_kepler")), &host.sysfs);
    if !as_root.contains("  selected: ebpf\n") {
        skip(&format!(
            "least_privilege: eBPF does not load here even as root:\n{as_root}"
        ));
        return;
    }

    let report = probe(as_nobody(&["bpf", "perfmon"]), &host.sysfs);
    assert!(
        probe_line(&report, "ebpf").contains("available      eBPF: sched_switch accounting on")
            && report.contains("  selected: ebpf\n"),
        "{report}"
    );

    let (agent, port) = serve(as_nobody(&["bpf", "perfmon"]), &host.sysfs);
    assert_eq!(uid_of(agent.pid()), 65534, "the agent runs as nobody");
    let samples = scrape(port);
    let up = one(
        &samples,
        "kepler_agent_component_up",
        &[("component", "source"), ("name", "ebpf")],
    );
    assert_eq!(up, 1.0);
    let denied: Vec<String> = select(&samples, "kepler_agent_component_unavailable_info", &[])
        .iter()
        .map(|s| s.labels["name"].clone())
        .collect();
    assert_eq!(denied, ["rapl"], "eBPF is no longer denied, RAPL still is");
}

//! `kepler probe` run as an unprivileged user on a host whose MSR devices are root-only, as the
//! kernel makes them: the msr meter is unavailable and says why. As root the test drops to
//! `nobody` with `setpriv`; as any other user it runs the binary directly.

mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::process::Command;

use common::is_root;
use kepler_meters::fixtures::MsrTree;
use kepler_meters::msr::{INTEL_PKG_ENERGY, INTEL_POWER_UNIT};

fn chmod(path: &Path, mode: u32) {
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[test]
fn probe_as_an_unprivileged_user_reports_permission_denied() {
    let dir = tempfile::tempdir().unwrap();
    let base = dir.path();
    let (sysfs, procfs, root) = (base.join("sys"), base.join("proc"), base.join("dev/cpu"));
    let tree = MsrTree::create(&sysfs, &root).unwrap();
    MsrTree::write_cpuinfo(&procfs, "GenuineIntel", 6, 0x55, 1).unwrap();
    tree.add_cpu(0, 0, 0).unwrap();
    tree.write(0, INTEL_POWER_UNIT, 0xA0E03).unwrap();
    tree.write(0, INTEL_PKG_ENERGY, 16_384).unwrap();
    let config = base.join("kepler.yaml");
    std::fs::write(
        &config,
        format!(
            "host:\n  sysfs: {}\n  procfs: {}\nebpf:\n  enabled: false\nmsr:\n  enabled: true\n  root: {}\n",
            sysfs.display(),
            procfs.display(),
            root.display()
        ),
    )
    .unwrap();
    // Everything readable by anyone but the device, which is root's alone (0600 as the msr
    // module creates it; 0000 when the test cannot change the owner).
    chmod(base, 0o755);
    chmod(&config, 0o644);
    chmod(&tree.msr_file(0), if is_root() { 0o600 } else { 0o000 });

    let kepler = env!("CARGO_BIN_EXE_kepler");
    let mut command = if is_root() {
        let mut c = Command::new("setpriv");
        c.args([
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "--inh-caps=-all",
            kepler,
        ]);
        c
    } else {
        Command::new(kepler)
    };
    let output = command
        .args(["--config.file", config.to_str().unwrap(), "probe"])
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kepler probe");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "probe failed: {}\n{stdout}",
        String::from_utf8_lossy(&output.stderr)
    );
    let line = stdout
        .lines()
        .find(|l| l.trim_start().starts_with("msr "))
        .unwrap_or_else(|| panic!("no msr line in:\n{stdout}"));
    assert!(
        line.contains("not available  permission denied opening")
            && line.contains("0/msr: the msr meter needs root, or CAP_SYS_RAWIO"),
        "{line}"
    );

    // The same tree as root (when the test is root) opens: the failure above was the
    // permission, not the fixture.
    if is_root() {
        let output = Command::new(kepler)
            .args(["--config.file", config.to_str().unwrap(), "probe"])
            .env("RUST_LOG", "warn")
            .output()
            .expect("run kepler probe");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            stdout.contains("  msr      available      zones: package (measured)"),
            "{stdout}"
        );
    }
}

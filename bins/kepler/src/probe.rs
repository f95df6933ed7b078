//! `kepler probe`: what this host offers, and why each unavailable thing is unavailable.

use std::fmt::Write;

use kepler_core::PowerMeter;
use kepler_meters::{registry, DomainProbe, OpenContext};

use crate::config::Config;
use crate::setup;

pub fn report(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "Usage sources:");
    let procfs = kepler_sources::procfs::probe(&config.host.procfs);
    line(&mut out, "procfs", procfs.map_err(|e| e.to_string()));
    if let Some(note) = other_users_note(own_effective_caps()) {
        let _ = writeln!(out, "{:27}{note}", "");
    }

    // The agent's own choice of source, loaded once: its features also decide whether the
    // estimation model below can run.
    let usage = setup::usage_source(
        config,
        std::sync::Arc::new(kepler_core::Catalogue::new()),
        None,
    );
    let (ebpf, selected, features) = match &usage {
        Ok(u) => (
            u.ebpf.clone().map_err(|e| e.to_string()),
            u.source.name().to_string(),
            u.source.features(),
        ),
        Err(e) => (
            Err(format!("{e:#}")),
            "none".to_string(),
            vec![kepler_core::Feature::BpfCpuTimeMs],
        ),
    };
    line(&mut out, "ebpf", ebpf);
    let _ = writeln!(out, "  selected: {selected}");

    let host = kepler_sources::HostFacts::read(&config.host.procfs, &config.host.sysfs);
    let kube = match config.kube.enabled {
        true => kepler_kube::Informer::probe(
            config
                .kube
                .informer_settings(&setup::node_name(config, &host)),
            std::time::Duration::from_secs(10),
        ),
        false => Err("disabled (kube.enabled: false)".into()),
    };
    let _ = writeln!(out, "\nPod names:");
    line(&mut out, "kube", kube);

    let settings = setup::meter_settings(config, &host);
    // Meters are opened only to be described: background work they ask for is dropped.
    let background = kepler_core::Background::new();
    let estimator =
        |f: &[kepler_core::Feature]| setup::open_estimator(config, &host, &background, f);
    let cx = OpenContext {
        settings: &settings,
        features: &features,
        estimator: Some(&estimator),
        // No service runs here: slow meters ask their device once and say what it answered.
        background: None,
    };
    let domains = registry::probe(&config.meter_chains(), &cx);
    let _ = writeln!(out, "\nPower meters, per domain:");
    for domain in &domains {
        meters(&mut out, domain);
    }
    let _ = writeln!(out);
    let selected: Vec<String> = domains
        .iter()
        .filter_map(|d| d.selected.map(|m| format!("{}: {m}", d.domain)))
        .collect();
    if selected.is_empty() {
        let _ = writeln!(
            out,
            "Selected meters: none; the agent exports usage only and /readyz reports not ready"
        );
    } else {
        let _ = writeln!(out, "Selected meters: {}", selected.join(", "));
    }
    out
}

/// One domain: its chain, every registry row of it (the chain's first, in order), and the
/// meter the agent would take.
fn meters(out: &mut String, domain: &DomainProbe) {
    let chain: Vec<&str> = domain.chain.iter().map(|m| m.as_str()).collect();
    let _ = if chain.is_empty() {
        writeln!(out, "{}: no meters yet", domain.domain)
    } else {
        writeln!(
            out,
            "{} (tried in order: {}):",
            domain.domain,
            chain.join(", ")
        )
    };
    for row in &domain.rows {
        let detail = row
            .outcome
            .as_ref()
            .map(|meter| describe(meter.as_ref()))
            .map_err(|e| e.to_string());
        let detail = match (row.in_chain, detail) {
            (true, detail) => detail,
            (false, Ok(d)) => Ok(format!("[not in the chain] {d}")),
            (false, Err(e)) => Err(format!("[not in the chain] {e}")),
        };
        line(out, row.meter.as_str(), detail);
    }
    let _ = match domain.selected {
        Some(meter) => writeln!(out, "  selected: {meter}"),
        None => writeln!(out, "  selected: none"),
    };
}

fn describe(meter: &dyn PowerMeter) -> String {
    let mut unique: Vec<String> = Vec::new();
    for z in meter.zones() {
        if !unique.contains(&z) {
            unique.push(z);
        }
    }
    let mut text = format!(
        "zones: {} ({})",
        unique.join(", "),
        meter.provenance().as_str()
    );
    if let Some(model) = meter.estimation_model() {
        text.push_str(&format!(", model {model}"));
    }
    if let Some(detail) = meter.detail() {
        text.push_str(&format!("\n{:27}{detail}", ""));
    }
    text
}

/// Linux's CAP_SYS_PTRACE: reading another user's `/proc/<pid>/exe` and `environ` is a ptrace
/// access check, which file permissions or CAP_DAC_READ_SEARCH do not pass.
const CAP_SYS_PTRACE: u32 = 19;

/// The agent's own effective capabilities (root has them all), from `/proc/self/status`.
fn own_effective_caps() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let hex = status.lines().find_map(|l| l.strip_prefix("CapEff:"))?;
    u64::from_str_radix(hex.trim(), 16).ok()
}

/// What procfs cannot tell about other users' processes without CAP_SYS_PTRACE.
fn other_users_note(caps: Option<u64>) -> Option<&'static str> {
    match caps {
        Some(eff) if eff & (1 << CAP_SYS_PTRACE) != 0 => None,
        Some(_) => Some(
            "without CAP_SYS_PTRACE: exe and environ of other users' processes are unreadable \
             (empty exe labels, no container names from the environment)",
        ),
        None => Some("cannot read /proc/self/status to check CAP_SYS_PTRACE"),
    }
}

fn line(out: &mut String, name: &str, outcome: Result<String, String>) {
    let _ = match outcome {
        Ok(detail) => writeln!(out, "  {name:<8} available      {detail}"),
        Err(reason) => writeln!(out, "  {name:<8} not available  {reason}"),
    };
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use kepler_meters::fixtures::PowercapTree;

    use super::*;

    #[test]
    fn says_what_other_users_processes_hide_without_ptrace() {
        assert_eq!(other_users_note(Some(1 << CAP_SYS_PTRACE)), None);
        assert_eq!(other_users_note(Some(0x1ff_ffff_ffff)), None, "root");
        let none = other_users_note(Some(0)).unwrap();
        assert!(
            none.contains("CAP_SYS_PTRACE") && none.contains("exe"),
            "{none}"
        );
    }

    #[test]
    fn lists_every_meter_per_domain_with_the_selected_one() {
        let dir = tempfile::tempdir().unwrap();
        PowercapTree::create(dir.path(), &[("package-0", 1_000)]).unwrap();
        let text = format!(
            "host:\n  sysfs: {}\nebpf:\n  enabled: false\ncpu:\n  preferredMeters: [Hwmon, RAPL]\n",
            dir.path().display()
        );
        let config = Config::from_yaml(&text, Path::new("test.yaml"))
            .unwrap()
            .config;
        let out = report(&config);
        let position = |needle: &str| {
            out.find(needle)
                .unwrap_or_else(|| panic!("{needle:?} missing from:\n{out}"))
        };
        let chain = position("cpu (tried in order: hwmon, rapl, model):");
        let hwmon = position("  hwmon    not available");
        let rapl = position("  rapl     available      zones: package (measured)");
        let fake = position("  fake     available      [not in the chain]");
        assert!(chain < hwmon && hwmon < rapl && rapl < fake, "{out}");
        position(
            "  selected: rapl\nplatform (tried in order: redfish, ipmi, acpi):\n  redfish  not available  experimental.platform.redfish.enabled is false\n  ipmi     not available  ipmi.enabled is false\n  acpi     not available",
        );
        position("  msr      not available  [not in the chain] disabled (msr.enabled: false)");
        let gpu = position("gpu (tried in order: fake-gpu, dcgm, nvml, amdgpu):");
        let off = position("  nvml     not available  experimental.gpu.enabled is false");
        assert!(gpu < off, "{out}");
        assert!(out.ends_with("Selected meters: cpu: rapl\n"), "{out}");
    }

    #[test]
    fn an_empty_powercap_on_a_rapl_cpu_points_at_the_msr_meter() {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path().join("sys");
        let procfs = dir.path().join("proc");
        let msr_root = dir.path().join("dev-cpu");
        std::fs::create_dir_all(&sysfs).unwrap();
        kepler_meters::fixtures::MsrTree::write_cpuinfo(&procfs, "GenuineIntel", 6, 0x55, 2)
            .unwrap();
        let yaml = |msr: &str| {
            format!(
                "host:\n  sysfs: {}\n  procfs: {}\nebpf:\n  enabled: false\nmsr:\n  root: {}\n{msr}",
                sysfs.display(),
                procfs.display(),
                msr_root.display()
            )
        };
        let config = Config::from_yaml(&yaml(""), Path::new("test.yaml"))
            .unwrap()
            .config;
        let out = report(&config);
        assert!(
            out.contains("  rapl     not available")
                && out.contains("load the msr module (`modprobe msr`")
                && out.contains("set `msr.enabled: true`"),
            "{out}"
        );

        // Enabled, with devices holding Intel's registers: msr follows rapl and is selected.
        let tree = kepler_meters::fixtures::MsrTree::create(&sysfs, &msr_root).unwrap();
        tree.add_cpu(0, 0, 0).unwrap();
        tree.add_cpu(1, 0, 1).unwrap();
        tree.write(0, kepler_meters::msr::INTEL_POWER_UNIT, 0xA0E03)
            .unwrap();
        tree.write(0, kepler_meters::msr::INTEL_PKG_ENERGY, 16_384)
            .unwrap();
        let config = Config::from_yaml(&yaml("  enabled: true\n"), Path::new("test.yaml"))
            .unwrap()
            .config;
        let out = report(&config);
        assert!(
            out.contains("cpu (tried in order: rapl, msr, hwmon, model):")
                && out.contains("  msr      available      zones: package (measured)")
                && !out.contains("modprobe")
                && out.ends_with("Selected meters: cpu: msr\n"),
            "{out}"
        );
    }
}

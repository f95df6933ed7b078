//! Choosing sources and meters for this host, and the facts the exporter labels with.

use std::sync::Arc;

use anyhow::{Context, Result};
use kepler_core::{
    Background, Catalogue, Classifier, Feature, PowerMeter, Unavailable, UsageSource,
};
use kepler_exporters::BuildInfo;
use kepler_meters::{registry, FakeSettings, MeterSettings, OpenContext};
pub use kepler_meters::{Attempt, Selection};
use kepler_sources::HostFacts;
use tracing::info;

use crate::config::{Config, EbpfMode};

/// What the meters need from the configuration and the host (the node name keys the BMC file).
pub fn meter_settings(config: &Config, host: &HostFacts) -> MeterSettings {
    MeterSettings {
        node_name: node_name(config, host),
        poll_interval: config.monitor.interval.0,
        redfish: config.experimental.platform.redfish.settings(),
        ipmi: config.ipmi.settings(),
        sysfs: config.host.sysfs.clone(),
        procfs: config.host.procfs.clone(),
        interval: config.monitor.interval.0,
        rapl_zones: config.rapl.zones.clone(),
        hwmon_zones: config.experimental.hwmon.zones.clone(),
        hwmon_chip_rules: config.experimental.hwmon.chip_rules.clone(),
        fake: FakeSettings {
            zones: config.dev.fake_cpu_meter.zones.clone(),
            ..FakeSettings::default()
        },
        msr: config.msr.clone(),
        gpu: config.experimental.gpu.settings(&config.dev.fake_gpu),
    }
}

/// Opens the estimation meter for the registry's `model` row: the model depends on the
/// `estimator` section and on facts about this host that the agent reads. Background work
/// it needs (a model refresh) is left in `background`.
pub fn open_estimator(
    config: &Config,
    host: &HostFacts,
    background: &Background,
    features: &[Feature],
) -> Result<Box<dyn PowerMeter>, Unavailable> {
    let meter = crate::estimator::open(config, host, features, background)?;
    info!(
        model = meter.model_name(),
        output = meter.output().as_str(),
        "power will be estimated by a model"
    );
    Ok(Box::new(meter))
}

/// The meters of the tick: for each power domain, the first meter of its fallback chain that
/// opens; `features` are those the usage source provides (what a model may use). The
/// attempts say why each meter before it could not be used. Background work the meters ask
/// for (a model refresh, a BMC poller) is left in `background` for the agent to start.
pub fn select_meters(
    config: &Config,
    host: &HostFacts,
    features: &[Feature],
    background: &Background,
) -> Selection {
    let settings = meter_settings(config, host);
    let estimator = |f: &[Feature]| open_estimator(config, host, background, f);
    let cx = OpenContext {
        settings: &settings,
        features,
        estimator: Some(&estimator),
        // Slow meters (BMCs) leave their pollers here too; the agent starts them all.
        background: Some(background),
    };
    registry::select(&config.meter_chains(), &cx)
}

/// The model features something reads: every one when `ebpf.exportFeatures` exports them,
/// else those the chosen meters use. The usage source stops collecting the rest.
pub fn features_needed(config: &Config, meters: &[Box<dyn PowerMeter>]) -> Vec<Feature> {
    if config.ebpf.export_features {
        return Feature::ALL.to_vec();
    }
    let mut needed: Vec<Feature> = meters.iter().flat_map(|m| m.features_used()).collect();
    needed.sort_by_key(|f| f.as_str());
    needed.dedup();
    needed
}

/// "cpu/rapl: reason; cpu/hwmon: reason" for logs and `/readyz`.
pub fn describe_failures(attempts: &[Attempt]) -> String {
    let failures: Vec<String> = attempts
        .iter()
        .filter_map(|a| {
            a.outcome
                .as_ref()
                .err()
                .map(|e| format!("{}/{}: {e}", a.domain, a.meter))
        })
        .collect();
    if failures.is_empty() {
        "no meter configured in cpu.preferredMeters".into()
    } else {
        failures.join("; ")
    }
}

pub fn ebpf_settings(config: &Config) -> kepler_ebpf::EbpfSettings {
    kepler_ebpf::EbpfSettings {
        max_processes: config.ebpf.max_processes,
        exits: config.ebpf.exits.into(),
        // Keeps the kernel BTF parse out of the agent's memory.
        loader: kepler_ebpf::Loader::Child(kepler_ebpf::LoaderCommand::this_executable()),
        // Refreshed on scrape (interval 0), snapshots are at least `staleness` apart.
        interval: if config.monitor.interval.0.is_zero() {
            config.monitor.staleness.0
        } else {
            config.monitor.interval.0
        },
        ..kepler_ebpf::EbpfSettings::default()
    }
}

/// The usage source and, when it is eBPF, its self-metrics handle.
pub struct Usage {
    pub source: Box<dyn UsageSource>,
    pub ebpf_stats: Option<Arc<kepler_ebpf::EbpfStats>>,
    /// What eBPF offers here (its probes), or why it is not the source.
    pub ebpf: Result<String, Unavailable>,
}

/// eBPF when `ebpf.enabled` allows it and it loads; procfs otherwise (`auto`), or an error
/// (`true`). The classifier writes the names it reads to `catalogue`, and tells the pod
/// informer (`nudge`) about pod containers it has not listed yet.
pub fn usage_source(
    config: &Config,
    catalogue: Arc<Catalogue>,
    nudge: Option<kepler_kube::Nudge>,
) -> Result<Usage> {
    let mut classifier = kepler_workloads::CgroupClassifier::with_catalogue(catalogue)
        .with_procfs(config.host.procfs.clone());
    if !config.workloads.pod_ids(config.kube.enabled) {
        classifier = classifier.without_pod_ids();
    }
    let classifier: Arc<dyn Classifier> = match nudge {
        Some(nudge) => Arc::new(kepler_kube::NudgingClassifier::new(
            Arc::new(classifier),
            nudge,
        )),
        None => Arc::new(classifier),
    };
    if config.ebpf.enabled != EbpfMode::Off {
        match kepler_ebpf::EbpfSource::new(
            config.host.procfs.clone(),
            classifier.clone(),
            ebpf_settings(config),
        ) {
            Ok(source) => {
                info!(probes = %source.probes(), "usage source: eBPF");
                return Ok(Usage {
                    ebpf_stats: Some(source.stats()),
                    ebpf: Ok(format!(
                        "eBPF: sched_switch accounting on; {}",
                        source.probes()
                    )),
                    source: Box::new(source),
                });
            }
            Err(reason) if config.ebpf.enabled == EbpfMode::Auto => {
                info!(%reason, "eBPF unavailable; usage source: procfs");
                return procfs_source(config, classifier, Err(reason));
            }
            Err(reason) => {
                return Err(anyhow::anyhow!(
                    "ebpf.enabled is true but eBPF cannot be used: {reason}"
                ))
            }
        }
    }
    procfs_source(
        config,
        classifier,
        Err(Unavailable::new("disabled by ebpf.enabled: false")),
    )
}

fn procfs_source(
    config: &Config,
    classifier: Arc<dyn Classifier>,
    ebpf: Result<String, Unavailable>,
) -> Result<Usage> {
    let source = kepler_sources::ProcfsSource::new(config.host.procfs.clone(), classifier)
        .with_context(|| format!("procfs usage source at {}", config.host.procfs.display()))?;
    Ok(Usage {
        source: Box::new(source),
        ebpf_stats: None,
        ebpf,
    })
}

/// `kube.nodeName`, else `NODE_NAME` (the usual downward-API variable), else the hostname.
pub fn node_name(config: &Config, host: &HostFacts) -> String {
    if let Some(name) = config.kube.node_name.as_ref().filter(|n| !n.is_empty()) {
        return name.clone();
    }
    if let Ok(name) = std::env::var("NODE_NAME") {
        if !name.is_empty() {
            return name;
        }
    }
    host.hostname()
        .map(str::to_string)
        .unwrap_or_else(|_| "unknown".into())
}

pub fn build_info() -> BuildInfo {
    BuildInfo {
        arch: std::env::consts::ARCH.to_string(),
        branch: option_env!("KEPLER_GIT_BRANCH")
            .unwrap_or("unknown")
            .to_string(),
        revision: option_env!("KEPLER_GIT_REVISION")
            .unwrap_or("unknown")
            .to_string(),
        version: option_env!("KEPLER_VERSION")
            .unwrap_or(env!("CARGO_PKG_VERSION"))
            .to_string(),
        rust_version: option_env!("KEPLER_RUSTC_VERSION")
            .unwrap_or("unknown")
            .to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    /// Built from a git checkout, the build info names its commit (cargo reruns build.rs when
    /// HEAD moves, so a test binary never reports an older commit than its source).
    #[test]
    fn build_info_names_the_git_commit() {
        let info = build_info();
        assert!(!info.version.is_empty() && info.version != "unknown");
        let head = std::process::Command::new("git")
            .args(["rev-parse", "--short=12", "HEAD"])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .output();
        match head {
            Ok(out) if out.status.success() && std::env::var("KEPLER_GIT_REVISION").is_err() => {
                let head = String::from_utf8_lossy(&out.stdout).trim().to_string();
                assert_eq!(info.revision, head);
                assert_ne!(info.branch, "unknown");
            }
            _ => eprintln!("not a git checkout; revision is {}", info.revision),
        }
        assert_ne!(info.rust_version, "unknown");
    }

    use kepler_core::PowerDomain;
    use kepler_meters::fixtures::{HwmonTree, PowercapTree};

    use super::*;

    fn config(sysfs: &Path, yaml: &str) -> Config {
        let text = format!("host:\n  sysfs: {}\n{yaml}", sysfs.display());
        Config::from_yaml(&text, Path::new("test.yaml"))
            .unwrap()
            .config
    }

    fn select(config: &Config) -> Selection {
        let host = HostFacts::read(&config.host.procfs, &config.host.sysfs);
        select_meters(config, &host, &[], &Background::default())
    }

    fn selected(config: &Config) -> Vec<String> {
        select(config)
            .meters
            .iter()
            .map(|m| format!("{}/{}", m.domain(), m.name()))
            .collect()
    }

    #[test]
    fn preferred_meters_in_any_case_select_the_first_that_opens() {
        let dir = tempfile::tempdir().unwrap();
        let mut hwmon = HwmonTree::create(dir.path()).unwrap();
        hwmon
            .add_chip(Some("power_meter"), &[("power1_average", "1000000\n")])
            .unwrap();
        hwmon
            .add_chip(Some("amd_energy"), &[("energy1_input", "1000\n")])
            .unwrap();
        let upper = config(dir.path(), "cpu:\n  preferredMeters: [RAPL, Hwmon]\n");
        // No powercap tree yet: hwmon, and the attempts say why rapl was passed over. The
        // ACPI power meter is the platform domain's whatever the CPU chain takes.
        assert_eq!(selected(&upper), vec!["cpu/hwmon", "platform/acpi"]);
        let attempts = select(&upper).attempts;
        assert_eq!(attempts[0].domain, PowerDomain::Cpu);
        assert_eq!(attempts[0].meter.as_str(), "rapl");
        assert!(describe_failures(&attempts).starts_with("cpu/rapl: "));

        PowercapTree::create(dir.path(), &[("package-0", 1_000)]).unwrap();
        assert_eq!(selected(&upper), vec!["cpu/rapl", "platform/acpi"]);
        let reversed = config(dir.path(), "cpu:\n  preferredMeters: [HWMON, rapl]\n");
        assert_eq!(selected(&reversed), vec!["cpu/hwmon", "platform/acpi"]);
        let fake = config(dir.path(), "dev:\n  fake-cpu-meter:\n    enabled: true\n");
        assert_eq!(selected(&fake), vec!["cpu/fake", "platform/acpi"]);
    }
}

//! Choosing sources and meters for this host, and the facts the exporter labels with.

use std::sync::Arc;

use anyhow::{Context, Result};
use kepler_core::{Background, Catalogue, Feature, PowerMeter, UsageSource};
use kepler_exporters::BuildInfo;
use kepler_meters::{FakeSettings, MeterSettings, ProbeReport};
use kepler_sources::HostFacts;
use tracing::info;

use crate::config::{Config, EbpfMode};

pub fn meter_settings(config: &Config) -> MeterSettings {
    MeterSettings {
        sysfs: config.host.sysfs.clone(),
        rapl_zones: config.rapl.zones.clone(),
        hwmon_zones: config.experimental.hwmon.zones.clone(),
        fake: FakeSettings {
            zones: config.dev.fake_cpu_meter.zones.clone(),
            ..FakeSettings::default()
        },
    }
}

/// The meters of the tick: for each power domain, the first meter of its fallback chain that
/// opens (today the CPU domain's chain is `cpu.preferredMeters`; the platform and GPU chains
/// have no meter yet). The reports say why each one before it could not be used. Background
/// work the chosen meters need is left in `background`.
pub fn select_meters(
    config: &Config,
    host: &HostFacts,
    source: &dyn UsageSource,
    background: &Background,
) -> (Vec<Box<dyn PowerMeter>>, Vec<ProbeReport>) {
    let (cpu, reports) = select_meter(config, host, source, background);
    (cpu.into_iter().collect(), reports)
}

/// Tries the configured CPU meters in order and keeps the first that opens; the reports say
/// why each one before it could not be used.
pub fn select_meter(
    config: &Config,
    host: &HostFacts,
    source: &dyn UsageSource,
    background: &Background,
) -> (Option<Box<dyn PowerMeter>>, Vec<ProbeReport>) {
    let settings = meter_settings(config);
    let mut reports = Vec::new();
    for name in config.meter_order() {
        match open_meter(
            config,
            &settings,
            &name,
            &source.features(),
            host,
            background,
        ) {
            Ok(meter) => {
                info!(meter = %name, zones = ?meter.zones(), "power meter selected");
                reports.push(ProbeReport {
                    name,
                    outcome: Ok(meter.zones()),
                });
                return (Some(meter), reports);
            }
            Err(reason) => {
                info!(meter = %name, %reason, "power meter unavailable");
                reports.push(ProbeReport {
                    name,
                    outcome: Err(reason),
                });
            }
        }
    }
    (None, reports)
}

/// Opens one meter by name; `features` are those the usage source provides (for `model`).
pub fn open_meter(
    config: &Config,
    settings: &MeterSettings,
    name: &str,
    features: &[Feature],
    host: &HostFacts,
    background: &Background,
) -> Result<Box<dyn PowerMeter>, kepler_core::Unavailable> {
    if name == "model" {
        let meter = crate::estimator::open(config, host, features, background)?;
        info!(
            model = meter.model_name(),
            output = meter.output().as_str(),
            "power will be estimated by a model"
        );
        return Ok(Box::new(meter));
    }
    kepler_meters::open_meter(name, settings)
}

/// "rapl: reason; hwmon: reason" for logs and `/readyz`.
pub fn describe_failures(reports: &[ProbeReport]) -> String {
    let failures: Vec<String> = reports
        .iter()
        .filter_map(|r| r.outcome.as_ref().err().map(|e| format!("{}: {e}", r.name)))
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
        ..kepler_ebpf::EbpfSettings::default()
    }
}

/// The usage source and, when it is eBPF, its self-metrics handle.
pub struct Usage {
    pub source: Box<dyn UsageSource>,
    pub ebpf_stats: Option<Arc<kepler_ebpf::EbpfStats>>,
    /// What eBPF offers here (its probes), or why it is not the source.
    pub ebpf: Result<String, String>,
}

/// eBPF when `ebpf.enabled` allows it and it loads; procfs otherwise (`auto`), or an error
/// (`true`). The classifier writes the names it reads to `catalogue`.
pub fn usage_source(config: &Config, catalogue: Arc<Catalogue>) -> Result<Usage> {
    let classifier = Arc::new(kepler_workloads::CgroupClassifier::with_catalogue(
        catalogue,
    ));
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
                return procfs_source(config, classifier, Err(reason.to_string()));
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
        Err("disabled by ebpf.enabled: false".into()),
    )
}

fn procfs_source(
    config: &Config,
    classifier: Arc<kepler_workloads::CgroupClassifier>,
    ebpf: Result<String, String>,
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
        version: env!("CARGO_PKG_VERSION").to_string(),
        rust_version: option_env!("KEPLER_RUSTC_VERSION")
            .unwrap_or("unknown")
            .to_string(),
    }
}

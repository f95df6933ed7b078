//! Agent configuration: upstream Kepler's YAML keys and flags (DESIGN §4), with precedence
//! defaults < file < flags. Each component's section is a typed struct of its own (closed
//! choices are enums, parsed once by serde); this file composes them under upstream's keys.
//! Unknown keys are warned about by name; invalid values are errors naming the key.

mod attribution;
pub(crate) mod choice;
mod compat;
mod duration;
mod ebpf;
mod estimator;
mod gpu;
mod kube;
mod limits;
mod meters;
mod print;
#[cfg(test)]
mod tests;
mod workloads;

use std::path::{Path, PathBuf};
use std::time::Duration;

use kepler_core::PowerDomain;
use kepler_exporters::MetricsLevel;
use kepler_sources::bounded::{self, read_to_string_limited, BoundedReadError};
use serde::Deserialize;

pub use self::attribution::{AttributionSection, IdlePolicyName};
pub(crate) use self::choice::closed_choice;
pub use self::choice::ChoiceError;
pub use self::compat::{DebugCollector, DebugConfig};
pub use self::duration::{parse_duration, GoDuration};
pub use self::ebpf::{EbpfConfig, EbpfExits, EbpfMode};
pub use self::estimator::{EstimatorConfig, EstimatorFamily, EstimatorOutput};
pub use self::gpu::{FakeGpuConfig, GpuConfig};
pub use self::kube::{KubeConfig, PodInformerConfig, PodInformerMode};
pub use self::meters::{
    CpuConfig, DevConfig, ExperimentalConfig, FakeMeterConfig, HwmonConfig, IpmiConfig,
    PlatformConfig, RaplConfig, RedfishConfig,
};
pub use self::print::redact_url;
pub use self::workloads::WorkloadsConfig;
pub use crate::logging::{LogConfig, LogFormat, LogLevel};

/// A config problem a user can fix; the message names the key.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading config file {path}: {source}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("config file {path}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        key: String,
        message: String,
    },
    #[error("config: `{key}`: {message}")]
    Value { key: String, message: String },
    /// Too large, or not text: not a config file.
    #[error("config file: {0}")]
    Unreadable(#[from] BoundedReadError),
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct Config {
    pub log: LogConfig,
    pub host: HostConfig,
    pub monitor: MonitorConfig,
    pub cpu: CpuConfig,
    pub rapl: RaplConfig,
    pub exporter: ExporterConfig,
    pub web: WebConfig,
    pub debug: DebugConfig,
    pub kube: KubeConfig,
    pub experimental: ExperimentalConfig,
    pub dev: DevConfig,
    pub attribution: AttributionSection,
    pub estimator: EstimatorConfig,
    pub ebpf: EbpfConfig,
    /// RAPL over MSR, the `msr` meter's own section.
    pub msr: kepler_meters::MsrConfig,
    pub ipmi: IpmiConfig,
    pub workloads: WorkloadsConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct HostConfig {
    pub sysfs: PathBuf,
    pub procfs: PathBuf,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            sysfs: "/sys".into(),
            procfs: "/proc".into(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct MonitorConfig {
    /// 0: tick when a scrape finds the snapshot older than `staleness` (upstream's mode).
    pub interval: GoDuration,
    /// With `interval: 0`, how old a snapshot may be before a scrape asks for a new tick.
    pub staleness: GoDuration,
    /// Ended processes kept (the most energetic); -1 keeps all, 0 none.
    pub max_terminated: i64,
    /// Ended processes below this energy (joules) are not kept.
    pub min_terminated_energy_threshold: f64,
    /// How long ended workloads stay exported (kepler-rs; upstream drops them after a scrape).
    pub terminated_retention: GoDuration,
    /// The most power one meter reading (a socket's zone, a sensor, a device) may imply, in
    /// watts; readings above it are dropped as broken (kepler-rs).
    pub max_reading_watts: f64,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            interval: GoDuration(Duration::from_secs(5)),
            staleness: GoDuration(Duration::from_millis(500)),
            max_terminated: 500,
            min_terminated_energy_threshold: 10.0,
            terminated_retention: GoDuration(Duration::from_secs(300)),
            max_reading_watts: kepler_core::plausible::DEFAULT_MAX_READING_POWER.0,
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ExporterConfig {
    pub stdout: Enabled,
    pub prometheus: PrometheusConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct Enabled {
    pub enabled: bool,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PrometheusConfig {
    pub enabled: bool,
    /// The agent's own `process_*` metrics (upstream's Go and process collectors).
    pub debug_collectors: Vec<DebugCollector>,
    /// A list, or one comma-separated string; `all` (or empty) for every level; any case.
    pub metrics_level: MetricsLevel,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            enabled: true,
            debug_collectors: vec![DebugCollector::Go],
            metrics_level: MetricsLevel::ALL,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct WebConfig {
    /// `""` (upstream's default in its files) means no web config.
    #[serde(deserialize_with = "compat::empty_as_none")]
    pub config_file: Option<PathBuf>,
    pub listen_addresses: Vec<String>,
}

impl Default for WebConfig {
    fn default() -> Self {
        WebConfig {
            config_file: None,
            listen_addresses: vec![":28282".into()],
        }
    }
}

/// Values given on the command line, already parsed; `None` leaves the file's (or default)
/// value.
/// `Option<Option<_>>` fields: `Some(None)` is a flag given as `""`, which clears the file's value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub log_level: Option<LogLevel>,
    pub log_format: Option<LogFormat>,
    pub sysfs: Option<PathBuf>,
    pub procfs: Option<PathBuf>,
    pub interval: Option<GoDuration>,
    pub max_terminated: Option<i64>,
    pub pprof: Option<bool>,
    pub listen_addresses: Vec<String>,
    pub web_config_file: Option<Option<PathBuf>>,
    pub kube_enable: Option<bool>,
    pub kube_config: Option<Option<PathBuf>>,
    pub kube_node_name: Option<String>,
    pub metrics: Option<MetricsLevel>,
    pub exporter_stdout: Option<bool>,
    pub exporter_prometheus: Option<bool>,
    pub redfish_enabled: Option<bool>,
    pub redfish_node_name: Option<String>,
    pub redfish_config_file: Option<PathBuf>,
    pub hwmon_force_enabled: Option<bool>,
    pub hwmon_enabled: Option<bool>,
    pub hwmon_zones: Vec<String>,
    pub gpu_enabled: Option<bool>,
    pub gpu_idle_power: Option<f64>,
    pub gpu_dcgm_endpoint: Option<Option<String>>,
}

/// A loaded configuration and the unknown keys that were ignored (to warn about once logging
/// is set up).
#[derive(Debug)]
pub struct Loaded {
    pub config: Config,
    pub unknown_keys: Vec<String>,
}

impl Config {
    /// Parses YAML text; `path` only labels messages.
    pub fn from_yaml(text: &str, path: &Path) -> Result<Loaded, ConfigError> {
        let mut unknown_keys = Vec::new();
        if text.trim().is_empty() {
            return Ok(Loaded {
                config: Config::default(),
                unknown_keys,
            });
        }
        let deserializer = serde_yaml::Deserializer::from_str(text);
        let mut note_unknown = |key: serde_ignored::Path| unknown_keys.push(key.to_string());
        let ignored = serde_ignored::Deserializer::new(deserializer, &mut note_unknown);
        let config: Config = serde_path_to_error::deserialize(ignored).map_err(|e| {
            let key = e.path().to_string();
            ConfigError::Invalid {
                path: path.to_path_buf(),
                key: if key == "." {
                    "(top level)".into()
                } else {
                    key
                },
                message: e.into_inner().to_string(),
            }
        })?;
        let mut config = config;
        config.normalize();
        Ok(Loaded {
            config,
            unknown_keys,
        })
    }

    /// Upstream's "not set" spellings that the typed sections keep as values: `""` for the
    /// Redfish node name and file, `0` for the GPU idle power (auto-detect).
    fn normalize(&mut self) {
        let redfish = &mut self.experimental.platform.redfish;
        redfish.node_name = redfish.node_name.take().filter(|n| !n.trim().is_empty());
        redfish.config_file = redfish
            .config_file
            .take()
            .filter(|p| !p.as_os_str().is_empty());
        let gpu = &mut self.experimental.gpu;
        gpu.idle_power = gpu.idle_power.filter(|w| *w != 0.0);
    }

    /// Defaults, then the file (if any), then the flags; then the checks that relate values.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Loaded, ConfigError> {
        let mut loaded = match file {
            Some(path) => {
                let text =
                    read_to_string_limited(path, bounded::limits::CONFIG).map_err(|e| match e {
                        BoundedReadError::Io { source, .. } => ConfigError::Read {
                            path: path.to_path_buf(),
                            source,
                        },
                        other => ConfigError::Unreadable(other),
                    })?;
                Config::from_yaml(&text, path)?
            }
            None => Loaded {
                config: Config::default(),
                unknown_keys: Vec::new(),
            },
        };
        loaded.config.apply(overrides);
        loaded.config.validate()?;
        Ok(loaded)
    }

    fn apply(&mut self, o: &Overrides) {
        if let Some(level) = o.log_level {
            self.log.level = level;
        }
        if let Some(format) = o.log_format {
            self.log.format = format;
        }
        if let Some(n) = o.max_terminated {
            self.monitor.max_terminated = n;
        }
        if let Some(v) = o.pprof {
            self.debug.pprof.enabled = v;
        }
        if let Some(p) = &o.sysfs {
            self.host.sysfs = p.clone();
        }
        if let Some(p) = &o.procfs {
            self.host.procfs = p.clone();
        }
        if let Some(interval) = o.interval {
            self.monitor.interval = interval;
        }
        if !o.listen_addresses.is_empty() {
            self.web.listen_addresses = o.listen_addresses.clone();
        }
        if let Some(p) = &o.web_config_file {
            self.web.config_file = p.clone();
        }
        if let Some(v) = o.kube_enable {
            self.kube.enabled = v;
        }
        if let Some(p) = &o.kube_config {
            self.kube.config = p.clone();
        }
        if let Some(n) = &o.kube_node_name {
            self.kube.node_name = Some(n.clone());
        }
        if let Some(levels) = o.metrics {
            self.exporter.prometheus.metrics_level = levels;
        }
        if let Some(v) = o.exporter_stdout {
            self.exporter.stdout.enabled = v;
        }
        if let Some(v) = o.exporter_prometheus {
            self.exporter.prometheus.enabled = v;
        }
        self.apply_experimental(o);
    }

    fn apply_experimental(&mut self, o: &Overrides) {
        let x = &mut self.experimental;
        if let Some(v) = o.redfish_enabled {
            x.platform.redfish.enabled = v;
        }
        if let Some(n) = &o.redfish_node_name {
            x.platform.redfish.node_name = Some(n.clone());
        }
        if let Some(p) = &o.redfish_config_file {
            x.platform.redfish.config_file = Some(p.clone());
        }
        if let Some(v) = o.hwmon_force_enabled {
            x.hwmon.force_enabled = v;
        }
        if let Some(v) = o.hwmon_enabled {
            x.hwmon.enabled = Some(v);
        }
        if !o.hwmon_zones.is_empty() {
            x.hwmon.zones = o.hwmon_zones.clone();
        }
        if let Some(v) = o.gpu_enabled {
            x.gpu.enabled = v;
        }
        if let Some(w) = o.gpu_idle_power {
            // 0 is upstream's "auto-detect", as in the file.
            x.gpu.idle_power = (w != 0.0).then_some(w);
        }
        if let Some(url) = &o.gpu_dcgm_endpoint {
            x.gpu.dcgm_endpoint = url.clone();
        }
    }

    /// Checks of ranges and of values that depend on each other; spellings were checked when
    /// the values were parsed.
    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Value {
            key: key.into(),
            message,
        };
        // 0 is upstream's refresh-on-scrape mode; anything else below 100ms would spend the
        // agent's time measuring itself.
        let interval = self.monitor.interval.0;
        if !interval.is_zero() && interval < Duration::from_millis(100) {
            return Err(invalid(
                "monitor.interval",
                format!("{interval:?} is too short; use 0 (on scrape) or at least 100ms"),
            ));
        }
        for (i, rule) in self.experimental.hwmon.chip_rules.iter().enumerate() {
            if let Some(message) = rule.problem() {
                return Err(ConfigError::Value {
                    key: format!("experimental.hwmon.chipRules[{i}].name"),
                    message,
                });
            }
        }
        self.kube
            .validate()
            .map_err(|(key, message)| invalid(key, message))?;
        if self.monitor.max_terminated < -1 {
            return Err(invalid(
                "monitor.maxTerminated",
                "must be -1 (keep all), 0 (keep none) or a positive count".into(),
            ));
        }
        let threshold = self.monitor.min_terminated_energy_threshold;
        if !threshold.is_finite() || threshold < 0.0 {
            return Err(invalid(
                "monitor.minTerminatedEnergyThreshold",
                "must be a non-negative number of joules".into(),
            ));
        }
        if let Some(meter) = self
            .cpu
            .preferred_meters
            .iter()
            .find(|m| m.domain() != PowerDomain::Cpu)
        {
            return Err(invalid(
                "cpu.preferredMeters",
                format!("{meter} measures the {} domain, not cpu", meter.domain()),
            ));
        }
        if self.web.listen_addresses.is_empty() {
            return Err(invalid(
                "web.listenAddresses",
                "needs at least one address (health and readiness are served there)".into(),
            ));
        }
        if let Some(w) = self.attribution.idle_baseline_watts {
            if !(w.is_finite() && w >= 0.0) {
                return Err(invalid(
                    "attribution.idleBaselineWatts",
                    "must be a non-negative number of watts".into(),
                ));
            }
        }
        if !(0.0..=1.0).contains(&self.attribution.low_usage_ratio) {
            return Err(invalid(
                "attribution.lowUsageRatio",
                "must be between 0 and 1".into(),
            ));
        }
        self.experimental
            .gpu
            .check()
            .map_err(|m| invalid("experimental.gpu.idlePower", m))?;
        let redfish = &self.experimental.platform.redfish;
        if redfish.enabled && redfish.config_file.is_none() {
            return Err(invalid(
                "experimental.platform.redfish.configFile",
                "must name the BMC file when redfish is enabled".into(),
            ));
        }
        for (key, limit) in [
            (
                "experimental.platform.redfish.httpTimeout",
                redfish.http_timeout,
            ),
            ("ipmi.timeout", self.ipmi.timeout),
        ] {
            if limit.is_some_and(|d| d.0.is_zero()) {
                return Err(invalid(key, "must be longer than 0s".into()));
            }
        }
        if self.estimator.model.trim().is_empty() {
            return Err(invalid(
                "estimator.model",
                "must be builtin or a model file path".into(),
            ));
        }
        self.check_limits()
    }

    /// Upstream keys this agent accepts but does not act on yet, when the file turns them on;
    /// users must hear that instead of wondering where pod names or GPU power are.
    pub fn not_implemented(&self) -> Vec<&'static str> {
        Vec::new()
    }

    /// Every power domain's fallback chain of meters, from `cpu.preferredMeters`,
    /// `msr.enabled` and `dev.fake-cpu-meter.enabled`.
    pub fn meter_chains(&self) -> Vec<kepler_meters::Chain> {
        kepler_meters::registry::chains(&self.cpu_meters(), self.dev.fake_cpu_meter.enabled)
    }

    /// `cpu.preferredMeters`, with the msr meter right after `rapl` (first without it) when
    /// `msr.enabled` is set and the list does not place it: enabling it is then the one step a
    /// user takes, and upstream's default list stays as it is. Upstream's `forceEnabled` skips
    /// RAPL detection for hwmon; trying hwmon first gives the same choice on hosts with hwmon
    /// and still a meter on hosts without it.
    pub fn cpu_meters(&self) -> Vec<kepler_meters::MeterName> {
        let mut meters = self.cpu.preferred_meters.clone();
        if let Some(msr) = kepler_meters::MeterName::msr() {
            if self.msr.enabled && !meters.contains(&msr) {
                let at = meters
                    .iter()
                    .position(|m| m.as_str() == "rapl")
                    .map_or(0, |i| i + 1);
                meters.insert(at, msr);
            }
        }
        if self.experimental.hwmon.force_enabled {
            if let Ok(hwmon) = "hwmon".parse::<kepler_meters::MeterName>() {
                meters.retain(|m| *m != hwmon);
                meters.insert(0, hwmon);
            }
        }
        meters
    }
}

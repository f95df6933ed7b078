//! Agent configuration: upstream Kepler's YAML keys and flags (DESIGN §4), with precedence
//! defaults < file < flags. Unknown keys are warned about by name; invalid values are errors
//! naming the key.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::{Deserialize, Deserializer};

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
}

/// A duration written like Go's `time.Duration` strings (`5s`, `500ms`, `1m30s`).
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct GoDuration(pub Duration);

impl<'de> Deserialize<'de> for GoDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        parse_duration(&text)
            .map(GoDuration)
            .map_err(serde::de::Error::custom)
    }
}

pub fn parse_duration(text: &str) -> Result<Duration, String> {
    humantime::parse_duration(text.trim())
        .map_err(|e| format!("invalid duration {text:?} ({e}); use forms like 5s, 500ms, 1m30s"))
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
    pub kube: KubeConfig,
    pub experimental: ExperimentalConfig,
    pub dev: DevConfig,
    pub attribution: AttributionSection,
    pub estimator: EstimatorConfig,
    pub ebpf: EbpfConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default)]
pub struct LogConfig {
    pub level: String,
    pub format: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
            format: "text".into(),
        }
    }
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
    pub interval: GoDuration,
    /// Accepted for compatibility: upstream refreshes on scrape when data is older than this;
    /// kepler-rs samples on a fixed interval and never on the scrape path.
    pub staleness: GoDuration,
    /// Ended processes kept (the most energetic); -1 keeps all, 0 none.
    pub max_terminated: i64,
    /// Ended processes below this energy (joules) are not kept.
    pub min_terminated_energy_threshold: f64,
    /// How long ended workloads stay exported (kepler-rs; upstream drops them after a scrape).
    pub terminated_retention: GoDuration,
}

impl Default for MonitorConfig {
    fn default() -> Self {
        MonitorConfig {
            interval: GoDuration(Duration::from_secs(5)),
            staleness: GoDuration(Duration::from_millis(500)),
            max_terminated: 500,
            min_terminated_energy_threshold: 10.0,
            terminated_retention: GoDuration(Duration::from_secs(300)),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct CpuConfig {
    pub preferred_meters: Vec<String>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            preferred_meters: vec!["rapl".into(), "hwmon".into()],
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct RaplConfig {
    pub zones: Vec<String>,
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
    pub metrics_level: Vec<String>,
}

impl Default for PrometheusConfig {
    fn default() -> Self {
        PrometheusConfig {
            enabled: true,
            metrics_level: ["node", "process", "container", "vm", "pod"]
                .map(String::from)
                .to_vec(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct WebConfig {
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

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct KubeConfig {
    pub enabled: bool,
    pub config: Option<PathBuf>,
    pub node_name: Option<String>,
    pub pod_informer: PodInformerConfig,
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PodInformerConfig {
    pub mode: String,
    pub poll_interval: GoDuration,
}

impl Default for PodInformerConfig {
    fn default() -> Self {
        PodInformerConfig {
            mode: "kubelet".into(),
            poll_interval: GoDuration(Duration::from_secs(15)),
        }
    }
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct ExperimentalConfig {
    pub platform: PlatformConfig,
    pub hwmon: HwmonConfig,
    pub gpu: GpuConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct PlatformConfig {
    pub redfish: RedfishConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RedfishConfig {
    pub enabled: bool,
    pub node_name: Option<String>,
    pub config_file: Option<PathBuf>,
    pub http_timeout: Option<GoDuration>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct HwmonConfig {
    pub zones: Vec<String>,
    pub chip_rules: Option<serde_yaml::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct GpuConfig {
    pub enabled: bool,
    pub idle_power: Option<f64>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DevConfig {
    #[serde(rename = "fake-cpu-meter")]
    pub fake_cpu_meter: FakeMeterConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FakeMeterConfig {
    pub enabled: bool,
    pub zones: Vec<String>,
}

/// kepler-rs section: how idle power is separated from active power.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct AttributionSection {
    /// `ratio` (upstream: idle = (1 − usage) × energy) or `baseline`.
    pub idle_policy: String,
    /// With `baseline`: a fixed idle power in watts for every zone; unset = measured.
    pub idle_baseline_watts: Option<f64>,
    /// With a measured baseline: intervals at or below this usage ratio count as idle.
    pub low_usage_ratio: f64,
}

impl Default for AttributionSection {
    fn default() -> Self {
        AttributionSection {
            idle_policy: "ratio".into(),
            idle_baseline_watts: None,
            low_usage_ratio: 0.1,
        }
    }
}

/// `ebpf.enabled`: `auto` uses eBPF when it can be loaded and procfs otherwise.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum EbpfMode {
    #[default]
    Auto,
    On,
    Off,
}

impl<'de> Deserialize<'de> for EbpfMode {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        // YAML users write `true`, `false` or `auto`; accept each spelling.
        match serde_yaml::Value::deserialize(d)? {
            serde_yaml::Value::Bool(true) => Ok(EbpfMode::On),
            serde_yaml::Value::Bool(false) => Ok(EbpfMode::Off),
            serde_yaml::Value::String(s) => match s.to_ascii_lowercase().as_str() {
                "auto" => Ok(EbpfMode::Auto),
                "true" => Ok(EbpfMode::On),
                "false" => Ok(EbpfMode::Off),
                _ => Err(serde::de::Error::custom(format!(
                    "{s:?} is not auto, true or false"
                ))),
            },
            other => Err(serde::de::Error::custom(format!(
                "{other:?} is not auto, true or false"
            ))),
        }
    }
}

/// kepler-rs section: the eBPF usage source.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct EbpfConfig {
    pub enabled: EbpfMode,
    /// Export the model features (per node and per process) as metrics; off by default
    /// because per-process series multiply cardinality.
    pub export_features: bool,
    /// Capacity of the per-process map; processes beyond it are counted as dropped.
    pub max_processes: u32,
}

impl Default for EbpfConfig {
    fn default() -> Self {
        EbpfConfig {
            enabled: EbpfMode::Auto,
            export_features: false,
            max_processes: 16_384,
        }
    }
}

/// kepler-rs section: the estimation meter used where no power meter exists.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct EstimatorConfig {
    /// `builtin` (chosen by this machine's spec), the path of a Kepler model-DB file (`.json`
    /// weights or `.zip` archive), or an `http(s)://` URL of one.
    pub model: String,
    /// A Kepler model server; when set, the model is the one it selects for this machine
    /// (`POST <url>/model`), and `model` is not used.
    #[serde(rename = "modelServerURL")]
    pub model_server_url: Option<String>,
    /// Where downloaded models are kept (so a restart without network still estimates).
    pub cache_dir: PathBuf,
    /// Trainer name when the file name does not tell (`SGDRegressorTrainer`, ...).
    pub trainer: Option<String>,
    /// Built-in model family: `rapl` (package and dram zones) or `platform` (whole machine).
    pub family: String,
    /// `auto` (DynPower inside a VM, AbsPower on bare metal), `AbsPower` or `DynPower`.
    pub output_type: String,
    /// How often a model file is checked for changes, and a downloaded one refreshed.
    pub refresh_period: GoDuration,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            model: "builtin".into(),
            model_server_url: None,
            cache_dir: "/var/lib/kepler/models".into(),
            trainer: None,
            family: "rapl".into(),
            output_type: "auto".into(),
            refresh_period: GoDuration(Duration::from_secs(60)),
        }
    }
}

/// Values given on the command line; `None` leaves the file's (or default) value.
#[derive(Clone, Debug, Default)]
pub struct Overrides {
    pub log_level: Option<String>,
    pub sysfs: Option<PathBuf>,
    pub procfs: Option<PathBuf>,
    pub interval: Option<String>,
    pub listen_addresses: Vec<String>,
    pub web_config_file: Option<PathBuf>,
    pub kube_enable: Option<bool>,
    pub kube_config: Option<PathBuf>,
    pub kube_node_name: Option<String>,
    pub metrics: Vec<String>,
    pub exporter_stdout: Option<bool>,
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
        Ok(Loaded {
            config,
            unknown_keys,
        })
    }

    /// Defaults, then the file (if any), then the flags; then validation.
    pub fn load(file: Option<&Path>, overrides: &Overrides) -> Result<Loaded, ConfigError> {
        let mut loaded = match file {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
                Config::from_yaml(&text, path)?
            }
            None => Loaded {
                config: Config::default(),
                unknown_keys: Vec::new(),
            },
        };
        loaded.config.apply(overrides)?;
        loaded.config.validate()?;
        Ok(loaded)
    }

    fn apply(&mut self, o: &Overrides) -> Result<(), ConfigError> {
        if let Some(level) = &o.log_level {
            self.log.level = level.clone();
        }
        if let Some(p) = &o.sysfs {
            self.host.sysfs = p.clone();
        }
        if let Some(p) = &o.procfs {
            self.host.procfs = p.clone();
        }
        if let Some(text) = &o.interval {
            self.monitor.interval =
                GoDuration(parse_duration(text).map_err(|message| ConfigError::Value {
                    key: "--monitor.interval".into(),
                    message,
                })?);
        }
        if !o.listen_addresses.is_empty() {
            self.web.listen_addresses = o.listen_addresses.clone();
        }
        if let Some(p) = &o.web_config_file {
            self.web.config_file = Some(p.clone());
        }
        if let Some(v) = o.kube_enable {
            self.kube.enabled = v;
        }
        if let Some(p) = &o.kube_config {
            self.kube.config = Some(p.clone());
        }
        if let Some(n) = &o.kube_node_name {
            self.kube.node_name = Some(n.clone());
        }
        if !o.metrics.is_empty() {
            self.exporter.prometheus.metrics_level = o.metrics.clone();
        }
        if let Some(v) = o.exporter_stdout {
            self.exporter.stdout.enabled = v;
        }
        Ok(())
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let invalid = |key: &str, message: String| ConfigError::Value {
            key: key.into(),
            message,
        };
        if !matches!(
            self.log.level.to_ascii_lowercase().as_str(),
            "trace" | "debug" | "info" | "warn" | "error"
        ) {
            return Err(invalid(
                "log.level",
                format!(
                    "{:?} is not one of trace, debug, info, warn, error",
                    self.log.level
                ),
            ));
        }
        if !matches!(self.log.format.as_str(), "text" | "json") {
            return Err(invalid(
                "log.format",
                format!("{:?} is not text or json", self.log.format),
            ));
        }
        if self.monitor.interval.0 < Duration::from_millis(100) {
            return Err(invalid(
                "monitor.interval",
                format!(
                    "{:?} is too short; use at least 100ms",
                    self.monitor.interval.0
                ),
            ));
        }
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
        for meter in &self.cpu.preferred_meters {
            let known = known_meters();
            if !known.contains(&meter.as_str()) {
                return Err(invalid(
                    "cpu.preferredMeters",
                    format!("unknown meter {meter:?}; known: {}", known.join(", ")),
                ));
            }
        }
        for level in &self.exporter.prometheus.metrics_level {
            if !KNOWN_LEVELS.contains(&level.as_str()) {
                return Err(invalid(
                    "exporter.prometheus.metricsLevel",
                    format!(
                        "unknown level {level:?}; known: {}",
                        KNOWN_LEVELS.join(", ")
                    ),
                ));
            }
        }
        if self.web.listen_addresses.is_empty() && self.exporter.prometheus.enabled {
            return Err(invalid(
                "web.listenAddresses",
                "needs at least one address when the Prometheus exporter is enabled".into(),
            ));
        }
        if !matches!(
            self.kube.pod_informer.mode.as_str(),
            "kubelet" | "apiserver"
        ) {
            return Err(invalid(
                "kube.podInformer.mode",
                format!(
                    "{:?} is not kubelet or apiserver",
                    self.kube.pod_informer.mode
                ),
            ));
        }
        match self.attribution.idle_policy.as_str() {
            "ratio" | "baseline" => {}
            other => {
                return Err(invalid(
                    "attribution.idlePolicy",
                    format!("{other:?} is not ratio or baseline"),
                ))
            }
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
        if !matches!(self.estimator.family.as_str(), "rapl" | "platform") {
            return Err(invalid(
                "estimator.family",
                format!("{:?} is not rapl or platform", self.estimator.family),
            ));
        }
        if !matches!(
            self.estimator.output_type.as_str(),
            "auto" | "AbsPower" | "DynPower"
        ) {
            return Err(invalid(
                "estimator.outputType",
                format!(
                    "{:?} is not auto, AbsPower or DynPower",
                    self.estimator.output_type
                ),
            ));
        }
        if self.estimator.model.trim().is_empty() {
            return Err(invalid(
                "estimator.model",
                "must be builtin or a model file path".into(),
            ));
        }
        Ok(())
    }

    /// Upstream keys this agent accepts but does not act on yet, when the file turns them on;
    /// users must hear that instead of wondering where pod names or GPU power are.
    pub fn not_implemented(&self) -> Vec<&'static str> {
        let mut keys = Vec::new();
        if self.kube.enabled {
            keys.push(
                "kube.enabled (pod names and namespaces; pod ids still come from cgroup paths)",
            );
        }
        if self.experimental.platform.redfish.enabled {
            keys.push("experimental.platform.redfish.enabled");
        }
        if self.experimental.gpu.enabled {
            keys.push("experimental.gpu.enabled");
        }
        if self.experimental.hwmon.chip_rules.is_some() {
            keys.push("experimental.hwmon.chipRules");
        }
        keys
    }

    /// The meters to try, in order: the fake meter alone when enabled for development;
    /// otherwise the preferred meters, with the estimation model as the last resort when the
    /// list does not place it.
    pub fn meter_order(&self) -> Vec<String> {
        if self.dev.fake_cpu_meter.enabled {
            return vec!["fake".into()];
        }
        let mut order = self.cpu.preferred_meters.clone();
        if !order.iter().any(|m| m == "model") {
            order.push("model".into());
        }
        order
    }
}

/// Hardware and development meters, plus the estimation meter the agent itself opens.
pub fn known_meters() -> Vec<&'static str> {
    let mut names = kepler_meters::METER_NAMES.to_vec();
    names.push("model");
    names
}
pub const KNOWN_LEVELS: &[&str] = &["node", "process", "container", "vm", "pod"];

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Loaded, ConfigError> {
        Config::from_yaml(text, Path::new("test.yaml"))
    }

    #[test]
    fn defaults_match_upstream() {
        let c = Config::default();
        assert_eq!(c.monitor.interval.0, Duration::from_secs(5));
        assert_eq!(c.monitor.staleness.0, Duration::from_millis(500));
        assert_eq!(c.monitor.max_terminated, 500);
        assert_eq!(c.cpu.preferred_meters, vec!["rapl", "hwmon"]);
        assert_eq!(c.web.listen_addresses, vec![":28282"]);
        assert_eq!(c.host.procfs, PathBuf::from("/proc"));
        assert!(c.exporter.prometheus.enabled);
        assert_eq!(c.kube.pod_informer.poll_interval.0, Duration::from_secs(15));
    }

    #[test]
    fn upstream_keys_parse() {
        let loaded = parse(
            "log:\n  level: debug\nhost:\n  sysfs: /host/sys\nmonitor:\n  interval: 1m30s\n  maxTerminated: -1\n\
             rapl:\n  zones: [package, dram]\nexporter:\n  prometheus:\n    metricsLevel: [node, pod]\n\
             dev:\n  fake-cpu-meter:\n    enabled: true\n    zones: [package]\n\
             web:\n  listenAddresses: [\"127.0.0.1:9999\"]\n",
        )
        .unwrap();
        let c = loaded.config;
        assert!(loaded.unknown_keys.is_empty(), "{:?}", loaded.unknown_keys);
        assert_eq!(c.ebpf.enabled, EbpfMode::Auto);
        assert_eq!(c.log.level, "debug");
        assert_eq!(c.host.sysfs, PathBuf::from("/host/sys"));
        assert_eq!(c.monitor.interval.0, Duration::from_secs(90));
        assert_eq!(c.monitor.max_terminated, -1);
        assert_eq!(c.rapl.zones, vec!["package", "dram"]);
        assert_eq!(c.exporter.prometheus.metrics_level, vec!["node", "pod"]);
        assert!(c.dev.fake_cpu_meter.enabled);
        assert_eq!(c.meter_order(), vec!["fake"]);
        assert_eq!(c.web.listen_addresses, vec!["127.0.0.1:9999"]);
    }

    #[test]
    fn ebpf_modes_parse_from_bools_and_words() {
        for (text, mode) in [
            ("true", EbpfMode::On),
            ("false", EbpfMode::Off),
            ("auto", EbpfMode::Auto),
            ("\"false\"", EbpfMode::Off),
        ] {
            let c = parse(&format!("ebpf:\n  enabled: {text}\n"))
                .unwrap()
                .config;
            assert_eq!(c.ebpf.enabled, mode, "{text}");
        }
        let err = parse("ebpf:\n  enabled: maybe\n").unwrap_err().to_string();
        assert!(err.contains("ebpf.enabled"), "{err}");
    }

    #[test]
    fn keys_without_an_implementation_are_reported() {
        let c = parse("kube:\n  enabled: true\nexperimental:\n  gpu:\n    enabled: true\n")
            .unwrap()
            .config;
        let keys = c.not_implemented();
        assert_eq!(keys.len(), 2, "{keys:?}");
        assert!(keys[0].starts_with("kube.enabled"));
        assert!(Config::default().not_implemented().is_empty());
    }

    #[test]
    fn unknown_keys_are_named() {
        let loaded = parse("monitor:\n  intervall: 5s\nbogus: 1\n").unwrap();
        assert_eq!(loaded.unknown_keys, vec!["monitor.intervall", "bogus"]);
    }

    #[test]
    fn invalid_values_name_their_key() {
        let err = parse("monitor:\n  interval: fast\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("monitor.interval"), "{err}");
        let err = parse("monitor:\n  maxTerminated: lots\n")
            .unwrap_err()
            .to_string();
        assert!(err.contains("monitor.maxTerminated"), "{err}");
    }

    #[test]
    fn flags_override_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("c.yaml");
        std::fs::write(&file, "monitor:\n  interval: 10s\nhost:\n  procfs: /x\n").unwrap();
        let overrides = Overrides {
            interval: Some("2s".into()),
            metrics: vec!["node".into()],
            ..Overrides::default()
        };
        let c = Config::load(Some(&file), &overrides).unwrap().config;
        assert_eq!(c.monitor.interval.0, Duration::from_secs(2));
        assert_eq!(c.host.procfs, PathBuf::from("/x"));
        assert_eq!(c.exporter.prometheus.metrics_level, vec!["node"]);
    }

    #[test]
    fn validation_rejects_bad_values_by_key() {
        let check = |o: Overrides, key: &str| {
            let err = Config::load(None, &o).unwrap_err().to_string();
            assert!(err.contains(key), "{err} should name {key}");
        };
        check(
            Overrides {
                metrics: vec!["nodes".into()],
                ..Overrides::default()
            },
            "exporter.prometheus.metricsLevel",
        );
        check(
            Overrides {
                log_level: Some("loud".into()),
                ..Overrides::default()
            },
            "log.level",
        );
        check(
            Overrides {
                interval: Some("0s".into()),
                ..Overrides::default()
            },
            "monitor.interval",
        );
        let err = Config::from_yaml("cpu:\n  preferredMeters: [rapl, magic]\n", Path::new("x"))
            .unwrap()
            .config
            .validate()
            .unwrap_err()
            .to_string();
        assert!(err.contains("cpu.preferredMeters"), "{err}");
    }

    #[test]
    fn a_missing_file_is_a_clear_error() {
        let err = Config::load(
            Some(Path::new("/nonexistent/k.yaml")),
            &Overrides::default(),
        )
        .unwrap_err()
        .to_string();
        assert!(err.contains("/nonexistent/k.yaml"), "{err}");
    }
}

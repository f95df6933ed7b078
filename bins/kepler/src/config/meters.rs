//! The meters' sections under upstream's keys: `cpu`, `rapl`, `experimental` and `dev`. The
//! meter names are the registry's ([`MeterName`]), parsed once here.

use std::path::PathBuf;

use kepler_meters::MeterName;
use serde::Deserialize;

use super::GoDuration;

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct CpuConfig {
    /// The CPU domain's fallback chain, before the estimation model.
    pub preferred_meters: Vec<MeterName>,
}

impl Default for CpuConfig {
    fn default() -> Self {
        CpuConfig {
            preferred_meters: ["rapl", "hwmon"]
                .iter()
                .filter_map(|name| name.parse().ok())
                .collect(),
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
    /// Upstream: use hwmon and skip RAPL detection; here hwmon goes first in the cpu chain.
    pub force_enabled: bool,
    /// Upstream v0.11.4's switch for hwmon. Accepted without effect: hwmon is always in this
    /// agent's cpu chain after RAPL (`cpu.preferredMeters` decides), so a host without RAPL
    /// still gets hwmon power whatever an old file says.
    pub enabled: Option<bool>,
    pub zones: Vec<String>,
    pub chip_rules: Option<serde_yaml::Value>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct GpuConfig {
    pub enabled: bool,
    pub idle_power: Option<f64>,
    /// dcgm-exporter's metrics URL (MIG attribution upstream); `""` means auto-discover.
    #[serde(deserialize_with = "super::compat::empty_as_none")]
    pub dcgm_endpoint: Option<String>,
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

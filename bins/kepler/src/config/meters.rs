//! The meters' sections under upstream's keys: `cpu`, `rapl`, `experimental` and `dev`. The
//! meter names are the registry's ([`MeterName`]), parsed once here.

use std::path::PathBuf;

use kepler_meters::{IpmiInterface, IpmiSettings, MeterName, RedfishSettings};
use serde::Deserialize;

use super::gpu::{FakeGpuConfig, GpuConfig};
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

/// `experimental.platform.redfish` (upstream's keys); see `kepler_meters::redfish`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct RedfishConfig {
    pub enabled: bool,
    /// The node's key in the BMC file; upstream's proposal spelt it `nodeID`.
    #[serde(alias = "nodeID")]
    pub node_name: Option<String>,
    pub config_file: Option<PathBuf>,
    /// Limit of each HTTP request (default 5s).
    pub http_timeout: Option<GoDuration>,
    /// How old a cached BMC answer may be when a tick takes it (default 30s).
    pub staleness: Option<GoDuration>,
}

impl RedfishConfig {
    pub fn settings(&self) -> RedfishSettings {
        let default = RedfishSettings::default();
        RedfishSettings {
            enabled: self.enabled,
            node_name: self.node_name.clone().filter(|n| !n.is_empty()),
            config_file: self.config_file.clone(),
            http_timeout: self.http_timeout.map_or(default.http_timeout, |d| d.0),
            staleness: self.staleness.map_or(default.staleness, |d| d.0),
        }
    }
}

/// `ipmi` (kepler-rs): platform power from IPMI DCMI through ipmitool; see
/// `kepler_meters::ipmi`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct IpmiConfig {
    pub enabled: bool,
    /// `open` (in-band, /dev/ipmi0) or `lanplus` (RMCP+ to `address`), any case.
    pub interface: IpmiInterface,
    pub address: Option<String>,
    pub username: Option<String>,
    /// A file holding the BMC password (never the password itself in this file).
    pub password_file: Option<PathBuf>,
    /// The ipmitool program (default: `ipmitool` on PATH).
    pub ipmitool: Option<PathBuf>,
    /// Limit of one ipmitool run (default 5s).
    pub timeout: Option<GoDuration>,
    /// How old a cached answer may be when a tick takes it (default 30s).
    pub staleness: Option<GoDuration>,
}

impl IpmiConfig {
    pub fn settings(&self) -> IpmiSettings {
        let default = IpmiSettings::default();
        IpmiSettings {
            enabled: self.enabled,
            interface: self.interface,
            address: self.address.clone(),
            username: self.username.clone(),
            password_file: self.password_file.clone(),
            ipmitool: self.ipmitool.clone().unwrap_or(default.ipmitool),
            timeout: self.timeout.map_or(default.timeout, |d| d.0),
            staleness: self.staleness.map_or(default.staleness, |d| d.0),
        }
    }
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
    /// Voltage/current pairing of chips without power sensors; `null` is upstream's empty list.
    #[serde(deserialize_with = "null_as_empty")]
    pub chip_rules: Vec<kepler_meters::ChipRule>,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct DevConfig {
    #[serde(rename = "fake-cpu-meter")]
    pub fake_cpu_meter: FakeMeterConfig,
    #[serde(rename = "fake-gpu")]
    pub fake_gpu: FakeGpuConfig,
}

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FakeMeterConfig {
    pub enabled: bool,
    pub zones: Vec<String>,
}

/// Upstream's files may write `chipRules:` with no value; that means no rules.
fn null_as_empty<'de, D, T>(d: D) -> Result<Vec<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Option::<Vec<T>>::deserialize(d)?.unwrap_or_default())
}

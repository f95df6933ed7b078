//! The `ebpf` section (kepler-rs): the eBPF usage source.

use serde::{Deserialize, Deserializer};

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

/// `ebpf.exits`: how the task iterator learns of ended processes (see `kepler_ebpf::Exits`).
#[derive(Copy, Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EbpfExits {
    /// Exact while that costs the node little, counted through the cgroups beyond.
    #[default]
    Auto,
    /// Every exit handed over at its final switch, each process reported.
    Exact,
    /// Ended processes counted through their cgroups' usage counters.
    Cgroups,
}

impl EbpfExits {
    pub fn as_str(self) -> &'static str {
        match self {
            EbpfExits::Auto => "auto",
            EbpfExits::Exact => "exact",
            EbpfExits::Cgroups => "cgroups",
        }
    }
}

impl From<EbpfExits> for kepler_ebpf::Exits {
    fn from(e: EbpfExits) -> Self {
        match e {
            EbpfExits::Auto => kepler_ebpf::Exits::Auto,
            EbpfExits::Exact => kepler_ebpf::Exits::Exact,
            EbpfExits::Cgroups => kepler_ebpf::Exits::Cgroups,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct EbpfConfig {
    pub enabled: EbpfMode,
    /// Export the model features (per node and per process) as metrics; off by default
    /// because per-process series multiply cardinality.
    pub export_features: bool,
    /// Capacity of the per-process map; processes beyond it are counted as dropped.
    pub max_processes: u32,
    pub exits: EbpfExits,
}

impl Default for EbpfConfig {
    fn default() -> Self {
        EbpfConfig {
            enabled: EbpfMode::Auto,
            export_features: false,
            max_processes: 16_384,
            exits: EbpfExits::Auto,
        }
    }
}

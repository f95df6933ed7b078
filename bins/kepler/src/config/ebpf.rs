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

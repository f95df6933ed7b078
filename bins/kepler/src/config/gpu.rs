//! `experimental.gpu` (upstream's keys) and the development GPU `dev.fake-gpu`.

use kepler_core::Watts;
use kepler_meters::gpu::fake::{FakeDevice, FakeGpuSettings};
use kepler_meters::gpu::GpuSettings;
use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct GpuConfig {
    /// Open the GPU meters (NVML, amdgpu).
    pub enabled: bool,
    /// Idle watts of each device; unset = the lowest power seen with no compute process.
    pub idle_power: Option<f64>,
    /// A dcgm-exporter `/metrics` URL, for MIG instances.
    #[serde(deserialize_with = "super::compat::empty_as_none")]
    pub dcgm_endpoint: Option<String>,
}

/// Scripted GPUs for development and tests; `devices` as the fake backend takes them
/// (`watts`, `energy`, `processes: [{pid, weight}]`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct FakeGpuConfig {
    pub enabled: bool,
    pub devices: Vec<FakeDevice>,
}

impl GpuConfig {
    /// An idle power that is a number of watts, or why not (for the `experimental.gpu.idlePower`
    /// message).
    pub fn check(&self) -> Result<(), String> {
        match self.idle_power {
            Some(w) if !(w.is_finite() && w >= 0.0) => {
                Err("must be a non-negative number of watts".into())
            }
            _ => Ok(()),
        }
    }

    /// What the GPU meters take, with the fake devices when `dev.fake-gpu` is enabled.
    pub fn settings(&self, fake: &FakeGpuConfig) -> GpuSettings {
        GpuSettings {
            enabled: self.enabled,
            idle_power: self.idle_power.map(Watts),
            dcgm_endpoint: self.dcgm_endpoint.clone(),
            fake: fake.enabled.then(|| FakeGpuSettings {
                devices: fake.devices.clone(),
            }),
        }
    }
}

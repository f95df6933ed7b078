//! Scripted GPUs for tests and development (`dev.fake-gpu`): fixed power, optionally an energy
//! counter, and fixed processes with fixed weights. Nothing here touches hardware.

use std::sync::Arc;

use kepler_core::{DeviceInfo, ReadError, Watts};

use super::{DeviceSample, GpuBackend, ProcessUse};
use crate::fake::{Clock, MonotonicClock};

/// The registry name of the fake GPU meter.
pub const NAME: &str = "fake-gpu";

/// One scripted device.
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FakeDevice {
    /// Constant power.
    pub watts: f64,
    /// Report a cumulative energy counter (watts × time since start) instead of power.
    #[serde(default)]
    pub energy: bool,
    /// Compute processes: (pid, weight); a `None` weight is "no utilisation sample".
    #[serde(default, deserialize_with = "processes")]
    pub processes: Vec<(u32, Option<u64>)>,
}

#[derive(serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct ProcessEntry {
    pid: u32,
    #[serde(default)]
    weight: Option<u64>,
}

fn processes<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<(u32, Option<u64>)>, D::Error> {
    let entries: Vec<ProcessEntry> = serde::Deserialize::deserialize(d)?;
    Ok(entries.into_iter().map(|e| (e.pid, e.weight)).collect())
}

/// `dev.fake-gpu` beyond `enabled`: the devices to simulate.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeGpuSettings {
    pub devices: Vec<FakeDevice>,
}

/// The fake backend.
pub struct FakeGpu {
    infos: Vec<Arc<DeviceInfo>>,
    devices: Vec<FakeDevice>,
    clock: Arc<dyn Clock>,
}

impl FakeGpu {
    pub fn new(devices: Vec<FakeDevice>) -> Self {
        FakeGpu::with_clock(devices, Arc::new(MonotonicClock::default()))
    }

    /// With the clock its energy counters follow.
    pub fn with_clock(devices: Vec<FakeDevice>, clock: Arc<dyn Clock>) -> Self {
        let infos = (0..devices.len())
            .map(|i| {
                Arc::new(DeviceInfo {
                    index: u32::try_from(i).unwrap_or(u32::MAX),
                    uuid: format!("GPU-fake-{i}").into(),
                    name: "Fake GPU".into(),
                    vendor: "fake".into(),
                })
            })
            .collect();
        FakeGpu {
            infos,
            devices,
            clock,
        }
    }
}

impl GpuBackend for FakeGpu {
    fn devices(&self) -> &[Arc<DeviceInfo>] {
        &self.infos
    }

    fn sample(&mut self, i: usize) -> Result<DeviceSample, ReadError> {
        let d = self
            .devices
            .get(i)
            .ok_or_else(|| ReadError::Other(format!("no fake GPU {i}")))?;
        let watts = Watts(d.watts.max(0.0));
        Ok(DeviceSample {
            power: Some(watts),
            energy: d.energy.then(|| watts.during(self.clock.now())),
            processes: d
                .processes
                .iter()
                .map(|&(pid, weight)| ProcessUse { pid, weight })
                .collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fake::ManualClock;
    use kepler_core::MicroJoules;

    #[test]
    fn energy_follows_the_clock() {
        let clock = Arc::new(ManualClock::default());
        let mut g = FakeGpu::with_clock(
            vec![FakeDevice {
                watts: 50.0,
                energy: true,
                processes: vec![],
            }],
            clock.clone(),
        );
        clock.advance(std::time::Duration::from_secs(2));
        assert_eq!(g.sample(0).unwrap().energy, Some(MicroJoules(100_000_000)));
        assert!(g.sample(1).is_err());
    }
}

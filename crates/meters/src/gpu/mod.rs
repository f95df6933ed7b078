//! GPU meters: one zone per device (`gpu<index>`, path = the device's UUID), each reading with
//! the device's idle power and per-process shares, so the core attributes a GPU by what its
//! processes did on it rather than by CPU time.
//!
//! Vendors differ only in how they answer three questions (devices, power or energy, which
//! processes used the device how much); [`GpuBackend`] asks them and [`GpuMeter`] does the
//! rest once for all: the idle baseline, the shares rule, the readings.
//!
//! - [`nvml`]: NVIDIA through `libnvidia-ml.so.1`, loaded at run time;
//! - [`amdgpu`]: AMD through the amdgpu hwmon files and `/proc/<pid>/fdinfo`;
//! - [`dcgm`]: dcgm-exporter's text, for MIG instances, polled by [`dcgm_poll`] (a
//!   [`crate::polled::PolledMeter`], not a [`GpuBackend`]: the exporter is remote and slow);
//! - [`fake`]: scripted devices for tests and development (`dev.fake-gpu`).

pub mod amdgpu;
pub mod dcgm;
pub mod dcgm_poll;
pub mod fake;
pub mod nvml;

use std::sync::Arc;

use kepler_core::{
    DeviceInfo, MeterInput, MicroJoules, PowerDomain, PowerMeter, ProcessShare, ProcessShares,
    ReadError, Watts, ZoneReading,
};
use tracing::debug;

/// `experimental.gpu` (and `dev.fake-gpu`) as the GPU meters need it.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct GpuSettings {
    /// `experimental.gpu.enabled`: GPU meters open only when set.
    pub enabled: bool,
    /// `experimental.gpu.idlePower`: idle watts of each device; unset = measured.
    pub idle_power: Option<Watts>,
    /// `experimental.gpu.dcgmEndpoint`: a dcgm-exporter `/metrics` URL (MIG).
    pub dcgm_endpoint: Option<String>,
    /// `dev.fake-gpu`: scripted devices instead of hardware (tests, development).
    pub fake: Option<fake::FakeGpuSettings>,
}

/// One process's use of a device over the interval since the previous sample.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProcessUse {
    pub pid: u32,
    /// How much it used the device: summed SM-utilisation samples (NVML), engine nanoseconds
    /// (amdgpu). `None` when the device does not say; only ratios between processes matter.
    pub weight: Option<u64>,
}

/// One device's state now.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeviceSample {
    /// Power now (or averaged by the device), when the device reports it.
    pub power: Option<Watts>,
    /// The device's cumulative energy counter, when it has one (preferred over power × time:
    /// it misses nothing between samples).
    pub energy: Option<MicroJoules>,
    /// The processes that used the device since the previous sample (compute processes).
    pub processes: Vec<ProcessUse>,
}

/// What a vendor's library or files answer. Implementations hold no policy: idle and shares
/// are decided by [`GpuMeter`].
pub trait GpuBackend: Send {
    /// The devices found when the backend opened, in index order.
    fn devices(&self) -> &[Arc<DeviceInfo>];
    /// Samples device `i` (an index into [`GpuBackend::devices`]).
    fn sample(&mut self, i: usize) -> Result<DeviceSample, ReadError>;
}

/// A GPU meter over any backend; see the module docs.
pub struct GpuMeter {
    name: &'static str,
    backend: Box<dyn GpuBackend>,
    configured_idle: Option<Watts>,
    /// Per device: lowest power seen while no compute process ran.
    learned_idle: Vec<Option<Watts>>,
    zones: Vec<(Arc<str>, Arc<str>)>,
}

impl GpuMeter {
    pub fn new(name: &'static str, backend: Box<dyn GpuBackend>, idle: Option<Watts>) -> Self {
        let zones: Vec<(Arc<str>, Arc<str>)> = backend
            .devices()
            .iter()
            .map(|d| (Arc::from(zone_name(d.index)), d.uuid.clone()))
            .collect();
        GpuMeter {
            name,
            learned_idle: vec![None; zones.len()],
            backend,
            configured_idle: idle,
            zones,
        }
    }

    /// The idle power of device `i` now: configured, else the lowest power seen with no
    /// compute process. Until the device has been seen idle it is 0 W, so all its energy
    /// counts as active (and goes to its processes) rather than being guessed from CPU usage,
    /// which says nothing about a GPU.
    fn idle(&mut self, i: usize, sample: &DeviceSample) -> Watts {
        if let Some(w) = self.configured_idle {
            return w;
        }
        let Some(slot) = self.learned_idle.get_mut(i) else {
            return Watts(0.0);
        };
        if let (true, Some(p)) = (sample.processes.is_empty(), sample.power) {
            if slot.is_none_or(|w| p.0 < w.0) {
                debug!(device = i, watts = p.0, "GPU idle power learnt");
                *slot = Some(p);
            }
        }
        slot.unwrap_or(Watts(0.0))
    }
}

/// The zone of device `index`: each device is its own zone, since shares cannot be summed.
pub fn zone_name(index: u32) -> String {
    format!("gpu{index}")
}

/// The shares of one device's processes: a lone process takes the whole device; several split
/// it by their weights, or equally when the device gave none. No process means no shares at
/// all (the active energy stays unattributed rather than going to CPU users).
pub fn shares_of(processes: &[ProcessUse]) -> ProcessShares {
    let equal = processes.len() == 1 || processes.iter().all(|p| p.weight.unwrap_or(0) == 0);
    processes
        .iter()
        .map(|p| ProcessShare {
            pid: p.pid,
            weight: if equal { 1 } else { p.weight.unwrap_or(0) },
        })
        .collect::<Vec<_>>()
        .into()
}

impl PowerMeter for GpuMeter {
    fn name(&self) -> &str {
        self.name
    }

    fn domain(&self) -> PowerDomain {
        PowerDomain::Gpu
    }

    fn provenance(&self) -> kepler_core::Provenance {
        // Scripted devices are neither measured nor estimated; users must be able to tell.
        if self.name == fake::NAME {
            kepler_core::Provenance::Synthetic
        } else {
            kepler_core::Provenance::Measured
        }
    }

    fn detail(&self) -> Option<String> {
        let devices: Vec<String> = self
            .backend
            .devices()
            .iter()
            .map(|d| {
                format!(
                    "{} {} ({}, {})",
                    zone_name(d.index),
                    d.name,
                    d.vendor,
                    d.uuid
                )
            })
            .collect();
        Some(format!("devices: {}", devices.join("; ")))
    }

    fn zones(&self) -> Vec<String> {
        self.zones.iter().map(|(z, _)| z.to_string()).collect()
    }

    fn read(&mut self, _: &MeterInput<'_>, out: &mut Vec<ZoneReading>) -> Result<(), ReadError> {
        for i in 0..self.zones.len() {
            let sample = self.backend.sample(i)?;
            let idle = self.idle(i, &sample);
            let (zone, path) = self.zones[i].clone();
            let mut reading = match (sample.energy, sample.power) {
                (Some(counter), _) => ZoneReading::energy(zone, path, counter, None),
                (None, Some(w)) => ZoneReading::power(zone, path, w),
                (None, None) => {
                    return Err(ReadError::Other(format!(
                        "GPU {} reports neither power nor energy",
                        zone
                    )))
                }
            };
            reading.shares = Some(shares_of(&sample.processes));
            reading.idle = Some(idle);
            reading.device = self.backend.devices().get(i).cloned();
            out.push(reading);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::fake::{FakeDevice, FakeGpu};
    use super::*;

    fn meter(idle: Option<Watts>, procs: Vec<Vec<(u32, Option<u64>)>>) -> GpuMeter {
        let devices = procs
            .into_iter()
            .enumerate()
            .map(|(i, p)| FakeDevice {
                watts: 100.0 + i as f64,
                energy: i == 0,
                processes: p,
            })
            .collect();
        GpuMeter::new(fake::NAME, Box::new(FakeGpu::new(devices)), idle)
    }

    fn read(m: &mut GpuMeter) -> Vec<ZoneReading> {
        let mut out = Vec::new();
        m.read(&MeterInput::default(), &mut out).unwrap();
        out
    }

    #[test]
    fn one_zone_per_device_with_uuid_path_and_device_facts() {
        let mut m = meter(None, vec![vec![], vec![(7, None)]]);
        assert_eq!(m.zones(), vec!["gpu0", "gpu1"]);
        let r = read(&mut m);
        assert_eq!(&*r[1].path, "GPU-fake-1");
        assert_eq!(r[1].device.as_ref().unwrap().index, 1);
        assert!(matches!(
            r[0].sample,
            kepler_core::ZoneSample::Energy { .. }
        ));
        assert!(matches!(r[1].sample, kepler_core::ZoneSample::Power(_)));
    }

    #[test]
    fn idle_is_learnt_while_no_process_runs_and_configured_wins() {
        let mut m = meter(None, vec![vec![], vec![(7, Some(3))]]);
        let r = read(&mut m);
        assert_eq!(r[0].idle, Some(Watts(100.0)));
        // Device 1 has never been seen idle: all of it counts as active.
        assert_eq!(r[1].idle, Some(Watts(0.0)));
        let mut m = meter(Some(Watts(30.0)), vec![vec![], vec![(7, None)]]);
        let r = read(&mut m);
        assert_eq!(r[0].idle, Some(Watts(30.0)));
        assert_eq!(r[1].idle, Some(Watts(30.0)));
    }

    #[test]
    fn lone_process_takes_all_others_split_by_weight_or_equally() {
        let one = shares_of(&[ProcessUse {
            pid: 5,
            weight: Some(0),
        }]);
        assert_eq!(&*one, &[ProcessShare { pid: 5, weight: 1 }]);
        let two = shares_of(&[
            ProcessUse {
                pid: 5,
                weight: Some(30),
            },
            ProcessUse {
                pid: 6,
                weight: Some(10),
            },
        ]);
        assert_eq!(two[0].weight, 30);
        assert_eq!(two[1].weight, 10);
        let unknown = shares_of(&[
            ProcessUse {
                pid: 5,
                weight: None,
            },
            ProcessUse {
                pid: 6,
                weight: None,
            },
        ]);
        assert!(unknown.iter().all(|s| s.weight == 1));
        assert!(shares_of(&[]).is_empty());
    }
}

//! NVIDIA GPUs through NVML. `libnvidia-ml.so.1` is loaded when the meter opens (nvml-wrapper
//! uses libloading), so the agent has no link-time dependency on the driver and hosts without
//! it start normally; opening then says why NVML is unavailable.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use kepler_core::{DeviceInfo, MicroJoules, ReadError, Unavailable, Watts};
use nvml_wrapper::error::NvmlError;
use nvml_wrapper::Nvml;
use tracing::debug;

use super::{DeviceSample, GpuBackend, ProcessUse};

/// The registry name of the NVML meter.
pub const NAME: &str = "nvml";

/// The versioned soname: the unversioned `libnvidia-ml.so` only exists where the CUDA
/// development files are installed, the driver always ships this one.
const LIBRARY: &str = "libnvidia-ml.so.1";

struct Device {
    info: Arc<DeviceInfo>,
    has_energy: bool,
    /// The newest utilisation sample's timestamp (µs) seen, so each read takes only the
    /// samples of the interval since the previous one.
    last_sample: Option<u64>,
}

/// The NVML backend.
pub struct NvmlGpu {
    nvml: Nvml,
    infos: Vec<Arc<DeviceInfo>>,
    devices: Vec<Device>,
}

impl NvmlGpu {
    pub fn open() -> Result<NvmlGpu, Unavailable> {
        let nvml = Nvml::builder()
            .lib_path(OsStr::new(LIBRARY))
            .init()
            .map_err(|e| Unavailable::new(format!("NVML did not initialise ({LIBRARY}): {e}")))?;
        let count = nvml
            .device_count()
            .map_err(|e| Unavailable::new(format!("NVML device count: {e}")))?;
        if count == 0 {
            return Err(Unavailable::new("NVML found no NVIDIA GPU"));
        }
        let mut devices = Vec::new();
        for index in 0..count {
            let device = nvml
                .device_by_index(index)
                .map_err(|e| Unavailable::new(format!("NVML device {index}: {e}")))?;
            let uuid = device
                .uuid()
                .map_err(|e| Unavailable::new(format!("NVML device {index} UUID: {e}")))?;
            let name = device.name().unwrap_or_else(|_| "unknown".to_string());
            // Energy counters exist from Volta on; older devices give power only.
            let has_energy = device.total_energy_consumption().is_ok();
            if device.power_usage().is_err() && !has_energy {
                return Err(Unavailable::new(format!(
                    "NVML device {index} ({name}) reports neither power nor energy"
                )));
            }
            devices.push(Device {
                info: Arc::new(DeviceInfo {
                    index,
                    uuid: uuid.into(),
                    name: name.into(),
                    vendor: "nvidia".into(),
                }),
                has_energy,
                last_sample: None,
            });
        }
        Ok(NvmlGpu {
            infos: devices.iter().map(|d| d.info.clone()).collect(),
            nvml,
            devices,
        })
    }
}

/// Microseconds since the Unix epoch, the clock of NVML's utilisation sample timestamps.
fn wall_clock_us() -> Option<u64> {
    let since = SystemTime::now().duration_since(UNIX_EPOCH).ok()?;
    u64::try_from(since.as_micros()).ok()
}

fn read_error(what: &str, index: u32, e: NvmlError) -> ReadError {
    ReadError::Other(format!("NVML device {index} {what}: {e}"))
}

impl GpuBackend for NvmlGpu {
    fn devices(&self) -> &[Arc<DeviceInfo>] {
        &self.infos
    }

    fn sample(&mut self, i: usize) -> Result<DeviceSample, ReadError> {
        let state = self
            .devices
            .get_mut(i)
            .ok_or_else(|| ReadError::Other(format!("no NVML device {i}")))?;
        let index = state.info.index;
        let device = self
            .nvml
            .device_by_index(index)
            .map_err(|e| read_error("handle", index, e))?;
        let power = device
            .power_usage()
            .ok()
            .map(|mw| Watts(f64::from(mw) / 1000.0));
        let energy = if state.has_energy {
            let mj = device
                .total_energy_consumption()
                .map_err(|e| read_error("energy", index, e))?;
            Some(MicroJoules(mj.saturating_mul(1000)))
        } else {
            None
        };
        let running = device
            .running_compute_processes()
            .map_err(|e| read_error("compute processes", index, e))?;
        // Summed SM utilisation per pid over the samples since the previous read. Devices
        // without per-process samples (NotSupported, or NotFound when none were buffered)
        // leave weights unknown: the meter then splits equally.
        let samples = if running.len() < 2 {
            // A lone process takes the whole device whatever its samples say, and the query
            // costs 2-3 ms of CPU per call (H200, driver 580; docs/benchmarks.md "GPU
            // meter"), so it is skipped. The window then restarts now, so that a later query
            // with several processes counts only what follows: sample timestamps are the
            // wall clock in µs (seen on that driver: within 0.2 s of `time.time()`).
            state.last_sample = wall_clock_us().or(state.last_sample);
            Vec::new()
        } else {
            match device.process_utilization_stats(state.last_sample) {
                Ok(s) => s,
                Err(e) => {
                    debug!(device = index, error = %e, "no per-process utilisation samples");
                    Vec::new()
                }
            }
        };
        if let Some(newest) = samples.iter().map(|s| s.timestamp).max() {
            state.last_sample = Some(newest);
        }
        let processes = running
            .iter()
            .map(|p| {
                let sm: u64 = samples
                    .iter()
                    .filter(|s| s.pid == p.pid)
                    .map(|s| u64::from(s.sm_util))
                    .sum();
                ProcessUse {
                    pid: p.pid,
                    weight: (!samples.is_empty()).then_some(sm),
                }
            })
            .collect();
        Ok(DeviceSample {
            power,
            energy,
            processes,
        })
    }
}

//! RAPL read straight from the model-specific registers, through the kernel's `msr` module
//! (`<msr.root>/<cpu>/msr`, pread at the register's offset, 8 bytes little-endian). For hosts
//! whose CPU has RAPL but whose kernel shows no powercap zones (AWS kernels without
//! `intel_rapl_msr`, for one). Opt-in (`msr.enabled`): the registers need root (or
//! `CAP_SYS_RAWIO`), and fine-grained energy readings are the side channel of
//! CVE-2020-8694/8695.
//!
//! Registers (DESIGN §6), vendor and family from cpuinfo: Intel reads package, core, uncore and
//! DRAM once per package (per die on multi-die parts) on the package's first online CPU, and
//! psys once; AMD (family 17h and later, and Hygon) reads the package once per package and the
//! core counter once per physical core (on its last SMT sibling), each its own reading of zone
//! `core`, summed over cores and packages by core (`zone_energies`) like sockets are, so each
//! core counter wraps and is unwrapped on its own. Zones are named like powercap's; paths are
//! `msr:<cpu>:<zone>`. A register that fails to read (EIO: the CPU lacks it) or reads 0 at
//! open is left out.
//!
//! Counters are 32 bits wide and wrap. Readings carry the wrap point in µJ (2^32 counts ×
//! the unit), so core's wrap logic counts one wrap per interval. How fast they wrap: Intel's
//! usual unit is 2^-14 J (61 µJ), so 2^32 counts are 262 kJ: 14.6 min at 300 W, the package of
//! a busy 2-socket server; AMD's is 2^-16 J (15.3 µJ): 65.5 kJ, 2.7 min for a 400 W EPYC
//! package, as for the DRAM of Intel servers. Decision: the meter does not sample on its own;
//! it refuses to open when `monitor.interval` is longer than the time its fastest counter
//! takes to wrap at 1 kW ([`registers::PLAUSIBLE_MAX_WATTS`], twice any shipped TDP), so each
//! tick sees at most one wrap even when one tick is late. With the default 5 s interval that
//! leaves a margin of 13× (AMD) to 52× (Intel).

mod devices;
mod hint;
mod registers;
mod topology;

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{MeterInput, PowerMeter, ReadError, Unavailable, ZoneReading};
use serde::Deserialize;
use tracing::debug;

use devices::{low_32, probe_counter, read_register, register_path, Opener};
pub use hint::rapl_hint;
pub(crate) use registers::EnergyUnit;
use registers::RegisterSet;
pub use registers::{
    AMD_CORE_ENERGY, AMD_PKG_ENERGY, AMD_POWER_UNIT, INTEL_DRAM_ENERGY, INTEL_PKG_ENERGY,
    INTEL_POWER_UNIT, INTEL_PP0_ENERGY, INTEL_PP1_ENERGY, INTEL_PSYS_ENERGY, PLAUSIBLE_MAX_WATTS,
};
use topology::read_topology;

use crate::MeterSettings;

/// The `msr` section of the configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct MsrConfig {
    /// Off by default: see the module docs.
    pub enabled: bool,
    /// Where the `msr` module's devices are (`/dev/cpu`).
    pub root: PathBuf,
}

impl Default for MsrConfig {
    fn default() -> Self {
        MsrConfig {
            enabled: false,
            root: PathBuf::from("/dev/cpu"),
        }
    }
}

/// The MSR RAPL meter.
#[derive(Debug)]
pub struct MsrMeter {
    /// One per CPU whose registers are read.
    files: Vec<MsrFile>,
    counters: Vec<Counter>,
}

#[derive(Debug)]
struct MsrFile {
    path: PathBuf,
    file: File,
}

#[derive(Debug)]
struct Counter {
    zone: Arc<str>,
    path: Arc<str>,
    /// Index into `files`.
    file: usize,
    offset: u64,
    unit: EnergyUnit,
}

impl MsrMeter {
    /// Opens the meter as `settings.msr` asks, or says why it cannot be used here.
    pub fn open(settings: &MeterSettings) -> Result<Self, Unavailable> {
        let config = &settings.msr;
        if !config.enabled {
            return Err(Unavailable::new(
                "disabled (msr.enabled: false); reading RAPL from /dev/cpu/*/msr is opt-in because of CVE-2020-8694/8695",
            ));
        }
        let cpu = kepler_sources::read_cpu_model(&settings.procfs)
            .map_err(|e| Unavailable::new(format!("cannot tell the CPU model: {e}")))?;
        let set = RegisterSet::of(&cpu).map_err(Unavailable::new)?;
        let places = read_topology(&settings.sysfs)?;
        let mut opener = Opener::new(&config.root);
        let units = opener.package_units(&places, &set, &cpu)?;

        let wanted: Vec<String> = settings
            .rapl_zones
            .iter()
            .map(|z| z.trim().to_lowercase())
            .filter(|z| !z.is_empty())
            .collect();
        let mut counters = Vec::new();
        for register in set.energy {
            if !wanted.is_empty() && !wanted.iter().any(|w| w == register.zone) {
                debug!(zone = register.zone, "MSR zone left out by rapl.zones");
                continue;
            }
            for (file, unit) in opener.sites(register, &set, &units, &places)? {
                counters.extend(probe_counter(opener.files(), file, register, unit));
            }
        }
        let root = config.root.display();
        if counters.is_empty() {
            return Err(Unavailable::new(if wanted.is_empty() {
                format!("no RAPL energy register answers under {root}")
            } else {
                format!("no RAPL energy register of the zones in rapl.zones {wanted:?} answers under {root}")
            }));
        }
        check_interval(&counters, settings.interval)?;
        Ok(MsrMeter::keeping_used_files(opener.into_files(), counters))
    }

    /// Closes the devices no counter reads (CPUs whose registers all turned out absent).
    fn keeping_used_files(files: Vec<MsrFile>, mut counters: Vec<Counter>) -> MsrMeter {
        let mut kept = Vec::new();
        let mut new_index: HashMap<usize, usize> = HashMap::new();
        for (i, file) in files.into_iter().enumerate() {
            if counters.iter().any(|c| c.file == i) {
                new_index.insert(i, kept.len());
                kept.push(file);
            }
        }
        for c in &mut counters {
            c.file = new_index.get(&c.file).copied().unwrap_or(c.file);
        }
        MsrMeter {
            files: kept,
            counters,
        }
    }
}

impl PowerMeter for MsrMeter {
    fn name(&self) -> &str {
        "msr"
    }

    fn zones(&self) -> Vec<String> {
        self.counters.iter().map(|c| c.zone.to_string()).collect()
    }

    fn read(
        &mut self,
        _input: &MeterInput<'_>,
        out: &mut Vec<ZoneReading>,
    ) -> Result<(), ReadError> {
        for c in &self.counters {
            let f = self
                .files
                .get(c.file)
                .ok_or_else(|| ReadError::Other(format!("{}: no open MSR device", c.path)))?;
            let value = read_register(&f.file, c.offset).map_err(|source| ReadError::Io {
                path: register_path(&f.path, c.offset),
                source,
            })?;
            out.push(ZoneReading::energy(
                c.zone.clone(),
                c.path.clone(),
                c.unit.micro_joules(low_32(value)),
                Some(c.unit.wrap_max()),
            ));
        }
        Ok(())
    }
}

/// Refuses an interval in which the fastest counter could wrap more than once.
fn check_interval(counters: &[Counter], interval: Duration) -> Result<(), Unavailable> {
    let Some(fastest) = counters
        .iter()
        .min_by_key(|c| c.unit.wrap_time_at_max_power())
    else {
        return Ok(());
    };
    let wrap = fastest.unit.wrap_time_at_max_power();
    if interval > wrap {
        return Err(Unavailable::new(format!(
            "monitor.interval {interval:?} is longer than the {}s in which the 32-bit counter of {} ({:.2} µJ per count) can wrap at {PLAUSIBLE_MAX_WATTS} W; use an interval of at most {}s with the msr meter",
            wrap.as_secs(),
            fastest.path,
            fastest.unit.micro_joules_per_count(),
            wrap.as_secs()
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_defaults_are_off_and_dev_cpu() {
        let c = MsrConfig::default();
        assert!(!c.enabled);
        assert_eq!(c.root, PathBuf::from("/dev/cpu"));
    }

    #[test]
    fn long_intervals_are_refused_for_the_fastest_counter() {
        let unit = |v| EnergyUnit::from_unit_register(v).unwrap();
        let counter = |zone: &str, u| Counter {
            zone: zone.into(),
            path: format!("msr:0:{zone}").into(),
            file: 0,
            offset: 0,
            unit: u,
        };
        let counters = [
            counter("package", unit(0xA0E03)),
            counter("dram", unit(0xA1003)),
        ];
        assert!(check_interval(&counters, Duration::from_secs(5)).is_ok());
        assert!(check_interval(&counters, Duration::from_secs(65)).is_ok());
        let err = check_interval(&counters, Duration::from_secs(120)).unwrap_err();
        assert!(
            err.reason
                .starts_with("monitor.interval 120s is longer than the 65s")
                && err.reason.contains("msr:0:dram")
                && err.reason.contains("at most 65s"),
            "{err}"
        );
    }
}

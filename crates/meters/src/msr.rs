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
//! `core`, summed over cores and packages by core (`zone_energies`) like sockets are: each
//! core counter then wraps on its own and is unwrapped on its own. Zones are named like powercap's; paths are
//! `msr:<cpu>:<zone>`. A register that fails to read (EIO: the CPU lacks it) or reads 0 at open
//! is left out.
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

mod registers;
mod topology;

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{MeterInput, PowerMeter, ReadError, Unavailable, ZoneReading, ZoneSample};
use kepler_sources::CpuModel;
use serde::Deserialize;
use tracing::{debug, warn};

use registers::{EnergyUnit, Register, RegisterSet, Scope, Vendor};
pub use registers::{
    AMD_CORE_ENERGY, AMD_PKG_ENERGY, AMD_POWER_UNIT, INTEL_DRAM_ENERGY, INTEL_PKG_ENERGY,
    INTEL_POWER_UNIT, INTEL_PP0_ENERGY, INTEL_PP1_ENERGY, INTEL_PSYS_ENERGY, PLAUSIBLE_MAX_WATTS,
};
use topology::{read_topology, CpuPlace};

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

/// CPUs that share one counter, by (package, die, core) with the parts the scope ignores 0.
type Groups = BTreeMap<(i64, i64, i64), Vec<u32>>;

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
        let mut opener = Opener {
            root: &config.root,
            files: Vec::new(),
            by_cpu: HashMap::new(),
            missing: Vec::new(),
        };
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
                counters.extend(probe_counter(&opener.files, file, register, unit));
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
        Ok(MsrMeter::keeping_used_files(opener.files, counters))
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
            out.push(ZoneReading {
                zone: c.zone.clone(),
                path: c.path.clone(),
                sample: ZoneSample::Energy {
                    counter: c.unit.micro_joules(low_32(value)),
                    max: Some(c.unit.wrap_max()),
                },
                shares: None,
            });
        }
        Ok(())
    }
}

/// Opens MSR devices once each; the handles stay open so that each tick is one pread per
/// counter (the driver checks permissions at open).
struct Opener<'a> {
    root: &'a Path,
    files: Vec<MsrFile>,
    by_cpu: HashMap<u32, usize>,
    /// Why CPUs had no device, for the message when no package has one.
    missing: Vec<String>,
}

/// Per package (per die on Intel): the device that reads its registers and its energy unit.
type Units = BTreeMap<(i64, i64, i64), (usize, EnergyUnit)>;

impl Opener<'_> {
    /// Opens one device per package and reads its unit register.
    fn package_units(
        &mut self,
        places: &[CpuPlace],
        set: &RegisterSet,
        cpu: &CpuModel,
    ) -> Result<Units, Unavailable> {
        let packages = group(places, |p| match set.vendor {
            Vendor::Intel => (p.package, p.die, 0),
            Vendor::Amd => (p.package, 0, 0),
        });
        let mut units = Units::new();
        for (key, cpus) in &packages {
            let Some(file) = self.first_readable(cpus)? else {
                continue;
            };
            let device = self
                .files
                .get(file)
                .ok_or_else(|| Unavailable::new("MSR device table out of step"))?;
            units.insert(*key, (file, read_unit(device, set.unit, cpu)?));
        }
        if units.is_empty() {
            return Err(Unavailable::new(format!(
                "no MSR device to read: {}",
                self.missing.join("; ")
            )));
        }
        Ok(units)
    }

    /// Where `register` is read: (device, energy unit) for each package, core or the machine.
    fn sites(
        &mut self,
        register: &Register,
        set: &RegisterSet,
        units: &Units,
        places: &[CpuPlace],
    ) -> Result<Vec<(usize, EnergyUnit)>, Unavailable> {
        let unit_of = |(file, unit): (usize, EnergyUnit)| match (register.zone, set.dram_unit) {
            ("dram", Some(dram)) => (file, dram),
            _ => (file, unit),
        };
        Ok(match register.scope {
            Scope::Package => units.values().copied().map(unit_of).collect(),
            Scope::Machine => units.values().copied().map(unit_of).take(1).collect(),
            Scope::Core => {
                let mut sites = Vec::new();
                for ((package, _, _), cpus) in &group(places, |p| (p.package, 0, p.core)) {
                    let Some((_, unit)) = units.get(&(*package, 0, 0)) else {
                        continue;
                    };
                    // Every SMT sibling reads the core's counter; the last one leaves the
                    // package's first CPU to the package registers. AMD's unit, core and
                    // package registers sit at consecutive offsets, so in a fixture file their
                    // 8-byte windows overlap; on separate devices they do not.
                    let siblings: Vec<u32> = cpus.iter().rev().copied().collect();
                    if let Some(file) = self.first_readable(&siblings)? {
                        sites.push((file, *unit));
                    }
                }
                sites
            }
        })
    }

    /// The first of `cpus` whose device opens, as an index into `files`. A missing device is
    /// noted and the next CPU tried; permission denied ends the open, since every device has
    /// the same mode and only the user can change it.
    fn first_readable(&mut self, cpus: &[u32]) -> Result<Option<usize>, Unavailable> {
        for &cpu in cpus {
            if let Some(&i) = self.by_cpu.get(&cpu) {
                return Ok(Some(i));
            }
            let path = self.root.join(cpu.to_string()).join("msr");
            match File::open(&path) {
                Ok(file) => {
                    self.files.push(MsrFile { path, file });
                    let i = self.files.len() - 1;
                    self.by_cpu.insert(cpu, i);
                    return Ok(Some(i));
                }
                Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {
                    return Err(Unavailable::new(format!(
                        "permission denied opening {}: the msr meter needs root, or CAP_SYS_RAWIO and read access to /dev/cpu/*/msr",
                        path.display()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.missing.push(format!(
                        "{} not found (load the msr module: modprobe msr)",
                        path.display()
                    ));
                }
                Err(e) => self
                    .missing
                    .push(format!("opening {}: {e}", path.display())),
            }
        }
        Ok(None)
    }
}

/// CPUs grouped by `key`, each group in CPU order.
fn group(places: &[CpuPlace], key: impl Fn(&CpuPlace) -> (i64, i64, i64)) -> Groups {
    let mut groups = Groups::new();
    for p in places {
        groups.entry(key(p)).or_default().push(p.cpu);
    }
    groups
}

fn read_unit(f: &MsrFile, register: u64, cpu: &CpuModel) -> Result<EnergyUnit, Unavailable> {
    let value = read_register(&f.file, register).map_err(|e| {
        Unavailable::new(format!(
            "cannot read the RAPL unit register {register:#X} of {}: {e} ({} does not implement it?)",
            f.path.display(),
            registers::describe(cpu)
        ))
    })?;
    EnergyUnit::from_unit_register(value).ok_or_else(|| {
        Unavailable::new(format!(
            "the RAPL unit register {register:#X} of {} reads 0: not implemented by this CPU ({})",
            f.path.display(),
            registers::describe(cpu)
        ))
    })
}

/// The counter of `register` on the CPU of `files[file]`, or `None` when the CPU lacks it.
fn probe_counter(
    files: &[MsrFile],
    file: usize,
    register: &Register,
    unit: EnergyUnit,
) -> Option<Counter> {
    let f = files.get(file)?;
    let cpu = f
        .path
        .parent()
        .and_then(Path::file_name)
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    match read_register(&f.file, register.offset) {
        // Implemented counters count from power-on; an unimplemented one may read 0.
        Ok(value) if low_32(value) == 0 => {
            debug!(
                cpu,
                zone = register.zone,
                "RAPL register reads 0; zone left out"
            );
            None
        }
        Ok(_) => Some(Counter {
            zone: register.zone.into(),
            path: format!("msr:{cpu}:{}", register.zone).into(),
            file,
            offset: register.offset,
            unit,
        }),
        Err(e) => {
            let path = register_path(&f.path, register.offset);
            // EIO is how the driver reports a register the CPU does not have.
            if e.raw_os_error() == Some(EIO) || e.kind() == io::ErrorKind::UnexpectedEof {
                debug!(
                    path,
                    zone = register.zone,
                    "RAPL register absent; zone left out"
                );
            } else {
                warn!(path, zone = register.zone, error = %e, "RAPL register unreadable; zone left out");
            }
            None
        }
    }
}

/// EIO's number on Linux (every architecture), without a libc dependency for one constant.
const EIO: i32 = 5;

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

fn read_register(file: &File, offset: u64) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(u64::from_le_bytes(bytes))
}

/// The energy counters are the low 32 bits; the high bits are reserved.
fn low_32(value: u64) -> u32 {
    (value & 0xFFFF_FFFF) as u32
}

fn register_path(file: &Path, offset: u64) -> String {
    format!("{}@{offset:#X}", file.display())
}

/// Advice for `kepler probe` when powercap shows no RAPL zone: whether this CPU has RAPL by
/// cpuinfo, and what would make the msr meter read it. `None` when there is nothing to advise
/// (powercap has zones, the CPU has no RAPL, or the msr meter is already enabled).
pub fn rapl_hint(settings: &MeterSettings) -> Option<String> {
    if settings.msr.enabled || powercap_has_rapl(&settings.sysfs) {
        return None;
    }
    let cpu = kepler_sources::read_cpu_model(&settings.procfs).ok()?;
    if !registers::has_rapl(&cpu) {
        return None;
    }
    let what = registers::describe(&cpu);
    let root = settings.msr.root.display();
    Some(if msr_devices_exist(&settings.msr.root) {
        format!("cpuinfo says this CPU ({what}) has RAPL: set `msr.enabled: true` to read it from {root}/*/msr")
    } else {
        format!("cpuinfo says this CPU ({what}) has RAPL: load the msr module (`modprobe msr`, for {root}/*/msr) and set `msr.enabled: true` to read it")
    })
}

fn powercap_has_rapl(sysfs: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(sysfs.join("class").join("powercap")) else {
        return false;
    };
    entries.flatten().any(|e| {
        e.file_name()
            .to_str()
            .is_some_and(|n| n.starts_with("intel-rapl:") || n.starts_with("intel-rapl-mmio:"))
    })
}

fn msr_devices_exist(root: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(root) else {
        return false;
    };
    entries.flatten().any(|e| e.path().join("msr").exists())
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

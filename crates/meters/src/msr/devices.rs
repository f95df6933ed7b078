//! Opening the MSR devices of the CPUs that read each register, and reading registers.

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::Path;

use kepler_core::Unavailable;
use kepler_sources::CpuModel;
use tracing::{debug, warn};

use super::registers::{self, EnergyUnit, Register, RegisterSet, Scope, Vendor};
use super::topology::CpuPlace;
use super::{Counter, MsrFile};

/// CPUs that share one counter, by (package, die, core) with the parts the scope ignores 0.
type Groups = BTreeMap<(i64, i64, i64), Vec<u32>>;

/// Opens MSR devices once each; the handles stay open so that each tick is one pread per
/// counter (the driver checks permissions at open).
pub(super) struct Opener<'a> {
    root: &'a Path,
    files: Vec<MsrFile>,
    by_cpu: HashMap<u32, usize>,
    /// CPUs without a device file, and devices that failed to open otherwise: for the message
    /// when no package has a device.
    not_found: Vec<String>,
    failed: Vec<String>,
}

/// Per package (per die on Intel): the device that reads its registers and its energy unit.
pub(super) type Units = BTreeMap<(i64, i64, i64), (usize, EnergyUnit)>;

impl<'a> Opener<'a> {
    pub fn new(root: &'a Path) -> Self {
        Opener {
            root,
            files: Vec::new(),
            by_cpu: HashMap::new(),
            not_found: Vec::new(),
            failed: Vec::new(),
        }
    }

    /// The devices opened so far; counters refer to them by index.
    pub fn files(&self) -> &[MsrFile] {
        &self.files
    }

    pub fn into_files(self) -> Vec<MsrFile> {
        self.files
    }

    /// Opens one device per package and reads its unit register.
    pub fn package_units(
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
                self.why_none()
            )));
        }
        Ok(units)
    }

    /// Where `register` is read: (device, energy unit) for each package, core or the machine.
    pub fn sites(
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

    /// Why no device opened: one line however many CPUs the host has.
    fn why_none(&self) -> String {
        let mut parts: Vec<String> = self.failed.iter().take(3).cloned().collect();
        if self.failed.len() > 3 {
            parts.push(format!("{} more failed", self.failed.len() - 3));
        }
        match self.not_found.as_slice() {
            [] => {}
            [one] => parts.push(format!(
                "{one} not found (load the msr module: modprobe msr)"
            )),
            [first, rest @ ..] => parts.push(format!(
                "{first} and {} other CPUs' devices not found (load the msr module: modprobe msr)",
                rest.len()
            )),
        }
        parts.join("; ")
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
                    return Err(Unavailable::denied(format!(
                        "permission denied opening {}: the msr meter needs root, or CAP_SYS_RAWIO and read access to /dev/cpu/*/msr",
                        path.display()
                    )));
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    self.not_found.push(path.display().to_string());
                }
                Err(e) => self.failed.push(format!("opening {}: {e}", path.display())),
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
pub(super) fn probe_counter(
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

pub(super) fn read_register(file: &File, offset: u64) -> io::Result<u64> {
    let mut bytes = [0u8; 8];
    file.read_exact_at(&mut bytes, offset)?;
    Ok(u64::from_le_bytes(bytes))
}

/// The energy counters are the low 32 bits; the high bits are reserved.
pub(super) fn low_32(value: u64) -> u32 {
    (value & 0xFFFF_FFFF) as u32
}

pub(super) fn register_path(file: &Path, offset: u64) -> String {
    format!("{}@{offset:#X}", file.display())
}

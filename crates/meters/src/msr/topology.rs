//! Which logical CPUs share a package, a die and a core:
//! `<sysfs>/devices/system/cpu/cpuN/topology/{physical_package_id,die_id,core_id}`.

use std::path::Path;

use kepler_core::Unavailable;
use tracing::debug;

use crate::sysfs::read_i64;

/// One online logical CPU's place in the machine.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct CpuPlace {
    pub cpu: u32,
    pub package: i64,
    /// 0 where the kernel prints no `die_id`.
    pub die: i64,
    /// 0 where the kernel prints no `core_id`.
    pub core: i64,
}

/// Every CPU with a topology directory, by CPU number. Offline CPUs have none and are left
/// out: their MSR device cannot be read either.
pub(crate) fn read_topology(sysfs: &Path) -> Result<Vec<CpuPlace>, Unavailable> {
    let dir = sysfs.join("devices").join("system").join("cpu");
    let entries = std::fs::read_dir(&dir)
        .map_err(|e| Unavailable::new(format!("cannot list {}: {e}", dir.display())))?;
    let mut buf = String::new();
    let mut places = Vec::new();
    for entry in entries.flatten() {
        let Some(cpu) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.strip_prefix("cpu"))
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let topology = entry.path().join("topology");
        let package = match read_i64(&topology.join("physical_package_id"), &mut buf) {
            Ok(p) => p,
            Err(e) => {
                debug!(cpu, error = %e, "CPU without topology (offline?); skipped");
                continue;
            }
        };
        let mut optional = |file: &str| read_i64(&topology.join(file), &mut buf).unwrap_or(0);
        let die = optional("die_id");
        let core = optional("core_id");
        places.push(CpuPlace {
            cpu,
            package,
            die,
            core,
        });
    }
    if places.is_empty() {
        return Err(Unavailable::new(format!(
            "no CPU topology under {} (cpuN/topology/physical_package_id)",
            dir.display()
        )));
    }
    places.sort_by_key(|p| p.cpu);
    Ok(places)
}

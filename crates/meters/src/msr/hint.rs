//! What `kepler probe` advises when powercap is empty on a CPU that has RAPL.

use std::path::Path;

use super::registers;
use crate::MeterSettings;

/// Advice for `kepler probe` when powercap shows no RAPL zone: whether this CPU has RAPL by
/// cpuinfo, and what would make the msr meter read it. `None` when there is nothing to advise
/// (powercap has zones, the CPU has no RAPL, the msr meter is already enabled, or this is a
/// virtual machine: hypervisors do not pass RAPL through, whatever the CPU model says).
pub fn rapl_hint(settings: &MeterSettings) -> Option<String> {
    if settings.msr.enabled || powercap_has_rapl(&settings.sysfs) {
        return None;
    }
    let cpu = kepler_sources::read_cpu_model(&settings.procfs).ok()?;
    if !registers::has_rapl(&cpu) || cpu.has_flag("hypervisor") {
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

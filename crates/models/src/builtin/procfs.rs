//! `/proc/cpuinfo` and `/proc/meminfo` text → what a machine spec needs. Pure parsing: the
//! caller reads the files (the agent from its configured procfs root).

use super::spec::frequency_mhz_of_word;
use super::BuiltinError;

/// What `/proc/cpuinfo` tells.
#[derive(Debug, Clone, PartialEq)]
pub struct CpuInfo {
    /// The raw model name (`Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz`), or the core
    /// name derived from the ARM implementer/part ids; empty when the text names none.
    pub model_name: String,
    /// Number of `processor` entries.
    pub logical_cores: u32,
    /// Distinct `physical id` values; 1 when the text has none (arm64 kernels do not print
    /// them; read `/sys/devices/system/cpu/cpu*/topology/physical_package_id` for better).
    pub chips: u32,
    /// Distinct (`physical id`, `core id`) pairs: physical cores. `None` when the text has no
    /// `core id` lines (arm64, most VMs' kernels print them, some do not).
    pub physical_cores: Option<u32>,
    /// The frequency in the model name (`@ 2.50GHz` → 2500), which is the nominal one.
    pub frequency_mhz: Option<f64>,
}

/// The frequency a model name states (`... @ 2.50GHz`, `... 2.6 GHz`), in MHz.
fn frequency_in_name(name: &str) -> Option<f64> {
    let lower = name.to_lowercase();
    let words: Vec<&str> = lower.split_whitespace().collect();
    words.iter().enumerate().find_map(|(i, w)| {
        frequency_mhz_of_word(w).or_else(|| {
            let v: f64 = w.parse().ok()?;
            let unit = words.get(i + 1)?;
            let factor = match *unit {
                "ghz" => 1000.0,
                "mhz" => 1.0,
                _ => return None,
            };
            (v.is_finite() && v > 0.0).then_some(v * factor)
        })
    })
}

/// Core names of ARM Ltd (implementer 0x41) parts found in cloud servers. arm64 cpuinfo has
/// no model name, only these ids.
const ARM_PARTS: [(&str, &str); 4] = [
    ("0xd08", "ARM Cortex-A72"),
    ("0xd0c", "ARM Neoverse-N1"),
    ("0xd40", "ARM Neoverse-V1"),
    ("0xd4f", "ARM Neoverse-V2"),
];

/// Parses `/proc/cpuinfo` text. Errors only when it lists no processor at all.
pub fn parse_cpuinfo(text: &str) -> Result<CpuInfo, BuiltinError> {
    let mut logical = 0u32;
    let mut model_name: Option<&str> = None;
    let mut implementer: Option<&str> = None;
    let mut part: Option<&str> = None;
    let mut power_cpu: Option<&str> = None;
    let mut physical_ids = std::collections::BTreeSet::new();
    let mut cores = std::collections::BTreeSet::new();
    let mut package: Option<&str> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "processor" => {
                logical = logical.saturating_add(1);
                package = None;
            }
            "model name" if model_name.is_none() => model_name = Some(value),
            "CPU implementer" if implementer.is_none() => implementer = Some(value),
            "CPU part" if part.is_none() => part = Some(value),
            // ppc64le: "cpu : POWER9 (raw), altivec supported".
            "cpu" if power_cpu.is_none() => power_cpu = Some(value),
            "physical id" => {
                physical_ids.insert(value.to_string());
                package = Some(value);
            }
            // cpuinfo prints `physical id` before `core id` within a processor's block.
            "core id" => {
                cores.insert((package.unwrap_or(""), value));
            }
            _ => {}
        }
    }
    if logical == 0 {
        return Err(BuiltinError::Spec(
            "cpuinfo lists no processor entries".into(),
        ));
    }
    let name = match (model_name, implementer, part) {
        (Some(n), _, _) if !n.is_empty() => n.to_string(),
        (_, Some("0x41"), Some(p)) => ARM_PARTS
            .iter()
            .find(|(id, _)| id.eq_ignore_ascii_case(p))
            .map_or_else(|| format!("ARM part {p}"), |(_, n)| (*n).to_string()),
        (_, Some(i), Some(p)) => format!("implementer {i} part {p}"),
        _ => power_cpu
            .map(|c| c.split(',').next().unwrap_or(c).to_string())
            .unwrap_or_default(),
    };
    let chips = u32::try_from(physical_ids.len()).unwrap_or(u32::MAX).max(1);
    // More cores than processor entries would be a broken text; it says nothing then.
    let physical_cores = u32::try_from(cores.len())
        .ok()
        .filter(|c| *c > 0 && *c <= logical);
    Ok(CpuInfo {
        physical_cores,
        frequency_mhz: frequency_in_name(&name),
        model_name: name,
        logical_cores: logical,
        chips,
    })
}

/// `MemTotal` of `/proc/meminfo` text, in GiB (kB / 1024²), as the model server's spec has it.
pub fn parse_meminfo_gib(text: &str) -> Result<f64, BuiltinError> {
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .ok_or_else(|| BuiltinError::Spec("meminfo has no MemTotal line".into()))?;
    let mut parts = line.split_whitespace();
    let kb: f64 = parts
        .next()
        .and_then(|n| n.parse().ok())
        .ok_or_else(|| BuiltinError::Spec(format!("meminfo MemTotal {line:?} is not a number")))?;
    if !matches!(parts.next(), Some("kB") | None) {
        return Err(BuiltinError::Spec(format!(
            "meminfo MemTotal {line:?} is not in kB"
        )));
    }
    if !(kb.is_finite() && kb > 0.0) {
        return Err(BuiltinError::Spec(format!(
            "meminfo MemTotal {line:?} is not positive"
        )));
    }
    Ok(kb / 1_048_576.0)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::spec::{cpu_key, MachineSpec};

    const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) \
        Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 0\n\nprocessor\t: 1\nmodel name\t: \
        Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 1\n\nprocessor\t: 2\n\
        physical id\t: 1\n";

    #[test]
    fn reads_cpuinfo_and_meminfo() -> Result<(), BuiltinError> {
        let spec =
            MachineSpec::from_proc(CPUINFO, "MemTotal:       395432100 kB\nMemFree: 1 kB\n")?;
        assert_eq!(spec.processor, "intel_xeon_platinum_8259cl");
        assert_eq!(spec.logical_cores, 3);
        assert_eq!(spec.chips, 2);
        assert_eq!(spec.memory_gb, 395432100.0 / 1048576.0);
        assert_eq!(spec.frequency_mhz, Some(2500.0));
        Ok(())
    }

    /// A 2-socket, 2-cores-per-socket host with two threads per core, in cpuinfo's order.
    fn smt_cpuinfo() -> String {
        let mut text = String::new();
        for (n, (socket, core)) in [(0, 0), (0, 1), (1, 0), (1, 1)]
            .iter()
            .cycle()
            .take(8)
            .enumerate()
        {
            text.push_str(&format!(
                "processor\t: {n}\nmodel name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ \
                 2.50GHz\nphysical id\t: {socket}\nsiblings\t: 4\ncore id\t\t: {core}\n\
                 cpu cores\t: 2\n\n"
            ));
        }
        text
    }

    #[test]
    fn counts_physical_cores_apart_from_logical_cpus() -> Result<(), BuiltinError> {
        let cpu = parse_cpuinfo(&smt_cpuinfo())?;
        assert_eq!(
            (cpu.logical_cores, cpu.physical_cores, cpu.chips),
            (8, Some(4), 2)
        );
        // No core ids (arm64, some VMs): unknown, not guessed.
        assert_eq!(parse_cpuinfo(CPUINFO)?.physical_cores, None);
        // The spec from cpuinfo and one stating physical cores describe one machine.
        let from_proc = MachineSpec::from_proc(&smt_cpuinfo(), "MemTotal: 16000000 kB\n")?;
        let stated = MachineSpec::from_spec_json(
            r#"{"processor": "intel_xeon_platinum_8259cl", "cores": 4, "threads_per_core": 2}"#,
        )?;
        assert_eq!(
            (from_proc.logical_cores, from_proc.physical_cores),
            (stated.logical_cores, stated.physical_cores)
        );
        Ok(())
    }

    #[test]
    fn reads_arm64_cpuinfo() -> Result<(), BuiltinError> {
        let text =
            "processor\t: 0\nBogoMIPS\t: 243.75\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n\n\
                    processor\t: 1\nCPU implementer\t: 0x41\nCPU part\t: 0xd0c\n";
        let cpu = parse_cpuinfo(text)?;
        assert_eq!(cpu.model_name, "ARM Neoverse-N1");
        assert_eq!((cpu.logical_cores, cpu.chips), (2, 1));
        assert_eq!(cpu_key(&cpu.model_name), cpu_key("Graviton2"));
        Ok(())
    }

    #[test]
    fn bad_proc_text_is_an_error() {
        assert!(parse_cpuinfo("").is_err());
        assert!(parse_cpuinfo("vendor_id : x\n").is_err());
        assert!(parse_meminfo_gib("").is_err());
        assert!(parse_meminfo_gib("MemTotal: lots kB").is_err());
        assert!(parse_meminfo_gib("MemTotal: 12 MB").is_err());
        assert!(parse_meminfo_gib("MemTotal: 0 kB").is_err());
    }
}

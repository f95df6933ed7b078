//! `/proc/cpuinfo` text: one entry per logical CPU (the `kepler_node_cpu_info` labels), and
//! the CPU flags hypervisors set. Pure parsing; [`super::HostFacts`] reads the file.

use kepler_core::CpuInfo;

/// One entry per logical CPU. Fields a platform does not print (no `physical id` in many VMs,
/// no `vendor_id` on arm64) are empty strings. Blocks are separated by blank lines; a block
/// without a `processor` key (arm64 prints a trailing `Hardware` block) is not a CPU.
pub(crate) fn parse_cpu_info(content: &str) -> Vec<CpuInfo> {
    let mut cpus = Vec::new();
    let mut current: Option<CpuInfo> = None;
    for line in content.lines() {
        let Some((key, value)) = line.split_once(':') else {
            if line.trim().is_empty() {
                cpus.extend(current.take());
            }
            continue;
        };
        let value = value.trim().to_owned();
        match key.trim() {
            "processor" => {
                // A new processor without a blank line before it still starts a new entry.
                cpus.extend(current.take());
                current = Some(CpuInfo {
                    processor: value,
                    ..CpuInfo::default()
                });
            }
            key => {
                let Some(cpu) = current.as_mut() else {
                    continue;
                };
                match key {
                    "vendor_id" => cpu.vendor_id = value,
                    "model name" => cpu.model_name = value,
                    "physical id" => cpu.physical_id = value,
                    "core id" => cpu.core_id = value,
                    _ => {}
                }
            }
        }
    }
    cpus.extend(current);
    cpus
}

/// Whether any `flags` line has the `hypervisor` flag, which x86 hypervisors set for their
/// guests (CPUID leaf 1, ECX bit 31).
pub(crate) fn has_hypervisor_flag(content: &str) -> bool {
    content
        .lines()
        .filter(|l| l.starts_with("flags"))
        .filter_map(|l| l.split_once(':'))
        .any(|(_, flags)| flags.split_whitespace().any(|f| f == "hypervisor"))
}

/// What the processor is, from the first `processor` entry (the sockets of one host are the
/// same model). Numbers are decimal in cpuinfo; a field the platform does not print is `None`
/// (or empty).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CpuModel {
    /// `GenuineIntel`, `AuthenticAMD`, `HygonGenuine`, ...
    pub vendor_id: String,
    /// `cpu family`, such as 6 (Intel Core and Xeon) or 25 (AMD Zen 3/4, 19h).
    pub family: Option<u32>,
    /// `model`.
    pub model: Option<u32>,
    /// `flags`, such as `rapl` (printed by kernels that know the CPU's RAPL interface).
    pub flags: Vec<String>,
}

impl CpuModel {
    pub fn has_flag(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f == flag)
    }
}

/// The model of the first `processor` block; `None` when there is none.
pub fn parse_cpu_model(content: &str) -> Option<CpuModel> {
    let mut lines = content
        .lines()
        .skip_while(|l| key_of(l) != Some("processor"));
    // The `processor` line itself, then the block's fields up to the next blank line.
    lines.next()?;
    let mut model = CpuModel::default();
    for line in lines.take_while(|l| !l.trim().is_empty()) {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "processor" => break,
            "vendor_id" => model.vendor_id = value.to_owned(),
            "cpu family" => model.family = value.parse().ok(),
            "model" => model.model = value.parse().ok(),
            "flags" => model.flags = value.split_whitespace().map(str::to_owned).collect(),
            _ => {}
        }
    }
    Some(model)
}

fn key_of(line: &str) -> Option<&str> {
    line.split_once(':').map(|(k, _)| k.trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn x86_host_with_two_sockets_fields() {
        let content = "processor\t: 0\nvendor_id\t: GenuineIntel\ncpu family\t: 6\n\
            model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nphysical id\t: 1\n\
            core id\t\t: 7\nflags\t\t: fpu vme\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n\
            model name\t: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz\nphysical id\t: 0\ncore id\t\t: 3\n\n";
        let cpus = parse_cpu_info(content);
        assert_eq!(
            cpus,
            vec![
                CpuInfo {
                    processor: "0".into(),
                    vendor_id: "GenuineIntel".into(),
                    model_name: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz".into(),
                    physical_id: "1".into(),
                    core_id: "7".into(),
                },
                CpuInfo {
                    processor: "1".into(),
                    vendor_id: "GenuineIntel".into(),
                    model_name: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz".into(),
                    physical_id: "0".into(),
                    core_id: "3".into(),
                },
            ]
        );
        assert!(!has_hypervisor_flag(content));
    }

    #[test]
    fn vm_without_topology_and_arm64_leave_fields_empty() {
        let vm = "processor\t: 0\nvendor_id\t: AuthenticAMD\nmodel name\t: AMD EPYC\n";
        let cpus = parse_cpu_info(vm);
        assert_eq!(cpus.len(), 1);
        assert_eq!(cpus[0].model_name, "AMD EPYC");
        assert_eq!(cpus[0].physical_id, "");
        assert_eq!(cpus[0].core_id, "");

        let arm = "processor\t: 0\nBogoMIPS\t: 50.00\nCPU implementer\t: 0x41\n\n\
            processor\t: 1\nBogoMIPS\t: 50.00\n\nHardware\t: BCM2835\nSerial\t\t: 0001\n";
        let cpus = parse_cpu_info(arm);
        assert_eq!(cpus.len(), 2);
        assert_eq!(cpus[1].processor, "1");
        assert_eq!(cpus[1].vendor_id, "");
    }

    #[test]
    fn the_hypervisor_flag_is_a_whole_word_of_a_flags_line() {
        assert!(has_hypervisor_flag("flags\t\t: fpu hypervisor lahf_lm\n"));
        assert!(!has_hypervisor_flag("flags\t\t: fpu hypervisorx\n"));
        // Another key's value is not a flag (`model name : ... hypervisor ...`).
        assert!(!has_hypervisor_flag(
            "model name\t: hypervisor\nflags\t: fpu\n"
        ));
        assert!(!has_hypervisor_flag(""));
    }

    #[test]
    fn model_comes_from_the_first_processor() {
        let content = "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\n\
            model\t\t: 1\nmodel name\t: AMD EPYC 7763 64-Core Processor\n\
            flags\t\t: fpu rapl constant_tsc\n\nprocessor\t: 1\nvendor_id\t: Other\n\n";
        let model = parse_cpu_model(content).unwrap();
        assert_eq!(model.vendor_id, "AuthenticAMD");
        assert_eq!(model.family, Some(25));
        assert_eq!(model.model, Some(1));
        assert!(model.has_flag("rapl") && !model.has_flag("rap"));
        assert_eq!(parse_cpu_model("garbage\n"), None);
        let arm = parse_cpu_model("processor\t: 0\nBogoMIPS\t: 50.00\n").unwrap();
        assert_eq!(arm, CpuModel::default());
    }
}

//! The RAPL registers of each vendor (DESIGN §6), which processors have them, and the
//! arithmetic of their energy unit.

use std::time::Duration;

use kepler_core::MicroJoules;
use kepler_sources::CpuModel;

/// Intel `MSR_RAPL_POWER_UNIT`: bits 12:8 hold the energy status unit (ESU).
pub const INTEL_POWER_UNIT: u64 = 0x606;
/// Intel `MSR_PKG_ENERGY_STATUS`.
pub const INTEL_PKG_ENERGY: u64 = 0x611;
/// Intel `MSR_DRAM_ENERGY_STATUS`.
pub const INTEL_DRAM_ENERGY: u64 = 0x619;
/// Intel `MSR_PP0_ENERGY_STATUS` (cores).
pub const INTEL_PP0_ENERGY: u64 = 0x639;
/// Intel `MSR_PP1_ENERGY_STATUS` (uncore, the graphics of client parts).
pub const INTEL_PP1_ENERGY: u64 = 0x641;
/// Intel `MSR_PLATFORM_ENERGY_STATUS` (psys).
pub const INTEL_PSYS_ENERGY: u64 = 0x64D;
/// AMD `MSR_RAPL_PWR_UNIT` (family 17h and later), same layout as Intel's.
pub const AMD_POWER_UNIT: u64 = 0xC001_0299;
/// AMD `MSR_CORE_ENERGY_STAT`, one counter per physical core.
pub const AMD_CORE_ENERGY: u64 = 0xC001_029A;
/// AMD `MSR_PKG_ENERGY_STAT`.
pub const AMD_PKG_ENERGY: u64 = 0xC001_029B;

/// The highest power one counter is assumed to count at when checking that the agent samples
/// before it can wrap twice: twice the highest package TDP shipped so far (500 W), so one
/// delayed tick still stays within one wrap.
pub const PLAUSIBLE_MAX_WATTS: f64 = 1000.0;

/// First AMD family with the RAPL MSRs (Zen, 17h); Hygon's Dhyana is family 18h.
const AMD_FIRST_RAPL_FAMILY: u32 = 0x17;

/// Intel server models whose DRAM domain counts in 2^-16 J (15.3 µJ) whatever the unit
/// register says (documented in their datasheets; the kernel's powercap driver applies the
/// same fixed unit): Haswell-X, Broadwell-X and -DE, Skylake/Cascade/Cooper Lake-SP, Ice
/// Lake-SP and -D, Sapphire and Emerald Rapids, Knights Landing and Mill.
const INTEL_FIXED_DRAM_UNIT_MODELS: [u32; 10] =
    [0x3F, 0x4F, 0x56, 0x55, 0x6A, 0x6C, 0x8F, 0xCF, 0x57, 0x85];
const INTEL_SERVER_DRAM_ESU: u32 = 16;

/// Which topology unit holds a register.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Scope {
    /// One counter per package (per die on multi-die Intel parts).
    Package,
    /// One counter per physical core; the zone is the sum over cores.
    Core,
    /// One counter for the machine, read on the first package (Intel psys; the powercap driver
    /// also shows it once).
    Machine,
}

#[derive(Copy, Clone, Debug)]
pub(crate) struct Register {
    /// The zone, named like powercap's.
    pub zone: &'static str,
    pub offset: u64,
    pub scope: Scope,
}

const INTEL_REGISTERS: [Register; 5] = [
    Register {
        zone: "package",
        offset: INTEL_PKG_ENERGY,
        scope: Scope::Package,
    },
    Register {
        zone: "core",
        offset: INTEL_PP0_ENERGY,
        scope: Scope::Package,
    },
    Register {
        zone: "uncore",
        offset: INTEL_PP1_ENERGY,
        scope: Scope::Package,
    },
    Register {
        zone: "dram",
        offset: INTEL_DRAM_ENERGY,
        scope: Scope::Package,
    },
    Register {
        zone: "psys",
        offset: INTEL_PSYS_ENERGY,
        scope: Scope::Machine,
    },
];

const AMD_REGISTERS: [Register; 2] = [
    Register {
        zone: "package",
        offset: AMD_PKG_ENERGY,
        scope: Scope::Package,
    },
    Register {
        zone: "core",
        offset: AMD_CORE_ENERGY,
        scope: Scope::Core,
    },
];

#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) enum Vendor {
    Intel,
    /// AMD, and Hygon whose parts are AMD's design.
    Amd,
}

/// The registers of one processor model.
#[derive(Clone, Debug)]
pub(crate) struct RegisterSet {
    pub vendor: Vendor,
    pub unit: u64,
    pub energy: &'static [Register],
    /// The DRAM energy unit when the model fixes it instead of using the unit register.
    pub dram_unit: Option<EnergyUnit>,
}

impl RegisterSet {
    /// The registers of the processor cpuinfo describes, or why it has none this meter knows.
    pub fn of(cpu: &CpuModel) -> Result<RegisterSet, String> {
        match (vendor(cpu), cpu.family) {
            (Some(Vendor::Intel), _) => Ok(RegisterSet {
                vendor: Vendor::Intel,
                unit: INTEL_POWER_UNIT,
                energy: &INTEL_REGISTERS,
                dram_unit: (cpu.family == Some(6)
                    && cpu
                        .model
                        .is_some_and(|m| INTEL_FIXED_DRAM_UNIT_MODELS.contains(&m)))
                .then_some(EnergyUnit {
                    esu: INTEL_SERVER_DRAM_ESU,
                }),
            }),
            (Some(Vendor::Amd), Some(family)) if family >= AMD_FIRST_RAPL_FAMILY => {
                Ok(RegisterSet {
                    vendor: Vendor::Amd,
                    unit: AMD_POWER_UNIT,
                    energy: &AMD_REGISTERS,
                    dram_unit: None,
                })
            }
            (Some(Vendor::Amd), _) => Err(format!(
                "{} has no RAPL MSRs (AMD has them from family 17h)",
                describe(cpu)
            )),
            (None, _) => Err(format!(
                "{} has no RAPL MSRs this meter knows (Intel, or AMD/Hygon family 17h and later)",
                describe(cpu)
            )),
        }
    }
}

fn vendor(cpu: &CpuModel) -> Option<Vendor> {
    match cpu.vendor_id.as_str() {
        "GenuineIntel" => Some(Vendor::Intel),
        "AuthenticAMD" | "HygonGenuine" => Some(Vendor::Amd),
        _ => None,
    }
}

/// Whether cpuinfo says this processor has RAPL, for `kepler probe`'s advice when powercap is
/// empty: the kernel's `rapl` flag, an AMD/Hygon family 17h or later, or an Intel core of
/// Sandy Bridge (family 6 model 2Ah) or later (Intel has no cpuinfo flag for it; the three
/// Westmere models numbered above 2Ah predate RAPL).
pub(crate) fn has_rapl(cpu: &CpuModel) -> bool {
    const WESTMERE: [u32; 3] = [0x2C, 0x2E, 0x2F];
    if cpu.has_flag("rapl") {
        return true;
    }
    match (vendor(cpu), cpu.family, cpu.model) {
        (Some(Vendor::Amd), Some(f), _) => f >= AMD_FIRST_RAPL_FAMILY,
        (Some(Vendor::Intel), Some(6), Some(m)) => m >= 0x2A && !WESTMERE.contains(&m),
        (Some(Vendor::Intel), Some(f), _) => f > 6,
        _ => false,
    }
}

/// "GenuineIntel family 6 model 55h", for messages.
pub(crate) fn describe(cpu: &CpuModel) -> String {
    let vendor = if cpu.vendor_id.is_empty() {
        "an unknown vendor"
    } else {
        cpu.vendor_id.as_str()
    };
    match (cpu.family, cpu.model) {
        (Some(f), Some(m)) => format!("{vendor} family {f:X}h model {m:X}h"),
        (Some(f), None) => format!("{vendor} family {f:X}h"),
        _ => vendor.to_string(),
    }
}

/// 2^-esu joules per count of a 32-bit energy counter.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub(crate) struct EnergyUnit {
    esu: u32,
}

impl EnergyUnit {
    /// The energy unit of a unit register's value (bits 12:8), or `None` when the register
    /// reads 0 (not implemented: real parts always report a non-zero power and time unit).
    pub fn from_unit_register(value: u64) -> Option<EnergyUnit> {
        (value != 0).then_some(EnergyUnit {
            esu: ((value >> 8) & 0x1F) as u32,
        })
    }

    /// A counter value in µJ, rounded down. Exact over the counter's whole range: a count
    /// below 2^32 times 10^6 stays below 2^52.
    pub fn micro_joules(self, count: u32) -> MicroJoules {
        MicroJoules((u64::from(count) * 1_000_000) >> self.esu)
    }

    /// The largest value [`micro_joules`](Self::micro_joules) can take before the counter
    /// wraps, as core's wrap logic wants it: the counter counts 0..=max, so max + 1 is
    /// 2^32 counts of 10^6 / 2^esu µJ each, an integer since esu < 32. Deltas across one
    /// wrap are then right to within 1 µJ.
    pub fn wrap_max(self) -> MicroJoules {
        MicroJoules((1_000_000u64 << (32 - self.esu)) - 1)
    }

    pub fn micro_joules_per_count(self) -> f64 {
        1e6 / f64::from(1u32 << self.esu)
    }

    /// How long the counter takes to wrap at [`PLAUSIBLE_MAX_WATTS`].
    pub fn wrap_time_at_max_power(self) -> Duration {
        let joules = (self.wrap_max().0 + 1) as f64 / 1e6;
        Duration::from_secs_f64(joules / PLAUSIBLE_MAX_WATTS)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu(vendor: &str, family: u32, model: u32) -> CpuModel {
        CpuModel {
            vendor_id: vendor.into(),
            family: Some(family),
            model: Some(model),
            flags: Vec::new(),
        }
    }

    #[test]
    fn units_follow_the_register_and_wrap_where_the_counter_does() {
        // Intel's usual 0xA0E03: ESU 14, 61.035 µJ per count.
        let unit = EnergyUnit::from_unit_register(0x000A_0E03).unwrap();
        assert!((unit.micro_joules_per_count() - 61.035_156_25).abs() < 1e-9);
        assert_eq!(unit.micro_joules(0), MicroJoules(0));
        assert_eq!(unit.micro_joules(16_384), MicroJoules(1_000_000));
        assert_eq!(unit.wrap_max(), MicroJoules(262_144_000_000 - 1));
        assert!(unit.micro_joules(u32::MAX) <= unit.wrap_max());
        // 262 144 J at 1 kW.
        assert_eq!(unit.wrap_time_at_max_power().as_secs(), 262);
        // AMD's usual ESU 16 (15.26 µJ): 65.5 kJ, 65 s at 1 kW.
        let amd = EnergyUnit::from_unit_register(0x000A_1003).unwrap();
        assert_eq!(amd.wrap_max(), MicroJoules(65_536_000_000 - 1));
        assert_eq!(amd.wrap_time_at_max_power().as_secs(), 65);
        assert_eq!(EnergyUnit::from_unit_register(0), None);
    }

    #[test]
    fn register_sets_follow_vendor_and_family() {
        let skx = RegisterSet::of(&cpu("GenuineIntel", 6, 0x55)).unwrap();
        assert_eq!(skx.vendor, Vendor::Intel);
        assert_eq!(skx.unit, 0x606);
        assert_eq!(skx.dram_unit, Some(EnergyUnit { esu: 16 }));
        let client = RegisterSet::of(&cpu("GenuineIntel", 6, 0x9E)).unwrap();
        assert_eq!(client.dram_unit, None);
        let zen3 = RegisterSet::of(&cpu("AuthenticAMD", 0x19, 1)).unwrap();
        assert_eq!((zen3.vendor, zen3.unit), (Vendor::Amd, 0xC001_0299));
        assert!(RegisterSet::of(&cpu("HygonGenuine", 0x18, 0)).is_ok());
        let old = RegisterSet::of(&cpu("AuthenticAMD", 0x15, 2)).unwrap_err();
        assert!(
            old.contains("family 15h") && old.contains("from family 17h"),
            "{old}"
        );
        let arm = RegisterSet::of(&CpuModel::default()).unwrap_err();
        assert!(
            arm.starts_with("an unknown vendor has no RAPL MSRs"),
            "{arm}"
        );
    }

    #[test]
    fn rapl_is_recognised_from_cpuinfo() {
        assert!(has_rapl(&cpu("GenuineIntel", 6, 0x55)));
        assert!(!has_rapl(&cpu("GenuineIntel", 6, 0x2C)));
        assert!(!has_rapl(&cpu("GenuineIntel", 6, 0x1A)));
        assert!(has_rapl(&cpu("AuthenticAMD", 0x17, 0x31)));
        assert!(!has_rapl(&cpu("AuthenticAMD", 0x15, 0x02)));
        let mut flagged = CpuModel::default();
        flagged.flags.push("rapl".into());
        assert!(has_rapl(&flagged));
        assert!(!has_rapl(&CpuModel::default()));
    }
}

//! The RAPL-over-MSR meter on sparse fixture devices: the bytes at each register's offset
//! hold its value, as pread on `/dev/cpu/N/msr` returns it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    zone_energies, EnergySnapshot, MeterInput, PowerMeter, ReadError, ZoneReading, ZoneSample,
};
use kepler_meters::fixtures::{MsrTree, PowercapTree};
use kepler_meters::msr::{
    rapl_hint, AMD_CORE_ENERGY, AMD_PKG_ENERGY, AMD_POWER_UNIT, INTEL_DRAM_ENERGY,
    INTEL_PKG_ENERGY, INTEL_POWER_UNIT, INTEL_PP0_ENERGY, INTEL_PSYS_ENERGY,
};
use kepler_meters::{MeterName, MeterSettings, MsrConfig, MsrMeter, OpenContext};

/// Intel's usual unit register: energy status unit 14 (61.035 µJ).
const INTEL_UNIT: u64 = 0x000A_0E03;
/// AMD's usual unit register: energy status unit 16 (15.259 µJ).
const AMD_UNIT: u64 = 0x000A_1003;

/// A fixture host: sysfs, procfs and the MSR root under one directory.
struct Host {
    _dir: tempfile::TempDir,
    settings: MeterSettings,
    tree: MsrTree,
}

impl Host {
    fn new(vendor: &str, family: u32, model: u32, cpus: u32) -> Host {
        let dir = tempfile::tempdir().unwrap();
        let sysfs = dir.path().join("sys");
        let procfs = dir.path().join("proc");
        let root = dir.path().join("dev/cpu");
        let tree = MsrTree::create(&sysfs, &root).unwrap();
        MsrTree::write_cpuinfo(&procfs, vendor, family, model, cpus).unwrap();
        let settings = MeterSettings {
            sysfs,
            procfs,
            msr: MsrConfig {
                enabled: true,
                root,
            },
            ..MeterSettings::default()
        };
        Host {
            _dir: dir,
            settings,
            tree,
        }
    }

    fn open(&self) -> Result<MsrMeter, kepler_core::Unavailable> {
        MsrMeter::open(&self.settings)
    }

    fn root(&self) -> PathBuf {
        self.settings.msr.root.clone()
    }
}

fn read(meter: &mut MsrMeter) -> Vec<ZoneReading> {
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out
}

fn counter(r: &ZoneReading) -> (u64, Option<u64>) {
    match r.sample {
        ZoneSample::Energy { counter, max } => (counter.0, max.map(|m| m.0)),
        ZoneSample::Power(_) => panic!("{} should be a counter", r.path),
    }
}

fn snapshot(at: u64, meter: &mut MsrMeter) -> EnergySnapshot {
    EnergySnapshot {
        at: Duration::from_secs(at),
        readings: read(meter),
    }
}

/// (zone, path, energy µJ) of each zone between two snapshots.
fn energies(
    before: &EnergySnapshot,
    after: &EnergySnapshot,
    meter: &MsrMeter,
) -> Vec<(String, String, u64)> {
    let (energies, issues) = zone_energies(before, after, &Arc::new(meter.meta()));
    assert!(issues.is_empty(), "{issues:?}");
    energies
        .into_iter()
        .map(|e| (e.zone.to_string(), e.path.to_string(), e.energy.0))
        .collect()
}

/// Two Skylake-SP sockets (model 55h: DRAM counts in 2^-16 J) of two CPUs each.
fn intel_two_sockets() -> Host {
    let host = Host::new("GenuineIntel", 6, 0x55, 4);
    for (cpu, package) in [(0, 0), (1, 0), (2, 1), (3, 1)] {
        host.tree.add_cpu(cpu, package, cpu % 2).unwrap();
    }
    for cpu in [0, 2] {
        host.tree.write(cpu, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
        host.tree.write(cpu, INTEL_PKG_ENERGY, 16_384).unwrap();
        host.tree.write(cpu, INTEL_PP0_ENERGY, 8_192).unwrap();
        host.tree.write(cpu, INTEL_DRAM_ENERGY, 65_536).unwrap();
    }
    host
}

#[test]
fn intel_two_sockets_read_once_per_package_in_their_units() {
    let host = intel_two_sockets();
    let mut meter = host.open().unwrap();
    assert_eq!(meter.name(), "msr");
    assert_eq!(meter.domain(), kepler_core::PowerDomain::Cpu);
    // Uncore and psys read 0 (not implemented) and are left out.
    assert_eq!(
        meter.zones(),
        vec!["package", "package", "core", "core", "dram", "dram"]
    );
    let r = read(&mut meter);
    let paths: Vec<&str> = r.iter().map(|r| &*r.path).collect();
    assert_eq!(
        paths,
        vec![
            "msr:0:package",
            "msr:2:package",
            "msr:0:core",
            "msr:2:core",
            "msr:0:dram",
            "msr:2:dram"
        ]
    );
    // 16384 counts of 2^-14 J are 1 J; the counter wraps after 2^32 counts (262 144 J).
    assert_eq!(counter(&r[0]), (1_000_000, Some(262_144_000_000 - 1)));
    assert_eq!(counter(&r[2]), (500_000, Some(262_144_000_000 - 1)));
    // DRAM of this server model counts in 2^-16 J whatever the unit register says.
    assert_eq!(counter(&r[4]), (1_000_000, Some(65_536_000_000 - 1)));

    let before = snapshot(10, &mut meter);
    host.tree
        .write(0, INTEL_PKG_ENERGY, 16_384 + 3 * 16_384)
        .unwrap();
    host.tree
        .write(2, INTEL_PKG_ENERGY, 16_384 + 5 * 16_384)
        .unwrap();
    host.tree.write(2, INTEL_DRAM_ENERGY, 3 * 65_536).unwrap();
    let after = snapshot(12, &mut meter);
    assert_eq!(
        energies(&before, &after, &meter),
        vec![
            ("package".into(), "aggregated-package".into(), 8_000_000),
            ("core".into(), "aggregated-core".into(), 0),
            ("dram".into(), "aggregated-dram".into(), 2_000_000),
        ]
    );
}

#[test]
fn amd_core_counters_are_read_once_per_core_and_summed() {
    // Two packages of two cores with two threads each: CPUs 4-7 are the SMT siblings of 0-3.
    let host = Host::new("AuthenticAMD", 0x19, 0x01, 8);
    for cpu in 0..8 {
        let package = (cpu / 2) % 2;
        host.tree.add_cpu(cpu, package, cpu % 2).unwrap();
    }
    for cpu in [0, 2] {
        // Unit first: its window overlaps the package register's, one byte further on.
        host.tree.write(cpu, AMD_POWER_UNIT, AMD_UNIT).unwrap();
        host.tree.write(cpu, AMD_PKG_ENERGY, 65_536).unwrap();
    }
    // Core counters are read on each core's last sibling.
    for cpu in 4..8 {
        host.tree
            .write(cpu, AMD_CORE_ENERGY, 65_536 * u64::from(cpu - 3))
            .unwrap();
    }
    let mut meter = host.open().unwrap();
    assert_eq!(
        meter.zones(),
        vec!["package", "package", "core", "core", "core", "core"]
    );
    let r = read(&mut meter);
    let paths: Vec<&str> = r.iter().map(|r| &*r.path).collect();
    assert_eq!(
        paths,
        vec![
            "msr:0:package",
            "msr:2:package",
            "msr:4:core",
            "msr:5:core",
            "msr:6:core",
            "msr:7:core"
        ]
    );
    assert_eq!(counter(&r[0]), (1_000_000, Some(65_536_000_000 - 1)));
    assert_eq!(counter(&r[5]).0, 4_000_000);

    let before = snapshot(0, &mut meter);
    // Each core used 1 J more, except core 1 of package 1 which used 2 J.
    for cpu in 4..8u32 {
        let joules = u64::from(cpu - 3) + if cpu == 7 { 2 } else { 1 };
        host.tree
            .write(cpu, AMD_CORE_ENERGY, 65_536 * joules)
            .unwrap();
    }
    host.tree.write(2, AMD_PKG_ENERGY, 3 * 65_536).unwrap();
    let after = snapshot(1, &mut meter);
    assert_eq!(
        energies(&before, &after, &meter),
        vec![
            ("package".into(), "aggregated-package".into(), 2_000_000),
            ("core".into(), "aggregated-core".into(), 5_000_000),
        ]
    );
}

#[test]
fn a_counter_wrapping_past_32_bits_gives_the_right_delta() {
    let host = Host::new("GenuineIntel", 6, 0x9E, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.write(0, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
    // The reserved high half is not part of the counter.
    host.tree
        .write(0, INTEL_PKG_ENERGY, 0xABCD_0000_FFFF_F000)
        .unwrap();
    let mut meter = host.open().unwrap();
    assert_eq!(meter.zones(), vec!["package"]);
    let before = snapshot(0, &mut meter);
    host.tree
        .write(0, INTEL_PKG_ENERGY, 0xABCD_0000_0000_1000)
        .unwrap();
    let after = snapshot(1, &mut meter);
    // 0x1000 counts before the wrap and 0x1000 after: 8192 × 61.035 µJ = 0.5 J.
    let (.., uj) = energies(&before, &after, &meter).remove(0);
    assert!(uj.abs_diff(500_000) <= 1, "{uj} µJ across the wrap");
    let (before_uj, max) = counter(&before.readings[0]);
    assert!(
        before_uj <= max.unwrap(),
        "a counter never exceeds its wrap point"
    );
}

#[test]
fn a_missing_unit_register_makes_the_meter_unavailable() {
    let host = Host::new("GenuineIntel", 6, 0x55, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    // Only the empty device: the unit register is past the end (EIO on hardware).
    let err = host.open().unwrap_err();
    assert!(
        err.reason
            .starts_with("cannot read the RAPL unit register 0x606 of")
            && err.reason.contains("GenuineIntel family 6h model 55h"),
        "{err}"
    );
    // Counters written, the unit register still 0.
    host.tree.write(0, INTEL_PKG_ENERGY, 1_000).unwrap();
    let err = host.open().unwrap_err();
    assert!(
        err.reason.starts_with("the RAPL unit register 0x606 of")
            && err.reason.contains("reads 0: not implemented"),
        "{err}"
    );
}

#[test]
fn registers_of_the_other_vendor_are_not_read() {
    // AMD registers on a host whose cpuinfo says Intel: Intel's unit register reads 0.
    let host = Host::new("GenuineIntel", 6, 0x55, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.write(0, AMD_POWER_UNIT, AMD_UNIT).unwrap();
    host.tree.write(0, AMD_PKG_ENERGY, 65_536).unwrap();
    let err = host.open().unwrap_err();
    assert!(err.reason.contains("unit register 0x606"), "{err}");

    // Intel registers on an AMD host: AMD's unit register is past the end of the device.
    let host = Host::new("AuthenticAMD", 0x17, 0x31, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.write(0, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
    host.tree.write(0, INTEL_PKG_ENERGY, 16_384).unwrap();
    let err = host.open().unwrap_err();
    assert!(err.reason.contains("unit register 0xC0010299"), "{err}");

    // Families before Zen have no RAPL MSRs; nor have other vendors.
    let host = Host::new("AuthenticAMD", 0x15, 0x02, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    let err = host.open().unwrap_err();
    assert!(err.reason.contains("from family 17h"), "{err}");
    let host = Host::new("CentaurHauls", 6, 0x0F, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    let err = host.open().unwrap_err();
    assert!(err.reason.starts_with("CentaurHauls family 6h"), "{err}");
}

#[test]
fn an_unreadable_device_says_why() {
    let host = Host::new("GenuineIntel", 6, 0x55, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.write(0, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
    host.tree.write(0, INTEL_PKG_ENERGY, 16_384).unwrap();
    let device = host.tree.msr_file(0);

    // Permission denied can only be seen by a user the mode applies to.
    set_mode(&device, 0o000);
    if is_root() {
        eprintln!("running as root: mode 000 does not deny; permission check not exercised");
        assert!(host.open().is_ok());
    } else {
        let err = host.open().unwrap_err();
        assert!(
            err.reason.starts_with("permission denied opening")
                && err.reason.contains("needs root, or CAP_SYS_RAWIO"),
            "{err}"
        );
    }
    set_mode(&device, 0o644);

    // A directory in place of the device opens but cannot be read, root or not.
    std::fs::remove_file(&device).unwrap();
    std::fs::create_dir(&device).unwrap();
    let err = host.open().unwrap_err();
    assert!(
        err.reason
            .starts_with("cannot read the RAPL unit register 0x606")
            && err.reason.contains("Is a directory"),
        "{err}"
    );
}

#[test]
fn missing_devices_and_the_default_config_say_what_to_do() {
    let host = Host::new("GenuineIntel", 6, 0x55, 2);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.add_cpu(1, 0, 1).unwrap();
    let err = MsrMeter::open(&MeterSettings {
        msr: MsrConfig::default(),
        ..host.settings.clone()
    })
    .unwrap_err();
    assert!(
        err.reason.contains("msr.enabled: false") && err.reason.contains("CVE-2020-8694"),
        "{err}"
    );

    // No device for either CPU of the package: the msr module is not loaded.
    std::fs::remove_dir_all(host.root()).unwrap();
    let err = host.open().unwrap_err();
    assert!(
        err.reason.starts_with("no MSR device to read:")
            && err.reason.ends_with(
                "0/msr and 1 other CPUs' devices not found (load the msr module: modprobe msr)"
            ),
        "{err}"
    );
}

#[test]
fn the_first_cpu_with_a_device_reads_the_package() {
    let host = Host::new("GenuineIntel", 6, 0x9E, 2);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.add_cpu(1, 0, 1).unwrap();
    host.tree.write(1, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
    host.tree.write(1, INTEL_PKG_ENERGY, 16_384).unwrap();
    std::fs::remove_file(host.tree.msr_file(0)).unwrap();
    let mut meter = host.open().unwrap();
    assert_eq!(&*read(&mut meter)[0].path, "msr:1:package");
}

#[test]
fn psys_is_read_once_for_the_machine() {
    let host = intel_two_sockets();
    for cpu in [0, 2] {
        host.tree.write(cpu, INTEL_PSYS_ENERGY, 16_384).unwrap();
    }
    let mut meter = host.open().unwrap();
    let psys: Vec<String> = read(&mut meter)
        .iter()
        .filter(|r| &*r.zone == "psys")
        .map(|r| r.path.to_string())
        .collect();
    assert_eq!(psys, vec!["msr:0:psys"]);
}

#[test]
fn rapl_zones_filter_and_the_interval_check() {
    let host = intel_two_sockets();
    let only_dram = MeterSettings {
        rapl_zones: vec!["DRAM".into()],
        ..host.settings.clone()
    };
    assert_eq!(
        MsrMeter::open(&only_dram).unwrap().zones(),
        vec!["dram", "dram"]
    );
    let none = MeterSettings {
        rapl_zones: vec!["psys".into()],
        ..host.settings.clone()
    };
    let err = MsrMeter::open(&none).unwrap_err();
    assert!(err.reason.contains("rapl.zones [\"psys\"]"), "{err}");

    // The DRAM counter (2^-16 J) wraps in 65 s at 1 kW: a 2-minute interval could miss a wrap.
    let slow = MeterSettings {
        interval: Duration::from_secs(120),
        ..host.settings.clone()
    };
    let err = MsrMeter::open(&slow).unwrap_err();
    assert!(
        err.reason
            .starts_with("monitor.interval 120s is longer than the 65s")
            && err.reason.contains("msr:0:dram"),
        "{err}"
    );
    // Without DRAM, the package counters (2^-14 J) allow up to 262 s.
    let package_only = MeterSettings {
        rapl_zones: vec!["package".into()],
        ..slow
    };
    assert!(MsrMeter::open(&package_only).is_ok());
}

#[test]
fn a_device_that_goes_away_is_a_read_error_until_it_answers_again() {
    let host = Host::new("GenuineIntel", 6, 0x9E, 1);
    host.tree.add_cpu(0, 0, 0).unwrap();
    host.tree.write(0, INTEL_POWER_UNIT, INTEL_UNIT).unwrap();
    host.tree.write(0, INTEL_PKG_ENERGY, 16_384).unwrap();
    let mut meter = host.open().unwrap();
    // The CPU went offline: its registers fail to read.
    std::fs::OpenOptions::new()
        .write(true)
        .open(host.tree.msr_file(0))
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut out = Vec::new();
    let err = meter.read(&MeterInput::default(), &mut out).unwrap_err();
    assert!(matches!(err, ReadError::Io { ref path, .. } if path.ends_with("0/msr@0x611")));
    host.tree.write(0, INTEL_PKG_ENERGY, 32_768).unwrap();
    assert_eq!(counter(&read(&mut meter)[0]).0, 2_000_000);
}

#[test]
fn probe_advises_the_msr_meter_when_powercap_is_empty_on_a_rapl_cpu() {
    let host = Host::new("GenuineIntel", 6, 0x55, 1);
    let disabled = MeterSettings {
        msr: MsrConfig {
            enabled: false,
            root: host.root(),
        },
        ..host.settings.clone()
    };
    // No device yet: load the module, then enable the meter.
    let hint = rapl_hint(&disabled).unwrap();
    assert!(
        hint.contains("GenuineIntel family 6h model 55h")
            && hint.contains("`modprobe msr`")
            && hint.contains("`msr.enabled: true`"),
        "{hint}"
    );
    // The rapl row carries it after its own reason.
    let err = rapl_row_error(&disabled);
    assert!(err.contains("powercap") && err.ends_with(&hint), "{err}");

    // Devices present: only the switch is missing.
    host.tree.add_cpu(0, 0, 0).unwrap();
    let hint = rapl_hint(&disabled).unwrap();
    assert!(
        !hint.contains("modprobe") && hint.contains("`msr.enabled: true`"),
        "{hint}"
    );
    // Enabled already, or not a RAPL CPU, or powercap has zones: nothing to advise.
    assert_eq!(rapl_hint(&host.settings), None);
    MsrTree::write_cpuinfo(&host.settings.procfs, "ARM", 8, 1, 1).unwrap();
    assert_eq!(rapl_hint(&disabled), None);
    MsrTree::write_cpuinfo(&host.settings.procfs, "AuthenticAMD", 0x19, 1, 1).unwrap();
    assert!(rapl_hint(&disabled).is_some());
    // A virtual machine: hypervisors do not pass RAPL through, so no advice.
    std::fs::write(
        host.settings.procfs.join("cpuinfo"),
        "processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n\
         flags\t\t: fpu msr hypervisor\n\n",
    )
    .unwrap();
    assert_eq!(rapl_hint(&disabled), None);
    MsrTree::write_cpuinfo(&host.settings.procfs, "AuthenticAMD", 0x19, 1, 1).unwrap();
    assert!(rapl_hint(&disabled).is_some());
    PowercapTree::create(&disabled.sysfs, &[("package-0", 1_000)]).unwrap();
    assert_eq!(rapl_hint(&disabled), None);
}

fn rapl_row_error(settings: &MeterSettings) -> String {
    let rapl: MeterName = "rapl".parse().unwrap();
    match rapl.open(&OpenContext::new(settings)) {
        Ok(_) => panic!("rapl opened without powercap"),
        Err(e) => e.reason,
    }
}

fn set_mode(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

fn is_root() -> bool {
    // The effective uid is the second field of /proc/self/status's `Uid:` line.
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|ids| ids.split_whitespace().nth(1).map(|e| e == "0"))
        })
        .unwrap_or(false)
}

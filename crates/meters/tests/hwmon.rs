//! The hwmon meters on simulated sysfs trees: `hwmon` (CPU domain, every chip but the ACPI
//! power meter) and `acpi` (platform domain, the ACPI power meter only).

use std::time::Duration;

use kepler_core::MeterInput;
use kepler_core::{
    zone_energies, EnergySnapshot, MicroJoules, PowerDomain, PowerMeter, ReadError, Watts,
    ZoneReading, ZoneSample,
};
use kepler_meters::fixtures::HwmonTree;
use kepler_meters::HwmonMeter;

fn read(meter: &mut HwmonMeter) -> Vec<ZoneReading> {
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out
}

fn watts(r: &ZoneReading) -> f64 {
    match r.sample {
        ZoneSample::Power(Watts(w)) => w,
        ZoneSample::Energy { .. } => panic!("{} should be a power reading", r.path),
    }
}

fn none() -> Vec<String> {
    Vec::new()
}

/// A host with one chip of each kind this meter understands, plus chips it must ignore.
fn mixed_host(sysfs: &std::path::Path) -> HwmonTree {
    let mut tree = HwmonTree::create(sysfs).unwrap();
    // hwmon0: temperatures only.
    tree.add_chip(
        Some("coretemp"),
        &[
            ("temp1_input", "45000\n"),
            ("temp1_label", "Package id 0\n"),
        ],
    )
    .unwrap();
    // hwmon1: the ACPI power meter, 215.5 W.
    tree.add_chip(
        Some("power_meter"),
        &[
            ("power1_average", "215500000\n"),
            ("power1_average_interval", "1000\n"),
        ],
    )
    .unwrap();
    // hwmon2: an energy counter, with a power file on the same channel that must not be read too.
    tree.add_linked_chip(
        Some("amd_energy"),
        &[("energy1_input", "123456789\n"), ("power1_input", "1\n")],
    )
    .unwrap();
    // hwmon3: labelled power, average preferred over input.
    tree.add_chip(
        Some("zenpower"),
        &[
            ("power1_average", "30000000\n"),
            ("power1_input", "31000000\n"),
            ("power1_label", "SVI2 P Core\n"),
        ],
    )
    .unwrap();
    // hwmon4: only voltage and current; in1 has no current and in3 no voltage partner.
    tree.add_linked_chip(
        Some("ina3221"),
        &[
            ("in0_input", "12000\n"),
            ("curr0_input", "1500\n"),
            ("in1_input", "5000\n"),
            ("in2_input", "3300\n"),
            ("curr2_input", "2000\n"),
            ("curr3_input", "1\n"),
        ],
    )
    .unwrap();
    tree
}

#[test]
fn each_kind_of_chip_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = mixed_host(dir.path());
    // The ACPI power meter is the platform domain's meter; the CPU meter takes the rest.
    let mut platform = HwmonMeter::open_platform(dir.path(), &none()).unwrap();
    assert_eq!(platform.name(), "acpi");
    assert_eq!(platform.domain(), PowerDomain::Platform);
    assert_eq!(platform.zones(), vec!["platform"]);
    let mut meter = HwmonMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.name(), "hwmon");
    assert_eq!(meter.domain(), PowerDomain::Cpu);
    assert_eq!(
        meter.zones(),
        vec!["amd_energy", "svi2_p_core", "ina3221-in0", "ina3221-in2"]
    );

    let p = read(&mut platform);
    let class = dir.path().join("class/hwmon");
    assert_eq!(
        &*p[0].path,
        class.join("hwmon1/power1_average").to_str().unwrap()
    );
    assert!((watts(&p[0]) - 215.5).abs() < 1e-9);

    let r = read(&mut meter);
    assert_eq!(
        &*r[0].path,
        class.join("hwmon2/energy1_input").to_str().unwrap()
    );
    assert_eq!(
        r[0].sample,
        ZoneSample::Energy {
            counter: MicroJoules(123_456_789),
            max: None
        }
    );

    assert!(r[1].path.ends_with("hwmon3/power1_average"));
    assert!((watts(&r[1]) - 30.0).abs() < 1e-9);

    // 12 V × 1.5 A and 3.3 V × 2 A.
    assert!((watts(&r[2]) - 18.0).abs() < 1e-9);
    assert!((watts(&r[3]) - 6.6).abs() < 1e-9);
    assert_eq!(
        &*r[2].path,
        format!("{}*curr0_input", class.join("hwmon4/in0_input").display())
    );
}

#[test]
fn readings_follow_the_files_and_integrate_in_core() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = HwmonTree::create(dir.path()).unwrap();
    let acpi = tree
        .add_chip(Some("power_meter"), &[("power1_average", "100000000\n")])
        .unwrap();
    let energy = tree
        .add_linked_chip(Some("amd_energy"), &[("energy1_input", "1000\n")])
        .unwrap();
    let mut platform = HwmonMeter::open_platform(dir.path(), &none()).unwrap();
    let mut meter = HwmonMeter::open(dir.path(), &none()).unwrap();
    let snapshot = |at: u64, meter: &mut HwmonMeter| EnergySnapshot {
        at: Duration::from_secs(at),
        readings: read(meter),
    };

    let before = [snapshot(10, &mut platform), snapshot(10, &mut meter)];
    HwmonTree::write(&acpi, "power1_average", "200000000\n").unwrap();
    HwmonTree::write(&energy, "energy1_input", "5001000\n").unwrap();
    let after = [snapshot(12, &mut platform), snapshot(12, &mut meter)];

    let meta = std::sync::Arc::new(platform.meta());
    let (energies, issues) = zone_energies(&before[0], &after[0], &meta);
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(&*energies[0].zone, "platform");
    assert_eq!(energies[0].meta.domain, PowerDomain::Platform);
    assert_eq!(energies[0].energy, MicroJoules(400_000_000));
    let meta = std::sync::Arc::new(meter.meta());
    let (energies, issues) = zone_energies(&before[1], &after[1], &meta);
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(&*energies[0].zone, "amd_energy");
    assert_eq!(energies[0].energy, MicroJoules(5_000_000));
}

#[test]
fn an_all_ones_power_sensor_is_dropped_not_exported() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = HwmonTree::create(dir.path()).unwrap();
    let acpi = tree
        .add_linked_chip(Some("power_meter"), &[("power1_average", "200000000\n")])
        .unwrap();
    let mut platform = HwmonMeter::open_platform(dir.path(), &none()).unwrap();
    let meta = std::sync::Arc::new(platform.meta());
    let snapshot = |at: u64, meter: &mut HwmonMeter| EnergySnapshot {
        at: Duration::from_secs(at),
        readings: read(meter),
    };
    let before = snapshot(10, &mut platform);
    HwmonTree::write(&acpi, "power1_average", &format!("{}\n", u64::MAX)).unwrap();
    let after = snapshot(11, &mut platform);
    let (energies, issues) = zone_energies(&before, &after, &meta);
    assert!(energies.is_empty(), "{energies:?}");
    assert!(
        matches!(issues[..], [kepler_core::DeltaIssue::Implausible { .. }]),
        "{issues:?}"
    );
}

#[test]
fn attributes_in_the_device_directory_are_found() {
    // Older ACPI power meter drivers keep name and attributes under hwmonN/device/.
    let dir = tempfile::tempdir().unwrap();
    let mut tree = HwmonTree::create(dir.path()).unwrap();
    tree.add_linked_chip(
        None,
        &[
            ("device/name", "power_meter\n"),
            ("device/power1_average", "90000000\n"),
        ],
    )
    .unwrap();
    let mut meter = HwmonMeter::open_platform(dir.path(), &none()).unwrap();
    let r = read(&mut meter);
    assert_eq!(&*r[0].zone, "platform");
    assert!(
        r[0].path.ends_with("hwmon0/device/power1_average"),
        "{}",
        r[0].path
    );
    assert!((watts(&r[0]) - 90.0).abs() < 1e-9);
}

#[test]
fn several_unlabelled_power_sensors_are_numbered() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = HwmonTree::create(dir.path()).unwrap();
    tree.add_chip(
        Some("ina2xx"),
        &[("power1_input", "1000000\n"), ("power2_input", "2000000\n")],
    )
    .unwrap();
    let meter = HwmonMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.zones(), vec!["ina2xx-power1", "ina2xx-power2"]);
}

#[test]
fn zone_filter_keeps_named_zones() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = mixed_host(dir.path());
    let filter = ["PLATFORM".to_string(), "svi2_p_core".to_string()];
    let meter = HwmonMeter::open(dir.path(), &filter).unwrap();
    assert_eq!(meter.zones(), vec!["svi2_p_core"]);
    let platform = HwmonMeter::open_platform(dir.path(), &filter).unwrap();
    assert_eq!(platform.zones(), vec!["platform"]);

    let gpu = ["gpu".to_string()];
    for err in [
        HwmonMeter::open(dir.path(), &gpu).unwrap_err(),
        HwmonMeter::open_platform(dir.path(), &gpu).unwrap_err(),
    ] {
        assert!(
            err.reason
                .contains("no hwmon zone matches experimental.hwmon.zones"),
            "{err}"
        );
    }
    let err = HwmonMeter::open(dir.path(), &gpu).unwrap_err();
    assert!(err.reason.contains("\"svi2_p_core\""), "{err}");
    let err = HwmonMeter::open_platform(dir.path(), &gpu).unwrap_err();
    assert!(
        err.reason.ends_with("this host has [\"platform\"]"),
        "{err}"
    );
}

#[test]
fn unreadable_sensor_is_skipped_at_open_and_an_error_later() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = HwmonTree::create(dir.path()).unwrap();
    let good = tree
        .add_chip(Some("zenpower"), &[("power1_average", "100000000\n")])
        .unwrap();
    // A directory stands in for a file the driver cannot read (ENODATA on real ACPI meters).
    tree.add_chip(Some("broken"), &[("power1_input/x", "")])
        .unwrap();
    let mut meter = HwmonMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.zones(), vec!["zenpower"]);

    std::fs::remove_file(good.join("power1_average")).unwrap();
    let mut out = Vec::new();
    assert!(matches!(
        meter.read(&MeterInput::default(), &mut out),
        Err(ReadError::Io { .. })
    ));
}

#[test]
fn unavailable_reasons_are_precise() {
    let dir = tempfile::tempdir().unwrap();
    let err = HwmonMeter::open(dir.path(), &none()).unwrap_err();
    assert!(
        err.reason
            .ends_with("class/hwmon not found: kernel without hwmon support"),
        "{err}"
    );

    let mut tree = HwmonTree::create(dir.path()).unwrap();
    let err = HwmonMeter::open(dir.path(), &none()).unwrap_err();
    assert!(err.reason.starts_with("no hwmon chips in"), "{err}");

    tree.add_chip(Some("coretemp"), &[("temp1_input", "40000\n")])
        .unwrap();
    tree.add_linked_chip(Some("nct6775"), &[("in0_input", "900\n")])
        .unwrap();
    let err = HwmonMeter::open(dir.path(), &none()).unwrap_err();
    assert_eq!(
        err.reason,
        "no hwmon chip reports power or energy (chips: coretemp, nct6775)"
    );

    let err = HwmonMeter::open_platform(dir.path(), &none()).unwrap_err();
    assert_eq!(
        err.reason,
        "no ACPI power meter (hwmon chip power_meter) reports power (chips: coretemp, nct6775)"
    );

    tree.add_chip(Some("power_meter"), &[("power1_average", "garbage\n")])
        .unwrap();
    // The CPU meter never takes the ACPI power meter, and says where it went.
    let err = HwmonMeter::open(dir.path(), &none()).unwrap_err();
    assert_eq!(
        err.reason,
        "no hwmon chip but the ACPI power meter reports power or energy (chips: coretemp, nct6775, power_meter); the ACPI power meter feeds the platform domain (meter acpi)"
    );
    let err = HwmonMeter::open_platform(dir.path(), &none()).unwrap_err();
    assert!(
        err.reason
            .starts_with("no readable hwmon power or energy sensor:"),
        "{err}"
    );
    assert!(err.reason.contains("power1_average"), "{err}");
}

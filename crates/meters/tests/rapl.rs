//! The powercap RAPL meter on simulated sysfs trees.

use std::fs;
use std::path::Path;
use std::time::Duration;

use kepler_core::MeterInput;
use kepler_core::{
    zone_energies, EnergySnapshot, MicroJoules, PowerMeter, ReadError, ZoneReading, ZoneSample,
};
use kepler_meters::fixtures::PowercapTree;
use kepler_meters::RaplMeter;

const MAX: u64 = 262_143_328_850;

fn read(meter: &mut RaplMeter) -> Vec<ZoneReading> {
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out
}

fn snapshot(meter: &mut RaplMeter, secs: u64) -> EnergySnapshot {
    EnergySnapshot {
        at: Duration::from_secs(secs),
        readings: read(meter),
    }
}

fn counter(r: &ZoneReading) -> (u64, Option<u64>) {
    match r.sample {
        ZoneSample::Energy { counter, max } => (counter.0, max.map(|m| m.0)),
        ZoneSample::Power(_) => panic!("RAPL reports energy"),
    }
}

fn zones(readings: &[ZoneReading]) -> Vec<&str> {
    readings.iter().map(|r| &*r.zone).collect()
}

fn none() -> Vec<String> {
    Vec::new()
}

#[test]
fn single_socket_reports_raw_counters_and_paths() {
    let dir = tempfile::tempdir().unwrap();
    let tree = PowercapTree::create(
        dir.path(),
        &[("package-0", MAX), ("core", MAX), ("dram", 65_532_610_987)],
    )
    .unwrap();
    tree.set_energy(0, 1_000).unwrap();
    tree.set_energy(1, 400).unwrap();
    tree.set_energy(2, 77).unwrap();

    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.name(), "rapl");
    assert_eq!(meter.provenance(), kepler_core::Provenance::Measured);
    assert_eq!(meter.zones(), vec!["package", "core", "dram"]);

    let r = read(&mut meter);
    assert_eq!(zones(&r), vec!["package", "core", "dram"]);
    assert_eq!(counter(&r[0]), (1_000, Some(MAX)));
    assert_eq!(counter(&r[1]), (400, Some(MAX)));
    assert_eq!(counter(&r[2]), (77, Some(65_532_610_987)));
    // The kernel layout: core and dram are sub-zones of the package.
    let powercap = dir.path().join("class/powercap");
    assert_eq!(&*r[0].path, powercap.join("intel-rapl:0").to_str().unwrap());
    assert_eq!(
        &*r[1].path,
        powercap.join("intel-rapl:0:0").to_str().unwrap()
    );
    assert_eq!(
        &*r[2].path,
        powercap.join("intel-rapl:0:1").to_str().unwrap()
    );

    // Values are re-read on every call.
    tree.set_energy(0, 5_000).unwrap();
    assert_eq!(counter(&read(&mut meter)[0]).0, 5_000);
}

#[test]
fn dual_socket_is_summed_and_unwrapped_by_core() {
    let dir = tempfile::tempdir().unwrap();
    let max = 1_000_000;
    let tree = PowercapTree::create(
        dir.path(),
        &[
            ("package-0", max),
            ("dram", max),
            ("package-1", max),
            ("dram", max),
        ],
    )
    .unwrap();
    // Socket 1's package is about to wrap.
    tree.set_energy(0, 100_000).unwrap();
    tree.set_energy(1, 10_000).unwrap();
    tree.set_energy(2, 990_000).unwrap();
    tree.set_energy(3, 20_000).unwrap();

    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    // Meters do not sum: one reading per socket.
    assert_eq!(meter.zones(), vec!["package", "dram", "package", "dram"]);
    let before = snapshot(&mut meter, 0);

    assert_eq!(tree.add_energy(0, 50_000).unwrap(), 150_000);
    assert_eq!(tree.add_energy(1, 3_000).unwrap(), 13_000);
    // 990_000 + 30_000 wraps past 1_000_000 (the counter counts 0..=max).
    assert_eq!(tree.add_energy(2, 30_000).unwrap(), 19_999);
    assert_eq!(tree.add_energy(3, 4_000).unwrap(), 24_000);
    let after = snapshot(&mut meter, 5);

    // Each socket's counter stays raw: no unwrapping in the meter.
    assert_eq!(counter(&after.readings[2]), (19_999, Some(max)));

    let (energies, issues) = zone_energies(&before, &after, &std::sync::Arc::new(meter.meta()));
    assert!(issues.is_empty(), "{issues:?}");
    assert_eq!(energies.len(), 2);
    assert_eq!(&*energies[0].zone, "package");
    assert_eq!(&*energies[0].path, "aggregated-package");
    assert_eq!(energies[0].energy, MicroJoules(50_000 + 30_000));
    assert_eq!(&*energies[1].zone, "dram");
    assert_eq!(energies[1].energy, MicroJoules(3_000 + 4_000));
}

#[test]
fn mmio_duplicate_of_the_package_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = PowercapTree::create(dir.path(), &[("package-0", MAX), ("dram", MAX)]).unwrap();
    let mmio = tree
        .add_zone("intel-rapl-mmio:0", "package-0", Some(MAX))
        .unwrap();
    tree.set_energy(0, 10).unwrap();
    tree.set_energy(mmio, 11).unwrap();

    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.zones(), vec!["package", "dram"]);
    let r = read(&mut meter);
    assert!(r[0].path.ends_with("/intel-rapl:0"), "{}", r[0].path);
    assert_eq!(counter(&r[0]).0, 10);
}

#[test]
fn mmio_zone_without_a_twin_is_kept() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = PowercapTree::empty(dir.path()).unwrap();
    let pkg = tree
        .add_zone("intel-rapl-mmio:0", "package-0", Some(MAX))
        .unwrap();
    tree.set_energy(pkg, 3).unwrap();
    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    let r = read(&mut meter);
    assert_eq!(zones(&r), vec!["package"]);
    assert!(r[0].path.ends_with("/intel-rapl-mmio:0"));
}

#[test]
fn zone_filter_is_case_insensitive_and_uses_mapped_names() {
    let dir = tempfile::tempdir().unwrap();
    PowercapTree::create(
        dir.path(),
        &[
            ("package-0", MAX),
            ("core", MAX),
            ("dram", MAX),
            ("package-1", MAX),
            ("dram", MAX),
            ("psys", MAX),
        ],
    )
    .unwrap();
    let filter = vec!["Package".to_string(), " DRAM ".to_string()];
    let meter = RaplMeter::open(dir.path(), &filter).unwrap();
    assert_eq!(meter.zones(), vec!["package", "dram", "package", "dram"]);

    let meter = RaplMeter::open(dir.path(), &["psys".to_string()]).unwrap();
    assert_eq!(meter.zones(), vec!["psys"]);

    let err = RaplMeter::open(dir.path(), &["gpu".to_string()]).unwrap_err();
    assert!(
        err.reason.contains("no RAPL zone matches rapl.zones"),
        "{err}"
    );
    assert!(err.reason.contains("\"package\""), "{err}");
}

#[test]
fn missing_or_garbage_max_is_unknown() {
    let dir = tempfile::tempdir().unwrap();
    let mut tree = PowercapTree::empty(dir.path()).unwrap();
    tree.add_zone("intel-rapl:0", "package-0", None).unwrap();
    let garbage = tree.add_zone("intel-rapl:1", "package-1", Some(5)).unwrap();
    let zero = tree.add_zone("intel-rapl:2", "package-2", Some(0)).unwrap();
    fs::write(
        tree.zone_dir(garbage).unwrap().join("max_energy_range_uj"),
        "lots\n",
    )
    .unwrap();
    assert!(tree.zone_dir(zero).is_some());

    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    let r = read(&mut meter);
    assert_eq!(r.len(), 3);
    assert!(r.iter().all(|r| counter(r).1.is_none()), "{r:?}");
}

#[test]
fn zone_that_breaks_later_fails_alone() {
    let dir = tempfile::tempdir().unwrap();
    let tree = PowercapTree::create(dir.path(), &[("package-0", MAX), ("dram", MAX)]).unwrap();
    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    let mut previous = snapshot(&mut meter, 0);

    let energy = tree.zone_dir(1).unwrap().join("energy_uj");
    let meta = std::sync::Arc::new(meter.meta());
    // Missing, a directory (EISDIR), garbage: each time the package goes on being counted
    // and only dram is left out.
    let breakages: [&dyn Fn(); 3] = [
        &|| fs::remove_file(&energy).unwrap(),
        &|| fs::create_dir(&energy).unwrap(),
        &|| {
            fs::remove_dir(&energy).unwrap();
            fs::write(&energy, "not a number\n").unwrap();
        },
    ];
    for (step, brk) in breakages.iter().enumerate() {
        brk();
        tree.add_energy(0, 5_000_000).unwrap();
        let current = snapshot(&mut meter, step as u64 + 1);
        assert_eq!(zones(&current.readings), vec!["package"], "step {step}");
        let (energies, issues) = zone_energies(&previous, &current, &meta);
        let got: Vec<(&str, u64)> = energies.iter().map(|e| (&*e.zone, e.energy.0)).collect();
        // The first interval loses dram (its reading went missing); later ones have no
        // dram baseline at all.
        assert_eq!(got, vec![("package", 5_000_000)], "step {step}: {issues:?}");
        previous = current;
    }

    // Every zone broken: then the meter itself fails, naming a file.
    let package = tree.zone_dir(0).unwrap().join("energy_uj");
    fs::remove_file(&package).unwrap();
    let mut out = Vec::new();
    match meter.read(&MeterInput::default(), &mut out) {
        Err(ReadError::Io { path, .. }) => assert!(path.ends_with("energy_uj"), "{path}"),
        other => panic!("expected an I/O error, got {other:?}"),
    }

    // And both recover once the files are back.
    tree.set_energy(0, 1).unwrap();
    tree.set_energy(1, 9).unwrap();
    out.clear();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    assert_eq!(zones(&out), vec!["package", "dram"]);
    assert_eq!(counter(&out[1]).0, 9);
}

#[test]
fn unavailable_reasons_are_precise() {
    let dir = tempfile::tempdir().unwrap();
    let err = RaplMeter::open(dir.path(), &none()).unwrap_err();
    assert_eq!(
        err.reason,
        format!(
            "{} not found: kernel lacks powercap/intel_rapl or not a RAPL CPU",
            dir.path().join("class/powercap").display()
        )
    );

    // Only the control type directory, no zones (a VM with the module loaded).
    PowercapTree::empty(dir.path()).unwrap();
    let err = RaplMeter::open(dir.path(), &none()).unwrap_err();
    assert!(err.reason.starts_with("no intel-rapl zones in"), "{err}");

    // A zone whose energy cannot be read at all is skipped; with none left, the reason says why.
    let mut tree = PowercapTree::empty(dir.path()).unwrap();
    let z = tree
        .add_zone("intel-rapl:0", "package-0", Some(MAX))
        .unwrap();
    let energy = tree.zone_dir(z).unwrap().join("energy_uj");
    fs::remove_file(&energy).unwrap();
    fs::create_dir(&energy).unwrap();
    let err = RaplMeter::open(dir.path(), &none()).unwrap_err();
    assert!(err.reason.starts_with("no readable RAPL zone:"), "{err}");
    assert!(err.reason.contains("energy_uj"), "{err}");
}

#[test]
fn unreadable_zone_is_skipped_when_others_work() {
    let dir = tempfile::tempdir().unwrap();
    let tree = PowercapTree::create(dir.path(), &[("package-0", MAX), ("dram", MAX)]).unwrap();
    fs::write(tree.zone_dir(1).unwrap().join("energy_uj"), "").unwrap();
    let meter = RaplMeter::open(dir.path(), &none()).unwrap();
    assert_eq!(meter.zones(), vec!["package"]);
}

#[test]
fn zone_dir_matches_reported_path() {
    let dir = tempfile::tempdir().unwrap();
    let tree = PowercapTree::create(dir.path(), &[("package-0", MAX)]).unwrap();
    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    let r = read(&mut meter);
    assert_eq!(Path::new(&*r[0].path), tree.zone_dir(0).unwrap());
    assert_eq!(tree.powercap_dir(), dir.path().join("class/powercap"));
}

#[test]
fn symlinked_zone_directories_are_followed() {
    // On a real host the class entries are links into /sys/devices/virtual/powercap.
    let dir = tempfile::tempdir().unwrap();
    let real = dir
        .path()
        .join("devices/virtual/powercap/intel-rapl/intel-rapl:0");
    fs::create_dir_all(&real).unwrap();
    fs::write(real.join("name"), "package-0\n").unwrap();
    fs::write(real.join("energy_uj"), "4242\n").unwrap();
    fs::write(real.join("max_energy_range_uj"), "999999\n").unwrap();
    let class = dir.path().join("class/powercap");
    fs::create_dir_all(&class).unwrap();
    std::os::unix::fs::symlink(&real, class.join("intel-rapl:0")).unwrap();

    let mut meter = RaplMeter::open(dir.path(), &none()).unwrap();
    let r = read(&mut meter);
    assert_eq!(counter(&r[0]), (4242, Some(999_999)));
    assert_eq!(&*r[0].path, class.join("intel-rapl:0").to_str().unwrap());
}

//! Opening meters by name and probing them, as the agent and `kepler probe` do.

use std::path::PathBuf;

use kepler_meters::fixtures::{HwmonTree, PowercapTree};
use kepler_meters::{open_meter, probe, MeterSettings, METER_NAMES};

#[test]
fn meters_open_by_name() {
    let dir = tempfile::tempdir().unwrap();
    PowercapTree::create(
        dir.path(),
        &[("package-0", 1_000), ("core", 1_000), ("dram", 1_000)],
    )
    .unwrap();
    let mut hwmon = HwmonTree::create(dir.path()).unwrap();
    hwmon
        .add_chip(Some("power_meter"), &[("power1_average", "1000000\n")])
        .unwrap();

    let settings = MeterSettings {
        sysfs: dir.path().to_path_buf(),
        rapl_zones: vec!["package".into()],
        ..MeterSettings::default()
    };
    for name in METER_NAMES {
        let meter = open_meter(name, &settings).unwrap();
        assert_eq!(meter.name(), name);
    }
    assert_eq!(
        open_meter("RAPL", &settings).unwrap().zones(),
        vec!["package"]
    );

    let reports = probe(&["rapl", "hwmon", "fake", "ipmi"], &settings);
    let outcomes: Vec<_> = reports
        .iter()
        .map(|r| (r.name.as_str(), r.outcome.clone()))
        .collect();
    assert_eq!(outcomes[0], ("rapl", Ok(vec!["package".to_string()])));
    assert_eq!(outcomes[1], ("hwmon", Ok(vec!["platform".to_string()])));
    assert_eq!(
        outcomes[2],
        (
            "fake",
            Ok(vec![
                "package".to_string(),
                "core".to_string(),
                "dram".to_string()
            ])
        )
    );
    assert_eq!(
        outcomes[3].1.as_ref().unwrap_err().reason,
        "unknown meter ipmi"
    );
}

#[test]
fn defaults_point_at_the_real_sysfs() {
    let s = MeterSettings::default();
    assert_eq!(s.sysfs, PathBuf::from("/sys"));
    assert!(s.rapl_zones.is_empty() && s.hwmon_zones.is_empty());
}

#[test]
fn probing_this_host_never_panics() {
    // On the development VM neither powercap nor hwmon exist; on real hosts either may. Both
    // must come back as an answer, never a panic.
    let reports = probe(&METER_NAMES, &MeterSettings::default());
    assert_eq!(reports.len(), 3);
    for r in &reports {
        match &r.outcome {
            Ok(zones) => assert!(!zones.is_empty(), "{r:?}"),
            Err(why) => assert!(!why.reason.is_empty(), "{r:?}"),
        }
    }
    assert!(reports[2].outcome.is_ok());
}

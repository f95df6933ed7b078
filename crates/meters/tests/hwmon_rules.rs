//! `experimental.hwmon.chipRules` on simulated sysfs trees: which voltage and current channels
//! of chips without power sensors are multiplied, and which are left out.

use kepler_core::{MeterInput, PowerMeter, Watts, ZoneReading, ZoneSample};
use kepler_meters::fixtures::HwmonTree;
use kepler_meters::{ChipRule, HwmonMeter};

fn readings(meter: &mut HwmonMeter) -> Vec<(String, f64)> {
    let mut out: Vec<ZoneReading> = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out.iter()
        .map(|r| match r.sample {
            ZoneSample::Power(Watts(w)) => (r.path.to_string(), w),
            ZoneSample::Energy { .. } => panic!("{} should be a power reading", r.path),
        })
        .collect()
}

/// A regulator whose current belongs to its output voltage (in2), a three-channel monitor
/// whose third channel measures nothing useful, and a chip no rule names.
fn host(sysfs: &std::path::Path) -> HwmonTree {
    let mut tree = HwmonTree::create(sysfs).unwrap();
    tree.add_chip(
        Some("max20730"),
        &[
            ("in1_input", "12000\n"),
            ("in2_input", "1800\n"),
            ("curr1_input", "10000\n"),
        ],
    )
    .unwrap();
    tree.add_chip(
        Some("ina3221"),
        &[
            ("in1_input", "5000\n"),
            ("curr1_input", "1000\n"),
            ("in2_input", "3300\n"),
            ("curr2_input", "2000\n"),
            ("in3_input", "1000\n"),
            ("curr3_input", "3000\n"),
        ],
    )
    .unwrap();
    tree.add_chip(
        Some("other"),
        &[("in1_input", "2000\n"), ("curr1_input", "500\n")],
    )
    .unwrap();
    tree
}

fn rules(yaml: &str) -> Vec<ChipRule> {
    serde_yaml::from_str(yaml).unwrap()
}

fn close(got: &[(String, f64)], want: &[(&str, f64)]) {
    assert_eq!(got.len(), want.len(), "{got:?}");
    for ((path, w), (suffix, expected)) in got.iter().zip(want) {
        assert!(path.ends_with(suffix), "{path} should end with {suffix}");
        assert!(
            (w - expected).abs() < 1e-9,
            "{path}: {w} W, want {expected} W"
        );
    }
}

#[test]
fn without_rules_same_numbered_channels_pair() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = host(dir.path());
    let mut meter = HwmonMeter::open_with_rules(dir.path(), &[], &[]).unwrap();
    close(
        &readings(&mut meter),
        &[
            ("hwmon0/in1_input*curr1_input", 120.0),
            ("hwmon1/in1_input*curr1_input", 5.0),
            ("hwmon1/in2_input*curr2_input", 6.6),
            ("hwmon1/in3_input*curr3_input", 3.0),
            ("hwmon2/in1_input*curr1_input", 1.0),
        ],
    );
}

#[test]
fn rules_pair_and_skip_the_named_chips_only() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = host(dir.path());
    let rules = rules(
        "- name: MAX20730\n  pairings: {2: 1}\n\
         - name: ina3221\n  useSameIndex: true\n  skipVoltages: [3]\n",
    );
    let mut meter = HwmonMeter::open_with_rules(dir.path(), &[], &rules).unwrap();
    assert_eq!(
        meter.zones(),
        ["max20730", "ina3221-in1", "ina3221-in2", "other"]
    );
    close(
        &readings(&mut meter),
        &[
            // 1.8 V × 10 A: the output rail, not the 12 V input.
            ("hwmon0/in2_input*curr1_input", 18.0),
            ("hwmon1/in1_input*curr1_input", 5.0),
            ("hwmon1/in2_input*curr2_input", 6.6),
            ("hwmon2/in1_input*curr1_input", 1.0),
        ],
    );
}

#[test]
fn skipped_currents_and_absent_pairings() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = host(dir.path());
    // ina3221's curr1 is skipped; max20730's pairing names channels the chip lacks, so it
    // keeps same-number pairing as upstream does.
    let rules = rules(
        "- name: ina3221\n  useSameIndex: true\n  skipCurrents: [1]\n\
         - name: max20730\n  pairings: {7: 7}\n",
    );
    let mut meter = HwmonMeter::open_with_rules(dir.path(), &[], &rules).unwrap();
    close(
        &readings(&mut meter),
        &[
            ("hwmon0/in1_input*curr1_input", 120.0),
            ("hwmon1/in2_input*curr2_input", 6.6),
            ("hwmon1/in3_input*curr3_input", 3.0),
            ("hwmon2/in1_input*curr1_input", 1.0),
        ],
    );
}

#[test]
fn malformed_rules_are_rejected_by_serde() {
    for bad in [
        "- name: x\n  pairings: [1, 2]\n",
        "- name: x\n  skipVoltages: one\n",
        "- name: x\n  useSameIndex: maybe\n",
        "- pairings: {1: 1}\n",
    ] {
        assert!(serde_yaml::from_str::<Vec<ChipRule>>(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_registry_row_applies_the_settings_rules() {
    let dir = tempfile::tempdir().unwrap();
    let _tree = host(dir.path());
    let settings = kepler_meters::MeterSettings {
        sysfs: dir.path().to_path_buf(),
        hwmon_chip_rules: rules("- name: ina3221\n  useSameIndex: true\n  skipVoltages: [1, 2]\n"),
        ..kepler_meters::MeterSettings::default()
    };
    let hwmon: kepler_meters::MeterName = "hwmon".parse().unwrap();
    let meter = hwmon
        .open(&kepler_meters::OpenContext::new(&settings))
        .unwrap();
    assert_eq!(meter.zones(), ["max20730", "ina3221", "other"]);
}

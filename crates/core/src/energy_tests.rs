//! Unit tests of `energy`: deltas, wraps, sums of sockets.

use super::*;

fn energy(zone: &str, path: &str, counter: u64, max: Option<u64>) -> ZoneReading {
    ZoneReading::energy(
        zone.into(),
        path.into(),
        MicroJoules(counter),
        max.map(MicroJoules),
    )
}

fn meta() -> Arc<ZoneMeta> {
    Arc::new(ZoneMeta::measured("test"))
}

fn snap(at_secs: u64, readings: Vec<ZoneReading>) -> EnergySnapshot {
    EnergySnapshot {
        at: Duration::from_secs(at_secs),
        readings,
    }
}

#[test]
fn wraps_once_at_the_known_maximum() {
    let p: Arc<str> = "p".into();
    let d = counter_delta(&p, MicroJoules(990), MicroJoules(9), Some(MicroJoules(999))).unwrap();
    // 990 -> 999 is 9, 999 -> 0 is 1, 0 -> 9 is 9.
    assert_eq!(d, MicroJoules(19));
}

#[test]
fn decrease_without_max_is_dropped() {
    let p: Arc<str> = "p".into();
    assert!(matches!(
        counter_delta(&p, MicroJoules(10), MicroJoules(5), None),
        Err(DeltaIssue::CounterDecreased { .. })
    ));
}

#[test]
fn sockets_are_summed_under_an_aggregated_path() {
    let a = snap(
        0,
        vec![
            energy("package", "/a", 100, Some(1000)),
            energy("package", "/b", 950, Some(1000)),
            energy("dram", "/c", 5, None),
        ],
    );
    let b = snap(
        1,
        vec![
            energy("package", "/a", 150, Some(1000)),
            energy("package", "/b", 100, Some(1000)),
            energy("dram", "/c", 7, None),
        ],
    );
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert!(issues.is_empty());
    assert_eq!(zones.len(), 2);
    assert_eq!(&*zones[0].zone, "package");
    assert_eq!(&*zones[0].path, "aggregated-package");
    assert_eq!(zones[0].energy, MicroJoules(50 + (1000 - 950 + 100 + 1)));
    assert_eq!(&*zones[1].path, "/c");
    assert_eq!(zones[1].energy, MicroJoules(2));
}

#[test]
fn one_bad_socket_drops_its_zone_only() {
    let a = snap(
        0,
        vec![
            energy("package", "/a", 100, None),
            energy("package", "/b", 200, None),
            energy("dram", "/c", 5, None),
        ],
    );
    let b = snap(
        1,
        vec![
            energy("package", "/a", 150, None),
            energy("package", "/b", 100, None),
            energy("dram", "/c", 9, None),
        ],
    );
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert_eq!(issues.len(), 1);
    assert_eq!(zones.len(), 1);
    assert_eq!(&*zones[0].zone, "dram");
}

#[test]
fn power_readings_integrate_over_the_interval() {
    let p = |w| ZoneReading::power("platform".into(), "/hwmon0".into(), Watts(w));
    let (zones, _) = zone_energies(&snap(10, vec![p(50.0)]), &snap(12, vec![p(100.0)]), &meta());
    assert_eq!(zones[0].energy, MicroJoules(200_000_000));
    assert_eq!(zones[0].weights, ZoneWeights::CpuTime);
}

#[test]
fn shares_travel_with_a_single_reading_and_refuse_to_be_summed() {
    let shares: ProcessShares = Arc::from(vec![ProcessShare { pid: 7, weight: 3 }]);
    let gpu = |path: &str, w: f64| ZoneReading {
        shares: Some(shares.clone()),
        idle: Some(Watts(0.25)),
        ..ZoneReading::power("gpu0".into(), path.into(), Watts(w))
    };
    let (zones, issues) = zone_energies(
        &snap(0, vec![gpu("/a", 1.0)]),
        &snap(1, vec![gpu("/a", 1.0)]),
        &meta(),
    );
    assert!(issues.is_empty());
    assert_eq!(zones[0].weights, ZoneWeights::Shares(shares.clone()));
    // The device's idle power, over the 1 s interval.
    assert_eq!(zones[0].idle, Some(MicroJoules(250_000)));
    let two = |at| snap(at, vec![gpu("/a", 1.0), gpu("/b", 2.0)]);
    let (zones, issues) = zone_energies(&two(0), &two(1), &meta());
    assert!(zones.is_empty());
    assert!(matches!(issues[..], [DeltaIssue::SharesNotSummable { .. }]));
}

#[test]
fn an_all_ones_counter_without_max_is_dropped_not_counted() {
    let a = snap(0, vec![energy("package", "/a", 1_000_000, None)]);
    let b = snap(1, vec![energy("package", "/a", u64::MAX, None)]);
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert!(zones.is_empty());
    assert!(
        matches!(issues[..], [DeltaIssue::Implausible { .. }]),
        "{issues:?}"
    );
}

#[test]
fn a_step_back_with_max_known_is_not_a_wrap() {
    let max = 262_143_328_850;
    let a = snap(0, vec![energy("package", "/a", 100_000_000_000, Some(max))]);
    // 900 J back: too little for a wrap.
    let b = snap(1, vec![energy("package", "/a", 99_100_000_000, Some(max))]);
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert!(zones.is_empty());
    assert!(
        matches!(issues[..], [DeltaIssue::CounterSteppedBack { .. }]),
        "{issues:?}"
    );
    // A reset to 0 read as a wrap would be 162 kJ in a second.
    let b = snap(1, vec![energy("package", "/a", 0, Some(max))]);
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert!(zones.is_empty());
    assert!(
        matches!(issues[..], [DeltaIssue::Implausible { .. }]),
        "{issues:?}"
    );
}

#[test]
fn an_all_ones_power_reading_is_dropped() {
    let p = |w| ZoneReading::power("platform".into(), "/hwmon0".into(), Watts(w));
    let uw_max = u64::MAX as f64 / 1e6;
    for bad in [uw_max, f64::NAN, -5.0] {
        let (zones, issues) =
            zone_energies(&snap(0, vec![p(50.0)]), &snap(1, vec![p(bad)]), &meta());
        assert!(zones.is_empty(), "{bad}");
        assert!(matches!(issues[..], [DeltaIssue::Implausible { .. }]));
    }
}

#[test]
fn the_ceiling_is_configurable() {
    let limits = EnergyLimits::with_max_power(Watts(100.0)).unwrap();
    let a = snap(0, vec![energy("package", "/a", 0, None)]);
    let b = snap(2, vec![energy("package", "/a", 150_000_000, None)]);
    let (zones, _) = zone_energies_within(&a, &b, &meta(), &limits);
    assert_eq!(zones[0].energy, MicroJoules(150_000_000));
    let c = snap(3, vec![energy("package", "/a", 300_000_000, None)]);
    let (zones, issues) = zone_energies_within(&b, &c, &meta(), &limits);
    assert!(zones.is_empty());
    assert_eq!(issues.len(), 1);
}

#[test]
fn a_missing_socket_drops_its_zone_and_spares_the_others() {
    let a = snap(
        0,
        vec![
            energy("package", "/a", 100, None),
            energy("package", "/b", 200, None),
            energy("dram", "/c", 5, None),
        ],
    );
    let b = snap(
        1,
        vec![
            energy("package", "/a", 150, None),
            energy("dram", "/c", 9, None),
        ],
    );
    let (zones, issues) = zone_energies(&a, &b, &meta());
    assert_eq!(zones.len(), 1);
    assert_eq!(&*zones[0].zone, "dram");
    assert_eq!(zones[0].energy, MicroJoules(4));
    assert!(matches!(&issues[..], [DeltaIssue::ReadingMissing { path, .. }] if &**path == "/b"));
}

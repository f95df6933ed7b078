//! The fake meter: a pure function of time, exact under an injected clock.

use std::f64::consts::PI;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::MeterInput;
use kepler_core::{
    zone_energies, EnergySnapshot, MicroJoules, PowerMeter, Watts, ZoneReading, ZoneSample,
};
use kepler_meters::fake::{FAKE_DEFAULT_MAX_ENERGY_UJ, FAKE_PERIOD};
use kepler_meters::{FakeMeter, FakeSettings, ManualClock};

fn counters(meter: &mut FakeMeter) -> Vec<u64> {
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out.iter()
        .map(|r| match r.sample {
            ZoneSample::Energy { counter, max } => {
                assert_eq!(max, Some(MicroJoules(FAKE_DEFAULT_MAX_ENERGY_UJ)));
                counter.0
            }
            ZoneSample::Power(_) => panic!("the fake meter reports energy"),
        })
        .collect()
}

fn readings(meter: &mut FakeMeter) -> Vec<ZoneReading> {
    let mut out = Vec::new();
    meter.read(&MeterInput::default(), &mut out).unwrap();
    out
}

fn settings(zones: &[&str]) -> FakeSettings {
    FakeSettings {
        zones: zones.iter().map(|z| z.to_string()).collect(),
        base_watts: 50.0,
        ..FakeSettings::default()
    }
}

#[test]
fn defaults_follow_upstream() {
    let meter = FakeMeter::new(&FakeSettings::default()).unwrap();
    assert_eq!(meter.name(), "fake");
    assert_eq!(meter.zones(), vec!["package", "core", "dram"]);
    let meter = FakeMeter::new(&settings(&["Package", "uncore", "package"])).unwrap();
    assert_eq!(meter.zones(), vec!["package", "uncore"]);
}

#[test]
fn energy_is_the_integral_of_the_curve() {
    let clock = ManualClock::new();
    clock.set(Duration::from_secs(1_000)); // the curve starts when the meter is made
    let mut meter =
        FakeMeter::with_clock(&settings(&["package", "dram"]), Arc::new(clock.clone())).unwrap();
    assert_eq!(counters(&mut meter), vec![0, 0]);

    // Over whole periods the sine integrates to zero: 50 W × 120 s = 6000 J, and the counter
    // has wrapped once past 2³² − 1 µJ.
    clock.advance(FAKE_PERIOD);
    let wrap = FAKE_DEFAULT_MAX_ENERGY_UJ + 1;
    assert_eq!(
        counters(&mut meter),
        vec![6_000_000_000 - wrap, 1_200_000_000]
    );

    // After half a period: 50·60 + 50·0.2·2·120/(2π) J.
    clock.set(Duration::from_secs(1_060));
    let joules = 50.0 * 60.0 + 50.0 * 0.2 * 2.0 * 120.0 / (2.0 * PI);
    let uj = (joules * 1e6).round() as u64;
    assert_eq!(uj, 3_381_971_863);
    assert_eq!(
        counters(&mut meter),
        vec![uj, (joules * 0.2 * 1e6).round() as u64]
    );

    // The curve itself: base, peak a quarter period in, trough at three quarters.
    assert_eq!(meter.watts_at("package", Duration::ZERO), Some(Watts(50.0)));
    let peak = meter
        .watts_at("package", Duration::from_secs(30))
        .unwrap()
        .0;
    assert!((peak - 60.0).abs() < 1e-9, "{peak}");
    let trough = meter.watts_at("dram", Duration::from_secs(90)).unwrap().0;
    assert!((trough - 8.0).abs() < 1e-9, "{trough}");
    assert_eq!(meter.watts_at("gpu", Duration::ZERO), None);
}

#[test]
fn same_clock_same_numbers_whatever_the_read_count() {
    let clock = ManualClock::new();
    let mut busy =
        FakeMeter::with_clock(&FakeSettings::default(), Arc::new(clock.clone())).unwrap();
    let mut idle =
        FakeMeter::with_clock(&FakeSettings::default(), Arc::new(clock.clone())).unwrap();
    for _ in 0..500 {
        clock.advance(Duration::from_millis(937));
        counters(&mut busy);
    }
    assert_eq!(counters(&mut busy), counters(&mut idle));
}

#[test]
fn core_recovers_the_energy_across_wraps() {
    let clock = ManualClock::new();
    let mut meter =
        FakeMeter::with_clock(&settings(&["package"]), Arc::new(clock.clone())).unwrap();
    let mut prev = EnergySnapshot {
        at: Duration::ZERO,
        readings: readings(&mut meter),
    };
    let mut total = 0u64;
    let mut wraps = 0;
    // 10 minutes in 5 s ticks: several wraps at ~50 W.
    for tick in 1..=120u64 {
        clock.advance(Duration::from_secs(5));
        let cur = EnergySnapshot {
            at: Duration::from_secs(tick * 5),
            readings: readings(&mut meter),
        };
        let (e, issues) = zone_energies(&prev, &cur, &std::sync::Arc::new(meter.meta()));
        assert!(issues.is_empty(), "{issues:?}");
        total += e[0].energy.0;
        if let (ZoneSample::Energy { counter: a, .. }, ZoneSample::Energy { counter: b, .. }) =
            (prev.readings[0].sample, cur.readings[0].sample)
        {
            wraps += usize::from(b < a);
        }
        prev = cur;
    }
    assert!(wraps >= 6, "only {wraps} wraps");
    // 600 s is five whole periods: exactly 50 W × 600 s.
    assert_eq!(total, 30_000_000_000);
}

#[test]
fn bad_settings_are_unavailable() {
    let nan = FakeSettings {
        base_watts: f64::NAN,
        ..FakeSettings::default()
    };
    assert!(FakeMeter::new(&nan)
        .unwrap_err()
        .reason
        .contains("base watts"));
    let negative = FakeSettings {
        base_watts: -1.0,
        ..FakeSettings::default()
    };
    assert!(FakeMeter::new(&negative).is_err());
    let s = FakeSettings {
        max_energy_uj: 0,
        ..FakeSettings::default()
    };
    assert!(FakeMeter::new(&s).is_err());
}

//! Meters that lie: whatever two readings say (any counter, any wrap point, any power, any
//! reading missing), no zone energy implies more than the ceiling, a zone with a missing or
//! rejected reading is left out whole, and a run of ticks only ever adds energy a zone could
//! have drawn. Case counts follow `PROPTEST_CASES` (256 by default; docs/security.md records
//! million-case runs).

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::*;
use proptest::prelude::*;

const ZONES: [&str; 3] = ["package", "dram", "platform"];

fn sample() -> impl Strategy<Value = ZoneSample> {
    let counter = prop_oneof![
        any::<u64>(),
        Just(u64::MAX),
        Just(0u64),
        0u64..1_000_000_000_000
    ];
    let max = prop_oneof![
        Just(None),
        any::<u64>().prop_map(Some),
        Just(Some(262_143_328_850))
    ];
    prop_oneof![
        (counter, max).prop_map(|(c, m)| ZoneSample::Energy {
            counter: MicroJoules(c),
            max: m.map(MicroJoules),
        }),
        prop_oneof![
            any::<f64>(),
            0.0f64..1e5,
            Just(u64::MAX as f64 / 1e6),
            Just(f64::INFINITY)
        ]
        .prop_map(|w| ZoneSample::Power(Watts(w))),
    ]
}

/// Up to six readings over three zones; two sockets can share a zone.
fn readings() -> impl Strategy<Value = Vec<(usize, ZoneSample)>> {
    proptest::collection::vec((0..ZONES.len(), sample()), 0..6)
}

fn snapshot(at_ms: u64, readings: &[(usize, ZoneSample)], present: &[bool]) -> EnergySnapshot {
    EnergySnapshot {
        at: Duration::from_millis(at_ms),
        readings: readings
            .iter()
            .enumerate()
            .filter(|(i, _)| present.get(*i).copied().unwrap_or(true))
            .map(|(i, (zone, sample))| ZoneReading {
                sample: *sample,
                ..ZoneReading::power(ZONES[*zone].into(), format!("/r{i}").into(), Watts(0.0))
            })
            .collect(),
    }
}

fn meta() -> Arc<ZoneMeta> {
    Arc::new(ZoneMeta::measured("test"))
}

proptest! {
    #[test]
    fn no_zone_energy_exceeds_the_ceiling(
        before in readings(),
        after in proptest::collection::vec(sample(), 6),
        present in proptest::collection::vec(proptest::bool::weighted(0.9), 6),
        at in (0u64..10_000_000, 0u64..120_000),
        ceiling in prop_oneof![Just(20_000.0f64), 1.0f64..1e6],
    ) {
        let limits = EnergyLimits::with_max_power(Watts(ceiling)).unwrap();
        let current: Vec<(usize, ZoneSample)> =
            before.iter().zip(&after).map(|((z, _), s)| (*z, *s)).collect();
        let prev = snapshot(at.0, &before, &[]);
        let cur = snapshot(at.0 + at.1, &current, &present);
        let (zones, issues) = zone_energies_within(&prev, &cur, &meta(), &limits);
        let interval = Duration::from_millis(at.1.max(1));
        let dropped: HashSet<&str> = issues
            .iter()
            .filter_map(|i| match i {
                DeltaIssue::ReadingMissing { zone, .. } => Some(&**zone),
                _ => None,
            })
            .collect();
        for zone in &zones {
            let sockets = cur.readings.iter().filter(|r| r.zone == zone.zone).count() as u64;
            let bound = limits.max_power.during(interval).0.saturating_add(1) * sockets;
            prop_assert!(zone.energy.0 <= bound, "{zone:?} over {interval:?} above {bound}");
            prop_assert!(!dropped.contains(&*zone.zone), "zone {} had a reading missing", zone.zone);
        }
        // A zone with a reading gone is never exported from the rest of its readings.
        for (i, (zone, _)) in before.iter().enumerate() {
            if !present[i] {
                prop_assert!(zones.iter().all(|z| &*z.zone != ZONES[*zone]));
            }
        }
    }

    #[test]
    fn a_lying_counter_never_makes_a_run_exceed_the_ceiling(
        steps in proptest::collection::vec(
            prop_oneof![
                4 => (0u64..50_000_000).prop_map(Step::Add),
                1 => any::<u64>().prop_map(Step::Set),
                1 => Just(Step::Set(u64::MAX)),
                1 => Just(Step::Set(0)),
            ],
            1..40,
        ),
        max in prop_oneof![Just(None), Just(Some(262_143_328_850u64)), (1u64..u64::MAX).prop_map(Some)],
    ) {
        // One counter sampled once a second; its total must stay within ceiling × time.
        let limits = EnergyLimits::default();
        let mut counter = 0u64;
        let mut prev: Option<EnergySnapshot> = None;
        let mut total = MicroJoules::ZERO;
        for (t, step) in steps.iter().enumerate() {
            counter = match step {
                Step::Add(d) => match max {
                    Some(m) if m > 0 => ((u128::from(counter) + u128::from(*d)) % (u128::from(m) + 1)) as u64,
                    _ => counter.saturating_add(*d),
                },
                Step::Set(v) => *v,
            };
            let cur = EnergySnapshot {
                at: Duration::from_secs(t as u64),
                readings: vec![ZoneReading::energy("package".into(), "/p".into(), MicroJoules(counter), max.map(MicroJoules))],
            };
            if let Some(p) = &prev {
                let (zones, _) = zone_energies_within(p, &cur, &meta(), &limits);
                for z in zones {
                    prop_assert!(z.energy <= limits.max_energy(Duration::from_secs(1)));
                    total += z.energy;
                }
            }
            prev = Some(cur);
        }
        prop_assert!(total <= limits.max_energy(Duration::from_secs(steps.len() as u64)));
    }
}

#[derive(Clone, Debug)]
enum Step {
    Add(u64),
    Set(u64),
}

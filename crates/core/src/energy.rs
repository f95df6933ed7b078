//! What power meters report, and the pure step from two readings to the energy of one interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::{DeviceInfo, ZoneMeta};
use crate::units::{MicroJoules, Watts};

/// One reading of one meter zone (one socket's package, one hwmon sensor, ...).
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneReading {
    /// Zone name as exported in the `zone` label: `package`, `core`, `uncore`, `dram`, `psys`,
    /// `platform`, or a hwmon label. Readings with the same name are summed (several sockets).
    pub zone: Arc<str>,
    /// Where the value came from, unique per reading (a sysfs path, a device id).
    pub path: Arc<str>,
    pub sample: ZoneSample,
    /// How the zone's active energy is divided among processes, when the meter knows better
    /// than CPU time (a GPU's per-process utilisation); `None` splits by CPU time.
    pub shares: Option<ProcessShares>,
    /// The device's own idle power, when the meter knows it (a GPU: configured, or the lowest
    /// power seen with no compute process). The zone's idle energy is then this × interval,
    /// capped at its energy, whatever the agent's idle policy: CPU usage says nothing about
    /// how busy a GPU is. `None` leaves the split to the idle policy.
    pub idle: Option<Watts>,
    /// The device this reading measures, for per-device zones (GPUs).
    pub device: Option<Arc<DeviceInfo>>,
}

impl ZoneReading {
    /// A cumulative energy counter, split by CPU time.
    pub fn energy(
        zone: Arc<str>,
        path: Arc<str>,
        counter: MicroJoules,
        max: Option<MicroJoules>,
    ) -> Self {
        ZoneReading {
            zone,
            path,
            sample: ZoneSample::Energy { counter, max },
            shares: None,
            idle: None,
            device: None,
        }
    }

    /// A power reading, split by CPU time.
    pub fn power(zone: Arc<str>, path: Arc<str>, watts: Watts) -> Self {
        ZoneReading {
            zone,
            path,
            sample: ZoneSample::Power(watts),
            shares: None,
            idle: None,
            device: None,
        }
    }
}

/// One process's weight in a meter-supplied split. Processes are named by pid because that is
/// what device accounting (NVML, fdinfo) reports.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct ProcessShare {
    pub pid: u32,
    pub weight: u64,
}

/// A meter's per-process weights for one reading, shared rather than copied per tick.
pub type ProcessShares = Arc<[ProcessShare]>;

/// How one zone's active energy is divided among the processes of the interval.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ZoneWeights {
    /// In proportion to each process's CPU time delta (DESIGN §5).
    #[default]
    CpuTime,
    /// In proportion to weights the meter supplied.
    Shares(ProcessShares),
}

#[derive(Copy, Clone, Debug, PartialEq)]
pub enum ZoneSample {
    /// A cumulative energy counter; `max` is the value at which it wraps to zero when known
    /// (`max_energy_range_uj`).
    Energy {
        counter: MicroJoules,
        max: Option<MicroJoules>,
    },
    /// An instantaneous or averaged power reading; energy is power × interval.
    Power(Watts),
}

/// All zones of the active meter, read at one instant.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct EnergySnapshot {
    /// Monotonic time of the reading (any fixed origin, the same for every snapshot of a run).
    pub at: Duration,
    pub readings: Vec<ZoneReading>,
}

/// Energy of one exported zone over one interval.
#[derive(Clone, Debug, PartialEq)]
pub struct ZoneEnergy {
    pub zone: Arc<str>,
    /// The reading's path, or `aggregated-<zone>` when several readings were summed.
    pub path: Arc<str>,
    pub energy: MicroJoules,
    /// The meter's facts, shared by all zones of the meter.
    pub meta: Arc<ZoneMeta>,
    pub weights: ZoneWeights,
    /// The meter's idle energy for the interval (its readings' idle watts × interval), which
    /// takes the place of the idle policy for this zone; `None` leaves idle to the policy.
    pub idle: Option<MicroJoules>,
    /// The measured device, for a zone of a single reading that names one.
    pub device: Option<Arc<DeviceInfo>>,
}

/// Why a zone has no energy for an interval.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeltaIssue {
    /// The counter went down and its wrap point is unknown: the sample is dropped.
    CounterDecreased {
        path: Arc<str>,
        previous: u64,
        current: u64,
    },
    /// The counter exceeds its own wrap point: the reading is not trustworthy.
    CounterAboveMax {
        path: Arc<str>,
        counter: u64,
        max: u64,
    },
    /// The reading has no counterpart in the previous snapshot (new zone): no delta yet.
    NoPrevious { path: Arc<str> },
    /// Several readings share a zone name and at least one carries its own process shares:
    /// one split cannot honour each reading's shares, so the zone is dropped. Meters that
    /// supply shares name each reading's zone apart.
    SharesNotSummable { zone: Arc<str> },
}

impl std::fmt::Display for DeltaIssue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DeltaIssue::CounterDecreased {
                path,
                previous,
                current,
            } => write!(
                f,
                "energy counter {path} went down ({previous} -> {current} µJ) with no known wrap point; sample dropped"
            ),
            DeltaIssue::CounterAboveMax { path, counter, max } => write!(
                f,
                "energy counter {path} reads {counter} µJ above its wrap point {max} µJ; sample dropped"
            ),
            DeltaIssue::NoPrevious { path } => write!(f, "zone {path} appeared; no delta yet"),
            DeltaIssue::SharesNotSummable { zone } => write!(
                f,
                "zone {zone} has several readings with their own process shares; sample dropped"
            ),
        }
    }
}

/// Energy between two readings of one counter, allowing for one wrap.
pub fn counter_delta(
    path: &Arc<str>,
    previous: MicroJoules,
    current: MicroJoules,
    max: Option<MicroJoules>,
) -> Result<MicroJoules, DeltaIssue> {
    if let Some(max) = max {
        if max.0 > 0 && (current.0 > max.0 || previous.0 > max.0) {
            return Err(DeltaIssue::CounterAboveMax {
                path: path.clone(),
                counter: current.0.max(previous.0),
                max: max.0,
            });
        }
    }
    if current >= previous {
        return Ok(MicroJoules(current.0 - previous.0));
    }
    match max {
        // The counter counts 0..=max and then restarts at 0.
        Some(max) if max.0 > 0 => Ok(MicroJoules(max.0 - previous.0 + current.0 + 1)),
        _ => Err(DeltaIssue::CounterDecreased {
            path: path.clone(),
            previous: previous.0,
            current: current.0,
        }),
    }
}

/// Running sum of one zone's readings; `energy` is `None` once any reading failed.
struct ZoneSum {
    energy: Option<MicroJoules>,
    paths: Vec<Arc<str>>,
    shares: Option<ProcessShares>,
    idle: Option<MicroJoules>,
    device: Option<Arc<DeviceInfo>>,
}

/// The energy of each zone between two snapshots of the same meter. Readings sharing a zone
/// name are summed; if any of them cannot give a delta, the whole zone is left out for this
/// interval (a partial sum would be a wrong number) and the issue is returned. Every zone
/// carries `meta`, the facts of the meter that read both snapshots.
pub fn zone_energies(
    previous: &EnergySnapshot,
    current: &EnergySnapshot,
    meta: &Arc<ZoneMeta>,
) -> (Vec<ZoneEnergy>, Vec<DeltaIssue>) {
    let interval = current.at.saturating_sub(previous.at);
    let before: HashMap<&str, &ZoneSample> = previous
        .readings
        .iter()
        .map(|r| (&*r.path, &r.sample))
        .collect();

    // Zone order follows first appearance in the current snapshot, so output is stable.
    let mut order: Vec<Arc<str>> = Vec::new();
    let mut sums: HashMap<Arc<str>, ZoneSum> = HashMap::new();
    let mut issues = Vec::new();

    for reading in &current.readings {
        let delta = match (reading.sample, before.get(&*reading.path)) {
            (
                ZoneSample::Energy { counter, max },
                Some(ZoneSample::Energy { counter: prev, .. }),
            ) => counter_delta(&reading.path, *prev, counter, max),
            (ZoneSample::Power(w), Some(_)) => Ok(w.during(interval)),
            (_, _) => Err(DeltaIssue::NoPrevious {
                path: reading.path.clone(),
            }),
        };
        let entry = sums.entry(reading.zone.clone()).or_insert_with(|| {
            order.push(reading.zone.clone());
            ZoneSum {
                energy: Some(MicroJoules::ZERO),
                paths: Vec::new(),
                shares: None,
                idle: None,
                device: None,
            }
        });
        if let Some(w) = reading.idle {
            // Summed sockets of a meter that knows idle: their idle powers add up too.
            let idle = entry.idle.get_or_insert(MicroJoules::ZERO);
            *idle += w.during(interval);
        }
        if entry.paths.is_empty() {
            entry.device = reading.device.clone();
        }
        entry.paths.push(reading.path.clone());
        if let Some(shares) = &reading.shares {
            entry.shares = Some(shares.clone());
        }
        match delta {
            Ok(d) => {
                if let Some(sum) = &mut entry.energy {
                    *sum += d;
                }
            }
            Err(issue) => {
                entry.energy = None;
                issues.push(issue);
            }
        }
    }

    let energies = order
        .into_iter()
        .filter_map(|zone| {
            let sum = sums.remove(&zone)?;
            if sum.shares.is_some() && sum.paths.len() > 1 {
                issues.push(DeltaIssue::SharesNotSummable { zone });
                return None;
            }
            let energy = sum.energy?;
            let (path, device) = match sum.paths.as_slice() {
                [single] => (single.clone(), sum.device),
                // A sum of readings is no single device.
                _ => (Arc::from(format!("aggregated-{zone}")), None),
            };
            let weights = sum.shares.map_or(ZoneWeights::CpuTime, ZoneWeights::Shares);
            Some(ZoneEnergy {
                zone,
                path,
                energy,
                meta: meta.clone(),
                weights,
                idle: sum.idle,
                device,
            })
        })
        .collect();
    (energies, issues)
}

#[cfg(test)]
mod tests {
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
        let d =
            counter_delta(&p, MicroJoules(990), MicroJoules(9), Some(MicroJoules(999))).unwrap();
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
                energy("package", "/b", 200, Some(1000)),
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
        assert_eq!(zones[0].energy, MicroJoules(50 + (1000 - 200 + 100 + 1)));
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
        let (zones, _) =
            zone_energies(&snap(10, vec![p(50.0)]), &snap(12, vec![p(100.0)]), &meta());
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
}

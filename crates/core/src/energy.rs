//! What power meters report, and the pure step from two readings to the energy of one interval.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::domain::{DeviceInfo, ZoneMeta};
use crate::plausible::{plausible_wrap, EnergyLimits};
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
#[derive(Clone, Debug, PartialEq)]
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
    /// The counter went down with a known wrap point, but by far too little to have wrapped:
    /// it stepped back or was reset.
    CounterSteppedBack {
        path: Arc<str>,
        previous: u64,
        current: u64,
    },
    /// The reading implies more power than the zone can draw (its ceiling): a broken value.
    Implausible {
        path: Arc<str>,
        watts: f64,
        limit: f64,
    },
    /// A reading of the previous snapshot is missing from this one (its file failed): the
    /// zone it belongs to is left out, since the other readings alone would be a partial sum.
    ReadingMissing { zone: Arc<str>, path: Arc<str> },
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
            DeltaIssue::CounterSteppedBack {
                path,
                previous,
                current,
            } => write!(
                f,
                "energy counter {path} stepped back ({previous} -> {current} µJ), too little for a wrap; sample dropped"
            ),
            DeltaIssue::Implausible { path, watts, limit } => write!(
                f,
                "reading of {path} implies {watts:.3e} W, above the {limit} W this zone can draw; sample dropped"
            ),
            DeltaIssue::ReadingMissing { zone, path } => write!(
                f,
                "reading {path} of zone {zone} is missing; zone left out of this interval"
            ),
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
        Some(max) if max.0 > 0 => plausible_wrap(previous.0, current.0, max.0)
            .map(MicroJoules)
            .ok_or_else(|| DeltaIssue::CounterSteppedBack {
                path: path.clone(),
                previous: previous.0,
                current: current.0,
            }),
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

/// [`zone_energies_within`] the default [`EnergyLimits`].
pub fn zone_energies(
    previous: &EnergySnapshot,
    current: &EnergySnapshot,
    meta: &Arc<ZoneMeta>,
) -> (Vec<ZoneEnergy>, Vec<DeltaIssue>) {
    zone_energies_within(previous, current, meta, &EnergyLimits::default())
}

/// The delta of one reading, if it is one the hardware can have produced.
fn reading_delta(
    reading: &ZoneReading,
    before: Option<&&ZoneSample>,
    interval: std::time::Duration,
    limits: &EnergyLimits,
) -> Result<MicroJoules, DeltaIssue> {
    let implausible = |watts: Watts| DeltaIssue::Implausible {
        path: reading.path.clone(),
        watts: watts.0,
        limit: limits.max_power.0,
    };
    match (reading.sample, before) {
        (ZoneSample::Energy { counter, max }, Some(ZoneSample::Energy { counter: prev, .. })) => {
            let delta = counter_delta(&reading.path, *prev, counter, max)?;
            limits.check_energy(delta, interval).map_err(implausible)?;
            Ok(delta)
        }
        (ZoneSample::Power(w), Some(_)) => {
            limits.check_power(w).map_err(implausible)?;
            Ok(w.during(interval))
        }
        (_, _) => Err(DeltaIssue::NoPrevious {
            path: reading.path.clone(),
        }),
    }
}

/// The energy of each zone between two snapshots of the same meter. Readings sharing a zone
/// name are summed; if any of them cannot give a delta, is implausible under `limits`, or is
/// missing from `current`, the whole zone is left out for this interval (a partial sum would
/// be a wrong number) and the issue is returned; other zones are unaffected. Every zone
/// carries `meta`, the facts of the meter that read both snapshots.
pub fn zone_energies_within(
    previous: &EnergySnapshot,
    current: &EnergySnapshot,
    meta: &Arc<ZoneMeta>,
    limits: &EnergyLimits,
) -> (Vec<ZoneEnergy>, Vec<DeltaIssue>) {
    let interval = current.at.saturating_sub(previous.at);
    let before: HashMap<&str, &ZoneSample> = previous
        .readings
        .iter()
        .map(|r| (&*r.path, &r.sample))
        .collect();
    let now: std::collections::HashSet<&str> = current.readings.iter().map(|r| &*r.path).collect();
    let mut missing: HashMap<&str, Arc<str>> = HashMap::new();
    let mut issues = Vec::new();
    for gone in previous.readings.iter().filter(|r| !now.contains(&*r.path)) {
        missing
            .entry(&*gone.zone)
            .or_insert_with(|| gone.path.clone());
        issues.push(DeltaIssue::ReadingMissing {
            zone: gone.zone.clone(),
            path: gone.path.clone(),
        });
    }

    // Zone order follows first appearance in the current snapshot, so output is stable.
    let mut order: Vec<Arc<str>> = Vec::new();
    let mut sums: HashMap<Arc<str>, ZoneSum> = HashMap::new();

    for reading in &current.readings {
        let delta = reading_delta(reading, before.get(&*reading.path), interval, limits);
        let entry = sums.entry(reading.zone.clone()).or_insert_with(|| {
            order.push(reading.zone.clone());
            ZoneSum {
                // A zone with a reading gone has no whole sum this interval.
                energy: (!missing.contains_key(&*reading.zone)).then_some(MicroJoules::ZERO),
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
#[path = "energy_tests.rs"]
mod tests;

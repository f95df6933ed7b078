//! One tick of the agent: read usage and every meter at (nearly) the same instant, compute the
//! interval's model features once, turn the readings into interval energy per meter, and
//! attribute it. Kept free of HTTP and threads so tests drive it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::features::{features, node_features, FeatureRates, Features};
use kepler_core::{
    zone_energies_within, Attributor, ComponentHealth, ComponentKind, EnergyLimits, EnergySnapshot,
    Health, MeterInput, PlatformPower, PowerMeter, PowerSnapshot, RepeatLog, Tick, UsageSnapshot,
    UsageSource, ZoneEnergy, ZoneMeta, ZoneReading,
};
use tracing::{debug, warn};

/// A monotonic clock: the time since some fixed origin, the same for every reading of a run.
pub type Clock = Box<dyn Fn() -> Duration + Send>;

/// One meter of the tick, with what it read last.
struct MeterSlot {
    meter: Box<dyn PowerMeter>,
    meta: Arc<ZoneMeta>,
    previous: Option<EnergySnapshot>,
    /// Spare buffer for reads, recycled from the snapshot before last.
    spare: Vec<ZoneReading>,
    health: Arc<ComponentHealth>,
    /// A meter that lies every tick is logged once a minute; its error counter counts all.
    dropped_log: RepeatLog,
}

pub struct Sampler {
    source: Box<dyn UsageSource>,
    source_health: Arc<ComponentHealth>,
    /// The source's skipped inputs counted so far (see [`UsageSource::skipped_inputs`]).
    source_skipped: u64,
    meters: Vec<MeterSlot>,
    attributor: Attributor,
    clock: Clock,
    previous_usage: Option<UsageSnapshot>,
    /// Whether the last tick had energy for at least one zone.
    had_energy: bool,
    /// Attach the interval's model features to each snapshot (`ebpf.exportFeatures`).
    export_features: bool,
    /// What a reading may imply before it is believed (`monitor.maxReadingWatts`).
    limits: EnergyLimits,
    /// Exited processes the last tick's usage listed.
    exited_last_tick: usize,
}

#[derive(Debug, thiserror::Error)]
pub enum TickError {
    #[error("usage source {source_name}: {error}")]
    Usage {
        source_name: String,
        #[source]
        error: kepler_core::ReadError,
    },
}

impl Sampler {
    /// `meters` holds at most one meter per power domain (each domain's chosen meter); their
    /// health is reported in `health`.
    pub fn new(
        source: Box<dyn UsageSource>,
        meters: Vec<Box<dyn PowerMeter>>,
        attributor: Attributor,
        health: &Health,
    ) -> Self {
        let origin = Instant::now();
        Sampler {
            source_health: health.register(ComponentKind::Source, source.name()),
            source_skipped: 0,
            source,
            meters: meters
                .into_iter()
                .map(|meter| MeterSlot {
                    meta: Arc::new(meter.meta()),
                    health: health.register(ComponentKind::Meter, meter.name()),
                    meter,
                    previous: None,
                    spare: Vec::new(),
                    dropped_log: RepeatLog::default(),
                })
                .collect(),
            attributor,
            clock: Box::new(move || origin.elapsed()),
            previous_usage: None,
            had_energy: false,
            export_features: false,
            limits: EnergyLimits::default(),
            exited_last_tick: 0,
        }
    }

    /// Replaces the monotonic clock that stamps meter readings (tests use a manual one).
    pub fn with_clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// True once a tick has turned meter readings into energy (the agent is then ready).
    pub fn had_energy(&self) -> bool {
        self.had_energy
    }

    /// Replaces the default bounds on meter readings.
    pub fn with_limits(mut self, limits: EnergyLimits) -> Self {
        self.limits = limits;
        self
    }

    pub fn with_features(mut self, export: bool) -> Self {
        self.export_features = export;
        self
    }

    /// Takes back a snapshot nothing reads any more, for the next one to be built in (see
    /// [`Attributor::recycle`]).
    pub fn recycle(&mut self, snapshot: PowerSnapshot) {
        self.attributor.recycle(snapshot);
    }

    /// How many exited processes the last tick's usage listed.
    pub fn exited_last_tick(&self) -> usize {
        self.exited_last_tick
    }

    /// How often the usage source wants [`Sampler::drain`] between ticks (see
    /// [`UsageSource::drain_every`]).
    pub fn drain_every(&self) -> Option<Duration> {
        self.source.drain_every()
    }

    /// Lets the usage source take in what its buffers hold, between ticks.
    pub fn drain(&mut self) {
        self.source.drain();
    }

    /// Takes one sample and returns the snapshot of the interval since the previous one. The
    /// first call only sets baselines: its snapshot has usage but no energy.
    pub fn tick(&mut self) -> Result<PowerSnapshot, TickError> {
        let usage = match self.source.snapshot() {
            Ok(usage) => {
                if self.source_health.set_up() {
                    warn!(source = self.source.name(), "usage source readable again");
                }
                let skipped = self.source.skipped_inputs();
                self.source_health
                    .count_errors(skipped.saturating_sub(self.source_skipped));
                self.source_skipped = skipped;
                usage
            }
            Err(error) => {
                self.source_health.set_down();
                return Err(TickError::Usage {
                    source_name: self.source.name().to_string(),
                    error,
                });
            }
        };
        let features = self.features(&usage);
        let node = features.as_ref().map(|(node, _)| node);
        let mut energies = Vec::new();
        let mut platform = Vec::new();
        let mut interval = None;
        for slot in &mut self.meters {
            let read = read_meter(
                slot,
                node,
                &self.clock,
                &self.limits,
                &mut energies,
                &mut platform,
            );
            if let Some(meter_interval) = read {
                // The first domain with a delta (the CPU's, listed first) times the tick.
                interval.get_or_insert(meter_interval);
            }
        }
        self.had_energy = !energies.is_empty();
        let interval = match (interval, &self.previous_usage) {
            (Some(interval), _) => interval,
            (None, Some(previous)) => usage.uptime.saturating_sub(previous.uptime),
            (None, None) => Duration::ZERO,
        };
        let mut snapshot = self.attributor.tick(Tick {
            usage: &usage,
            energy: (!self.meters.is_empty()).then_some(energies.as_slice()),
            interval,
        });
        snapshot.features = features.and_then(|(_, full)| full).map(Arc::new);
        snapshot.platform = platform;
        self.exited_last_tick = usage.processes.iter().filter(|p| p.exited).count();
        debug!(
            tick = snapshot.tick,
            processes = usage.processes.len(),
            ?interval,
            "tick"
        );
        // The processes of the previous snapshot are read only to compute features; without
        // them, keeping its per-process list until the next tick would double the memory
        // that follows the process count (thousands of exited processes a tick under churn).
        self.previous_usage = Some(if self.wants_features() {
            usage
        } else {
            UsageSnapshot {
                processes: Vec::new(),
                ..usage
            }
        });
        Ok(snapshot)
    }

    /// Whether any tick computes features: fixed for a run (which meters estimate does not
    /// change, nor the export setting).
    fn wants_features(&self) -> bool {
        self.export_features || self.meters.iter().any(|s| s.meter.needs_features())
    }

    /// The interval's features, computed once: the node's rates for the meters that need them,
    /// and the per-process ones too when they are exported.
    fn features(&self, usage: &UsageSnapshot) -> Option<(FeatureRates, Option<Features>)> {
        let previous = self.previous_usage.as_ref()?;
        if self.export_features {
            let all = features(previous, usage);
            return Some((all.node, Some(all)));
        }
        if self.meters.iter().any(|s| s.meter.needs_features()) {
            return Some((node_features(previous, usage), None));
        }
        None
    }
}

/// Reads one meter and appends its zones' energy over the interval since its previous reading
/// to `energies`, and the device's breakdown of this very reading to `platform`; returns that
/// interval when there was one.
fn read_meter(
    slot: &mut MeterSlot,
    features: Option<&FeatureRates>,
    clock: &Clock,
    limits: &EnergyLimits,
    energies: &mut Vec<ZoneEnergy>,
    platform: &mut Vec<PlatformPower>,
) -> Option<Duration> {
    let mut readings = std::mem::take(&mut slot.spare);
    readings.clear();
    // The counters are sampled somewhere inside the read, which can be preempted on a busy
    // host: the middle of the read is the best estimate of when.
    let before = clock();
    let read = slot.meter.read(&MeterInput { features }, &mut readings);
    let after = clock();
    let at = before + after.saturating_sub(before) / 2;
    let name = slot.meter.name();
    if let Err(error) = read {
        // The next good reading starts a new baseline: energy across the gap is not known per
        // interval, so it is counted nowhere rather than in the wrong tick.
        if slot.health.set_down() {
            warn!(meter = name, %error, "meter read failed; energy skipped until it recovers");
        }
        slot.spare = readings;
        slot.previous = None;
        return None;
    }
    if slot.health.set_up() {
        warn!(meter = name, "meter readable again");
    }
    platform.extend_from_slice(slot.meter.platform_sources());
    // A model reloaded with another name changes what its zones say about themselves.
    if slot.meta.model.as_deref() != slot.meter.estimation_model() {
        slot.meta = Arc::new(slot.meter.meta());
    }
    let current = EnergySnapshot { at, readings };
    let interval = slot.previous.as_ref().map(|previous| {
        let (zones, issues) = zone_energies_within(previous, &current, &slot.meta, limits);
        for issue in issues {
            slot.health.count_error();
            if let Some(held) = slot.dropped_log.occur(current.at) {
                warn!(meter = name, %issue, repeats_not_logged = held, "energy sample dropped");
            }
        }
        energies.extend(zones);
        current.at.saturating_sub(previous.at)
    });
    if let Some(old) = slot.previous.replace(current) {
        slot.spare = old.readings;
    }
    interval
}

//! One tick of the agent: read usage and power at (nearly) the same instant, turn the readings
//! into interval energy, and attribute it. Kept free of HTTP and threads so tests drive it.

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    zone_energies, Attributor, EnergySnapshot, PowerMeter, PowerSnapshot, Tick, UsageSnapshot,
    UsageSource, ZoneReading,
};
use kepler_meters::{Clock, MonotonicClock};
use tracing::{debug, warn};

pub struct Sampler {
    source: Box<dyn UsageSource>,
    meter: Option<Box<dyn PowerMeter>>,
    attributor: Attributor,
    /// When meter readings were taken. Only differences matter: they are the intervals that
    /// turn energy into watts, so a test that sets this clock gets exact, repeatable watts.
    clock: Arc<dyn Clock>,
    previous_usage: Option<UsageSnapshot>,
    previous_energy: Option<EnergySnapshot>,
    /// Spare buffer for meter reads, recycled from the snapshot before last.
    readings: Vec<ZoneReading>,
    /// Set while the meter keeps failing, so the failure is logged once, not every tick.
    meter_failing: bool,
    /// Whether the last tick had energy for at least one zone.
    had_energy: bool,
    /// Attach the interval's model features to each snapshot (`ebpf.exportFeatures`).
    export_features: bool,
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
    pub fn new(
        source: Box<dyn UsageSource>,
        meter: Option<Box<dyn PowerMeter>>,
        attributor: Attributor,
    ) -> Self {
        Sampler {
            source,
            meter,
            attributor,
            clock: Arc::new(MonotonicClock::default()),
            previous_usage: None,
            previous_energy: None,
            readings: Vec::new(),
            meter_failing: false,
            had_energy: false,
            export_features: false,
        }
    }

    /// True once a tick has turned meter readings into energy (the agent is then ready).
    pub fn had_energy(&self) -> bool {
        self.had_energy
    }

    pub fn with_features(mut self, export: bool) -> Self {
        self.export_features = export;
        self
    }

    /// Stamps meter readings with `clock` instead of the monotonic clock (the default). The
    /// golden `/metrics` test drives it by hand; set it before the first tick, since intervals
    /// are differences between readings of the same clock.
    pub fn with_clock(mut self, clock: Arc<dyn Clock>) -> Self {
        self.clock = clock;
        self
    }

    pub fn meter(&self) -> Option<&dyn PowerMeter> {
        self.meter.as_deref()
    }

    /// Takes one sample and returns the snapshot of the interval since the previous one. The
    /// first call only sets baselines: its snapshot has usage but no energy.
    pub fn tick(&mut self) -> Result<PowerSnapshot, TickError> {
        let usage = self.source.snapshot().map_err(|error| TickError::Usage {
            source_name: self.source.name().to_string(),
            error,
        })?;
        let energy = self.read_meter(&usage);

        let zones = match (&self.previous_energy, &energy) {
            (Some(previous), Some(current)) => {
                let (zones, issues) = zone_energies(previous, current);
                for issue in issues {
                    warn!(%issue, "energy sample dropped");
                }
                Some((zones, current.at.saturating_sub(previous.at)))
            }
            _ => None,
        };
        self.had_energy = zones.as_ref().is_some_and(|(z, _)| !z.is_empty());
        let interval = match (&zones, &self.previous_usage) {
            (Some((_, interval)), _) => *interval,
            (None, Some(previous)) => usage.uptime.saturating_sub(previous.uptime),
            (None, None) => Duration::ZERO,
        };
        let mut snapshot = self.attributor.tick(Tick {
            usage: &usage,
            energy: zones.as_ref().map(|(z, _)| z.as_slice()),
            interval,
        });
        if self.export_features {
            if let Some(previous) = &self.previous_usage {
                snapshot.features = Some(std::sync::Arc::new(kepler_core::features::features(
                    previous, &usage,
                )));
            }
        }
        debug!(
            tick = snapshot.tick,
            processes = usage.processes.len(),
            ?interval,
            "tick"
        );
        self.previous_usage = Some(usage);
        if let Some(old) = std::mem::replace(&mut self.previous_energy, energy) {
            self.readings = old.readings;
        }
        Ok(snapshot)
    }

    fn read_meter(&mut self, usage: &UsageSnapshot) -> Option<EnergySnapshot> {
        let meter = self.meter.as_mut()?;
        if let Some(previous) = &self.previous_usage {
            meter.observe_usage(previous, usage);
        }
        // Reuse the allocation of the reading before last (the last one is still needed as
        // the previous snapshot).
        let mut readings = std::mem::take(&mut self.readings);
        readings.clear();
        // The counters are sampled somewhere inside the read, which can be preempted on a busy
        // host: the middle of the read is the best estimate of when.
        let before = self.clock.now();
        let read = meter.read(&mut readings);
        let after = self.clock.now();
        let at = before + after.saturating_sub(before) / 2;
        match read {
            Ok(()) => {
                if self.meter_failing {
                    warn!(meter = meter.name(), "meter readable again");
                    self.meter_failing = false;
                }
                Some(EnergySnapshot { at, readings })
            }
            Err(error) => {
                // The next good reading starts a new baseline: energy across the gap is not
                // known per interval, so it is counted nowhere rather than in the wrong tick.
                if !self.meter_failing {
                    warn!(meter = meter.name(), %error, "meter read failed; energy skipped until it recovers");
                    self.meter_failing = true;
                }
                self.readings = readings;
                None
            }
        }
    }
}

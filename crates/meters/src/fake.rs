//! The development meter (`dev.fake-cpu-meter`): deterministic numbers on hosts without any
//! power hardware, shaped like RAPL so the whole pipeline, wrap handling included, runs.
//!
//! Each zone draws `scale(zone) × base × (1 + 0.2 × sin(2π t / 120 s))` watts, where `t` is
//! the time since the meter was created, and reports the integral of that curve as an energy
//! counter in µJ that wraps to 0 after `max_energy_uj` (2³² − 1 by default: about 72 s at 60 W,
//! so a dev run sees wraps; the interval × peak watts must stay below it, or a tick would span
//! two wraps). Because the counter is a function of time, not of how often it is read, any
//! number of meters sharing a clock agree.

use std::f64::consts::TAU;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::{
    MeterInput, MicroJoules, PowerMeter, Provenance, ReadError, Unavailable, Watts, ZoneReading,
    ZoneSample,
};

/// Upstream's default zones for its fake CPU meter.
pub const FAKE_DEFAULT_ZONES: [&str; 3] = ["package", "core", "dram"];
/// Default wrap point, the width of the hardware RAPL counters.
pub const FAKE_DEFAULT_MAX_ENERGY_UJ: u64 = u32::MAX as u64;
/// Default power of the `package` zone around which the curve oscillates.
pub const FAKE_DEFAULT_BASE_WATTS: f64 = 50.0;
/// Period of the oscillation.
pub const FAKE_PERIOD: Duration = Duration::from_secs(120);
/// Peak deviation from the base, as a fraction of it.
pub const FAKE_AMPLITUDE: f64 = 0.2;

/// Configuration of the fake meter.
#[derive(Clone, Debug, PartialEq)]
pub struct FakeSettings {
    /// Zone names; empty means [`FAKE_DEFAULT_ZONES`].
    pub zones: Vec<String>,
    /// Mean watts of the `package` zone; other zones are fixed fractions of it.
    pub base_watts: f64,
    /// The counter's wrap point (`max_energy_range_uj`).
    pub max_energy_uj: u64,
}

impl Default for FakeSettings {
    fn default() -> Self {
        FakeSettings {
            zones: Vec::new(),
            base_watts: FAKE_DEFAULT_BASE_WATTS,
            max_energy_uj: FAKE_DEFAULT_MAX_ENERGY_UJ,
        }
    }
}

/// A monotonic time source; only differences between its values matter.
pub trait Clock: Send + Sync {
    fn now(&self) -> Duration;
}

/// Real time.
#[derive(Debug)]
pub struct MonotonicClock {
    origin: Instant,
}

impl Default for MonotonicClock {
    fn default() -> Self {
        MonotonicClock {
            origin: Instant::now(),
        }
    }
}

impl Clock for MonotonicClock {
    fn now(&self) -> Duration {
        self.origin.elapsed()
    }
}

/// A clock moved by hand, for tests; clones share the same time.
#[derive(Clone, Debug, Default)]
pub struct ManualClock {
    nanos: Arc<AtomicU64>,
}

impl ManualClock {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn set(&self, t: Duration) {
        self.nanos.store(saturating_nanos(t), Ordering::SeqCst);
    }

    pub fn advance(&self, by: Duration) {
        let by = saturating_nanos(by);
        // fetch_update cannot fail here: the closure always returns Some.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                Some(n.saturating_add(by))
            });
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

fn saturating_nanos(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The fake meter.
pub struct FakeMeter {
    zones: Vec<FakeZone>,
    clock: Arc<dyn Clock>,
    origin: Duration,
    base_watts: f64,
    max: MicroJoules,
}

struct FakeZone {
    zone: Arc<str>,
    path: Arc<str>,
    scale: f64,
}

impl std::fmt::Debug for FakeMeter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeMeter")
            .field(
                "zones",
                &self.zones.iter().map(|z| &*z.zone).collect::<Vec<_>>(),
            )
            .field("base_watts", &self.base_watts)
            .field("max", &self.max)
            .finish_non_exhaustive()
    }
}

impl FakeMeter {
    /// A fake meter on real time.
    pub fn new(settings: &FakeSettings) -> Result<Self, Unavailable> {
        Self::with_clock(settings, Arc::new(MonotonicClock::default()))
    }

    /// A fake meter whose curve starts at `clock.now()`.
    pub fn with_clock(settings: &FakeSettings, clock: Arc<dyn Clock>) -> Result<Self, Unavailable> {
        if !settings.base_watts.is_finite() || settings.base_watts < 0.0 {
            return Err(Unavailable::new(format!(
                "fake meter: base watts must be a finite number ≥ 0, got {}",
                settings.base_watts
            )));
        }
        if settings.max_energy_uj == 0 {
            return Err(Unavailable::new("fake meter: max_energy_uj must be > 0"));
        }
        let mut names: Vec<String> = Vec::new();
        for z in &settings.zones {
            let z = z.trim().to_lowercase();
            if !z.is_empty() && !names.contains(&z) {
                names.push(z);
            }
        }
        if names.is_empty() {
            names = FAKE_DEFAULT_ZONES.iter().map(|z| z.to_string()).collect();
        }
        let zones = names
            .into_iter()
            .map(|name| FakeZone {
                scale: zone_scale(&name),
                path: format!("fake:{name}").into(),
                zone: name.into(),
            })
            .collect();
        let origin = clock.now();
        Ok(FakeMeter {
            zones,
            clock,
            origin,
            base_watts: settings.base_watts,
            max: MicroJoules(settings.max_energy_uj),
        })
    }

    /// The power of `zone` at `elapsed` after creation; `None` for a zone this meter lacks.
    pub fn watts_at(&self, zone: &str, elapsed: Duration) -> Option<Watts> {
        let z = self.zones.iter().find(|z| &*z.zone == zone)?;
        let t = elapsed.as_secs_f64();
        let w =
            self.base_watts * (1.0 + FAKE_AMPLITUDE * (TAU * t / FAKE_PERIOD.as_secs_f64()).sin());
        Some(Watts(z.scale * w))
    }

    /// Energy of a zone of relative size `scale` from creation to `elapsed`, in µJ, unwrapped.
    fn energy_uj(&self, scale: f64, elapsed: Duration) -> f64 {
        let t = elapsed.as_secs_f64();
        let period = FAKE_PERIOD.as_secs_f64();
        // ∫₀ᵗ b(1 + a·sin(ωs)) ds = b·t + b·a·(1 − cos(ωt))/ω
        let omega = TAU / period;
        let joules = self.base_watts * (t + FAKE_AMPLITUDE * (1.0 - (omega * t).cos()) / omega);
        scale * joules * 1e6
    }
}

/// Relative size of each zone, loosely after a server CPU: package = core + uncore + the rest.
fn zone_scale(zone: &str) -> f64 {
    match zone {
        "package" => 1.0,
        "core" => 0.6,
        "uncore" => 0.1,
        "dram" => 0.2,
        "psys" => 1.3,
        "platform" => 1.5,
        _ => 0.5,
    }
}

impl PowerMeter for FakeMeter {
    fn name(&self) -> &str {
        "fake"
    }

    fn provenance(&self) -> Provenance {
        Provenance::Synthetic
    }

    fn zones(&self) -> Vec<String> {
        self.zones.iter().map(|z| z.zone.to_string()).collect()
    }

    fn read(
        &mut self,
        _input: &MeterInput<'_>,
        out: &mut Vec<ZoneReading>,
    ) -> Result<(), ReadError> {
        let elapsed = self.clock.now().saturating_sub(self.origin);
        for z in &self.zones {
            // Rounding is monotone and the curve never decreases, so the counter only grows
            // (until it wraps). `as` saturates; u128 keeps `max + 1` from overflowing.
            let total = self.energy_uj(z.scale, elapsed).round() as u128;
            let counter = total % (u128::from(self.max.0) + 1);
            out.push(ZoneReading {
                zone: z.zone.clone(),
                path: z.path.clone(),
                sample: ZoneSample::Energy {
                    counter: MicroJoules(u64::try_from(counter).unwrap_or(self.max.0)),
                    max: Some(self.max),
                },
                shares: None,
                idle: None,
                device: None,
            });
        }
        Ok(())
    }
}

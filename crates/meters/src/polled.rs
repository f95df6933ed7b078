//! The adapter for slow meters (BMCs over the network, IPMI): a poller thread asks the device
//! at its own pace and keeps the last answer; the tick's `read()` only copies that answer, so a
//! slow or hung device never delays the tick or the other domains' meters. A reading older
//! than the staleness limit is an error of the meter for that tick, not a number.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kepler_core::{
    BackgroundTask, ComponentHealth, ComponentKind, MeterInput, PlatformPower, PowerDomain,
    PowerMeter, Provenance, ReadError, StopSignal, ZoneReading,
};
use tracing::{debug, warn};

/// A device that may take long to answer. Implemented by the slow meters' clients.
pub trait SlowDevice: Send + 'static {
    /// Asks the device now; may block up to the client's own timeout.
    fn poll(&mut self) -> Result<Polled, ReadError>;
}

/// One answer of a device: the zone readings, and the device's own breakdown of them for
/// `kepler_platform_watts`. Kept together so the tick never pairs a total with another
/// answer's detail.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Polled {
    pub readings: Vec<ZoneReading>,
    pub platform: Vec<PlatformPower>,
}

impl From<Vec<ZoneReading>> for Polled {
    fn from(readings: Vec<ZoneReading>) -> Self {
        Polled {
            readings,
            platform: Vec::new(),
        }
    }
}

/// How often to poll and how old a reading may be when the tick takes it.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub struct PollTiming {
    pub every: Duration,
    pub staleness: Duration,
    /// The longest wait between attempts while the device keeps failing (backoff doubles the
    /// wait from `every` up to this).
    pub max_backoff: Duration,
}

#[derive(Default)]
struct Latest {
    readings: Option<(Instant, Polled)>,
    error: Option<String>,
}

/// The meter side of the adapter; see the module docs.
pub struct PolledMeter {
    name: String,
    domain: PowerDomain,
    provenance: Provenance,
    zones: Vec<String>,
    staleness: Duration,
    latest: Arc<Mutex<Latest>>,
    /// The breakdown of the answer the last successful read returned.
    platform: Vec<PlatformPower>,
    detail: Option<String>,
}

/// The poller side: run it on the agent's service (`Service::spawn`), which stops it.
pub struct Poller {
    device: Box<dyn SlowDevice>,
    timing: PollTiming,
    latest: Arc<Mutex<Latest>>,
    health: Arc<ComponentHealth>,
    name: String,
}

impl PolledMeter {
    /// The meter and its poller; `health` is the poller's component (kind `Poller`).
    pub fn new(
        name: &str,
        domain: PowerDomain,
        provenance: Provenance,
        zones: Vec<String>,
        device: Box<dyn SlowDevice>,
        timing: PollTiming,
        health: Arc<ComponentHealth>,
    ) -> (PolledMeter, Poller) {
        let latest = Arc::new(Mutex::new(Latest::default()));
        (
            PolledMeter {
                name: name.to_string(),
                domain,
                provenance,
                zones,
                staleness: timing.staleness,
                latest: latest.clone(),
                platform: Vec::new(),
                detail: None,
            },
            Poller {
                device,
                timing,
                latest,
                health,
                name: name.to_string(),
            },
        )
    }
}

impl PolledMeter {
    /// What `kepler probe` shows about the device (where it is, what it answered); never a
    /// secret.
    pub fn with_detail(mut self, detail: String) -> Self {
        self.detail = Some(detail);
        self
    }
}

impl PowerMeter for PolledMeter {
    fn name(&self) -> &str {
        &self.name
    }

    fn domain(&self) -> PowerDomain {
        self.domain
    }

    fn provenance(&self) -> Provenance {
        self.provenance
    }

    fn zones(&self) -> Vec<String> {
        self.zones.clone()
    }

    fn detail(&self) -> Option<String> {
        self.detail.clone()
    }

    fn platform_sources(&self) -> &[PlatformPower] {
        &self.platform
    }

    fn read(&mut self, _: &MeterInput<'_>, out: &mut Vec<ZoneReading>) -> Result<(), ReadError> {
        self.platform.clear();
        let latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        match &latest.readings {
            Some((at, polled)) if at.elapsed() <= self.staleness => {
                out.extend(polled.readings.iter().cloned());
                // Labels are shared (`Arc`), so this copies only pointers and numbers.
                self.platform.extend(polled.platform.iter().cloned());
                Ok(())
            }
            Some((at, _)) => Err(ReadError::Other(format!(
                "last reading is {:.1} s old (staleness limit {:.1} s){}",
                at.elapsed().as_secs_f64(),
                self.staleness.as_secs_f64(),
                latest
                    .error
                    .as_deref()
                    .map(|e| format!("; last error: {e}"))
                    .unwrap_or_default()
            ))),
            None => Err(ReadError::Other(match &latest.error {
                Some(e) => format!("no reading yet: {e}"),
                None => "no reading yet".to_string(),
            })),
        }
    }
}

/// Builds a polled meter for a slow device and hands its poller to the agent
/// (`cx.background`: started on its service under its stop signal, reporting as a `poller`).
/// Where nothing will run it (`kepler probe`), the device is asked once, now, and `detail`
/// says what it answered.
pub fn start(
    cx: &crate::registry::OpenContext<'_>,
    name: &str,
    domain: PowerDomain,
    provenance: Provenance,
    device: Box<dyn SlowDevice>,
    timing: PollTiming,
    detail: String,
) -> Result<PolledMeter, kepler_core::Unavailable> {
    // Replaced by the agent's own handle when the task starts; probe keeps this private one.
    let health = kepler_core::Health::new().register(ComponentKind::Poller, name);
    let zones = vec![domain.as_str().to_string()];
    let (meter, mut poller) =
        PolledMeter::new(name, domain, provenance, zones, device, timing, health);
    match cx.background {
        Some(background) => {
            background.push(BackgroundTask::new(
                format!("kepler-{name}"),
                ComponentKind::Poller,
                name,
                move |stop, health| {
                    poller.health = health;
                    poller.run(stop);
                },
            ));
            Ok(meter.with_detail(detail))
        }
        None => {
            let answer = match poller.poll_once() {
                Ok(polled) => {
                    let watts: f64 = polled
                        .readings
                        .iter()
                        .filter_map(|r| match r.sample {
                            kepler_core::ZoneSample::Power(w) => Some(w.0),
                            kepler_core::ZoneSample::Energy { .. } => None,
                        })
                        .sum();
                    format!(
                        "answered: {watts:.1} W from {} reading(s)",
                        polled.readings.len()
                    )
                }
                Err(e) => format!("did not answer: {e}"),
            };
            Ok(meter.with_detail(format!("{detail}; {answer}")))
        }
    }
}

impl Poller {
    /// Asks the device once and stores the answer for the meter (as one round of
    /// [`Poller::run`] does); returns a copy of it.
    pub fn poll_once(&mut self) -> Result<Polled, String> {
        let result = self.device.poll();
        let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
        match result {
            Ok(polled) => {
                latest.readings = Some((Instant::now(), polled.clone()));
                latest.error = None;
                self.health.set_up();
                Ok(polled)
            }
            Err(e) => {
                latest.error = Some(e.to_string());
                self.health.set_down();
                Err(e.to_string())
            }
        }
    }

    /// Polls until `stop`, backing off exponentially while the device fails.
    pub fn run(mut self, stop: StopSignal) {
        let mut wait = self.timing.every;
        while !stop.is_stopped() {
            let started = Instant::now();
            let result = self.device.poll();
            let mut latest = self.latest.lock().unwrap_or_else(PoisonError::into_inner);
            match result {
                Ok(readings) => {
                    latest.readings = Some((Instant::now(), readings));
                    latest.error = None;
                    drop(latest);
                    if self.health.set_up() {
                        warn!(meter = self.name, "device answers again");
                    }
                    debug!(meter = self.name, took = ?started.elapsed(), "polled");
                    wait = self.timing.every;
                }
                Err(e) => {
                    latest.error = Some(e.to_string());
                    drop(latest);
                    if self.health.set_down() {
                        warn!(meter = self.name, error = %e, "device poll failed; backing off");
                    }
                    wait = (wait * 2).min(self.timing.max_backoff.max(self.timing.every));
                }
            }
            if stop.wait(wait.saturating_sub(started.elapsed())) {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kepler_core::{ComponentKind, Health, Watts};
    use std::sync::mpsc;

    /// A device whose answers the test hands over one by one.
    struct Scripted(mpsc::Receiver<Result<f64, String>>);

    impl SlowDevice for Scripted {
        fn poll(&mut self) -> Result<Polled, ReadError> {
            match self.0.recv() {
                Ok(Ok(w)) => Ok(vec![ZoneReading::power(
                    "platform".into(),
                    "bmc".into(),
                    Watts(w),
                )]
                .into()),
                Ok(Err(e)) => Err(ReadError::Other(e)),
                // The test ended: look hung, as a device that stopped answering would.
                Err(_) => {
                    std::thread::sleep(Duration::from_millis(5));
                    Err(ReadError::Other("gone".into()))
                }
            }
        }
    }

    fn timing(staleness_ms: u64) -> PollTiming {
        PollTiming {
            every: Duration::from_millis(1),
            staleness: Duration::from_millis(staleness_ms),
            max_backoff: Duration::from_millis(4),
        }
    }

    /// What `check` finds once it finds something; a poller that never delivers fails the test
    /// (after a minute) instead of hanging it.
    fn eventually<T>(what: &str, mut check: impl FnMut() -> Option<T>) -> T {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(found) = check() {
                return found;
            }
            assert!(std::time::Instant::now() < deadline, "never saw {what}");
            std::thread::yield_now();
        }
    }

    fn read(meter: &mut PolledMeter) -> Result<Vec<ZoneReading>, ReadError> {
        let mut out = Vec::new();
        meter.read(&MeterInput::default(), &mut out).map(|()| out)
    }

    #[test]
    fn the_tick_takes_the_cached_answer_and_never_waits_for_the_device() {
        let health = Health::new();
        let (answers, rx) = mpsc::channel();
        let (mut meter, poller) = PolledMeter::new(
            "bmc",
            PowerDomain::Platform,
            Provenance::Measured,
            vec!["platform".into()],
            Box::new(Scripted(rx)),
            timing(60_000),
            health.register(ComponentKind::Poller, "bmc"),
        );
        let stop = StopSignal::new();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || poller.run(stop))
        };
        // The device has not answered: the read fails at once instead of blocking.
        assert!(read(&mut meter)
            .unwrap_err()
            .to_string()
            .contains("no reading yet"));
        answers.send(Ok(250.0)).unwrap();
        let readings = eventually("a reading", || read(&mut meter).ok());
        assert_eq!(
            readings[0].sample,
            kepler_core::ZoneSample::Power(Watts(250.0))
        );
        assert_eq!(meter.domain(), PowerDomain::Platform);
        // A failure is counted by the poller's health; the cached answer is still fresh.
        answers.send(Err("timeout".into())).unwrap();
        let component = &health.components()[0];
        eventually("a counted failure", || {
            (component.errors() > 0).then_some(())
        });
        assert!(!component.is_up());
        assert!(read(&mut meter).is_ok());
        stop.stop();
        drop(answers);
        thread.join().unwrap();
    }

    #[test]
    fn a_stale_answer_is_an_error_not_a_number() {
        let health = Health::new();
        let (answers, rx) = mpsc::channel();
        let (mut meter, poller) = PolledMeter::new(
            "bmc",
            PowerDomain::Platform,
            Provenance::Measured,
            vec!["platform".into()],
            Box::new(Scripted(rx)),
            timing(0),
            health.register(ComponentKind::Poller, "bmc"),
        );
        answers.send(Ok(100.0)).unwrap();
        answers.send(Err("connection refused".into())).unwrap();
        drop(answers);
        let stop = StopSignal::new();
        let thread = {
            let stop = stop.clone();
            std::thread::spawn(move || poller.run(stop))
        };
        let error = eventually("a stale reading", || {
            read(&mut meter)
                .err()
                .map(|e| e.to_string())
                .filter(|e| e.contains("old"))
        });
        assert!(error.contains("staleness limit"), "{error}");
        stop.stop();
        thread.join().unwrap();
    }
}

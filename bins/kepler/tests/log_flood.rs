//! A meter that lies every tick must not flood the log: the agent's real sampler, driven for
//! several simulated minutes, logs "energy sample dropped" once and then once a minute with the
//! number held back, while the meter's error counter counts every dropped sample.

mod scripted;

use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kepler_agent::sampler::Sampler;
use kepler_core::*;
use scripted::{plain, ScriptedUsage};

/// Reports a power no machine draws, which the plausibility check drops every interval.
struct LyingMeter;

impl PowerMeter for LyingMeter {
    fn name(&self) -> &str {
        "liar"
    }
    fn zones(&self) -> Vec<String> {
        vec!["package".into()]
    }
    fn read(&mut self, _: &MeterInput<'_>, out: &mut Vec<ZoneReading>) -> Result<(), ReadError> {
        out.push(ZoneReading::power(
            "package".into(),
            "/liar".into(),
            Watts(1e12),
        ));
        Ok(())
    }
}

/// The log lines the subscriber wrote, shared with the test.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn a_meter_that_lies_every_tick_is_logged_once_a_minute_and_counted_every_time() {
    const TICKS: u64 = 200;
    let seconds = Arc::new(AtomicU64::new(0));
    let clock = seconds.clone();
    let health = Health::new();
    let usage = ScriptedUsage::new(vec![(10, 500, plain(10))]);
    let mut sampler = Sampler::new(
        Box::new(usage),
        vec![Box::new(LyingMeter)],
        Attributor::new(AttributionConfig::default()),
        &health,
    )
    .with_clock(Box::new(move || {
        Duration::from_secs(clock.load(Ordering::SeqCst))
    }));

    let captured = Captured::default();
    let writer = captured.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::with_default(subscriber, || {
        for tick in 1..=TICKS {
            seconds.store(tick, Ordering::SeqCst);
            sampler.tick().unwrap();
        }
    });

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("energy sample dropped"))
        .collect();
    // The first reading is a baseline; each later one is dropped: one per simulated second.
    let dropped = TICKS - 1;
    let errors = health
        .components()
        .iter()
        .find(|c| c.name() == "liar")
        .unwrap()
        .errors();
    assert_eq!(errors, dropped, "every dropped sample is counted");
    // Seconds 2, 62, 122 and 182: the first, then one a minute saying how many were held.
    assert_eq!(lines.len(), 4, "{log}");
    assert!(lines[0].contains("repeats_not_logged=0"), "{}", lines[0]);
    for line in &lines[1..] {
        assert!(line.contains("repeats_not_logged=59"), "{line}");
    }
}

//! The Redfish meter against a fake BMC on loopback (tests/support/bmc.rs): session and basic
//! auth, power supplies and power controls, and a BMC that fails, hangs, times out or answers
//! garbage. The tick's read never waits for the BMC, and no password or token is ever logged
//! or shown by probe.

mod support;

use std::path::Path;
use std::time::Duration;

use kepler_core::{
    Background, ComponentKind, Health, PowerDomain, PowerMeter, StopSignal, Unavailable,
    ZoneReading, ZoneSample,
};
use kepler_meters::{MeterName, MeterSettings, OpenContext, RedfishSettings};
use support::bmc::{FakeBmc, Mode, PASSWORD};
use support::{read, read_until};

const NODE: &str = "node-a";

fn settings(file: &Path, timeout: Duration) -> MeterSettings {
    MeterSettings {
        node_name: NODE.into(),
        poll_interval: Duration::from_millis(20),
        redfish: RedfishSettings {
            enabled: true,
            config_file: Some(file.to_path_buf()),
            http_timeout: timeout,
            staleness: Duration::from_secs(60),
            node_name: None,
        },
        ..MeterSettings::default()
    }
}

/// Pollers started by the meter, stopped when the test ends.
struct Threads(StopSignal);

impl Drop for Threads {
    fn drop(&mut self) {
        self.0.stop();
    }
}

/// Opens the `redfish` row with pollers on plain threads and the given health.
fn open(
    settings: &MeterSettings,
    health: &Health,
) -> (Result<Box<dyn PowerMeter>, Unavailable>, Threads) {
    let stop = StopSignal::new();
    let threads = Threads(stop.clone());
    let background = Background::new();
    let cx = OpenContext {
        background: Some(&background),
        ..OpenContext::new(settings)
    };
    let meter = "redfish".parse::<MeterName>().unwrap().open(&cx);
    support::run_background(&background, health, &stop);
    (meter, threads)
}

fn watts(readings: &[ZoneReading]) -> f64 {
    readings
        .iter()
        .map(|r| match r.sample {
            ZoneSample::Power(w) => w.0,
            ZoneSample::Energy { .. } => f64::NAN,
        })
        .sum()
}

fn bmc_file(dir: &Path, bmc: &FakeBmc) -> std::path::PathBuf {
    let file = dir.join("bmc.yaml");
    std::fs::write(&file, bmc.bmc_file(NODE)).unwrap();
    file
}

fn no_secret_anywhere(texts: &[&str]) {
    let logs = support::logs::text();
    for text in texts.iter().chain([&logs.as_str()]) {
        assert!(!text.contains(PASSWORD), "password leaked: {text}");
        assert!(!text.contains("token-"), "session token leaked: {text}");
    }
}

#[test]
fn a_session_reads_power_supplies_and_controls_and_logs_in_again_after_401() {
    support::logs::capture();
    let bmc = FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(&bmc_file(dir.path(), &bmc), Duration::from_secs(5));
    let health = Health::new();
    let (meter, _threads) = open(&settings, &health);
    let mut meter = meter.unwrap();
    assert_eq!(meter.domain(), PowerDomain::Platform);
    assert_eq!(meter.zones(), vec!["platform"]);

    let readings = read_until(meter.as_mut(), Result::is_ok).unwrap();
    // Two supplies of chassis 1U, and the blade's whole-chassis control; its CPU control is
    // a part of that total and stays out of the zone.
    assert_eq!(watts(&readings), 120.5 + 110.0 + 44.0);
    assert!(readings.iter().all(|r| &*r.zone == "platform"));
    assert_eq!(
        &*readings[0].path,
        "test-bmc:/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1"
    );
    let sources: Vec<String> = meter
        .platform_sources()
        .iter()
        .map(|p| {
            let l = &p.labels;
            format!(
                "{} {} {} {} {} {} {}",
                l.source,
                l.bmc_id,
                l.chassis_id,
                l.source_id,
                l.source_name,
                l.source_type,
                p.watts.0
            )
        })
        .collect();
    assert_eq!(
        sources,
        vec![
            "redfish test-bmc 1U Bay1 Power Supply Bay 1 PowerSupply 120.5",
            "redfish test-bmc 1U Bay2 Power Supply Bay 2 PowerSupply 110",
            "redfish test-bmc Blade 0 Blade Power Control PowerControl 44",
            "redfish test-bmc Blade 1 CPU Subsystem PowerControl 20",
        ]
    );
    assert_eq!(bmc.state.lock().unwrap().logins, 1);

    // The BMC forgets its sessions: the next request gets 401, the client logs in again.
    bmc.expire_sessions();
    for _ in 0..3000 {
        if bmc.state.lock().unwrap().logins >= 2 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(bmc.state.lock().unwrap().logins, 2);
    read_until(meter.as_mut(), Result::is_ok).unwrap();
    let poller = health
        .components()
        .into_iter()
        .find(|c| c.kind() == ComponentKind::Poller)
        .unwrap();
    assert_eq!(poller.name(), "redfish");
    no_secret_anywhere(&[&meter.detail().unwrap_or_default()]);

    // The agent stops: the poller closes its session on the way out.
    drop(_threads);
    for _ in 0..3000 {
        if bmc.state.lock().unwrap().logouts > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let state = bmc.state.lock().unwrap();
    assert_eq!(state.logouts, 1);
    assert!(state.tokens.is_empty(), "the live session was closed");
}

#[test]
fn basic_auth_where_the_bmc_has_no_session_service() {
    support::logs::capture();
    let bmc = FakeBmc::start(false);
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(&bmc_file(dir.path(), &bmc), Duration::from_secs(5));
    let (meter, _threads) = open(&settings, &Health::new());
    let mut meter = meter.unwrap();
    let readings = read_until(meter.as_mut(), Result::is_ok).unwrap();
    assert_eq!(watts(&readings), 274.5);
    let state = bmc.state.lock().unwrap();
    assert_eq!(state.logins, 0);
    assert_eq!(state.refused, 0, "every GET carried basic auth");
    drop(state);
    no_secret_anywhere(&[]);
}

#[test]
fn a_wrong_password_is_an_error_that_does_not_show_it() {
    support::logs::capture();
    let bmc = FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bmc.yaml");
    std::fs::write(
        &file,
        bmc.bmc_file(NODE).replace(PASSWORD, "wrong-horse-battery"),
    )
    .unwrap();
    let settings = settings(&file, Duration::from_secs(5));
    let health = Health::new();
    let (meter, _threads) = open(&settings, &health);
    let mut meter = meter.unwrap();
    let error = read_until(meter.as_mut(), |r| {
        r.as_ref()
            .is_err_and(|e| e.contains("refused the credentials"))
    })
    .unwrap_err();
    assert!(!error.contains("wrong-horse"), "{error}");
    assert!(!support::logs::text().contains("wrong-horse"));
}

#[test]
fn errors_slow_answers_and_garbage_are_errors_of_the_meter_and_it_recovers() {
    support::logs::capture();
    let bmc = FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let file = bmc_file(dir.path(), &bmc);
    for (mode, expected) in [
        (Mode::Status(500), "HTTP status 500"),
        (Mode::Garbage, "not JSON"),
        (Mode::Slow(Duration::from_secs(3)), "timed out"),
    ] {
        bmc.set_mode(mode.clone());
        let health = Health::new();
        let (meter, _threads) = open(&settings(&file, Duration::from_millis(300)), &health);
        let mut meter = meter.unwrap();
        let error = read_until(meter.as_mut(), |r| {
            r.as_ref().is_err_and(|e| e.contains(expected))
        })
        .unwrap_err();
        assert!(error.starts_with("no reading yet: "), "{mode:?}: {error}");
        assert!(meter.platform_sources().is_empty());
        let poller = &health.components()[0];
        assert!(!poller.is_up() && poller.errors() > 0, "{mode:?}");
        // The BMC comes back: so does the meter, after its backoff.
        bmc.set_mode(Mode::Normal);
        let readings = read_until(meter.as_mut(), Result::is_ok).unwrap();
        assert_eq!(watts(&readings), 274.5, "{mode:?}");
        assert!(poller.is_up());
    }
    no_secret_anywhere(&[]);
}

#[test]
fn the_tick_never_waits_for_a_hung_bmc() {
    support::logs::capture();
    let bmc = FakeBmc::start(true);
    bmc.set_mode(Mode::Hold);
    let dir = tempfile::tempdir().unwrap();
    let (meter, _threads) = open(
        &settings(&bmc_file(dir.path(), &bmc), Duration::from_secs(30)),
        &Health::new(),
    );
    let mut meter = meter.unwrap();
    // Wait until the poller is inside a GET that the BMC holds.
    for _ in 0..3000 {
        if bmc.state.lock().unwrap().logins > 0 {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(bmc.state.lock().unwrap().logins, 1);
    // The BMC still holds the request: the read answers anyway, with an error, not a number.
    let error = read(meter.as_mut()).unwrap_err();
    assert_eq!(error, "no reading yet");
    assert_eq!(bmc.state.lock().unwrap().gets, 0, "still held");
    bmc.set_mode(Mode::Normal);
    read_until(meter.as_mut(), Result::is_ok).unwrap();
}

#[test]
fn probe_asks_once_and_never_shows_the_password() {
    support::logs::capture();
    let bmc = FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(&bmc_file(dir.path(), &bmc), Duration::from_secs(5));
    let redfish: MeterName = "redfish".parse().unwrap();
    let meter = redfish.open(&OpenContext::new(&settings)).unwrap();
    let detail = meter.detail().unwrap();
    assert!(
        detail.starts_with(&format!("BMC test-bmc at {} for node node-a", bmc.endpoint)),
        "{detail}"
    );
    assert!(
        detail.ends_with("answered: 274.5 W from 3 reading(s)"),
        "{detail}"
    );
    // Probe leaves no session behind.
    assert_eq!(bmc.state.lock().unwrap().logouts, 1);
    drop(bmc);
    // Nobody listens any more.
    let meter = redfish.open(&OpenContext::new(&settings)).unwrap();
    let detail = meter.detail().unwrap();
    assert!(detail.contains("did not answer: /redfish/v1"), "{detail}");
    no_secret_anywhere(&[&detail]);
}

#[test]
fn unavailable_with_the_reason_and_no_secret() {
    let dir = tempfile::tempdir().unwrap();
    let redfish: MeterName = "redfish".parse().unwrap();
    let mut s = settings(&dir.path().join("missing.yaml"), Duration::from_secs(1));
    let reason = |s: &MeterSettings| {
        redfish
            .open(&OpenContext::new(s))
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    assert!(reason(&s).contains("missing.yaml"), "{}", reason(&s));
    let file = dir.path().join("bmc.yaml");
    std::fs::write(
        &file,
        format!("nodes: {{other: b}}\nbmcs: {{b: {{endpoint: http://127.0.0.1:1, password: {PASSWORD}}}}}\n"),
    )
    .unwrap();
    s.redfish.config_file = Some(file.clone());
    assert!(
        reason(&s).contains("node \"node-a\" is not listed"),
        "{}",
        reason(&s)
    );
    // nodeName wins over the agent's node name.
    s.redfish.node_name = Some("other".into());
    assert!(redfish.open(&OpenContext::new(&s)).is_ok());
    s.redfish.enabled = false;
    assert_eq!(reason(&s), "experimental.platform.redfish.enabled is false");
}

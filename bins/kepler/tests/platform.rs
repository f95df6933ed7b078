//! Platform power end to end through the agent's own start-up selection, service and sampler:
//! the fake CPU meter and the Redfish meter (against the fake BMC of the meters' tests) at
//! once. Platform power is integrated, split and attributed under zone `platform` with exact
//! conservation, its per-supply detail reaches the snapshot, and when the BMC goes away the
//! platform zone drops to 0 W while the CPU zones go on.

#[path = "../../../crates/meters/tests/support/bmc.rs"]
#[allow(dead_code)]
mod bmc;
mod scripted;

use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kepler_agent::config::Config;
use kepler_agent::sampler::Sampler;
use kepler_agent::service::Service;
use kepler_agent::setup;
use kepler_core::*;
use kepler_sources::HostFacts;
use scripted::{plain, ScriptedUsage};

fn config(bmc_file: &Path) -> Config {
    let yaml = format!(
        "monitor:\n  interval: 100ms\ndev:\n  fake-cpu-meter:\n    enabled: true\nexperimental:\n  platform:\n    redfish:\n      enabled: true\n      nodeName: node-a\n      configFile: {}\n      httpTimeout: 1s\n      staleness: 100ms\n",
        bmc_file.display()
    );
    Config::from_yaml(&yaml, Path::new("test.yaml"))
        .unwrap()
        .config
}

/// Ticks (about every 10 ms, at most about 30 s) until `done` holds for a snapshot.
fn tick_until(sampler: &mut Sampler, done: impl Fn(&PowerSnapshot) -> bool) -> PowerSnapshot {
    for _ in 0..3000 {
        let snapshot = sampler.tick().unwrap();
        if done(&snapshot) {
            return snapshot;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("condition never met");
}

fn zone<'s>(s: &'s PowerSnapshot, name: &str) -> Option<(usize, &'s NodeZone)> {
    s.zones.iter().enumerate().find(|(_, z)| &*z.zone == name)
}

#[test]
fn platform_power_is_attributed_beside_cpu_and_a_lost_bmc_only_drops_its_zone() {
    let fake_bmc = bmc::FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("bmc.yaml");
    std::fs::write(&file, fake_bmc.bmc_file("node-a")).unwrap();
    let config = config(&file);

    let health = Health::new();
    let mut service = Service::new();
    let background = Background::new();
    let host = HostFacts::read(&config.host.procfs, &config.host.sysfs);
    let selection = setup::select_meters(&config, &host, &[], &background);
    // As the agent does: the pollers the meters left behind run on the service.
    for task in background.take() {
        let component = health.register(task.kind(), task.component());
        let thread = task.thread_name().to_string();
        service
            .spawn(&thread, move |stop| task.run(stop, component))
            .unwrap();
    }
    let chosen: Vec<String> = selection
        .meters
        .iter()
        .map(|m| format!("{}/{}", m.domain(), m.name()))
        .collect();
    assert_eq!(chosen, vec!["cpu/fake", "platform/redfish"]);
    // The sampler's clock moves one second per tick and stands still within one (the sampler
    // reads it before and after each of the two meters: four reads a tick), so both meters'
    // intervals are exactly the tick's and the watts are exact.
    let seconds = Arc::new(AtomicU64::new(0));
    let clock = seconds.clone();
    let mut sampler = Sampler::new(
        // Two processes that share the CPU 3:1.
        Box::new(ScriptedUsage::new(vec![
            (1, 750, plain(1)),
            (2, 250, plain(2)),
        ])),
        selection.meters,
        Attributor::new(AttributionConfig::default()),
        &health,
    )
    .with_clock(Box::new(move || {
        Duration::from_secs(clock.fetch_add(1, Ordering::SeqCst) / 4)
    }));

    // Wait for two BMC answers in a row, so the platform zone has an interval.
    let s = tick_until(&mut sampler, |s| {
        zone(s, "platform").is_some_and(|(_, z)| z.total.watts.0 > 0.0)
    });
    let (i, platform) = zone(&s, "platform").unwrap();
    assert_eq!(platform.meta.domain, PowerDomain::Platform);
    assert_eq!(&*platform.meta.meter, "redfish");
    assert_eq!(&*platform.path, "aggregated-platform");
    // 120.5 + 110 + 44 W over one second.
    assert_eq!(platform.total.energy.0 % 274_500_000, 0, "{platform:?}");
    assert_eq!(platform.total.watts.0, 274.5, "{platform:?}");
    // Conservation in the platform zone, to the micro-joule.
    let processes: u64 = s.processes.iter().map(|p| p.zones[i].energy.0).sum();
    assert_eq!(
        processes + platform.unattributed.0,
        platform.active.energy.0,
        "{platform:?}"
    );
    assert_eq!(
        platform.active.energy.0 + platform.idle.energy.0,
        platform.total.energy.0
    );
    let p1 = s.processes.iter().find(|p| p.key.pid == 1).unwrap();
    let p2 = s.processes.iter().find(|p| p.key.pid == 2).unwrap();
    assert!(p1.zones[i].energy.0 > 2 * p2.zones[i].energy.0, "3:1 split");
    // The per-reading detail of the same answer, in the snapshot.
    let detail: Vec<(&str, f64)> = s
        .platform
        .iter()
        .map(|p| (&*p.labels.source_id, p.watts.0))
        .collect();
    assert_eq!(
        detail,
        vec![("Bay1", 120.5), ("Bay2", 110.0), ("0", 44.0), ("1", 20.0)]
    );

    // The BMC goes away: after the staleness limit the platform zone reads 0 W and has no
    // detail, the meter and its poller are down, and the CPU zones go on.
    drop(fake_bmc);
    let s = tick_until(&mut sampler, |s| {
        zone(s, "platform").is_some_and(|(_, z)| z.total.watts.0 == 0.0)
    });
    assert!(s.platform.is_empty());
    let (_, package) = zone(&s, "package").unwrap();
    assert!(package.total.watts.0 > 0.0, "{package:?}");
    let down: Vec<String> = health
        .components()
        .iter()
        .filter(|c| !c.is_up())
        .map(|c| format!("{}/{}", c.kind().as_str(), c.name()))
        .collect();
    assert_eq!(down, vec!["poller/redfish", "meter/redfish"]);
    service.shutdown();
}

//! The architecture's seams, proven with test-only implementations run through the agent's
//! real sampler: a CPU meter and a GPU meter in two power domains at once (the GPU one supplying
//! its own per-process shares), an identity catalogue that renames a container between two
//! ticks, and an in-memory output behind the same trait as the Prometheus one.

mod scripted;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use kepler_agent::sampler::Sampler;
use kepler_core::*;
use kepler_exporters::{AgentStats, Output, OutputError, Publication};
use scripted::{plain, ScriptedUsage};

/// A counter meter of one zone in `domain`, advancing `watts` per second of the shared clock;
/// with `shares`, the meter also says how the zone's energy divides among pids.
struct TestMeter {
    name: &'static str,
    domain: PowerDomain,
    zone: &'static str,
    watts: u64,
    clock: Arc<AtomicU64>,
    shares: Option<ProcessShares>,
}

impl PowerMeter for TestMeter {
    fn name(&self) -> &str {
        self.name
    }
    fn domain(&self) -> PowerDomain {
        self.domain
    }
    fn zones(&self) -> Vec<String> {
        vec![self.zone.to_string()]
    }
    fn read(&mut self, _: &MeterInput<'_>, out: &mut Vec<ZoneReading>) -> Result<(), ReadError> {
        let seconds = self.clock.load(Ordering::SeqCst);
        out.push(ZoneReading {
            shares: self.shares.clone(),
            ..ZoneReading::energy(
                self.zone.into(),
                format!("/{}", self.name).into(),
                MicroJoules(seconds * self.watts * 1_000_000),
                None,
            )
        });
        Ok(())
    }
}

/// Keeps every published snapshot.
#[derive(Clone, Default)]
struct MemoryOutput(Arc<Mutex<Vec<Arc<PowerSnapshot>>>>);

impl Output for MemoryOutput {
    fn name(&self) -> &str {
        "memory"
    }
    fn publish(&mut self, publication: &Publication) -> Result<(), OutputError> {
        self.0.lock().unwrap().push(publication.snapshot.clone());
        Ok(())
    }
}

#[test]
fn two_domains_a_catalogue_and_an_in_memory_output() {
    let clock = Arc::new(AtomicU64::new(0));
    let catalogue = Arc::new(Catalogue::new());
    let health = Health::new();
    let container = Arc::new(ContainerId {
        id: "c1".into(),
        runtime: Runtime::Docker,
        pod_id: None,
    });
    let meters: Vec<Box<dyn PowerMeter>> = vec![
        Box::new(TestMeter {
            name: "cpu-test",
            domain: PowerDomain::Cpu,
            zone: "package",
            watts: 40,
            clock: clock.clone(),
            shares: None,
        }),
        Box::new(TestMeter {
            name: "gpu-test",
            domain: PowerDomain::Gpu,
            zone: "gpu0",
            watts: 100,
            clock: clock.clone(),
            shares: Some(vec![ProcessShare { pid: 3, weight: 1 }].into()),
        }),
    ];
    let tick_clock = clock.clone();
    let mut sampler = Sampler::new(
        // pid 1 (in the container) and 2 burn CPU, pid 3 uses the GPU only.
        Box::new(ScriptedUsage::new(vec![
            (
                1,
                700,
                Arc::new(ProcessInfo {
                    comm: "p1".into(),
                    workload: WorkloadIdentity {
                        process_type: ProcessType::Container,
                        container: Some(container),
                        vm: None,
                    },
                    ..ProcessInfo::default()
                }),
            ),
            (2, 300, plain(2)),
            (3, 0, plain(3)),
        ])),
        meters,
        Attributor::new(AttributionConfig::default()).with_catalogue(catalogue.clone()),
        &health,
    )
    .with_clock(Box::new(move || {
        Duration::from_secs(tick_clock.load(Ordering::SeqCst))
    }));
    let memory = MemoryOutput::default();
    let mut outputs: Vec<Box<dyn Output>> = vec![Box::new(memory.clone())];

    for step in 0..4u64 {
        if step == 2 {
            catalogue.set_container(
                "c1",
                ContainerNames {
                    name: "renamed".into(),
                    pod_id: None,
                },
                NameSource::Process,
            );
        }
        let snapshot = Arc::new(sampler.tick().unwrap());
        for output in &mut outputs {
            output
                .publish(&Publication {
                    snapshot: snapshot.clone(),
                    stats: AgentStats::default(),
                    has_energy: sampler.had_energy(),
                })
                .unwrap();
        }
        clock.fetch_add(1, Ordering::SeqCst);
    }

    let published = memory.0.lock().unwrap();
    assert_eq!(published.len(), 4);
    let last = published.last().unwrap();
    assert_eq!(last.zones.len(), 2);
    for (z, zone) in last.zones.iter().enumerate() {
        let processes: u64 = last.processes.iter().map(|p| p.zones[z].energy.0).sum();
        assert_eq!(
            processes + zone.unattributed.0,
            zone.active.energy.0,
            "zone {} of domain {}",
            zone.zone,
            zone.meta.domain
        );
        assert_eq!(zone.active.energy + zone.idle.energy, zone.total.energy);
    }
    let gpu = last
        .zones
        .iter()
        .position(|z| z.meta.domain == PowerDomain::Gpu)
        .unwrap();
    assert_eq!(&*last.zones[gpu].meta.meter, "gpu-test");
    assert!((last.zones[gpu].total.watts.0 - 100.0).abs() < 1e-9);
    let energy = |pid: u32, z: usize| {
        last.processes
            .iter()
            .find(|p| p.key.pid == pid)
            .unwrap()
            .zones[z]
            .energy
            .0
    };
    // The GPU's active energy went to the pid its meter named, CPU energy by CPU time.
    assert_eq!(energy(3, gpu), last.zones[gpu].active.energy.0);
    assert_eq!(energy(1, gpu) + energy(2, gpu), 0);
    let cpu = 1 - gpu;
    assert_eq!(energy(3, cpu), 0);
    assert_eq!(energy(1, cpu) * 3, energy(2, cpu) * 7);

    // The rename made between the second and third tick shows from the third on.
    let names: Vec<&str> = published
        .iter()
        .skip(1)
        .map(|s| s.containers[0].container.name.as_str())
        .collect();
    assert_eq!(names, ["", "renamed", "renamed"]);
    let up: Vec<(ComponentKind, String, bool)> = health
        .components()
        .iter()
        .map(|c| (c.kind(), c.name().to_string(), c.is_up()))
        .collect();
    assert_eq!(
        up,
        [
            (ComponentKind::Source, "scripted".to_string(), true),
            (ComponentKind::Meter, "cpu-test".to_string(), true),
            (ComponentKind::Meter, "gpu-test".to_string(), true),
        ]
    );
}

/// A source that skipped bad inputs (an unreadable cgroup usage counter, say) has each counted
/// as one of its errors, once, and stays up.
#[test]
fn a_source_s_skipped_inputs_count_as_its_errors_and_it_stays_up() {
    let health = Health::new();
    let mut sampler = Sampler::new(
        Box::new(ScriptedUsage::new(vec![(1, 100, plain(1))]).skipping(2)),
        Vec::new(),
        Attributor::new(AttributionConfig::default()),
        &health,
    );
    let errors = || {
        let components = health.components();
        let source = components
            .iter()
            .find(|c| c.kind() == ComponentKind::Source)
            .unwrap();
        (source.errors(), source.is_up())
    };
    assert_eq!(errors(), (0, true));
    for tick in 1..=3u64 {
        sampler.tick().unwrap();
        assert_eq!(errors(), (2 * tick, true), "after tick {tick}");
    }
}

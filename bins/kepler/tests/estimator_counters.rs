//! The built-in estimator prefers hardware counters when the usage source has them: a
//! scripted source that reports cycles, instructions and cache misses gets the counter model
//! (whose package power follows the cycle rate at the same busy time), one without counters
//! the busy-time model; both through the agent's real sampler. This machine has no perf
//! counters, so the counting source is a script.

use std::sync::Arc;
use std::time::Duration;

use kepler_agent::sampler::Sampler;
use kepler_core::*;
use kepler_meters::{open_model_meter, EstimatorSettings};
use kepler_sources::HostFacts;

/// Two busy CPUs of a 32-CPU Xeon, every second; with `cycles_per_ms`, the source also counts
/// cycles (and instructions, cache misses) at that rate per busy millisecond.
struct CountingUsage {
    step: u64,
    cycles_per_ms: Option<u64>,
}

impl UsageSource for CountingUsage {
    fn name(&self) -> &str {
        "counting"
    }

    fn features(&self) -> Vec<Feature> {
        let mut f = vec![Feature::BpfCpuTimeMs];
        if self.cycles_per_ms.is_some() {
            f.extend([
                Feature::CpuCycles,
                Feature::CpuInstructions,
                Feature::CacheMiss,
            ]);
        }
        f
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        self.step += 1;
        let s = self.step;
        let busy_ms = 2000 * s;
        let counters = self.cycles_per_ms.map(|c| {
            Box::new(TaskCounters {
                cpu_cycles: Some(c * busy_ms),
                cpu_instructions: Some(c * busy_ms / 2),
                cache_misses: Some(busy_ms * 100),
                ..TaskCounters::default()
            })
        });
        Ok(UsageSnapshot {
            uptime: Duration::from_secs(100 + s),
            node: NodeCpuTimes {
                total: Duration::from_secs(32 * (100 + s)),
                idle: Duration::from_secs(32 * (100 + s) - 2 * s),
                iowait: Duration::ZERO,
            },
            processes: vec![ProcessUsage {
                key: ProcessKey {
                    pid: 7,
                    start_time: Duration::from_secs(1),
                },
                cpu_time: Duration::from_millis(busy_ms),
                info: Arc::new(ProcessInfo {
                    comm: "burn".into(),
                    ..ProcessInfo::default()
                }),
                exited: false,
                counters,
            }],
            cgroups: Vec::new(),
        })
    }
}

fn host(dir: &tempfile::TempDir) -> HostFacts {
    let proc = dir.path().join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    let cpu = (0..32)
        .map(|i| {
            format!(
                "processor\t: {i}\nvendor_id\t: GenuineIntel\nmodel name\t: Intel(R) Xeon(R) \
                 Gold 6999 CPU @ 2.00GHz\nphysical id\t: {}\ncore id\t: {}\nflags\t\t: fpu\n\n",
                i / 16,
                i % 8
            )
        })
        .collect::<String>();
    std::fs::write(proc.join("cpuinfo"), cpu).unwrap();
    std::fs::write(proc.join("meminfo"), "MemTotal:       131072000 kB\n").unwrap();
    HostFacts::read(&proc, &dir.path().join("sys"))
}

/// The package zone's meta and watts after a few ticks.
fn run(cycles_per_ms: Option<u64>) -> (Arc<ZoneMeta>, f64) {
    let dir = tempfile::tempdir().unwrap();
    let source = CountingUsage {
        step: 0,
        cycles_per_ms,
    };
    let background = Background::new();
    let meter = open_model_meter(
        &EstimatorSettings::default(),
        &host(&dir),
        &source.features(),
        &background,
    )
    .unwrap();
    let health = Health::new();
    let mut sampler = Sampler::new(
        Box::new(source),
        vec![Box::new(meter)],
        Attributor::new(AttributionConfig::default()),
        &health,
    );
    let mut last = None;
    for _ in 0..4 {
        last = Some(sampler.tick().unwrap());
    }
    let snapshot = last.unwrap();
    let package = snapshot
        .zones
        .iter()
        .find(|z| &*z.zone == "package")
        .expect("a package zone");
    (package.meta.clone(), package.total.watts.0)
}

#[test]
fn a_source_with_counters_gets_the_counter_model_and_one_without_the_busy_time_model() {
    let (busy, busy_watts) = run(None);
    let (slow, slow_watts) = run(Some(1_200_000));
    let (fast, fast_watts) = run(Some(3_000_000));

    let model = |m: &ZoneMeta| m.model.as_deref().unwrap_or("").to_string();
    assert!(model(&busy).starts_with("builtin/aws/"), "{busy:?}");
    assert!(model(&slow).starts_with("builtin/nx12/"), "{slow:?}");
    assert_eq!(model(&slow), model(&fast));
    let reason = |m: &ZoneMeta| m.reason.as_deref().unwrap_or("").to_string();
    assert!(
        !reason(&busy).contains("hardware counters"),
        "{}",
        reason(&busy)
    );
    assert!(
        reason(&slow).starts_with("hardware counters ("),
        "{}",
        reason(&slow)
    );
    assert!(reason(&slow).contains(&model(&busy)), "{}", reason(&slow));
    assert_eq!(&*slow.expected_error[0].zone, "package");

    // Same busy time; the counter model tells 1.2 GHz from 3 GHz, the busy-time one cannot.
    assert!(busy_watts > 0.0);
    assert!(
        fast_watts > slow_watts + 1.0,
        "fast {fast_watts} W, slow {slow_watts} W"
    );
}

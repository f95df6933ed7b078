//! A whole scrape at 1,000 and 10,000 processes (issue 14: ≤ 10 ms at 1,000, and no worse
//! than linear growth): the attribution tick that builds the snapshot, its publication, and
//! the first scrape of it (the encode that later scrapes of the same snapshot share), all
//! levels, text 0.0.4. One process in four is in a container, eight containers per pod, and
//! every tick 5 % of the processes end and as many new ones start, so ended processes (hidden
//! below the threshold) are part of every tick.
//!
//! Run: `cargo bench -p kepler-exporters --bench scrape`

#[path = "../tests/support/mod.rs"]
mod support;

use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use kepler_core::{
    AttributionConfig, Attributor, ContainerId, MicroJoules, NodeCpuTimes, ProcessInfo, ProcessKey,
    ProcessType, ProcessUsage, Runtime, Tick, UsageSnapshot, WorkloadIdentity, ZoneEnergy,
    ZoneMeta, ZoneWeights,
};
use kepler_exporters::{encode, AgentState, AgentStats, Format};

/// A host of `n` processes whose usage advances each tick, with churn.
struct Host {
    infos: Vec<Arc<ProcessInfo>>,
    /// (pid, cumulative CPU ms) per slot.
    slots: Vec<(u32, u64)>,
    next_pid: u32,
    uptime_s: u64,
    busy_ms: u64,
}

impl Host {
    fn new(n: usize) -> Host {
        let infos = (0..n)
            .map(|i| {
                let container = (i % 4 == 0).then(|| {
                    let c = i / 4 % 256;
                    Arc::new(ContainerId {
                        id: format!("{c:064x}"),
                        runtime: Runtime::Containerd,
                        pod_id: Some(format!("7f6e5d4c-{:04}-4b3a-9c8d-1e2f3a4b5c6d", c / 8)),
                    })
                });
                Arc::new(ProcessInfo {
                    comm: format!("worker-{}", i % 97),
                    exe: format!("/usr/bin/worker-{}", i % 97),
                    workload: WorkloadIdentity {
                        process_type: if container.is_some() {
                            ProcessType::Container
                        } else {
                            ProcessType::Regular
                        },
                        container,
                        vm: None,
                    },
                    ..ProcessInfo::default()
                })
            })
            .collect();
        Host {
            infos,
            slots: (0..n).map(|i| (i as u32 + 1, 0)).collect(),
            next_pid: n as u32 + 1,
            uptime_s: 1000,
            busy_ms: 0,
        }
    }

    /// The next tick's usage: every process used some CPU, and every twentieth slot's
    /// process ended within the interval (listed once, exited) and is replaced by a new one.
    fn step(&mut self) -> UsageSnapshot {
        self.uptime_s += 5;
        let tick = self.uptime_s;
        let mut processes = Vec::with_capacity(self.slots.len());
        for (i, slot) in self.slots.iter_mut().enumerate() {
            let add = 1 + (i as u64 * 7 + tick) % 13;
            slot.1 += add;
            self.busy_ms += add;
            let exited = (i as u64 + tick).is_multiple_of(20);
            processes.push(ProcessUsage {
                key: ProcessKey {
                    pid: slot.0,
                    start_time: Duration::from_secs(10),
                },
                cpu_time: Duration::from_millis(slot.1),
                info: self.infos[i].clone(),
                exited,
                counters: None,
            });
            if exited {
                *slot = (self.next_pid, 0);
                self.next_pid += 1;
            }
        }
        UsageSnapshot {
            uptime: Duration::from_secs(tick),
            node: NodeCpuTimes {
                total: Duration::from_secs(tick * 64),
                idle: Duration::from_secs(tick * 64)
                    .saturating_sub(Duration::from_millis(self.busy_ms)),
                iowait: Duration::ZERO,
            },
            processes,
            cgroups: Vec::new(),
        }
    }
}

fn zones() -> Vec<ZoneEnergy> {
    ["package", "core", "uncore", "dram"]
        .into_iter()
        .map(|z| ZoneEnergy {
            zone: z.into(),
            path: format!("/sys/class/powercap/intel-rapl:0/{z}").into(),
            energy: MicroJoules(150_000_000),
            meta: Arc::new(ZoneMeta::measured("rapl")),
            weights: ZoneWeights::CpuTime,
            idle: None,
            device: None,
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let mut group = c.benchmark_group("scrape");
    let zones = zones();
    for n in [1_000usize, 10_000] {
        let mut host = Host::new(n);
        let mut attributor =
            Attributor::new(AttributionConfig::default()).counting_from_source_start();
        let state = AgentState::new(support::context());
        // Warm up: the first tick is a baseline.
        for _ in 0..3 {
            let usage = host.step();
            let s = attributor.tick(Tick {
                usage: &usage,
                energy: Some(&zones),
                interval: Duration::from_secs(5),
            });
            state.publish(Arc::new(s), AgentStats::default());
        }
        let body = state.scrape(Format::Text004);
        let series = support::series(&String::from_utf8(body.to_vec()).unwrap_or_default());
        eprintln!("scrape/{n}: {series} series, {} bytes", body.len());
        group.throughput(Throughput::Elements(n as u64));
        group.bench_function(format!("tick_and_scrape/{n}"), |b| {
            b.iter_batched(
                || host.step(),
                |usage| {
                    let s = attributor.tick(Tick {
                        usage: &usage,
                        energy: Some(&zones),
                        interval: Duration::from_secs(5),
                    });
                    state.publish(Arc::new(s), AgentStats::default());
                    black_box(state.scrape(Format::Text004).len())
                },
                BatchSize::SmallInput,
            )
        });
        // The encode alone, of the last snapshot (what a scrape costs once the tick is done).
        if let Some(snapshot) = state.snapshot() {
            let context = support::context();
            let mut out = Vec::new();
            group.bench_function(format!("encode_only/{n}"), |b| {
                b.iter(|| {
                    out.clear();
                    encode(
                        Some(black_box(&snapshot)),
                        &context,
                        Format::Text004,
                        &mut out,
                    );
                    black_box(out.len())
                })
            });
        }
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);

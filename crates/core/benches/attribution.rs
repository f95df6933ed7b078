//! Attribution of one tick with 10,000 processes over four zones (target ≤ 2 ms on the 2-core VM).

use std::sync::Arc;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, Criterion};
use kepler_core::*;

const PROCESSES: u32 = 10_000;

fn usage(step: u64, infos: &[Arc<ProcessInfo>]) -> UsageSnapshot {
    UsageSnapshot {
        uptime: Duration::from_secs(1000 + step * 5),
        node: NodeCpuTimes {
            total: Duration::from_secs(10_000 + step * 10),
            idle: Duration::from_secs(5_000 + step * 5),
            iowait: Duration::ZERO,
        },
        processes: (0..PROCESSES)
            .map(|pid| ProcessUsage {
                key: ProcessKey {
                    pid: pid + 1,
                    start_time: Duration::from_secs(1),
                },
                cpu_time: Duration::from_millis(step * u64::from(pid % 97)),
                info: infos[(pid % 100) as usize].clone(),
                exited: false,
                counters: None,
            })
            .collect(),
        cgroups: Vec::new(),
    }
}

/// The readings of every process's cgroup (100), each moved a little beyond its processes.
fn cgroup_readings(infos: &[Arc<ProcessInfo>], moved: Option<Duration>) -> Vec<CgroupUsage> {
    infos
        .iter()
        .filter_map(|info| {
            Some(CgroupUsage {
                cgroup: info.usage_cgroup.clone()?,
                since_last: moved,
                counted_in: None,
                workload: info.workload.clone(),
            })
        })
        .collect()
}

fn bench(c: &mut Criterion) {
    let infos: Vec<Arc<ProcessInfo>> = (0..100)
        .map(|i| {
            let container = (i % 2 == 0).then(|| {
                Arc::new(ContainerId {
                    id: format!("{i:064x}"),
                    runtime: Runtime::Containerd,
                    pod_id: Some(format!("pod-{}", i % 10)),
                })
            });
            Arc::new(ProcessInfo {
                comm: format!("proc{i}"),
                usage_cgroup: Some(format!("/kubepods/pod-{}/{i:064x}", i % 10).into()),
                workload: WorkloadIdentity {
                    process_type: ProcessType::Container,
                    container,
                    vm: None,
                },
                ..ProcessInfo::default()
            })
        })
        .collect();
    let meta = Arc::new(ZoneMeta::measured("rapl"));
    let zones: Vec<ZoneEnergy> = ["package", "core", "uncore", "dram"]
        .iter()
        .map(|z| ZoneEnergy {
            zone: (*z).into(),
            path: format!("/sys/class/powercap/{z}").into(),
            energy: MicroJoules(123_456_789),
            meta: meta.clone(),
            weights: ZoneWeights::CpuTime,
            idle: None,
            device: None,
        })
        .collect();
    let snapshots: Vec<UsageSnapshot> = (0..2).map(|s| usage(s, &infos)).collect();
    for with_cgroups in [false, true] {
        let mut attributor = Attributor::new(AttributionConfig::default());
        let mut first = snapshots[0].clone();
        let mut current = snapshots[1].clone();
        if with_cgroups {
            first.cgroups = cgroup_readings(&infos, None);
            // Each cgroup's processes use 100 × (1..97) ms a tick on average; 50 ms more is
            // the time of processes no listing shows.
            let per_cgroup = current.processes.len() as u64 / infos.len() as u64;
            current.cgroups =
                cgroup_readings(&infos, Some(Duration::from_millis(per_cgroup * 49 + 50)));
        }
        attributor.tick(Tick {
            usage: &first,
            energy: None,
            interval: Duration::from_secs(5),
        });
        // Steady state: every process known, each using some CPU each tick. Advancing the
        // usage in place costs ~10 µs of the measured time, against a target of 2 ms.
        let name = if with_cgroups {
            "attribute_10k_processes_4_zones_100_cgroups"
        } else {
            "attribute_10k_processes_4_zones"
        };
        c.bench_function(name, |b| {
            b.iter(|| {
                current.uptime += Duration::from_secs(5);
                current.node.total += Duration::from_secs(10);
                current.node.idle += Duration::from_secs(5);
                for (i, p) in current.processes.iter_mut().enumerate() {
                    p.cpu_time += Duration::from_millis(1 + (i as u64 % 97));
                }
                attributor.tick(Tick {
                    usage: &current,
                    energy: Some(&zones),
                    interval: Duration::from_secs(5),
                })
            })
        });
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);

//! The seams of the next wave, proven with test-only inputs: zones of two power domains read
//! by two meters, one of them supplying its own per-process shares; names joined from the
//! identity catalogue; meters that leave idle out.

use std::sync::Arc;
use std::time::Duration;

use kepler_core::*;
use proptest::prelude::*;

fn plain() -> Arc<ProcessInfo> {
    Arc::new(ProcessInfo {
        comm: "x".into(),
        ..ProcessInfo::default()
    })
}

fn usage(uptime_s: u64, busy_s: u64, procs: &[(u32, u64, Arc<ProcessInfo>)]) -> UsageSnapshot {
    UsageSnapshot {
        uptime: Duration::from_secs(uptime_s),
        node: NodeCpuTimes {
            total: Duration::from_secs(uptime_s * 2),
            idle: Duration::from_secs(uptime_s * 2 - busy_s),
            iowait: Duration::ZERO,
        },
        processes: procs
            .iter()
            .map(|(pid, cpu_ms, info)| ProcessUsage {
                key: ProcessKey {
                    pid: *pid,
                    start_time: Duration::from_secs(1),
                },
                cpu_time: Duration::from_millis(*cpu_ms),
                info: info.clone(),
                exited: false,
                counters: None,
            })
            .collect(),
        cgroups: Vec::new(),
    }
}

fn meta(domain: PowerDomain, meter: &str, includes_idle: bool) -> Arc<ZoneMeta> {
    Arc::new(ZoneMeta {
        domain,
        includes_idle,
        ..ZoneMeta::measured(meter)
    })
}

/// A CPU meter's counter and a GPU meter's power reading with its own shares, turned into the
/// interval's zone energies the way the agent does it: per meter, then concatenated.
fn energies(
    at: (u64, u64),
    cpu_counter: (u64, u64),
    gpu_watts: f64,
    shares: &ProcessShares,
    gpu_idle_watts: Option<f64>,
) -> Vec<ZoneEnergy> {
    let snap = |t: u64, readings| EnergySnapshot {
        at: Duration::from_secs(t),
        readings,
    };
    let cpu = |c: u64| {
        vec![ZoneReading::energy(
            "package".into(),
            "/rapl/0".into(),
            MicroJoules(c),
            None,
        )]
    };
    let gpu = || {
        vec![ZoneReading {
            shares: Some(shares.clone()),
            idle: gpu_idle_watts.map(Watts),
            ..ZoneReading::power("gpu0".into(), "nvidia0".into(), Watts(gpu_watts))
        }]
    };
    let (mut zones, issues) = zone_energies(
        &snap(at.0, cpu(cpu_counter.0)),
        &snap(at.1, cpu(cpu_counter.1)),
        &meta(PowerDomain::Cpu, "rapl", true),
    );
    assert!(issues.is_empty(), "{issues:?}");
    let (gpu_zones, issues) = zone_energies(
        &snap(at.0, gpu()),
        &snap(at.1, gpu()),
        &meta(PowerDomain::Gpu, "nvml", true),
    );
    assert!(issues.is_empty(), "{issues:?}");
    zones.extend(gpu_zones);
    zones
}

proptest! {
    /// Energy is conserved per zone in both domains, each with its own weights: the CPU zone
    /// by CPU time, the GPU zone by the shares its meter supplied (pids the usage source does
    /// not list get nothing).
    #[test]
    fn conservation_per_zone_in_two_domains(
        ticks in proptest::collection::vec(
            (
                proptest::collection::vec(0u64..3000, 8),
                proptest::collection::vec((1u32..12, 0u64..100), 0..6),
                0u64..40_000_000,
                0.0f64..300.0,
            ),
            1..8,
        ),
    ) {
        let mut a = Attributor::new(AttributionConfig::default());
        let info = plain();
        let mut cumulative = [0u64; 8];
        let mut counter = 1_000u64;
        for (step, (adds, shares, cpu_uj, gpu_watts)) in ticks.into_iter().enumerate() {
            let step = step as u64;
            for (c, add) in cumulative.iter_mut().zip(&adds) {
                *c += add;
            }
            let procs: Vec<(u32, u64, Arc<ProcessInfo>)> = cumulative
                .iter()
                .enumerate()
                .map(|(i, c)| (i as u32 + 1, *c, info.clone()))
                .collect();
            let shares: ProcessShares = shares
                .iter()
                .map(|&(pid, weight)| ProcessShare { pid, weight })
                .collect::<Vec<_>>()
                .into();
            let zones = energies((10 + 2 * step, 12 + 2 * step), (counter, counter + cpu_uj), gpu_watts, &shares, None);
            counter += cpu_uj;
            let s = a.tick(Tick {
                usage: &usage(12 + 2 * step, step, &procs),
                energy: Some(&zones),
                interval: Duration::from_secs(2),
            });
            prop_assert_eq!(s.zones.len(), 2);
            for (z, node) in s.zones.iter().enumerate() {
                prop_assert_eq!(node.active.energy + node.idle.energy, node.total.energy);
                let procs: u64 = s.processes.iter().map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(procs + node.unattributed.0, node.active.energy.0, "zone {}", node.zone);
            }
            let gpu = s.zones.iter().position(|z| z.meta.domain == PowerDomain::Gpu).unwrap();
            for p in &s.processes {
                let listed = shares.iter().any(|sh| sh.pid == p.key.pid && sh.weight > 0);
                if !listed {
                    prop_assert_eq!(p.zones[gpu].watts.0, 0.0, "pid {} has no share", p.key.pid);
                }
            }
        }
    }
}

proptest! {
    /// A GPU meter reports its device's idle watts: the GPU zone's idle is exactly that power
    /// over the interval (capped at the zone's energy) under either idle policy, the CPU zone
    /// keeps the policy's split, and conservation still holds per zone.
    #[test]
    fn device_idle_replaces_the_policy_and_conserves(
        ticks in proptest::collection::vec(
            (
                proptest::collection::vec(0u64..3000, 6),
                proptest::collection::vec((1u32..8, 0u64..100), 0..5),
                0u64..40_000_000,
                0.0f64..300.0,
                0.0f64..400.0,
            ),
            1..6,
        ),
        baseline in proptest::option::of(0.0f64..50.0),
    ) {
        let idle = match baseline {
            Some(w) => IdlePolicy::Baseline { configured: Some(Watts(w)), low_usage_ratio: 0.1 },
            None => IdlePolicy::Ratio,
        };
        let mut a = Attributor::new(AttributionConfig { idle, ..AttributionConfig::default() });
        let info = plain();
        let mut cumulative = [0u64; 6];
        let mut counter = 1_000u64;
        for (step, (adds, shares, cpu_uj, gpu_watts, idle_watts)) in ticks.into_iter().enumerate() {
            let step = step as u64;
            for (c, add) in cumulative.iter_mut().zip(&adds) {
                *c += add;
            }
            let procs: Vec<(u32, u64, Arc<ProcessInfo>)> = cumulative
                .iter()
                .enumerate()
                .map(|(i, c)| (i as u32 + 1, *c, info.clone()))
                .collect();
            let shares: ProcessShares = shares
                .iter()
                .map(|&(pid, weight)| ProcessShare { pid, weight })
                .collect::<Vec<_>>()
                .into();
            let zones = energies(
                (10 + 2 * step, 12 + 2 * step),
                (counter, counter + cpu_uj),
                gpu_watts,
                &shares,
                Some(idle_watts),
            );
            counter += cpu_uj;
            let s = a.tick(Tick {
                usage: &usage(12 + 2 * step, step, &procs),
                energy: Some(&zones),
                interval: Duration::from_secs(2),
            });
            for (z, node) in s.zones.iter().enumerate() {
                prop_assert_eq!(node.active.energy + node.idle.energy, node.total.energy);
                let procs: u64 = s.processes.iter().map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(procs + node.unattributed.0, node.active.energy.0, "zone {}", node.zone);
            }
            let gpu = s.zones.iter().find(|z| z.meta.domain == PowerDomain::Gpu).unwrap();
            let gpu_energy = Watts(gpu_watts).during(Duration::from_secs(2));
            let idle = Watts(idle_watts).during(Duration::from_secs(2)).min(gpu_energy);
            // The tick's idle is the device's; energy accumulates over ticks, watts are this tick's.
            prop_assert!((gpu.idle.watts.0 - idle.over(Duration::from_secs(2)).0).abs() < 1e-9);
        }
    }
}

#[test]
fn gpu_energy_follows_the_meters_shares_not_cpu_time() {
    let mut a = Attributor::new(AttributionConfig::default());
    let i = plain();
    let shares: ProcessShares = vec![
        ProcessShare { pid: 2, weight: 3 },
        ProcessShare { pid: 3, weight: 1 },
        ProcessShare { pid: 99, weight: 5 }, // not a listed process: ignored
    ]
    .into();
    a.tick(Tick {
        usage: &usage(
            10,
            0,
            &[(1, 0, i.clone()), (2, 0, i.clone()), (3, 0, i.clone())],
        ),
        energy: None,
        interval: Duration::from_secs(2),
    });
    // All CPU time goes to pid 1; the GPU is used by pids 2 and 3 only.
    let zones = energies((10, 12), (0, 8_000_000), 100.0, &shares, None);
    let s = a.tick(Tick {
        usage: &usage(
            12,
            4,
            &[(1, 4000, i.clone()), (2, 0, i.clone()), (3, 0, i.clone())],
        ),
        energy: Some(&zones),
        interval: Duration::from_secs(2),
    });
    let gpu = s.zones.iter().position(|z| &*z.zone == "gpu0").unwrap();
    let cpu = s.zones.iter().position(|z| &*z.zone == "package").unwrap();
    let energy = |pid: u32, z: usize| {
        s.processes
            .iter()
            .find(|p| p.key.pid == pid)
            .map(|p| p.zones[z].energy.0)
            .unwrap()
    };
    let active = s.zones[gpu].active.energy.0;
    assert!(active > 0);
    assert_eq!(energy(1, gpu), 0);
    assert_eq!(energy(2, gpu), active * 3 / 4);
    assert_eq!(energy(3, gpu), active / 4);
    assert_eq!(energy(1, cpu), s.zones[cpu].active.energy.0);
    assert_eq!(s.zones[gpu].meta.meter.as_ref(), "nvml");
}

#[test]
fn a_name_learnt_between_two_ticks_appears_at_the_next() {
    let catalogue = Arc::new(Catalogue::new());
    let mut a = Attributor::new(AttributionConfig::default()).with_catalogue(catalogue.clone());
    let container = Arc::new(ContainerId {
        id: "c1".into(),
        runtime: Runtime::Containerd,
        pod_id: None,
    });
    let vm = Arc::new(VmId {
        id: "uuid-1".into(),
        hypervisor: "kvm".into(),
    });
    let in_container = Arc::new(ProcessInfo {
        workload: WorkloadIdentity {
            process_type: ProcessType::Container,
            container: Some(container),
            vm: Some(vm),
        },
        ..ProcessInfo::default()
    });
    let zones = |uj| {
        vec![ZoneEnergy {
            zone: "package".into(),
            path: "/p".into(),
            energy: MicroJoules(uj),
            meta: meta(PowerDomain::Cpu, "rapl", true),
            weights: ZoneWeights::CpuTime,
            idle: None,
            device: None,
        }]
    };
    let mut cpu = 0;
    let mut tick = |a: &mut Attributor, n: u64| {
        cpu += 1000;
        a.tick(Tick {
            usage: &usage(10 + n, n, &[(5, cpu, in_container.clone())]),
            energy: Some(&zones(1_000_000)),
            interval: Duration::from_secs(1),
        })
    };
    tick(&mut a, 0);
    let s = tick(&mut a, 1);
    assert_eq!(s.containers[0].container.name, "");
    assert!(s.pods.is_empty());
    assert_eq!(s.vms[0].vm.name, "");

    // An informer learns the container's name and pod; the classifier the VM's name.
    catalogue.set_container(
        "c1",
        ContainerNames {
            name: "web".into(),
            pod_id: Some("pod-uid".into()),
        },
        NameSource::Kubernetes,
    );
    catalogue.set_pod(
        "pod-uid",
        PodNames {
            name: "web-0".into(),
            namespace: "shop".into(),
        },
        NameSource::Kubernetes,
    );
    catalogue.set_vm_name("uuid-1", "guest1");
    let s = tick(&mut a, 2);
    let c = &s.containers[0];
    assert_eq!(c.container.name, "web");
    assert_eq!(
        c.container.pod.as_ref().map(|p| p.name.as_str()),
        Some("web-0")
    );
    assert_eq!(s.pods.len(), 1);
    assert_eq!(s.pods[0].pod.namespace, "shop");
    assert_eq!(s.pods[0].zones[0].energy, MicroJoules(500_000));
    assert_eq!(s.vms[0].vm.name, "guest1");

    // Renamed between two ticks: the next snapshot says so; a name the catalogue drops is
    // kept while the series lives.
    catalogue.set_container(
        "c1",
        ContainerNames {
            name: "web-v2".into(),
            pod_id: Some("pod-uid".into()),
        },
        NameSource::Kubernetes,
    );
    let s = tick(&mut a, 3);
    assert_eq!(s.containers[0].container.name, "web-v2");
    catalogue.replace_all_from(NameSource::Kubernetes, Vec::new(), Vec::new());
    let s = tick(&mut a, 4);
    assert_eq!(s.containers[0].container.name, "web-v2");
    assert_eq!(s.pods[0].pod.name, "web-0");
}

#[test]
fn a_dynamic_only_zone_is_all_active_and_claims_no_baseline() {
    let mut a = Attributor::new(AttributionConfig {
        idle: IdlePolicy::Baseline {
            configured: Some(Watts(10.0)),
            low_usage_ratio: 0.1,
        },
        ..AttributionConfig::default()
    });
    let i = plain();
    let zone = |name: &str, includes_idle| ZoneEnergy {
        zone: name.into(),
        path: format!("/{name}").into(),
        energy: MicroJoules(50_000_000),
        meta: meta(PowerDomain::Cpu, "model", includes_idle),
        weights: ZoneWeights::CpuTime,
        idle: None,
        device: None,
    };
    a.tick(Tick {
        usage: &usage(10, 0, &[(1, 0, i.clone())]),
        energy: None,
        interval: Duration::from_secs(2),
    });
    let s = a.tick(Tick {
        usage: &usage(12, 1, &[(1, 1000, i.clone())]),
        energy: Some(&[zone("package", false), zone("platform", true)]),
        interval: Duration::from_secs(2),
    });
    let dynamic = &s.zones[0];
    assert_eq!(dynamic.idle.energy, MicroJoules::ZERO);
    assert_eq!(dynamic.active.energy, dynamic.total.energy);
    assert_eq!(s.zones[1].idle.energy, MicroJoules(20_000_000));
    let IdlePolicyState::Baseline { watts, .. } = &s.idle_policy else {
        panic!("baseline policy expected");
    };
    assert_eq!(watts, &vec![None, Some(Watts(10.0))]);
}

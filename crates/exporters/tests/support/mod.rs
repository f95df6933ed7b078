//! Snapshots for tests and the encode bench.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    ContainerId, ContainerPower, ContainerRef, CpuInfo, Health, IdlePolicyState, MicroJoules,
    NodeZone, PodPower, PodRef, PowerSnapshot, ProcessInfo, ProcessKey, ProcessPower, ProcessType,
    Runtime, VmId, VmPower, VmRef, Watts, WorkloadIdentity, WorkloadState, ZoneMeta, ZoneValue,
};
use kepler_exporters::{BuildInfo, ExportContext, MetricsLevel};

/// The facts of a measured RAPL zone.
pub fn rapl() -> Arc<ZoneMeta> {
    Arc::new(ZoneMeta::measured("rapl"))
}

/// The ids a process in `container` carries.
pub fn ids_of(container: &ContainerRef) -> Arc<ContainerId> {
    Arc::new(ContainerId {
        id: container.id.clone(),
        runtime: container.runtime,
        pod_id: container.pod.as_ref().map(|p| p.id.clone()),
    })
}

pub fn zv(uj: u64, w: f64) -> ZoneValue {
    ZoneValue {
        energy: MicroJoules(uj),
        watts: Watts(w),
    }
}

pub fn context() -> ExportContext {
    ExportContext {
        node_name: "node-1".into(),
        levels: MetricsLevel::ALL,
        build: BuildInfo {
            arch: "x86_64".into(),
            branch: "main".into(),
            revision: "abc123".into(),
            version: "0.1.0".into(),
            rust_version: "1.95.0".into(),
        },
        cpu_info: vec![CpuInfo {
            processor: "0".into(),
            vendor_id: "GenuineIntel".into(),
            model_name: "Intel(R) Xeon(R) \"Gold\"".into(),
            physical_id: "0".into(),
            core_id: "0".into(),
        }]
        .into(),
        agent: kepler_exporters::AgentStats {
            last_tick_duration: Duration::from_micros(2500),
            ticks: 12,
            ebpf: None,
        },
        health: Arc::new(Health::new()),
        self_collectors: Default::default(),
        own_process: None,
        http_refusals: None,
    }
}

/// Two zones, three processes (container, plain with awkward names, VM), one container, pod, VM.
pub fn snapshot() -> PowerSnapshot {
    let pod = Arc::new(PodRef {
        id: "pod-uid-1".into(),
        name: "web-0".into(),
        namespace: "default".into(),
    });
    let container = Arc::new(ContainerRef {
        id: "c0ffee".into(),
        name: "nginx".into(),
        runtime: Runtime::Containerd,
        pod: Some(pod.clone()),
    });
    let vm = Arc::new(VmRef {
        id: "vm-uuid-1".into(),
        name: "guest".into(),
        hypervisor: "kvm".into(),
    });
    let process =
        |pid: u32, comm: &str, exe: &str, workload: WorkloadIdentity, state, zones| ProcessPower {
            key: ProcessKey {
                pid,
                start_time: Duration::from_secs(1),
            },
            info: Arc::new(ProcessInfo {
                comm: comm.into(),
                exe: exe.into(),
                workload,
                ..ProcessInfo::default()
            }),
            state,
            cpu_time: Duration::from_millis(1250),
            zones,
        };
    PowerSnapshot {
        tick: 3,
        interval: Duration::from_secs(5),
        usage_ratio: 0.25,
        zones: vec![
            NodeZone {
                zone: "package".into(),
                path: "/sys/class/powercap/intel-rapl:0".into(),
                meta: rapl(),
                device: None,
                total: zv(123_456_789, 24.5),
                active: zv(100_000_000, 20.0),
                idle: zv(23_456_789, 4.5),
                unattributed: MicroJoules(1_000_000),
                hidden: ZoneValue {
                    energy: MicroJoules(2_500_000),
                    watts: Watts(0.5),
                },
            },
            NodeZone {
                zone: "dram".into(),
                path: "aggregated-dram".into(),
                meta: rapl(),
                device: None,
                total: zv(5_000_000, 1.0),
                active: zv(4_000_000, 0.8),
                idle: zv(1_000_000, 0.2),
                unattributed: MicroJoules(0),
                hidden: ZoneValue::default(),
            },
        ],
        idle_policy: IdlePolicyState::Baseline {
            configured: false,
            watts: vec![Some(Watts(4.5)), None],
        },
        processes: vec![
            process(
                42,
                "nginx",
                "/usr/sbin/nginx",
                WorkloadIdentity {
                    process_type: ProcessType::Container,
                    container: Some(ids_of(&container)),
                    vm: None,
                },
                WorkloadState::Running,
                vec![zv(1_500_000, 0.3), zv(250_000, 0.05)].into(),
            ),
            process(
                7,
                "we\"ird\\name",
                "/opt/new\nline",
                WorkloadIdentity::default(),
                WorkloadState::Terminated,
                vec![zv(2_000_000, 0.0), zv(0, 0.0)].into(),
            ),
            process(
                99,
                "qemu-system-x86",
                "/usr/bin/qemu-system-x86_64",
                WorkloadIdentity {
                    process_type: ProcessType::Vm,
                    container: None,
                    vm: Some(Arc::new(VmId {
                        id: vm.id.clone(),
                        hypervisor: vm.hypervisor.clone(),
                    })),
                },
                WorkloadState::Running,
                vec![zv(9_000_000, 1.8), zv(500_000, 0.1)].into(),
            ),
        ],
        containers: vec![ContainerPower {
            container,
            state: WorkloadState::Running,
            cpu_time: Duration::from_millis(1250),
            zones: vec![zv(1_500_000, 0.3), zv(250_000, 0.05)].into(),
        }],
        pods: vec![PodPower {
            pod,
            state: WorkloadState::Running,
            zones: vec![zv(1_500_000, 0.3), zv(250_000, 0.05)].into(),
        }],
        vms: vec![VmPower {
            vm,
            state: WorkloadState::Running,
            zones: vec![zv(9_000_000, 1.8), zv(500_000, 0.1)].into(),
        }],
        features: None,
        platform: Vec::new(),
    }
}

/// `processes` processes (a quarter of them in containers, one container per four processes,
/// one pod per container) over `zones` zones: the shape of a busy node.
pub fn synthetic(processes: usize, zones: usize) -> PowerSnapshot {
    let zone_names = ["package", "core", "uncore", "dram", "psys", "platform"];
    let node_zones: Vec<NodeZone> = (0..zones)
        .map(|i| NodeZone {
            zone: zone_names[i % zone_names.len()].into(),
            path: format!("/sys/class/powercap/intel-rapl:0:{i}").into(),
            meta: rapl(),
            device: None,
            total: zv(987_654_321_012, 123.456),
            active: zv(600_000_000_000, 80.25),
            idle: zv(387_654_321_012, 43.206),
            unattributed: MicroJoules(12_345),
            hidden: ZoneValue {
                energy: MicroJoules(67_890),
                watts: Watts(0.01),
            },
        })
        .collect();
    let mut containers = Vec::new();
    let mut pods = Vec::new();
    let mut procs = Vec::with_capacity(processes);
    for i in 0..processes {
        let values: kepler_core::ZoneValues = (0..zones)
            .map(|z| {
                zv(
                    1_000_003 * (i as u64 + 1) + z as u64 * 7919,
                    0.1 + i as f64 * 0.013,
                )
            })
            .collect();
        let workload = if i % 4 == 0 {
            let n = containers.len();
            let pod = Arc::new(PodRef {
                id: format!("7f6e5d4c-{n:04}-4b3a-9c8d-1e2f3a4b5c6d"),
                name: format!("app-{n}-5d8f9c7b6-xk2lp"),
                namespace: "production".into(),
            });
            let container = Arc::new(ContainerRef {
                id: format!("{:064x}", 0xabcdef_u64 * (n as u64 + 1)),
                name: format!("app-{n}"),
                runtime: Runtime::Containerd,
                pod: Some(pod.clone()),
            });
            containers.push(ContainerPower {
                container: container.clone(),
                state: WorkloadState::Running,
                cpu_time: Duration::from_millis(123_456),
                zones: values.clone(),
            });
            pods.push(PodPower {
                pod,
                state: WorkloadState::Running,
                zones: values.clone(),
            });
            WorkloadIdentity {
                process_type: ProcessType::Container,
                container: Some(ids_of(&container)),
                vm: None,
            }
        } else {
            WorkloadIdentity::default()
        };
        procs.push(ProcessPower {
            key: ProcessKey {
                pid: 1000 + i as u32,
                start_time: Duration::from_secs(i as u64),
            },
            info: Arc::new(ProcessInfo {
                comm: format!("worker-{i}"),
                exe: format!("/usr/local/bin/service-{}", i % 50),
                workload,
                ..ProcessInfo::default()
            }),
            state: WorkloadState::Running,
            cpu_time: Duration::from_nanos(12_345_678_901 + i as u64),
            zones: values,
        });
    }
    PowerSnapshot {
        tick: 100,
        interval: Duration::from_secs(5),
        usage_ratio: 0.42,
        zones: node_zones,
        idle_policy: IdlePolicyState::Ratio,
        processes: procs,
        containers,
        pods,
        vms: Vec::new(),
        features: None,
        platform: Vec::new(),
    }
}

/// Counts sample lines (not comments).
pub fn series(text: &str) -> usize {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .count()
}

/// Skips a check whose external tool is missing, with a printed reason, unless
/// `KEPLER_REQUIRE_TOOLS=1` (CI sets it) makes that a failure: a green CI run must mean these
/// checks ran.
pub fn skip_missing_tool(reason: &str) {
    assert!(
        std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
        "{reason}; KEPLER_REQUIRE_TOOLS=1 makes this a failure (bash scripts/setup.sh installs it)"
    );
    println!("SKIP: {reason}");
}

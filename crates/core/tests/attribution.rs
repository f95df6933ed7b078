//! Invariants of attribution over random ticks (DESIGN §5).

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::*;
use kepler_core::*;
use proptest::prelude::*;

fn container(id: &str, pod: Option<&str>) -> Arc<ContainerId> {
    Arc::new(ContainerId {
        id: id.into(),
        runtime: Runtime::Containerd,
        pod_id: pod.map(String::from),
    })
}

fn info(container: Option<Arc<ContainerId>>, vm: Option<&str>) -> Arc<ProcessInfo> {
    Arc::new(ProcessInfo {
        comm: "x".into(),
        workload: WorkloadIdentity {
            process_type: if container.is_some() {
                ProcessType::Container
            } else {
                ProcessType::Regular
            },
            container,
            vm: vm.map(|v| {
                Arc::new(VmId {
                    id: v.into(),
                    hypervisor: "kvm".into(),
                })
            }),
        },
        ..ProcessInfo::default()
    })
}

fn usage(uptime_s: u64, busy: u64, procs: Vec<(u32, u64, u64, Arc<ProcessInfo>)>) -> UsageSnapshot {
    UsageSnapshot {
        uptime: Duration::from_secs(uptime_s),
        node: NodeCpuTimes {
            total: Duration::from_secs(uptime_s * 2),
            idle: Duration::from_secs(uptime_s * 2 - busy),
            iowait: Duration::ZERO,
        },
        processes: procs
            .into_iter()
            .map(|(pid, start, cpu_ms, info)| ProcessUsage {
                key: ProcessKey {
                    pid,
                    start_time: Duration::from_secs(start),
                },
                cpu_time: Duration::from_millis(cpu_ms),
                info,
                exited: false,
                counters: None,
            })
            .collect(),
        cgroups: Vec::new(),
    }
}

/// An attributor that exports every ended process for 100 s, whatever its energy.
fn keeping_every_ended_process() -> Attributor {
    Attributor::new(AttributionConfig {
        idle: IdlePolicy::Ratio,
        terminated: TerminatedPolicy {
            retention: Duration::from_secs(100),
            max: None,
            min_energy: MicroJoules(0),
        },
    })
}

fn sum_process_zone(s: &PowerSnapshot, z: usize) -> u64 {
    s.processes.iter().map(|p| p.zones[z].energy.0).sum()
}

#[test]
fn first_tick_is_a_baseline_and_later_ticks_split_by_cpu_time() {
    let mut a = Attributor::new(AttributionConfig::default());
    let i = info(None, None);
    let s0 = a.tick(Tick {
        usage: &usage(
            100,
            10,
            vec![(1, 1, 5000, i.clone()), (2, 1, 1000, i.clone())],
        ),
        energy: None,
        interval: Duration::from_secs(1),
    });
    assert!(s0.zones.is_empty());
    // pid 1 used 3 s, pid 2 used 1 s; 50% busy → half the energy is active.
    let s1 = a.tick(Tick {
        usage: &usage(
            102,
            12,
            vec![(1, 1, 8000, i.clone()), (2, 1, 2000, i.clone())],
        ),
        energy: Some(&[zone("package", 8_000_000)]),
        interval: Duration::from_secs(2),
    });
    assert_eq!(s1.zones[0].active.energy, MicroJoules(4_000_000));
    assert_eq!(s1.zones[0].idle.energy, MicroJoules(4_000_000));
    let by_pid = |pid| {
        s1.processes
            .iter()
            .find(|p| p.key.pid == pid)
            .map(|p| p.zones[0].energy.0)
            .unwrap()
    };
    assert_eq!(by_pid(1), 3_000_000);
    assert_eq!(by_pid(2), 1_000_000);
    assert!((s1.zones[0].total.watts.0 - 4.0).abs() < 1e-9);
}

#[test]
fn a_process_started_since_the_last_tick_counts_all_its_time() {
    let mut a = Attributor::new(AttributionConfig::default());
    let i = info(None, None);
    a.tick(Tick {
        usage: &usage(100, 0, vec![(1, 1, 1000, i.clone())]),
        energy: None,
        interval: Duration::from_secs(1),
    });
    let s = a.tick(Tick {
        // pid 1 used nothing; pid 7 started at 101 s and used 1 s.
        usage: &usage(
            102,
            2,
            vec![(1, 1, 1000, i.clone()), (7, 101, 1000, i.clone())],
        ),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(2),
    });
    let p7 = s.processes.iter().find(|p| p.key.pid == 7).unwrap();
    assert_eq!(p7.zones[0].energy, s.zones[0].active.energy);
}

#[test]
fn a_key_listed_twice_in_one_snapshot_gets_both_shares() {
    let mut a = Attributor::new(AttributionConfig::default());
    let i = info(None, None);
    a.tick(Tick {
        usage: &usage(100, 0, vec![(1, 1, 1000, i.clone()), (2, 1, 0, i.clone())]),
        energy: None,
        interval: Duration::from_secs(1),
    });
    // pid 1 appears as a live entry and again as its exit record with more CPU time.
    let s = a.tick(Tick {
        usage: &usage(
            101,
            2,
            vec![
                (1, 1, 1500, i.clone()),
                (1, 1, 2000, i.clone()),
                (2, 1, 1000, i.clone()),
            ],
        ),
        energy: Some(&[zone("package", 2_000_000)]),
        interval: Duration::from_secs(1),
    });
    let node = s.zones[0].active;
    let watts: f64 = s.processes.iter().map(|p| p.zones[0].watts.0).sum();
    assert!(
        (watts - node.watts.0).abs() < 1e-9,
        "{watts} vs {}",
        node.watts.0
    );
    let p1 = s.processes.iter().find(|p| p.key.pid == 1).unwrap();
    assert_eq!(p1.zones[0].energy, MicroJoules(1_000_000));
}

#[test]
fn a_reused_pid_replaces_the_ended_process() {
    let mut a = keeping_every_ended_process();
    let i = info(None, None);
    let tick = |a: &mut Attributor, uptime, procs| {
        a.tick(Tick {
            usage: &usage(uptime, uptime - 100, procs),
            energy: Some(&[zone("package", 1_000_000)]),
            interval: Duration::from_secs(1),
        })
    };
    tick(&mut a, 100, vec![(7, 1, 0, i.clone())]);
    tick(&mut a, 101, vec![(7, 1, 500, i.clone())]);
    let s = tick(&mut a, 102, vec![]);
    assert_eq!(s.processes.len(), 1, "ended pid 7 is kept");
    // pid 7 again, a new process (started at 102 s): the ended one goes.
    let s = tick(&mut a, 103, vec![(7, 102, 300, i.clone())]);
    assert_eq!(s.processes.len(), 1);
    assert_eq!(s.processes[0].key.start_time, Duration::from_secs(102));
    assert_eq!(s.processes[0].state, WorkloadState::Running);
}

/// A late report of an ended process comes from its exit record alone (no exe, another comm):
/// the series it ended as keeps its labels.
#[test]
fn a_late_report_of_an_ended_process_keeps_its_description() {
    let mut a = keeping_every_ended_process();
    let alive = Arc::new(ProcessInfo {
        comm: "server".into(),
        exe: "/usr/bin/server".into(),
        ..ProcessInfo::default()
    });
    let from_exit_record = Arc::new(ProcessInfo {
        comm: "worker".into(),
        ..ProcessInfo::default()
    });
    let tick = |a: &mut Attributor, uptime, procs: Vec<(u64, Arc<ProcessInfo>, bool)>| {
        let mut u = usage(
            uptime,
            uptime - 100,
            procs
                .iter()
                .map(|(cpu, i, _)| (7, 1, *cpu, i.clone()))
                .collect(),
        );
        for (p, (_, _, exited)) in u.processes.iter_mut().zip(&procs) {
            p.exited = *exited;
        }
        a.tick(Tick {
            usage: &u,
            energy: Some(&[zone("package", 1_000_000)]),
            interval: Duration::from_secs(1),
        })
    };
    tick(&mut a, 100, vec![(0, alive.clone(), false)]);
    let s = tick(&mut a, 101, vec![(500, alive.clone(), true)]);
    assert_eq!(s.processes[0].state, WorkloadState::Terminated);
    let s = tick(&mut a, 102, vec![(600, from_exit_record.clone(), true)]);
    assert_eq!(s.processes.len(), 1);
    assert_eq!(s.processes[0].info.exe, "/usr/bin/server");
    assert_eq!(s.processes[0].info.comm, "server");
    assert_eq!(s.processes[0].cpu_time, Duration::from_millis(600));
    // A live process's description follows the source (a process that exec'd).
    let s = tick(&mut a, 103, vec![(700, from_exit_record.clone(), false)]);
    assert_eq!(s.processes[0].info.comm, "worker");
}

#[test]
fn sources_counting_from_their_start_credit_a_late_first_sighting() {
    let i = info(None, None);
    let run = |a: Attributor| {
        let mut a = a;
        a.tick(Tick {
            usage: &usage(100, 0, vec![(1, 1, 0, i.clone())]),
            energy: None,
            interval: Duration::from_secs(1),
        });
        // pid 2 is old (started at 1 s) but runs for the first time since the source
        // started: its 1 s of CPU time all belongs to this interval.
        let s = a.tick(Tick {
            usage: &usage(
                102,
                2,
                vec![(1, 1, 1000, i.clone()), (2, 1, 1000, i.clone())],
            ),
            energy: Some(&[zone("package", 2_000_000)]),
            interval: Duration::from_secs(2),
        });
        s.processes
            .iter()
            .find(|p| p.key.pid == 2)
            .map(|p| p.zones[0].energy)
            .unwrap()
    };
    assert_eq!(
        run(Attributor::new(AttributionConfig::default())),
        MicroJoules(0)
    );
    assert_eq!(
        run(Attributor::new(AttributionConfig::default()).counting_from_source_start()),
        // 50% busy: 1 J of the 2 J is active, shared equally by pid 1 and pid 2.
        MicroJoules(500_000)
    );
}

#[test]
fn ended_containers_are_capped_like_processes() {
    let mut a = Attributor::new(AttributionConfig {
        idle: IdlePolicy::Ratio,
        terminated: TerminatedPolicy {
            retention: Duration::from_secs(1000),
            max: Some(1),
            min_energy: MicroJoules(0),
        },
    });
    let c1 = info(Some(container("c1", None)), None);
    let c2 = info(Some(container("c2", None)), None);
    a.tick(Tick {
        usage: &usage(100, 0, vec![(1, 1, 0, c1.clone()), (2, 1, 0, c2.clone())]),
        energy: None,
        interval: Duration::from_secs(1),
    });
    // c2 uses three times c1's CPU, then both end.
    a.tick(Tick {
        usage: &usage(
            101,
            2,
            vec![(1, 1, 100, c1.clone()), (2, 1, 300, c2.clone())],
        ),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    a.tick(Tick {
        usage: &usage(102, 2, vec![]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    let s = a.tick(Tick {
        usage: &usage(103, 2, vec![]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    let ids: Vec<&str> = s
        .containers
        .iter()
        .map(|c| c.container.id.as_str())
        .collect();
    assert_eq!(ids, vec!["c2"]);
}

#[test]
fn ended_processes_keep_their_energy_then_expire() {
    let config = AttributionConfig {
        idle: IdlePolicy::Ratio,
        terminated: TerminatedPolicy {
            retention: Duration::from_secs(10),
            max: Some(10),
            min_energy: MicroJoules(1),
        },
    };
    let mut a = Attributor::new(config);
    let c = container("c1", Some("pod1"));
    let i = info(Some(c), None);
    a.tick(Tick {
        usage: &usage(100, 0, vec![(1, 1, 0, i.clone())]),
        energy: Some(&[]),
        interval: Duration::from_secs(1),
    });
    let s = a.tick(Tick {
        usage: &usage(101, 2, vec![(1, 1, 1000, i.clone())]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    let energy = s.processes[0].zones[0].energy;
    assert!(energy.0 > 0);
    let s = a.tick(Tick {
        usage: &usage(102, 2, vec![]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    assert_eq!(s.processes[0].state, WorkloadState::Terminated);
    assert_eq!(s.processes[0].zones[0].energy, energy);
    assert_eq!(s.processes[0].zones[0].watts, Watts(0.0));
    assert_eq!(s.containers[0].state, WorkloadState::Terminated);
    assert_eq!(s.containers[0].zones[0].energy, energy);
    assert_eq!(s.pods[0].zones[0].energy, energy);
    let s = a.tick(Tick {
        usage: &usage(120, 2, vec![]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(18),
    });
    assert!(s.processes.is_empty());
    assert!(s.containers.is_empty());
    assert!(s.pods.is_empty());
}

#[test]
fn only_the_most_energetic_ended_processes_are_kept() {
    let config = AttributionConfig {
        idle: IdlePolicy::Ratio,
        terminated: TerminatedPolicy {
            retention: Duration::from_secs(100),
            max: Some(1),
            min_energy: MicroJoules(10),
        },
    };
    let mut a = Attributor::new(config);
    let i = info(None, None);
    a.tick(Tick {
        usage: &usage(
            100,
            0,
            vec![
                (1, 1, 0, i.clone()),
                (2, 1, 0, i.clone()),
                (3, 1, 0, i.clone()),
            ],
        ),
        energy: None,
        interval: Duration::from_secs(1),
    });
    a.tick(Tick {
        usage: &usage(
            101,
            2,
            vec![
                (1, 1, 100, i.clone()),
                (2, 1, 300, i.clone()),
                (3, 1, 0, i.clone()),
            ],
        ),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    let s = a.tick(Tick {
        usage: &usage(102, 2, vec![]),
        energy: Some(&[zone("package", 1_000_000)]),
        interval: Duration::from_secs(1),
    });
    // pid 3 had no energy (below the threshold), pid 1 had less than pid 2.
    let pids: Vec<u32> = s.processes.iter().map(|p| p.key.pid).collect();
    assert_eq!(pids, vec![2]);
}

#[test]
fn measured_baseline_learns_the_lowest_low_usage_power() {
    let mut a = Attributor::new(AttributionConfig {
        idle: IdlePolicy::Baseline {
            configured: None,
            low_usage_ratio: 0.2,
        },
        terminated: TerminatedPolicy::default(),
    });
    let i = info(None, None);
    a.tick(Tick {
        usage: &usage(100, 0, vec![(1, 1, 0, i.clone())]),
        energy: None,
        interval: Duration::from_secs(1),
    });
    // Idle (0% busy) at 20 W: the measured baseline becomes 20 W, all of it idle.
    let s = a.tick(Tick {
        usage: &usage(101, 0, vec![(1, 1, 200, i.clone())]),
        energy: Some(&[zone("package", 20_000_000)]),
        interval: Duration::from_secs(1),
    });
    assert_eq!(
        s.idle_policy,
        IdlePolicyState::Baseline {
            configured: false,
            watts: vec![Some(Watts(20.0))]
        }
    );
    // 100% busy at 50 W: idle stays at the 20 W baseline instead of going to zero.
    let s = a.tick(Tick {
        usage: &usage(102, 2, vec![(1, 1, 2200, i.clone())]),
        energy: Some(&[zone("package", 50_000_000)]),
        interval: Duration::from_secs(1),
    });
    assert_eq!(s.zones[0].idle.energy, MicroJoules(40_000_000));
    assert_eq!(s.zones[0].active.energy, MicroJoules(30_000_000));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Each snapshot's process power and the hidden processes' power add up to the node's
    /// active power, whatever ended processes the retention rules drop or hide.
    #[test]
    fn process_power_adds_up_to_active_power_under_pruning(
        ticks in proptest::collection::vec(
            (proptest::collection::vec((1u32..20, 0u64..3000, any::<bool>()), 0..15), 1u64..50_000_000),
            1..10,
        ),
        min_energy in 0u64..20_000_000,
        max in proptest::option::of(0usize..4),
    ) {
        let mut a = Attributor::new(AttributionConfig {
            idle: IdlePolicy::Ratio,
            terminated: TerminatedPolicy { retention: Duration::from_secs(5), max, min_energy: MicroJoules(min_energy) },
        });
        let i = info(None, None);
        let mut cumulative = [0u64; 20];
        let mut gone = [false; 20];
        let mut unattributed = 0u64;
        let mut hidden = 0u64;
        for (step, (procs, uj)) in ticks.into_iter().enumerate() {
            let uptime = 1000 + 2 * step as u64;
            let mut seen = std::collections::BTreeMap::new();
            for (pid, add, exits) in procs {
                if !gone[pid as usize] {
                    seen.entry(pid).or_insert((add, exits));
                }
            }
            let exits: Vec<bool> = seen.values().map(|(_, e)| *e).collect();
            let list: Vec<_> = seen
                .into_iter()
                .map(|(pid, (add, exits))| {
                    cumulative[pid as usize] += add;
                    gone[pid as usize] = exits;
                    (pid, 1, cumulative[pid as usize], i.clone())
                })
                .collect();
            // Sources that see exits (eBPF) report a task's final reading once, flagged.
            let mut snapshot = usage(uptime, step as u64, list);
            for (p, exited) in snapshot.processes.iter_mut().zip(exits) {
                p.exited = exited;
            }
            let s = a.tick(Tick {
                usage: &snapshot,
                energy: Some(&[zone("package", uj)]),
                interval: Duration::from_secs(2),
            });
            let node = &s.zones[0];
            let watts: f64 = s.processes.iter().map(|p| p.zones[0].watts.0).sum();
            // Hidden processes (ended below the threshold or beyond the cap) are not exported;
            // their power this tick is the growth of the zone's hidden energy.
            let hidden_watts = (node.hidden.energy.0 - hidden) as f64 / 2e6;
            if node.unattributed.0 == unattributed {
                prop_assert!((watts + hidden_watts - node.active.watts.0).abs() <= 1e-6 * node.active.watts.0.max(1.0),
                    "processes {} W + hidden {} W, node active {} W", watts, hidden_watts, node.active.watts.0);
            }
            unattributed = node.unattributed.0;
            hidden = node.hidden.energy.0;
        }
    }

    /// Σ process active energy = node active energy exactly; active + idle = total; every
    /// counter is monotonic; containers, pods and VMs hold exactly their members' energy.
    #[test]
    fn energy_is_conserved_and_counters_never_decrease(
        ticks in proptest::collection::vec(
            (
                proptest::collection::vec((1u32..40, 0u64..3000), 0..30),
                0u64..50_000_000,
                0u64..20_000_000,
                0u64..=2,
                any::<bool>(),
            ),
            1..12,
        ),
        baseline in any::<bool>(),
    ) {
        let idle = if baseline {
            IdlePolicy::Baseline { configured: None, low_usage_ratio: 0.3 }
        } else {
            IdlePolicy::Ratio
        };
        let mut a = Attributor::new(AttributionConfig {
            idle,
            terminated: TerminatedPolicy { retention: Duration::from_secs(3600), max: None, min_energy: MicroJoules(0) },
        });
        let infos: Vec<Arc<ProcessInfo>> = (0..40)
            .map(|i| match i % 4 {
                0 => info(Some(container(&format!("c{}", i % 3), Some(&format!("p{}", i % 2)))), None),
                1 => info(None, Some(&format!("vm{}", i % 2))),
                _ => info(None, None),
            })
            .collect();
        let mut cumulative = vec![0u64; 40];
        let mut previous: Option<PowerSnapshot> = None;
        let mut uptime = 1000u64;
        let mut busy = 0u64;
        for (procs, package_uj, dram_uj, busy_step, drop_dram) in ticks {
            uptime += 2;
            busy += busy_step;
            let mut seen = std::collections::BTreeMap::new();
            for (pid, add_ms) in procs {
                seen.entry(pid).or_insert(add_ms);
            }
            let list: Vec<_> = seen
                .into_iter()
                .map(|(pid, add)| {
                    cumulative[pid as usize] += add;
                    (pid, 1, cumulative[pid as usize], infos[pid as usize].clone())
                })
                .collect();
            let mut zones = vec![zone("package", package_uj)];
            if !drop_dram {
                zones.push(zone("dram", dram_uj));
            }
            let s = a.tick(Tick {
                usage: &usage(uptime, busy, list),
                energy: Some(&zones),
                interval: Duration::from_secs(2),
            });
            for (z, node) in s.zones.iter().enumerate() {
                prop_assert_eq!(node.active.energy + node.idle.energy, node.total.energy);
                let procs = sum_process_zone(&s, z);
                prop_assert_eq!(procs + node.unattributed.0, node.active.energy.0);
                let in_containers: u64 = s.containers.iter().map(|c| c.zones[z].energy.0).sum();
                let container_members: u64 = s.processes.iter().filter(|p| p.info.workload.container.is_some()).map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(in_containers, container_members);
                let in_pods: u64 = s.pods.iter().map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(in_pods, container_members);
                let in_vms: u64 = s.vms.iter().map(|v| v.zones[z].energy.0).sum();
                let vm_members: u64 = s.processes.iter().filter(|p| p.info.workload.vm.is_some()).map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(in_vms, vm_members);
            }
            // Power tells the same story at every level, also for a zone with no reading
            // this tick (0 W everywhere).
            for (z, node) in s.zones.iter().enumerate() {
                let unattributed_before = previous
                    .as_ref()
                    .and_then(|p| p.zones.get(z))
                    .map_or(0, |n| n.unattributed.0);
                if node.unattributed.0 != unattributed_before {
                    continue;
                }
                let watts: f64 = s.processes.iter().map(|p| p.zones[z].watts.0).sum();
                prop_assert!((watts - node.active.watts.0).abs() <= 1e-6 * node.active.watts.0.max(1.0),
                    "zone {}: processes {} W, node active {} W", z, watts, node.active.watts.0);
                let in_containers: f64 = s.containers.iter().map(|c| c.zones[z].watts.0).sum();
                let members: f64 = s.processes.iter().filter(|p| p.info.workload.container.is_some()).map(|p| p.zones[z].watts.0).sum();
                prop_assert!((in_containers - members).abs() <= 1e-6 * members.max(1.0));
            }
            if let Some(prev) = &previous {
                for (z, node) in prev.zones.iter().enumerate() {
                    prop_assert!(s.zones[z].total.energy >= node.total.energy);
                    prop_assert!(s.zones[z].active.energy >= node.active.energy);
                    prop_assert!(s.zones[z].idle.energy >= node.idle.energy);
                }
                for p in &prev.processes {
                    let now = s.processes.iter().find(|q| q.key == p.key).unwrap();
                    for (z, v) in p.zones.iter().enumerate() {
                        prop_assert!(now.zones[z].energy >= v.energy);
                    }
                    prop_assert!(now.cpu_time >= p.cpu_time);
                }
            }
            previous = Some(s);
        }
    }
}

/// `n` processes (pids 1..=n, started at 1 s) that each used `cpu_ms` so far.
fn many(n: u32, cpu_ms: u64, i: &Arc<ProcessInfo>) -> Vec<(u32, u64, u64, Arc<ProcessInfo>)> {
    (1..=n).map(|pid| (pid, 1, cpu_ms, i.clone())).collect()
}

fn sorted_processes(s: &PowerSnapshot) -> Vec<ProcessPower> {
    let mut v = s.processes.clone();
    v.sort_by_key(|p| p.key);
    v
}

#[test]
fn a_recycled_snapshot_gives_the_next_one_its_list_and_changes_nothing_in_it() {
    let i = info(Some(container("c1", Some("p1"))), None);
    let mut recycling = Attributor::new(AttributionConfig::default());
    let mut plain = Attributor::new(AttributionConfig::default());
    let mut previous: Option<PowerSnapshot> = None;
    let mut reused = 0;
    for t in 0..4u64 {
        let listing = usage(100 + t, 10 + t, many(1_500, 1_000 * (t + 1), &i));
        let energy = [zone("package", 5_000_000)];
        let tick = || Tick {
            usage: &listing,
            energy: Some(&energy),
            interval: Duration::from_secs(1),
        };
        // The list handed back is marked by a capacity no fresh list of 1,500 has (an
        // address would not do: a freed list's block is often handed out again at the same
        // address).
        let marked = previous.take().map(|mut held| {
            held.processes.reserve_exact(100);
            let capacity = held.processes.capacity();
            recycling.recycle(held);
            capacity
        });
        let mine = recycling.tick(tick());
        let theirs = plain.tick(tick());
        assert_eq!(
            sorted_processes(&mine),
            sorted_processes(&theirs),
            "tick {t}"
        );
        assert_eq!(mine.zones, theirs.zones);
        assert_eq!(mine.containers, theirs.containers);
        assert_eq!(mine.processes.len(), 1_500);
        if let Some(marked) = marked {
            assert_ne!(theirs.processes.capacity(), marked);
            if mine.processes.capacity() == marked {
                reused += 1;
            }
        }
        previous = Some(mine);
    }
    assert_eq!(
        reused, 3,
        "every tick after the first is built in the list handed back"
    );
}

#[test]
fn a_recycled_list_left_from_a_burst_is_cut_back() {
    let i = info(None, None);
    let mut a = Attributor::new(AttributionConfig::default());
    let burst = a.tick(Tick {
        usage: &usage(100, 10, many(20_000, 1_000, &i)),
        energy: None,
        interval: Duration::from_secs(1),
    });
    let burst_capacity = burst.processes.capacity();
    assert!(burst_capacity >= 20_000);
    // The burst is over before its list comes back: 10 processes left.
    for t in 1..3 {
        a.tick(Tick {
            usage: &usage(100 + t, 10 + t, many(10, 1_000 * (t + 1), &i)),
            energy: None,
            interval: Duration::from_secs(1),
        });
    }
    a.recycle(burst);
    let next = a.tick(Tick {
        usage: &usage(103, 13, many(10, 4_000, &i)),
        energy: None,
        interval: Duration::from_secs(1),
    });
    assert_eq!(next.processes.len(), 10);
    assert!(
        next.processes.capacity() > 10,
        "the list cut back is the one built in, not a fresh one"
    );
    assert!(
        next.processes.capacity() < burst_capacity / 4,
        "{} of {burst_capacity}",
        next.processes.capacity()
    );
}

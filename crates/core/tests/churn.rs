//! Short-lived processes under churn (issue 14): an ended process below
//! `minTerminatedEnergyThreshold`, or beyond `maxTerminated`, is not exported as a series of
//! its own, while its energy stays in its container, pod and VM, and the node's accounting
//! stays exact in integer µJ: the last value of every process series ever exported, plus the
//! zone's hidden energy, plus its unattributed energy, is the zone's active energy.
//!
//! Each case runs two attributors on the same input: one under the policy drawn, and a
//! reference that exports every process and forgets none. Groups and node zones must agree
//! exactly, and the reference's processes are the truth for each hidden one.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

mod common;

use common::*;
use kepler_core::*;
use proptest::prelude::*;

/// Who a process belongs to; one shared `Arc` per container and VM, as sources give them.
fn identities() -> Vec<Arc<ProcessInfo>> {
    let container = |id: &str, pod: Option<&str>| {
        Some(Arc::new(ContainerId {
            id: id.into(),
            runtime: Runtime::Containerd,
            pod_id: pod.map(String::from),
        }))
    };
    let vm = |id: &str| {
        Some(Arc::new(VmId {
            id: id.into(),
            hypervisor: "kvm".into(),
        }))
    };
    let info = |process_type, container, vm| {
        Arc::new(ProcessInfo {
            comm: "churn".into(),
            workload: WorkloadIdentity {
                process_type,
                container,
                vm,
            },
            ..ProcessInfo::default()
        })
    };
    vec![
        info(ProcessType::Container, container("c0", Some("p0")), None),
        info(ProcessType::Container, container("c1", Some("p0")), None),
        info(ProcessType::Container, container("c2", Some("p1")), None),
        info(ProcessType::Container, container("c3", None), None),
        info(ProcessType::Vm, None, vm("vm0")),
        info(ProcessType::Vm, None, vm("vm1")),
        info(ProcessType::Regular, None, None),
    ]
}

/// One tick of churn: what each long runner does, the short-lived processes born and ended
/// within the interval, the zones' energy, and whether the exits of the previous tick get a
/// late report (an exit record after the live entry, as the eBPF source can give).
#[derive(Clone, Debug)]
struct Step {
    /// Per long runner (pid 1..=8): CPU ms added, and whether it exits now.
    runners: Vec<(u64, bool)>,
    /// Per short-lived process: identity index and CPU ms.
    short: Vec<(usize, u64)>,
    package_uj: u64,
    dram_uj: Option<u64>,
    late_reports: bool,
}

fn step() -> impl Strategy<Value = Step> {
    (
        proptest::collection::vec((0u64..400, proptest::bool::weighted(0.1)), 8),
        proptest::collection::vec((0usize..7, 0u64..60), 0..40),
        0u64..40_000_000,
        proptest::option::of(0u64..8_000_000),
        any::<bool>(),
    )
        .prop_map(|(runners, short, package_uj, dram_uj, late_reports)| Step {
            runners,
            short,
            package_uj,
            dram_uj,
            late_reports,
        })
}

fn policy() -> impl Strategy<Value = TerminatedPolicy> {
    (1u64..12, proptest::option::of(0usize..6), 0u64..3_000_000).prop_map(
        |(retention_s, max, min_uj)| TerminatedPolicy {
            retention: Duration::from_secs(retention_s),
            max,
            min_energy: MicroJoules(min_uj),
        },
    )
}

fn total(zones: &ZoneValues) -> u64 {
    zones.iter().map(|z| z.energy.0).sum()
}

fn energies(zones: &ZoneValues) -> Vec<u64> {
    zones.iter().map(|z| z.energy.0).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    #[test]
    fn hidden_processes_keep_node_and_groups_exact(
        steps in proptest::collection::vec(step(), 1..14),
        policy in policy(),
        from_source_start in any::<bool>(),
    ) {
        let build = |terminated| {
            let a = Attributor::new(AttributionConfig { terminated, ..AttributionConfig::default() });
            if from_source_start { a.counting_from_source_start() } else { a }
        };
        let mut a = build(policy.clone());
        let mut reference = build(TerminatedPolicy {
            retention: Duration::from_secs(1 << 30),
            max: None,
            min_energy: MicroJoules::ZERO,
        });
        let ids = identities();
        let runner_info = |pid: u32| ids[pid as usize % ids.len()].clone();
        let mut runner_cpu = [Duration::ZERO; 9];
        let mut runner_gone = [false; 9];
        let mut next_pid = 100u32;
        let mut uptime = 1000u64;
        // The last value of every process series `a` ever exported, as Prometheus keeps it.
        let mut series: HashMap<ProcessKey, Vec<u64>> = HashMap::new();
        let mut previous_exits: Vec<ProcessUsage> = Vec::new();
        // Per group the policy dropped: the reference's values when it was dropped.
        let mut restarted: HashMap<String, Vec<u64>> = HashMap::new();
        let mut diverged: std::collections::HashSet<String> = std::collections::HashSet::new();
        let mut busy = Duration::ZERO;
        for st in steps {
            uptime += 2;
            let mut processes = Vec::new();
            for (n, &(add, exits)) in st.runners.iter().enumerate() {
                let pid = n as u32 + 1;
                if runner_gone[n + 1] {
                    continue;
                }
                runner_cpu[n + 1] += Duration::from_millis(add);
                busy += Duration::from_millis(add);
                processes.push(listing(pid, 10, runner_cpu[n + 1], &runner_info(pid), exits));
                runner_gone[n + 1] = exits;
            }
            for &(identity, ms) in &st.short {
                busy += Duration::from_millis(ms);
                // Started after the previous snapshot, so all its CPU time counts.
                processes.push(listing(next_pid, uptime - 1, Duration::from_millis(ms), &ids[identity], true));
                next_pid += 1;
            }
            if st.late_reports {
                for exit in &previous_exits {
                    let mut late = exit.clone();
                    late.cpu_time += Duration::from_millis(3);
                    busy += Duration::from_millis(3);
                    processes.push(late);
                }
            }
            previous_exits = processes.iter().filter(|p| p.exited).cloned().collect();
            let live: Vec<ProcessKey> = processes.iter().filter(|p| !p.exited).map(|p| p.key).collect();
            let usage = UsageSnapshot {
                uptime: Duration::from_secs(uptime),
                node: NodeCpuTimes {
                    total: Duration::from_secs(uptime * 4),
                    idle: Duration::from_secs(uptime * 4).saturating_sub(busy),
                    iowait: Duration::ZERO,
                },
                processes,
                cgroups: Vec::new(),
            };
            let mut zones = vec![zone("package", st.package_uj)];
            if let Some(dram) = st.dram_uj {
                zones.push(zone("dram", dram));
            }
            let tick = |attributor: &mut Attributor| attributor.tick(Tick {
                usage: &usage,
                energy: Some(&zones),
                interval: Duration::from_secs(2),
            });
            let s = tick(&mut a);
            let r = tick(&mut reference);

            // Node zones agree; only `a` hides anything.
            prop_assert_eq!(s.zones.len(), r.zones.len());
            for (z, (node, truth)) in s.zones.iter().zip(&r.zones).enumerate() {
                prop_assert_eq!(node.total, truth.total);
                prop_assert_eq!(node.active, truth.active);
                prop_assert_eq!(node.idle, truth.idle);
                prop_assert_eq!(node.unattributed, truth.unattributed);
                prop_assert_eq!(truth.hidden.energy, MicroJoules::ZERO);
                let in_reference: u64 = r.processes.iter().map(|p| p.zones[z].energy.0).sum();
                prop_assert_eq!(in_reference + truth.unattributed.0, truth.active.energy.0);
            }

            // Exported processes are the reference's, exactly; counters never go back.
            let truth: HashMap<ProcessKey, &ProcessPower> = r.processes.iter().map(|p| (p.key, p)).collect();
            for p in &s.processes {
                let t = truth.get(&p.key).copied();
                prop_assert!(t.is_some(), "{:?} exported but unknown to the reference", p.key);
                prop_assert_eq!(energies(&p.zones), energies(&t.unwrap().zones));
                let now = energies(&p.zones);
                if let Some(before) = series.get(&p.key) {
                    prop_assert!(before.iter().zip(&now).all(|(b, n)| n >= b), "{:?} went back", p.key);
                }
                series.insert(p.key, now);
            }

            // Σ last values of every series ever exported + hidden + unattributed = active.
            for (z, node) in s.zones.iter().enumerate() {
                let exported: u64 = series.values().map(|v| v.get(z).copied().unwrap_or(0)).sum();
                prop_assert_eq!(exported + node.hidden.energy.0 + node.unattributed.0, node.active.energy.0,
                    "zone {}: series {} + hidden {} + unattributed {}", node.zone, exported, node.hidden.energy.0, node.unattributed.0);
                // The same in this interval's watts, read from one snapshot as a scrape reads
                // them: exported processes + hidden = active, unless nobody used CPU time (then
                // the interval's energy is unattributed).
                let watts: f64 = s.processes.iter().map(|p| p.zones.get(z).map_or(0.0, |v| v.watts.0)).sum();
                if watts + node.hidden.watts.0 > 0.0 {
                    let active = node.active.watts.0;
                    prop_assert!((watts + node.hidden.watts.0 - active).abs() <= 1e-9 * active.max(1.0),
                        "zone {}: process watts {} + hidden {} != active {}", node.zone, watts, node.hidden.watts.0, active);
                }
            }

            // Containers, pods and VMs hold their hidden members' energy: exactly the
            // reference's, which holds every member. A group the policy dropped (ended, beyond
            // the cap or the retention time) and that comes back starts again from zero.
            let containers = |x: &PowerSnapshot| -> HashMap<String, Vec<u64>> {
                x.containers.iter().map(|c| {
                    let mut v = energies(&c.zones);
                    v.push(c.cpu_time.as_nanos() as u64);
                    (format!("c/{}", c.container.id), v)
                }).collect()
            };
            let pods = |x: &PowerSnapshot| -> HashMap<String, Vec<u64>> {
                x.pods.iter().map(|p| (format!("p/{}", p.pod.id), energies(&p.zones))).collect()
            };
            let vms = |x: &PowerSnapshot| -> HashMap<String, Vec<u64>> {
                x.vms.iter().map(|v| (format!("v/{}", v.vm.id), energies(&v.zones))).collect()
            };
            for (mine, truth) in [(containers(&s), containers(&r)), (pods(&s), pods(&r)), (vms(&s), vms(&r))] {
                for id in mine.keys() {
                    prop_assert!(truth.contains_key(id), "{} unknown to the reference", id);
                }
                for (id, t) in &truth {
                    match mine.get(id) {
                        Some(_) if diverged.contains(id) => {}
                        Some(m) => {
                            let offset = restarted.get(id).cloned().unwrap_or_else(|| vec![0; t.len()]);
                            // The reference drops ended groups after the retention time too: a
                            // group that both dropped and brought back at different ticks has
                            // two restarts no offset describes (nor does one taken before a zone
                            // appeared); it is left out from then on.
                            if offset.len() != t.len() || t.iter().zip(&offset).any(|(t, o)| t < o) {
                                diverged.insert(id.clone());
                                continue;
                            }
                            let expected: Vec<u64> = t.iter().zip(&offset).map(|(t, o)| t - o).collect();
                            prop_assert_eq!(m, &expected, "{}", id);
                        }
                        None => {
                            restarted.insert(id.clone(), t.clone());
                        }
                    }
                }
            }
            for c in &r.containers {
                let members: Vec<u64> = (0..r.zones.len())
                    .map(|z| r.processes.iter()
                        .filter(|p| p.info.workload.container.as_ref().is_some_and(|id| id.id == c.container.id))
                        .map(|p| p.zones[z].energy.0).sum())
                    .collect();
                prop_assert_eq!(energies(&c.zones), members, "container {}", c.container.id);
            }

            // What is exported: every live process; ended ones only above the threshold and
            // within the cap.
            let exported: BTreeMap<ProcessKey, &ProcessPower> = s.processes.iter().map(|p| (p.key, p)).collect();
            for key in &live {
                prop_assert!(exported.get(key).is_some_and(|p| p.state == WorkloadState::Running), "{:?} live but not exported", key);
            }
            let ended: Vec<&&ProcessPower> = exported.values().filter(|p| p.state == WorkloadState::Terminated).collect();
            if let Some(max) = policy.max {
                prop_assert!(ended.len() <= max, "{} ended exported, cap {}", ended.len(), max);
            }
            for p in ended {
                prop_assert!(total(&p.zones) >= policy.min_energy.0, "{:?} ended below the threshold", p.key);
            }
        }
    }
}

/// The case: 200 `true`-like processes a tick in one pod's container, each far below
/// 10 J. None becomes a series; the container, its pod and the node keep every µJ.
#[test]
fn a_churning_container_keeps_its_short_lived_processes_energy() {
    let mut a = Attributor::new(AttributionConfig::default()).counting_from_source_start();
    let ids = identities();
    let worker = ids[0].clone();
    let mut pid = 1000;
    let mut busy_ms = 0u64;
    let mut shell_ms = 0u64;
    let mut hidden_cpu = Duration::ZERO;
    for t in 0..4u64 {
        let uptime = 100 + 5 * t;
        shell_ms += 50;
        busy_ms += 50;
        let mut processes = vec![listing(
            1,
            10,
            Duration::from_millis(shell_ms),
            &worker,
            false,
        )];
        for _ in 0..200 {
            processes.push(listing(
                pid,
                uptime - 1,
                Duration::from_millis(1),
                &worker,
                true,
            ));
            pid += 1;
            busy_ms += 1;
            if t > 0 {
                hidden_cpu += Duration::from_millis(1);
            }
        }
        let s = a.tick(Tick {
            usage: &UsageSnapshot {
                uptime: Duration::from_secs(uptime),
                node: NodeCpuTimes {
                    total: Duration::from_secs(uptime * 2),
                    idle: Duration::from_secs(uptime * 2) - Duration::from_millis(busy_ms),
                    iowait: Duration::ZERO,
                },
                processes,
                cgroups: Vec::new(),
            },
            energy: Some(&[zone("package", 25_000_000)]),
            interval: Duration::from_secs(5),
        });
        assert_eq!(s.processes.len(), 1, "only the long runner is a series");
        let node = &s.zones[0];
        let container = &s.containers[0];
        let pod = &s.pods[0];
        let shell = s.processes[0].zones[0].energy;
        assert_eq!(container.zones[0].energy, pod.zones[0].energy);
        assert_eq!(container.zones[0].energy.0, shell.0 + node.hidden.energy.0);
        assert_eq!(
            shell.0 + node.hidden.energy.0 + node.unattributed.0,
            node.active.energy.0
        );
        assert_eq!(
            container.cpu_time,
            s.processes[0].cpu_time - Duration::from_millis(50) + hidden_cpu,
            "the container's CPU time counts every short-lived process after the first tick"
        );
        if t > 0 {
            // 200 ms of 250 ms busy in the container: 4/5 of the active energy is hidden.
            assert!(node.hidden.energy.0 > 0);
        }
    }
}

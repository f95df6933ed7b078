//! A burst of exits (hundreds of processes ending within one interval, as under a thousand
//! exits a second) must not export more ended processes than `maxTerminated`, and the energy
//! of those hidden in the very tick they took a share of stays accounted for, as the zone's
//! hidden energy. Sizes follow `PROPTEST_CASES` like every proptest here.

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::*;
use kepler_core::*;
use proptest::prelude::*;

fn usage(uptime_s: u64, procs: &[(u32, u64, bool)]) -> UsageSnapshot {
    let info = Arc::new(ProcessInfo {
        comm: "burst".into(),
        ..ProcessInfo::default()
    });
    let busy: u64 = procs.iter().map(|p| p.1).sum::<u64>() / 1000 + 1;
    UsageSnapshot {
        uptime: Duration::from_secs(uptime_s),
        node: NodeCpuTimes {
            total: Duration::from_secs(uptime_s * 4),
            idle: Duration::from_secs(uptime_s * 4 - busy.min(uptime_s * 4)),
            iowait: Duration::ZERO,
        },
        processes: procs
            .iter()
            .map(|&(pid, cpu_ms, exited)| ProcessUsage {
                key: ProcessKey {
                    pid,
                    start_time: Duration::from_secs(1),
                },
                cpu_time: Duration::from_millis(cpu_ms),
                info: info.clone(),
                exited,
                counters: None,
            })
            .collect(),
        cgroups: Vec::new(),
    }
}

proptest! {
    #[test]
    fn ended_processes_obey_the_cap_and_energy_is_conserved(
        max in 0usize..50,
        waves in proptest::collection::vec((1u32..400, 1u64..50_000_000), 1..6),
    ) {
        let mut a = Attributor::new(AttributionConfig {
            terminated: TerminatedPolicy {
                retention: Duration::from_secs(3600),
                max: Some(max),
                min_energy: MicroJoules::ZERO,
            },
            ..AttributionConfig::default()
        });
        let mut uptime = 100;
        let mut next_pid = 1000u32;
        a.tick(Tick { usage: &usage(uptime, &[(1, 10, false)]), energy: Some(&[zone("package", 0)]), interval: Duration::from_secs(1) });
        let mut previous_unattributed = 0u64;
        let mut previous_hidden = 0u64;
        let mut previous_active = 0u64;
        for (burst, uj) in waves {
            uptime += 1;
            // `burst` processes born and ended within this interval, beside a long runner.
            let mut procs = vec![(1, 10 + uptime * 100, false)];
            for n in 0..burst {
                procs.push((next_pid + n, 10 + u64::from(n % 7) * 10, true));
            }
            next_pid += burst;
            let s = a.tick(Tick { usage: &usage(uptime, &procs), energy: Some(&[zone("package", uj)]), interval: Duration::from_secs(1) });
            let ended = s.processes.iter().filter(|p| p.state == WorkloadState::Terminated).count();
            prop_assert!(ended <= max, "{} ended processes exported, cap {}", ended, max);
            // The cap keeps the most energetic, so it is filled whenever there are enough.
            prop_assert!(ended >= max.min(burst as usize), "{} ended kept, cap {}", ended, max);
            // This tick's active energy is in exported processes' watts, in hidden processes'
            // energy or in unattributed.
            let node = &s.zones[0];
            let active = node.active.energy.0 - previous_active;
            let unattributed = node.unattributed.0 - previous_unattributed + node.hidden.energy.0 - previous_hidden;
            let credited: f64 = s.processes.iter().map(|p| p.zones[0].watts.0).sum::<f64>() * 1e6;
            prop_assert!((credited + unattributed as f64 - active as f64).abs() <= 1.0 + 1e-9 * active as f64,
                "credited {} + unattributed and hidden {} != active {}", credited, unattributed, active);
            previous_active = node.active.energy.0;
            previous_unattributed = node.unattributed.0;
            previous_hidden = node.hidden.energy.0;
        }
    }
}

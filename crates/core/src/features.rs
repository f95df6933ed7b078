//! Node-level model features (DESIGN §7): per-second rates over one interval, with Kepler's
//! feature names, computed from two usage snapshots.

use std::collections::HashMap;

use crate::usage::{ProcessKey, TaskCounters, UsageSnapshot};

pub const BPF_CPU_TIME_MS: &str = "bpf_cpu_time_ms";
pub const BPF_PAGE_CACHE_HIT: &str = "bpf_page_cache_hit";
pub const CPU_CYCLES: &str = "cpu_cycles";
pub const CPU_INSTRUCTIONS: &str = "cpu_instructions";
pub const CACHE_MISS: &str = "cache_miss";
pub const BPF_BLOCK_IRQ: &str = "bpf_block_irq";
pub const BPF_NET_RX_IRQ: &str = "bpf_net_rx_irq";
pub const BPF_NET_TX_IRQ: &str = "bpf_net_tx_irq";

/// Reads one event count from a task's counters.
type CounterField = fn(&TaskCounters) -> Option<u64>;

/// The counter features and how to read each from a task's counters.
const COUNTER_FEATURES: [(&str, CounterField); 7] = [
    (BPF_PAGE_CACHE_HIT, |c| c.page_cache_hits),
    (CPU_CYCLES, |c| c.cpu_cycles),
    (CPU_INSTRUCTIONS, |c| c.cpu_instructions),
    (CACHE_MISS, |c| c.cache_misses),
    (BPF_BLOCK_IRQ, |c| c.irq_block),
    (BPF_NET_RX_IRQ, |c| c.irq_net_rx),
    (BPF_NET_TX_IRQ, |c| c.irq_net_tx),
];

/// Feature rates of the node over the interval between two snapshots. Only features the
/// source measured appear: a model that needs an absent one must say so, never see a zero.
///
/// `bpf_cpu_time_ms` is busy CPU milliseconds per second summed over all CPUs, taken from the
/// node's own CPU accounting so that tasks that lived and died inside the interval count too.
/// Counter features are summed over tasks present in both snapshots (or started since).
pub fn node_features(
    previous: &UsageSnapshot,
    current: &UsageSnapshot,
) -> Vec<(&'static str, f64)> {
    let seconds = current.uptime.saturating_sub(previous.uptime).as_secs_f64();
    if seconds <= 0.0 {
        return Vec::new();
    }
    let busy =
        |t: &crate::usage::NodeCpuTimes| t.total.saturating_sub(t.idle).saturating_sub(t.iowait);
    let busy_ms = busy(&current.node)
        .saturating_sub(busy(&previous.node))
        .as_secs_f64()
        * 1e3;
    let mut features = vec![(BPF_CPU_TIME_MS, busy_ms / seconds)];

    if current.processes.iter().any(|p| p.counters.is_some()) {
        let before: HashMap<ProcessKey, &TaskCounters> = previous
            .processes
            .iter()
            .filter_map(|p| p.counters.as_deref().map(|c| (p.key, c)))
            .collect();
        for (name, read) in COUNTER_FEATURES {
            let mut measured = false;
            let mut sum = 0u64;
            for p in &current.processes {
                let Some(now) = p.counters.as_deref().and_then(read) else {
                    continue;
                };
                measured = true;
                let then = before.get(&p.key).and_then(|c| read(c));
                // A task new since the previous snapshot counts from zero.
                let started_since = p.key.start_time >= previous.uptime;
                match then {
                    Some(then) => sum = sum.saturating_add(now.saturating_sub(then)),
                    None if started_since => sum = sum.saturating_add(now),
                    None => {}
                }
            }
            if measured {
                features.push((name, sum as f64 / seconds));
            }
        }
    }
    features
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::usage::{NodeCpuTimes, ProcessInfo, ProcessUsage};
    use std::sync::Arc;
    use std::time::Duration;

    fn snap(uptime: u64, busy: u64, cycles: &[(u32, u64, Option<u64>)]) -> UsageSnapshot {
        UsageSnapshot {
            uptime: Duration::from_secs(uptime),
            node: NodeCpuTimes {
                total: Duration::from_secs(uptime * 4),
                idle: Duration::from_secs(uptime * 4 - busy),
                iowait: Duration::ZERO,
            },
            processes: cycles
                .iter()
                .map(|&(pid, start, c)| ProcessUsage {
                    key: ProcessKey {
                        pid,
                        start_time: Duration::from_secs(start),
                    },
                    cpu_time: Duration::ZERO,
                    info: Arc::new(ProcessInfo::default()),
                    exited: false,
                    counters: c.map(|c| {
                        Box::new(TaskCounters {
                            cpu_cycles: Some(c),
                            ..TaskCounters::default()
                        })
                    }),
                })
                .collect(),
        }
    }

    #[test]
    fn busy_milliseconds_per_second() {
        // 2 s, 3 CPU-seconds busy → 1500 ms/s.
        let f = node_features(&snap(100, 10, &[]), &snap(102, 13, &[]));
        assert_eq!(f, vec![(BPF_CPU_TIME_MS, 1500.0)]);
    }

    #[test]
    fn counters_are_rates_over_known_and_new_tasks_only() {
        let a = snap(100, 0, &[(1, 1, Some(1000)), (2, 1, Some(50))]);
        // pid 1 +1000, pid 2 gone, pid 3 new since 100 s (+400), pid 4 old but unseen before.
        let b = snap(
            102,
            0,
            &[(1, 1, Some(2000)), (3, 101, Some(400)), (4, 1, Some(9999))],
        );
        let f = node_features(&a, &b);
        assert_eq!(f, vec![(BPF_CPU_TIME_MS, 0.0), (CPU_CYCLES, 700.0)]);
    }
}

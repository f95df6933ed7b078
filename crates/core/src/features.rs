//! The model features of DESIGN §7 as per-second rates over one interval, per process and
//! summed over the node, from two consecutive usage snapshots. Pure: no I/O.
//!
//! A process first seen in `current` counts from zero only if it started after `previous` was
//! taken; otherwise its first reading is a baseline and it has no rates yet. This is the rule
//! attribution applies to CPU time, so features and attributed energy cover the same work.
//!
//! The node's `bpf_cpu_time_ms` is the node's own busy time (`/proc/stat`: total − idle −
//! iowait), not the sum over processes: a procfs scan misses tasks that lived and died inside
//! the interval, the node accounting does not, and it is the same busy time that attribution's
//! usage ratio uses. The node's counter features are sums over processes.

use std::time::Duration;

use crate::usage::{NodeCpuTimes, ProcessKey, ProcessUsage, TaskCounters, UsageSnapshot};

/// One of Kepler's model features (DESIGN §7). The Kepler name ([`Feature::as_str`]) is what
/// model files list and what the `feature` label of the exported feature rates says; model
/// files are parsed into this enum once, at load, so an unknown name is found there.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Feature {
    /// Busy CPU milliseconds per second, summed over CPUs: the feature every source provides.
    BpfCpuTimeMs,
    BpfPageCacheHit,
    BpfBlockIrq,
    BpfNetRxIrq,
    BpfNetTxIrq,
    CpuCycles,
    CpuInstructions,
    CacheMiss,
}

impl Feature {
    /// Every feature, in the order models usually list them (and feature rates are exported).
    pub const ALL: [Feature; 8] = [
        Feature::BpfCpuTimeMs,
        Feature::BpfPageCacheHit,
        Feature::BpfBlockIrq,
        Feature::BpfNetRxIrq,
        Feature::BpfNetTxIrq,
        Feature::CpuCycles,
        Feature::CpuInstructions,
        Feature::CacheMiss,
    ];

    /// Kepler's name of the feature.
    pub const fn as_str(self) -> &'static str {
        match self {
            Feature::BpfCpuTimeMs => "bpf_cpu_time_ms",
            Feature::BpfPageCacheHit => "bpf_page_cache_hit",
            Feature::BpfBlockIrq => "bpf_block_irq",
            Feature::BpfNetRxIrq => "bpf_net_rx_irq",
            Feature::BpfNetTxIrq => "bpf_net_tx_irq",
            Feature::CpuCycles => "cpu_cycles",
            Feature::CpuInstructions => "cpu_instructions",
            Feature::CacheMiss => "cache_miss",
        }
    }
}

impl std::fmt::Display for Feature {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A name that is none of Kepler's features.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown feature {name:?} (Kepler's features: {})", known_names())]
pub struct UnknownFeature {
    pub name: String,
}

fn known_names() -> String {
    Feature::ALL.map(Feature::as_str).join(", ")
}

impl std::str::FromStr for Feature {
    type Err = UnknownFeature;

    /// Exactly Kepler's name; legacy spellings in model files are the models crate's business.
    fn from_str(name: &str) -> Result<Self, Self::Err> {
        Feature::ALL
            .into_iter()
            .find(|f| f.as_str() == name)
            .ok_or_else(|| UnknownFeature {
                name: name.to_string(),
            })
    }
}

/// So that `(Feature, f64)` pairs work wherever name-keyed pairs do (the models crate's
/// lookups), and tests compare feature lists with name lists.
impl AsRef<str> for Feature {
    fn as_ref(&self) -> &str {
        self.as_str()
    }
}

impl PartialEq<str> for Feature {
    fn eq(&self, other: &str) -> bool {
        self.as_str() == other
    }
}

impl PartialEq<&str> for Feature {
    fn eq(&self, other: &&str) -> bool {
        self.as_str() == *other
    }
}

/// Ordered by name, not by declaration: models report their features sorted the way model
/// files and the model server list them.
impl Ord for Feature {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.as_str().cmp(other.as_str())
    }
}

impl PartialOrd for Feature {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

/// Per-second rates over one interval. `None`: the source does not measure that event.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct FeatureRates {
    /// CPU milliseconds per second (1000 = one CPU busy).
    pub bpf_cpu_time_ms: f64,
    pub bpf_page_cache_hit: Option<f64>,
    pub bpf_block_irq: Option<f64>,
    pub bpf_net_rx_irq: Option<f64>,
    pub bpf_net_tx_irq: Option<f64>,
    pub cpu_cycles: Option<f64>,
    pub cpu_instructions: Option<f64>,
    pub cache_miss: Option<f64>,
}

impl FeatureRates {
    /// The rate of a feature; `None` when the source does not measure it.
    pub fn get(&self, feature: Feature) -> Option<f64> {
        match feature {
            Feature::BpfCpuTimeMs => Some(self.bpf_cpu_time_ms),
            Feature::BpfPageCacheHit => self.bpf_page_cache_hit,
            Feature::BpfBlockIrq => self.bpf_block_irq,
            Feature::BpfNetRxIrq => self.bpf_net_rx_irq,
            Feature::BpfNetTxIrq => self.bpf_net_tx_irq,
            Feature::CpuCycles => self.cpu_cycles,
            Feature::CpuInstructions => self.cpu_instructions,
            Feature::CacheMiss => self.cache_miss,
        }
    }

    fn add(&mut self, o: &FeatureRates) {
        fn sum(a: &mut Option<f64>, b: Option<f64>) {
            if let Some(b) = b {
                *a = Some(a.unwrap_or(0.0) + b);
            }
        }
        self.bpf_cpu_time_ms += o.bpf_cpu_time_ms;
        sum(&mut self.bpf_page_cache_hit, o.bpf_page_cache_hit);
        sum(&mut self.bpf_block_irq, o.bpf_block_irq);
        sum(&mut self.bpf_net_rx_irq, o.bpf_net_rx_irq);
        sum(&mut self.bpf_net_tx_irq, o.bpf_net_tx_irq);
        sum(&mut self.cpu_cycles, o.cpu_cycles);
        sum(&mut self.cpu_instructions, o.cpu_instructions);
        sum(&mut self.cache_miss, o.cache_miss);
    }
}

/// Features of one interval.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Features {
    pub interval: Duration,
    /// Busy CPU time of the node, and counter rates summed over the processes below.
    pub node: FeatureRates,
    /// Processes that have rates this interval (not the ones whose first reading is a baseline).
    pub processes: Vec<(ProcessKey, FeatureRates)>,
}

/// Rates between two snapshots of the same source, `previous` taken first. An empty or
/// negative interval gives no process rates.
pub fn features(previous: &UsageSnapshot, current: &UsageSnapshot) -> Features {
    rates_between(previous, current, true)
}

/// [`features`], keeping the per-process rates only when `per_process`: the node's alone are
/// the sum, and the list of every process would be built only to be dropped.
fn rates_between(previous: &UsageSnapshot, current: &UsageSnapshot, per_process: bool) -> Features {
    let interval = current.uptime.saturating_sub(previous.uptime);
    let mut out = Features {
        interval,
        ..Default::default()
    };
    let secs = interval.as_secs_f64();
    if secs <= 0.0 {
        return out;
    }
    // Every tick, over every process of two snapshots (thousands under churn).
    let before: crate::FastMap<ProcessKey, &ProcessUsage> =
        previous.processes.iter().map(|p| (p.key, p)).collect();
    for p in &current.processes {
        let base = match before.get(&p.key) {
            Some(b) => Some(*b),
            None if p.key.start_time >= previous.uptime => None,
            None => continue,
        };
        let rates = rates(base, p, secs);
        out.node.add(&rates);
        if per_process {
            out.processes.push((p.key, rates));
        }
    }
    out.node.bpf_cpu_time_ms = node_busy_ms_per_second(previous, current, secs);
    out
}

/// The node's rates alone. Without counter features (the procfs source) there is nothing to
/// sum over processes, so the per-process pass of [`features`] is skipped.
pub fn node_features(previous: &UsageSnapshot, current: &UsageSnapshot) -> FeatureRates {
    if current.processes.iter().any(|p| p.counters.is_some()) {
        return rates_between(previous, current, false).node;
    }
    let secs = current.uptime.saturating_sub(previous.uptime).as_secs_f64();
    let mut node = FeatureRates::default();
    if secs > 0.0 {
        node.bpf_cpu_time_ms = node_busy_ms_per_second(previous, current, secs);
    }
    node
}

fn node_busy_ms_per_second(previous: &UsageSnapshot, current: &UsageSnapshot, secs: f64) -> f64 {
    let busy = |t: &NodeCpuTimes| t.total.saturating_sub(t.idle).saturating_sub(t.iowait);
    let node_busy = busy(&current.node).saturating_sub(busy(&previous.node));
    node_busy.as_secs_f64() * 1e3 / secs
}

impl FeatureRates {
    /// The measured features with their rates, in [`Feature::ALL`]'s order.
    pub fn measured(&self) -> Vec<(Feature, f64)> {
        Feature::ALL
            .into_iter()
            .filter_map(|f| self.get(f).map(|v| (f, v)))
            .collect()
    }
}

fn rates(before: Option<&ProcessUsage>, now: &ProcessUsage, secs: f64) -> FeatureRates {
    let cpu = now
        .cpu_time
        .saturating_sub(before.map_or(Duration::ZERO, |b| b.cpu_time));
    let zero = TaskCounters::default();
    let c_now = now.counters.as_deref().unwrap_or(&zero);
    let c_before = before.and_then(|b| b.counters.as_deref());
    // A counter the earlier reading lacked starts from zero: it was just enabled or the
    // process is new, and either way everything counted so far happened since.
    let rate = |f: fn(&TaskCounters) -> Option<u64>| {
        let n = f(c_now)?;
        let b = c_before.and_then(f).unwrap_or(0);
        Some(n.saturating_sub(b) as f64 / secs)
    };
    FeatureRates {
        bpf_cpu_time_ms: cpu.as_secs_f64() * 1e3 / secs,
        bpf_page_cache_hit: rate(|c| c.page_cache_hits),
        bpf_block_irq: rate(|c| c.irq_block),
        bpf_net_rx_irq: rate(|c| c.irq_net_rx),
        bpf_net_tx_irq: rate(|c| c.irq_net_tx),
        cpu_cycles: rate(|c| c.cpu_cycles),
        cpu_instructions: rate(|c| c.cpu_instructions),
        cache_miss: rate(|c| c.cache_misses),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    fn proc(pid: u32, start_ms: u64, cpu_ms: u64, hits: Option<u64>) -> ProcessUsage {
        ProcessUsage {
            key: ProcessKey {
                pid,
                start_time: Duration::from_millis(start_ms),
            },
            cpu_time: Duration::from_millis(cpu_ms),
            info: Arc::default(),
            exited: false,
            counters: hits.map(|h| {
                Box::new(TaskCounters {
                    page_cache_hits: Some(h),
                    ..Default::default()
                })
            }),
        }
    }

    fn snap(uptime_s: u64, processes: Vec<ProcessUsage>) -> UsageSnapshot {
        UsageSnapshot {
            uptime: Duration::from_secs(uptime_s),
            processes,
            ..Default::default()
        }
    }

    #[test]
    fn rates_follow_the_first_sight_rule() {
        let prev = snap(10, vec![proc(1, 0, 1000, Some(100))]);
        let cur = snap(
            12,
            vec![
                proc(1, 0, 3000, Some(300)),   // known: 2000 ms over 2 s
                proc(2, 11_000, 500, None),    // started in the interval: all of it counts
                proc(3, 5_000, 9000, Some(7)), // older, first seen: baseline only
            ],
        );
        let f = features(&prev, &cur);
        assert_eq!(f.interval, Duration::from_secs(2));
        assert_eq!(f.processes.len(), 2);
        assert_eq!(f.processes[0].1.bpf_cpu_time_ms, 1000.0);
        assert_eq!(f.processes[0].1.bpf_page_cache_hit, Some(100.0));
        assert_eq!(f.processes[1].1.bpf_cpu_time_ms, 250.0);
        assert_eq!(f.processes[1].1.bpf_page_cache_hit, None);
        // The snapshots' node times are zero: the node's busy time is its own, not the sum.
        assert_eq!(f.node.bpf_cpu_time_ms, 0.0);
        assert_eq!(f.node.get(Feature::BpfPageCacheHit), Some(100.0));
        assert_eq!(f.node.get(Feature::CpuCycles), None);
        assert!("nonsense".parse::<Feature>().is_err());
        // With counters present, the node's sums need the per-process pass all the same.
        assert_eq!(node_features(&prev, &cur), f.node);
    }

    #[test]
    fn node_cpu_time_is_the_nodes_busy_time() {
        let mut prev = snap(10, vec![]);
        let mut cur = snap(12, vec![proc(2, 11_000, 500, None)]);
        prev.node = NodeCpuTimes {
            total: Duration::from_secs(40),
            idle: Duration::from_secs(30),
            iowait: Duration::from_secs(1),
        };
        // 3 more busy CPU-seconds in 2 s, of which the process saw only 0.5 s.
        cur.node = NodeCpuTimes {
            total: Duration::from_secs(44),
            idle: Duration::from_secs(30),
            iowait: Duration::from_secs(2),
        };
        let f = features(&prev, &cur);
        assert_eq!(f.node.bpf_cpu_time_ms, 1500.0);
        assert_eq!(f.processes[0].1.bpf_cpu_time_ms, 250.0);
        assert_eq!(f.node.measured(), vec![(Feature::BpfCpuTimeMs, 1500.0)]);
        assert_eq!(node_features(&prev, &cur), f.node);
    }

    #[test]
    fn empty_interval_has_no_rates() {
        let s = snap(10, vec![proc(1, 0, 1000, None)]);
        let f = features(&s, &s);
        assert!(f.processes.is_empty());
        assert_eq!(f.node, FeatureRates::default());
    }

    #[test]
    fn every_name_is_readable() {
        let r = FeatureRates {
            bpf_cpu_time_ms: 1.0,
            bpf_page_cache_hit: Some(2.0),
            bpf_block_irq: Some(3.0),
            bpf_net_rx_irq: Some(4.0),
            bpf_net_tx_irq: Some(5.0),
            cpu_cycles: Some(6.0),
            cpu_instructions: Some(7.0),
            cache_miss: Some(8.0),
        };
        let got: Vec<f64> = Feature::ALL.iter().filter_map(|f| r.get(*f)).collect();
        assert_eq!(got, vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    }

    #[test]
    fn names_round_trip_and_unknown_names_are_named() {
        for f in Feature::ALL {
            assert_eq!(f.as_str().parse::<Feature>(), Ok(f));
            assert_eq!(f.to_string(), f.as_str());
        }
        let err = "bpf_cpu_time_us"
            .parse::<Feature>()
            .unwrap_err()
            .to_string();
        assert!(err.contains("\"bpf_cpu_time_us\""), "{err}");
        assert!(err.contains("cache_miss"), "{err}");
        // Sorted by name, as model files list features.
        let mut sorted = Feature::ALL.to_vec();
        sorted.sort();
        let names: Vec<&str> = sorted.iter().map(|f| f.as_str()).collect();
        let mut by_name = names.clone();
        by_name.sort_unstable();
        assert_eq!(names, by_name);
    }
}

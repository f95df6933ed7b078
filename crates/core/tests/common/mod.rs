//! Inputs the attribution tests build alike: a measured zone weighted by CPU time, and a
//! process's listing.

#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use kepler_core::*;

/// Zone `name` (path `/<name>`) with `uj` µJ this tick, measured and weighted by CPU time.
pub fn zone(name: &str, uj: u64) -> ZoneEnergy {
    ZoneEnergy {
        zone: name.into(),
        path: format!("/{name}").into(),
        energy: MicroJoules(uj),
        meta: Arc::new(ZoneMeta::measured("test")),
        weights: ZoneWeights::CpuTime,
        idle: None,
        device: None,
    }
}

/// Process `pid`, started at `start_s` s of uptime, with `cpu` used so far.
pub fn listing(
    pid: u32,
    start_s: u64,
    cpu: Duration,
    info: &Arc<ProcessInfo>,
    exited: bool,
) -> ProcessUsage {
    ProcessUsage {
        key: ProcessKey {
            pid,
            start_time: Duration::from_secs(start_s),
        },
        cpu_time: cpu,
        info: info.clone(),
        exited,
        counters: None,
    }
}

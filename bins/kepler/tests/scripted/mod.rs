//! A usage source that advances by a fixed script, for tests that drive the agent's sampler.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    NodeCpuTimes, ProcessInfo, ProcessKey, ProcessUsage, ReadError, UsageSnapshot, UsageSource,
};

/// Each snapshot: one second more uptime, one more busy CPU-second on a 2-CPU node, and
/// `ms_per_tick` more CPU time for each listed process.
pub struct ScriptedUsage {
    step: u64,
    processes: Vec<(u32, u64, Arc<ProcessInfo>)>,
    /// Inputs it says it skipped, at each snapshot.
    skipped_per_snapshot: u64,
}

impl ScriptedUsage {
    /// `processes`: (pid, CPU milliseconds per tick, what the source says about it).
    pub fn new(processes: Vec<(u32, u64, Arc<ProcessInfo>)>) -> Self {
        ScriptedUsage {
            step: 0,
            processes,
            skipped_per_snapshot: 0,
        }
    }

    /// Says it skipped `n` bad inputs at each snapshot.
    pub fn skipping(mut self, n: u64) -> Self {
        self.skipped_per_snapshot = n;
        self
    }
}

/// A plain process named `p<pid>`.
pub fn plain(pid: u32) -> Arc<ProcessInfo> {
    Arc::new(ProcessInfo {
        comm: format!("p{pid}"),
        ..ProcessInfo::default()
    })
}

impl UsageSource for ScriptedUsage {
    fn name(&self) -> &str {
        "scripted"
    }

    fn skipped_inputs(&self) -> u64 {
        self.step * self.skipped_per_snapshot
    }

    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError> {
        self.step += 1;
        let s = self.step;
        Ok(UsageSnapshot {
            uptime: Duration::from_secs(100 + s),
            node: NodeCpuTimes {
                total: Duration::from_secs(2 * (100 + s)),
                idle: Duration::from_secs(2 * (100 + s) - s),
                iowait: Duration::ZERO,
            },
            processes: self
                .processes
                .iter()
                .map(|(pid, ms, info)| ProcessUsage {
                    key: ProcessKey {
                        pid: *pid,
                        start_time: Duration::from_secs(1),
                    },
                    cpu_time: Duration::from_millis(ms * s),
                    info: info.clone(),
                    exited: false,
                    counters: None,
                })
                .collect(),
            cgroups: Vec::new(),
        })
    }
}

//! Phase 1: CPU-time deltas per process, and the first-sight rule.

use std::collections::hash_map::Entry;
use std::sync::Arc;
use std::time::Duration;

use super::{Attributor, Workload};
use crate::usage::{ProcessInfo, UsageSnapshot};

pub(super) struct ProcessEntry {
    pub(super) info: Arc<ProcessInfo>,
    /// Tick whose energy the `watts` fields describe; a source may list a key twice in one
    /// snapshot (an exit record beside the live entry), and both shares must add up.
    pub(super) energy_tick: u64,
    /// Last cumulative CPU time read from the source.
    pub(super) last_cpu_time: Duration,
    pub(super) workload: Workload<()>,
    /// Not exported as a series of its own: it ended below the terminated-energy threshold or
    /// beyond the cap. Once set it stays, so that no part of its energy is counted both in
    /// the zones' hidden energy and in a series that appears later.
    pub(super) hidden: bool,
}

impl Attributor {
    /// Fills `keys` and `weights` (CPU-time delta in ns) in the order of the snapshot's
    /// processes. A process first seen now counts all its CPU time only if it started after
    /// the previous snapshot, or when the source counts from its own start (then everything
    /// it reports after its first snapshot was used since that snapshot); otherwise this
    /// reading is its baseline.
    pub(super) fn observe_processes(&mut self, usage: &UsageSnapshot) {
        let tick = self.tick;
        self.weights.clear();
        self.keys.clear();
        let mut ended_with_reused_pid = Vec::new();
        // Whether the source reads cgroup counters: only then is each process's credit noted
        // by cgroup.
        let counting = !(usage.cgroups.is_empty() && self.cgroups.is_empty());
        // Room for this tick's listing at once: under churn most of it is new, and the table
        // is cut back after each tick (see `prune`), so it would otherwise grow in steps.
        let new_at_most = usage.processes.len().saturating_sub(self.processes.len());
        self.processes.reserve(new_at_most);
        for process in &usage.processes {
            let counts_fully = self.previous_uptime.is_some_and(|prev| {
                process.key.start_time >= prev || self.source_counts_from_start
            });
            let entry = match self.processes.entry(process.key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(e) => {
                    // A reused pid: the ended process of the same pid goes, or both would
                    // export the same label set (the pid, not the start time, is the label).
                    if let Some(old) = self.latest_by_pid.insert(process.key.pid, process.key) {
                        if old != process.key {
                            ended_with_reused_pid.push(old);
                        }
                    }
                    // A late report of a process hidden last tick: it stays hidden, and
                    // counts from where it was read last.
                    let held = self.held.remove(&process.key);
                    e.insert(ProcessEntry {
                        info: process.info.clone(),
                        energy_tick: 0,
                        last_cpu_time: match held {
                            Some(last) => last,
                            None if counts_fully => Duration::ZERO,
                            None => process.cpu_time,
                        },
                        workload: Workload::new(()),
                        hidden: held.is_some(),
                    })
                }
            };
            // CPU time never goes backwards for one task; if a source says it did, count none.
            let delta = process.cpu_time.saturating_sub(entry.last_cpu_time);
            entry.last_cpu_time = entry.last_cpu_time.max(process.cpu_time);
            entry.workload.cpu_time = entry.last_cpu_time;
            entry.workload.seen_tick = tick;
            // A late report of an ended process (a leftover piece, described from its exit
            // record alone) keeps the description it ended with: its labels stay those of
            // its series.
            let late_exit = process.exited && entry.workload.ended_at.is_some();
            if !late_exit && !Arc::ptr_eq(&entry.info, &process.info) {
                entry.info = process.info.clone();
            }
            entry.workload.ended_at = process.exited.then_some(usage.uptime);
            let delta_ns = u64::try_from(delta.as_nanos()).unwrap_or(u64::MAX);
            self.keys.push(process.key);
            self.weights.push(delta_ns);
            self.credit_process_cgroup(
                counting,
                process.info.usage_cgroup.as_ref(),
                delta_ns,
                usage.uptime,
            );
        }

        for old in ended_with_reused_pid {
            if self
                .processes
                .get(&old)
                .is_some_and(|p| p.workload.ended_at.is_some() && p.workload.seen_tick != tick)
            {
                self.processes.remove(&old);
            }
        }
    }
}

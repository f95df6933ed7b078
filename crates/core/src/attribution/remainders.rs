//! Phase 1b: the CPU time of ended processes that no listing shows, from cgroup usage counters.
//!
//! A cgroup's counter (`cpuacct.usage`, `cpu.stat` `usage_usec`) counts every task that ran in
//! it, on the same basis as the scheduler's per-task runtime the sources read. What it moved
//! beyond the CPU-time deltas this attribution credited to the cgroup's listed processes is the
//! time of processes the source did not list: those that started and ended between two
//! snapshots, and the last moments of those that ended. It is credited to the cgroup's
//! workload as one more weight of the tick, never a process series of its own: its energy goes
//! to the zones' hidden energy and to the workload's container, pod or VM, so conservation
//! holds exactly as for hidden processes.
//!
//! The counter and the processes are read a moment apart, and some sources credit a process
//! slightly short of its runtime (clock-tick rounding) and catch up later. So each cgroup keeps
//! a signed balance: a reading adds its movement less the processes' credit since the reading
//! before, a positive balance is credited at once, and a negative one (the processes were
//! credited ahead of the counter) is paid back from the next readings before anything more is
//! credited. So the time credited to a cgroup, processes and remainders together, is never
//! less than its counter moved, and more only by what the processes' readings fell short of
//! their truth at one reading (repaid as soon as the cgroup has ended processes again).
//!
//! A source reads a cgroup first after it listed a process in it, and until then the cgroup's
//! time was held in the counter of a cgroup above it that the source reads (a container's
//! under the `cpuacct` root, which holds the node). So a baseline names that cgroup
//! ([`crate::CgroupUsage::counted_in`]), and the credit of its processes until then is taken
//! as that cgroup's: its counter's movement is not credited a second time as a remainder.

use std::sync::Arc;
use std::time::Duration;

use super::groups::GroupSums;
use super::Attributor;
use crate::units::{MicroJoules, Watts};
use crate::usage::UsageSnapshot;
use crate::workload::WorkloadIdentity;

/// What the attribution knows of one cgroup the source reads a usage counter of.
pub(super) struct CgroupState {
    /// CPU time credited to the cgroup's listed processes since its last reading, in ns.
    pending: u64,
    /// Counter movement not matched by process credit and not credited yet (ns); negative
    /// while processes were credited ahead of the counter.
    balance: i128,
    /// Whether a reading of it came: its next movements count from there.
    counting: bool,
    workload: WorkloadIdentity,
    /// Uptime when it was last reported or one of its processes was listed.
    seen_at: Duration,
}

impl CgroupState {
    fn new(now: Duration) -> CgroupState {
        CgroupState {
            pending: 0,
            balance: 0,
            counting: false,
            workload: WorkloadIdentity::default(),
            seen_at: now,
        }
    }
}

/// This tick's remainders: one per cgroup whose counter moved beyond its processes' credit,
/// each weighted by that time (ns) after the processes in `Attributor::weights`.
#[derive(Default)]
pub(super) struct Remainders {
    pub(super) workloads: Vec<WorkloadIdentity>,
    /// One remainder's energy per zone, reused.
    parts: Vec<MicroJoules>,
}

impl Attributor {
    /// Adds a listed process's credit of this tick to its cgroup's, while the source reads
    /// counters (`counting`). A cgroup not read yet keeps it too: its baseline hands it to
    /// the cgroup whose counter held it until then.
    pub(super) fn credit_process_cgroup(
        &mut self,
        counting: bool,
        cgroup: Option<&Arc<str>>,
        delta_ns: u64,
        now: Duration,
    ) {
        let Some(cgroup) = cgroup.filter(|_| counting) else {
            return;
        };
        let state = match self.cgroups.get_mut(cgroup) {
            Some(state) => state,
            None => self
                .cgroups
                .entry(cgroup.clone())
                .or_insert_with(|| CgroupState::new(now)),
        };
        state.pending = state.pending.saturating_add(delta_ns);
        state.seen_at = now;
    }

    /// Turns the snapshot's cgroup readings into this tick's remainders, appended to
    /// `weights` after the processes'. A cgroup read for the first time (or again after the
    /// attribution forgot it) starts a balance from this reading on.
    pub(super) fn observe_remainders(&mut self, usage: &UsageSnapshot) {
        self.remainders.workloads.clear();
        let now = usage.uptime;
        // Baselines first: the credit of their processes until now goes to the cgroup that
        // counted them, before that one's reading is weighed.
        for reading in &usage.cgroups {
            let Some(parent) = &reading.counted_in else {
                continue;
            };
            let Some(state) = self.cgroups.get_mut(&reading.cgroup) else {
                continue;
            };
            if state.counting && reading.since_last.is_some() {
                continue;
            }
            let credited = std::mem::take(&mut state.pending);
            if let Some(parent) = self.cgroups.get_mut(parent) {
                parent.pending = parent.pending.saturating_add(credited);
            }
        }
        for reading in &usage.cgroups {
            let state = match self.cgroups.get_mut(&reading.cgroup) {
                Some(state) => state,
                None => self
                    .cgroups
                    .entry(reading.cgroup.clone())
                    .or_insert_with(|| CgroupState::new(now)),
            };
            state.seen_at = now;
            if state.workload != reading.workload {
                state.workload = reading.workload.clone();
            }
            let credited = std::mem::take(&mut state.pending);
            let counting = std::mem::replace(&mut state.counting, true);
            let moved = match reading.since_last {
                Some(moved) if counting => moved,
                // A baseline: what the processes were credited this tick came before it.
                _ => continue,
            };
            let moved = i128::try_from(moved.as_nanos()).unwrap_or(i128::MAX);
            state.balance = state
                .balance
                .saturating_add(moved)
                .saturating_sub(i128::from(credited));
            if state.balance <= 0 {
                continue;
            }
            let remainder = u64::try_from(state.balance).unwrap_or(u64::MAX);
            state.balance -= i128::from(remainder);
            self.weights.push(remainder);
            self.remainders.workloads.push(state.workload.clone());
        }
    }

    /// Forgets the cgroups neither read nor named by a listed process for `retention`: gone, or
    /// no longer read (a source that reads one again starts it with a baseline).
    pub(super) fn forget_cgroups(&mut self, now: Duration, retention: Duration) {
        self.cgroups
            .retain(|_, c| now.saturating_sub(c.seen_at) <= retention);
    }

    /// Credits this tick's remainders: their energy goes to the zones' hidden energy and to
    /// their workloads' groups, as an ended member's would.
    pub(super) fn credit_remainders(&mut self, sums: &mut GroupSums, interval: Duration) {
        let first = self.keys.len();
        let Remainders { workloads, parts } = &mut self.remainders;
        parts.clear();
        parts.resize(self.zones.len(), MicroJoules::ZERO);
        for (n, workload) in workloads.iter().enumerate() {
            let i = first + n;
            parts.iter_mut().for_each(|p| *p = MicroJoules::ZERO);
            for (z, zone_parts) in &self.tick_energy {
                let part = MicroJoules(zone_parts.get(i).copied().unwrap_or(0));
                if let (Some(slot), Some(zone)) = (parts.get_mut(*z), self.zones.get_mut(*z)) {
                    *slot = part;
                    zone.hidden.energy += part;
                    zone.hidden.watts = Watts(zone.hidden.watts.0 + part.over(interval).0);
                }
            }
            let cpu = Duration::from_nanos(self.weights.get(i).copied().unwrap_or(0));
            sums.gather_ended(workload, parts, cpu);
        }
    }
}

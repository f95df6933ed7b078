//! Phase 4: workloads not seen this tick end; ended ones expire after the retention time and
//! are capped by count and energy.

use std::time::Duration;

use super::processes::ProcessEntry;
use super::{zero_watts, Attributor, FastMap, Workload};
use crate::usage::ProcessKey;

impl Attributor {
    /// Workloads not seen this tick have ended: their power drops to zero, their energy stays.
    pub(super) fn end_unseen(&mut self, now: Duration) {
        let tick = self.tick;
        for w in self.processes.values_mut().map(|p| &mut p.workload) {
            end_if_unseen(w, tick, now);
        }
        for w in self.containers.values_mut() {
            end_if_unseen(w, tick, now);
        }
        for w in self.pods.values_mut() {
            end_if_unseen(w, tick, now);
        }
        for w in self.vms.values_mut() {
            end_if_unseen(w, tick, now);
        }
    }

    pub(super) fn prune(&mut self, now: Duration) {
        let policy = self.config.terminated.clone();
        let tick = self.tick;
        let expired = |ended: Option<Duration>| {
            ended.is_some_and(|at| now.saturating_sub(at) > policy.retention)
        };
        // A process that took a share of this tick stays in this tick's snapshot whatever its
        // total, so the exported process power adds up to the node's active power; the
        // threshold and the cap apply from the next tick on.
        let prunable =
            |p: &ProcessEntry| p.workload.ended_at.is_some() && p.workload.seen_tick != tick;
        let before = self.processes.len();
        self.processes.retain(|_, p| {
            !prunable(p)
                || (!expired(p.workload.ended_at)
                    && p.workload.total_energy() >= policy.min_energy.0)
        });
        if let Some(max) = policy.max {
            let mut ended: Vec<(u64, ProcessKey)> = self
                .processes
                .iter()
                .filter(|(_, p)| prunable(p))
                .map(|(k, p)| (p.workload.total_energy(), *k))
                .collect();
            if ended.len() > max {
                ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
                for (_, key) in ended.iter().skip(max) {
                    self.processes.remove(key);
                }
            }
        }
        if let Some(max) = policy.max {
            self.cap_ended_this_tick(max);
        }
        if self.processes.len() != before {
            let processes = &self.processes;
            self.latest_by_pid
                .retain(|_, key| processes.contains_key(key));
        }
        self.containers.retain(|_, w| !expired(w.ended_at));
        self.pods.retain(|_, w| !expired(w.ended_at));
        self.vms.retain(|_, w| !expired(w.ended_at));
        // Churning containers must not grow memory within the retention time either.
        if let Some(max) = policy.max {
            cap_ended(&mut self.containers, max, tick);
            cap_ended(&mut self.pods, max, tick);
            cap_ended(&mut self.vms, max, tick);
        }
    }
}

impl Attributor {
    /// The cap above spares processes that took a share of this tick; a burst of exits (a
    /// thousand a second) would then export thousands of ended series. Beyond the cap, the
    /// least energetic of them go too, and their part of this tick moves to the zone's
    /// unattributed energy, so the node's active energy is still fully accounted for.
    fn cap_ended_this_tick(&mut self, max: usize) {
        let mut ended: Vec<(u64, ProcessKey)> = self
            .processes
            .iter()
            .filter(|(_, p)| p.workload.ended_at.is_some())
            .map(|(k, p)| (p.workload.total_energy(), *k))
            .collect();
        if ended.len() <= max {
            return;
        }
        ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let dropped: FastMap<ProcessKey, ()> =
            ended.iter().skip(max).map(|(_, k)| (*k, ())).collect();
        for (i, key) in self.keys.iter().enumerate() {
            if !dropped.contains_key(key) {
                continue;
            }
            for (z, parts) in &self.tick_energy {
                let part = parts.get(i).copied().unwrap_or(0);
                if let Some(zone) = self.zones.get_mut(*z) {
                    zone.unattributed += crate::units::MicroJoules(part);
                }
            }
        }
        self.processes.retain(|k, _| !dropped.contains_key(k));
    }
}

/// Keeps at most `max` ended groups (the most energetic), never one active this tick.
fn cap_ended<R>(groups: &mut FastMap<String, Workload<R>>, max: usize, tick: u64) {
    let mut ended: Vec<(u64, &String)> = groups
        .iter()
        .filter(|(_, w)| w.ended_at.is_some() && w.seen_tick != tick)
        .map(|(id, w)| (w.total_energy(), id))
        .collect();
    if ended.len() <= max {
        return;
    }
    ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
    let drop: Vec<String> = ended
        .iter()
        .skip(max)
        .map(|(_, id)| (*id).clone())
        .collect();
    for id in drop {
        groups.remove(&id);
    }
}

fn end_if_unseen<R>(w: &mut Workload<R>, tick: u64, now: Duration) {
    if w.seen_tick != tick && w.ended_at.is_none() {
        w.ended_at = Some(now);
    }
    if w.seen_tick != tick {
        zero_watts(&mut w.zones);
    }
}

//! Phase 4: workloads not seen this tick end; ended ones expire after the retention time and
//! are capped by count and energy. Ended processes below the threshold or beyond the cap are
//! hidden: not exported, their energy kept by their groups and by the zones' hidden energy.

use std::time::Duration;

use super::{zero_watts, Attributor, FastMap, Workload};
use crate::units::{MicroJoules, Watts};
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

    pub(super) fn prune(&mut self, now: Duration, interval: Duration) {
        let policy = self.config.terminated.clone();
        let tick = self.tick;
        let expired = |ended: Option<Duration>| {
            ended.is_some_and(|at| now.saturating_sub(at) > policy.retention)
        };
        self.hide_below_threshold(policy.min_energy);
        let before = self.processes.len();
        // An ended process listed this tick stays one tick more even when hidden, so that a
        // late report of it (an exit record after its live entry) finds its entry and adds
        // only the CPU time not counted yet; a hidden one stays in `held` (below).
        self.processes.retain(|_, p| {
            let w = &p.workload;
            w.ended_at.is_none()
                || w.seen_tick == tick
                || (!p.hidden && !expired(w.ended_at) && w.total_energy() >= policy.min_energy.0)
        });
        if let Some(max) = policy.max {
            self.cap_ended(max);
        }
        self.account_hidden(interval);
        self.hold_hidden();
        if self.processes.len() != before {
            let processes = &self.processes;
            self.latest_by_pid
                .retain(|_, key| processes.contains_key(key));
        }
        // Under churn most of a tick's processes are hidden and leave the table within the
        // tick: what stays between ticks is what is exported, and a table still sized for the
        // tick's listing was the largest block the agent held at 1,000 exits a second (1.5 MB).
        // It is made again at the next tick's listing, at once (`observe_processes`).
        let kept = self.processes.len();
        crate::scratch::trim_map(&mut self.processes, kept);
        let kept = self.latest_by_pid.len();
        crate::scratch::trim_map(&mut self.latest_by_pid, kept);
        self.forget_cgroups(now, policy.retention);
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
    /// A process that ended within this tick below the threshold (all zones together) is not
    /// exported, not even in the tick it ended: short-lived processes would otherwise each
    /// become a series of their own. Its energy stays in its container, pod and VM, which were
    /// credited before this phase.
    fn hide_below_threshold(&mut self, min: MicroJoules) {
        for &i in &self.listed_ended {
            let Some(key) = self.keys.get(i) else {
                continue;
            };
            if let Some(p) = self.processes.get_mut(key) {
                if p.workload.ended_at.is_some() && p.workload.total_energy() < min.0 {
                    p.hidden = true;
                }
            }
        }
    }

    /// Keeps at most `max` ended processes exported, the most energetic. Beyond the cap, one
    /// listed this tick is hidden (its entry stays a tick more, see `prune`); one that ended
    /// earlier is forgotten, its series retiring as after the retention time.
    fn cap_ended(&mut self, max: usize) {
        let mut ended: Vec<(u64, ProcessKey)> = self
            .processes
            .iter()
            .filter(|(_, p)| p.workload.ended_at.is_some() && !p.hidden)
            .map(|(k, p)| (p.workload.total_energy(), *k))
            .collect();
        if ended.len() <= max {
            return;
        }
        ended.sort_unstable_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let tick = self.tick;
        for (_, key) in ended.iter().skip(max) {
            let listed = match self.processes.get_mut(key) {
                Some(p) if p.workload.seen_tick == tick => {
                    p.hidden = true;
                    true
                }
                _ => false,
            };
            if !listed {
                self.processes.remove(key);
            }
        }
    }

    /// Moves the hidden processes listed this tick to `held`, where those of the last tick
    /// expire: only a late report in the next tick can still name them.
    ///
    /// Every hidden process left is one listed this tick (the others went in `prune`), so
    /// this tick's listings of ended or hidden processes name them all.
    fn hold_hidden(&mut self) {
        self.held.clear();
        for &i in &self.listed_ended {
            let Some(key) = self.keys.get(i) else {
                continue;
            };
            if !self.processes.get(key).is_some_and(|p| p.hidden) {
                continue;
            }
            if let Some(p) = self.processes.remove(key) {
                self.held.insert(*key, p.last_cpu_time);
            }
        }
        let used = self.held.len();
        crate::scratch::trim_map(&mut self.held, used);
    }

    /// This tick's parts of hidden processes go to each zone's hidden energy, so that the
    /// exported process series and it add up to the active energy exactly.
    fn account_hidden(&mut self, interval: Duration) {
        for &i in &self.listed_ended {
            let hidden = self
                .keys
                .get(i)
                .and_then(|key| self.processes.get(key))
                .is_some_and(|p| p.hidden);
            if !hidden {
                continue;
            }
            for (z, parts) in &self.tick_energy {
                let part = parts.get(i).copied().unwrap_or(0);
                if let Some(zone) = self.zones.get_mut(*z) {
                    zone.hidden.energy += MicroJoules(part);
                    let watts = MicroJoules(part).over(interval);
                    zone.hidden.watts = Watts(zone.hidden.watts.0 + watts.0);
                }
            }
        }
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

//! Phase 2: per zone, the node's totals, the idle/active split, and the active energy divided
//! among the tick's processes by the zone's weights.

use std::sync::Arc;
use std::time::Duration;

use super::{Attributor, IdlePolicy};
use crate::domain::{DeviceInfo, PowerDomain, ZoneMeta};
use crate::energy::{ProcessShare, ZoneEnergy, ZoneWeights};
use crate::snapshot::ZoneValue;
use crate::units::{MicroJoules, Watts};

pub(super) struct NodeZoneState {
    pub(super) domain: PowerDomain,
    pub(super) zone: Arc<str>,
    pub(super) path: Arc<str>,
    pub(super) meta: Arc<ZoneMeta>,
    pub(super) device: Option<Arc<DeviceInfo>>,
    pub(super) total: ZoneValue,
    pub(super) active: ZoneValue,
    pub(super) idle: ZoneValue,
    pub(super) unattributed: MicroJoules,
    pub(super) hidden: ZoneValue,
    pub(super) baseline: Option<Watts>,
}

impl Attributor {
    /// The index of the zone `energy` belongs to; zones are told apart by domain and name.
    fn zone_index(&mut self, energy: &ZoneEnergy) -> usize {
        let domain = energy.meta.domain;
        if let Some(i) = self
            .zones
            .iter()
            .position(|z| z.domain == domain && z.zone == energy.zone)
        {
            return i;
        }
        self.zones.push(NodeZoneState {
            domain,
            zone: energy.zone.clone(),
            path: energy.path.clone(),
            meta: energy.meta.clone(),
            device: energy.device.clone(),
            total: ZoneValue::default(),
            active: ZoneValue::default(),
            idle: ZoneValue::default(),
            unattributed: MicroJoules::ZERO,
            hidden: ZoneValue::default(),
            baseline: None,
        });
        self.zones.len() - 1
    }

    /// Splits a zone's energy into (idle, active) under the configured policy, learning the
    /// measured baseline on the way. A zone whose meter leaves idle out is all active; a zone
    /// whose meter reports its device's idle (GPUs) uses that, capped at the energy.
    fn idle_active(
        &mut self,
        zone: usize,
        energy: MicroJoules,
        device_idle: Option<MicroJoules>,
        ratio: f64,
        interval: Duration,
    ) -> (MicroJoules, MicroJoules) {
        if !self.zones[zone].meta.includes_idle {
            return (MicroJoules::ZERO, energy);
        }
        if let Some(idle) = device_idle {
            let idle = idle.min(energy);
            return (idle, energy - idle);
        }
        let by_ratio = || {
            let idle = MicroJoules(((1.0 - ratio) * energy.0 as f64).round() as u64).min(energy);
            (idle, energy - idle)
        };
        match self.config.idle {
            IdlePolicy::Ratio => by_ratio(),
            IdlePolicy::Baseline {
                configured,
                low_usage_ratio,
            } => {
                let baseline = match configured {
                    Some(w) => Some(w),
                    None => {
                        let state = &mut self.zones[zone];
                        if ratio <= low_usage_ratio && interval > Duration::ZERO {
                            let power = energy.over(interval);
                            if state.baseline.is_none_or(|b| power.0 < b.0) {
                                state.baseline = Some(power);
                            }
                        }
                        state.baseline
                    }
                };
                match baseline {
                    Some(w) => {
                        let idle = w.during(interval).min(energy);
                        (idle, energy - idle)
                    }
                    None => by_ratio(),
                }
            }
        }
    }

    /// Node zone totals for this tick, and each zone's active energy split among the processes
    /// listed in `keys` (into `tick_energy`). Watts describe this interval: a zone without
    /// energy this tick (a failed read, a dropped sample) shows 0 W at every level alike.
    pub(super) fn attribute_zones(
        &mut self,
        energies: Option<&[ZoneEnergy]>,
        ratio: f64,
        interval: Duration,
    ) {
        let zone_count_before = self.zones.len();
        let mut tick_energy = std::mem::take(&mut self.tick_energy);
        let mut used = 0;
        for state in &mut self.zones {
            for value in [
                &mut state.total,
                &mut state.active,
                &mut state.idle,
                &mut state.hidden,
            ] {
                value.watts = Watts(0.0);
            }
        }
        for energy in energies.unwrap_or_default() {
            let z = self.zone_index(energy);
            if !Arc::ptr_eq(&self.zones[z].meta, &energy.meta) {
                self.zones[z].meta = energy.meta.clone();
            }
            let (idle, active) = self.idle_active(z, energy.energy, energy.idle, ratio, interval);
            let state = &mut self.zones[z];
            state.path = energy.path.clone();
            if state.device != energy.device {
                state.device = energy.device.clone();
            }
            state.total.energy += energy.energy;
            state.total.watts = energy.energy.over(interval);
            state.idle.energy += idle;
            state.idle.watts = idle.over(interval);
            state.active.energy += active;
            state.active.watts = active.over(interval);
            if tick_energy.len() <= used {
                tick_energy.push((z, Vec::new()));
            }
            let Some(slot) = tick_energy.get_mut(used) else {
                continue;
            };
            slot.0 = z;
            let weights = match &energy.weights {
                ZoneWeights::CpuTime => &self.weights,
                ZoneWeights::Shares(shares) => {
                    self.fill_share_weights(shares);
                    &self.share_weights
                }
            };
            if !self.splitter.split(active.0, weights, &mut slot.1) {
                self.zones[z].unattributed += active;
            }
            used += 1;
        }
        tick_energy.truncate(used);
        self.tick_energy = tick_energy;
        let zone_count = self.zones.len();
        if zone_count != zone_count_before {
            for entry in self.processes.values_mut() {
                entry
                    .workload
                    .zones
                    .resize(zone_count, ZoneValue::default());
            }
        }
    }

    /// Aligns a meter's per-pid shares with this tick's process list. A pid listed twice (an
    /// exit record beside a reused pid's new process) gets its share once, on the running
    /// process if there is one; pids the usage source did not list get nothing, so their
    /// share is divided among the others in proportion (or, with none left, unattributed).
    fn fill_share_weights(&mut self, shares: &[ProcessShare]) {
        // Remainders (after the processes in `weights`) have no pid: they take no share.
        self.share_weights.clear();
        self.share_weights.resize(self.weights.len(), 0);
        let mut wanted: super::FastMap<u32, u64> = super::FastMap::default();
        for share in shares {
            let w = wanted.entry(share.pid).or_default();
            *w = w.saturating_add(share.weight);
        }
        // pid -> (index chosen, whether that process is running)
        let mut chosen: super::FastMap<u32, (usize, bool)> = super::FastMap::default();
        for (i, key) in self.keys.iter().enumerate() {
            if !wanted.contains_key(&key.pid) {
                continue;
            }
            let running = self
                .processes
                .get(key)
                .is_some_and(|p| p.workload.ended_at.is_none());
            match chosen.get(&key.pid) {
                Some((_, true)) => {}
                Some((_, false)) if !running => {}
                _ => {
                    chosen.insert(key.pid, (i, running));
                }
            }
        }
        for (pid, (i, _)) in chosen {
            if let (Some(slot), Some(w)) = (self.share_weights.get_mut(i), wanted.get(&pid)) {
                *slot = *w;
            }
        }
    }
}

//! Phase 5: the immutable snapshot of the tick.

use std::time::Duration;

use super::{Attributor, IdlePolicy};
use crate::snapshot::{
    ContainerPower, IdlePolicyState, NodeZone, PodPower, PowerSnapshot, ProcessPower, VmPower,
    ZoneValue, ZoneValues,
};

impl Attributor {
    pub(super) fn snapshot(&mut self, usage_ratio: f64, interval: Duration) -> PowerSnapshot {
        let zone_count = self.zones.len();
        // Sized once, in the list handed back by `recycle` if there is one: a filtered collect
        // grows by doubling and copies what it holds at each growth; with 1,060 processes the
        // last growth copied 1,024 entries of 136 bytes (~140 KB) a tick.
        let mut visible = std::mem::take(&mut self.spare_processes);
        visible.clear();
        visible.reserve(self.processes.len());
        let padded = |zones: &ZoneValues| {
            let mut z = zones.clone();
            z.resize(zone_count, ZoneValue::default());
            z
        };
        PowerSnapshot {
            tick: self.tick,
            interval,
            usage_ratio,
            zones: self
                .zones
                .iter()
                .map(|z| NodeZone {
                    zone: z.zone.clone(),
                    path: z.path.clone(),
                    meta: z.meta.clone(),
                    device: z.device.clone(),
                    total: z.total,
                    active: z.active,
                    idle: z.idle,
                    unattributed: z.unattributed,
                    hidden: z.hidden,
                })
                .collect(),
            idle_policy: match &self.config.idle {
                IdlePolicy::Ratio => IdlePolicyState::Ratio,
                IdlePolicy::Baseline { configured, .. } => IdlePolicyState::Baseline {
                    configured: configured.is_some(),
                    watts: self
                        .zones
                        .iter()
                        .map(|z| {
                            z.meta
                                .includes_idle
                                .then(|| configured.or(z.baseline))
                                .flatten()
                        })
                        .collect(),
                },
            },
            processes: {
                visible.extend(
                    self.processes
                        .iter()
                        .filter(|(_, p)| !p.hidden)
                        .map(|(key, p)| ProcessPower {
                            key: *key,
                            info: p.info.clone(),
                            state: p.workload.state(),
                            cpu_time: p.workload.cpu_time,
                            zones: padded(&p.workload.zones),
                        }),
                );
                visible
            },
            containers: self
                .containers
                .values()
                .map(|c| ContainerPower {
                    container: c.reference.joined.clone(),
                    state: c.state(),
                    cpu_time: c.cpu_time,
                    zones: padded(&c.zones),
                })
                .collect(),
            pods: self
                .pods
                .values()
                .map(|p| PodPower {
                    pod: p.reference.clone(),
                    state: p.state(),
                    zones: padded(&p.zones),
                })
                .collect(),
            vms: self
                .vms
                .values()
                .map(|v| VmPower {
                    vm: v.reference.joined.clone(),
                    state: v.state(),
                    zones: padded(&v.zones),
                })
                .collect(),
            features: None,
            platform: Vec::new(),
        }
    }
}

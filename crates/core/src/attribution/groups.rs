//! Phase 3: each process's share of this tick credited to it, and rolled up: container = Σ its
//! processes, pod = Σ its containers, VM = Σ its hypervisor processes. Group names are joined
//! from the identity catalogue here, so a name learnt late shows at the next tick.

use std::sync::Arc;
use std::time::Duration;

use super::{zero_watts, Attributor, FastMap, Workload};
use crate::catalogue::CatalogueView;
use crate::snapshot::ZoneValue;
use crate::units::{MicroJoules, Watts};
use crate::workload::{ContainerId, ContainerRef, PodRef, VmId, VmRef, WorkloadIdentity};

/// A container group: the ids its processes carry, and the names joined to them.
pub(super) struct ContainerGroup {
    pub(super) ids: Arc<ContainerId>,
    pub(super) joined: Arc<ContainerRef>,
}

/// A VM group: the ids its processes carry, and the name joined to them.
pub(super) struct VmGroup {
    pub(super) ids: Arc<VmId>,
    pub(super) joined: Arc<VmRef>,
}

/// This tick's energy of one group's members.
struct Sum {
    energy: smallvec::SmallVec<[MicroJoules; 4]>,
    cpu: Duration,
    all_ended: bool,
}

impl Default for Sum {
    fn default() -> Self {
        Sum {
            energy: smallvec::SmallVec::new(),
            cpu: Duration::ZERO,
            all_ended: true,
        }
    }
}

impl Sum {
    fn add(&mut self, energy: &[MicroJoules], cpu: Duration, ended: bool) {
        if self.energy.len() < energy.len() {
            self.energy.resize(energy.len(), MicroJoules::ZERO);
        }
        for (total, part) in self.energy.iter_mut().zip(energy) {
            *total += *part;
        }
        self.cpu += cpu;
        self.all_ended &= ended;
    }
}

/// A group's sum gathered under the address of the shared id its processes carry: the id
/// string is then hashed once per group per tick, not once per member.
struct GroupSum<R> {
    ids: Arc<R>,
    sum: Sum,
}

type SumsByRef<R> = FastMap<usize, GroupSum<R>>;

#[derive(Default)]
pub(super) struct GroupSums {
    containers: SumsByRef<ContainerId>,
    vms: SumsByRef<VmId>,
    /// Pods are summed from their containers' sums, keyed by pod id.
    pods: FastMap<String, Sum>,
}

fn gather<R>(
    sums: &mut SumsByRef<R>,
    ids: &Arc<R>,
    energy: &[MicroJoules],
    cpu: Duration,
    ended: bool,
) {
    sums.entry(Arc::as_ptr(ids) as usize)
        .or_insert_with(|| GroupSum {
            ids: ids.clone(),
            sum: Sum::default(),
        })
        .sum
        .add(energy, cpu, ended);
}

impl GroupSums {
    /// Adds an ended member's part of this tick (a remainder of ended processes) to its
    /// workload's groups.
    pub(super) fn gather_ended(
        &mut self,
        workload: &WorkloadIdentity,
        energy: &[MicroJoules],
        cpu: Duration,
    ) {
        if let Some(container) = &workload.container {
            gather(&mut self.containers, container, energy, cpu, true);
        }
        if let Some(vm) = &workload.vm {
            gather(&mut self.vms, vm, energy, cpu, true);
        }
    }
}

impl Attributor {
    /// Credits every listed process with its parts of this tick's zones, then the groups.
    pub(super) fn credit_and_roll_up(&mut self, interval: Duration) {
        let tick = self.tick;
        let zone_count = self.zones.len();
        let mut sums = std::mem::take(&mut self.group_sums);
        let mut this_tick = vec![MicroJoules::ZERO; zone_count];
        self.listed_ended.clear();
        for (i, key) in self.keys.iter().enumerate() {
            let Some(entry) = self.processes.get_mut(key) else {
                continue;
            };
            entry
                .workload
                .zones
                .resize(zone_count, ZoneValue::default());
            this_tick.iter_mut().for_each(|e| *e = MicroJoules::ZERO);
            // A key can be listed twice in one snapshot (an exit record beside the live
            // entry): the first listing restarts this tick's power, later ones add to it.
            if entry.energy_tick != tick {
                entry.energy_tick = tick;
                zero_watts(&mut entry.workload.zones);
            }
            for (z, parts) in &self.tick_energy {
                let part = MicroJoules(parts.get(i).copied().unwrap_or(0));
                if let (Some(slot), Some(value)) =
                    (this_tick.get_mut(*z), entry.workload.zones.get_mut(*z))
                {
                    *slot = part;
                    value.energy += part;
                    value.watts = Watts(value.watts.0 + part.over(interval).0);
                }
            }
            let cpu_delta = Duration::from_nanos(self.weights.get(i).copied().unwrap_or(0));
            let ended = entry.workload.ended_at.is_some();
            if ended || entry.hidden {
                self.listed_ended.push(i);
            }
            let identity = &entry.info.workload;
            if let Some(container) = &identity.container {
                gather(
                    &mut sums.containers,
                    container,
                    &this_tick,
                    cpu_delta,
                    ended,
                );
            }
            if let Some(vm) = &identity.vm {
                gather(&mut sums.vms, vm, &this_tick, cpu_delta, ended);
            }
        }

        self.credit_remainders(&mut sums, interval);

        let catalogue = self.catalogue.clone();
        let generation = catalogue.generation();
        let view = catalogue.view();
        if self.joined_generation != Some(generation) {
            self.rejoin_all(&view);
            self.joined_generation = Some(generation);
        }
        let at = (interval, tick);
        for (_, GroupSum { ids, sum }) in sums.containers.drain() {
            let group = self.containers.entry(ids.id.clone()).or_insert_with(|| {
                let joined = join_container(&ids, &view, None, &self.pods);
                Workload::new(ContainerGroup { ids, joined })
            });
            add_tick(group, &sum, at);
            if let Some(pod) = &group.reference.joined.pod {
                sums.pods.entry(pod.id.clone()).or_default().add(
                    &sum.energy,
                    sum.cpu,
                    sum.all_ended,
                );
            }
        }
        for (id, sum) in sums.pods.drain() {
            let group = self
                .pods
                .entry(id)
                .or_insert_with_key(|id| Workload::new(join_pod(id, &view, None)));
            add_tick(group, &sum, at);
        }
        for (_, GroupSum { ids, sum }) in sums.vms.drain() {
            let group = self.vms.entry(ids.id.clone()).or_insert_with(|| {
                let joined = join_vm(&ids, &view, None);
                Workload::new(VmGroup { ids, joined })
            });
            add_tick(group, &sum, at);
        }
        drop(view);
        self.group_sums = sums;
    }

    /// Joins every known group's names again after the catalogue changed. A name the
    /// catalogue no longer has (a pod deleted from the informer's view) is kept until the
    /// group's series retire.
    fn rejoin_all(&mut self, view: &CatalogueView<'_>) {
        for (id, pod) in self.pods.iter_mut() {
            let joined = join_pod(id, view, Some(&pod.reference));
            if joined != pod.reference {
                pod.reference = joined;
            }
        }
        for container in self.containers.values_mut() {
            let group = &mut container.reference;
            let joined = join_container(&group.ids, view, Some(&group.joined), &self.pods);
            if joined != group.joined {
                group.joined = joined;
            }
        }
        for vm in self.vms.values_mut() {
            let group = &mut vm.reference;
            let joined = join_vm(&group.ids, view, Some(&group.joined));
            if joined != group.joined {
                group.joined = joined;
            }
        }
    }
}

fn join_pod(id: &str, view: &CatalogueView<'_>, previous: Option<&Arc<PodRef>>) -> Arc<PodRef> {
    let (name, namespace) = match (view.pod(id), previous) {
        (Some(names), _) => (names.name.clone(), names.namespace.clone()),
        (None, Some(previous)) => return previous.clone(),
        (None, None) => (String::new(), String::new()),
    };
    if let Some(previous) = previous.filter(|p| p.name == name && p.namespace == namespace) {
        return previous.clone();
    }
    Arc::new(PodRef {
        id: id.to_string(),
        name,
        namespace,
    })
}

/// The container's names, and its pod's (shared with the pod group when it exists; the pod
/// group itself is made when the pod is first credited).
fn join_container(
    ids: &ContainerId,
    view: &CatalogueView<'_>,
    previous: Option<&Arc<ContainerRef>>,
    pods: &FastMap<String, Workload<Arc<PodRef>>>,
) -> Arc<ContainerRef> {
    let names = view.container(&ids.id);
    let name = match (names, previous) {
        (Some(n), _) if !n.name.is_empty() => n.name.clone(),
        (_, Some(p)) => p.name.clone(),
        _ => String::new(),
    };
    let pod_id = names
        .and_then(|n| n.pod_id.clone())
        .or_else(|| ids.pod_id.clone())
        .or_else(|| previous.and_then(|p| p.pod.as_ref().map(|pod| pod.id.clone())));
    let pod = pod_id.map(|pod_id| match pods.get(&pod_id) {
        Some(group) => group.reference.clone(),
        None => join_pod(&pod_id, view, None),
    });
    let joined = ContainerRef {
        id: ids.id.clone(),
        name,
        runtime: ids.runtime,
        pod,
    };
    match previous {
        Some(p) if **p == joined => p.clone(),
        _ => Arc::new(joined),
    }
}

fn join_vm(ids: &VmId, view: &CatalogueView<'_>, previous: Option<&Arc<VmRef>>) -> Arc<VmRef> {
    let name = match (view.vm_name(&ids.id), previous) {
        (Some(name), _) => name.to_string(),
        (None, Some(p)) => p.name.clone(),
        (None, None) => String::new(),
    };
    let joined = VmRef {
        id: ids.id.clone(),
        name,
        hypervisor: ids.hypervisor.clone(),
    };
    match previous {
        Some(p) if **p == joined => p.clone(),
        _ => Arc::new(joined),
    }
}

/// Adds one tick's gathered energy to a group workload (container, pod, VM). A group is
/// running while any of its members is.
fn add_tick<R>(w: &mut Workload<R>, sum: &Sum, (interval, tick): (Duration, u64)) {
    let (energy, cpu_delta, members_ended) = (&sum.energy[..], sum.cpu, sum.all_ended);
    if w.seen_tick != tick {
        // First members seen this tick: restart the per-tick power sums.
        w.zones.resize(energy.len(), ZoneValue::default());
        zero_watts(&mut w.zones);
        w.seen_tick = tick;
        if !members_ended {
            w.ended_at = None;
        }
    } else if !members_ended {
        w.ended_at = None;
    }
    if w.zones.len() < energy.len() {
        w.zones.resize(energy.len(), ZoneValue::default());
    }
    for (value, part) in w.zones.iter_mut().zip(energy) {
        value.energy += *part;
        value.watts = Watts(value.watts.0 + part.over(interval).0);
    }
    w.cpu_time += cpu_delta;
}

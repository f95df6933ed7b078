//! The workload families: processes, containers, pods and VMs. A workload's labels recur in
//! four or five samples of a scrape (each cpu-family zone in the joules and the watts family,
//! and a process's or container's CPU time), so they are escaped and rendered once, in a first
//! pass over the workloads, and copied into each sample. With a thousand processes this halves
//! the encode: the same values were scanned for escapes five times, and each process's
//! description read in three passes.

use std::ops::Range;

use kepler_core::{PowerSnapshot, ZoneValue};

use crate::encode::{in_cpu_families, MetricWriter, RenderedPairs, SampleValue};
use crate::level::{Level, MetricsLevel};
use crate::registry::{self as r, Desc};

/// Where one workload's pairs lie in the rendered buffer: those its descriptors put before
/// `zone`, and those after it. A process's `before` holds `pid` … `type`, `state`, then
/// `container_id` and `vm_id`, with `state` at `state`, which its CPU-time family leaves out.
struct Pairs {
    before: Range<usize>,
    after: Range<usize>,
}

/// Bytes a workload's pairs take, about: enough that the buffer rarely grows.
const PAIRS_BYTES: usize = 128;

pub(crate) fn encode_workloads(w: &mut MetricWriter<'_>, s: &PowerSnapshot, levels: MetricsLevel) {
    let workloads = s.processes.len() + s.containers.len() + s.pods.len() + s.vms.len();
    let mut rendered = RenderedPairs::with_capacity(workloads * PAIRS_BYTES);
    // `,zone="…"` of each of the snapshot's zones, by index; `None` for zones outside the cpu
    // families.
    let zones: Vec<Option<Range<usize>>> = s
        .zones
        .iter()
        .map(|z| {
            in_cpu_families(z).then(|| {
                let start = rendered.len();
                rendered.push("zone", &z.zone);
                start..rendered.len()
            })
        })
        .collect();
    let zones_end = rendered.len();
    let mut families = Families { w, rendered, zones };
    if levels.contains(Level::Process) {
        families.processes(s);
        families.rendered.truncate(zones_end);
    }
    if levels.contains(Level::Container) {
        families.containers(s);
        families.rendered.truncate(zones_end);
    }
    if levels.contains(Level::Pod) {
        families.pods(s);
        families.rendered.truncate(zones_end);
    }
    if levels.contains(Level::Vm) {
        families.vms(s);
    }
}

struct Families<'w, 'a> {
    w: &'w mut MetricWriter<'a>,
    rendered: RenderedPairs,
    zones: Vec<Option<Range<usize>>>,
}

impl Families<'_, '_> {
    /// Renders one workload's pairs: `before` (name, value) pairs, then `after` ones.
    fn render(&mut self, before: &[(&str, &str)], after: &[(&str, &str)]) -> Pairs {
        let start = self.rendered.len();
        for (name, value) in before {
            self.rendered.push(name, value);
        }
        let middle = self.rendered.len();
        for (name, value) in after {
            self.rendered.push(name, value);
        }
        Pairs {
            before: start..middle,
            after: middle..self.rendered.len(),
        }
    }

    /// One sample per workload and cpu-family zone; `zones` gives each workload's values, in
    /// the order of `pairs`.
    fn zone_family<'s, const N: usize, V: SampleValue>(
        &mut self,
        desc: &'static Desc<N>,
        pairs: &[Pairs],
        zones: impl Iterator<Item = &'s [ZoneValue]>,
        value: impl Fn(&ZoneValue) -> V,
    ) {
        let mut f = self.w.family(desc);
        for (at, values) in pairs.iter().zip(zones) {
            // Zones and values are parallel; a shorter list simply ends the pairs.
            for (zone, v) in self.zones.iter().zip(values) {
                if let Some(zone) = zone {
                    f.sample_rendered(
                        &[
                            self.rendered.get(at.before.clone()),
                            self.rendered.get(zone.clone()),
                            self.rendered.get(at.after.clone()),
                        ],
                        value(v),
                    );
                }
            }
        }
    }

    fn processes(&mut self, s: &PowerSnapshot) {
        let mut pid = itoa::Buffer::new();
        // Where each process's `state` pair lies.
        let mut states = Vec::with_capacity(s.processes.len());
        let pairs: Vec<Pairs> = s
            .processes
            .iter()
            .map(|p| {
                let info = &p.info;
                let workload = &info.workload;
                let head = self.render(
                    &[
                        ("pid", pid.format(p.key.pid)),
                        ("comm", &info.comm),
                        ("exe", &info.exe),
                        ("type", workload.process_type.as_str()),
                    ],
                    &[("state", p.state.as_str())],
                );
                let ids = self.render(
                    &[],
                    &[
                        (
                            "container_id",
                            workload.container.as_ref().map_or("", |c| &c.id),
                        ),
                        ("vm_id", workload.vm.as_ref().map_or("", |v| &v.id)),
                    ],
                );
                states.push(head.after.clone());
                Pairs {
                    before: head.before.start..ids.after.end,
                    after: ids.after.end..ids.after.end,
                }
            })
            .collect();
        let zones = || s.processes.iter().map(|p| &p.zones[..]);
        self.zone_family(&r::PROCESS_CPU_JOULES, &pairs, zones(), |v| v.energy);
        self.zone_family(&r::PROCESS_CPU_WATTS, &pairs, zones(), |v| v.watts);
        let mut f = self.w.family(&r::PROCESS_CPU_SECONDS);
        for ((p, at), state) in s.processes.iter().zip(&pairs).zip(&states) {
            f.sample_rendered(
                &[
                    self.rendered.get(at.before.start..state.start),
                    self.rendered.get(state.end..at.before.end),
                ],
                p.cpu_time,
            );
        }
    }

    fn containers(&mut self, s: &PowerSnapshot) {
        let pairs: Vec<Pairs> = s
            .containers
            .iter()
            .map(|c| {
                let r = &c.container;
                self.render(
                    &[
                        ("container_id", &r.id),
                        ("container_name", &r.name),
                        ("runtime", r.runtime.as_str()),
                        ("state", c.state.as_str()),
                    ],
                    &[("pod_id", r.pod.as_ref().map_or("", |p| &p.id))],
                )
            })
            .collect();
        let zones = || s.containers.iter().map(|c| &c.zones[..]);
        self.zone_family(&r::CONTAINER_CPU_JOULES, &pairs, zones(), |v| v.energy);
        self.zone_family(&r::CONTAINER_CPU_WATTS, &pairs, zones(), |v| v.watts);
        let mut f = self.w.family(&r::CONTAINER_CPU_SECONDS);
        for (c, at) in s.containers.iter().zip(&pairs) {
            f.sample_rendered(
                &[self.rendered.get(at.before.start..at.after.end)],
                c.cpu_time,
            );
        }
    }

    fn pods(&mut self, s: &PowerSnapshot) {
        let pairs: Vec<Pairs> = s
            .pods
            .iter()
            .map(|p| {
                self.render(
                    &[
                        ("pod_id", &p.pod.id),
                        ("pod_name", &p.pod.name),
                        ("pod_namespace", &p.pod.namespace),
                        ("state", p.state.as_str()),
                    ],
                    &[],
                )
            })
            .collect();
        let zones = || s.pods.iter().map(|p| &p.zones[..]);
        self.zone_family(&r::POD_CPU_JOULES, &pairs, zones(), |v| v.energy);
        self.zone_family(&r::POD_CPU_WATTS, &pairs, zones(), |v| v.watts);
    }

    fn vms(&mut self, s: &PowerSnapshot) {
        let pairs: Vec<Pairs> = s
            .vms
            .iter()
            .map(|v| {
                self.render(
                    &[
                        ("vm_id", &v.vm.id),
                        ("vm_name", &v.vm.name),
                        ("hypervisor", &v.vm.hypervisor),
                        ("state", v.state.as_str()),
                    ],
                    &[],
                )
            })
            .collect();
        let zones = || s.vms.iter().map(|v| &v.zones[..]);
        self.zone_family(&r::VM_CPU_JOULES, &pairs, zones(), |v| v.energy);
        self.zone_family(&r::VM_CPU_WATTS, &pairs, zones(), |v| v.watts);
    }
}

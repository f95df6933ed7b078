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
/// `zone`, and those after it.
struct Pairs {
    before: Range<usize>,
    after: Range<usize>,
}

/// Bytes a workload's pairs take, about: enough that the buffer rarely grows.
const PAIRS_BYTES: usize = 128;

pub(crate) fn encode_workloads(w: &mut MetricWriter<'_>, s: &PowerSnapshot, levels: MetricsLevel) {
    let workloads = s.processes.len() + s.containers.len() + s.pods.len() + s.vms.len();
    // Allocated per encode on purpose: kept between scrapes, its ~140 KiB with a thousand
    // processes would count in the agent's RSS all the time (`SCRAPE=5 bench/churn_ab.sh ...
    // wakers 1000`: 12.1 MiB against 11.6–11.9), to spare ~2 page faults a second.
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
    let mut families = Families {
        w,
        zones_end: rendered.len(),
        rendered,
        zones,
    };
    if levels.contains(Level::Process) {
        families.processes(s);
        families.end_level();
    }
    if levels.contains(Level::Container) {
        families.containers(s);
        families.end_level();
    }
    if levels.contains(Level::Pod) {
        families.pods(s);
        families.end_level();
    }
    if levels.contains(Level::Vm) {
        families.vms(s);
        families.end_level();
    }
}

struct Families<'w, 'a> {
    w: &'w mut MetricWriter<'a>,
    rendered: RenderedPairs,
    zones: Vec<Option<Range<usize>>>,
    /// Where the zones' pairs end: each level's pairs are rendered from there.
    zones_end: usize,
}

impl Families<'_, '_> {
    /// Drops a level's pairs once its families are written.
    fn end_level(&mut self) {
        self.rendered.truncate(self.zones_end);
    }

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

    /// The joules and the watts family of workloads whose labels are four pairs and `zone`
    /// (pods, VMs).
    fn joules_and_watts<'s, T>(
        &mut self,
        families: (&'static Desc<5>, &'static Desc<5>),
        workloads: &'s [T],
        labels: impl Fn(&'s T) -> [(&'s str, &'s str); 4],
        zones: impl Fn(&'s T) -> &'s [ZoneValue],
    ) {
        let pairs: Vec<Pairs> = workloads
            .iter()
            .map(|w| self.render(&labels(w), &[]))
            .collect();
        self.zone_family(families.0, &pairs, workloads.iter().map(&zones), |v| {
            v.energy
        });
        self.zone_family(families.1, &pairs, workloads.iter().map(&zones), |v| {
            v.watts
        });
    }

    fn processes(&mut self, s: &PowerSnapshot) {
        let mut pid = itoa::Buffer::new();
        // Where each process's `state` pair lies: its CPU-time family leaves it out.
        let mut states = Vec::with_capacity(s.processes.len());
        let pairs: Vec<Pairs> = s
            .processes
            .iter()
            .map(|p| {
                let info = &p.info;
                let workload = &info.workload;
                let start = self.rendered.len();
                self.rendered.push("pid", pid.format(p.key.pid));
                self.rendered.push("comm", &info.comm);
                self.rendered.push("exe", &info.exe);
                self.rendered.push("type", workload.process_type.as_str());
                let state = self.rendered.len();
                self.rendered.push("state", p.state.as_str());
                states.push(state..self.rendered.len());
                let container_id = workload.container.as_ref().map_or("", |c| &c.id);
                self.rendered.push("container_id", container_id);
                self.rendered
                    .push("vm_id", workload.vm.as_ref().map_or("", |v| &v.id));
                let end = self.rendered.len();
                Pairs {
                    before: start..end,
                    after: end..end,
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
        let families = (&r::POD_CPU_JOULES, &r::POD_CPU_WATTS);
        self.joules_and_watts(
            families,
            &s.pods,
            |p| {
                [
                    ("pod_id", &p.pod.id),
                    ("pod_name", &p.pod.name),
                    ("pod_namespace", &p.pod.namespace),
                    ("state", p.state.as_str()),
                ]
            },
            |p| &p.zones,
        );
    }

    fn vms(&mut self, s: &PowerSnapshot) {
        let families = (&r::VM_CPU_JOULES, &r::VM_CPU_WATTS);
        self.joules_and_watts(
            families,
            &s.vms,
            |v| {
                [
                    ("vm_id", &v.vm.id),
                    ("vm_name", &v.vm.name),
                    ("hypervisor", &v.vm.hypervisor),
                    ("state", v.state.as_str()),
                ]
            },
            |v| &v.zones,
        );
    }
}

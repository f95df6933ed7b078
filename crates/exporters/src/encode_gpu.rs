//! The GPU families: GPU-domain zones of the snapshot, one series per device at node level,
//! and per workload the sum over the node's GPUs (upstream's workload GPU series have no
//! device label, so a workload on two GPUs is one series).

use kepler_core::{MicroJoules, NodeZone, PowerDomain, PowerSnapshot, Watts, ZoneValue};

use crate::encode::MetricWriter;
use crate::level::{Level, MetricsLevel};
use crate::registry::{self as r, Desc};

/// The labels of one device: from the device facts its meter attached, else what the zone
/// itself says (a GPU meter that knows no device facts still gets distinct series).
struct DeviceLabels<'a> {
    index: String,
    uuid: &'a str,
    name: &'a str,
    vendor: &'a str,
}

fn labels(z: &NodeZone) -> DeviceLabels<'_> {
    match &z.device {
        Some(d) => DeviceLabels {
            index: d.index.to_string(),
            uuid: &d.uuid,
            name: &d.name,
            vendor: &d.vendor,
        },
        None => DeviceLabels {
            index: z.zone.trim_start_matches("gpu").to_string(),
            uuid: &z.path,
            name: "",
            vendor: "",
        },
    }
}

fn gpu_zones(s: &PowerSnapshot) -> impl Iterator<Item = &NodeZone> {
    s.zones.iter().filter(|z| z.meta.domain == PowerDomain::Gpu)
}

/// A workload's energy and power summed over the GPU zones; `None` when it never used a GPU.
fn gpu_sum(s: &PowerSnapshot, values: &[ZoneValue]) -> Option<(MicroJoules, Watts)> {
    let mut energy = MicroJoules::ZERO;
    let mut watts = 0.0;
    for (_, v) in s
        .zones
        .iter()
        .zip(values)
        .filter(|(z, _)| z.meta.domain == PowerDomain::Gpu)
    {
        energy += v.energy;
        watts += v.watts.0;
    }
    (energy > MicroJoules::ZERO).then_some((energy, Watts(watts)))
}

pub(crate) fn encode_gpu(w: &mut MetricWriter<'_>, s: &PowerSnapshot, levels: MetricsLevel) {
    if gpu_zones(s).next().is_none() {
        return;
    }
    if levels.contains(Level::Node) {
        encode_node(w, s);
    }
    if levels.contains(Level::Process) {
        encode_processes(w, s);
    }
    if levels.contains(Level::Container) {
        encode_containers(w, s);
    }
    if levels.contains(Level::Pod) {
        encode_pods(w, s);
    }
}

fn node_family<V: crate::encode::SampleValue>(
    w: &mut MetricWriter<'_>,
    desc: &'static Desc<4>,
    s: &PowerSnapshot,
    value: impl Fn(&NodeZone) -> V,
) {
    let mut f = w.family(desc);
    for z in gpu_zones(s) {
        let l = labels(z);
        f.sample([&l.index, l.uuid, l.name, l.vendor], value(z));
    }
}

fn encode_node(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    node_family(w, &r::NODE_GPU_JOULES, s, |z| z.total.energy);
    node_family(w, &r::NODE_GPU_WATTS, s, |z| z.total.watts);
    node_family(w, &r::NODE_GPU_ACTIVE_JOULES, s, |z| z.active.energy);
    node_family(w, &r::NODE_GPU_ACTIVE_WATTS, s, |z| z.active.watts);
    node_family(w, &r::NODE_GPU_IDLE_JOULES, s, |z| z.idle.energy);
    node_family(w, &r::NODE_GPU_IDLE_WATTS, s, |z| z.idle.watts);
    let mut f = w.family(&r::NODE_GPU_INFO);
    for z in gpu_zones(s) {
        let l = labels(z);
        f.sample(
            [
                &l.index,
                l.uuid,
                l.name,
                l.vendor,
                &z.meta.meter,
                z.meta.provenance.as_str(),
            ],
            1u64,
        );
    }
}

fn encode_processes(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    let used: Vec<_> = s
        .processes
        .iter()
        .filter_map(|p| gpu_sum(s, &p.zones).map(|sum| (p, sum)))
        .collect();
    for (desc, joules) in [
        (&r::PROCESS_GPU_JOULES, true),
        (&r::PROCESS_GPU_WATTS, false),
    ] {
        let mut f = w.family(desc);
        let mut pid = itoa::Buffer::new();
        for (p, (energy, watts)) in &used {
            let info = &p.info;
            let labels = [
                pid.format(p.key.pid),
                &info.comm,
                &info.exe,
                info.workload.process_type.as_str(),
                p.state.as_str(),
                info.workload.container.as_ref().map_or("", |c| &c.id),
                info.workload.vm.as_ref().map_or("", |v| &v.id),
            ];
            if joules {
                f.sample(labels, *energy);
            } else {
                f.sample(labels, *watts);
            }
        }
    }
}

fn encode_containers(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    let used: Vec<_> = s
        .containers
        .iter()
        .filter_map(|c| gpu_sum(s, &c.zones).map(|sum| (c, sum)))
        .collect();
    for (desc, joules) in [
        (&r::CONTAINER_GPU_JOULES, true),
        (&r::CONTAINER_GPU_WATTS, false),
    ] {
        let mut f = w.family(desc);
        for (c, (energy, watts)) in &used {
            let r = &c.container;
            let labels = [
                &*r.id,
                &r.name,
                r.runtime.as_str(),
                c.state.as_str(),
                r.pod.as_ref().map_or("", |p| &p.id),
            ];
            if joules {
                f.sample(labels, *energy);
            } else {
                f.sample(labels, *watts);
            }
        }
    }
}

fn encode_pods(w: &mut MetricWriter<'_>, s: &PowerSnapshot) {
    let used: Vec<_> = s
        .pods
        .iter()
        .filter_map(|p| gpu_sum(s, &p.zones).map(|sum| (p, sum)))
        .collect();
    for (desc, joules) in [(&r::POD_GPU_JOULES, true), (&r::POD_GPU_WATTS, false)] {
        let mut f = w.family(desc);
        for (p, (energy, watts)) in &used {
            let labels = [&*p.pod.id, &p.pod.name, &p.pod.namespace, p.state.as_str()];
            if joules {
                f.sample(labels, *energy);
            } else {
                f.sample(labels, *watts);
            }
        }
    }
}

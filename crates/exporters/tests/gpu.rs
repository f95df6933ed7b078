//! GPU families: one series per device from GPU-domain zones and their device facts, workload
//! series summed over devices, and GPU zones kept out of the cpu families.

mod support;

use std::sync::Arc;

use kepler_core::{DeviceInfo, MicroJoules, NodeZone, PowerDomain, ZoneMeta, ZoneValue};
use kepler_exporters::{encode, Format, MetricsLevel};
use support::{context, snapshot, zv};

fn gpu_meta() -> Arc<ZoneMeta> {
    Arc::new(ZoneMeta {
        domain: PowerDomain::Gpu,
        ..ZoneMeta::measured("nvml")
    })
}

fn gpu_zone(index: u32, device: bool) -> NodeZone {
    let uuid = format!("GPU-{index}abc");
    NodeZone {
        zone: format!("gpu{index}").into(),
        path: uuid.clone().into(),
        meta: gpu_meta(),
        device: device.then(|| {
            Arc::new(DeviceInfo {
                index,
                uuid: uuid.into(),
                name: "NVIDIA H100 80GB HBM3".into(),
                vendor: "nvidia".into(),
            })
        }),
        total: zv(300_000_000, 60.0),
        active: zv(200_000_000, 40.0),
        idle: zv(100_000_000, 20.0),
        unattributed: MicroJoules(0),
        hidden: ZoneValue::default(),
    }
}

fn render(levels: MetricsLevel) -> String {
    let mut s = snapshot();
    s.zones.push(gpu_zone(0, true));
    s.zones.push(gpu_zone(1, false));
    // pid 42 (in container c0ffee of pod web-0) used both GPUs; pid 7 and the VM none.
    for (i, p) in s.processes.iter_mut().enumerate() {
        let (a, b) = if i == 0 {
            (zv(150_000_000, 30.0), zv(50_000_000, 10.0))
        } else {
            (zv(0, 0.0), zv(0, 0.0))
        };
        p.zones.push(a);
        p.zones.push(b);
    }
    for c in &mut s.containers {
        c.zones.push(zv(150_000_000, 30.0));
        c.zones.push(zv(50_000_000, 10.0));
    }
    for p in &mut s.pods {
        p.zones.push(zv(150_000_000, 30.0));
        p.zones.push(zv(50_000_000, 10.0));
    }
    let mut ctx = context();
    ctx.levels = levels;
    let mut out = Vec::new();
    encode(Some(&s), &ctx, Format::Text004, &mut out);
    String::from_utf8(out).unwrap()
}

#[test]
fn node_gpu_series_carry_device_labels() {
    let text = render(MetricsLevel::ALL);
    for line in [
        "# TYPE kepler_node_gpu_joules_total counter",
        "kepler_node_gpu_joules_total{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 300",
        "kepler_node_gpu_watts{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 60.0",
        "kepler_node_gpu_active_joules_total{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 200",
        "kepler_node_gpu_active_watts{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 40.0",
        "kepler_node_gpu_idle_joules_total{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 100",
        "kepler_node_gpu_idle_watts{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",node_name=\"node-1\"} 20.0",
        // Without device facts the zone's own name and path label the device.
        "kepler_node_gpu_watts{gpu=\"1\",gpu_uuid=\"GPU-1abc\",gpu_name=\"\",vendor=\"\",node_name=\"node-1\"} 60.0",
        "kepler_node_gpu_info{gpu=\"0\",gpu_uuid=\"GPU-0abc\",gpu_name=\"NVIDIA H100 80GB HBM3\",vendor=\"nvidia\",meter=\"nvml\",source=\"measured\",node_name=\"node-1\"} 1",
        // Workloads: summed over both GPUs, no zone label.
        "kepler_process_gpu_joules_total{pid=\"42\",comm=\"nginx\",exe=\"/usr/sbin/nginx\",type=\"container\",state=\"running\",container_id=\"c0ffee\",vm_id=\"\",node_name=\"node-1\"} 200",
        "kepler_process_gpu_watts{pid=\"42\",comm=\"nginx\",exe=\"/usr/sbin/nginx\",type=\"container\",state=\"running\",container_id=\"c0ffee\",vm_id=\"\",node_name=\"node-1\"} 40.0",
        "kepler_container_gpu_joules_total{container_id=\"c0ffee\",container_name=\"nginx\",runtime=\"containerd\",state=\"running\",pod_id=\"pod-uid-1\",node_name=\"node-1\"} 200",
        "kepler_container_gpu_watts{container_id=\"c0ffee\",container_name=\"nginx\",runtime=\"containerd\",state=\"running\",pod_id=\"pod-uid-1\",node_name=\"node-1\"} 40.0",
        "kepler_pod_gpu_joules_total{pod_id=\"pod-uid-1\",pod_name=\"web-0\",pod_namespace=\"default\",state=\"running\",node_name=\"node-1\"} 200",
        "kepler_pod_gpu_watts{pod_id=\"pod-uid-1\",pod_name=\"web-0\",pod_namespace=\"default\",state=\"running\",node_name=\"node-1\"} 40.0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    // Processes that never used a GPU have no GPU series; GPU zones stay out of cpu families.
    assert!(!text.contains("kepler_process_gpu_joules_total{pid=\"7\""));
    assert!(
        !text
            .lines()
            .any(|l| l.starts_with("kepler_") && l.contains("_cpu_") && l.contains("zone=\"gpu")),
        "{text}"
    );
}

#[test]
fn gpu_families_follow_the_levels() {
    let text = render(MetricsLevel::NONE.with(kepler_exporters::Level::Pod));
    assert!(!text.contains("kepler_node_gpu_watts"));
    assert!(!text.contains("kepler_process_gpu_watts"));
    assert!(text.contains("kepler_pod_gpu_watts"));
    let none = {
        let mut ctx = context();
        ctx.levels = MetricsLevel::ALL;
        let mut out = Vec::new();
        encode(Some(&snapshot()), &ctx, Format::Text004, &mut out);
        String::from_utf8(out).unwrap()
    };
    assert!(!none.contains("_gpu_"), "no GPU zone, no GPU family");
}

//! GPU meters through the agent's real sampler and the Prometheus encoder: the scripted GPU
//! backend behind the real `GpuMeter`, three devices (shared by two processes, used by one,
//! idle), and the exported GPU families.

mod scripted;

use std::sync::Arc;
use std::time::Duration;

use kepler_agent::sampler::Sampler;
use kepler_core::*;
use kepler_exporters::{encode, ExportContext, Format};
use kepler_meters::fake::{Clock, ManualClock};
use kepler_meters::gpu::fake::{FakeDevice, FakeGpu};
use kepler_meters::gpu::GpuMeter;
use scripted::{plain, ScriptedUsage};

fn device(watts: f64, energy: bool, processes: Vec<(u32, Option<u64>)>) -> FakeDevice {
    FakeDevice {
        watts,
        energy,
        processes,
    }
}

#[test]
fn fake_gpus_through_the_sampler_and_the_encoder() {
    let clock = Arc::new(ManualClock::new());
    let backend = FakeGpu::with_clock(
        vec![
            // Shared: utilisation 3:1, energy counter.
            device(200.0, true, vec![(2, Some(30)), (3, Some(10))]),
            // A lone process takes the whole device, utilisation or not.
            device(100.0, false, vec![(3, None)]),
            // No compute process: its power is its idle power.
            device(40.0, false, vec![]),
        ],
        clock.clone(),
    );
    let meters: Vec<Box<dyn PowerMeter>> =
        vec![Box::new(GpuMeter::new("fake-gpu", Box::new(backend), None))];
    let health = Health::new();
    let tick_clock = clock.clone();
    let mut sampler = Sampler::new(
        // pid 1 burns CPU only; pids 2 and 3 use the GPUs and little CPU.
        Box::new(ScriptedUsage::new(vec![
            (1, 900, plain(1)),
            (2, 10, plain(2)),
            (3, 10, plain(3)),
        ])),
        meters,
        Attributor::new(AttributionConfig::default()),
        &health,
    )
    .with_clock(Box::new(move || tick_clock.now()));

    let mut last = None;
    for _ in 0..4 {
        last = Some(sampler.tick().unwrap());
        clock.advance(Duration::from_secs(2));
    }
    let s = last.unwrap();
    assert_eq!(s.zones.len(), 3);
    let zone = |name: &str| s.zones.iter().position(|z| &*z.zone == name).unwrap();
    let energy = |pid: u32, z: usize| {
        s.processes
            .iter()
            .find(|p| p.key.pid == pid)
            .map(|p| p.zones[z].energy.0)
            .unwrap()
    };
    for (z, node) in s.zones.iter().enumerate() {
        assert_eq!(node.meta.domain, PowerDomain::Gpu);
        assert_eq!(node.active.energy + node.idle.energy, node.total.energy);
        let procs: u64 = s.processes.iter().map(|p| p.zones[z].energy.0).sum();
        assert_eq!(
            procs + node.unattributed.0,
            node.active.energy.0,
            "{}",
            node.zone
        );
        // CPU time never buys GPU energy.
        assert_eq!(energy(1, z), 0, "{}", node.zone);
    }
    // Three intervals of 2 s.
    let (g0, g1, g2) = (zone("gpu0"), zone("gpu1"), zone("gpu2"));
    assert_eq!(s.zones[g0].total.energy, MicroJoules(1_200_000_000));
    assert_eq!(s.zones[g0].idle.energy, MicroJoules(0), "never seen idle");
    assert_eq!(energy(2, g0), 900_000_000);
    assert_eq!(energy(3, g0), 300_000_000);
    assert_eq!(energy(3, g1), s.zones[g1].total.energy.0);
    assert_eq!(s.zones[g2].idle.energy, s.zones[g2].total.energy);
    assert_eq!(s.zones[g2].idle.watts, Watts(40.0));
    assert_eq!(s.zones[g2].active.energy, MicroJoules(0));

    let mut ctx = ExportContext::new("node-1");
    ctx.health = Arc::new(health);
    let mut out = Vec::new();
    encode(Some(&s), &ctx, Format::Text004, &mut out);
    let text = String::from_utf8(out).unwrap();
    for line in [
        "kepler_node_gpu_joules_total{gpu=\"0\",gpu_uuid=\"GPU-fake-0\",gpu_name=\"Fake GPU\",vendor=\"fake\",node_name=\"node-1\"} 1200",
        "kepler_node_gpu_idle_watts{gpu=\"2\",gpu_uuid=\"GPU-fake-2\",gpu_name=\"Fake GPU\",vendor=\"fake\",node_name=\"node-1\"} 40.0",
        "kepler_node_gpu_info{gpu=\"1\",gpu_uuid=\"GPU-fake-1\",gpu_name=\"Fake GPU\",vendor=\"fake\",meter=\"fake-gpu\",source=\"synthetic\",node_name=\"node-1\"} 1",
        // pid 3: a quarter of gpu0 (300 J) and all of gpu1 (600 J).
        "kepler_process_gpu_joules_total{pid=\"3\",comm=\"p3\",exe=\"\",type=\"regular\",state=\"running\",container_id=\"\",vm_id=\"\",node_name=\"node-1\"} 900",
        "kepler_process_gpu_watts{pid=\"2\",comm=\"p2\",exe=\"\",type=\"regular\",state=\"running\",container_id=\"\",vm_id=\"\",node_name=\"node-1\"} 150.0",
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line}\n{text}");
    }
    assert!(!text.contains("kepler_process_gpu_joules_total{pid=\"1\""));
    assert!(
        !text.contains("zone=\"gpu"),
        "GPU zones stay out of the cpu families"
    );
    assert!(text.contains("kepler_agent_component_up{component=\"meter\",name=\"fake-gpu\",node_name=\"node-1\"} 1"), "{text}");
}

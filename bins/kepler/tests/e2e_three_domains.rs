//! The real agent with a meter in every power domain at once: RAPL on a simulated powercap
//! tree (cpu), Redfish against a fake BMC on loopback (platform) and scripted GPUs (gpu), with
//! real processes. Every domain's zones are exported by their meter, and energy is conserved
//! per zone in every domain: the processes hold each zone's active energy.

#[path = "../../../crates/meters/tests/support/bmc.rs"]
#[allow(dead_code)]
mod bmc;
mod common;

use std::time::{Duration, Instant};

use common::*;

#[test]
fn rapl_redfish_and_a_gpu_at_once_conserve_energy_per_zone() {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(
        sysfs.path(),
        &[
            ("package-0", 40.0, 262_143_328_850),
            ("dram", 8.0, 65_712_999_613),
        ],
    );
    let fake_bmc = bmc::FakeBmc::start(true);
    let dir = tempfile::tempdir().unwrap();
    let bmc_file = dir.path().join("bmc.yaml");
    std::fs::write(&bmc_file, fake_bmc.bmc_file("node-a")).unwrap();
    let gpu_user = spawn_shell("exec sleep 60");
    let pid = gpu_user.pid();
    let (_agent, port) = start_agent_with_config(
        dir.path(),
        &format!(
            // procfs lists the sleeping GPU user every tick (eBPF only lists what ran).
            "ebpf:\n  enabled: false\n\
             experimental:\n  platform:\n    redfish:\n      enabled: true\n      nodeName: node-a\n\
             \x20     configFile: {}\n      httpTimeout: 1s\n\
             dev:\n  fake-gpu:\n    enabled: true\n    devices:\n\
             \x20     - watts: 90\n        processes: [{{pid: {pid}}}]\n",
            bmc_file.display()
        ),
        &["--host.sysfs", sysfs.path().to_str().unwrap()],
    );
    wait_ready(port, Duration::from_secs(30));

    // Wait until every domain has had an interval: the BMC is polled beside the ticks.
    let started = Instant::now();
    let samples = loop {
        let samples = scrape(port);
        let has = |zone: &str| {
            select(&samples, "kepler_node_cpu_watts", &[("zone", zone)])
                .first()
                .is_some_and(|s| s.value > 0.0)
        };
        let gpu = select(&samples, "kepler_node_gpu_watts", &[("gpu", "0")])
            .first()
            .is_some_and(|s| s.value > 0.0);
        if has("package") && has("dram") && has("platform") && gpu {
            break samples;
        }
        assert!(
            started.elapsed() < Duration::from_secs(40),
            "not every domain has power after 40 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    };

    for (zone, meter) in [
        ("package", "rapl"),
        ("dram", "rapl"),
        ("platform", "redfish"),
    ] {
        assert_eq!(
            one(
                &samples,
                "kepler_node_cpu_zone_info",
                &[("zone", zone), ("meter", meter), ("source", "measured")]
            ),
            1.0,
            "{zone} from {meter}"
        );
        // cpu and platform domains: the processes hold the zone's active power.
        assert_process_power_is_active_power(&samples, zone);
    }
    assert!(!select(&samples, "kepler_platform_watts", &[("source_id", "Bay1")]).is_empty());
    // gpu domain: the lone GPU user holds the device's active energy.
    let active = one(
        &samples,
        "kepler_node_gpu_active_joules_total",
        &[("gpu", "0")],
    );
    let held: f64 = select(&samples, "kepler_process_gpu_joules_total", &[])
        .iter()
        .map(|s| s.value)
        .sum();
    assert!(active > 0.0);
    assert!(
        (active - held).abs() < 1e-5,
        "gpu0 active {active} J, processes {held} J"
    );
    assert_eq!(
        one(
            &samples,
            "kepler_process_gpu_joules_total",
            &[("pid", &pid.to_string())]
        ),
        held
    );
    for (component, name) in [
        ("meter", "rapl"),
        ("meter", "redfish"),
        ("poller", "redfish"),
        ("meter", "fake-gpu"),
    ] {
        assert_eq!(
            one(
                &samples,
                "kepler_agent_component_up",
                &[("component", component), ("name", name)]
            ),
            1.0,
            "{component}/{name}"
        );
    }
}

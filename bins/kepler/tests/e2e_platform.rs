//! The real agent on a host with both RAPL (a simulated powercap tree) and an ACPI power meter
//! (a hwmon `power_meter` chip): the CPU zones come from rapl and the machine's power from the
//! platform domain's `acpi` meter, both exported, both healthy, and process power adds up to
//! node active power in every zone.

mod common;

use std::time::{Duration, Instant};

use common::*;
use kepler_meters::fixtures::HwmonTree;

const PACKAGE_W: f64 = 40.0;
const DRAM_W: f64 = 8.0;
const PLATFORM_W: f64 = 150.0;

#[test]
fn rapl_and_the_acpi_power_meter_are_both_exported() {
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(
        sysfs.path(),
        &[
            ("package-0", PACKAGE_W, 262_143_328_850),
            ("dram", DRAM_W, 65_712_999_613),
        ],
    );
    let mut hwmon = HwmonTree::create(sysfs.path()).expect("hwmon fixture");
    // The ACPI power meter reports an average in µW.
    hwmon
        .add_linked_chip(
            Some("power_meter"),
            &[
                (
                    "power1_average",
                    &format!("{}\n", (PLATFORM_W * 1e6) as u64),
                ),
                ("power1_average_interval", "1000\n"),
            ],
        )
        .expect("power_meter chip");
    let (_agent, port) = start_agent(&[
        "--host.sysfs",
        sysfs.path().to_str().unwrap(),
        "--monitor.interval",
        "1s",
    ]);
    wait_ready(port, Duration::from_secs(30));

    // Both meters need one interval; wait until all three zones are there.
    let deadline = Instant::now() + Duration::from_secs(20);
    let samples = loop {
        let samples = scrape(port);
        let zones = select(&samples, "kepler_node_cpu_watts", &[]).len();
        if zones == 3 {
            break samples;
        }
        assert!(
            Instant::now() < deadline,
            "expected package, dram and platform zones, got {:?}",
            select(&samples, "kepler_node_cpu_watts", &[])
        );
        std::thread::sleep(Duration::from_millis(300));
    };

    for (zone, meter) in [("package", "rapl"), ("dram", "rapl"), ("platform", "acpi")] {
        let info = select(&samples, "kepler_node_cpu_zone_info", &[("zone", zone)]);
        assert_eq!(info.len(), 1, "{zone}: {info:?}");
        assert_eq!(
            info[0].labels.get("meter").map(String::as_str),
            Some(meter),
            "{zone}"
        );
        assert_eq!(
            info[0].labels.get("source").map(String::as_str),
            Some("measured"),
            "{zone}"
        );
    }
    let platform_w = one(&samples, "kepler_node_cpu_watts", &[("zone", "platform")]);
    assert!(
        (platform_w - PLATFORM_W).abs() <= PLATFORM_W * 0.01,
        "platform: node reports {platform_w} W, the meter says {PLATFORM_W} W"
    );
    for name in ["rapl", "acpi"] {
        assert_eq!(
            one(
                &samples,
                "kepler_agent_component_up",
                &[("component", "meter"), ("name", name)]
            ),
            1.0,
            "meter {name}"
        );
    }
    // The CPU-domain hwmon meter found nothing but the ACPI chip, so it is not a component.
    assert!(select(&samples, "kepler_agent_component_up", &[("name", "hwmon")]).is_empty());

    // Several scrapes: every zone conserves energy in each, and the RAPL zones keep their
    // simulated power while the platform zone is there too.
    for _ in 0..3 {
        std::thread::sleep(Duration::from_millis(1000));
        let samples = scrape(port);
        for (zone, watts) in [
            ("package", PACKAGE_W),
            ("dram", DRAM_W),
            ("platform", PLATFORM_W),
        ] {
            let node = one(&samples, "kepler_node_cpu_watts", &[("zone", zone)]);
            // As in e2e_powercap: one interval may be off on this busy 2-CPU machine.
            assert!(
                (node - watts).abs() <= watts * 0.10,
                "{zone}: node reports {node} W, simulation draws {watts} W"
            );
            let active = one(&samples, "kepler_node_cpu_active_watts", &[("zone", zone)]);
            let idle = one(&samples, "kepler_node_cpu_idle_watts", &[("zone", zone)]);
            assert!((active + idle - node).abs() < 1e-6 * node.max(1.0));
            assert_process_power_is_active_power(&samples, zone);
        }
        let platform_paths: Vec<String> =
            select(&samples, "kepler_node_cpu_watts", &[("zone", "platform")])
                .iter()
                .filter_map(|s| s.labels.get("path").cloned())
                .collect();
        assert!(
            platform_paths.len() == 1 && platform_paths[0].ends_with("power1_average"),
            "{platform_paths:?}"
        );
    }
}

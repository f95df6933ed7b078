//! The amdgpu meter on fixture trees: power from hwmon, shares from DRM fdinfo engine time.

use kepler_core::{MeterInput, PowerDomain, PowerMeter, ProcessShare, Watts, ZoneSample};
use kepler_meters::fixtures::AmdGpuTree;
use kepler_meters::gpu::amdgpu::{parse_fdinfo, AmdGpu};
use kepler_meters::gpu::GpuMeter;

const PDEV0: &str = "0000:03:00.0";
const PDEV1: &str = "0000:83:00.0";

fn read(m: &mut GpuMeter) -> Vec<kepler_core::ZoneReading> {
    let mut out = Vec::new();
    m.read(&MeterInput::default(), &mut out).unwrap();
    out
}

#[test]
fn power_names_and_engine_time_shares_per_card() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, proc_) = (dir.path().join("sys"), dir.path().join("proc"));
    let t = AmdGpuTree::create(&sys, &proc_).unwrap();
    t.add_card(
        0,
        PDEV0,
        "0x1002",
        "power1_average",
        35_000_000,
        Some("AMD Instinct MI210"),
        Some("0x1234abcd"),
    )
    .unwrap();
    t.add_card(1, PDEV1, "0x1002", "power1_input", 20_000_000, None, None)
        .unwrap();
    // Not AMD: skipped.
    t.add_card(2, "0000:c1:00.0", "0x10de", "power1_average", 1, None, None)
        .unwrap();
    let backend = AmdGpu::open(&sys, &proc_).unwrap();
    let mut m = GpuMeter::new("amdgpu", Box::new(backend), None);
    assert_eq!(m.domain(), PowerDomain::Gpu);
    assert_eq!(m.zones(), vec!["gpu0", "gpu1"]);

    // Two clients of card 0 (pid 10 with two fds on one client), one of card 1.
    t.set_client(10, 5, PDEV0, 1, 1_000).unwrap();
    t.set_client(10, 6, PDEV0, 1, 1_000).unwrap();
    t.set_client(11, 4, PDEV0, 2, 5_000).unwrap();
    t.set_client(12, 4, PDEV1, 3, 0).unwrap();
    // A file that is not a DRM device, even with DRM-looking fdinfo, is not a client.
    t.set_client(13, 7, PDEV0, 9, 0).unwrap();
    let fd = proc_.join("13/fd/7");
    std::fs::remove_file(&fd).unwrap();
    std::os::unix::fs::symlink("/tmp/not-a-gpu", &fd).unwrap();
    let first = read(&mut m);
    let d0 = first[0].device.as_ref().unwrap();
    assert_eq!(
        (&*d0.name, &*d0.uuid, &*d0.vendor),
        ("AMD Instinct MI210", "0x1234abcd", "amd")
    );
    assert_eq!(&*first[0].path, "0x1234abcd");
    // Without unique_id the PCI address names the device.
    assert_eq!(&*first[1].path, PDEV1);
    assert_eq!(first[0].sample, ZoneSample::Power(Watts(35.0)));
    // First sight is a baseline: nobody has used the cards yet, so this is idle power.
    assert!(first[0].shares.as_ref().unwrap().is_empty());
    assert_eq!(first[0].idle, Some(Watts(35.0)));

    t.set_client(10, 5, PDEV0, 1, 4_000).unwrap();
    t.set_client(10, 6, PDEV0, 1, 4_000).unwrap();
    t.set_client(11, 4, PDEV0, 2, 6_000).unwrap();
    t.set_client(12, 4, PDEV1, 3, 900).unwrap();
    t.set_client(13, 7, PDEV0, 9, 1_000_000).unwrap();
    t.set_power(0, "power1_average", 90_000_000).unwrap();
    let second = read(&mut m);
    let shares = second[0].shares.as_ref().unwrap();
    assert_eq!(
        &shares[..],
        &[
            ProcessShare {
                pid: 10,
                weight: 3_000
            },
            ProcessShare {
                pid: 11,
                weight: 1_000
            }
        ]
    );
    // A lone process takes the whole device.
    assert_eq!(
        &second[1].shares.as_ref().unwrap()[..],
        &[ProcessShare { pid: 12, weight: 1 }]
    );
    // Busy now: idle stays at the lowest power seen while idle.
    assert_eq!(second[0].idle, Some(Watts(35.0)));
}

#[test]
fn hosts_without_amd_cards_say_why() {
    let dir = tempfile::tempdir().unwrap();
    let err = AmdGpu::open(dir.path(), dir.path()).err().unwrap();
    assert!(err.reason.contains("class/drm"), "{err}");
    let t = AmdGpuTree::create(dir.path(), &dir.path().join("proc")).unwrap();
    t.add_card(0, PDEV0, "0x8086", "power1_average", 1, None, None)
        .unwrap();
    let err = AmdGpu::open(dir.path(), &dir.path().join("proc"))
        .err()
        .unwrap();
    assert!(err.reason.contains("not AMD"), "{err}");
}

#[test]
fn fdinfo_of_other_drivers_and_garbage_is_ignored() {
    assert_eq!(
        parse_fdinfo(
            "drm-driver:\ti915\ndrm-pdev:\tx\ndrm-client-id:\t1\ndrm-engine-render:\t5 ns\n"
        ),
        None
    );
    assert_eq!(parse_fdinfo("pos: 0\nflags: 02\n"), None);
    assert_eq!(
        parse_fdinfo(
            "drm-driver:\tamdgpu\ndrm-pdev:\tx\ndrm-client-id:\t1\ndrm-engine-gfx:\tlots\n"
        ),
        None
    );
    let c = parse_fdinfo("drm-driver:\tamdgpu\ndrm-pdev:\tx\ndrm-client-id:\t9\ndrm-engine-gfx:\t5 ns\ndrm-engine-compute:\t7 ns\n").unwrap();
    assert_eq!((c.id, c.engine_ns), (9, 12));
}

#[test]
fn a_vanished_or_garbled_power_file_is_a_read_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let (sys, proc_) = (dir.path().join("sys"), dir.path().join("proc"));
    let t = AmdGpuTree::create(&sys, &proc_).unwrap();
    t.add_card(0, PDEV0, "0x1002", "power1_average", 1_000_000, None, None)
        .unwrap();
    let mut m = GpuMeter::new(
        "amdgpu",
        Box::new(AmdGpu::open(&sys, &proc_).unwrap()),
        None,
    );
    let mut out = Vec::new();
    t.set_power(0, "power1_average", 0).unwrap();
    std::fs::write(
        sys.join("class/drm/card0/device/hwmon/hwmon9/power1_average"),
        "garbage\n",
    )
    .unwrap();
    assert!(m.read(&MeterInput::default(), &mut out).is_err());
    std::fs::remove_file(sys.join("class/drm/card0/device/hwmon/hwmon9/power1_average")).unwrap();
    assert!(m.read(&MeterInput::default(), &mut out).is_err());
    // It comes back: readable again.
    t.set_power(0, "power1_average", 2_000_000).unwrap();
    out.clear();
    m.read(&MeterInput::default(), &mut out).unwrap();
    assert_eq!(out[0].sample, ZoneSample::Power(Watts(2.0)));
}

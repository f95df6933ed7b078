//! The meter registry: names, fallback chains, selection and probing, as the agent and
//! `kepler probe` use them.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use kepler_core::{Feature, PowerDomain, PowerMeter, Unavailable};
use kepler_meters::fixtures::{AmdGpuTree, HwmonTree, MsrTree, PowercapTree};
use kepler_meters::gpu::fake::{FakeDevice, FakeGpuSettings};
use kepler_meters::registry::{chains, probe, select};
use kepler_meters::{FakeMeter, FakeSettings, MeterName, MeterSettings, MsrConfig, OpenContext};
use serde::de::value::{Error as DeError, StrDeserializer};
use serde::de::IntoDeserializer;
use serde::Deserialize;

fn name(text: &str) -> MeterName {
    text.parse().unwrap()
}

fn names(texts: &[&str]) -> Vec<MeterName> {
    texts.iter().map(|t| name(t)).collect()
}

fn settings(sysfs: &Path) -> MeterSettings {
    MeterSettings {
        sysfs: sysfs.to_path_buf(),
        ..MeterSettings::default()
    }
}

/// An AMD card, and scripted GPUs, so every GPU row but NVML (which needs the driver) opens.
fn with_gpus(sysfs: &Path, settings: &mut MeterSettings) {
    let t = AmdGpuTree::create(sysfs, &sysfs.join("proc")).unwrap();
    t.add_card(0, "0000:03:00.0", "0x1002", "power1_average", 1, None, None)
        .unwrap();
    settings.procfs = sysfs.join("proc");
    settings.gpu.enabled = true;
    settings.gpu.fake = Some(FakeGpuSettings {
        devices: vec![FakeDevice {
            watts: 1.0,
            energy: false,
            processes: vec![],
        }],
    });
}

fn with_powercap(sysfs: &Path) {
    PowercapTree::create(
        sysfs,
        &[("package-0", 1_000), ("core", 1_000), ("dram", 1_000)],
    )
    .unwrap();
}

/// The ACPI power meter (platform domain) and a CPU-domain hwmon chip.
fn with_power_meter(sysfs: &Path) {
    let mut hwmon = HwmonTree::create(sysfs).unwrap();
    hwmon
        .add_chip(Some("power_meter"), &[("power1_average", "1000000\n")])
        .unwrap();
    hwmon
        .add_chip(Some("amd_energy"), &[("energy1_input", "1000\n")])
        .unwrap();
}

/// One Intel CPU with RAPL over MSR, and settings that enable the msr meter.
fn with_msr(settings: &mut MeterSettings, base: &Path) {
    let root = base.join("dev-cpu");
    let procfs = base.join("proc");
    let tree = MsrTree::create(&settings.sysfs, &root).unwrap();
    MsrTree::write_cpuinfo(&procfs, "GenuineIntel", 6, 0x55, 1).unwrap();
    tree.add_cpu(0, 0, 0).unwrap();
    tree.write(0, kepler_meters::msr::INTEL_POWER_UNIT, 0xA0E03)
        .unwrap();
    tree.write(0, kepler_meters::msr::INTEL_PKG_ENERGY, 1_000)
        .unwrap();
    settings.procfs = procfs;
    settings.msr = MsrConfig {
        enabled: true,
        root,
    };
}

fn cpu_chain(preferred: &[&str], fake: bool) -> Vec<String> {
    let all = chains(&names(preferred), fake);
    assert_eq!(
        all.iter().map(|c| c.domain).collect::<Vec<_>>(),
        PowerDomain::ALL.to_vec(),
        "one chain per domain"
    );
    all[0].meters.iter().map(|m| m.to_string()).collect()
}

#[test]
fn names_parse_in_any_case_and_unknown_ones_are_named() {
    for (text, expected) in [
        ("rapl", "rapl"),
        ("RAPL", "rapl"),
        ("Hwmon", "hwmon"),
        (" fake ", "fake"),
        ("MODEL", "model"),
    ] {
        assert_eq!(name(text).as_str(), expected, "{text}");
        let via_serde =
            MeterName::deserialize::<StrDeserializer<DeError>>(text.into_deserializer()).unwrap();
        assert_eq!(via_serde.as_str(), expected, "{text}");
    }
    for bad in ["magic", "", "rapl,hwmon", "tpu"] {
        let err = bad.parse::<MeterName>().unwrap_err();
        assert_eq!(err.name, bad);
        assert!(err.to_string().contains("known: rapl, msr, hwmon"), "{err}");
        let err = MeterName::deserialize::<StrDeserializer<DeError>>(bad.into_deserializer())
            .unwrap_err();
        assert!(err.to_string().contains("unknown meter"), "{err}");
    }
}

#[test]
fn every_row_opens_a_meter_of_its_name_and_domain() {
    let dir = tempfile::tempdir().unwrap();
    with_powercap(dir.path());
    with_power_meter(dir.path());
    let mut settings = settings(dir.path());
    // The GPU fixture first: the MSR one points procfs at its own cpuinfo, and the amdgpu
    // meter opens from sysfs alone.
    with_gpus(dir.path(), &mut settings);
    let msr_base = tempfile::tempdir().unwrap();
    with_msr(&mut settings, msr_base.path());
    let estimator = |_: &[Feature]| -> Result<Box<dyn PowerMeter>, Unavailable> {
        // Stands in for the agent's model meter: named `model` like the real one.
        Err(Unavailable::new("the test opens no model"))
    };
    let cx = OpenContext {
        estimator: Some(&estimator),
        ..OpenContext::new(&settings)
    };
    // NVML needs the driver (tests/nvml.rs runs it where a GPU exists); the platform rows need
    // a BMC (tests/redfish.rs and tests/ipmi.rs open them), dcgm an exporter (tests/dcgm.rs).
    let needs_more = ["model", "nvml", "redfish", "ipmi", "dcgm"];
    for meter in MeterName::all().filter(|m| !needs_more.contains(&m.as_str())) {
        let opened = meter.open(&cx).unwrap();
        assert_eq!(opened.name(), meter.as_str());
        assert_eq!(opened.domain(), meter.domain(), "{meter}");
    }
    let rapl_package_only = MeterSettings {
        rapl_zones: vec!["package".into()],
        ..settings.clone()
    };
    let zones = name("RAPL")
        .open(&OpenContext::new(&rapl_package_only))
        .unwrap()
        .zones();
    assert_eq!(zones, vec!["package"]);
}

#[test]
fn cpu_chain_is_the_preferred_meters_then_the_model() {
    for (preferred, fake, expected) in [
        (
            &["rapl", "hwmon"][..],
            false,
            &["rapl", "hwmon", "model"][..],
        ),
        (&["RAPL", "Hwmon"], false, &["rapl", "hwmon", "model"]),
        (&["hwmon"], false, &["hwmon", "model"]),
        (&[], false, &["model"]),
        (&["model", "rapl"], false, &["model", "rapl"]),
        (&["rapl", "rapl", "fake"], false, &["rapl", "fake", "model"]),
        (&["rapl", "hwmon"], true, &["fake"]),
    ] {
        assert_eq!(cpu_chain(preferred, fake), expected, "{preferred:?} {fake}");
    }
}

#[test]
fn platform_and_gpu_chains_are_their_registry_rows() {
    for chain in chains(&[], false).iter().skip(1) {
        let rows: Vec<MeterName> = MeterName::of_domain(chain.domain).collect();
        assert_eq!(chain.meters, rows, "{}", chain.domain);
    }
}

#[test]
fn selection_takes_the_first_meter_that_opens() {
    let dir = tempfile::tempdir().unwrap();
    with_power_meter(dir.path());
    let settings = settings(dir.path());
    let cx = OpenContext::new(&settings);

    // No powercap tree: rapl says why, hwmon is taken, the model is not tried; the ACPI power
    // meter is the platform domain's.
    let selection = select(&chains(&names(&["RAPL", "Hwmon"]), false), &cx);
    let meters: Vec<&str> = selection.meters.iter().map(|m| m.name()).collect();
    assert_eq!(meters, vec!["hwmon", "acpi"]);
    // GPU meters are off unless configured: their attempts say so and are left out here.
    let tried: Vec<(PowerDomain, String, bool)> = selection
        .attempts
        .iter()
        .filter(|a| a.domain != PowerDomain::Gpu)
        .map(|a| (a.domain, a.meter.to_string(), a.outcome.is_ok()))
        .collect();
    // The BMC meters come first in the platform chain and say why they do not measure here.
    assert_eq!(
        tried,
        vec![
            (PowerDomain::Cpu, "rapl".into(), false),
            (PowerDomain::Cpu, "hwmon".into(), true),
            (PowerDomain::Platform, "redfish".into(), false),
            (PowerDomain::Platform, "ipmi".into(), false),
            (PowerDomain::Platform, "acpi".into(), true),
        ]
    );
    assert_eq!(
        selection.attempts[1].outcome,
        Ok(vec!["amd_energy".to_string()])
    );
    assert_eq!(
        selection.attempts[2].outcome,
        Err(Unavailable::new(
            "experimental.platform.redfish.enabled is false"
        ))
    );
    assert_eq!(
        selection.attempts[4].outcome,
        Ok(vec!["platform".to_string()])
    );

    // RAPL and the platform's power are both measured.
    with_powercap(dir.path());
    let selection = select(&chains(&names(&["rapl", "hwmon"]), false), &cx);
    let meters: Vec<&str> = selection.meters.iter().map(|m| m.name()).collect();
    assert_eq!(meters, vec!["rapl", "acpi"]);
}

#[test]
fn the_model_is_opened_by_the_callers_estimator_with_the_sources_features() {
    let dir = tempfile::tempdir().unwrap();
    let settings = settings(dir.path());
    let features = vec![Feature::BpfCpuTimeMs];
    let asked: RefCell<Vec<Vec<Feature>>> = RefCell::new(Vec::new());
    let estimator = |f: &[Feature]| -> Result<Box<dyn PowerMeter>, Unavailable> {
        asked.borrow_mut().push(f.to_vec());
        Ok(Box::new(FakeMeter::new(&FakeSettings::default())?))
    };
    let cx = OpenContext {
        settings: &settings,
        features: &features,
        estimator: Some(&estimator),
        ..OpenContext::new(&settings)
    };
    let selection = select(&chains(&names(&["rapl", "hwmon"]), false), &cx);
    assert_eq!(selection.meters.len(), 1, "the estimator's meter is taken");
    let last_cpu = selection
        .attempts
        .iter()
        .rfind(|a| a.domain == PowerDomain::Cpu)
        .unwrap();
    assert_eq!(last_cpu.meter.as_str(), "model");
    assert_eq!(*asked.borrow(), vec![features.clone()]);

    // Without an estimator the model says so, and the CPU domain has no meter.
    let selection = select(&chains(&[], false), &OpenContext::new(&settings));
    assert!(selection.meters.is_empty());
    assert_eq!(
        selection.attempts[0].outcome,
        Err(Unavailable::new("no estimation model is configured"))
    );
}

#[test]
fn probe_lists_every_row_of_each_domain_and_the_selected_one() {
    let dir = tempfile::tempdir().unwrap();
    with_powercap(dir.path());
    let settings = settings(dir.path());
    let report = probe(
        &chains(&names(&["hwmon", "rapl"]), false),
        &OpenContext::new(&settings),
    );
    assert_eq!(report.len(), PowerDomain::ALL.len());
    let cpu = &report[0];
    assert_eq!(cpu.domain, PowerDomain::Cpu);
    let rows: Vec<(String, bool, bool)> = cpu
        .rows
        .iter()
        .map(|r| (r.meter.to_string(), r.in_chain, r.outcome.is_ok()))
        .collect();
    assert_eq!(
        rows,
        vec![
            ("hwmon".into(), true, false),
            ("rapl".into(), true, true),
            ("model".into(), true, false),
            ("msr".into(), false, false),
            ("fake".into(), false, true),
        ]
    );
    assert_eq!(cpu.selected, Some(name("rapl")));
    for other in &report[1..] {
        assert_eq!(other.selected, None);
    }
}

#[test]
fn defaults_point_at_the_real_sysfs() {
    let s = MeterSettings::default();
    assert_eq!(s.sysfs, PathBuf::from("/sys"));
    assert!(s.rapl_zones.is_empty() && s.hwmon_zones.is_empty());
}

#[test]
fn probing_this_host_never_panics() {
    // On the development VM neither powercap nor hwmon exist; on real hosts either may. Both
    // must come back as an answer, never a panic.
    let settings = MeterSettings::default();
    let cpu: Vec<MeterName> = MeterName::of_domain(PowerDomain::Cpu).collect();
    let report = probe(&chains(&cpu, false), &OpenContext::new(&settings));
    let rows: Vec<_> = report.iter().flat_map(|d| &d.rows).collect();
    assert_eq!(rows.len(), MeterName::all().count());
    for r in rows {
        match &r.outcome {
            Ok(meter) => assert!(!meter.zones().is_empty(), "{}", r.meter),
            Err(why) => assert!(!why.reason.is_empty(), "{}", r.meter),
        }
    }
    // The fake meter is in the chain and opens anywhere.
    assert!(report[0].selected.is_some());
}

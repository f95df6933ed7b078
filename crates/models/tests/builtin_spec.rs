//! Built-in selection and machine specs: however a spec counts CPUs, the model is sized by
//! logical CPUs, and utilisation never runs past full load.

mod common;

use common::predict;
use kepler_models::builtin::{
    embedded_index, select_builtin, select_in, BuiltinFamily, BuiltinSelection, MachineSpec,
};

fn select(text: &str, family: BuiltinFamily) -> BuiltinSelection {
    let spec = MachineSpec::from_spec_json(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    select_builtin(&spec, family).unwrap_or_else(|e| panic!("{text}: {e}"))
}

fn watts(sel: &BuiltinSelection, cpu_ms: f64) -> Vec<(String, f64)> {
    let mut w: Vec<_> = predict(&*sel.predictor, &[("bpf_cpu_time_ms", cpu_ms)])
        .into_iter()
        .collect();
    w.sort_by(|a, b| a.0.cmp(&b.0));
    w
}

/// A CPU the data has (the AWS data's 96-vCPU Xeon Platinum 8259CL platform: 48 physical
/// cores, 2 threads each) and one it does not (the fallback).
const SPECS: [(&str, &str); 2] = [
    ("intel_xeon_platinum_8259cl", "384"),
    ("intel_xeon_gold_6338", "256"),
];

#[test]
fn a_spec_with_physical_cores_selects_the_logical_cpus_model() {
    for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
        for (cpu, mem) in SPECS {
            let logical = select(
                &format!(r#"{{"processor": "{cpu}", "cores": 96, "memory": {mem}}}"#),
                family,
            );
            for physical in [
                r#""cores": 48, "threads": 96"#,
                r#""cores": 48, "threads_per_core": 2"#,
                r#""cores": 96, "physical_cores": 48, "threads_per_core": 2"#,
            ] {
                let text = format!(r#"{{"processor": "{cpu}", {physical}, "memory": {mem}}}"#);
                let sel = select(&text, family);
                assert_eq!(sel.model_name, logical.model_name, "{text}");
                assert_eq!(sel.matched, logical.matched, "{text}");
                for x in [0.0, 24_000.0, 96_000.0] {
                    assert_eq!(watts(&sel, x), watts(&logical, x), "{text} at {x}");
                }
                assert!(
                    sel.reason
                        .contains("96 logical CPUs (it has 48 physical cores)"),
                    "{}",
                    sel.reason
                );
            }
        }
    }
}

#[test]
fn busy_time_beyond_the_logical_cpus_is_full_load() {
    for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
        for (cpu, mem) in SPECS {
            let sel = select(
                &format!(r#"{{"processor": "{cpu}", "cores": 48, "memory": {mem}}}"#),
                family,
            );
            let full = watts(&sel, 48_000.0);
            // 96 busy CPUs on a spec of 48: what the issue saw at "utilisation 2.0".
            assert_eq!(watts(&sel, 96_000.0), full, "{}", sel.reason);
            assert_eq!(watts(&sel, -1.0), watts(&sel, 0.0), "{}", sel.reason);
            let half = watts(&sel, 24_000.0);
            assert!(
                half.iter().zip(&full).all(|(h, f)| h.1 <= f.1),
                "{half:?} {full:?}"
            );
        }
    }
}

fn spec(text: &str) -> MachineSpec {
    MachineSpec::from_spec_json(text).unwrap_or_else(|e| panic!("{text}: {e}"))
}

#[test]
fn dram_is_absent_rather_than_wrong_where_no_estimate_exists() {
    let index = embedded_index().expect("embedded index");
    // The index as trained: dram is withheld while its held-out error misses the target.
    let intel = spec(r#"{"processor": "intel_xeon_platinum_8259cl", "cores": 96, "memory": 384}"#);
    let sel = select_builtin(&intel, BuiltinFamily::Rapl).expect("selection");
    assert_eq!(sel.predictor.components(), ["package", "dram"]);
    let kept = sel.without_withheld();
    let withheld = index.rapl.withheld.contains_key("dram");
    let want: &[&str] = if withheld {
        &["package"]
    } else {
        &["package", "dram"]
    };
    assert_eq!(kept.predictor.components(), want, "{}", kept.reason);
    let out = predict(&*kept.predictor, &[("bpf_cpu_time_ms", 48_000.0)]);
    assert_eq!(out.contains_key("dram"), !withheld, "{out:?}");
    if withheld {
        assert!(!kept.expected_error.contains_key("dram"));
        assert!(
            kept.reason.contains("no dram estimate: "),
            "{}",
            kept.reason
        );
    }

    // Were the index to trust its DRAM curves, an Intel host would get a dram zone and an
    // AMD or Arm host still none: their RAPL has no DRAM domain.
    let mut trusting = index.clone();
    trusting.rapl.withheld.clear();
    for (text, dram) in [
        (
            r#"{"processor": "intel_xeon_platinum_8259cl", "cores": 96, "memory": 384}"#,
            true,
        ),
        (
            r#"{"processor": "intel_xeon_gold_6338", "cores": 128, "memory": 512}"#,
            true,
        ),
        (
            r#"{"processor": "amd_epyc_7r32", "cores": 96, "memory": 192}"#,
            false,
        ),
        (
            r#"{"processor": "amd_epyc_9654", "cores": 384, "memory": 768}"#,
            false,
        ),
        (
            r#"{"processor": "ARM Neoverse-N1", "cores": 64, "memory": 256}"#,
            false,
        ),
        (r#"{"processor": "unknown", "cores": 32}"#, false),
    ] {
        let sel = select_in(&trusting, &spec(text), BuiltinFamily::Rapl)
            .expect("selection")
            .without_withheld();
        let has = sel.predictor.components().iter().any(|c| c == "dram");
        assert_eq!(has, dram, "{text}: {}", sel.reason);
        assert!(sel.predictor.components().iter().any(|c| c == "package"));
        if !dram {
            assert!(sel
                .reason
                .contains("no dram estimate: RAPL has a DRAM domain on Intel"));
            let out = predict(&*sel.predictor, &[("bpf_cpu_time_ms", 1000.0)]);
            assert!(!out.contains_key("dram"), "{text}: {out:?}");
        }
    }
}

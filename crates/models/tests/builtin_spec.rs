//! Built-in selection and machine specs: however a spec counts CPUs, the model is sized by
//! logical CPUs, and utilisation never runs past full load.

mod common;

use common::predict;
use kepler_models::builtin::{select_builtin, BuiltinFamily, BuiltinSelection, MachineSpec};

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

//! Built-in models: selection by machine spec, and predictions that reproduce the source
//! data. Expected watts are computed here by hand from the CSV rows quoted in each test,
//! not by calling the training code.

mod common;

use std::path::PathBuf;

use common::{assert_rel, predict};
use kepler_models::builtin::{
    builtin_fallback, embedded_index, select_builtin, BuiltinFamily, BuiltinSelection, MachineSpec,
    MatchQuality,
};
use kepler_models::load_model;

fn spec(processor: &str, cores: u32, chips: u32, memory_gb: f64) -> MachineSpec {
    MachineSpec {
        processor: kepler_models::builtin::normalize_processor(processor),
        logical_cores: cores,
        chips,
        memory_gb,
        frequency_mhz: None,
    }
}

fn select(s: &MachineSpec, family: BuiltinFamily) -> BuiltinSelection {
    match select_builtin(s, family) {
        Ok(sel) => sel,
        Err(e) => panic!("selecting for {s:?}: {e}"),
    }
}

/// Watts of `sel` at `cpu_ms` busy CPU ms per second.
fn at(sel: &BuiltinSelection, cpu_ms: f64) -> std::collections::HashMap<String, f64> {
    predict(&*sel.predictor, &[("bpf_cpu_time_ms", cpu_ms)])
}

fn committed(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("builtin")
        .join(rel)
}

#[test]
fn exact_aws_platform_reproduces_its_csv_row() {
    // aws-instances.csv, m5.metal: 96 vCPU of 96, Xeon Platinum 8175M, 384 GB,
    // PkgWatt "57,88","146,63","343,70","477,98", RAMWatt "57,81","92,39","238,10","383,81".
    // MemTotal of a 384 GB machine is ~377 GiB: within 5 %, so no dram rescaling.
    let s = spec(
        "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz",
        96,
        2,
        377.0,
    );
    let sel = select(&s, BuiltinFamily::Rapl);
    assert_eq!(sel.matched, MatchQuality::Exact, "{}", sel.reason);
    assert_eq!(
        sel.model_name,
        "builtin/aws/LogarithmicRegressionTrainer_36"
    );
    assert!(sel.reason.starts_with("exact match"), "{}", sel.reason);
    assert_eq!(sel.predictor.components(), ["package", "dram"]);
    assert_eq!(sel.predictor.features(), ["bpf_cpu_time_ms"]);
    let idle = at(&sel, 0.0);
    assert_rel(idle["package"], 57.88, "package idle");
    assert_rel(idle["dram"], 57.81, "dram idle");
    let full = at(&sel, 96_000.0);
    assert_rel(full["package"], 477.98, "package 100 %");
    assert_rel(full["dram"], 383.81, "dram 100 %");
    // The inner points are fitted, not pinned: within the recorded fit error.
    let half = at(&sel, 48_000.0);
    assert!((half["package"] - 343.70).abs() < 1.0, "{half:?}");
    // An unscaled exact match is byte for byte the committed model-DB file.
    let file = committed("aws/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_36.json");
    assert_eq!(std::fs::read_to_string(file).ok(), Some(sel.model_json));
}

#[test]
fn vm_with_the_same_cpu_gets_its_share_of_the_platform() {
    // m5n.xlarge: 4 vCPU of 96, Xeon Platinum 8259CL, 16 GB,
    // PkgWatt "2,28" .. "18,56", RAMWatt "2,49" .. "10,62" (rounded to 0.01 W in the CSV).
    let s = spec("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", 4, 1, 16.0);
    let sel = select(&s, BuiltinFamily::Rapl);
    assert_eq!(sel.matched, MatchQuality::SameCpuScaled, "{}", sel.reason);
    assert!(sel.reason.contains("instead of 96"), "{}", sel.reason);
    let idle = at(&sel, 0.0);
    let full = at(&sel, 4000.0);
    for (got, want) in [
        (idle["package"], 2.28),
        (full["package"], 18.56),
        (idle["dram"], 2.49),
        (full["dram"], 10.62),
    ] {
        assert!(
            (got - want).abs() <= 0.01,
            "{got} vs {want}: {}",
            sel.reason
        );
    }
}

#[test]
fn specpower_server_gets_the_median_of_its_results() {
    // SPECpower-full-results.csv, Intel Xeon Platinum 8380HL, 4 chips, 224 threads, 384 GB:
    // H3C UniServer R6900 G5 (idle 89.2, 100 % 1005) and Inspur NF8480M6 (104, 1008).
    let s = spec(
        "Intel(R) Xeon(R) Platinum 8380HL CPU @ 2.90GHz",
        224,
        4,
        376.0,
    );
    let sel = select(&s, BuiltinFamily::Platform);
    assert_eq!(sel.matched, MatchQuality::Exact, "{}", sel.reason);
    assert_eq!(sel.predictor.components(), ["platform"]);
    assert_rel(at(&sel, 0.0)["platform"], (89.2 + 104.0) / 2.0, "idle");
    assert_rel(
        at(&sel, 224_000.0)["platform"],
        (1005.0 + 1008.0) / 2.0,
        "100 %",
    );
    assert_rel(
        at(&sel, 112_000.0)["platform"],
        (89.2 + 104.0) / 2.0 + ((1005.0 + 1008.0) / 2.0 - (89.2 + 104.0) / 2.0) / 2.0,
        "50 % is linear",
    );
    // The 768 GB variant (Superdome Flex 280 4-socket: 258/1117 and 254/1158) for a host
    // with that much memory.
    let big = select(
        &spec("Intel Xeon Platinum 8380HL", 224, 4, 750.0),
        BuiltinFamily::Platform,
    );
    assert_rel(at(&big, 0.0)["platform"], 256.0, "768 GB idle");
    assert_rel(at(&big, 224_000.0)["platform"], 1137.5, "768 GB 100 %");
}

#[test]
fn multi_node_results_count_per_node() {
    // Intel Xeon X5570, 2 chips, 16 threads, 12 GB per node: PowerEdge R710 (idle 75.6,
    // 100 % 237), PowerEdge R610 (63.2, 236), and the 2-node iDataPlex dx360 M2 (totals 4
    // chips, 32 threads, 24 GB, 116 W idle, 475 W → per node 58 and 237.5). Medians: 63.2, 237.
    let sel = select(
        &spec("Intel(R) Xeon(R) CPU X5570 @ 2.93GHz", 16, 2, 12.0),
        BuiltinFamily::Platform,
    );
    assert_eq!(sel.matched, MatchQuality::Exact, "{}", sel.reason);
    assert_rel(at(&sel, 0.0)["platform"], 63.2, "idle");
    assert_rel(at(&sel, 16_000.0)["platform"], 237.0, "100 %");
}

#[test]
fn unknown_cpu_gets_the_fallback_and_says_why() {
    let s = spec("Intel(R) Xeon(R) Gold 9999Z CPU @ 2.00GHz", 32, 2, 128.0);
    for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
        let sel = select(&s, family);
        assert_eq!(sel.matched, MatchQuality::Fallback, "{}", sel.reason);
        assert!(sel.reason.contains("no "), "{}", sel.reason);
        assert!(
            sel.reason.contains("intel_xeon_gold_9999z"),
            "{}",
            sel.reason
        );
        assert!(sel.model_name.ends_with("/fallback"), "{}", sel.model_name);
    }
    // The fallback's ends follow its documented affine form.
    let index = embedded_index().unwrap_or_else(|e| panic!("{e}"));
    let sel = select(&s, BuiltinFamily::Rapl);
    let pkg = index.rapl.fallback.components["package"];
    let dram = index.rapl.fallback.components["dram"];
    assert_rel(
        at(&sel, 0.0)["package"],
        pkg.idle.at(32.0, 128.0),
        "fallback package idle",
    );
    assert_rel(
        at(&sel, 32_000.0)["package"],
        pkg.max.at(32.0, 128.0),
        "fallback package max",
    );
    assert_rel(
        at(&sel, 32_000.0)["dram"],
        dram.max.per_gb_w * 128.0,
        "fallback dram max",
    );
    // A CPU with no model number never matches, whatever the data holds.
    let vm = select(
        &spec("Intel Xeon Processor (Cascadelake)", 8, 1, 32.0),
        BuiltinFamily::Rapl,
    );
    assert_eq!(vm.matched, MatchQuality::Fallback);
    assert!(vm.reason.contains("no model number"), "{}", vm.reason);
}

#[test]
fn matching_is_by_token_equality_not_substring() {
    // "8259" is a prefix of "8259CL" and "E5-2670" of "E5-2670 v2": neither may match.
    let s = spec("Intel Xeon Platinum 8259", 96, 2, 384.0);
    assert_eq!(
        select(&s, BuiltinFamily::Rapl).matched,
        MatchQuality::Fallback
    );
    // Xeon E5-2670 v2 (40 vCPU, 244 GB) exists, and so does Xeon E5-2670 (32 vCPU): a v2
    // host must get the v2 platform. aws-instances.csv r3.8xlarge (32 of 40 vCPU, 244 GB):
    // PkgWatt "22,19" at idle → 22.19 × 40/32 = 27.7375 W for the platform.
    let v2 = select(
        &spec("Intel(R) Xeon(R) CPU E5-2670 v2 @ 2.50GHz", 40, 2, 244.0),
        BuiltinFamily::Rapl,
    );
    assert_eq!(v2.matched, MatchQuality::Exact, "{}", v2.reason);
    assert!(v2.reason.contains("E5-2670 v2"), "{}", v2.reason);
    assert_rel(at(&v2, 0.0)["package"], 22.19 * 40.0 / 32.0, "v2 idle");
}

#[test]
fn selection_is_deterministic() {
    let s = spec("AMD EPYC 7R32 48-Core Processor", 96, 1, 190.0);
    let a = select(&s, BuiltinFamily::Rapl);
    let b = select(&s, BuiltinFamily::Rapl);
    assert_eq!(a.model_json, b.model_json);
    assert_eq!(a.reason, b.reason);
}

#[test]
fn forced_fallback_ignores_the_cpu() {
    let s = spec(
        "Intel(R) Xeon(R) Platinum 8175M CPU @ 2.50GHz",
        96,
        2,
        377.0,
    );
    let f = builtin_fallback(&s, BuiltinFamily::Rapl).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(f.matched, MatchQuality::Fallback);
}

#[test]
fn invalid_specs_are_errors() {
    let mut s = spec("Intel Xeon Platinum 8175M", 0, 2, 377.0);
    assert!(select_builtin(&s, BuiltinFamily::Rapl).is_err());
    s.logical_cores = 4;
    s.memory_gb = f64::NAN;
    assert!(select_builtin(&s, BuiltinFamily::Rapl).is_err());
}

/// Every node type selects itself, and its committed file loads as a model-DB file and
/// predicts the same as the selection at idle, half and full load.
#[test]
fn every_committed_model_is_a_loadable_model_db_file() {
    let index = embedded_index().unwrap_or_else(|e| panic!("{e}"));
    for (family, fam) in [
        (BuiltinFamily::Rapl, &index.rapl),
        (BuiltinFamily::Platform, &index.platform),
    ] {
        assert!(!fam.types.is_empty());
        for t in &fam.types {
            let s = MachineSpec {
                processor: t.processor.clone(),
                logical_cores: t.cores,
                chips: t.chips.unwrap_or(0),
                memory_gb: t.memory_gb,
                frequency_mhz: t.frequency_mhz,
            };
            let sel = select(&s, family);
            let rel = format!(
                "{}/{}/AbsPower/BPFOnly/{}_{}.json",
                fam.pipeline, fam.source, fam.trainer, t.id
            );
            assert_eq!(sel.matched, MatchQuality::Exact, "{rel}: {}", sel.reason);
            let file = load_model(&committed(&rel), None).unwrap_or_else(|e| panic!("{rel}: {e}"));
            for frac in [0.0, 0.5, 1.0] {
                let x = frac * 1000.0 * f64::from(t.cores);
                let want = at(&sel, x);
                let got = predict(&*file, &[("bpf_cpu_time_ms", x)]);
                for (comp, w) in &want {
                    assert_rel(got[comp], *w, &format!("{rel} {comp} at {frac}"));
                }
                if frac == 0.0 {
                    for (comp, c) in &t.components {
                        assert_rel(got[comp], c.idle_w, &format!("{rel} {comp} idle"));
                    }
                }
                if frac == 1.0 {
                    for (comp, c) in &t.components {
                        assert_rel(got[comp], c.max_w, &format!("{rel} {comp} max"));
                    }
                }
            }
        }
    }
}

mod never_panics {
    use kepler_models::builtin::{
        normalize_processor, parse_cpuinfo, parse_meminfo_gib, select_builtin, BuiltinFamily,
        MachineSpec,
    };
    use proptest::prelude::*;

    proptest! {
        /// Arbitrary text from procfs or a spec file gives a value or an error, never a panic,
        /// and whatever parses can be selected for.
        #[test]
        fn on_arbitrary_text(text in "(?s).{0,300}", lines in proptest::collection::vec(
            "(processor|model name|physical id|MemTotal|CPU part|CPU implementer|cpu)\\s*:\\s*[ -~]{0,40}", 0..8)) {
            let joined = lines.join("\n");
            let _ = normalize_processor(&text);
            let _ = parse_cpuinfo(&text);
            let _ = parse_meminfo_gib(&text);
            let _ = MachineSpec::from_spec_json(&text);
            if let Ok(spec) = MachineSpec::from_proc(&joined, "MemTotal: 1024 kB") {
                for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
                    prop_assert!(select_builtin(&spec, family).is_ok());
                }
            }
        }

        #[test]
        fn on_arbitrary_spec_json(processor in "[ -~]{0,30}", cores in proptest::num::f64::ANY,
                                  memory in proptest::num::f64::ANY) {
            let v = serde_json::json!({"processor": processor, "cores": cores, "memory": memory});
            if let Ok(spec) = MachineSpec::from_spec_value(&v) {
                for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
                    prop_assert!(select_builtin(&spec, family).is_ok());
                }
            }
        }
    }
}

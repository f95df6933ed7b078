//! Built-in models: selection by machine spec, and predictions that reproduce the source
//! data. Expected watts are computed here by hand from the CSV rows quoted in each test,
//! not by calling the training code.

mod common;

use std::path::PathBuf;

use common::{assert_rel, predict};
use kepler_models::builtin::{
    builtin_fallback, embedded_index, select_builtin, select_builtin_for_guest,
    select_for_guest_in, BuiltinFamily, BuiltinSelection, MachineSpec, MatchQuality,
};
use kepler_models::load_model;

fn spec(processor: &str, cores: u32, chips: u32, memory_gb: f64) -> MachineSpec {
    MachineSpec {
        processor: kepler_models::builtin::normalize_processor(processor),
        logical_cores: cores,
        physical_cores: None,
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
    // The fallback's ends follow its documented affine form, fixed + per_cpu·CPUs +
    // per_gb·GB, with the numbers of builtin/index.json's rapl fallback:
    //   package idle {"fixed_w":9.62083,"per_cpu_w":0.452917,"per_gb_w":0.0}
    //   package max  {"fixed_w":64.0929,"per_cpu_w":3.97174,"per_gb_w":0.0}
    //   dram max     {"fixed_w":0.0,"per_cpu_w":0.0,"per_gb_w":0.6}
    // at 32 logical CPUs and 128 GB.
    let sel = select(&s, BuiltinFamily::Rapl);
    assert_rel(
        at(&sel, 0.0)["package"],
        9.62083 + 0.452917 * 32.0, // 24.114174
        "fallback package idle",
    );
    assert_rel(
        at(&sel, 32_000.0)["package"],
        64.0929 + 3.97174 * 32.0, // 191.18858
        "fallback package max",
    );
    assert_rel(
        at(&sel, 32_000.0)["dram"],
        0.6 * 128.0, // 76.8
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
fn memory_variants_resolve_to_a_pinned_committed_file() {
    // EPYC 7R32 with 96 logical CPUs has two node types in the index: id 2 (192 GB, the c5a
    // family) and id 3 (384 GB, g4ad). 190 GB is nearest id 2 and within 5 % of it, so the
    // model is that committed file, byte for byte, and nothing is scaled.
    let s = spec("AMD EPYC 7R32 48-Core Processor", 96, 1, 190.0);
    let a = select(&s, BuiltinFamily::Rapl);
    assert_eq!(a.matched, MatchQuality::Exact, "{}", a.reason);
    assert_eq!(a.model_name, "builtin/aws/LogarithmicRegressionTrainer_2");
    let file = committed("aws/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_2.json");
    let text = std::fs::read_to_string(&file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    assert_eq!(a.model_json, text);
    // 380 GB is nearest the other variant.
    let b = select(&spec("AMD EPYC 7R32", 96, 1, 380.0), BuiltinFamily::Rapl);
    assert_eq!(b.model_name, "builtin/aws/LogarithmicRegressionTrainer_3");
}

#[test]
fn arm_core_names_match_only_as_a_core_design() {
    // arm64 cpuinfo names the core (Neoverse-N1), not the chip. Graviton2 is built on it, so
    // its node types apply, but so is Ampere Altra: the match must say it is the core's.
    let core = select(&spec("ARM Neoverse-N1", 64, 1, 256.0), BuiltinFamily::Rapl);
    assert_eq!(
        core.matched,
        MatchQuality::SameCoreDesign,
        "{}",
        core.reason
    );
    assert_eq!(core.matched.to_string(), "same-core-design");
    assert!(core.reason.contains("core design"), "{}", core.reason);
    assert!(core.reason.contains("Graviton2"), "{}", core.reason);
    // The same machine named by its chip is an exact match, with the same model.
    let chip = select(&spec("AWS Graviton2", 64, 1, 256.0), BuiltinFamily::Rapl);
    assert_eq!(chip.matched, MatchQuality::Exact, "{}", chip.reason);
    assert_eq!(chip.model_json, core.model_json);
    // Scaled (Cortex-A72: Graviton, and a Raspberry Pi 4) and guest selections say so too.
    let pi = select(&spec("ARM Cortex-A72", 4, 1, 8.0), BuiltinFamily::Rapl);
    assert_eq!(pi.matched, MatchQuality::SameCoreDesign, "{}", pi.reason);
    assert!(pi.reason.contains("Graviton"), "{}", pi.reason);
    let g = guest(&spec("ARM Neoverse-N1", 4, 0, 16.0), BuiltinFamily::Rapl);
    assert_eq!(g.matched, MatchQuality::SameCoreDesign, "{}", g.reason);
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
                physical_cores: None,
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

fn guest(s: &MachineSpec, family: BuiltinFamily) -> BuiltinSelection {
    match select_builtin_for_guest(s, family) {
        Ok(sel) => sel,
        Err(e) => panic!("selecting for guest {s:?}: {e}"),
    }
}

/// What a VM's agent reports (DynPower): watts at `cpu_ms` minus watts at 0.
fn dynamic(sel: &BuiltinSelection, cpu_ms: f64) -> std::collections::HashMap<String, f64> {
    let idle = at(sel, 0.0);
    at(sel, cpu_ms)
        .into_iter()
        .map(|(c, w)| {
            let i = idle[&c];
            (c, w - i)
        })
        .collect()
}

#[test]
fn unknown_cpu_guest_adds_what_a_large_host_adds_per_busy_vcpu() {
    // Whole large AWS platforms, aws-instances.csv PkgWatt at idle, 10 %, 50 %, 100 %
    // (metal or full-platform instances, so the platform's own watts):
    // (instance, platform vCPUs, idle, 10 %, 50 %, 100 %).
    let hosts = [
        (
            "m5.metal, Xeon Platinum 8175M",
            96.0,
            57.88,
            146.63,
            343.70,
            477.98,
        ),
        (
            "c5.metal, Xeon Platinum 8275CL",
            96.0,
            57.93,
            175.53,
            448.31,
            626.76,
        ),
        (
            "m5n.metal, Xeon Platinum 8259CL",
            96.0,
            54.71,
            137.92,
            306.93,
            445.38,
        ),
        (
            "m5a.24xlarge, EPYC 7571",
            96.0,
            46.45,
            127.30,
            300.91,
            407.42,
        ),
        (
            "i3.metal, Xeon E5-2686 v4",
            72.0,
            34.98,
            99.86,
            205.39,
            281.13,
        ),
        (
            "z1d.metal, Xeon Platinum 8151",
            48.0,
            48.00,
            148.00,
            361.00,
            441.00,
        ),
        ("m6g.metal, Graviton2", 64.0, 17.42, 47.74, 112.84, 152.78),
    ];
    // W per busy vCPU. Least: the 50→100 % chord, what one more busy vCPU adds to a host
    // already half busy. Most: the idle→10 % chord, what the first busy vCPUs of an idle
    // host add (the curves are concave, so this is the steepest measured part).
    let flattest = hosts
        .iter()
        .map(|(_, n, _, _, p50, p100)| (p100 - p50) / (0.5 * n))
        .fold(f64::INFINITY, f64::min);
    let steepest = hosts
        .iter()
        .map(|(_, n, idle, p10, _, _)| (p10 - idle) / (0.1 * n))
        .fold(0.0, f64::max);
    // m6g.metal (152.78 − 112.84) / 32 = 1.248 W; z1d.metal (148 − 48) / 4.8 = 20.83 W.
    assert!((flattest - 39.94 / 32.0).abs() < 1e-9, "{flattest}");
    assert!((steepest - 100.0 / 4.8).abs() < 1e-9, "{steepest}");

    // A 2-vCPU VM whose CPU has no model number ("AMD EPYC"), 4 GB.
    let vm = spec("AMD EPYC", 2, 1, 3.8);
    let sel = guest(&vm, BuiltinFamily::Rapl);
    assert_eq!(sel.matched, MatchQuality::Fallback, "{}", sel.reason);
    assert_eq!(sel.guest_host_cpus, Some(72), "{}", sel.reason);
    assert!(sel.reason.starts_with("guest"), "{}", sel.reason);
    assert!(sel.reason.contains("72 logical CPUs"), "{}", sel.reason);
    for x in [1000.0, 2000.0] {
        let per_vcpu = dynamic(&sel, x)["package"] / (x / 1000.0);
        assert!(
            (flattest..=steepest).contains(&per_vcpu),
            "{per_vcpu} W per busy vCPU at {x} ms/s, outside {flattest}..{steepest}: {}",
            sel.reason
        );
    }
    // The bare-metal rule on the same spec treats the VM as a whole 2-CPU machine, whose
    // fixed part (the affine fit's intercept) becomes "dynamic": far outside the range.
    let bare = select(&vm, BuiltinFamily::Rapl);
    assert!(dynamic(&bare, 2000.0)["package"] / 2.0 > steepest);
}

#[test]
fn unknown_cpu_guest_is_the_fallback_of_a_typical_host() {
    // Typical host: the lower median of the node types' logical CPUs. AWS, 47 types by
    // size (count): 12 (1), 16 (1), 32 (7), 40 (3), 48 (7), 64 (4), 72 (8), 96 (12),
    // 128 (3), 448 (1); the 24th is 72. SPECpower, 231 types: 138 have ≤ 32 threads and
    // 109 < 32, so the 116th is 32.
    let index = embedded_index().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(index.rapl.typical_host_cpus(), Some(72));
    assert_eq!(index.platform.typical_host_cpus(), Some(32));
    // A 2-vCPU guest with 2 GB per vCPU runs on a 72-CPU host with 144 GB.
    let vm = spec("Intel Xeon Processor (Cascadelake)", 2, 1, 4.0);
    let host = spec("Intel Xeon Processor (Cascadelake)", 72, 0, 144.0);
    for (family, cpus) in [(BuiltinFamily::Rapl, 72), (BuiltinFamily::Platform, 32)] {
        let g = guest(&vm, family);
        assert_eq!(g.matched, MatchQuality::Fallback, "{}", g.reason);
        assert_eq!(g.guest_host_cpus, Some(cpus));
        let mut h = host.clone();
        h.logical_cores = cpus;
        h.memory_gb = 2.0 * f64::from(cpus);
        let f = builtin_fallback(&h, family).unwrap_or_else(|e| panic!("{e}"));
        for x in [0.0, 500.0, 1000.0, 2000.0] {
            let (want, got) = (at(&f, x), at(&g, x));
            for (c, w) in &want {
                assert_rel(got[c], *w, &format!("{family} {c} at {x}"));
            }
        }
    }
    // SPECpower is linear, so each busy vCPU adds (max − idle) / 32 of the fallback's
    // 32-thread ends (docs/builtin-models.md): idle 68.5912 + 0.142279·32, full load
    // 154.211 + 2.72779·32.
    let per_vcpu = ((154.211 + 2.72779 * 32.0) - (68.5912 + 0.142279 * 32.0)) / 32.0;
    let g = guest(&vm, BuiltinFamily::Platform);
    assert!((dynamic(&g, 2000.0)["platform"] - 2.0 * per_vcpu).abs() < 1e-6);
    // A guest larger than the typical host is its own host.
    let big = spec("AMD EPYC", 128, 1, 0.0);
    let g = guest(&big, BuiltinFamily::Rapl);
    assert_eq!(g.guest_host_cpus, Some(128));
    let f = builtin_fallback(&big, BuiltinFamily::Rapl).unwrap_or_else(|e| panic!("{e}"));
    assert_same_watts(&g, &f, 128_000.0);
}

/// Same predictions at idle, a few busy CPUs and `full` (the machine_spec metadata of the
/// model JSON may differ: a guest's sockets are not its host's).
#[track_caller]
fn assert_same_watts(a: &BuiltinSelection, b: &BuiltinSelection, full: f64) {
    for x in [0.0, 1000.0, 2000.0, full] {
        let (want, got) = (at(b, x), at(a, x));
        assert_eq!(want.len(), got.len());
        for (c, w) in &want {
            assert_rel(got[c], *w, &format!("{c} at {x}"));
        }
    }
}

#[test]
fn guest_of_a_known_cpu_gets_its_full_hosts_dynamic_power() {
    // m5n.xlarge: 4 vCPU of 96, Xeon Platinum 8259CL, 16 GB of a 384 GB platform. The host
    // is the platform itself (node type 42, from m5n.metal and 43 more), unscaled.
    let vm = spec("Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz", 4, 1, 15.4);
    let g = guest(&vm, BuiltinFamily::Rapl);
    let host = select(
        &spec("Intel Xeon Platinum 8259CL", 96, 0, 384.0),
        BuiltinFamily::Rapl,
    );
    assert_eq!(g.matched, MatchQuality::Exact, "{}", g.reason);
    assert_eq!(g.guest_host_cpus, Some(96));
    assert_eq!(g.model_name, "builtin/aws/LogarithmicRegressionTrainer_42");
    assert!(g.reason.starts_with("guest"), "{}", g.reason);
    assert!(g.reason.contains("node type 42"), "{}", g.reason);
    assert_eq!(g.model_json, host.model_json);
    for x in [250.0, 1000.0, 2000.0, 4000.0] {
        let (want, got) = (dynamic(&host, x), dynamic(&g, x));
        for c in ["package", "dram"] {
            assert_rel(got[c], want[c], &format!("{c} at {x}"));
        }
    }
    // The host's idle (m5n.metal PkgWatt "54,71") is what predict(0) gives; only the
    // difference is the guest's.
    assert_rel(at(&g, 0.0)["package"], 54.71, "host idle");
    // The bare-metal rule instead gives the guest its vCPU share of a host running at the
    // guest's utilisation, which is how the CSV attributes watts to instances (m5n.xlarge
    // PkgWatt "2,28" idle, "18,56" at 100 %): at full guest load 16.28 W against the
    // host's 33.7 W for 4 busy CPUs of an otherwise idle host.
    let share = select(&vm, BuiltinFamily::Rapl);
    assert!((dynamic(&share, 4000.0)["package"] - (18.56 - 2.28)).abs() < 0.02);
    assert!(dynamic(&g, 4000.0)["package"] > 2.0 * (18.56 - 2.28));

    // r5n.large: 2 vCPU and 16 GB of a 768 GB platform: 8 GB per vCPU picks the 768 GB
    // variant (node type 43; r5n.metal RAMWatt "119,43" idle, "509,90" at 100 %).
    let r = guest(
        &spec("Intel Xeon Platinum 8259CL", 2, 1, 16.0),
        BuiltinFamily::Rapl,
    );
    assert_eq!(r.model_name, "builtin/aws/LogarithmicRegressionTrainer_43");
    assert_rel(at(&r, 0.0)["dram"], 119.43, "r5n host dram idle");
    assert_rel(at(&r, 96_000.0)["dram"], 509.90, "r5n host dram 100 %");
}

#[test]
fn guest_larger_than_any_host_of_its_cpu_is_its_own_host() {
    // No 8259CL platform has more than 96 vCPUs: a 128-vCPU guest gets node type 42 scaled
    // up to 128, which is what the bare-metal rule gives a 128-CPU machine.
    let vm = spec("Intel Xeon Platinum 8259CL", 128, 1, 500.0);
    let g = guest(&vm, BuiltinFamily::Rapl);
    assert_eq!(g.matched, MatchQuality::SameCpuScaled, "{}", g.reason);
    assert_eq!(g.guest_host_cpus, Some(128));
    assert_same_watts(&g, &select(&vm, BuiltinFamily::Rapl), 128_000.0);
}

#[test]
fn guest_selection_without_node_types_uses_the_guest_size() {
    let mut index = embedded_index().unwrap_or_else(|e| panic!("{e}")).clone();
    index.rapl.types.clear();
    assert_eq!(index.rapl.typical_host_cpus(), None);
    let vm = spec("AMD EPYC", 2, 1, 4.0);
    let g = select_for_guest_in(&index, &vm, BuiltinFamily::Rapl).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(g.guest_host_cpus, Some(2));
    assert_eq!(g.matched, MatchQuality::Fallback);
}

#[test]
fn guest_with_absurd_memory_still_gets_a_model() {
    // 1e308 GB per vCPU grown to a 72-CPU host would overflow to infinity.
    for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
        let g = guest(&spec("AMD EPYC", 1, 1, 1e308), family);
        assert!(dynamic(&g, 1000.0).values().all(|w| w.is_finite()));
    }
}

#[test]
fn bare_metal_selection_is_not_a_guests() {
    let s = spec("AMD EPYC 7R32 48-Core Processor", 96, 1, 190.0);
    assert_eq!(select(&s, BuiltinFamily::Rapl).guest_host_cpus, None);
}

mod never_panics {
    use kepler_models::builtin::{
        normalize_processor, parse_cpuinfo, parse_meminfo_gib, select_builtin,
        select_builtin_for_guest, BuiltinFamily, MachineSpec,
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
                    prop_assert!(select_builtin_for_guest(&spec, family).is_ok());
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
                    prop_assert!(select_builtin_for_guest(&spec, family).is_ok());
                }
            }
        }
    }
}

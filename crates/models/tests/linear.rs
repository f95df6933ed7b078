//! Linear weight JSON files from the model DB, reproduced from their literal weights.
//! Every expected value is written as the arithmetic on the numbers in the file
//! (power = Bias_Weight + Σ weight · x / scale), evaluated here, with the result printed
//! by an independent Python evaluation of the same expression as the constant.

mod common;

use common::*;
use kepler_models::ModelKind;

/// ec2-0.7.11 BPFOnly SGDRegressorTrainer_0.json (m5.metal):
/// package: Bias 143.81206324506658, bpf_cpu_time_ms weight 305.148172889668,
///          scale 95877.00000000001; bpf_page_cache_hit weight 0.0, scale 1.0
/// dram:    Bias 18.616285480502686, bpf_cpu_time_ms weight 8.434209551249596
/// core, uncore: all zero.
const S: f64 = 95877.00000000001;

#[test]
fn design_worked_example_reproduces() {
    let m = load(ec2("BPFOnly/SGDRegressorTrainer_0.json"), None);
    assert_eq!(m.kind(), ModelKind::Linear);
    assert_eq!(m.components(), ["package", "core", "uncore", "dram"]);
    // Zero-weight bpf_page_cache_hit is declared but not needed.
    assert_eq!(m.features(), ["bpf_cpu_time_ms"]);
    assert_eq!(
        m.declared_features(),
        ["bpf_cpu_time_ms", "bpf_page_cache_hit"]
    );

    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 0.0)],
    );
    // 143.81206324506658 + 305.148172889668 · 47938.5/95877.00000000001 = 296.38614968990055
    // 18.616285480502686 + 8.434209551249596 · 47938.5/95877.00000000001 = 22.833390256127483
    assert_components(
        &out,
        &[
            ("package", 296.38614968990055),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 22.833390256127483),
        ],
    );
    assert_rel(
        out["package"],
        143.81206324506658 + 305.148172889668 * (47938.5 / S),
        "package expr",
    );
    // DESIGN §7 states the example to 6 decimals.
    assert!((out["package"] - 296.386150).abs() < 5e-7);
    assert!((out["dram"] - 22.833390).abs() < 5e-7);

    let zero = predict(
        &*m,
        &[("bpf_cpu_time_ms", 0.0), ("bpf_page_cache_hit", 0.0)],
    );
    assert_components(
        &zero,
        &[
            ("package", 143.81206324506658),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 18.616285480502686),
        ],
    );
    // Exactly the bias: the weights are parsed without rounding error.
    assert_eq!(zero["package"], 143.81206324506658);
    assert_eq!(zero["dram"], 18.616285480502686);
    assert!((zero["package"] - 143.812063).abs() < 5e-7);
    assert!((zero["dram"] - 18.616285).abs() < 5e-7);
}

#[test]
fn sgd_other_point() {
    let m = load(ec2("BPFOnly/SGDRegressorTrainer_0.json"), None);
    let out = predict(&*m, &[("bpf_cpu_time_ms", 12345.6)]);
    // 143.81206324506658 + 305.148172889668 · 12345.6/95877.00000000001 = 183.10446166415232
    // 18.616285480502686 + 8.434209551249596 · 12345.6/95877.00000000001 = 19.70231630578828
    assert_rel(out["package"], 183.10446166415232, "package");
    assert_rel(out["dram"], 19.70231630578828, "dram");
}

#[test]
fn legacy_v06_file_with_us_feature() {
    // nx12 std_v0.6 SGDRegressorTrainer_1.json: feature bpf_cpu_time_us (values are ms/s),
    // scale 5911.969193263386, mean/variance 0 (ignored).
    // package: 69.91739430907396 + 22.16772409328642 · x/5911.969193263386
    // dram:    47.142633336743344 + 3.57348245077466 · x/5911.969193263386
    let m = load(
        data("kepler-model-db/models/v0.6/nx12/std_v0.6/rapl/AbsPower/BPFOnly/SGDRegressorTrainer_1.json"),
        None,
    );
    assert_eq!(m.features(), ["bpf_cpu_time_ms"]);
    // Read from the agent's bpf_cpu_time_ms unchanged...
    let out = predict(&*m, &[("bpf_cpu_time_ms", 1321.0)]);
    assert_components(
        &out,
        &[
            ("package", 74.87066158262463),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 47.94111014931746),
        ],
    );
    // ...or from a bpf_cpu_time_us column when that is all the input has.
    let out = predict(&*m, &[("bpf_cpu_time_us", 29170.0)]);
    assert_rel(out["package"], 179.29423486128698, "package");
    assert_rel(out["dram"], 64.77440367950413, "dram");
    // The canonical name wins when both are present.
    let out = predict(
        &*m,
        &[("bpf_cpu_time_us", 29170.0), ("bpf_cpu_time_ms", 0.0)],
    );
    assert_rel(out["package"], 69.91739430907396, "package");
}

#[test]
fn kepler_bundled_weights_equal_v06_renamed() {
    // Kepler 0.7.11 data/model_weight/intel_rapl_AbsPowerModel.json: the v0.6 weights under
    // bpf_cpu_time_ms. Both files must give the same watts for the same input.
    let bundled = load(
        data("kepler/data/model_weight/intel_rapl_AbsPowerModel.json"),
        None,
    );
    let legacy = load(
        data("kepler-model-db/models/v0.6/nx12/std_v0.6/rapl/AbsPower/BPFOnly/SGDRegressorTrainer_1.json"),
        None,
    );
    for x in [0.0, 1321.0, 29170.0] {
        // Unwrapped: two errors must not count as agreement.
        let input = [("bpf_cpu_time_ms", x)];
        let (a, b) = (predict(&*bundled, &input), predict(&*legacy, &input));
        assert!(!a.is_empty());
        assert_eq!(a, b, "at {x}");
    }
}

#[test]
fn counter_only() {
    // CounterOnly SGDRegressorTrainer_0.json, scales cache_miss 47758890482.0,
    // cpu_cycles 296920248053.6667, cpu_instructions 365426866197.0.
    // package: 69.43312174838155 + 20.102363661298472·cm/s + 334.84667880729324·cc/s
    //          − 1.4860240124587023·ci/s
    // dram:    15.371988516754422 − 0.8793365024691598·cm/s + 13.82667990540526·cc/s
    //          − 1.9214052379039577·ci/s
    let m = load(ec2("CounterOnly/SGDRegressorTrainer_0.json"), None);
    assert_eq!(
        m.features(),
        ["cache_miss", "cpu_cycles", "cpu_instructions"]
    );
    // First row of the nx12 training data.
    let out = predict(
        &*m,
        &[
            ("cache_miss", 5969546.0),
            ("cpu_cycles", 3804367031.6666665),
            ("cpu_instructions", 1884790068.0),
        ],
    );
    assert_components(
        &out,
        &[
            ("package", 73.71827901006807),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 15.539126318736884),
        ],
    );
    let out = predict(
        &*m,
        &[
            ("cache_miss", 1.0e10),
            ("cpu_cycles", 1.5e11),
            ("cpu_instructions", 2.0e11),
        ],
    );
    assert_rel(out["package"], 241.98885649996024, "package");
    assert_rel(out["dram"], 21.12132093472761, "dram");
}

#[test]
fn specpower_acpi_abs_and_dyn() {
    // specpower-0.7.11 acpi node type 0 (intel_xeon_x3360), scale 3991.690709751875:
    // AbsPower platform: 64.09490407710854 + 59.546263263546 · x/scale
    // DynPower platform: 2.3261413222911393 + 59.785960108971096 · x/scale
    let abs = load(
        specpower("AbsPower/BPFOnly/SGDRegressorTrainer_0.json"),
        None,
    );
    let dynp = load(
        specpower("DynPower/BPFOnly/SGDRegressorTrainer_0.json"),
        None,
    );
    assert_eq!(abs.components(), ["platform"]);
    for (x, want_abs, want_dyn) in [
        (0.0, 64.09490407710854, 2.3261413222911393),
        (1000.0, 79.01245846529595, 17.303744662878472),
        (2000.0, 93.93001285348336, 32.2813480034658),
    ] {
        let a = predict(&*abs, &[("bpf_cpu_time_ms", x)]);
        let d = predict(&*dynp, &[("bpf_cpu_time_ms", x)]);
        assert_rel(a["platform"], want_abs, "abs platform");
        assert_rel(d["platform"], want_dyn, "dyn platform");
    }
}

#[test]
fn missing_feature_is_named() {
    let m = load(ec2("CounterOnly/SGDRegressorTrainer_0.json"), None);
    let err = m
        .predict(&[("cpu_cycles", 1.0)])
        .expect_err("missing features must fail");
    let msg = err.to_string();
    assert!(
        msg.contains("cache_miss") && msg.contains("cpu_instructions"),
        "{msg}"
    );
    assert!(!msg.contains("cpu_cycles"), "{msg}");
}

#[test]
fn non_finite_input_is_an_error() {
    let m = load(ec2("BPFOnly/SGDRegressorTrainer_0.json"), None);
    for bad in [f64::NAN, f64::INFINITY, f64::NEG_INFINITY] {
        let err = m
            .predict(&[("bpf_cpu_time_ms", bad)])
            .expect_err("non-finite input must fail");
        assert!(err.to_string().contains("bpf_cpu_time_ms"), "{err}");
    }
}

#[test]
fn map_inputs_work() {
    use std::collections::{BTreeMap, HashMap};
    let m = load(ec2("BPFOnly/SGDRegressorTrainer_0.json"), None);
    let h: HashMap<String, f64> = HashMap::from([("bpf_cpu_time_ms".to_string(), 47938.5)]);
    let b: BTreeMap<&str, f64> = BTreeMap::from([("bpf_cpu_time_ms", 47938.5)]);
    let from_hash = m
        .predict(&h)
        .unwrap_or_else(|e| panic!("HashMap input: {e}"));
    let from_btree = m
        .predict(&b)
        .unwrap_or_else(|e| panic!("BTreeMap input: {e}"));
    assert!(!from_hash.is_empty());
    assert_eq!(from_hash, from_btree);
    assert_eq!(m.name(), Some("SGDRegressorTrainer_0"));
}

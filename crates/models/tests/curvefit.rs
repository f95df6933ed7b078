//! Curve-fit weight JSON files from the model DB, reproduced by hand from their literal
//! parameters. Constants are the same expressions evaluated independently (Python `math`).
//! x = feature / scale; package reads bpf_cpu_time_ms (scale 95877.00000000001 on ec2,
//! 3991.690709751875 on specpower), dram reads bpf_page_cache_hit (scale 1.0).

mod common;

use common::*;
use kepler_models::{load_model, ModelError, ModelKind};

const S: f64 = 95877.00000000001;

#[test]
fn logarithmic() {
    // LogarithmicRegressionTrainer_0.json: a·ln(b·x + 1) + c
    // package [70.64089296454337, 4157417.528323868, -683.4342435027602]
    // dram    [11.673666666666273, 1.0, 21.01685283257353]; core/uncore [0, 1, 0]
    let m = load(ec2("BPFOnly/LogarithmicRegressionTrainer_0.json"), None);
    assert_eq!(m.kind(), ModelKind::Logarithmic);
    assert_eq!(m.features(), ["bpf_cpu_time_ms", "bpf_page_cache_hit"]);
    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 100.0)],
    );
    // 70.64089296454337·ln(4157417.528323868·47938.5/95877.00000000001 + 1) − 683.4342435027602
    //   = 344.197048519233
    // 11.673666666666273·ln(1.0·100 + 1) + 21.01685283257353 = 74.89223137267096
    assert_components(
        &out,
        &[
            ("package", 344.197048519233),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 74.89223137267096),
        ],
    );
    assert_rel(
        out["package"],
        70.64089296454337 * (4157417.528323868 * (47938.5 / S) + 1.0).ln() - 683.4342435027602,
        "package expr",
    );
    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 1000.0), ("bpf_page_cache_hit", 0.0)],
    );
    assert_rel(out["package"], 70.82411403451454, "package @1000");
    assert_rel(out["dram"], 21.01685283257353, "dram @0");
    // At zero CPU the fitted curve gives c = −683.43 W: clamped to 0.
    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 0.0), ("bpf_page_cache_hit", 0.0)],
    );
    assert_eq!(out["package"], 0.0);
}

#[test]
fn exponential() {
    // ExponentialRegressionTrainer_0.json: a·e^(b·x) + c
    // package [1800828.6572112294, 0.00017356410721908495, -1800685.0481741317]
    // dram    [-2305.06675435385, 1.0, 2326.0265443714743]
    let m = load(ec2("BPFOnly/ExponentialRegressionTrainer_0.json"), None);
    assert_eq!(m.kind(), ModelKind::Exponential);
    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 0.0), ("bpf_page_cache_hit", 0.0)],
    );
    // 1800828.6572112294 − 1800685.0481741317 = 143.6090370977763
    // −2305.06675435385 + 2326.0265443714743 = 20.959790017624528
    assert_components(
        &out,
        &[
            ("package", 143.6090370977763),
            ("core", 0.0),
            ("uncore", 0.0),
            ("dram", 20.959790017624528),
        ],
    );
    let out = predict(
        &*m,
        &[("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 0.005)],
    );
    // 1800828.6572112294·e^(0.00017356410721908495·47938.5/95877.00000000001) − 1800685.0481741317
    //   = 299.89542749826796 (the large cancelling terms cost ~1e-10 relative)
    // −2305.06675435385·e^(0.005) + 2326.0265443714743 = 9.405594829114307
    assert_rel(out["package"], 299.89542749826796, "package");
    assert_rel(out["dram"], 9.405594829114307, "dram");
    let out = predict(&*m, &[("bpf_cpu_time_ms", S), ("bpf_page_cache_hit", 1.0)]);
    assert_rel(out["package"], 456.19538134126924, "package @max");
    // −2305.06675435385·e^1 + 2326.0265443714743 = −3939.79 → clamped to 0.
    assert_eq!(out["dram"], 0.0);
}

#[test]
fn logistic_specpower() {
    // specpower acpi AbsPower LogisticRegressionTrainer_0.json, platform:
    // A/(1 + e^(−k(x − x0))) + off with [A, x0, k, off] =
    // [76.95205029898524, 0.3844795925803754, 3.8450142150828293, 48.79654527313572],
    // x = bpf_cpu_time_ms / 3991.690709751875
    let m = load(
        specpower("AbsPower/BPFOnly/LogisticRegressionTrainer_0.json"),
        None,
    );
    assert_eq!(m.kind(), ModelKind::Logistic);
    assert_eq!(m.components(), ["platform"]);
    assert_eq!(m.features(), ["bpf_cpu_time_ms"]);
    for (x, want) in [
        (0.0, 63.084992062770475),
        (1000.0, 77.57696554756238),
        (2000.0, 95.75317331507877),
        (3991.690709751875, 119.15005827892197),
    ] {
        let out = predict(&*m, &[("bpf_cpu_time_ms", x)]);
        assert_rel(out["platform"], want, &format!("platform @{x}"));
    }
    let x: f64 = 1000.0 / 3991.690709751875;
    let expr = 76.95205029898524
        / (1.0 + (-3.8450142150828293_f64 * (x - 0.3844795925803754)).exp())
        + 48.79654527313572;
    let out = predict(&*m, &[("bpf_cpu_time_ms", 1000.0)]);
    assert_rel(out["platform"], expr, "platform expr");
}

#[test]
fn three_values_need_a_trainer() {
    // The same bytes under a name that tells no trainer: ambiguous, a clear error.
    let bytes =
        std::fs::read(ec2("BPFOnly/LogarithmicRegressionTrainer_0.json")).unwrap_or_default();
    let err = kepler_models::load_model_bytes(&bytes, Some("model.json"), None)
        .expect_err("3 values without a trainer are ambiguous");
    assert!(
        err.to_string().contains("LogarithmicRegressionTrainer"),
        "{err}"
    );
    // With the trainer named, the file name does not matter; and the hint decides the curve.
    let log = kepler_models::load_model_bytes(
        &bytes,
        Some("model.json"),
        Some("LogarithmicRegressionTrainer"),
    );
    assert_eq!(log.map(|m| m.kind()).ok(), Some(ModelKind::Logarithmic));
    let exp = kepler_models::load_model_bytes(&bytes, None, Some("ExponentialRegressionTrainer_0"));
    assert_eq!(exp.map(|m| m.kind()).ok(), Some(ModelKind::Exponential));
}

#[test]
fn trainer_mismatch_and_unknown_trainer() {
    let log = ec2("BPFOnly/LogarithmicRegressionTrainer_0.json");
    let err = load_model(&log, Some("SGDRegressorTrainer")).expect_err("mismatch");
    assert!(matches!(err, ModelError::TrainerMismatch { .. }), "{err}");
    let err = load_model(&log, Some("LogisticRegressionTrainer")).expect_err("mismatch");
    assert!(matches!(err, ModelError::TrainerMismatch { .. }), "{err}");
    let err = load_model(&log, Some("BogusTrainer")).expect_err("unknown");
    assert!(matches!(err, ModelError::UnknownTrainer { .. }), "{err}");
    let sgd = ec2("BPFOnly/SGDRegressorTrainer_0.json");
    let err = load_model(&sgd, Some("ExponentialRegressionTrainer")).expect_err("mismatch");
    assert!(matches!(err, ModelError::TrainerMismatch { .. }), "{err}");
}

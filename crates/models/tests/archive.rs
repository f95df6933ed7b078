//! Model archives (.zip) from the model DB.

mod common;

use common::*;
use kepler_models::{load_model, ModelError, ModelKind};

/// XGBoost reference values, computed with the real library on the archive's own files:
///
/// ```text
/// python3 -m venv /tmp/xgbenv
/// /tmp/xgbenv/bin/pip install xgboost==2.1.1 scikit-learn==1.5.1 joblib   # numpy 2.4.6 came along
/// cd /tmp/xgbref && unzip .../BPFOnly/XgboostFitTrainer_0.zip
/// /tmp/xgbenv/bin/python - <<'PY'
/// import joblib, numpy as np, xgboost as xgb
/// scaler = joblib.load("scaler.pkl")          # scale_ == [95877.00000000001, 1.0]
/// X = np.array([[0.0, 0.0], [1000.0, 0.0], [10000.0, 0.0], [47938.5, 0.0], [95877.0, 0.0],
///               [120000.0, 5.0], [30000.0, 1234.0], [2500.0, 0.5]])
/// for comp in ["package", "core", "uncore", "dram"]:
///     m = xgb.XGBRegressor(); m.load_model(comp + ".json")
///     print(comp, [repr(float(v)) for v in m.predict(scaler.transform(X))])
/// PY
/// ```
/// (the model server's own path: MaxAbsScaler.transform, then XGBRegressor.predict).
const XGB_INPUTS: [(f64, f64); 8] = [
    (0.0, 0.0),
    (1000.0, 0.0),
    (10000.0, 0.0),
    (47938.5, 0.0),
    (95877.0, 0.0),
    (120000.0, 5.0),
    (30000.0, 1234.0),
    (2500.0, 0.5),
];
const XGB_PACKAGE: [f64; 8] = [
    59.26039123535156,
    59.26039123535156,
    283.8194580078125,
    336.07525634765625,
    405.2313232421875,
    405.2313232421875,
    245.48182678222656,
    270.7401123046875,
];
const XGB_DRAM: [f64; 8] = [
    14.217333793640137,
    14.217333793640137,
    24.35083770751953,
    24.489212036132812,
    25.241243362426758,
    25.241243362426758,
    22.09116554260254,
    24.155288696289062,
];

#[test]
fn xgboost_archive_matches_xgboost_library() {
    let m = load(ec2("BPFOnly/XgboostFitTrainer_0.zip"), None);
    assert_eq!(m.kind(), ModelKind::Xgboost);
    assert_eq!(m.name(), Some("XgboostFitTrainer_0"));
    assert_eq!(m.components(), ["package", "core", "uncore", "dram"]);
    // No tree splits on bpf_page_cache_hit (it was all zero in training).
    assert_eq!(m.features(), ["bpf_cpu_time_ms"]);
    assert_eq!(
        m.declared_features(),
        ["bpf_cpu_time_ms", "bpf_page_cache_hit"]
    );
    for (i, (cpu, pch)) in XGB_INPUTS.iter().enumerate() {
        let out = predict(
            &*m,
            &[("bpf_cpu_time_ms", *cpu), ("bpf_page_cache_hit", *pch)],
        );
        // Exact: XGBoost sums f32 leaves and so does the loader, in the same order; the
        // references are those f32 sums widened to f64.
        let close = |c: &str, want: f64| {
            let got = out[c];
            assert_eq!(
                got.to_bits(),
                want.to_bits(),
                "{c} at {cpu}: got {got}, want {want}"
            );
        };
        close("package", XGB_PACKAGE[i]);
        close("dram", XGB_DRAM[i]);
        close("core", 0.0);
        close("uncore", 0.0);
    }
}

#[test]
fn sgd_archive_equals_its_weight_json() {
    // The archive holds pickled SGDRegressors (coef_/intercept_) and the MaxAbs scaler; the
    // weight JSON holds the same numbers. Both must agree.
    let zip = load(ec2("BPFOnly/SGDRegressorTrainer_0.zip"), None);
    let json = load(ec2("BPFOnly/SGDRegressorTrainer_0.json"), None);
    assert_eq!(zip.kind(), ModelKind::Linear);
    assert_eq!(zip.components(), json.components());
    for cpu in [0.0, 12345.6, 47938.5, 95877.0] {
        let input = [("bpf_cpu_time_ms", cpu), ("bpf_page_cache_hit", 0.0)];
        let a = predict(&*zip, &input);
        let b = predict(&*json, &input);
        for c in json.components() {
            assert_rel(a[&c], b[&c], &c);
        }
    }
    // And the DESIGN worked example directly.
    let out = predict(
        &*zip,
        &[("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 0.0)],
    );
    assert_rel(out["package"], 296.38614968990055, "package");
    assert_rel(out["dram"], 22.833390256127483, "dram");
}

#[test]
fn logarithmic_archive_equals_its_weight_json() {
    // Pickled CurveFitModel: fit_func log_func, popt, feature_index 0 (package) / 1 (dram).
    let zip = load(ec2("BPFOnly/LogarithmicRegressionTrainer_0.zip"), None);
    let json = load(ec2("BPFOnly/LogarithmicRegressionTrainer_0.json"), None);
    assert_eq!(zip.kind(), ModelKind::Logarithmic);
    assert_eq!(zip.features(), json.features());
    for (cpu, pch) in [(1000.0, 0.0), (47938.5, 100.0), (95877.0, 3.0)] {
        let input = [("bpf_cpu_time_ms", cpu), ("bpf_page_cache_hit", pch)];
        let a = predict(&*zip, &input);
        let b = predict(&*json, &input);
        for c in json.components() {
            assert_rel(a[&c], b[&c], &c);
        }
    }
}

#[test]
fn gradient_boosting_archive_is_unsupported() {
    let err = load_model(&ec2("BPFOnly/GradientBoostingRegressorTrainer_0.zip"), None)
        .expect_err("sklearn GBR pickles are not evaluated");
    assert!(matches!(err, ModelError::Unsupported(_)), "{err}");
    assert!(
        err.to_string().contains("GradientBoostingRegressorTrainer"),
        "{err}"
    );
}

#[test]
fn archive_trainer_hint_must_match() {
    let err = load_model(
        &ec2("BPFOnly/XgboostFitTrainer_0.zip"),
        Some("SGDRegressorTrainer"),
    )
    .expect_err("mismatch");
    assert!(matches!(err, ModelError::TrainerMismatch { .. }), "{err}");
    let err = load_model(
        &ec2("BPFOnly/LogarithmicRegressionTrainer_0.zip"),
        Some("ExponentialRegressionTrainer"),
    )
    .expect_err("mismatch");
    assert!(matches!(err, ModelError::TrainerMismatch { .. }), "{err}");
}

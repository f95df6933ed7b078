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

/// Pickle bytes of a short unicode string (protocol 4 `SHORT_BINUNICODE`).
fn pickle_str(out: &mut Vec<u8>, s: &str) {
    out.push(0x8c);
    out.push(u8::try_from(s.len()).expect("short string"));
    out.extend_from_slice(s.as_bytes());
}

/// `numpy.dtype('f8')` with its BUILD state, as NumPy pickles it.
fn pickle_dtype_f8(out: &mut Vec<u8>) {
    pickle_str(out, "numpy");
    pickle_str(out, "dtype");
    out.push(0x93); // STACK_GLOBAL
    pickle_str(out, "f8");
    out.extend_from_slice(b"\x89\x88\x87R"); // (f8, False, True) REDUCE
    out.extend_from_slice(b"(K\x03");
    pickle_str(out, "<");
    out.extend_from_slice(b"NNNJ\xff\xff\xff\xffJ\xff\xff\xff\xffK\x00tb");
}

/// A `LinearRegression` as joblib pickles one fitted on a 1-D target: `coef_` a float64
/// array (joblib's NumpyArrayWrapper, then the raw bytes after 16-byte alignment padding)
/// and `intercept_` a NumPy scalar, `numpy.core.multiarray.scalar(dtype, 8 raw bytes)`.
fn linear_regression_pickle(coef: &[f64], intercept: f64) -> Vec<u8> {
    let mut b = vec![0x80, 4];
    pickle_str(&mut b, "sklearn.linear_model._base");
    pickle_str(&mut b, "LinearRegression");
    b.extend_from_slice(b"\x93)\x81}(");
    pickle_str(&mut b, "fit_intercept");
    b.push(0x88);
    pickle_str(&mut b, "coef_");
    pickle_str(&mut b, "joblib.numpy_pickle");
    pickle_str(&mut b, "NumpyArrayWrapper");
    b.extend_from_slice(b"\x93)\x81}(");
    pickle_str(&mut b, "shape");
    b.push(b'K');
    b.push(u8::try_from(coef.len()).expect("few coefficients"));
    b.push(0x85);
    pickle_str(&mut b, "order");
    pickle_str(&mut b, "C");
    pickle_str(&mut b, "dtype");
    pickle_dtype_f8(&mut b);
    pickle_str(&mut b, "numpy_array_alignment_bytes");
    b.extend_from_slice(b"K\x10ub");
    b.push(3); // padding length, then the padding
    b.extend_from_slice(&[0xff; 3]);
    for c in coef {
        b.extend_from_slice(&c.to_le_bytes());
    }
    pickle_str(&mut b, "intercept_");
    pickle_str(&mut b, "numpy.core.multiarray");
    pickle_str(&mut b, "scalar");
    b.push(0x93);
    pickle_dtype_f8(&mut b);
    b.extend_from_slice(b"C\x08");
    b.extend_from_slice(&intercept.to_le_bytes());
    b.extend_from_slice(b"\x86R"); // (dtype, bytes) REDUCE
    pickle_str(&mut b, "n_features_in_");
    b.extend_from_slice(b"K\x02ub.");
    b
}

/// The published ec2 `LinearRegressionTrainer_*.zip` archives failed with "no float64 array
/// intercept_": their intercept is a NumPy scalar. None is in ../shared/data, so this builds
/// one from the published SGD archive (same scaler, component map and layout), with
/// LinearRegression pickles carrying the SGD weight JSON's numbers; it must then predict
/// what that weight JSON predicts.
#[test]
fn linear_regression_archive_with_a_numpy_scalar_intercept_loads() {
    use std::io::{Cursor, Read, Write};

    let json_path = ec2("BPFOnly/SGDRegressorTrainer_0.json");
    let weights: serde_json::Value =
        serde_json::from_slice(&std::fs::read(&json_path).expect("weight JSON")).expect("JSON");
    let reference = load(json_path, None);
    let features = ["bpf_cpu_time_ms", "bpf_page_cache_hit"];

    let src_bytes = std::fs::read(ec2("BPFOnly/SGDRegressorTrainer_0.zip")).expect("archive");
    let mut src = zip::ZipArchive::new(Cursor::new(&src_bytes)).expect("zip");
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..src.len() {
        let mut f = src.by_index(i).expect("member");
        let name = f.name().to_string();
        let mut content = Vec::new();
        f.read_to_end(&mut content).expect("read");
        if let Some(component) = name.strip_suffix(".pkl").filter(|c| *c != "scaler") {
            let w = &weights[component]["All_Weights"];
            let coef: Vec<f64> = features
                .iter()
                .map(|f| {
                    w["Numerical_Variables"][f]["weight"]
                        .as_f64()
                        .expect("weight")
                })
                .collect();
            let bias = w["Bias_Weight"].as_f64().expect("bias");
            content = linear_regression_pickle(&coef, bias);
        } else if name == "metadata.json" {
            content = String::from_utf8(content)
                .expect("UTF-8")
                .replace("\"SGDRegressorTrainer_0\"", "\"LinearRegressionTrainer_0\"")
                .into_bytes();
        }
        out.start_file(name.as_str(), opts).expect("start");
        out.write_all(&content).expect("write");
    }
    let archive = out.finish().expect("finish").into_inner();

    let model =
        kepler_models::load_model_bytes(&archive, Some("LinearRegressionTrainer_0.zip"), None)
            .unwrap_or_else(|e| panic!("LinearRegression archive: {e}"));
    assert_eq!(model.kind(), ModelKind::Linear);
    assert_eq!(model.name(), Some("LinearRegressionTrainer_0"));
    assert_eq!(model.components(), reference.components());
    for cpu in [0.0, 12345.6, 47938.5, 95877.0] {
        let input = [("bpf_cpu_time_ms", cpu), ("bpf_page_cache_hit", 0.0)];
        let a = predict(&*model, &input);
        let b = predict(&*reference, &input);
        for c in reference.components() {
            assert_rel(a[&c], b[&c], &c);
        }
    }
}

//! Broken and hostile model files give errors, never panics.

mod common;

use std::io::{Cursor, Read, Write};

use common::*;
use kepler_models::{load_model_bytes, ModelError, Predictor};
use proptest::prelude::*;

fn bytes(path: std::path::PathBuf) -> Vec<u8> {
    std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn load_json(text: &str) -> Result<Box<dyn Predictor>, ModelError> {
    load_model_bytes(text.as_bytes(), Some("SGDRegressorTrainer_0.json"), None)
}

/// Loading must not panic; when it succeeds, predicting must not panic either.
fn exercise(data: &[u8], name: Option<&str>, trainer: Option<&str>) -> bool {
    match load_model_bytes(data, name, trainer) {
        Ok(m) => {
            for x in [0.0, 1.0, 47938.5, 1e12] {
                let input: Vec<(kepler_models::Feature, f64)> =
                    m.declared_features().into_iter().map(|f| (f, x)).collect();
                if let Ok(out) = m.predict(&input) {
                    assert!(
                        out.iter().all(|(_, w)| w.is_finite() && *w >= 0.0),
                        "{out:?}"
                    );
                }
            }
            true
        }
        Err(e) => {
            assert!(!e.to_string().is_empty());
            false
        }
    }
}

/// Rebuilds an archive with one member replaced (stored, uncompressed).
fn replace_member(zip_bytes: &[u8], member: &str, data: &[u8]) -> Vec<u8> {
    let mut src = zip::ZipArchive::new(Cursor::new(zip_bytes)).expect("source archive");
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for i in 0..src.len() {
        let mut f = src.by_index(i).expect("member");
        let name = f.name().to_string();
        let mut content = Vec::new();
        f.read_to_end(&mut content).expect("read member");
        out.start_file(name.as_str(), opts).expect("start");
        out.write_all(if name == member { data } else { &content })
            .expect("write");
    }
    out.finish().expect("finish").into_inner()
}

#[test]
fn truncated_archives_are_errors() {
    let zip = bytes(ec2("BPFOnly/XgboostFitTrainer_0.zip"));
    // Every cut in the last 2 KB (central directory and end record) and a spread of others.
    let cuts = (0..zip.len())
        .step_by(997)
        .chain(zip.len().saturating_sub(2048)..zip.len());
    for cut in cuts {
        let err = load_model_bytes(&zip[..cut], Some("XgboostFitTrainer_0.zip"), None);
        assert!(err.is_err(), "archive cut at {cut} of {} loaded", zip.len());
    }
}

#[test]
fn wrong_json_shapes_are_errors() {
    let cases = [
        ("", "empty", "empty"),
        ("[]", "array", "JSON array"),
        ("{}", "no components", "no component"),
        (
            r#"{"model_name": "x", "mae": 3}"#,
            "metadata only",
            "no component",
        ),
        (r#"{"package": {}}"#, "no All_Weights", "has no All_Weights"),
        (
            r#"{"package": {"All_Weights": []}}"#,
            "All_Weights array",
            "All_Weights must be an object",
        ),
        (
            r#"{"package": {"All_Weights": {"Bias_Weight": 1.0}}}"#,
            "no Numerical_Variables",
            "Numerical_Variables",
        ),
        (
            r#"{"package": {"All_Weights": {"Bias_Weight": 1, "Numerical_Variables": {"x": {"scale": "1", "weight": 1}}}}}"#,
            "string scale",
            "x.scale must be a number",
        ),
        (
            r#"{"package": {"All_Weights": {"Bias_Weight": 1, "Numerical_Variables": {"x": {"scale": 0, "weight": 1}}}}}"#,
            "zero scale",
            "scale 0",
        ),
        (
            r#"{"package": {"All_Weights": {"Bias_Weight": 1, "Numerical_Variables": {"x": {"scale": 1}}}}}"#,
            "no weight",
            "has no weight",
        ),
        (
            r#"{"package": {"All_Weights": {"Numerical_Variables": {"x": {"scale": 1, "weight": 1}}}}}"#,
            "no bias",
            "Bias_Weight",
        ),
        (
            r#"{"package": {"All_Weights": {"Bias_Weight": 1, "Categorical_Variables": {"cpu": {"x86": {"weight": 1}}}, "Numerical_Variables": {}}}}"#,
            "categorical",
            "categorical",
        ),
        (
            r#"{"package": {"All_Weights": {"Numerical_Variables": {"x": {"scale": 1}}, "CurveFit_Weights": [1, 2, 3, 4, 5]}}}"#,
            "5 curve values",
            "5 CurveFit_Weights",
        ),
        (
            r#"{"package": {"All_Weights": {"Numerical_Variables": {"x": {"scale": 1}}, "CurveFit_Weights": "abc"}}}"#,
            "curve not an array",
            "must be an array",
        ),
        (
            r#"{"package": {"All_Weights": {"Numerical_Variables": {}, "CurveFit_Weights": [1, 2, 3, 4]}}}"#,
            "curve without a feature",
            "needs a feature",
        ),
        (r#"{"learner": {}}"#, "bare xgboost", "bare XGBoost"),
        (
            r#"{"model_class": "xgboost", "model_file": "a.json"}"#,
            "metadata.json",
            "metadata.json",
        ),
        ("PK\u{3}\u{4}garbage", "zip magic only", "archive"),
        ("\u{80}\u{4}\u{95}", "bare pickle", "pickle"),
    ];
    for (text, what, want) in cases {
        // "\u{80}" is a pickle PROTO byte only as raw bytes.
        let data = if what == "bare pickle" {
            b"\x80\x04\x95".to_vec()
        } else {
            text.as_bytes().to_vec()
        };
        let r = load_model_bytes(&data, Some("model.json"), None);
        let err = r
            .err()
            .map(|e| e.to_string())
            .unwrap_or_else(|| panic!("{what}: loaded"));
        assert!(err.contains(want), "{what}: {err}");
    }
}

#[test]
fn unknown_feature_names_are_errors_naming_them() {
    // A feature Kepler does not have (the model server's cgroup group): found at load, by
    // name, rather than as a missing input on the first prediction.
    let sgd =
        String::from_utf8(bytes(ec2("BPFOnly/SGDRegressorTrainer_0.json"))).unwrap_or_default();
    let text = sgd.replace("bpf_page_cache_hit", "cgroupfs_cpu_usage_us");
    assert_ne!(text, sgd);
    let err = load_json(&text).expect_err("unknown feature");
    assert!(
        matches!(&err, ModelError::UnknownFeature { name } if name == "cgroupfs_cpu_usage_us"),
        "{err}"
    );
    assert!(err.to_string().contains("cgroupfs_cpu_usage_us"), "{err}");
    // The same in an archive's component map.
    let zip = bytes(ec2("BPFOnly/XgboostFitTrainer_0.zip"));
    let mut src = zip::ZipArchive::new(Cursor::new(zip.as_slice())).expect("archive");
    let mut map = String::new();
    src.by_name("XgboostFitTrainer_0.json")
        .expect("member")
        .read_to_string(&mut map)
        .expect("read");
    let renamed = map.replacen("bpf_page_cache_hit", "gpu_sm_util", 1);
    assert_ne!(renamed, map);
    let patched = replace_member(&zip, "XgboostFitTrainer_0.json", renamed.as_bytes());
    let err = load_model_bytes(&patched, None, None).expect_err("unknown feature");
    assert!(err.to_string().contains("\"gpu_sm_util\""), "{err}");
    // The legacy spelling of the CPU-time feature is no unknown feature.
    let legacy = sgd.replace("bpf_cpu_time_ms", "bpf_cpu_time_us");
    assert_eq!(
        load_json(&legacy).expect("legacy name").features(),
        [kepler_models::Feature::BpfCpuTimeMs]
    );
}

#[test]
fn nan_and_overflowing_weights_are_errors() {
    let sgd =
        String::from_utf8(bytes(ec2("BPFOnly/SGDRegressorTrainer_0.json"))).unwrap_or_default();
    // Python's json.dumps writes NaN/Infinity literals for non-finite floats.
    for bad in ["NaN", "Infinity", "-Infinity", "1e400"] {
        let text = sgd.replacen("305.148172889668", bad, 1);
        assert_ne!(text, sgd);
        let err = load_json(&text).expect_err(bad);
        if bad != "1e400" {
            assert!(
                matches!(err, ModelError::NonFiniteWeight(_)),
                "{bad}: {err}"
            );
        }
    }
    // A NaN in an XGBoost tree inside an archive.
    let zip = bytes(ec2("BPFOnly/XgboostFitTrainer_0.zip"));
    let mut src = zip::ZipArchive::new(Cursor::new(zip.as_slice())).expect("archive");
    let mut pkg = String::new();
    src.by_name("package.json")
        .expect("member")
        .read_to_string(&mut pkg)
        .expect("read");
    let broken = pkg.replacen("\"split_conditions\":[", "\"split_conditions\":[NaN,", 1);
    let patched = replace_member(&zip, "package.json", broken.as_bytes());
    assert!(load_model_bytes(&patched, None, None).is_err());
}

#[test]
fn weight_json_with_a_byte_order_mark_loads() {
    // Editors on Windows save UTF-8 with a BOM; the sniffer skips it, so the parser must too.
    let sgd = bytes(ec2("BPFOnly/SGDRegressorTrainer_0.json"));
    let mut with_bom = b"\xef\xbb\xbf".to_vec();
    with_bom.extend_from_slice(&sgd);
    let name = Some("SGDRegressorTrainer_0.json");
    let a = load_model_bytes(&with_bom, name, None).expect("JSON with a BOM");
    let b = load_model_bytes(&sgd, name, None).expect("JSON");
    let input = [("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 0.0)];
    assert_eq!(predict(&*a, &input), predict(&*b, &input));
}

#[cfg(unix)]
#[test]
fn endless_files_are_cut_at_the_size_limit() {
    // /dev/zero reports length 0 yet never ends: the read itself must stop at the limit.
    let err = kepler_models::load_model("/dev/zero".as_ref(), None).expect_err("endless");
    assert!(
        matches!(err, ModelError::TooLarge { size, limit, .. }
            if limit == kepler_models::MAX_MODEL_FILE_BYTES && size > limit),
        "{err}"
    );
}

#[test]
fn unknown_trainers_are_errors() {
    let sgd = bytes(ec2("BPFOnly/SGDRegressorTrainer_0.json"));
    let err = load_model_bytes(&sgd, None, Some("FancyNetTrainer")).expect_err("hint");
    assert!(matches!(err, ModelError::UnknownTrainer { .. }), "{err}");
    let err = load_model_bytes(&sgd, Some("FancyNetTrainer_0.json"), None).expect_err("name");
    assert!(matches!(err, ModelError::UnknownTrainer { .. }), "{err}");
    // A file name that names no trainer is fine for linear weights (Kepler's bundled files).
    assert!(load_model_bytes(&sgd, Some("intel_rapl_AbsPowerModel.json"), None).is_ok());
}

#[test]
fn archive_with_foreign_scaler_is_unsupported() {
    // Replace the MaxAbsScaler pickle by the SGDRegressor pickle: a clear error naming it.
    let zip = bytes(ec2("BPFOnly/SGDRegressorTrainer_0.zip"));
    let mut src = zip::ZipArchive::new(Cursor::new(zip.as_slice())).expect("archive");
    let mut pkl = Vec::new();
    src.by_name("package.pkl")
        .expect("member")
        .read_to_end(&mut pkl)
        .expect("read");
    let patched = replace_member(&zip, "scaler.pkl", &pkl);
    let err = load_model_bytes(&patched, None, None).expect_err("foreign scaler");
    assert!(err.to_string().contains("SGDRegressor"), "{err}");
}

#[test]
fn exploding_curve_is_an_error_not_infinity() {
    let m = load(ec2("BPFOnly/ExponentialRegressionTrainer_0.json"), None);
    let err = m
        .predict(&[("bpf_cpu_time_ms", 1e12), ("bpf_page_cache_hit", 0.0)])
        .expect_err("e^1810 overflows");
    assert!(
        matches!(err, ModelError::NonFinitePrediction { .. }),
        "{err}"
    );
}

/// Byte-level mutations: (position fraction, new byte) pairs.
fn mutations() -> impl Strategy<Value = Vec<(f64, u8)>> {
    prop::collection::vec((0.0f64..1.0, any::<u8>()), 1..8)
}

fn mutate(data: &[u8], muts: &[(f64, u8)]) -> Vec<u8> {
    let mut out = data.to_vec();
    for (at, b) in muts {
        let i = ((*at * out.len() as f64) as usize).min(out.len().saturating_sub(1));
        if let Some(slot) = out.get_mut(i) {
            *slot = *b;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, ..ProptestConfig::default() })]

    #[test]
    fn mutated_weight_json_never_panics(muts in mutations(), which in 0usize..4) {
        let files = [
            ec2("BPFOnly/SGDRegressorTrainer_0.json"),
            ec2("BPFOnly/LogarithmicRegressionTrainer_0.json"),
            ec2("BPFOnly/ExponentialRegressionTrainer_0.json"),
            specpower("AbsPower/BPFOnly/LogisticRegressionTrainer_0.json"),
        ];
        let path = &files[which];
        let name = path.file_name().and_then(|n| n.to_str()).map(str::to_string);
        exercise(&mutate(&bytes(path.clone()), &muts), name.as_deref(), None);
    }

    #[test]
    fn mutated_archive_never_panics(muts in mutations(), which in 0usize..3, cut in 0.0f64..1.0) {
        let files = [
            ec2("BPFOnly/XgboostFitTrainer_0.zip"),
            ec2("BPFOnly/SGDRegressorTrainer_0.zip"),
            ec2("BPFOnly/LogarithmicRegressionTrainer_0.zip"),
        ];
        let data = mutate(&bytes(files[which].clone()), &muts);
        let end = ((cut * 1.2) * data.len() as f64) as usize;
        exercise(&data[..end.min(data.len())], None, None);
    }

    #[test]
    fn mutated_members_never_panic(muts in mutations(), member in 0usize..5) {
        // Members rewritten uncompressed, so the mutation reaches the pickle/JSON parsers
        // instead of failing the CRC check.
        let (archive, name) = [
            ("BPFOnly/XgboostFitTrainer_0.zip", "scaler.pkl"),
            ("BPFOnly/XgboostFitTrainer_0.zip", "core.json"),
            ("BPFOnly/XgboostFitTrainer_0.zip", "XgboostFitTrainer_0.json"),
            ("BPFOnly/SGDRegressorTrainer_0.zip", "package.pkl"),
            ("BPFOnly/LogarithmicRegressionTrainer_0.zip", "dram.pkl"),
        ][member];
        let zip = bytes(ec2(archive));
        let mut src = zip::ZipArchive::new(Cursor::new(zip.as_slice())).expect("archive");
        let mut content = Vec::new();
        src.by_name(name).expect("member").read_to_end(&mut content).expect("read");
        let patched = replace_member(&zip, name, &mutate(&content, &muts));
        exercise(&patched, None, None);
    }

    #[test]
    fn random_bytes_never_panic(data in prop::collection::vec(any::<u8>(), 0..512)) {
        exercise(&data, None, None);
        let mut zipish = b"PK\x03\x04".to_vec();
        zipish.extend_from_slice(&data);
        prop_assert!(!exercise(&zipish, None, None));
    }
}

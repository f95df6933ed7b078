//! Shared helpers: paths into the copy of the published model DB in `data/` and tolerant
//! comparisons.
#![allow(dead_code)]

use std::collections::HashMap;
use std::path::PathBuf;

use kepler_models::{load_model, Predictor};

/// A file of the repository's `data/` directory (public files copied unmodified, see data/README.md).
pub fn data(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data")
        .join(rel)
}

/// A file of the ec2-0.7.11 RAPL AbsPower pipeline.
pub fn ec2(rel: &str) -> PathBuf {
    data(&format!(
        "kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/{rel}"
    ))
}

pub fn specpower(rel: &str) -> PathBuf {
    data(&format!(
        "kepler-model-db/models/v0.7/specpower-0.7.11/acpi/{rel}"
    ))
}

pub fn load(path: PathBuf, trainer: Option<&str>) -> Box<dyn Predictor> {
    match load_model(&path, trainer) {
        Ok(m) => m,
        Err(e) => panic!("loading {}: {e}", path.display()),
    }
}

/// Predicts and returns component → watts.
pub fn predict(model: &dyn Predictor, input: &[(&str, f64)]) -> HashMap<String, f64> {
    let input: Vec<(&str, f64)> = input.to_vec();
    match model.predict(&input) {
        Ok(out) => out.into_iter().collect(),
        Err(e) => panic!("predict {input:?}: {e}"),
    }
}

/// Asserts |got − want| ≤ 1e-9·|want| (or ≤ 1e-12 near zero).
#[track_caller]
pub fn assert_rel(got: f64, want: f64, what: &str) {
    let tol = (want.abs() * 1e-9).max(1e-12);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got}, want {want} (diff {})",
        (got - want).abs()
    );
}

#[track_caller]
pub fn assert_components(out: &HashMap<String, f64>, want: &[(&str, f64)]) {
    assert_eq!(out.len(), want.len(), "components {out:?}");
    for (c, w) in want {
        let got = out.get(*c).copied().unwrap_or(f64::NAN);
        assert_rel(got, *w, c);
    }
}

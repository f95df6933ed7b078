//! Fuzz targets for model files as the agent downloads them and the model server reads or
//! accepts them: weight JSON with its numbers swapped for odd ones, archives (zip) whose
//! members (pickled scalers and models, XGBoost JSON) are mutated and rewritten, whole archives
//! mutated or cut, and random bytes. Loading never panics; a model that loads predicts finite,
//! non-negative watts or says why not. `KEPLER_FUZZ_CASES` sets the cases per target
//! (docs/security.md records the long local runs); tests/bad_files.rs holds the named cases.

mod common;

use std::io::{Cursor, Read, Write};
use std::sync::OnceLock;

use common::*;
use kepler_models::{load_model_bytes, Feature};
use kepler_testkit::fuzz::{edits, mutate};
use proptest::prelude::*;
use serde_json::Value;

/// Loading must not panic; a model that loads must predict finite, non-negative watts or
/// return an error.
fn exercise(data: &[u8], name: Option<&str>) -> Result<bool, TestCaseError> {
    let Ok(model) = load_model_bytes(data, name, None) else {
        return Ok(false);
    };
    for x in [0.0, 1.0, 47938.5, 1e12, -3.0] {
        let input: Vec<(Feature, f64)> = model
            .declared_features()
            .into_iter()
            .map(|f| (f, x))
            .collect();
        if let Ok(out) = model.predict(&input) {
            prop_assert!(
                out.iter().all(|(_, w)| w.is_finite() && *w >= 0.0),
                "{out:?}"
            );
        }
    }
    Ok(true)
}

/// An archive's bytes, and its members' names and contents.
type Archive = (Vec<u8>, Vec<(String, Vec<u8>)>);

struct Seeds {
    /// (file name, weight JSON).
    json: Vec<(String, Vec<u8>)>,
    archives: Vec<Archive>,
}

fn seeds() -> &'static Seeds {
    static SEEDS: OnceLock<Seeds> = OnceLock::new();
    SEEDS.get_or_init(|| {
        let read = |p: std::path::PathBuf| {
            std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        };
        let json = [
            ec2("BPFOnly/SGDRegressorTrainer_0.json"),
            ec2("BPFOnly/LogarithmicRegressionTrainer_0.json"),
            ec2("BPFOnly/ExponentialRegressionTrainer_0.json"),
            specpower("AbsPower/BPFOnly/LogisticRegressionTrainer_0.json"),
        ]
        .into_iter()
        .map(|p| {
            let name = p
                .file_name()
                .and_then(|n| n.to_str())
                .unwrap_or_default()
                .to_owned();
            (name, read(p))
        })
        .collect();
        let archives = [
            "BPFOnly/XgboostFitTrainer_0.zip",
            "BPFOnly/SGDRegressorTrainer_0.zip",
            "BPFOnly/LogarithmicRegressionTrainer_0.zip",
            "BPFOnly/GradientBoostingRegressorTrainer_0.zip",
        ]
        .into_iter()
        .map(|a| {
            let zip = read(ec2(a));
            let mut archive = zip::ZipArchive::new(Cursor::new(zip.clone()))
                .unwrap_or_else(|e| panic!("{a}: {e}"));
            let members = (0..archive.len())
                .map(|i| {
                    let mut f = archive.by_index(i).unwrap_or_else(|e| panic!("{a}: {e}"));
                    let mut content = Vec::new();
                    f.read_to_end(&mut content)
                        .unwrap_or_else(|e| panic!("{a}: {e}"));
                    (f.name().to_owned(), content)
                })
                .collect();
            (zip, members)
        })
        .collect();
        Seeds { json, archives }
    })
}

/// The members written back uncompressed (so that a mutation reaches the pickle and JSON
/// parsers instead of failing the CRC), one of them replaced.
fn rebuild(members: &[(String, Vec<u8>)], replace: usize, data: &[u8]) -> Vec<u8> {
    let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
    let opts =
        zip::write::SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
    for (i, (name, content)) in members.iter().enumerate() {
        if out.start_file(name.as_str(), opts).is_err() {
            return Vec::new();
        }
        let _ = out.write_all(if i == replace { data } else { content });
    }
    out.finish().map(Cursor::into_inner).unwrap_or_default()
}

fn odd_number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<f64>().prop_map(|x| serde_json::json!(x)),
        any::<i64>().prop_map(|x| serde_json::json!(x)),
        (-1e3f64..1e3).prop_map(|x| serde_json::json!(x)),
        Just(serde_json::json!(1e308)),
        Just(serde_json::json!(-1e308)),
        Just(serde_json::json!("NaN")),
        Just(Value::Null),
        Just(serde_json::json!([])),
        Just(serde_json::json!({})),
    ]
}

/// Replaces the `n`th number (in document order) of `v` with `with`; returns how many it saw.
fn swap_number(v: &mut Value, n: usize, with: &Value, seen: &mut usize) {
    match v {
        Value::Number(_) => {
            if *seen == n {
                *v = with.clone();
            }
            *seen += 1;
        }
        Value::Array(items) => items.iter_mut().for_each(|i| swap_number(i, n, with, seen)),
        Value::Object(map) => map.values_mut().for_each(|i| swap_number(i, n, with, seen)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(1024))]

    #[test]
    fn weight_json(which in 0usize..4, swaps in prop::collection::vec((0usize..64, odd_number()), 0..4), edits in edits()) {
        let (name, bytes) = &seeds().json[which];
        let mut doc: Value = serde_json::from_slice(bytes).map_err(|e| TestCaseError::fail(e.to_string()))?;
        for (n, with) in &swaps {
            swap_number(&mut doc, *n, with, &mut 0);
        }
        let text = serde_json::to_vec(&doc).unwrap_or_default();
        if swaps.is_empty() {
            prop_assert!(exercise(&text, Some(name))?, "the published {name} loads");
        } else {
            exercise(&text, Some(name))?;
        }
        exercise(&mutate(text, &edits), Some(name))?;
    }

    #[test]
    fn archive_members(which in 0usize..4, member in 0usize..8, edits in edits()) {
        let (_, members) = &seeds().archives[which];
        let member = member % members.len().max(1);
        let Some((_, content)) = members.get(member) else {
            return Ok(());
        };
        let zip = rebuild(members, member, &mutate(content.clone(), &edits));
        exercise(&zip, None)?;
    }

    #[test]
    fn whole_archives(which in 0usize..4, edits in edits(), cut in 0.0f64..1.2) {
        let (zip, _) = &seeds().archives[which];
        let data = mutate(zip.clone(), &edits);
        let end = ((cut * data.len() as f64) as usize).min(data.len());
        exercise(&data[..end], None)?;
    }

    #[test]
    fn random_bytes(data in prop::collection::vec(any::<u8>(), 0..512)) {
        exercise(&data, None)?;
        exercise(&data, Some("SGDRegressorTrainer_0.json"))?;
        let mut zipish = b"PK\x03\x04".to_vec();
        zipish.extend_from_slice(&data);
        prop_assert!(!exercise(&zipish, None)?);
    }
}

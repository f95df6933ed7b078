//! The committed built-in models (crates/models/builtin) are exactly what `train-builtin`
//! produces from the data in `data/`: retrain into a temp dir and compare every file.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn data() -> PathBuf {
    repo().join("data")
}

/// Relative path → contents of every file under `dir`.
fn tree(dir: &Path) -> BTreeMap<PathBuf, String> {
    let mut files = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).expect("read dir") {
            let path = entry.expect("dir entry").path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).expect("under dir").to_path_buf();
                files.insert(rel, std::fs::read_to_string(&path).expect("read file"));
            }
        }
    }
    files
}

fn train(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .env_remove("RUST_LOG")
        .arg("train-builtin")
        .arg("--data")
        .arg(data())
        .args(args)
        .output()
        .expect("run train-builtin")
}

#[test]
fn committed_builtin_models_equal_a_fresh_training() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out = train(&["--out", dir.path().to_str().unwrap_or_default()]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let fresh = tree(dir.path());
    let committed = tree(&repo().join("crates/models/builtin"));
    assert!(fresh.len() > 100, "only {} files generated", fresh.len());
    let names = |t: &BTreeMap<PathBuf, String>| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&fresh),
        names(&committed),
        "file sets differ; rerun train-builtin"
    );
    for (rel, text) in &fresh {
        assert!(
            committed.get(rel) == Some(text),
            "{} differs from a fresh training; run `cargo run -p kepler-model-server -- \
             train-builtin` and commit the result",
            rel.display()
        );
    }
    // Deterministic: a second run gives the same bytes.
    let again = tempfile::tempdir().expect("tempdir");
    let out = train(&["--out", again.path().to_str().unwrap_or_default()]);
    assert!(out.status.success());
    assert_eq!(tree(again.path()), fresh);
}

#[test]
fn check_mode_reports_a_changed_file() {
    let dir = tempfile::tempdir().expect("tempdir");
    let out_dir = dir.path().to_str().unwrap_or_default();
    assert!(train(&["--out", out_dir]).status.success());
    assert!(train(&["--out", out_dir, "--check"]).status.success());
    let index = dir.path().join("index.json");
    let text = std::fs::read_to_string(&index).expect("read index");
    std::fs::write(&index, text.replace("\"format\": 1", "\"format\": 1 ")).expect("write");
    // A stale model file of a node type that no longer exists is reported too.
    let stale = dir
        .path()
        .join("aws/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_999.json");
    std::fs::write(&stale, "{}").expect("write");
    let out = train(&["--out", out_dir, "--check"]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("index.json (changed)"), "{err}");
    assert!(
        err.contains("LogarithmicRegressionTrainer_999.json (extra)"),
        "{err}"
    );
    // Writing removes the stale model file.
    assert!(train(&["--out", out_dir]).status.success());
    assert!(!stale.exists());
}

/// docs/model-accuracy.md holds what `evaluate-builtin` writes for the committed models:
/// rerunning it on a copy changes nothing.
#[test]
fn accuracy_report_is_current() {
    let doc = repo().join("docs/model-accuracy.md");
    let dir = tempfile::tempdir().expect("tempdir");
    let copy = dir.path().join("model-accuracy.md");
    std::fs::copy(&doc, &copy).expect("copy the report");
    let out = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .env_remove("RUST_LOG")
        .arg("evaluate-builtin")
        .arg("--data")
        .arg(data())
        .arg("--out")
        .arg(&copy)
        .output()
        .expect("run evaluate-builtin");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        std::fs::read_to_string(&copy).ok() == std::fs::read_to_string(&doc).ok(),
        "docs/model-accuracy.md is stale: run `cargo run -p kepler-model-server -- \
         evaluate-builtin` and commit the result"
    );
}

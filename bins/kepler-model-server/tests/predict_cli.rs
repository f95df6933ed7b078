//! Runs the real `kepler-model-server predict` binary on small CSVs.

use std::path::PathBuf;
use std::process::{Command, Output};

fn bin() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"));
    c.env_remove("RUST_LOG");
    c
}

fn model(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower")
        .join(rel)
}

fn run(args: &[&str]) -> Output {
    bin().args(args).output().expect("run kepler-model-server")
}

fn csv_file(dir: &tempfile::TempDir, text: &str) -> PathBuf {
    let path = dir.path().join("input.csv");
    std::fs::write(&path, text).expect("write csv");
    path
}

fn rows(out: &Output) -> Vec<Vec<String>> {
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| l.split(',').map(str::to_string).collect())
        .collect()
}

#[test]
fn predicts_the_design_example_with_full_precision() {
    let dir = tempfile::tempdir().expect("tempdir");
    // Extra columns (timestamp, a label) are ignored; column order does not matter.
    let input = csv_file(
        &dir,
        "timestamp,bpf_page_cache_hit,bpf_cpu_time_ms,node_type\n\
         t1,0,47938.5,m5\n\
         t2,0,0,m5\n",
    );
    let m = model("BPFOnly/SGDRegressorTrainer_0.json");
    let out = run(&[
        "predict",
        "--model",
        m.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = rows(&out);
    assert_eq!(r[0], ["package", "core", "uncore", "dram"]);
    // 143.81206324506658 + 305.148172889668 · 47938.5/95877.00000000001, printed with every
    // digit (Rust's shortest round-trip form); 18.616285480502686 + 8.434209551249596 · ½.
    assert_eq!(r[1], ["296.38614968990055", "0", "0", "22.833390256127483"]);
    assert_eq!(r[2], ["143.81206324506658", "0", "0", "18.616285480502686"]);
    assert_eq!(r.len(), 3);
}

#[test]
fn predicts_from_an_xgboost_archive() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = csv_file(&dir, "bpf_cpu_time_ms,bpf_page_cache_hit\n10000,0\n");
    let m = model("BPFOnly/XgboostFitTrainer_0.zip");
    let out = run(&[
        "predict",
        "--model",
        m.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let r = rows(&out);
    // xgboost 2.1.1 reference (see crates/models/tests/archive.rs): 283.8194580078125,
    // 24.35083770751953.
    let package: f64 = r[1][0].parse().unwrap_or(f64::NAN);
    let dram: f64 = r[1][3].parse().unwrap_or(f64::NAN);
    assert!((package - 283.8194580078125).abs() < 1e-4, "{package}");
    assert!((dram - 24.35083770751953).abs() < 1e-4, "{dram}");
}

#[test]
fn curve_fit_needs_the_trainer_flag_when_the_name_does_not_tell() {
    let dir = tempfile::tempdir().expect("tempdir");
    let renamed = dir.path().join("model.json");
    std::fs::copy(
        model("BPFOnly/LogarithmicRegressionTrainer_0.json"),
        &renamed,
    )
    .expect("copy");
    let input = csv_file(&dir, "bpf_cpu_time_ms,bpf_page_cache_hit\n1000,0\n");
    let args = [
        "predict",
        "--model",
        renamed.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ];
    let out = run(&args);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("LogarithmicRegressionTrainer"));

    let mut with_trainer = args.to_vec();
    with_trainer.extend(["--trainer", "LogarithmicRegressionTrainer"]);
    let out = run(&with_trainer);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // 70.64089296454337·ln(4157417.528323868·1000/95877.00000000001 + 1) − 683.4342435027602
    let package: f64 = rows(&out)[1][0].parse().unwrap_or(f64::NAN);
    assert!(
        (package - 70.82411403451454).abs() <= 70.8 * 1e-9,
        "{package}"
    );
}

#[test]
fn missing_column_and_bad_cell_are_clear_errors() {
    let dir = tempfile::tempdir().expect("tempdir");
    let m = model("CounterOnly/SGDRegressorTrainer_0.json");
    let input = csv_file(&dir, "cpu_cycles,cache_miss\n1,2\n");
    let out = run(&[
        "predict",
        "--model",
        m.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cpu_instructions"), "{err}");

    let input = csv_file(
        &dir,
        "cpu_cycles,cache_miss,cpu_instructions\n1,2,3\n1,x,3\n",
    );
    let out = run(&[
        "predict",
        "--model",
        m.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("row 2") && err.contains("cache_miss"), "{err}");
}

/// The model server's own example spec: m5.metal, Xeon Platinum 8259CL, 96 logical CPUs,
/// 377 GiB.
fn upstream_spec() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../data/kepler-model-server/tests/data/machine/spec.json")
}

#[test]
fn builtin_model_chosen_by_spec_reproduces_the_aws_row() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = csv_file(&dir, "bpf_cpu_time_ms\n0\n96000\n");
    let spec = upstream_spec();
    let out = run(&[
        "predict",
        "--model",
        "builtin",
        "--spec",
        spec.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("exact match"), "{err}");
    // aws-instances.csv, m5n.metal (96 of 96 vCPU, Xeon Platinum 8259CL, 384 GB):
    // PkgWatt @ Idle "54,71", @ 100% "445,38"; RAMWatt "59,72", "254,95". Rapl is the default
    // family. 100 % is a logarithmic curve's end: equal to ~1e-12, printed in full.
    let r = rows(&out);
    assert_eq!(r[0], ["package", "dram"]);
    assert_eq!(r[1], ["54.71", "59.72"]);
    let full: Vec<f64> = r[2].iter().map(|v| v.parse().unwrap_or(f64::NAN)).collect();
    assert!((full[0] - 445.38).abs() < 1e-9, "{full:?}");
    assert!((full[1] - 254.95).abs() < 1e-9, "{full:?}");
}

#[test]
fn builtin_platform_family_falls_back_for_a_cpu_specpower_lacks() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = csv_file(&dir, "bpf_cpu_time_ms\n0\n");
    let spec = upstream_spec();
    let out = run(&[
        "predict",
        "--model",
        "builtin",
        "--spec",
        spec.to_str().unwrap_or_default(),
        "--family",
        "platform",
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains("fallback") && err.contains("no specpower node type"),
        "{err}"
    );
    let r = rows(&out);
    assert_eq!(r[0], ["platform"]);
    let idle: f64 = r[1][0].parse().unwrap_or(f64::NAN);
    // A 96-CPU server idles somewhere between a small and a big SPECpower box.
    assert!((50.0..200.0).contains(&idle), "{idle}");
}

#[test]
fn builtin_with_a_bad_spec_is_a_clear_error() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = csv_file(&dir, "bpf_cpu_time_ms\n1\n");
    let spec = dir.path().join("spec.json");
    std::fs::write(
        &spec,
        r#"{"processor": "intel_xeon_gold_6136", "cores": 0}"#,
    )
    .expect("write");
    let out = run(&[
        "predict",
        "--model",
        "builtin",
        "--spec",
        spec.to_str().unwrap_or_default(),
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cores"), "{err}");
    assert!(out.stdout.is_empty());
}

#[cfg(target_os = "linux")]
#[test]
fn builtin_without_a_spec_uses_this_machine() {
    let dir = tempfile::tempdir().expect("tempdir");
    let input = csv_file(&dir, "bpf_cpu_time_ms\n0\n");
    let out = run(&[
        "predict",
        "--model",
        "builtin",
        "--input",
        input.to_str().unwrap_or_default(),
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(err.contains("built-in model:"), "{err}");
    assert_eq!(rows(&out)[0], ["package", "dram"]);
}

#[test]
fn an_endless_input_ends_in_an_error_not_in_gigabytes() {
    let m = model("BPFOnly/SGDRegressorTrainer_0.json");
    let mut child = bin()
        .args([
            "predict",
            "--model",
            m.to_str().unwrap_or_default(),
            "--input",
            "/dev/zero",
        ])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kepler-model-server");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("predict kept reading /dev/zero");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let out = child.wait_with_output().expect("stderr");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!status.success());
    assert!(stderr.contains("longer than"), "{stderr}");
}

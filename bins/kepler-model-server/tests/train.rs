//! `kepler-model-server train` end to end: the real binary on the nx12 data, a Prometheus
//! dump and a fake Prometheus; what it writes is served by `serve` and loads as an agent
//! loads it; bad input fails clearly and writes nothing.

mod support;

use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use support::{client, data_root, serve};

fn nx12(file: &str) -> PathBuf {
    data_root()
        .join("kepler-model-db/models/v0.6/nx12/preprocessed_data")
        .join(file)
}

fn train(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .arg("train")
        .args(args)
        .env("RUST_LOG", "warn")
        .output()
        .expect("run kepler-model-server train")
}

fn ok(out: &Output) {
    assert!(
        out.status.success(),
        "train failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn failed_with(out: &Output, text: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "train succeeded; stderr: {stderr}");
    assert!(stderr.contains(text), "expected {text:?} in: {stderr}");
}

/// Rows of the accuracy table: model name → (column → value).
fn table(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).expect("metadata table");
    let h = r.headers().expect("header").clone();
    r.records()
        .map(|row| {
            let row = row.expect("row");
            h.iter()
                .zip(row.iter())
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        })
        .collect()
}

const SPEC: &str = r#"{"processor": "intel_xeon_e5_2667v3", "cores": 32, "chips": 2, "memory": 128, "frequency": 3200}"#;

#[test]
fn trained_models_are_served_and_load_as_an_agent_loads_them() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("spec.json");
    std::fs::write(&spec, SPEC).unwrap();
    let out = dir.path().join("models");
    let input = nx12("preprocess_abs_default_rapl_Basic.csv");
    ok(&train(&[
        "--input",
        input.to_str().unwrap(),
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
        "--seed",
        "7",
        "--trainers",
        "ols,nnls,xgboost",
        "--spec",
        spec.to_str().unwrap(),
    ]));
    let pipeline = out.join("kepler-rs");
    let rows = table(&pipeline.join("rapl-sysfs_AbsPower_model_metadata.csv"));
    // BPFOnly, CounterOnly and Full × 3 trainers.
    assert_eq!(rows.len(), 9);
    let report = std::fs::read_to_string(pipeline.join("report.html")).unwrap();
    assert!(report.contains("<svg") && !report.contains("src=") && !report.contains("<script"));
    // The best model of each output type and feature group (3 × 2) gets a predicted-vs-
    // measured and a residual plot per component that varies (package and dram: core and
    // uncore read 0 W on nx12), each with one dot per held-back row and labelled axes.
    let meta: Value =
        serde_json::from_slice(&std::fs::read(pipeline.join("metadata.json")).unwrap()).unwrap();
    let held_back = meta["test_rows"].as_u64().unwrap() as usize;
    let plots: Vec<&str> = report.split("<svg").skip(1).collect();
    assert_eq!(plots.len(), 3 * 2 * 2 * 2);
    let mut titles = Vec::new();
    for plot in &plots {
        let plot = &plot[..plot.find("</svg>").unwrap()];
        assert_eq!(plot.matches("<circle").count(), held_back);
        // SVG text: the title, both axis names and tick labels.
        let texts: Vec<&str> = plot
            .split("<text")
            .skip(1)
            .filter_map(|t| Some(t[t.find('>')? + 1..t.find("</text>")?].trim()))
            .collect();
        assert!(texts.contains(&"measured W"), "{texts:?}");
        assert!(texts.len() >= 6, "{texts:?}");
        titles.push(texts[0]);
    }
    for c in ["package", "dram"] {
        for kind in ["predicted vs measured", "residual"] {
            let title = format!("{c}: {kind}");
            assert_eq!(
                titles.iter().filter(|t| **t == title).count(),
                6,
                "{titles:?}"
            );
        }
    }

    let server = serve(&out, &[]);
    let features = ["cpu_cycles", "cpu_instructions", "cache_miss"];
    for (weight, ext) in [(true, "json"), (false, "zip")] {
        let body = json!({
            "metrics": features, "output_type": "AbsPower", "source": "rapl-sysfs",
            "node_type": -1, "weight": weight, "trainer_name": "", "filter": "",
            "pipeline_name": "", "machine_spec": serde_json::from_str::<Value>(SPEC).unwrap(),
            "loose_node_type": true,
        });
        let resp = client()
            .post(server.url("/model"))
            .json(&body)
            .send()
            .unwrap();
        assert_eq!(resp.status(), 200, "{:?}", resp.text());
        let bytes = resp.bytes().unwrap();
        // The lowest-MAE CounterOnly file of that format, as the table says.
        let best = rows
            .iter()
            .filter(|r| r["feature_group"] == "CounterOnly" && r["model_file"].ends_with(ext))
            .min_by(|a, b| {
                let mae = |r: &std::collections::HashMap<String, String>| {
                    r["mae"].parse::<f64>().unwrap()
                };
                mae(a).total_cmp(&mae(b))
            })
            .unwrap();
        let file = pipeline
            .join("rapl-sysfs/AbsPower/CounterOnly")
            .join(&best["model_file"]);
        assert_eq!(
            bytes.as_ref(),
            std::fs::read(&file).unwrap(),
            "{}",
            best["model_file"]
        );
        // What an agent does with the answer: load it and estimate from features.
        let model =
            kepler_models::load_model_bytes(&bytes, Some(&best["model_file"]), None).unwrap();
        let input = [
            ("cpu_cycles", 3.8e9),
            ("cpu_instructions", 1.9e9),
            ("cache_miss", 6e6),
        ];
        let watts = model.predict(&input).unwrap();
        let package = watts.iter().find(|(c, _)| c == "package").unwrap().1;
        assert!(package > 10.0 && package < 300.0, "{package}");
    }
}

#[test]
fn bad_input_fails_clearly_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("models");
    let cases: [(&str, &str, &str); 6] = [
        (
            "malformed.csv",
            "timestamp,bpf_cpu_time_ms,package_power\n1,2,3\n2,3\n",
            "malformed CSV",
        ),
        ("empty.csv", "", "no timestamp column"),
        (
            "header.csv",
            "timestamp,bpf_cpu_time_ms,package_power\n",
            "no usable rows",
        ),
        (
            "nan.csv",
            "timestamp,bpf_cpu_time_ms,package_power\n1,NaN,3\n2,inf,4\n3,5,-inf\n",
            "3 skipped",
        ),
        (
            "nopower.csv",
            "timestamp,bpf_cpu_time_ms,cache_miss\n1,2,3\n",
            "no power column",
        ),
        (
            "dump.json",
            "{\"status\": \"error\", \"error\": \"bad query\"}",
            "bad query",
        ),
    ];
    for (name, text, expected) in cases {
        let input = dir.path().join(name);
        std::fs::write(&input, text).unwrap();
        let res = train(&[
            "--input",
            input.to_str().unwrap(),
            "--source",
            "rapl-sysfs",
            "--out",
            out.to_str().unwrap(),
        ]);
        failed_with(&res, expected);
        assert!(!out.join("kepler-rs").exists(), "{name}");
    }
    // A dataset with only platform power has nothing for rapl-sysfs.
    let acpi = nx12("preprocess_abs_default_acpi_Basic.csv");
    let res = train(&[
        "--input",
        acpi.to_str().unwrap(),
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
    ]);
    failed_with(&res, "no power column for source rapl-sysfs");
    // A good run, then one that fails: the first pipeline stays as it was, no temporary left.
    ok(&train(&[
        "--input",
        acpi.to_str().unwrap(),
        "--source",
        "acpi",
        "--out",
        out.to_str().unwrap(),
        "--trainers",
        "ols",
    ]));
    let model = out.join("kepler-rs/acpi/AbsPower/CounterOnly/LinearRegressionTrainer_0.json");
    let before = std::fs::read(&model).unwrap();
    let strict = train(&[
        "--input",
        acpi.to_str().unwrap(),
        "--source",
        "acpi",
        "--out",
        out.to_str().unwrap(),
        "--trainers",
        "ols",
        "--max-mae",
        "0",
        "--max-mape",
        "0",
        "--require-accepted",
    ]);
    failed_with(&strict, "Collect more data");
    assert_eq!(std::fs::read(&model).unwrap(), before);
    let entries: Vec<_> = std::fs::read_dir(&out)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(entries, vec![std::ffi::OsString::from("kepler-rs")]);
}

/// Two nodes of one machine type: 120 steps of 30 s, power exactly linear in cpu time.
fn prometheus_answers(t0: u64) -> (Value, Value) {
    let mut energy = Vec::new();
    let mut feature = Vec::new();
    for (node, offset) in [("node-a:9102", 0u64), ("node-b:9102", 17)] {
        let (mut pkg, mut dram) = (1000.0, 50.0);
        let (mut pkg_v, mut dram_v, mut cpu_v) = (Vec::new(), Vec::new(), Vec::new());
        for i in 0..120u64 {
            let t = t0 + 30 * i;
            let cpu = ((i * 37 + offset) % 100) as f64 * 100.0;
            // The counter grows by this step's power × 30 s; the feature is this step's rate.
            pkg += (20.0 + cpu / 200.0) * 30.0;
            dram += (5.0 + cpu / 2000.0) * 30.0;
            pkg_v.push(json!([t, pkg.to_string()]));
            dram_v.push(json!([t, dram.to_string()]));
            cpu_v.push(json!([t, cpu.to_string()]));
        }
        let labels = |name: &str, k: &str, v: &str| json!({"__name__": name, "instance": node, "job": "kepler", k: v});
        energy.push(json!({"metric": labels("kepler_node_cpu_joules_total", "zone", "package"), "values": pkg_v}));
        energy.push(json!({"metric": labels("kepler_node_cpu_joules_total", "zone", "dram"), "values": dram_v}));
        feature.push(json!({"metric": labels("kepler_node_model_feature_rate", "feature", "bpf_cpu_time_ms"), "values": cpu_v}));
    }
    let wrap =
        |r: Vec<Value>| json!({"status": "success", "data": {"resultType": "matrix", "result": r}});
    (wrap(energy), wrap(feature))
}

/// The linear model fits the synthetic data exactly: its MAE is ~0.
fn assert_exact(out: &Path) {
    let rows = table(&out.join("kepler-rs/rapl-sysfs_AbsPower_model_metadata.csv"));
    let ols = rows
        .iter()
        .find(|r| r["model_name"] == "LinearRegressionTrainer_0")
        .unwrap();
    assert_eq!(ols["mae"], "0.00", "{ols:?}");
    assert_eq!(ols["feature_group"], "BPFOnly");
}

#[test]
fn prometheus_dumps_and_live_servers_become_training_data() {
    let dir = tempfile::tempdir().unwrap();
    let t0 = 1_700_000_000;
    let (energy, feature) = prometheus_answers(t0);
    let dump = dir.path().join("dump.json");
    std::fs::write(
        &dump,
        serde_json::to_vec(&json!([energy, feature])).unwrap(),
    )
    .unwrap();
    let out = dir.path().join("from-dump");
    ok(&train(&[
        "--input",
        dump.to_str().unwrap(),
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
        "--trainers",
        "ols",
    ]));
    assert_exact(&out);

    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut buf = Vec::new();
            let mut chunk = [0u8; 4096];
            while !buf.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut chunk) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => buf.extend_from_slice(&chunk[..n]),
                }
            }
            let head = String::from_utf8_lossy(&buf);
            let body = if head.contains("query=kepler_node_cpu_joules_total") {
                &energy
            } else {
                &feature
            };
            let body = serde_json::to_vec(body).unwrap();
            let _ = write!(s, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = s.write_all(&body);
        }
    });
    let out = dir.path().join("from-live");
    let (start, end) = (t0.to_string(), (t0 + 30 * 119).to_string());
    ok(&train(&[
        "--prometheus",
        &format!("http://{addr}"),
        "--start",
        &start,
        "--end",
        &end,
        "--step",
        "30s",
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
        "--trainers",
        "ols",
    ]));
    assert_exact(&out);
}

#[test]
fn a_prometheus_that_never_answers_times_out_clearly() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    // Accepts connections and holds them open without a byte of answer.
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for s in listener.incoming().flatten() {
            held.push(s);
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("models");
    let started = Instant::now();
    let res = train(&[
        "--prometheus",
        &format!("http://{addr}"),
        "--since",
        "1h",
        "--timeout",
        "1s",
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
    ]);
    failed_with(&res, "no answer within 1s");
    assert!(started.elapsed() < Duration::from_secs(60));
    assert!(!out.exists());
}

/// `count_over_time` of the agent's package counter over the last 10 minutes: how many
/// scrapes Prometheus holds.
fn scraped_samples(prom: &str) -> usize {
    let url = format!("{prom}/api/v1/query?query=count_over_time(kepler_node_cpu_joules_total%7Bzone%3D%22package%22%7D%5B10m%5D)");
    let body: Value = client()
        .get(url)
        .send()
        .and_then(|r| r.json())
        .unwrap_or(Value::Null);
    body["data"]["result"][0]["value"][1]
        .as_str()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// A real Prometheus scrapes a metered agent with `ebpf.exportFeatures`; `train
/// --prometheus` fetches its range, trains and writes models whose table MAE is the MAE of
/// the written file on the held-back rows of the seeded split, recomputed here from the
/// rows it saved with `--save-data` and the library's split.
#[test]
fn train_from_a_live_prometheus_measures_on_held_back_rows() {
    use kepler_testkit::tools::{have, skip};
    use support::powercap::{Agent, LoadPowercap};
    use support::prometheus::start_prometheus;
    if !have("prometheus") {
        skip("SKIP: prometheus not installed (bash scripts/setup.sh installs it)");
        return;
    }
    let work = tempfile::tempdir().unwrap();
    let sysfs = tempfile::tempdir_in("/dev/shm").unwrap_or_else(|_| tempfile::tempdir().unwrap());
    let _sim = LoadPowercap::start(sysfs.path());
    let agent = Agent::start(
        work.path(),
        "metered",
        sysfs.path(),
        "ebpf:\n  enabled: false\n  exportFeatures: true\nmonitor:\n  interval: 1s\n",
    );
    let (_prometheus, port) = start_prometheus(work.path(), &[agent.port]);
    let prom = format!("http://127.0.0.1:{port}");
    // 40 scrapes give ~40 rows at a 1 s step: 8 held back.
    let deadline = Instant::now() + Duration::from_secs(240);
    while scraped_samples(&prom) < 40 {
        assert!(Instant::now() < deadline, "Prometheus scraped too little");
        std::thread::sleep(Duration::from_secs(1));
    }
    let out = work.path().join("models");
    let saved = work.path().join("rows.csv");
    ok(&train(&[
        "--prometheus",
        &prom,
        "--since",
        "10m",
        "--step",
        "1s",
        "--source",
        "rapl-sysfs",
        "--out",
        out.to_str().unwrap(),
        "--trainers",
        "ols,xgboost",
        "--save-data",
        saved.to_str().unwrap(),
    ]));
    let pipeline = out.join("kepler-rs");
    let meta: Value =
        serde_json::from_slice(&std::fs::read(pipeline.join("metadata.json")).unwrap()).unwrap();
    let data = kepler_models::dataset::Dataset::read_csv_file(&saved).unwrap();
    assert_eq!(meta["rows"], json!(data.len()));
    let (train_rows, test_rows) = kepler_models::train::split(data.len(), 42, 0.2);
    assert_eq!(meta["test_rows"], json!(test_rows.len()));
    assert_eq!(meta["train_rows"], json!(train_rows.len()));
    assert!(!test_rows.is_empty() && test_rows.iter().all(|r| !train_rows.contains(r)));

    let rows = table(&pipeline.join("rapl-sysfs_AbsPower_model_metadata.csv"));
    assert!(rows.len() >= 2, "{rows:?}");
    for row in &rows {
        let file = pipeline
            .join("rapl-sysfs/AbsPower")
            .join(&row["feature_group"])
            .join(&row["model_file"]);
        let model = kepler_models::load_model_bytes(
            &std::fs::read(&file).unwrap(),
            Some(&row["model_file"]),
            None,
        )
        .unwrap();
        // Mean absolute error per component over `rows`, as the table rounds it.
        let mae = |rows: &[usize]| -> Vec<(String, f64)> {
            let mut err: Vec<(String, f64)> = Vec::new();
            for &r in rows {
                let input: Vec<(kepler_models::Feature, f64)> = model
                    .features()
                    .into_iter()
                    .map(|f| (f, data.feature(f).unwrap()[r]))
                    .collect();
                for (c, w) in model.predict(&input).unwrap() {
                    let measured = data.power.iter().find(|(n, _)| *n == c).unwrap().1[r];
                    match err.iter_mut().find(|(n, _)| *n == c) {
                        Some(e) => e.1 += (w - measured).abs() / rows.len() as f64,
                        None => err.push((c, (w - measured).abs() / rows.len() as f64)),
                    }
                }
            }
            err
        };
        let held_back = mae(&test_rows);
        for (c, e) in &held_back {
            let logged: f64 = row[&format!("{c}_mae")].parse().unwrap();
            assert!(
                (logged - e).abs() <= 0.0051,
                "{} {c}: table {logged}, held-back rows {e}",
                row["model_name"]
            );
        }
        let worst = held_back.iter().map(|(_, e)| *e).fold(0.0, f64::max);
        let logged: f64 = row["mae"].parse().unwrap();
        assert!((logged - worst).abs() <= 0.0051, "{row:?}");
    }
}

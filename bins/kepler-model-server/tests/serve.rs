//! `kepler-model-server serve` end to end: the real binary on a loopback port, serving a
//! temporary copy of the published ec2-0.7.11 and specpower-0.7.11 model DB pipelines.

mod support;

use std::collections::HashMap;
use std::path::Path;

use reqwest::StatusCode;
use serde_json::{json, Value};
use support::{client, data_root, model_db, pipeline, serve};

const BPF: [&str; 2] = ["bpf_cpu_time_ms", "bpf_page_cache_hit"];

/// The published EC2 machine spec (m5.metal, node type 0 of ec2-0.7.11).
fn ec2_spec() -> Value {
    let path = data_root().join("kepler-model-server/tests/data/machine/spec.json");
    serde_json::from_slice(&std::fs::read(&path).expect("spec.json")).expect("spec JSON")
}

/// The lowest published MAE among the files with extension `ext` that exist in
/// `<pipeline>/<source>/<output>/<group>/` and load, from the pipeline's metadata table:
/// what `POST /model` must choose when the request narrows nothing else.
fn lowest_mae(pipeline_name: &str, source: &str, output: &str, group: &str, ext: &str) -> String {
    lowest(pipeline_name, source, output, group, ext).1
}

/// [`lowest_mae`]'s (MAE, model name).
fn lowest(
    pipeline_name: &str,
    source: &str,
    output: &str,
    group: &str,
    ext: &str,
) -> (f64, String) {
    let dir = pipeline(pipeline_name);
    let table = dir.join(format!("{source}_{output}_model_metadata.csv"));
    let mut reader = csv::Reader::from_path(&table).expect("metadata table");
    let headers = reader.headers().expect("header").clone();
    let col = |name: &str| headers.iter().position(|h| h == name).expect(name);
    let (name_col, group_col, mae_col) = (col("model_name"), col("feature_group"), col("mae"));
    let models = dir.join(source).join(output).join(group);
    let mut best: Option<(f64, String)> = None;
    for row in reader.records() {
        let row = row.expect("row");
        let name = &row[name_col];
        let file = models.join(format!("{name}.{ext}"));
        if &row[group_col] != group || kepler_models::load_model(&file, None).is_err() {
            continue;
        }
        let mae: f64 = row[mae_col].parse().expect("mae");
        if best.as_ref().is_none_or(|(b, _)| mae < *b) {
            best = Some((mae, name.to_string()));
        }
    }
    best.expect("a published model")
}

fn post_model(base: &support::Serving, body: &Value) -> reqwest::blocking::Response {
    client()
        .post(base.url("/model"))
        .json(body)
        .send()
        .expect("POST /model")
}

fn request(weight: bool, extra: Value) -> Value {
    let mut body = json!({
        "metrics": BPF,
        "output_type": "AbsPower",
        "source": "rapl-sysfs",
        "node_type": -1,
        "weight": weight,
        "trainer_name": "",
        "filter": "",
        "pipeline_name": "",
        "machine_spec": ec2_spec(),
        "loose_node_type": true,
    });
    if let (Some(b), Value::Object(e)) = (body.as_object_mut(), extra) {
        b.extend(e);
    }
    body
}

fn header(r: &reqwest::blocking::Response, name: &str) -> String {
    r.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string()
}

#[test]
fn legacy_model_request_answers_the_best_file_for_the_published_ec2_spec() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let ec2 = pipeline("ec2-0.7.11").join("rapl-sysfs/AbsPower/BPFOnly");

    // weight: true → the weight JSON with the lowest MAE, byte for byte.
    let want = lowest_mae("ec2-0.7.11", "rapl-sysfs", "AbsPower", "BPFOnly", "json");
    let r = post_model(&server, &request(true, json!({})));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-kepler-model-match"), "exact");
    assert_eq!(header(&r, "content-type"), "application/json");
    assert!(header(&r, "x-kepler-model").ends_with(&format!("/{want}.json")));
    let body = r.bytes().expect("body");
    assert_eq!(
        &body[..],
        &std::fs::read(ec2.join(format!("{want}.json"))).expect("file")[..]
    );

    // weight: false → the archive with the lowest MAE among those that load (the scikit-learn
    // GradientBoosting archive does not, and is listed as broken instead).
    let want = lowest_mae("ec2-0.7.11", "rapl-sysfs", "AbsPower", "BPFOnly", "zip");
    let r = post_model(&server, &request(false, json!({})));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "content-type"), "application/zip");
    assert_eq!(
        header(&r, "content-disposition"),
        format!("attachment; filename=\"{want}.zip\"")
    );
    let body = r.bytes().expect("body");
    assert_eq!(
        &body[..],
        &std::fs::read(ec2.join(format!("{want}.zip"))).expect("file")[..]
    );
    assert!(kepler_models::load_model_bytes(&body, Some(&format!("{want}.zip")), None).is_ok());

    // A trainer narrows the choice; the answer is a usable model (DESIGN §7's worked example).
    let r = post_model(
        &server,
        &request(true, json!({"trainer_name": "SGDRegressorTrainer"})),
    );
    assert_eq!(r.status(), StatusCode::OK);
    let body = r.bytes().expect("body");
    let model = kepler_models::load_model_bytes(&body, Some("SGDRegressorTrainer_0.json"), None)
        .expect("served weight JSON loads");
    let out: HashMap<String, f64> = model
        .predict(&[("bpf_cpu_time_ms", 47938.5), ("bpf_page_cache_hit", 0.0)])
        .expect("predict")
        .into_iter()
        .collect();
    assert!((out["package"] - 296.386150).abs() < 1e-5, "{out:?}");
}

#[test]
fn filters_work_and_impossible_ones_are_400_with_a_reason() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let best = lowest_mae("ec2-0.7.11", "rapl-sysfs", "AbsPower", "BPFOnly", "json");

    let r = post_model(&server, &request(true, json!({"filter": "mae<=1000"})));
    assert_eq!(r.status(), StatusCode::OK);
    assert!(header(&r, "x-kepler-model").ends_with(&format!("/{best}.json")));

    // Only SGDRegressorTrainer_0 (package MAPE 50.93) passes "mape>=50": a filter changes the
    // answer, instead of rejecting everything as upstream's did.
    let r = post_model(
        &server,
        &request(true, json!({"filter": "mape>=50; mape<=55"})),
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert!(header(&r, "x-kepler-model").ends_with("/SGDRegressorTrainer_0.json"));

    let r = post_model(&server, &request(true, json!({"filter": "mae<=0"})));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let reason = r.text().expect("reason");
    assert!(reason.contains("filter mae<=0"), "{reason}");

    let r = post_model(
        &server,
        &request(true, json!({"filter": "abs_max_corr>=0.5"})),
    );
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().expect("reason").contains("unknown attribute"));
}

#[test]
fn node_types_match_on_exact_cpu_tokens() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let mut spec = ec2_spec();
    // A prefix of the published processor name is another CPU, never a match.
    spec["processor"] = json!("intel_xeon_platinum_8259");
    let strict = json!({"machine_spec": spec.clone(), "loose_node_type": false});
    let r = post_model(&server, &request(true, strict));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r
        .text()
        .expect("reason")
        .contains("matches no node type exactly"));
    // Loose matching still answers, and says how far the match is.
    let r = post_model(&server, &request(true, json!({"machine_spec": spec})));
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-kepler-model-match"), "other-cpu");

    // i3.metal is node type 1 exactly, but the published copy has no node-type-1 files.
    let i3 = json!({"processor": "intel_xeon_e5_2686v4", "cores": 72, "chips": 2, "memory": 503});
    let r = post_model(
        &server,
        &request(true, json!({"machine_spec": i3, "loose_node_type": false})),
    );
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    assert!(r.text().expect("reason").contains("node type 1"));

    // An explicit node type.
    let r = post_model(&server, &request(true, json!({"node_type": 3})));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = post_model(&server, &request(true, json!({"node_type": 0})));
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn specpower_platform_models_are_served_for_acpi() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let index: Value = serde_json::from_slice(
        &std::fs::read(pipeline("specpower-0.7.11").join("node_type_index.json")).expect("index"),
    )
    .expect("JSON");
    let node0 = index["0"]["attrs"].clone();
    let want = lowest_mae("specpower-0.7.11", "acpi", "AbsPower", "BPFOnly", "json");
    let body = request(true, json!({"source": "acpi", "machine_spec": node0}));
    let r = post_model(&server, &body);
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(header(&r, "x-kepler-model-match"), "exact");
    assert!(header(&r, "x-kepler-model").ends_with(&format!("acpi/AbsPower/BPFOnly/{want}.json")));

    let r = post_model(
        &server,
        &request(true, json!({"source": "acpi", "output_type": "DynPower"})),
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert!(header(&r, "x-kepler-model").contains("acpi/DynPower/"));
    // No archives in the published specpower copy.
    let r = post_model(&server, &request(false, json!({"source": "acpi"})));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[test]
fn best_models_per_output_type_and_feature_group() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let best = |q: &str| -> Value {
        client()
            .get(server.url(&format!("/best-models{q}")))
            .send()
            .and_then(|r| r.error_for_status())
            .and_then(|r| r.json())
            .expect("GET /best-models")
    };
    let rapl = best("");
    // Over both formats: the lower of the best weight JSON and the best archive.
    let json_best = lowest("ec2-0.7.11", "rapl-sysfs", "AbsPower", "BPFOnly", "json");
    let zip_best = lowest("ec2-0.7.11", "rapl-sysfs", "AbsPower", "BPFOnly", "zip");
    let want = if json_best.0 < zip_best.0 {
        json_best.1
    } else {
        zip_best.1
    };
    assert_eq!(rapl["AbsPower"]["BPFOnly"], json!(want));
    assert_eq!(
        rapl["AbsPower"]["CounterOnly"],
        json!("SGDRegressorTrainer_0")
    );
    assert_eq!(rapl["DynPower"], json!({}));
    let acpi = best("?source=acpi&ot=DynPower");
    assert_eq!(
        acpi,
        json!({"DynPower": {"BPFOnly": "SGDRegressorTrainer_0"}})
    );
    assert_eq!(
        best("?filter=mae<=0"),
        json!({"AbsPower": {}, "DynPower": {}})
    );
}

#[test]
fn models_are_listed_with_accuracy_and_fetched() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let list: Value = client()
        .get(server.url("/models"))
        .send()
        .and_then(|r| r.json())
        .expect("GET /models");
    let models = list["models"].as_array().expect("models");
    let broken = list["broken"].as_array().expect("broken");
    // Every model file of the copy is either listed or broken, and only the scikit-learn
    // GradientBoosting archive is broken.
    let files = count_model_files(db.path());
    assert_eq!(models.len() + broken.len(), files);
    assert_eq!(broken.len(), 1, "{broken:?}");
    assert!(broken[0]["path"]
        .as_str()
        .is_some_and(|p| p.ends_with("GradientBoostingRegressorTrainer_0.zip")));

    let sgd = models
        .iter()
        .find(|m| m["path"] == "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json")
        .expect("SGD listed");
    assert_eq!(sgd["pipeline"], "ec2-0.7.11");
    assert_eq!(sgd["trainer"], "SGDRegressorTrainer");
    assert_eq!(sgd["node_type"], 0);
    assert_eq!(sgd["feature_group"], "BPFOnly");
    assert_eq!(sgd["machine_spec"], ec2_spec());
    // The worst component's figures: package MAE 60.78 and MAPE 50.93 (the table's overall
    // mape, 17.77, is dram's).
    assert_eq!(sgd["mae"], 60.78);
    assert_eq!(sgd["mape"], 50.93);

    for m in models {
        let path = m["path"].as_str().expect("path");
        let r = client()
            .get(server.url(&format!("/models/{path}")))
            .send()
            .expect("fetch");
        assert_eq!(r.status(), StatusCode::OK, "{path}");
        let body = r.bytes().expect("body");
        assert_eq!(
            &body[..],
            &std::fs::read(db.path().join(path)).expect("file")[..],
            "{path}"
        );
    }
    let filtered: Value = client()
        .get(server.url("/models?source=acpi&output_type=DynPower"))
        .send()
        .and_then(|r| r.json())
        .expect("filtered list");
    assert_eq!(filtered["models"].as_array().map(Vec::len), Some(1));
}

fn count_model_files(dir: &Path) -> usize {
    let mut n = 0;
    for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
        let path = entry.path();
        if path.is_dir() {
            n += count_model_files(&path);
        } else if let Some(name) = path.file_name().and_then(|n| n.to_str()) {
            let ext = path.extension().and_then(|e| e.to_str());
            if matches!(ext, Some("json") | Some("zip"))
                && name != "node_type_index.json"
                && name != "metadata.json"
            {
                n += 1;
            }
        }
    }
    n
}

#[test]
fn traversal_and_escaping_symlinks_are_refused() {
    let db = model_db();
    let outside = tempfile::tempdir().expect("tempdir");
    let secret = outside.path().join("SGDRegressorTrainer_9.json");
    std::fs::copy(
        pipeline("ec2-0.7.11").join("rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json"),
        &secret,
    )
    .expect("copy");
    let link = db
        .path()
        .join("ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_9.json");
    std::os::unix::fs::symlink(&secret, &link).expect("symlink");
    let server = serve(db.path(), &[]);

    // Sent as raw bytes: URL libraries resolve dot segments (even encoded ones) before
    // sending, so only a raw request shows what the server does with them.
    for path in [
        "/models/../../etc/passwd",
        "/models/%2e%2e/%2e%2e/etc/passwd",
        "/models/ec2-0.7.11/%2e%2e/ec2-0.7.11/node_type_index.json",
        "/models/%2Fetc%2Fpasswd",
        "/models/ec2-0.7.11%5c..%5cx.json",
    ] {
        assert_eq!(raw_get_status(&server, path), 400, "{path}");
    }
    // Not a model, so not served even though it is inside the directory.
    let r = client()
        .get(server.url("/models/ec2-0.7.11/node_type_index.json"))
        .send()
        .expect("GET");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    // The symlink to a file outside is neither served nor offered to /model.
    let r = client()
        .get(
            server.url("/models/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_9.json"),
        )
        .send()
        .expect("GET");
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    let list: Value = client()
        .get(server.url("/models"))
        .send()
        .and_then(|r| r.json())
        .expect("list");
    let broken = list["broken"].to_string();
    assert!(
        broken.contains("SGDRegressorTrainer_9.json") && broken.contains("outside"),
        "{broken}"
    );
    let r = post_model(&server, &request(true, json!({"node_type": 9})));
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

/// The status of `GET <path>` sent byte for byte as given.
fn raw_get_status(server: &support::Serving, path: &str) -> u16 {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        conn,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .expect("send");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read");
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn bad_bodies_are_rejected() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let big = vec![b' '; 100 << 10];
    let r = client()
        .post(server.url("/model"))
        .header("content-type", "application/json")
        .body(big)
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    for (body, why) in [
        ("{not json", "invalid model request"),
        (r#"{"output_type": "AbsPower"}"#, "metrics"),
        (
            r#"{"metrics": ["bpf_cpu_time_ms"], "output_type": "Watts"}"#,
            "AbsPower",
        ),
        (
            r#"{"metrics": [], "output_type": "AbsPower"}"#,
            "metrics is empty",
        ),
        (
            r#"{"metrics": ["x"], "output_type": "AbsPower", "node_type": "zero"}"#,
            "node_type",
        ),
    ] {
        let r = client()
            .post(server.url("/model"))
            .body(body)
            .send()
            .expect("POST");
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{body}");
        let text = r.text().expect("reason");
        assert!(text.contains(why), "{body}: {text}");
    }
}

#[test]
fn plain_directories_of_model_files_are_served() {
    let dir = tempfile::tempdir().expect("tempdir");
    for (from, to) in [
        (
            "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json",
            "SGDRegressorTrainer_0.json",
        ),
        (
            "specpower-0.7.11/acpi/AbsPower/BPFOnly/LogisticRegressionTrainer_0.json",
            "LogisticRegressionTrainer_0.json",
        ),
    ] {
        std::fs::copy(
            data_root().join("kepler-model-db/models/v0.7").join(from),
            dir.path().join(to),
        )
        .expect("copy");
    }
    std::fs::write(dir.path().join("notes.json"), "{\"not\": \"a model\"}").expect("write");
    let server = serve(dir.path(), &[]);
    let r = post_model(
        &server,
        &json!({"metrics": BPF, "output_type": "AbsPower", "source": "acpi", "weight": true}),
    );
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        header(&r, "x-kepler-model"),
        "LogisticRegressionTrainer_0.json"
    );
    let r = post_model(
        &server,
        &json!({"metrics": BPF, "output_type": "AbsPower", "weight": true}),
    );
    assert_eq!(header(&r, "x-kepler-model"), "SGDRegressorTrainer_0.json");
    let list: Value = client()
        .get(server.url("/models"))
        .send()
        .and_then(|r| r.json())
        .expect("list");
    assert_eq!(list["broken"][0]["path"], "notes.json");
}

#[test]
fn sighup_rescans_the_directory() {
    let db = model_db();
    let server = serve(db.path(), &[]);
    let count = || -> usize {
        let list: Value = client()
            .get(server.url("/models"))
            .send()
            .and_then(|r| r.json())
            .expect("list");
        list["models"].as_array().map_or(0, Vec::len)
    };
    let before = count();
    std::fs::remove_dir_all(db.path().join("specpower-0.7.11")).expect("remove pipeline");
    // Still served from the index until the rescan.
    assert_eq!(count(), before);
    let status = std::process::Command::new("kill")
        .args(["-HUP", &server.pid().to_string()])
        .status()
        .expect("kill -HUP");
    assert!(status.success());
    // The rescan runs in the background: poll (bounded) until it has replaced the index.
    let mut after = before;
    for _ in 0..600 {
        after = count();
        if after != before {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    assert_eq!(after, before - 3, "the three specpower models are gone");
}

#[test]
fn basic_auth_from_the_web_config() {
    let db = model_db();
    let conf = tempfile::tempdir().expect("tempdir");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let web = conf.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  kepler: {hash}\n")).expect("write");
    let server = serve(
        db.path(),
        &["--web.config-file", web.to_str().expect("path")],
    );
    let anonymous = client().get(server.url("/models")).send().expect("GET");
    assert_eq!(anonymous.status(), StatusCode::UNAUTHORIZED);
    let r = client()
        .post(server.url("/model"))
        .basic_auth("kepler", Some("wrong"))
        .json(&request(true, json!({})))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    let r = client()
        .post(server.url("/model"))
        .basic_auth("kepler", Some("s3cret"))
        .json(&request(true, json!({})))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::OK);
}

#[test]
fn tls_from_the_web_config() {
    let db = model_db();
    let conf = tempfile::tempdir().expect("tempdir");
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    std::fs::write(conf.path().join("tls.crt"), cert.cert.pem()).expect("write");
    std::fs::write(
        conf.path().join("tls.key"),
        cert.signing_key.serialize_pem(),
    )
    .expect("write");
    let web = conf.path().join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    )
    .expect("write");
    let server = serve(
        db.path(),
        &["--web.config-file", web.to_str().expect("path")],
    );
    assert!(server.base.starts_with("https://"), "{}", server.base);
    let tls = reqwest::blocking::Client::builder()
        .use_rustls_tls()
        .tls_built_in_root_certs(false)
        .add_root_certificate(
            reqwest::Certificate::from_pem(cert.cert.pem().as_bytes()).expect("pem"),
        )
        .build()
        .expect("client");
    let r = tls
        .post(server.url("/model"))
        .json(&request(true, json!({})))
        .send()
        .expect("POST");
    assert_eq!(r.status(), StatusCode::OK);
    // Plain HTTP on the TLS port gets no answer.
    let plain = server.base.replacen("https://", "http://", 1);
    let r = client().get(format!("{plain}/healthz")).send();
    assert!(r.map_or(true, |r| !r.status().is_success()));
}

//! `PUT /models/<path>` on the real binary: the token (401 without, 403 when wrong or when
//! uploads are off), names checked against traversal, the body size limit, content checked
//! before anything is written, and an upload served from the next request on.

mod support;

use std::path::Path;

use reqwest::StatusCode;
use support::{client, pipeline, serve};

const TOKEN: &str = "upload-token-0123456789";
const DEST: &str = "mine/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json";

fn published(name: &str) -> Vec<u8> {
    std::fs::read(
        pipeline("ec2-0.7.11")
            .join("rapl-sysfs/AbsPower/BPFOnly")
            .join(name),
    )
    .expect("published model")
}

/// A server over an empty model directory with uploads on.
fn serving_with_token(extra: &[&str]) -> (tempfile::TempDir, tempfile::TempDir, support::Serving) {
    let models = tempfile::tempdir().expect("tempdir");
    let conf = tempfile::tempdir().expect("tempdir");
    let token_file = conf.path().join("token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).expect("token file");
    let mut args = vec!["--upload.token-file", token_file.to_str().expect("path")];
    args.extend_from_slice(extra);
    let server = serve(models.path(), &args);
    (models, conf, server)
}

/// Every file below `dir`, hidden ones included, relative.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).expect("read_dir") {
            let p = e.expect("entry").path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).expect("prefix").display().to_string());
            }
        }
    }
    out.sort();
    out
}

fn put(
    server: &support::Serving,
    path: &str,
    token: Option<&str>,
    body: Vec<u8>,
) -> reqwest::blocking::Response {
    let mut r = client()
        .put(server.url(&format!("/models/{path}")))
        .body(body);
    if let Some(t) = token {
        r = r.bearer_auth(t);
    }
    r.send().expect("PUT")
}

#[test]
fn uploads_need_the_token_and_are_served_at_once() {
    let (models, _conf, server) = serving_with_token(&[]);
    let body = published("SGDRegressorTrainer_0.json");

    let r = put(&server, DEST, None, body.clone());
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    assert!(r.headers().get("www-authenticate").is_some());
    let r = put(&server, DEST, Some("upload-token-0123456788"), body.clone());
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = put(&server, DEST, Some(&TOKEN[..TOKEN.len() - 1]), body.clone());
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(
        files(models.path()).is_empty(),
        "{:?}",
        files(models.path())
    );

    let r = put(&server, DEST, Some(TOKEN), body.clone());
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().unwrap_or_default()
    );
    // Served from the next request on, byte for byte, and listed.
    let fetched = client()
        .get(server.url(&format!("/models/{DEST}")))
        .send()
        .expect("GET");
    assert_eq!(fetched.status(), StatusCode::OK);
    assert_eq!(fetched.bytes().expect("body").as_ref(), body.as_slice());
    let listing: serde_json::Value = client()
        .get(server.url("/models"))
        .send()
        .expect("GET")
        .json()
        .expect("json");
    let paths: Vec<&str> = listing["models"]
        .as_array()
        .expect("models")
        .iter()
        .filter_map(|m| m["path"].as_str())
        .collect();
    assert_eq!(paths, [DEST]);
    assert_eq!(listing["models"][0]["output_type"], "AbsPower");

    // Replacing answers 200 and serves the new content (here, another bias); content that
    // contradicts its name (a curve fit named as a linear trainer) is refused.
    let curve = published("LogarithmicRegressionTrainer_0.json");
    let r = put(&server, DEST, Some(TOKEN), curve);
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let mut model: serde_json::Value = serde_json::from_slice(&body).expect("json");
    model["package"]["All_Weights"]["Bias_Weight"] = serde_json::json!(42.5);
    let other = serde_json::to_vec(&model).expect("json");
    let r = put(&server, DEST, Some(TOKEN), other.clone());
    assert_eq!(r.status(), StatusCode::OK);
    let fetched = client()
        .get(server.url(&format!("/models/{DEST}")))
        .send()
        .expect("GET");
    assert_eq!(fetched.bytes().expect("body").as_ref(), other.as_slice());
    assert_eq!(
        files(models.path()),
        [DEST],
        "no temporary or backup file is left"
    );
}

#[test]
fn uploads_are_refused_when_no_token_file_is_given() {
    let models = tempfile::tempdir().expect("tempdir");
    let server = serve(models.path(), &[]);
    let r = put(
        &server,
        DEST,
        Some(TOKEN),
        published("SGDRegressorTrainer_0.json"),
    );
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    assert!(r.text().expect("reason").contains("--upload.token-file"));
    assert!(files(models.path()).is_empty());
}

#[test]
fn a_short_token_file_stops_start_up() {
    let models = tempfile::tempdir().expect("tempdir");
    let token = models.path().join("t");
    std::fs::write(&token, "short\n").expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .args(["serve", "--listen", "127.0.0.1:0", "--model-dir"])
        .arg(models.path())
        .arg("--upload.token-file")
        .arg(&token)
        .output()
        .expect("run");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("shorter than 16"));
}

/// Sends `PUT <path>` byte for byte (clients normalise `..` away); returns the status.
fn raw_put_status(server: &support::Serving, path: &str, body: &[u8]) -> u16 {
    use std::io::{Read, Write};
    let addr = server.base.trim_start_matches("http://");
    let mut conn = std::net::TcpStream::connect(addr).expect("connect");
    write!(
        conn,
        "PUT {path} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {TOKEN}\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .expect("send");
    conn.write_all(body).expect("send body");
    let mut answer = String::new();
    conn.read_to_string(&mut answer).expect("read");
    answer
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0)
}

#[test]
fn bad_names_bad_content_and_oversized_bodies_write_nothing() {
    let (models, _conf, server) = serving_with_token(&[]);
    let body = published("SGDRegressorTrainer_0.json");
    for path in [
        "/models/../escape.json",
        "/models/a/%2e%2e/%2e%2e/escape.json",
        "/models/a/..%2F..%2Fescape.json",
        "/models/.hidden.json",
        "/models/a%20b.json",
        "/models/notes.txt",
        "/models/p/metadata.json",
    ] {
        let status = raw_put_status(&server, path, &body);
        assert!(status == 400 || status == 404, "{path}: {status}");
    }
    // Content that does not load is 422 and leaves nothing behind.
    let r = put(
        &server,
        DEST,
        Some(TOKEN),
        b"{\"not\": \"a model\"}".to_vec(),
    );
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = put(
        &server,
        "m.zip",
        Some(TOKEN),
        b"PK\x03\x04 truncated".to_vec(),
    );
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    let r = put(
        &server,
        "p/node_type_index.json",
        Some(TOKEN),
        b"[1,2]".to_vec(),
    );
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    // Over the upload limit (32 MiB): 413. Under it, and over the 64 KiB request limit of
    // the other routes, an archive is accepted.
    let r = put(&server, "big.json", Some(TOKEN), vec![b' '; 33 << 20]);
    assert_eq!(r.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let written = files(models.path());
    assert!(written.is_empty(), "something was written: {written:?}");
    let archive = published("XgboostFitTrainer_0.zip");
    assert!(
        archive.len() > 64 << 10,
        "the archive tests the larger limit"
    );
    let r = put(&server, "x/XgboostFitTrainer_0.zip", Some(TOKEN), archive);
    assert_eq!(
        r.status(),
        StatusCode::CREATED,
        "{}",
        r.text().unwrap_or_default()
    );
}

#[test]
fn the_token_header_works_beside_basic_auth() {
    let conf = tempfile::tempdir().expect("tempdir");
    let hash = bcrypt::hash("s3cret", 4).expect("bcrypt");
    let web = conf.path().join("web.yml");
    std::fs::write(&web, format!("basic_auth_users:\n  kepler: {hash}\n")).expect("write");
    let (_models, _conf, server) =
        serving_with_token(&["--web.config-file", web.to_str().expect("path")]);
    let body = published("SGDRegressorTrainer_0.json");
    let r = client()
        .put(server.url(&format!("/models/{DEST}")))
        .basic_auth("kepler", Some("s3cret"))
        .body(body.clone())
        .send()
        .expect("PUT");
    assert_eq!(
        r.status(),
        StatusCode::UNAUTHORIZED,
        "basic auth alone is not the token"
    );
    let r = client()
        .put(server.url(&format!("/models/{DEST}")))
        .basic_auth("kepler", Some("s3cret"))
        .header("x-kepler-upload-token", TOKEN)
        .body(body)
        .send()
        .expect("PUT");
    assert_eq!(r.status(), StatusCode::CREATED);
}

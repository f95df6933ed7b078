//! Fuzz target for the model server's router, driven in-process over a copy of the published
//! model DB: legacy `POST /model` bodies built from the request's fields and then mutated,
//! `GET /best-models` queries, `GET /models/<path>` and token-protected `PUT /models/<path>`
//! with arbitrary paths, headers and bodies. `KEPLER_FUZZ_CASES` sets the cases
//! (docs/security.md records the long local runs).

use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use kepler_testkit::fuzz::{edits, mutate};
use proptest::prelude::*;
use serde_json::{json, Value};
use tower::ServiceExt as _;

use super::index::ModelIndex;
use super::routes::{router, AppState, MAX_REQUEST_BYTES};
use super::upload::{UploadToken, TOKEN_HEADER};

const TOKEN: &str = "fuzz-token-0123456789";

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let target = to.join(entry.file_name());
        if entry.file_type()?.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else {
            std::fs::write(&target, std::fs::read(entry.path())?)?;
        }
    }
    Ok(())
}

struct Fixture {
    _dir: tempfile::TempDir,
    router: Router,
    models: Vec<(String, Vec<u8>)>,
    runtime: tokio::runtime::Runtime,
}

/// A writable copy of both published pipelines (in memory-backed /dev/shm when there is one,
/// so that the fsync of each accepted upload is cheap), its router with uploads on, and a few
/// model files to upload mutated.
fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let shm = Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            tempfile::tempdir_in(shm)
        } else {
            tempfile::tempdir()
        }
        .unwrap_or_else(|e| panic!("tempdir: {e}"));
        let db = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
            .join("../../data/kepler-model-db/models/v0.7");
        let mut models = Vec::new();
        for p in ["ec2-0.7.11", "specpower-0.7.11"] {
            copy_tree(&db.join(p), &dir.path().join(p)).unwrap_or_else(|e| panic!("copy {p}: {e}"));
        }
        for rel in [
            "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json",
            "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.zip",
        ] {
            let bytes =
                std::fs::read(dir.path().join(rel)).unwrap_or_else(|e| panic!("{rel}: {e}"));
            models.push((rel.to_owned(), bytes));
        }
        let index = ModelIndex::scan(dir.path()).unwrap_or_else(|e| panic!("scan: {e:#}"));
        let token = UploadToken::new(TOKEN.as_bytes()).unwrap_or_else(|e| panic!("token: {e:#}"));
        let state = Arc::new(AppState::new(dir.path().to_path_buf(), index, Some(token)));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"));
        Fixture {
            _dir: dir,
            router: router(state),
            models,
            runtime,
        }
    })
}

fn model_request() -> impl Strategy<Value = Value> {
    let metric = prop::sample::select(vec![
        "bpf_cpu_time_ms",
        "bpf_page_cache_hit",
        "cpu_instructions",
        "cache_miss",
        "",
        "x",
    ]);
    (
        prop::collection::vec(metric, 0..4),
        prop::sample::select(vec!["AbsPower", "DynPower", "abspower", "Other", ""]),
        prop::option::of(prop::sample::select(vec!["rapl-sysfs", "rapl", "acpi", "intel_rapl", ""])),
        prop::option::of(prop_oneof![
            any::<i64>().prop_map(|n| json!(n)),
            any::<f64>().prop_map(|n| json!(n)),
            "-?[0-9]{0,20}".prop_map(|s| json!(s)),
        ]),
        prop::option::of(any::<bool>()),
        prop::option::of(prop::sample::select(vec!["SGDRegressorTrainer", "XgboostFitTrainer", "Nope", ""])),
        prop::option::of(prop_oneof![
            prop::sample::select(vec!["mae<=10", "mape>=1;mae:3", "package_mae==0", "mae", "<=", "mae<=nan", "mae<=1e999"])
                .prop_map(str::to_owned),
            "[a-z_<>=:;,&0-9.]{0,24}",
        ]),
        prop::option::of(prop::sample::select(vec!["ec2-0.7.11", "specpower-0.7.11", "../etc", ""])),
        prop::option::of(prop_oneof![
            Just(json!({"processor": "intel_xeon_platinum_8259cl", "cores": 96, "chips": 2, "memory": 384, "frequency": 3500})),
            Just(json!({"cores": -1, "memory": 1e308, "threads_per_core": "x"})),
            Just(json!([1, 2, 3])),
            Just(json!("spec")),
        ]),
        prop::option::of(any::<bool>()),
    )
        .prop_map(|(metrics, ot, source, node_type, weight, trainer, filter, pipeline, spec, loose)| {
            let mut r = json!({ "metrics": metrics, "output_type": ot });
            let mut set = |k: &str, v: Option<Value>| {
                if let (Some(v), Some(o)) = (v, r.as_object_mut()) {
                    o.insert(k.to_owned(), v);
                }
            };
            set("source", source.map(|s| json!(s)));
            set("node_type", node_type);
            set("weight", weight.map(|w| json!(w)));
            set("trainer_name", trainer.map(|t| json!(t)));
            set("filter", filter.map(|f| json!(f)));
            set("pipeline_name", pipeline.map(|p| json!(p)));
            set("machine_spec", spec);
            set("loose_node_type", loose.map(|l| json!(l)));
            r
        })
}

/// (method, uri, headers, body) of one request.
type Req = (Method, String, Vec<(String, Vec<u8>)>, Vec<u8>);

fn request() -> impl Strategy<Value = Req> {
    let post_model = (model_request(), edits(), any::<bool>()).prop_map(|(body, edits, keep)| {
        let body = serde_json::to_vec(&body).unwrap_or_default();
        let body = if keep { body } else { mutate(body, &edits) };
        (Method::POST, "/model".to_owned(), vec![], body)
    });
    let best = (
        prop::option::of("[A-Za-z]{0,10}"),
        prop::option::of(prop::sample::select(vec!["AbsPower", "DynPower", "x"])),
        prop::option::of("[a-z_<>=:;,&0-9.%]{0,24}"),
        "[!-~]{0,20}",
    )
        .prop_map(|(fg, ot, filter, junk)| {
            let mut q = Vec::new();
            if let Some(fg) = fg {
                q.push(format!("fg={fg}"));
            }
            if let Some(ot) = ot {
                q.push(format!("ot={ot}"));
            }
            if let Some(f) = filter {
                q.push(format!("filter={f}"));
            }
            q.push(junk);
            (
                Method::GET,
                format!("/best-models?{}", q.join("&")),
                vec![],
                vec![],
            )
        });
    let path = prop_oneof![
        prop::sample::select(vec![
            "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json",
            "ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/fuzz_0.json",
            "ec2-0.7.11/node_type_index.json",
            "../../../etc/passwd",
            "ec2-0.7.11/%2e%2e/%2e%2e/x.json",
            ".hidden/x.json",
            "a//b.json",
        ])
        .prop_map(str::to_owned),
        "[!-~]{0,40}",
    ];
    let fetch = path
        .clone()
        .prop_map(|p| (Method::GET, format!("/models/{p}"), vec![], vec![]));
    let token = prop_oneof![
        Just(None),
        Just(Some((TOKEN_HEADER.to_owned(), TOKEN.as_bytes().to_vec()))),
        Just(Some((
            "authorization".to_owned(),
            format!("Bearer {TOKEN}").into_bytes()
        ))),
        Just(Some((
            "authorization".to_owned(),
            format!("bearer  {TOKEN} ").into_bytes()
        ))),
        prop::collection::vec(any::<u8>(), 0..30).prop_map(|t| Some((TOKEN_HEADER.to_owned(), t))),
        "[ -~]{0,30}".prop_map(|t| Some(("authorization".to_owned(), t.into_bytes()))),
    ];
    let upload = (
        path,
        token,
        0usize..3,
        prop::collection::vec(any::<u8>(), 0..200),
        edits(),
    )
        .prop_map(|(p, token, which, random, edits)| {
            let fixture = fixture();
            let body = match fixture.models.get(which) {
                Some((_, bytes)) => mutate(bytes.clone(), &edits),
                None => random,
            };
            (
                Method::PUT,
                format!("/models/{p}"),
                token.into_iter().collect(),
                body,
            )
        });
    let other = (
        prop::sample::select(vec!["GET", "POST", "DELETE", "PATCH", "HEAD"]),
        prop::sample::select(vec![
            "/",
            "/models",
            "/healthz",
            "/metrics",
            "/model",
            "/best-models",
            "/models/",
        ]),
        prop::collection::vec(any::<u8>(), 0..100),
    )
        .prop_map(|(m, p, body)| {
            (
                Method::from_bytes(m.as_bytes()).unwrap_or(Method::GET),
                p.to_owned(),
                vec![],
                body,
            )
        });
    let oversized = Just((
        Method::POST,
        "/model".to_owned(),
        vec![],
        vec![b' '; MAX_REQUEST_BYTES + 1],
    ));
    prop_oneof![6 => post_model, 2 => best, 2 => fetch, 3 => upload, 1 => other, 1 => oversized]
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(1024))]

    /// Client errors are 4xx, never 5xx; an upload is stored only with the token; a file is
    /// served only from inside the model directory; bodies above the limit get 413.
    #[test]
    fn model_server_requests((method, uri, headers, body) in request(), extra in prop::collection::vec(("[a-zA-Z-]{1,16}", "[ -~]{0,30}"), 0..3)) {
        let fixture = fixture();
        let mut builder = Request::builder().method(method.clone()).uri(uri.as_str());
        for (name, value) in &headers {
            builder = builder.header(name.as_str(), value.as_slice());
        }
        for (name, value) in &extra {
            builder = builder.header(name.as_str(), value.as_str());
        }
        let oversized = body.len() > MAX_REQUEST_BYTES;
        let Ok(request) = builder.body(Body::from(body)) else {
            return Ok(());
        };
        let response = fixture
            .runtime
            .block_on(fixture.router.clone().oneshot(request))
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let status = response.status();
        prop_assert!(!status.is_server_error(), "{status} for {method} {uri}");
        if oversized {
            prop_assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
        }
        if method == Method::PUT && status.is_success() {
            let with_token = headers.iter().any(|(n, v)| {
                let v = String::from_utf8_lossy(v);
                (n == TOKEN_HEADER && v == TOKEN) || (n == "authorization" && v.trim().ends_with(TOKEN))
            });
            prop_assert!(with_token, "stored without the token: {uri}");
        }
        if status.is_success() && uri.starts_with("/models/") {
            prop_assert!(!uri.contains(".."), "{uri}");
        }
    }
}

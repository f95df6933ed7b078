//! Fuzz target for the exporter's router, driven in-process: any method, path, `Accept` and
//! other headers, and body, against an agent with and without a published snapshot. The auth
//! layer in front of it is fuzzed in crates/http (src/fuzz.rs). `KEPLER_FUZZ_CASES` sets the
//! cases (docs/security.md records the long local runs).

mod support;

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use axum::Router;
use http_body_util::BodyExt as _;
use kepler_exporters::{router, AgentState, AgentStats};
use proptest::prelude::*;
use tower::ServiceExt as _;

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
    })
}

/// [0]: before the first tick; [1]: with a snapshot published.
fn routers() -> &'static [Router; 2] {
    static ROUTERS: OnceLock<[Router; 2]> = OnceLock::new();
    ROUTERS.get_or_init(|| {
        let fresh = Arc::new(AgentState::new(support::context()));
        let ticked = Arc::new(AgentState::new(support::context()));
        ticked.publish(
            Arc::new(support::snapshot()),
            AgentStats {
                last_tick_duration: Duration::from_millis(4),
                ticks: 1,
                ebpf: None,
            },
        );
        [router(fresh), router(ticked)]
    })
}

fn accept() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::sample::select(vec![
            "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            "application/openmetrics-text; version=0.0.1",
            "text/plain;version=0.0.4",
            "text/plain;q=0",
            "*/*;q=abc",
            "application/json",
            ";;;,,,;q=",
            "",
        ])
        .prop_map(|s| s.as_bytes().to_vec()),
        "[ -~]{0,80}".prop_map(String::into_bytes),
        prop::collection::vec(any::<u8>(), 0..80),
    ]
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(2048))]

    /// Known paths answer 200 (or 503 from /readyz and /metrics before the first tick);
    /// anything else 404 or 405. Never another server error.
    #[test]
    fn exporter_requests(
        ticked in any::<bool>(),
        method in prop_oneof![
            prop::sample::select(vec!["GET", "HEAD", "POST", "DELETE", "OPTIONS"]).prop_map(str::to_owned),
            "[A-Z]{1,10}",
        ],
        path in prop_oneof![
            prop::sample::select(vec![
                "/metrics", "/", "/healthz", "/readyz", "/probe/livez", "/probe/readyz",
                "/metrics?name[]=x", "/metrics/", "/%2e%2e/etc/passwd",
            ]).prop_map(str::to_owned),
            "/[!-~]{0,60}",
        ],
        accept in prop::option::of(accept()),
        extra in prop::collection::vec(("[a-zA-Z-]{1,20}", prop::collection::vec(any::<u8>(), 0..40)), 0..4),
        body in prop::collection::vec(any::<u8>(), 0..512),
    ) {
        let mut request = Request::builder().uri(path.as_str());
        if let Ok(m) = Method::from_bytes(method.as_bytes()) {
            request = request.method(m);
        }
        if let Some(accept) = &accept {
            request = request.header("accept", accept.as_slice());
        }
        for (name, value) in &extra {
            request = request.header(name.as_str(), value.as_slice());
        }
        // A request the http crate refuses to build never reaches a server either.
        let Ok(request) = request.body(Body::from(body)) else {
            return Ok(());
        };
        let router = routers()[usize::from(ticked)].clone();
        let (status, content_type, body) = runtime().block_on(async {
            let response = router.oneshot(request).await.map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
            let status = response.status();
            let content_type = response.headers().get("content-type").cloned();
            let body = response.into_body().collect().await
                .map_err(|e| TestCaseError::fail(format!("{e:?}")))?.to_bytes();
            Ok::<_, TestCaseError>((status, content_type, body))
        })?;
        let route = path.split('?').next().unwrap_or("");
        let readiness = matches!(route, "/readyz" | "/probe/readyz" | "/metrics");
        prop_assert!(
            status.is_success()
                || [StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED].contains(&status)
                || (status == StatusCode::SERVICE_UNAVAILABLE && !ticked && readiness),
            "{status} for {method} {path}"
        );
        if status == StatusCode::OK && route == "/metrics" && method == "GET" {
            let content_type = content_type.and_then(|v| v.to_str().ok().map(str::to_owned)).unwrap_or_default();
            prop_assert!(
                content_type.starts_with("text/plain") || content_type.starts_with("application/openmetrics-text"),
                "{content_type}"
            );
            // Before the first tick /metrics serves the agent's own families only.
            let text = std::str::from_utf8(&body);
            prop_assert!(text.is_ok());
            if ticked {
                prop_assert!(text.is_ok_and(|t| t.contains("kepler_node_cpu_joules_total")));
            }
        }
    }
}

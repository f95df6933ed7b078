//! Fuzz targets for what reaches kepler-http from outside: the web config file (YAML built from
//! the toolkit's fields, then mutated, and random text), the `Authorization` header, and whole
//! requests through the auth/headers/rate-limit layer, driven in-process. `KEPLER_FUZZ_CASES`
//! sets the cases per target (docs/security.md records the long local runs).

use std::path::Path;
use std::sync::{Arc, OnceLock};

use axum::body::Body;
use axum::http::{HeaderValue, Method, Request, StatusCode};
use axum::routing::get;
use axum::{middleware, Router};
use base64::Engine as _;
use kepler_testkit::fuzz::{edits, mutate_text};
use proptest::prelude::*;
use tower::ServiceExt as _;

use crate::auth::{decode_basic, guard_layer, Guard};
use crate::web_config::{WebConfig, WebConfigError};

/// bcrypt of "pw" at the lowest cost, so that a fuzzed login costs about a millisecond.
fn hash() -> &'static str {
    static HASH: OnceLock<String> = OnceLock::new();
    HASH.get_or_init(|| bcrypt::hash("pw", 4).unwrap_or_else(|e| panic!("bcrypt: {e}")))
}

/// One line of a web config: a toolkit field with a value that is right, wrong or odd.
fn web_line() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("1s".to_owned()),
        Just("0s".to_owned()),
        Just("18446744073709551615s".to_owned()),
        any::<u32>().prop_map(|n| n.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        Just("TLS13".to_owned()),
        Just("X25519".to_owned()),
        Just("RequireAndVerifyClientCert".to_owned()),
        Just(format!("'{}'", hash())),
        Just("'$2y$31$abcdefghijklmnopqrstuu5Rj9bXy2t9lNPxv9WQqvqz7u0uNYy'".to_owned()),
        Just("[]".to_owned()),
        Just("[a, 'DNS:x', 'IP:::1']".to_owned()),
        Just("{}".to_owned()),
        "[ -~]{0,16}",
    ];
    let field = prop::sample::select(vec![
        "rate_limit:\n  interval:",
        "rate_limit:\n  burst:",
        "http_server_config:\n  http2:",
        "http_server_config:\n  headers:\n    X-Frame-Options:",
        "http_server_config:\n  headers:\n    Content-Type:",
        "basic_auth_users:\n  alice:",
        "basic_auth_users:\n  'a:b':",
        "tls_server_config:\n  min_version:",
        "tls_server_config:\n  max_version:",
        "tls_server_config:\n  cipher_suites:",
        "tls_server_config:\n  curve_preferences:",
        "tls_server_config:\n  client_allowed_sans:",
        "tls_server_config:\n  client_auth_type:",
        "tls_server_config:\n  cert:",
        "tls_server_config:\n  cert_file:",
        "unknown_field:",
    ]);
    (field, value).prop_map(|(f, v)| format!("{f} {v}\n"))
}

/// `strict`: the hash may not appear in any error. A mutated file can make it a user name,
/// which field errors quote; serde's own messages must never quote it.
fn check_parse(text: &str, strict: bool) -> Result<Option<WebConfig>, TestCaseError> {
    match WebConfig::parse(text, Path::new("/etc/kepler"), "web.yml") {
        Ok(c) => {
            prop_assert_eq!(&c.file, "web.yml");
            if let Some(limit) = c.rate_limit {
                prop_assert!(limit.burst > 0 && !limit.interval.is_zero());
            }
            for hash in c.basic_auth_users.values() {
                prop_assert!(hash.cost() <= crate::MAX_BCRYPT_COST);
            }
            Ok(Some(c))
        }
        Err(e) => {
            prop_assert!(
                matches!(
                    e,
                    WebConfigError::Parse { .. } | WebConfigError::Field { .. }
                ),
                "{e:?}"
            );
            prop_assert!(e.to_string().contains("web.yml"), "{e}");
            // A bcrypt digest is a secret: never echoed in an error.
            if strict || matches!(e, WebConfigError::Parse { .. }) {
                prop_assert!(!e.to_string().contains(hash()), "{e}");
                // Nor a piece of it that survived the byte edits (the 22 characters of salt).
                if let Some(salt) = hash().get(7..29) {
                    prop_assert!(!e.to_string().contains(salt), "{e}");
                }
            }
            Ok(None)
        }
    }
}

fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("tokio runtime: {e}"))
    })
}

/// The guarded router of each web config the request target uses: basic auth, an extra header
/// and, for one, a rate limit.
fn guarded(web: &str) -> Router {
    let web = WebConfig::parse(web, Path::new("."), "web.yml")
        .unwrap_or_else(|e| panic!("fixture web config: {e}"));
    let guard = Arc::new(Guard::new(&web).unwrap_or_else(|e| panic!("guard: {e}")));
    Router::new()
        .route(
            "/metrics",
            get(|| async { "ok\n" }).post(|| async { "posted\n" }),
        )
        .layer(middleware::from_fn_with_state(guard, guard_layer))
}

fn routers() -> &'static [Router; 2] {
    static ROUTERS: OnceLock<[Router; 2]> = OnceLock::new();
    ROUTERS.get_or_init(|| {
        let users = format!("basic_auth_users:\n  alice: '{}'\n", hash());
        let headers = "http_server_config:\n  headers:\n    X-Frame-Options: deny\n";
        [
            guarded(&format!("{users}{headers}")),
            guarded(&format!(
                "{users}{headers}rate_limit:\n  interval: 1ms\n  burst: 3\n"
            )),
        ]
    })
}

fn authorization() -> impl Strategy<Value = Option<Vec<u8>>> {
    let b64 = |s: &[u8]| base64::engine::general_purpose::STANDARD.encode(s);
    prop_oneof![
        Just(None),
        // Right credentials, wrong password, unknown user: these few reach bcrypt.
        prop::sample::select(vec!["alice:pw", "alice:nope", "bob:pw", "alice", ":", ""])
            .prop_map(move |c| Some(format!("Basic {}", b64(c.as_bytes())).into_bytes())),
        prop::collection::vec(any::<u8>(), 0..60)
            .prop_map(move |raw| Some(format!("bAsIc  {} ", b64(&raw)).into_bytes())),
        "(Basic|Bearer|basic|) ?[ -~]{0,40}".prop_map(|s| Some(s.into_bytes())),
        prop::collection::vec(any::<u8>(), 0..60).prop_map(Some),
    ]
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(4096))]

    #[test]
    fn web_config_files(lines in prop::collection::vec(web_line(), 0..5), edits in edits()) {
        let text: String = lines.concat();
        check_parse(&text, true)?;
        check_parse(&mutate_text(&text, &edits), false)?;
    }

    #[test]
    fn web_config_random_text(text in "\\PC{0,300}") {
        check_parse(&text, true)?;
    }

    #[test]
    fn authorization_header(user in "[^:\u{0}]{0,20}", password in "\\PC{0,20}", raw in prop::collection::vec(any::<u8>(), 0..80)) {
        let encoded = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        let value = HeaderValue::from_str(&format!("Basic {encoded}")).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(decode_basic(&value), Some(format!("{user}:{password}").into_bytes()));
        if let Ok(value) = HeaderValue::from_bytes(&raw) {
            let _ = decode_basic(&value);
        }
    }

    /// Any method, path, headers and body: the guard answers 401 (with a challenge), 429 or
    /// lets the request through to a route (200, 404, 405); never a server error, and the
    /// configured header is on every answer.
    #[test]
    fn guarded_requests(
        which in 0usize..2,
        method in prop_oneof![
            prop::sample::select(vec!["GET", "POST", "HEAD", "PUT", "OPTIONS"]).prop_map(str::to_owned),
            "[A-Z]{1,10}",
        ],
        path in prop_oneof![
            prop::sample::select(vec!["/metrics", "/", "/metrics/", "/metrics?x=1", "//metrics"]).prop_map(str::to_owned),
            "/[!-~]{0,40}",
        ],
        auth in authorization(),
        extra in prop::collection::vec(("[a-zA-Z-]{1,20}", prop::collection::vec(any::<u8>(), 0..40)), 0..4),
        body in prop::collection::vec(any::<u8>(), 0..256),
    ) {
        let mut request = Request::builder().uri(path.as_str());
        if let Ok(m) = Method::from_bytes(method.as_bytes()) {
            request = request.method(m);
        }
        if let Some(auth) = &auth {
            request = request.header("authorization", auth.as_slice());
        }
        for (name, value) in &extra {
            request = request.header(name.as_str(), value.as_slice());
        }
        // A request the http crate refuses to build never reaches a server either.
        let Ok(request) = request.body(Body::from(body)) else {
            return Ok(());
        };
        let router = routers()[which].clone();
        let response = runtime()
            .block_on(router.oneshot(request))
            .map_err(|e| TestCaseError::fail(format!("{e:?}")))?;
        let status = response.status();
        prop_assert!(
            [StatusCode::OK, StatusCode::UNAUTHORIZED, StatusCode::TOO_MANY_REQUESTS,
             StatusCode::NOT_FOUND, StatusCode::METHOD_NOT_ALLOWED].contains(&status),
            "{status}"
        );
        prop_assert_eq!(response.headers().get("x-frame-options").map(|v| v.as_bytes()), Some(&b"deny"[..]));
        if status == StatusCode::UNAUTHORIZED {
            prop_assert!(response.headers().contains_key("www-authenticate"));
        }
        if status == StatusCode::OK {
            // Only alice's password opens the door.
            let ok = format!("Basic {}", base64::engine::general_purpose::STANDARD.encode("alice:pw"));
            prop_assert!(auth.as_deref().and_then(|a| std::str::from_utf8(a).ok()).is_some_and(|a| a.trim().eq_ignore_ascii_case(&ok) || decode_basic_text(a) == Some("alice:pw".into())));
        }
    }
}

fn decode_basic_text(header: &str) -> Option<String> {
    let value = HeaderValue::from_str(header).ok()?;
    String::from_utf8(decode_basic(&value)?).ok()
}

//! The Prometheus exporter's endpoints as an axum [`Router`]: `/metrics`, `/healthz`, `/readyz`
//! and a landing page, over the state the tick loop publishes. Serving it (listen addresses,
//! TLS, basic auth, timeouts, shutdown) is kepler-http's job, so the agent serves it with
//! `kepler_http::Server` and the same web config as any other kepler-rs endpoint.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::header::{ACCEPT, CONTENT_TYPE};
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::encode::Format;
use crate::state::{AgentState, Readiness};

/// The exporter's routes over `state`. Give it to `kepler_http::Server::serve`, which puts
/// basic auth in front of every route, `/healthz` and `/readyz` included.
pub fn router(state: Arc<AgentState>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .with_state(state)
}

async fn metrics(State(state): State<Arc<AgentState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    // Only encoding happens here: the snapshot was computed by the tick loop.
    let body = state.encode(format);
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        Body::from(body),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AgentState>>) -> Response {
    match state.readiness() {
        Readiness::Ready => (StatusCode::OK, "ready").into_response(),
        Readiness::NotReady { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        )
            .into_response(),
    }
}

async fn index(State(state): State<Arc<AgentState>>) -> Html<String> {
    let version = escape_html(&state.context().build.version);
    Html(format!(
        "<!DOCTYPE html>\n<html><head><title>Kepler</title></head><body>\n\
         <h1>Kepler</h1>\n<p>Power consumption exporter (kepler-rs {version}).</p>\n<ul>\n\
         <li><a href=\"metrics\">metrics</a></li>\n\
         <li><a href=\"healthz\">healthz</a></li>\n\
         <li><a href=\"readyz\">readyz</a></li>\n</ul>\n</body></html>\n"
    ))
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn landing_page_escapes_the_version() {
        assert_eq!(
            escape_html("1.0<script>&\"x\""),
            "1.0&lt;script&gt;&amp;&quot;x&quot;"
        );
    }
}

//! The Prometheus exporter's endpoints as an axum [`Router`]: `/metrics`, `/healthz`, `/readyz`
//! and a landing page, over the state the tick loop publishes. Serving it (listen addresses,
//! TLS, basic auth, timeouts, shutdown) is kepler-http's job, so the agent serves it with
//! `kepler_http::Server` and the same web config as any other kepler-rs endpoint.

use std::sync::Arc;
use std::time::Duration;

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
    router_with(state, Routes::default())
}

/// Which optional routes are served.
#[derive(Copy, Clone, Debug)]
pub struct Routes {
    /// `/metrics`; `exporter.prometheus.enabled: false` turns it off while `/healthz`, `/readyz`
    /// and `/` stay served for probes.
    pub metrics: bool,
}

impl Default for Routes {
    fn default() -> Self {
        Routes { metrics: true }
    }
}

/// Every path the router can serve, and whether it is served with `/metrics` turned off (for
/// docs/compatibility.md's check).
pub const PATHS: &[(&str, bool)] = &[
    ("/metrics", false),
    ("/", true),
    ("/healthz", true),
    ("/readyz", true),
    ("/probe/livez", true),
    ("/probe/readyz", true),
];

/// [`router`] with the optional routes chosen.
pub fn router_with(state: Arc<AgentState>, routes: Routes) -> Router {
    // Upstream's chart probes /probe/livez and /probe/readyz; older manifests the short names.
    let mut router = Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/probe/livez", get(healthz))
        .route("/probe/readyz", get(readyz));
    if routes.metrics {
        router = router
            .route("/metrics", get(metrics))
            .route("/", get(index_with_metrics));
    } else {
        router = router.route("/", get(index_without_metrics));
    }
    router.with_state(state)
}

/// How long a scrape waits for an on-demand tick before it serves the snapshot it has.
const REFRESH_LIMIT: Duration = Duration::from_secs(30);

async fn metrics(State(state): State<Arc<AgentState>>, headers: HeaderMap) -> Response {
    if let Some(refresh) = state.refresh() {
        // The tick runs on the sampling thread; this only waits for it.
        refresh.refresh(REFRESH_LIMIT).await;
    }
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    // Only encoding happens here: the snapshot was computed by the tick loop.
    // Shared with every other scrape of this snapshot: no per-connection copy.
    let body = state.scrape(format);
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        Body::new(body),
    )
        .into_response()
}

async fn healthz(State(state): State<Arc<AgentState>>) -> Response {
    match state.liveness().check() {
        Ok(()) => "ok".into_response(),
        Err(reason) => (StatusCode::SERVICE_UNAVAILABLE, reason).into_response(),
    }
}

async fn readyz(State(state): State<Arc<AgentState>>) -> Response {
    // With ticks on demand, nothing but scrapes would ever compute the interval readiness
    // waits for, and scrapers may wait for readiness: a probe asks for that tick itself.
    if let Some(refresh) = state.refresh() {
        if !state.readiness().is_ready() {
            refresh.refresh(Duration::from_secs(5)).await;
        }
    }
    match state.readiness() {
        Readiness::Ready => (StatusCode::OK, "ready").into_response(),
        Readiness::NotReady { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        )
            .into_response(),
    }
}

async fn index_with_metrics(State(state): State<Arc<AgentState>>) -> Html<String> {
    index(&state, true)
}

async fn index_without_metrics(State(state): State<Arc<AgentState>>) -> Html<String> {
    index(&state, false)
}

fn index(state: &AgentState, metrics: bool) -> Html<String> {
    let version = escape_html(&state.context().build.version);
    let metrics_link = if metrics {
        "<li><a href=\"metrics\">metrics</a></li>\n"
    } else {
        ""
    };
    Html(format!(
        "<!DOCTYPE html>\n<html><head><title>Kepler</title></head><body>\n\
         <h1>Kepler</h1>\n<p>Power consumption exporter (kepler-rs {version}).</p>\n<ul>\n\
         {metrics_link}<li><a href=\"healthz\">healthz</a></li>\n\
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

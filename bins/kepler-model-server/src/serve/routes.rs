//! The router, the shared state and the response helpers.
//!
//! Every route is served through `kepler_http::Server`, which adds TLS and basic auth from
//! the web config in front of all of them.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;
use axum::extract::DefaultBodyLimit;
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use super::index::{ModelEntry, ModelIndex};
use super::metrics::{self, ServerMetrics};
use super::upload::{self, UploadToken, MAX_UPLOAD_BYTES};
use super::{legacy, modern};

/// Largest request body accepted (413 above). A legacy model request is a few hundred bytes;
/// this leaves room for long metric lists and machine specs, and nothing else takes a body.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// What the handlers share: the current index, replaced whole on a rescan so that a request
/// sees one consistent index.
pub struct AppState {
    pub model_dir: PathBuf,
    index: ArcSwap<ModelIndex>,
    pub metrics: ServerMetrics,
    /// `None`: uploads are off.
    pub upload_token: Option<UploadToken>,
    /// Held by whatever writes to the model directory and rescans it (uploads, retraining,
    /// SIGHUP), so that one writer's rollback never meets another's file.
    pub write_lock: std::sync::Mutex<()>,
}

impl AppState {
    pub fn new(
        model_dir: PathBuf,
        index: ModelIndex,
        upload_token: Option<UploadToken>,
    ) -> AppState {
        AppState {
            model_dir,
            index: ArcSwap::from_pointee(index),
            metrics: ServerMetrics::default(),
            upload_token,
            write_lock: std::sync::Mutex::new(()),
        }
    }

    pub fn index(&self) -> Arc<ModelIndex> {
        self.index.load_full()
    }

    /// Re-reads the model directory; on failure the current index stays.
    pub fn rescan(&self) -> anyhow::Result<Arc<ModelIndex>> {
        let _guard = self.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.rescan_locked()
    }

    /// [`rescan`](Self::rescan) for a caller that holds `write_lock`.
    pub fn rescan_locked(&self) -> anyhow::Result<Arc<ModelIndex>> {
        let index = Arc::new(ModelIndex::scan(&self.model_dir)?);
        self.index.store(index.clone());
        self.metrics.rescanned();
        Ok(index)
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/model", post(legacy::post_model))
        .route("/best-models", get(legacy::best_models))
        .route("/models", get(modern::list))
        .route(
            "/models/{*path}",
            get(modern::fetch)
                .put(upload::put)
                // Inside the router-wide limit below, so it is the one that applies here.
                .layer(DefaultBodyLimit::max(MAX_UPLOAD_BYTES)),
        )
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(metrics::get))
        // Layered per route, so the middleware sees which route matched.
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            metrics::track,
        ))
        .with_state(state)
        // Applies to every extractor that reads a body (`Bytes` in POST /model): 413 above.
        .layer(DefaultBodyLimit::max(MAX_REQUEST_BYTES))
}

pub fn text_response(status: StatusCode, text: String) -> Response {
    (
        status,
        [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
        text,
    )
        .into_response()
}

pub fn json_response<T: serde::Serialize>(value: &T) -> Response {
    match serde_json::to_vec_pretty(value) {
        Ok(body) => ([(header::CONTENT_TYPE, "application/json")], body).into_response(),
        Err(e) => text_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("encoding the answer: {e}\n"),
        ),
    }
}

/// A model file as stored, named for download and labelled with its path.
pub fn file_response(model: &ModelEntry) -> Response {
    let file_name = model.path.rsplit('/').next().unwrap_or(&model.path);
    let mut response = (
        [(header::CONTENT_TYPE, model.format.content_type())],
        model.bytes.clone(),
    )
        .into_response();
    let headers = response.headers_mut();
    // Index paths are UTF-8 file names; one a header cannot carry is only left unlabelled.
    let quoted = file_name.replace(['"', '\\'], "_");
    if let Ok(v) = HeaderValue::from_str(&format!("attachment; filename=\"{quoted}\"")) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    if let Ok(v) = HeaderValue::from_str(&model.path) {
        headers.insert("x-kepler-model", v);
    }
    response
}

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
use super::{legacy, modern};

/// Largest request body accepted (413 above). A legacy model request is a few hundred bytes;
/// this leaves room for long metric lists and machine specs, and nothing else takes a body.
pub const MAX_REQUEST_BYTES: usize = 64 << 10;

/// What the handlers share: the current index, replaced whole on a rescan so that a request
/// sees one consistent index.
pub struct AppState {
    model_dir: PathBuf,
    index: ArcSwap<ModelIndex>,
}

impl AppState {
    pub fn new(model_dir: PathBuf, index: ModelIndex) -> AppState {
        AppState {
            model_dir,
            index: ArcSwap::from_pointee(index),
        }
    }

    pub fn index(&self) -> Arc<ModelIndex> {
        self.index.load_full()
    }

    /// Re-reads the model directory; on failure the current index stays.
    pub fn rescan(&self) -> anyhow::Result<Arc<ModelIndex>> {
        let index = Arc::new(ModelIndex::scan(&self.model_dir)?);
        self.index.store(index.clone());
        Ok(index)
    }
}

pub fn router(state: Arc<AppState>) -> Router {
    Router::new()
        .route("/model", post(legacy::post_model))
        .route("/best-models", get(legacy::best_models))
        .route("/models", get(modern::list))
        .route("/models/{*path}", get(modern::fetch))
        .route("/healthz", get(|| async { "ok\n" }))
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

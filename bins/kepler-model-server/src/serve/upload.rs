//! `PUT /models/<path>`: stores a trained model (or a pipeline's `node_type_index.json` or
//! accuracy table) in the model directory and serves it from the next request on.
//!
//! Uploads need a bearer token, read from `--upload.token-file` at start-up; without one,
//! uploads are off (403). The token travels in `Authorization: Bearer <token>` or, when the
//! web config's basic auth already uses `Authorization`, in `X-Kepler-Upload-Token`. It is
//! compared through an HMAC under a random per-process key, so the comparison takes the same
//! time whatever the presented token shares with the real one, length included.
//!
//! Nothing is written half-way: the body is written to a hidden file beside its destination
//! (the index skips hidden files), checked the way the index loads it, renamed into place,
//! and the directory rescanned; if the new index does not serve the file, the previous file
//! (or none) is put back.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context, Result};
use axum::body::Bytes;
use axum::extract::{Path as UrlPath, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::Response;
use ring::hmac;

use super::metadata;
use super::metrics::UploadOutcome;
use super::modern::check_model_path;
use super::routes::{json_response, text_response, AppState};

/// Largest upload accepted (413 above): the largest published archive is under 1 MB, a
/// gradient-boosted model with many trees a few MB.
pub const MAX_UPLOAD_BYTES: usize = 32 << 20;
/// Shortest token accepted from the token file: a guessable token protects nothing.
const MIN_TOKEN_LEN: usize = 16;
/// The header carrying the token when `Authorization` holds basic-auth credentials.
pub const TOKEN_HEADER: &str = "x-kepler-upload-token";

/// The upload token, kept only as an HMAC tag under a random key.
pub struct UploadToken {
    key: hmac::Key,
    tag: hmac::Tag,
}

impl std::fmt::Debug for UploadToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("UploadToken(..)")
    }
}

impl UploadToken {
    /// Reads the token file: its content without surrounding whitespace.
    pub fn load(path: &Path) -> Result<UploadToken> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading the upload token file {}", path.display()))?;
        let token = text.trim();
        if token.len() < MIN_TOKEN_LEN {
            bail!(
                "the upload token in {} is shorter than {MIN_TOKEN_LEN} characters",
                path.display()
            );
        }
        UploadToken::new(token.as_bytes())
    }

    pub(crate) fn new(token: &[u8]) -> Result<UploadToken> {
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| anyhow::anyhow!("no random numbers for the upload token key"))?;
        let tag = hmac::sign(&key, token);
        Ok(UploadToken { key, tag })
    }

    fn matches(&self, presented: &[u8]) -> bool {
        hmac::verify(&self.key, presented, self.tag.as_ref()).is_ok()
    }
}

/// The token a request presents, if any.
fn presented(headers: &HeaderMap) -> Option<&[u8]> {
    if let Some(v) = headers.get(TOKEN_HEADER) {
        return Some(v.as_bytes());
    }
    let auth = headers.get(header::AUTHORIZATION)?.as_bytes();
    let (scheme, rest) = auth.split_at(auth.iter().position(|&b| b == b' ')?);
    scheme
        .eq_ignore_ascii_case(b"bearer")
        .then(|| rest.trim_ascii())
}

/// What an uploaded path names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum UploadKind {
    Model,
    NodeTypeIndex,
    AccuracyTable,
}

/// Checks an upload path beyond [`check_model_path`]: plain names (letters, digits, `.`,
/// `_`, `-`), none hidden, and a file the index reads.
fn upload_kind(path: &str) -> Result<UploadKind, String> {
    check_model_path(path)?;
    let components: Vec<&str> = path.split('/').collect();
    if components.len() > 12 {
        return Err("model paths are at most 12 components deep".into());
    }
    for c in &components {
        if c.starts_with('.') || c.starts_with('-') || c.len() > 200 {
            return Err(format!(
                "{c:?}: names may not start with '.' or '-' or exceed 200 bytes"
            ));
        }
        if !c
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"._-".contains(&b))
        {
            return Err(format!(
                "{c:?}: names may hold only letters, digits, '.', '_' and '-'"
            ));
        }
    }
    let name = components.last().copied().unwrap_or_default();
    if name == "node_type_index.json" {
        Ok(UploadKind::NodeTypeIndex)
    } else if metadata::table_name(name).is_some() {
        Ok(UploadKind::AccuracyTable)
    } else if name == "metadata.json" {
        Err("metadata.json is read from inside archives, not served".into())
    } else if name.ends_with(".json") || name.ends_with(".zip") {
        Ok(UploadKind::Model)
    } else {
        Err(
            "uploads are model files (.json, .zip), node_type_index.json or \
             <source>_<AbsPower|DynPower>_model_metadata.csv"
                .into(),
        )
    }
}

/// Why an upload was refused, as the client is told.
struct Refusal(StatusCode, String);

impl From<anyhow::Error> for Refusal {
    fn from(e: anyhow::Error) -> Refusal {
        Refusal(StatusCode::INTERNAL_SERVER_ERROR, format!("{e:#}"))
    }
}

/// `PUT /models/<path>`.
pub async fn put(
    State(state): State<Arc<AppState>>,
    UrlPath(path): UrlPath<String>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let Some(token) = state.upload_token.as_ref() else {
        state.metrics.upload(UploadOutcome::Unauthorized);
        return text_response(
            StatusCode::FORBIDDEN,
            "uploads are disabled; start serve with --upload.token-file\n".into(),
        );
    };
    let Some(given) = presented(&headers) else {
        state.metrics.upload(UploadOutcome::Unauthorized);
        let mut r = text_response(
            StatusCode::UNAUTHORIZED,
            format!("uploads need a token: Authorization: Bearer <token> or {TOKEN_HEADER}\n"),
        );
        r.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"kepler-model-server uploads\""),
        );
        return r;
    };
    if !token.matches(given) {
        state.metrics.upload(UploadOutcome::Unauthorized);
        tracing::warn!(%path, "upload with a wrong token refused");
        return text_response(StatusCode::FORBIDDEN, "wrong upload token\n".into());
    }
    let kind = match upload_kind(&path) {
        Ok(k) => k,
        Err(e) => {
            state.metrics.upload(UploadOutcome::Invalid);
            return text_response(StatusCode::BAD_REQUEST, format!("{e}\n"));
        }
    };
    let s = state.clone();
    let rel = path.clone();
    let stored = tokio::task::spawn_blocking(move || store(&s, &rel, kind, &body)).await;
    match stored {
        Ok(Ok(replaced)) => {
            state.metrics.upload(UploadOutcome::Stored);
            tracing::info!(%path, replaced, "upload stored");
            let status = if replaced {
                StatusCode::OK
            } else {
                StatusCode::CREATED
            };
            let mut r = json_response(&serde_json::json!({ "path": path, "replaced": replaced }));
            *r.status_mut() = status;
            r
        }
        Ok(Err(Refusal(status, reason))) => {
            if status.is_client_error() {
                state.metrics.upload(UploadOutcome::Invalid);
            }
            tracing::warn!(%path, %reason, "upload refused");
            text_response(status, format!("{reason}\n"))
        }
        Err(e) => text_response(StatusCode::INTERNAL_SERVER_ERROR, format!("{e}\n")),
    }
}

static TEMP_COUNTER: AtomicU64 = AtomicU64::new(0);

/// Writes, checks and publishes one upload; returns whether it replaced a file.
fn store(state: &AppState, rel: &str, kind: UploadKind, body: &[u8]) -> Result<bool, Refusal> {
    // One upload or rescan at a time: each publishes by rescanning, and a rollback must not
    // undo another upload's file.
    let _guard = state.write_lock.lock().unwrap_or_else(|p| p.into_inner());
    let root = state
        .model_dir
        .canonicalize()
        .with_context(|| format!("model directory {}", state.model_dir.display()))?;
    let target = root.join(rel);
    let parent = target
        .parent()
        .context("an upload path has a parent directory")?
        .to_path_buf();
    std::fs::create_dir_all(&parent).with_context(|| format!("creating {}", parent.display()))?;
    // A directory on the way may be a symlink; it must not lead out of the model directory.
    let real_parent = parent
        .canonicalize()
        .with_context(|| format!("resolving {}", parent.display()))?;
    if !real_parent.starts_with(&root) {
        return Err(Refusal(
            StatusCode::BAD_REQUEST,
            "the path leads outside the model directory".into(),
        ));
    }
    let file_name = rel.rsplit('/').next().unwrap_or(rel);
    let target = real_parent.join(file_name);
    if target.symlink_metadata().is_ok_and(|m| !m.is_file()) {
        return Err(Refusal(
            StatusCode::CONFLICT,
            format!("{rel} exists and is not a regular file"),
        ));
    }

    let n = TEMP_COUNTER.fetch_add(1, Ordering::Relaxed);
    let temp = real_parent.join(format!(".upload-{}-{n}.tmp", std::process::id()));
    let _cleanup = RemoveOnDrop(temp.clone());
    write_synced(&temp, body).with_context(|| format!("writing {}", temp.display()))?;
    check(&temp, file_name, kind, body)
        .map_err(|e| Refusal(StatusCode::UNPROCESSABLE_ENTITY, format!("{e:#}")))?;

    let backup = real_parent.join(format!(".upload-{}-{n}.previous", std::process::id()));
    let _cleanup_backup = RemoveOnDrop(backup.clone());
    let replaced = target.exists();
    if replaced {
        std::fs::rename(&target, &backup).context("setting the previous file aside")?;
    }
    std::fs::rename(&temp, &target).with_context(|| format!("publishing {rel}"))?;
    let served = match state.rescan_locked() {
        Ok(index) if kind != UploadKind::Model || index.get(rel).is_some() => Ok(()),
        Ok(index) => Err(index.broken.iter().find(|b| b.path == rel).map_or_else(
            || "the index did not take the file".to_string(),
            |b| b.error.clone(),
        )),
        Err(e) => Err(format!("rescan failed: {e:#}")),
    };
    if let Err(reason) = served {
        // Put things back as they were, then serve that again.
        let _ = std::fs::remove_file(&target);
        if replaced {
            let _ = std::fs::rename(&backup, &target);
        }
        let _ = state.rescan_locked();
        return Err(Refusal(StatusCode::UNPROCESSABLE_ENTITY, reason));
    }
    Ok(replaced)
}

/// Checks the upload as the index will read it.
fn check(temp: &Path, file_name: &str, kind: UploadKind, body: &[u8]) -> Result<()> {
    match kind {
        UploadKind::Model => {
            if body.len() as u64 > kepler_models::MAX_MODEL_FILE_BYTES {
                bail!("larger than a model file may be");
            }
            kepler_models::load_model_bytes(body, Some(file_name), None)
                .context("the model does not load")?;
        }
        UploadKind::NodeTypeIndex => {
            let (_, problems) = metadata::node_type_index(temp)?;
            if let Some(p) = problems.first() {
                bail!("node_type_index.json: {p}");
            }
        }
        UploadKind::AccuracyTable => {
            metadata::accuracy_table(temp)?;
        }
    }
    Ok(())
}

fn write_synced(path: &Path, body: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    let mut f = std::fs::File::create(path)?;
    f.write_all(body)?;
    f.sync_all()
}

struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_match_only_exactly() {
        let t = UploadToken::new(b"0123456789abcdef").unwrap();
        assert!(t.matches(b"0123456789abcdef"));
        assert!(!t.matches(b"0123456789abcdeF"));
        assert!(!t.matches(b"0123456789abcde"));
        assert!(!t.matches(b""));
    }

    #[test]
    fn bearer_and_header_tokens_are_read() {
        let mut h = HeaderMap::new();
        assert_eq!(presented(&h), None);
        h.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(presented(&h), None);
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_static("bearer  tok "),
        );
        assert_eq!(presented(&h), Some(&b"tok"[..]));
        h.insert(TOKEN_HEADER, HeaderValue::from_static("other"));
        assert_eq!(presented(&h), Some(&b"other"[..]));
    }

    #[test]
    fn upload_paths() {
        assert_eq!(
            upload_kind("p/rapl-sysfs/AbsPower/BPFOnly/LinearRegressionTrainer_0.json"),
            Ok(UploadKind::Model)
        );
        assert_eq!(upload_kind("m.zip"), Ok(UploadKind::Model));
        assert_eq!(
            upload_kind("p/node_type_index.json"),
            Ok(UploadKind::NodeTypeIndex)
        );
        assert_eq!(
            upload_kind("p/rapl-sysfs_AbsPower_model_metadata.csv"),
            Ok(UploadKind::AccuracyTable)
        );
        for bad in [
            "../x.json",
            "a/.hidden.json",
            "a b.json",
            "x.txt",
            "p/metadata.json",
            "-x.json",
            "a/../b.json",
        ] {
            assert!(upload_kind(bad).is_err(), "{bad}");
        }
    }
}

//! Estimation models that come over HTTP: a model file at a URL, or the model a Kepler model
//! server chooses for this machine (`POST /model`, the legacy model server API). Downloads are
//! cached on disk, so a restart without network still estimates, and refreshed by a
//! [`ModelRefresh`] task that the agent runs under its stop signal; the estimation meter
//! reloads the cached file when it changes.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{BackgroundTask, ComponentHealth, ComponentKind, StopSignal};
use kepler_models::ModelError;
use tracing::{info, warn};

/// Where a model comes from.
#[derive(Clone, Debug, PartialEq)]
pub enum Remote {
    /// GET this URL.
    File { url: String },
    /// POST `<url>/model` with this request body.
    Server {
        url: String,
        request: serde_json::Value,
    },
}

/// Why a download did not give a usable model file.
#[derive(Debug, thiserror::Error)]
pub enum FetchError {
    #[error("{from}: {message}")]
    Request { from: String, message: String },
    #[error("{from}: reading the body: {message}")]
    Body { from: String, message: String },
    #[error("{from} sent an unusable model: {error}")]
    Unusable {
        from: String,
        #[source]
        error: ModelError,
    },
    #[error("{what} {path}: {source}")]
    Cache {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

impl Remote {
    /// The cache file. A URL's model is named after the URL's last segment (the trainer is
    /// read from names like `SGDRegressorTrainer_0.json`). A model server's answer is named
    /// after the file the server says it chose (`served`, from its `X-Kepler-Model` or
    /// `Content-Disposition` header), in a directory of its own, so the trainer of a curve
    /// fit is known when the file is loaded again.
    pub fn cache_path(&self, dir: &Path, served: Option<&str>) -> PathBuf {
        match self {
            Remote::File { url } => {
                let last = url
                    .split(['?', '#'])
                    .next()
                    .and_then(|u| u.rsplit('/').next())
                    .filter(|s| !s.is_empty())
                    .unwrap_or("model");
                dir.join(safe_file_name(last))
            }
            Remote::Server { .. } => dir
                .join(SERVER_DIR)
                .join(served.map_or_else(|| "model.json".to_string(), safe_file_name)),
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Remote::File { url } => url.clone(),
            Remote::Server { url, .. } => format!("model server {url}"),
        }
    }

    /// The model's bytes, and the file name a model server says it chose.
    fn fetch(&self, timeout: Duration) -> Result<(Vec<u8>, Option<String>), FetchError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .build()
            .into();
        let response = match self {
            Remote::File { url } => agent.get(url).call(),
            Remote::Server { url, request } => {
                let endpoint = format!("{}/model", url.trim_end_matches('/'));
                match agent.post(&endpoint).send_json(request) {
                    // Published model DBs often hold AbsPower models only. The meter derives
                    // dynamic power from one by taking off its zero-usage power, as it does
                    // for the built-in models of guests; so a guest asks for that next.
                    Err(ureq::Error::StatusCode(400)) if request["output_type"] == "DynPower" => {
                        let mut absolute = request.clone();
                        absolute["output_type"] = "AbsPower".into();
                        info!(from = %self.describe(), "no DynPower model served; asking for AbsPower and deriving the dynamic part");
                        agent.post(&endpoint).send_json(&absolute)
                    }
                    other => other,
                }
            }
        };
        let mut response = response.map_err(|e| FetchError::Request {
            from: self.describe(),
            message: e.to_string(),
        })?;
        let served = match self {
            Remote::File { .. } => None,
            Remote::Server { .. } => served_name(response.headers()),
        };
        let bytes = response
            .body_mut()
            .with_config()
            .limit(kepler_models::MAX_MODEL_FILE_BYTES)
            .read_to_vec()
            .map_err(|e| FetchError::Body {
                from: self.describe(),
                message: e.to_string(),
            })?;
        Ok((bytes, served))
    }
}

/// Where a model server's answers are cached, under the cache directory.
const SERVER_DIR: &str = "server";

/// A file name that stays inside the cache directory whatever a URL or a server says.
fn safe_file_name(name: &str) -> String {
    let last = name.rsplit(['/', '\\']).next().unwrap_or(name);
    let safe: String = last
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    // Never a hidden or parent name.
    match safe.trim_start_matches('.') {
        "" => "model".to_string(),
        name => name.to_string(),
    }
}

/// The model file a model server chose: the last segment of its `X-Kepler-Model` path, else
/// the `filename` of its `Content-Disposition`.
fn served_name(headers: &ureq::http::HeaderMap) -> Option<String> {
    let text = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
    if let Some(path) = text("x-kepler-model").filter(|p| !p.trim().is_empty()) {
        return Some(path.trim().to_string());
    }
    let disposition = text("content-disposition")?;
    disposition.split(';').find_map(|part| {
        let value = part.trim().strip_prefix("filename=")?;
        Some(value.trim_matches('"').to_string()).filter(|v| !v.is_empty())
    })
}

/// The file, beside a model server's cached models, that names the one in use. The meter
/// follows it, so a server that starts choosing another model (a retrained one, say) is
/// switched to without a restart, and the trainer still follows from the new file's name.
pub const CURRENT_POINTER: &str = "current";

/// Downloads the model into `path` unless the file already holds the same bytes. Returns
/// whether the model in use changed. A model server that now chooses another file than the
/// one cached gets a cache file of its own, and `path` and the pointer move to it.
pub fn refresh(remote: &Remote, path: &mut PathBuf, timeout: Duration) -> Result<bool, FetchError> {
    let (bytes, served) = remote.fetch(timeout)?;
    if let Some(served) = served {
        let now = safe_file_name(&served);
        if path.file_name().and_then(|n| n.to_str()) != Some(now.as_str()) {
            let next = path.with_file_name(&now);
            store(remote, &next, &bytes)?;
            point_to(&next)?;
            info!(from = %remote.describe(), now = %now, "the model server chose another model; switching to it");
            *path = next;
            return Ok(true);
        }
    }
    store(remote, path, &bytes)
}

/// Names `model` in its directory's pointer file, replaced atomically.
fn point_to(model: &Path) -> Result<(), FetchError> {
    let (Some(dir), Some(name)) = (model.parent(), model.file_name()) else {
        return Ok(());
    };
    let pointer = dir.join(CURRENT_POINTER);
    let tmp = dir.join(format!("{CURRENT_POINTER}.download"));
    let cache = |what: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| FetchError::Cache { what, path, source }
    };
    std::fs::write(&tmp, name.as_encoded_bytes()).map_err(cache("writing", &tmp))?;
    std::fs::rename(&tmp, &pointer).map_err(cache("replacing", &pointer))
}

/// The model file a pointer names, when it names a plain file name in its own directory.
pub fn pointed_model(pointer: &Path) -> Option<PathBuf> {
    use std::io::Read;
    // A file name; anything longer is not one of ours.
    let mut name = String::new();
    std::fs::File::open(pointer)
        .ok()?
        .take(4096)
        .read_to_string(&mut name)
        .ok()?;
    let name = name.trim();
    (!name.is_empty() && safe_file_name(name) == name).then(|| pointer.with_file_name(name))
}

/// Replaces the cache file with `bytes` when they differ and load as a model.
fn store(remote: &Remote, path: &Path, bytes: &[u8]) -> Result<bool, FetchError> {
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    // Checked before it replaces a working cache: a broken download must not.
    kepler_models::load_model_bytes(bytes, path.file_name().and_then(|n| n.to_str()), None)
        .map_err(|error| FetchError::Unusable {
            from: remote.describe(),
            error,
        })?;
    fn cache(what: &'static str, path: &Path) -> impl FnOnce(std::io::Error) -> FetchError {
        let path = path.to_path_buf();
        move |source| FetchError::Cache { what, path, source }
    }
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(cache("creating", dir))?;
    }
    let tmp = path.with_extension("download");
    std::fs::write(&tmp, bytes).map_err(cache("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(cache("replacing", path))?;
    Ok(true)
}

/// The newest model a server gave before, for a start without network.
fn cached_server_model(remote: &Remote, dir: &Path) -> Option<PathBuf> {
    let dir = remote.cache_path(dir, None).parent()?.to_path_buf();
    if let Some(current) = pointed_model(&dir.join(CURRENT_POINTER)).filter(|p| p.exists()) {
        return Some(current);
    }
    std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .filter(|e| e.path().extension().is_some_and(|x| x != "download"))
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .max()
        .map(|(_, path)| path)
}

/// Fetches once now, falling back to an earlier cached copy. Returns the cache file to load
/// and the task that keeps it fresh.
pub fn prepare(
    remote: Remote,
    dir: &Path,
    every: Duration,
) -> Result<(PathBuf, ModelRefresh), FetchError> {
    let timeout = Duration::from_secs(10).min(every.max(Duration::from_secs(1)));
    let fetched = remote.fetch(timeout).and_then(|(bytes, served)| {
        let path = remote.cache_path(dir, served.as_deref());
        store(&remote, &path, &bytes)?;
        if matches!(remote, Remote::Server { .. }) {
            point_to(&path)?;
        }
        Ok(path)
    });
    let (path, fresh) = match fetched {
        Ok(path) => {
            info!(from = %remote.describe(), cache = %path.display(), "estimation model downloaded");
            (path, true)
        }
        Err(e) => {
            let cached = match &remote {
                Remote::File { .. } => Some(remote.cache_path(dir, None)).filter(|p| p.exists()),
                Remote::Server { .. } => cached_server_model(&remote, dir),
            };
            let Some(path) = cached else {
                return Err(e);
            };
            warn!(error = %e, cache = %path.display(), "model download failed; using the cached copy");
            (path, false)
        }
    };
    let task = ModelRefresh {
        remote,
        path: path.clone(),
        every,
        timeout,
        fresh,
    };
    Ok((path, task))
}

/// Keeps a downloaded model fresh: every refresh period it downloads the model again and
/// replaces the cache file when the model changed (the meter then reloads it). Reports
/// through its health handle: down while downloads fail (the meter keeps the model it has),
/// up when one succeeds; each change is logged once.
#[derive(Debug)]
pub struct ModelRefresh {
    remote: Remote,
    path: PathBuf,
    every: Duration,
    timeout: Duration,
    /// Whether the cache holds what the remote last served (false when start-up fell back to
    /// an older copy).
    fresh: bool,
}

impl ModelRefresh {
    /// Thread name of the task.
    pub const THREAD: &'static str = "kepler-model-refresh";
    /// Component name in the health report (`component="model_refresh"`).
    pub const COMPONENT: &'static str = "model";

    /// A refresh of `remote` into the cache file `path` every `every`.
    pub fn new(remote: Remote, path: PathBuf, every: Duration, timeout: Duration) -> Self {
        ModelRefresh {
            remote,
            path,
            every,
            timeout,
            fresh: true,
        }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The pointer file naming the model in use, for a model server's answers (which may
    /// switch to another file); none for a fixed URL.
    pub fn pointer(&self) -> Option<PathBuf> {
        match self.remote {
            Remote::Server { .. } => Some(self.path.with_file_name(CURRENT_POINTER)),
            Remote::File { .. } => None,
        }
    }

    /// Downloads once and reports the outcome to `health`. Returns whether the cache file
    /// changed.
    pub fn refresh_once(&mut self, health: &ComponentHealth) -> Result<bool, FetchError> {
        let result = refresh(&self.remote, &mut self.path, self.timeout);
        match &result {
            Ok(changed) => {
                if health.set_up() {
                    info!(from = %self.remote.describe(), "model refresh works again");
                }
                if *changed {
                    info!(from = %self.remote.describe(), "estimation model changed; reloading");
                }
            }
            Err(error) => {
                if health.set_down() {
                    warn!(%error, "model refresh failed; keeping the current model until it works again");
                }
            }
        }
        result
    }

    /// Refreshes every period until `stop` fires; a stop during the wait ends it at once.
    pub fn run(mut self, stop: &StopSignal, health: &ComponentHealth) {
        if !self.fresh {
            // Start-up already logged the failed download; the model in use is stale.
            health.set_down();
        }
        while !stop.wait(self.every) {
            // The outcome is reported to `health` and logged; nothing else to do with it.
            let _ = self.refresh_once(health);
        }
    }

    /// The task for the agent's service runtime.
    pub fn into_task(self) -> BackgroundTask {
        BackgroundTask::new(
            Self::THREAD,
            ComponentKind::ModelRefresh,
            Self::COMPONENT,
            move |stop: StopSignal, health: Arc<ComponentHealth>| self.run(&stop, &health),
        )
    }
}

#[cfg(test)]
mod tests;

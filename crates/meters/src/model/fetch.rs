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
    /// The cache file: named after the URL's last segment when it names a model file (the
    /// trainer is read from names like `SGDRegressorTrainer_0.json`), else a fixed name.
    pub fn cache_path(&self, dir: &Path) -> PathBuf {
        match self {
            Remote::File { url } => {
                let last = url
                    .split(['?', '#'])
                    .next()
                    .and_then(|u| u.rsplit('/').next())
                    .filter(|s| !s.is_empty())
                    .unwrap_or("model");
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
                // Never a hidden or parent name, whatever the URL says.
                dir.join(safe.trim_start_matches('.'))
            }
            Remote::Server { request, .. } => {
                let trainer = request
                    .get("trainer_name")
                    .and_then(|t| t.as_str())
                    .filter(|t| !t.is_empty())
                    .unwrap_or("model-server");
                let safe: String = trainer
                    .chars()
                    .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
                    .collect();
                dir.join(format!("{safe}_server.json"))
            }
        }
    }

    pub fn describe(&self) -> String {
        match self {
            Remote::File { url } => url.clone(),
            Remote::Server { url, .. } => format!("model server {url}"),
        }
    }

    fn fetch(&self, timeout: Duration) -> Result<Vec<u8>, FetchError> {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .build()
            .into();
        let response = match self {
            Remote::File { url } => agent.get(url).call(),
            Remote::Server { url, request } => agent
                .post(&format!("{}/model", url.trim_end_matches('/')))
                .send_json(request),
        };
        let mut response = response.map_err(|e| FetchError::Request {
            from: self.describe(),
            message: e.to_string(),
        })?;
        response
            .body_mut()
            .with_config()
            .limit(kepler_models::MAX_MODEL_FILE_BYTES)
            .read_to_vec()
            .map_err(|e| FetchError::Body {
                from: self.describe(),
                message: e.to_string(),
            })
    }
}

/// Downloads the model into `path` unless the file already holds the same bytes. Returns
/// whether the file changed.
pub fn refresh(remote: &Remote, path: &Path, timeout: Duration) -> Result<bool, FetchError> {
    let bytes = remote.fetch(timeout)?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    // Checked before it replaces a working cache: a broken download must not.
    kepler_models::load_model_bytes(&bytes, path.file_name().and_then(|n| n.to_str()), None)
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
    std::fs::write(&tmp, &bytes).map_err(cache("writing", &tmp))?;
    std::fs::rename(&tmp, path).map_err(cache("replacing", path))?;
    Ok(true)
}

/// Fetches once now, falling back to an earlier cached copy. Returns the cache file to load
/// and the task that keeps it fresh.
pub fn prepare(
    remote: Remote,
    dir: &Path,
    every: Duration,
) -> Result<(PathBuf, ModelRefresh), FetchError> {
    let path = remote.cache_path(dir);
    let timeout = Duration::from_secs(10).min(every.max(Duration::from_secs(1)));
    let fresh = match refresh(&remote, &path, timeout) {
        Ok(_) => {
            info!(from = %remote.describe(), cache = %path.display(), "estimation model downloaded");
            true
        }
        Err(e) if path.exists() => {
            warn!(error = %e, cache = %path.display(), "model download failed; using the cached copy");
            false
        }
        Err(e) => return Err(e),
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

    /// Downloads once and reports the outcome to `health`. Returns whether the cache file
    /// changed.
    pub fn refresh_once(&self, health: &ComponentHealth) -> Result<bool, FetchError> {
        let result = refresh(&self.remote, &self.path, self.timeout);
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
    pub fn run(self, stop: &StopSignal, health: &ComponentHealth) {
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

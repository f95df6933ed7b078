//! Estimation models that come over HTTP: a model file at a URL, or the model a Kepler model
//! server chooses for this machine (`POST /model`, the legacy model server API). Downloads are
//! cached on disk, so a restart without network still estimates, and refreshed in the
//! background; the estimation meter reloads the cached file when it changes.

use std::path::{Path, PathBuf};
use std::time::Duration;

use tracing::{info, warn};

/// Where a model comes from.
#[derive(Clone, Debug)]
pub enum Remote {
    /// GET this URL.
    File { url: String },
    /// POST `<url>/model` with this request body.
    Server {
        url: String,
        request: serde_json::Value,
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

    fn fetch(&self, timeout: Duration) -> Result<Vec<u8>, String> {
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
        let mut response = response.map_err(|e| format!("{}: {e}", self.describe()))?;
        response
            .body_mut()
            .with_config()
            .limit(kepler_models::MAX_MODEL_FILE_BYTES)
            .read_to_vec()
            .map_err(|e| format!("{}: reading the body: {e}", self.describe()))
    }
}

/// Downloads the model into `path` unless the file already holds the same bytes. Returns
/// whether the file changed.
pub fn refresh(remote: &Remote, path: &Path, timeout: Duration) -> Result<bool, String> {
    let bytes = remote.fetch(timeout)?;
    if std::fs::read(path).is_ok_and(|old| old == bytes) {
        return Ok(false);
    }
    // Checked before it replaces a working cache: a broken download must not.
    kepler_models::load_model_bytes(&bytes, path.file_name().and_then(|n| n.to_str()), None)
        .map_err(|e| format!("{} sent an unusable model: {e}", remote.describe()))?;
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    }
    let tmp = path.with_extension("download");
    std::fs::write(&tmp, &bytes).map_err(|e| format!("writing {}: {e}", tmp.display()))?;
    std::fs::rename(&tmp, path).map_err(|e| format!("replacing {}: {e}", path.display()))?;
    Ok(true)
}

/// Fetches once now (falling back to an earlier cached copy), then keeps refreshing every
/// `every` on a background thread. Returns the cache file to load.
pub fn prepare(remote: Remote, dir: &Path, every: Duration) -> Result<PathBuf, String> {
    let path = remote.cache_path(dir);
    let timeout = Duration::from_secs(10).min(every.max(Duration::from_secs(1)));
    match refresh(&remote, &path, timeout) {
        Ok(_) => {
            info!(from = %remote.describe(), cache = %path.display(), "estimation model downloaded")
        }
        Err(e) if path.exists() => {
            warn!(error = %e, cache = %path.display(), "model download failed; using the cached copy")
        }
        Err(e) => return Err(e),
    }
    let background = path.clone();
    let spawned = std::thread::Builder::new()
        .name("kepler-model-refresh".into())
        .spawn(move || loop {
            std::thread::sleep(every);
            match refresh(&remote, &background, timeout) {
                Ok(true) => info!(from = %remote.describe(), "estimation model changed; reloading"),
                Ok(false) => {}
                Err(e) => warn!(error = %e, "model refresh failed; keeping the current model"),
            }
        });
    if let Err(e) = spawned {
        warn!(error = %e, "cannot start the model refresh thread; the model will not be refreshed");
    }
    Ok(path)
}

//! `kepler-model-server serve`: an HTTP server over a model directory, on the shared HTTP
//! crate (TLS and basic auth from an exporter-toolkit web config).
//!
//! - [`index`]: the directory, walked and every model loaded at start-up and on SIGHUP;
//!   [`metadata`] reads the pipeline files that describe the models.
//! - [`legacy`]: `POST /model` and `GET /best-models`, upstream's API; [`select`] chooses
//!   the model, with [`filter`] and [`nodematch`].
//! - [`modern`]: `GET /models`, `GET /models/<path>`; [`upload`]: `PUT /models/<path>`
//!   (token-protected); [`metrics`]: `GET /metrics`; [`routes`]: the router, `/healthz`.
//! - [`retrain`]: `--retrain PERIOD`, training from a Prometheus on a schedule.

mod filter;
#[cfg(test)]
mod fuzz;
mod index;
mod legacy;
mod metadata;
mod metrics;
mod modern;
mod nodematch;
mod retrain;
mod routes;
mod select;
mod types;
mod upload;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};

use index::ModelIndex;
use routes::AppState;

#[derive(clap::Args, Debug)]
pub struct ServeArgs {
    /// Model directory: a model-DB tree (`<pipeline>/<source>/<AbsPower|DynPower>/
    /// <FeatureGroup>/<Trainer>_<nodetype>.{json,zip}`) or plain model files. Re-read on SIGHUP.
    #[arg(long = "model-dir")]
    pub model_dir: PathBuf,
    /// Address to listen on (`:8100`, `127.0.0.1:0`, `[::1]:8100`); repeatable.
    #[arg(long = "listen", default_value = ":8100")]
    pub listen: Vec<String>,
    /// Exporter-toolkit web config (TLS, basic auth), as for the agent.
    #[arg(long = "web.config-file")]
    pub web_config_file: Option<PathBuf>,
    /// File holding the bearer token that `PUT /models/<path>` uploads must present (at least
    /// 16 characters); without it, uploads are refused.
    #[arg(long = "upload.token-file")]
    pub upload_token_file: Option<PathBuf>,
    /// Retrain every PERIOD (`24h`) per machine type from the metered agents that
    /// `--retrain.prometheus` scrapes; a machine type's models are replaced only when the new
    /// ones beat them on held-back data.
    #[arg(long, value_name = "PERIOD", value_parser = humantime::parse_duration, requires = "retrain_prometheus")]
    pub retrain: Option<Duration>,
    /// The Prometheus scraping the agents (with `ebpf.exportFeatures`).
    #[arg(long = "retrain.prometheus", value_name = "URL")]
    pub retrain_prometheus: Option<String>,
    /// How far back each retrain reads.
    #[arg(long = "retrain.since", default_value = "7d", value_parser = humantime::parse_duration)]
    pub retrain_since: Duration,
    /// Query resolution of each retrain.
    #[arg(long = "retrain.step", default_value = "30s", value_parser = humantime::parse_duration)]
    pub retrain_step: Duration,
    /// Per-request timeout of the Prometheus queries.
    #[arg(long = "retrain.timeout", default_value = "60s", value_parser = humantime::parse_duration)]
    pub retrain_timeout: Duration,
    /// The power source the retrained models are for.
    #[arg(long = "retrain.source", value_enum, default_value = "rapl-sysfs")]
    pub retrain_source: crate::train_cmd::Source,
}

pub fn run(args: &ServeArgs) -> Result<()> {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    runtime.block_on(serve(args))
}

fn log_index(index: &ModelIndex, what: &str) {
    tracing::info!(
        models = index.models.len(),
        broken = index.broken.len(),
        pipelines = index.pipelines.len(),
        "{what}"
    );
}

async fn serve(args: &ServeArgs) -> Result<()> {
    let web = args
        .web_config_file
        .as_deref()
        .map(kepler_http::WebConfig::load)
        .transpose()?;
    let upload_token = args
        .upload_token_file
        .as_deref()
        .map(upload::UploadToken::load)
        .transpose()?;
    let dir = args.model_dir.clone();
    let index = tokio::task::spawn_blocking(move || ModelIndex::scan(&dir))
        .await
        .context("indexing the model directory")??;
    log_index(&index, "model directory indexed");
    let state = Arc::new(AppState::new(args.model_dir.clone(), index, upload_token));

    let server = kepler_http::Server::bind(&args.listen, web)
        .await?
        .with_refusals(state.metrics.http_refusals.clone());
    // Installed before the address is announced: SIGHUP's default action ends the process,
    // so a client that rescans as soon as the server is up must find the handler in place.
    let hangups = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => Some(s),
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP; no rescans");
            None
        }
    };
    // On stdout, one line per address, so that scripts and tests started with port 0 learn
    // where to connect.
    let scheme = if server.is_tls() { "https" } else { "http" };
    let mut stdout = std::io::stdout().lock();
    for addr in server.local_addrs() {
        writeln!(stdout, "listening on {scheme}://{addr}").context("writing to stdout")?;
    }
    stdout.flush().context("writing to stdout")?;
    drop(stdout);

    if let (Some(period), Some(url)) = (args.retrain, &args.retrain_prometheus) {
        if period.is_zero() {
            anyhow::bail!("--retrain must be longer than 0");
        }
        let cfg = retrain::RetrainConfig {
            period,
            prometheus: url.clone(),
            since: args.retrain_since,
            step: args.retrain_step,
            timeout: args.retrain_timeout,
            source: args.retrain_source,
        };
        tracing::info!(every = %humantime::format_duration(period), prometheus = %url, "retraining on a schedule");
        tokio::spawn(retrain::run_loop(state.clone(), cfg));
    }
    if let Some(hangups) = hangups {
        tokio::spawn(rescan_on_sighup(state.clone(), hangups));
    }
    server
        .serve(routes::router(state), kepler_http::shutdown_signal())
        .await?;
    Ok(())
}

/// SIGHUP re-reads the model directory (new, changed and removed files); a failed rescan
/// keeps serving the previous index.
async fn rescan_on_sighup(state: Arc<AppState>, mut hangups: tokio::signal::unix::Signal) {
    while hangups.recv().await.is_some() {
        let s = state.clone();
        match tokio::task::spawn_blocking(move || s.rescan()).await {
            Ok(Ok(index)) => log_index(&index, "model directory rescanned"),
            Ok(Err(e)) => {
                tracing::error!(error = %format!("{e:#}"), "rescan failed; serving the previous index")
            }
            Err(e) => tracing::error!(error = %e, "rescan failed; serving the previous index"),
        }
    }
}

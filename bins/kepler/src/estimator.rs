//! The agent's side of estimation: the `estimator` config section turned into the meters
//! crate's settings. Choosing the model, downloading, caching and refreshing it all live in
//! `kepler_meters::model`.

use kepler_core::{Background, Feature, Unavailable};
use kepler_meters::{EstimatorSettings, ModelMeter};
use kepler_sources::HostFacts;

use crate::config::Config;

/// The estimator settings the config asks for.
pub fn settings(config: &Config) -> Result<EstimatorSettings, Unavailable> {
    let est = &config.estimator;
    Ok(EstimatorSettings {
        model: est.model.parse()?,
        model_server_url: est.model_server_url.clone(),
        family: est.family.builtin(),
        output: est.output_type.choice(),
        trainer: est.trainer.clone(),
        refresh_period: est.refresh_period.0,
        cache_dir: est.cache_dir.clone(),
    })
}

/// Opens the estimation meter; `features` are those the usage source provides. Background
/// work it needs is left in `background`.
pub fn open(
    config: &Config,
    host: &HostFacts,
    features: &[Feature],
    background: &Background,
) -> Result<ModelMeter, Unavailable> {
    kepler_meters::open_model_meter(&settings(config)?, host, features, background)
}

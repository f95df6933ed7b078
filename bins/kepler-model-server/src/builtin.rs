//! The real built-in resolver: the embedded models of kepler-models, chosen by the `--spec`
//! file or, without one, by this machine's /proc/cpuinfo and /proc/meminfo.

use std::path::Path;

use anyhow::{anyhow, Context, Result};
use kepler_models::builtin::{select_builtin, BuiltinFamily, MachineSpec};
use kepler_models::Predictor;

use crate::model_source::BuiltinModels;

/// Selects from the models compiled into kepler-models.
pub struct Embedded;

impl BuiltinModels for Embedded {
    fn select(
        &self,
        spec: Option<&serde_json::Value>,
        family: BuiltinFamily,
    ) -> Result<Box<dyn Predictor>> {
        let spec = match spec {
            Some(v) => MachineSpec::from_spec_value(v).context("reading --spec")?,
            None => local_spec()?,
        };
        let chosen = select_builtin(&spec, family)
            .with_context(|| format!("choosing a built-in {family} model"))?;
        // On stderr, so the CSV on stdout stays clean; the reason is what a user needs to
        // judge the numbers.
        tracing::info!(
            model = %chosen.model_name,
            matched = %chosen.matched,
            spec = %spec.to_spec_json(),
            "built-in model: {}",
            chosen.reason
        );
        Ok(chosen.predictor)
    }
}

/// This machine's spec from procfs.
fn local_spec() -> Result<MachineSpec> {
    let host = kepler_sources::HostFacts::read(Path::new("/proc"), Path::new("/sys"));
    let hint = "pass --spec to choose a built-in model for another machine";
    let cpuinfo = host.cpuinfo().map_err(|e| anyhow!("{e} ({hint})"))?;
    let meminfo = host.meminfo().map_err(|e| anyhow!("{e} ({hint})"))?;
    Ok(MachineSpec::from_proc(cpuinfo, meminfo)?)
}

//! Opening the estimation meter from the `estimator` config section: which model, which output
//! type, and why.

use std::path::Path;

use kepler_core::Unavailable;
use kepler_meters::{ModelFile, ModelMeter, OutputType};

use crate::config::Config;

/// Whether this host is a virtual machine, from the CPU flags the hypervisor sets.
pub fn is_virtual_machine(procfs: &Path) -> bool {
    std::fs::read_to_string(procfs.join("cpuinfo")).is_ok_and(|text| {
        text.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    })
}

pub fn output_type(config: &Config) -> OutputType {
    match config.estimator.output_type.as_str() {
        "AbsPower" => OutputType::Abs,
        "DynPower" => OutputType::Dyn,
        _ if is_virtual_machine(&config.host.procfs) => OutputType::Dyn,
        _ => OutputType::Abs,
    }
}

/// Opens the estimation meter; `available` names the features the usage source provides.
pub fn open(config: &Config, available: Vec<String>) -> Result<ModelMeter, Unavailable> {
    let output = output_type(config);
    let est = &config.estimator;
    if est.model == "builtin" {
        return crate::builtin::open(config, output, available);
    }
    let path = Path::new(&est.model);
    let predictor = kepler_models::load_model(path, est.trainer.as_deref())
        .map_err(|e| Unavailable::new(format!("estimator.model {}: {e}", path.display())))?;
    let name = predictor
        .name()
        .map(str::to_string)
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| est.model.clone());
    Ok(ModelMeter::new(predictor, name, output, available)?
        .with_detail(format!("model file {}", path.display()))
        .watch(ModelFile {
            path: path.to_path_buf(),
            trainer_hint: est.trainer.clone(),
            check_every: est.refresh_period.0,
        }))
}

//! Opening the estimation meter from the `estimator` config section: which model, which output
//! type, and why.

use std::path::{Path, PathBuf};

use kepler_core::Unavailable;
use kepler_meters::{ModelFile, ModelMeter, OutputType};

use crate::config::{Config, EstimatorFamily};
use crate::model_fetch::{self, Remote};

/// Whether this host is a virtual machine, from the CPU flags the hypervisor sets.
pub fn is_virtual_machine(procfs: &Path) -> bool {
    std::fs::read_to_string(procfs.join("cpuinfo")).is_ok_and(|text| {
        text.lines()
            .filter(|l| l.starts_with("flags"))
            .any(|l| l.split_whitespace().any(|f| f == "hypervisor"))
    })
}

pub fn output_type(config: &Config) -> OutputType {
    match config.estimator.output_type.fixed() {
        Some(output) => output,
        None if is_virtual_machine(&config.host.procfs) => OutputType::Dyn,
        None => OutputType::Abs,
    }
}

/// Opens the estimation meter; `available` names the features the usage source provides.
pub fn open(config: &Config, available: Vec<String>) -> Result<ModelMeter, Unavailable> {
    let output = output_type(config);
    let est = &config.estimator;
    let remote = match (&est.model_server_url, est.model.as_str()) {
        (Some(url), _) => Some(Remote::Server {
            url: url.clone(),
            request: server_request(config, output, &available)?,
        }),
        (None, url) if url.starts_with("http://") || url.starts_with("https://") => {
            Some(Remote::File { url: url.into() })
        }
        (None, "builtin") => return crate::builtin::open(config, output, available),
        (None, _) => None,
    };
    let (path, origin) = match remote {
        Some(remote) => {
            let origin = remote.describe();
            let path = model_fetch::prepare(remote, &est.cache_dir, est.refresh_period.0)
                .map_err(|e| Unavailable::new(format!("estimator: {e}")))?;
            (path, origin)
        }
        None => (
            PathBuf::from(&est.model),
            format!("model file {}", est.model),
        ),
    };
    let predictor = kepler_models::load_model(&path, est.trainer.as_deref())
        .map_err(|e| Unavailable::new(format!("estimator model {}: {e}", path.display())))?;
    let name = predictor
        .name()
        .map(str::to_string)
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| est.model.clone());
    Ok(ModelMeter::new(predictor, name, output, available)?
        .with_detail(origin)
        .watch(ModelFile {
            path,
            trainer_hint: est.trainer.clone(),
            check_every: est.refresh_period.0,
        }))
}

/// The legacy model server's request for this machine (DESIGN §7).
fn server_request(
    config: &Config,
    output: OutputType,
    available: &[String],
) -> Result<serde_json::Value, Unavailable> {
    let spec = crate::builtin::machine_spec(config)?;
    let source = match config.estimator.family {
        EstimatorFamily::Platform => "acpi",
        EstimatorFamily::Rapl => "rapl-sysfs",
    };
    Ok(serde_json::json!({
        "metrics": available,
        "output_type": output.as_str(),
        "source": source,
        "node_type": -1,
        "weight": true,
        "trainer_name": config.estimator.trainer.clone().unwrap_or_default(),
        "filter": "",
        "pipeline_name": "",
        "machine_spec": spec.to_spec_value(),
        "loose_node_type": true,
    }))
}

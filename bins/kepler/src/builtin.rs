//! The built-in estimation models, chosen by this machine's spec (`estimator.model: builtin`).

use kepler_core::Unavailable;
use kepler_meters::{ModelMeter, OutputType};
use kepler_models::builtin::{select_builtin, select_builtin_for_guest, MachineSpec};
use tracing::info;

use crate::config::Config;

/// This host's machine spec, from the host procfs.
pub fn machine_spec(config: &Config) -> Result<MachineSpec, Unavailable> {
    let read = |name: &str| {
        let path = config.host.procfs.join(name);
        std::fs::read_to_string(&path)
            .map_err(|e| Unavailable::new(format!("reading {}: {e}", path.display())))
    };
    MachineSpec::from_proc(&read("cpuinfo")?, &read("meminfo")?)
        .map_err(|e| Unavailable::new(format!("machine spec: {e}")))
}

pub fn open(
    config: &Config,
    output: OutputType,
    available: Vec<String>,
) -> Result<ModelMeter, Unavailable> {
    let spec = machine_spec(config)?;
    let family = config.estimator.family.builtin();
    // A guest's busy vCPUs add power to a host it cannot see: it gets a host model for its CPU
    // and only the dynamic part of it is meaningful.
    let selection = if crate::estimator::is_virtual_machine(&config.host.procfs) {
        select_builtin_for_guest(&spec, family)
    } else {
        select_builtin(&spec, family)
    }
    .map_err(|e| Unavailable::new(format!("built-in model: {e}")))?;
    info!(
        model = %selection.model_name,
        matched = %selection.matched,
        reason = %selection.reason,
        spec = %spec.to_spec_json(),
        "built-in estimation model selected"
    );
    let detail = format!(
        "{} match: {}; machine spec {}",
        selection.matched,
        selection.reason,
        spec.to_spec_json()
    );
    Ok(
        ModelMeter::new(selection.predictor, selection.model_name, output, available)?
            .with_detail(detail),
    )
}

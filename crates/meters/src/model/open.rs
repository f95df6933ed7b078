//! Opening the estimation meter: which model (built-in, a file, a URL, or a model server's
//! choice), which output type, and why. Everything it needs to know about the host comes
//! from [`HostFacts`].

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use std::sync::Arc;

use kepler_core::{Background, ExpectedError, Feature, Unavailable, Watts};
use kepler_models::builtin::{
    select_builtin, select_builtin_for_guest, with_counters, BuiltinFamily, BuiltinSelection,
    MachineSpec,
};
use kepler_sources::{HostFactError, HostFacts};
use tracing::info;

use super::fetch::{self, Remote};
use super::meter::{ModelFile, ModelMeter, OutputType};

/// `estimator.model`: where the model comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ModelChoice {
    /// Built into the agent, chosen by this machine's spec.
    Builtin,
    /// A model-DB file (`.json` weights or `.zip` archive), re-read when it changes.
    File(PathBuf),
    /// An `http(s)://` URL of a model file, downloaded, cached and refreshed.
    Url(String),
}

impl FromStr for ModelChoice {
    type Err = Unavailable;

    /// `builtin`, an `http://` or `https://` URL, else a file path.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim() {
            "" => Err(Unavailable::new(
                "estimator.model must be builtin, a model file path or a URL",
            )),
            "builtin" => Ok(ModelChoice::Builtin),
            url if url.starts_with("http://") || url.starts_with("https://") => {
                Ok(ModelChoice::Url(url.to_string()))
            }
            _ => Ok(ModelChoice::File(PathBuf::from(text))),
        }
    }
}

/// `estimator.outputType`.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum OutputChoice {
    /// Dynamic power inside a VM, absolute power on bare metal.
    #[default]
    Auto,
    Abs,
    Dyn,
}

impl FromStr for OutputChoice {
    type Err = Unavailable;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text {
            "auto" => Ok(OutputChoice::Auto),
            "AbsPower" => Ok(OutputChoice::Abs),
            "DynPower" => Ok(OutputChoice::Dyn),
            other => Err(Unavailable::new(format!(
                "estimator.outputType {other:?} is not auto, AbsPower or DynPower"
            ))),
        }
    }
}

/// What the estimation meter needs from the `estimator` config section.
#[derive(Clone, Debug, PartialEq)]
pub struct EstimatorSettings {
    pub model: ModelChoice,
    /// A Kepler model server; when set, its choice for this machine wins over `model`.
    pub model_server_url: Option<String>,
    /// Built-in family; also the source asked of a model server.
    pub family: BuiltinFamily,
    pub output: OutputChoice,
    /// Trainer name when a file name does not tell it.
    pub trainer: Option<String>,
    /// How often a model file is checked for changes and a download refreshed.
    pub refresh_period: Duration,
    /// Where downloaded models are cached.
    pub cache_dir: PathBuf,
}

impl Default for EstimatorSettings {
    fn default() -> Self {
        EstimatorSettings {
            model: ModelChoice::Builtin,
            model_server_url: None,
            family: BuiltinFamily::Rapl,
            output: OutputChoice::Auto,
            trainer: None,
            refresh_period: Duration::from_secs(60),
            cache_dir: PathBuf::from("/var/lib/kepler/models"),
        }
    }
}

/// The output type `choice` means on this host: inside a VM the host's idle power is not the
/// guest's to report, so `auto` is dynamic power there.
pub fn output_type(choice: OutputChoice, host: &HostFacts) -> OutputType {
    match choice {
        OutputChoice::Abs => OutputType::Abs,
        OutputChoice::Dyn => OutputType::Dyn,
        OutputChoice::Auto if host.is_virtual_machine() => OutputType::Dyn,
        OutputChoice::Auto => OutputType::Abs,
    }
}

/// This host's machine spec, from its cpuinfo and meminfo.
pub fn machine_spec(host: &HostFacts) -> Result<MachineSpec, Unavailable> {
    let unavailable = |e: &HostFactError| Unavailable::new(e.to_string());
    let cpuinfo = host.cpuinfo().map_err(unavailable)?;
    let meminfo = host.meminfo().map_err(unavailable)?;
    MachineSpec::from_proc(cpuinfo, meminfo)
        .map_err(|e| Unavailable::new(format!("machine spec: {e}")))
}

/// Opens the estimation meter. `features` are those the usage source provides; background
/// work the model needs (refreshing a download) is left in `background` for the caller to run.
pub fn open_model_meter(
    settings: &EstimatorSettings,
    host: &HostFacts,
    features: &[Feature],
    background: &Background,
) -> Result<ModelMeter, Unavailable> {
    let output = output_type(settings.output, host);
    let remote = match (&settings.model_server_url, &settings.model) {
        (Some(url), _) => Remote::Server {
            url: url.clone(),
            request: server_request(settings, host, output, features)?,
        },
        (None, ModelChoice::Url(url)) => Remote::File { url: url.clone() },
        (None, ModelChoice::Builtin) => return open_builtin(settings, host, output, features),
        (None, ModelChoice::File(path)) => {
            let origin = format!("model file {}", path.display());
            return open_file(settings, path.clone(), None, origin, output, features);
        }
    };
    let origin = remote.describe();
    let (path, refresh) = fetch::prepare(remote, &settings.cache_dir, settings.refresh_period)
        .map_err(|e| Unavailable::new(format!("estimator: {e}")))?;
    let meter = open_file(settings, path, refresh.pointer(), origin, output, features)?;
    background.push(refresh.into_task());
    Ok(meter)
}

/// A model file, watched for changes.
fn open_file(
    settings: &EstimatorSettings,
    path: PathBuf,
    follow: Option<PathBuf>,
    origin: String,
    output: OutputType,
    features: &[Feature],
) -> Result<ModelMeter, Unavailable> {
    let trainer = settings.trainer.as_deref();
    let predictor = kepler_models::load_model(&path, trainer)
        .map_err(|e| Unavailable::new(format!("estimator model {}: {e}", path.display())))?;
    let name = predictor
        .name()
        .map(str::to_string)
        .or_else(|| path.file_stem().map(|s| s.to_string_lossy().into_owned()))
        .unwrap_or_else(|| path.display().to_string());
    Ok(ModelMeter::new(predictor, name, output, features.to_vec())?
        .with_reason(without_userinfo(&origin))
        .with_detail(origin)
        .watch(ModelFile {
            path,
            trainer_hint: settings.trainer.clone(),
            check_every: settings.refresh_period,
            follow,
        }))
}

/// `origin` with any `user:password@` of a URL left out: the reason is exported as a label,
/// and metrics must not carry credentials.
fn without_userinfo(origin: &str) -> String {
    let Some(scheme_end) = origin.find("://").map(|i| i + 3) else {
        return origin.to_string();
    };
    let rest = &origin[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{}{}", &origin[..scheme_end], &rest[at + 1..]),
        None => origin.to_string(),
    }
}

/// The built-in model for this machine's spec.
fn open_builtin(
    settings: &EstimatorSettings,
    host: &HostFacts,
    output: OutputType,
    features: &[Feature],
) -> Result<ModelMeter, Unavailable> {
    let spec = machine_spec(host)?;
    // A guest's busy vCPUs add power to a host it cannot see: it gets a host model for its CPU
    // and only the dynamic part of it is meaningful.
    let selection = if host.is_virtual_machine() {
        select_builtin_for_guest(&spec, settings.family)
    } else {
        select_builtin(&spec, settings.family)
    }
    // Hardware counters, when the source has them, tell frequency and stalls apart, which
    // busy time cannot.
    .and_then(|busy_time| with_counters(busy_time, settings.family, features))
    .map_err(|e| Unavailable::new(format!("built-in model: {e}")))?
    // A zone without a trustworthy estimate is left out rather than exported wrong.
    .without_withheld();
    info!(
        model = %selection.model_name,
        matched = %selection.matched,
        reason = %selection.reason,
        spec = %spec.to_spec_json(),
        host = %host.virtualization(),
        "built-in estimation model selected"
    );
    let errors = stated_errors(&selection, output);
    let stated = errors
        .iter()
        .map(|e| format!("{} ±{:.1} W ({:.1} %)", e.zone, e.mae.0, 100.0 * e.mape))
        .collect::<Vec<_>>();
    let stated = if stated.is_empty() {
        String::new()
    } else {
        format!("; expected error {}", stated.join(", "))
    };
    let detail = format!(
        "{} match: {}; machine spec {}{stated}",
        selection.matched,
        selection.reason,
        spec.to_spec_json()
    );
    Ok(ModelMeter::new(
        selection.predictor,
        selection.model_name,
        output,
        features.to_vec(),
    )?
    .with_reason(selection.reason.clone())
    .with_detail(detail)
    .with_expected_error(errors))
}

/// The selection's stated errors as zone errors. They were measured on absolute power of
/// bare metal; no public run measures what a guest's busy vCPUs add to its host, so a
/// dynamic-power estimate states none rather than a figure that was never validated.
fn stated_errors(selection: &BuiltinSelection, output: OutputType) -> Vec<ExpectedError> {
    if output == OutputType::Dyn {
        return Vec::new();
    }
    selection
        .expected_error
        .iter()
        .map(|(zone, e)| ExpectedError {
            zone: Arc::from(zone.as_str()),
            mae: Watts(e.mae_w),
            mape: e.mape,
        })
        .collect()
}

/// The legacy model server's request for this machine (DESIGN §7).
fn server_request(
    settings: &EstimatorSettings,
    host: &HostFacts,
    output: OutputType,
    features: &[Feature],
) -> Result<serde_json::Value, Unavailable> {
    let spec = machine_spec(host)?;
    let source = match settings.family {
        BuiltinFamily::Platform => "acpi",
        BuiltinFamily::Rapl => "rapl-sysfs",
    };
    let metrics: Vec<&str> = features.iter().map(|f| f.as_str()).collect();
    Ok(serde_json::json!({
        "metrics": metrics,
        "output_type": output.as_str(),
        "source": source,
        "node_type": -1,
        "weight": true,
        "trainer_name": settings.trainer.clone().unwrap_or_default(),
        "filter": "",
        "pipeline_name": "",
        "machine_spec": spec.to_spec_value(),
        "loose_node_type": true,
    }))
}

#[cfg(test)]
mod tests;

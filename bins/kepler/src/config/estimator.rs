//! The `estimator` section (kepler-rs): the estimation meter used where no power meter exists.
//! It belongs to the estimator and moves with it.

use std::path::PathBuf;
use std::time::Duration;

use kepler_meters::OutputChoice;
use kepler_models::builtin::BuiltinFamily;
use serde::Deserialize;

use super::{closed_choice, GoDuration};

closed_choice! {
    /// `estimator.family`: which kind of built-in model.
    #[derive(Default)]
    pub enum EstimatorFamily {
        /// RAPL-like zones: package and dram.
        #[default]
        Rapl = "rapl",
        /// The whole machine, as ACPI or a BMC would measure it.
        Platform = "platform",
    }
}

impl EstimatorFamily {
    pub fn builtin(self) -> BuiltinFamily {
        match self {
            EstimatorFamily::Rapl => BuiltinFamily::Rapl,
            EstimatorFamily::Platform => BuiltinFamily::Platform,
        }
    }
}

closed_choice! {
    /// `estimator.outputType`: absolute power (idle included), dynamic power, or chosen by
    /// whether this host is a VM.
    #[derive(Default)]
    pub enum EstimatorOutput {
        #[default]
        Auto = "auto",
        AbsPower = "AbsPower",
        DynPower = "DynPower",
    }
}

impl EstimatorOutput {
    /// The estimation meter's choice for this setting.
    pub fn choice(self) -> OutputChoice {
        match self {
            EstimatorOutput::Auto => OutputChoice::Auto,
            EstimatorOutput::AbsPower => OutputChoice::Abs,
            EstimatorOutput::DynPower => OutputChoice::Dyn,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct EstimatorConfig {
    /// `builtin` (chosen by this machine's spec), the path of a Kepler model-DB file (`.json`
    /// weights or `.zip` archive), or an `http(s)://` URL of one.
    pub model: String,
    /// A Kepler model server; when set, the model is the one it selects for this machine
    /// (`POST <url>/model`), and `model` is not used.
    /// Empty means none, as the effective config prints an unset URL.
    #[serde(
        rename = "modelServerURL",
        deserialize_with = "super::compat::empty_as_none"
    )]
    pub model_server_url: Option<String>,
    /// Where downloaded models are kept (so a restart without network still estimates).
    pub cache_dir: PathBuf,
    /// Trainer name when the file name does not tell (`SGDRegressorTrainer`, ...).
    pub trainer: Option<String>,
    /// Built-in model family.
    pub family: EstimatorFamily,
    pub output_type: EstimatorOutput,
    /// How often a model file is checked for changes, and a downloaded one refreshed.
    pub refresh_period: GoDuration,
}

impl Default for EstimatorConfig {
    fn default() -> Self {
        EstimatorConfig {
            model: "builtin".into(),
            model_server_url: None,
            cache_dir: "/var/lib/kepler/models".into(),
            trainer: None,
            family: EstimatorFamily::Rapl,
            output_type: EstimatorOutput::Auto,
            refresh_period: GoDuration(Duration::from_secs(60)),
        }
    }
}

//! Training power models from a [`Dataset`]: the trainers of `kepler-model-server train`
//! and `serve --retrain`, pure Rust.
//!
//! For every output type ([`OutputType::AbsPower`], [`OutputType::DynPower`]), every
//! [`FeatureGroup`] whose features the dataset has, and every [`TrainerKind`], one model
//! is fitted per power component on a seeded train split and written in a model-DB format
//! (linear or curve-fit weight JSON, or an XGBoost archive). Its accuracy is measured by
//! loading the written bytes with [`crate::load_model_bytes`] and predicting the held-back
//! rows, so the figures are those of the file a server serves and an agent runs.
//!
//! - **Idle isolation** (DynPower): a component's idle power is the lowest power among the
//!   training rows whose main feature is in the lowest 5 % (at least 3 rows); the
//!   DynPower target is power − idle, floored at 0 W (no model predicts below 0 W; power
//!   under idle is noise around it). Held-back rows use the idle of the training rows.
//! - **Accuracy**: per component MAE (W) and MAPE (%, over samples whose measured value is at
//!   least 1 W, so an idle-free DynPower near 0 W does not blow it up); a model's figure is
//!   its worst component's. Accepted when MAE ≤ 10 W or MAPE ≤ 20 % (configurable).
//!
//! ```no_run
//! use kepler_models::dataset::Dataset;
//! use kepler_models::train::{train_all, TrainOptions};
//! let data = Dataset::read_csv_file("run.csv".as_ref())?;
//! let report = train_all(&data, &TrainOptions::default())?;
//! for m in &report.models {
//!     println!("{} {} {}: MAE {:.2} W", m.output_type, m.feature_group, m.name, m.accuracy.mae_w);
//! }
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod curve;
mod eval;
mod export;
mod gbt;
mod linalg;
mod run;

use serde::{Deserialize, Serialize};

pub use crate::dataset::{Dataset, MachineSpec};
use crate::features::Feature;
use crate::Trainer;
pub use eval::{split, Accuracy, ComponentAccuracy};
pub use gbt::GbtParams;
pub use run::train_all;

/// Why training could not run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TrainError {
    #[error("the dataset has {rows} usable rows; at least {min} are needed to train and test")]
    TooFewRows { rows: usize, min: usize },
    #[error("no feature group can be trained: the dataset has {have}; {need}")]
    NoFeatureGroup { have: String, need: String },
    #[error("invalid training options: {0}")]
    Options(String),
    #[error("model {model}: {message}")]
    Model { model: String, message: String },
}

/// AbsPower models include idle power; DynPower models exclude it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum OutputType {
    AbsPower,
    DynPower,
}

impl std::fmt::Display for OutputType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            OutputType::AbsPower => "AbsPower",
            OutputType::DynPower => "DynPower",
        })
    }
}

/// The model DB's feature groups.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum FeatureGroup {
    /// `bpf_cpu_time_ms` (+ `bpf_page_cache_hit` when recorded).
    BPFOnly,
    /// The BPF features and the IRQ counts.
    BPFIRQ,
    /// Hardware counters: `cpu_instructions` (+ `cpu_cycles`, `cache_miss`).
    CounterOnly,
    /// Every recorded feature.
    Full,
}

impl FeatureGroup {
    pub const ALL: [FeatureGroup; 4] = [
        FeatureGroup::BPFOnly,
        FeatureGroup::BPFIRQ,
        FeatureGroup::CounterOnly,
        FeatureGroup::Full,
    ];

    /// (features that must be recorded, features used when recorded).
    fn spec(self) -> (&'static [Feature], &'static [Feature]) {
        use Feature::*;
        match self {
            FeatureGroup::BPFOnly => (&[BpfCpuTimeMs], &[BpfPageCacheHit]),
            FeatureGroup::BPFIRQ => (
                &[BpfCpuTimeMs, BpfBlockIrq, BpfNetRxIrq, BpfNetTxIrq],
                &[BpfPageCacheHit],
            ),
            FeatureGroup::CounterOnly => (&[CpuInstructions], &[CpuCycles, CacheMiss]),
            FeatureGroup::Full => (&[BpfCpuTimeMs, CpuInstructions], &Feature::ALL),
        }
    }

    /// The group's features present in `have` (in [`Feature::ALL`] order), or `None` when a
    /// required one is missing.
    pub fn features_in(self, have: &[Feature]) -> Option<Vec<Feature>> {
        let (required, optional) = self.spec();
        if !required.iter().all(|f| have.contains(f)) {
            return None;
        }
        Some(
            Feature::ALL
                .into_iter()
                .filter(|f| have.contains(f) && (required.contains(f) || optional.contains(f)))
                .collect(),
        )
    }

    /// The feature curve fits and idle isolation use for non-memory components.
    pub fn main_feature(self) -> Feature {
        match self {
            FeatureGroup::CounterOnly => Feature::CpuInstructions,
            _ => Feature::BpfCpuTimeMs,
        }
    }

    fn requirement(self) -> String {
        let (required, _) = self.spec();
        let names: Vec<&str> = required.iter().map(|f| f.as_str()).collect();
        format!("{self} needs {}", names.join(" + "))
    }
}

impl std::fmt::Display for FeatureGroup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{self:?}")
    }
}

/// The trainers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum TrainerKind {
    /// Ordinary least squares, linear weight JSON.
    Ols,
    /// Non-negative least squares (no feature lowers power), linear weight JSON.
    Nnls,
    /// Ridge least squares ([`TrainOptions::ridge_alpha`] on MaxAbs-scaled features).
    Ridge,
    /// `a·ln(b·x+1)+c`, Levenberg–Marquardt.
    Logarithmic,
    /// `a·e^(b·x)+c`, Levenberg–Marquardt.
    Exponential,
    /// `A/(1+e^(−k(x−x0)))+off`, Levenberg–Marquardt.
    Logistic,
    /// Gradient-boosted trees, XGBoost JSON in a model archive.
    Xgboost,
}

impl TrainerKind {
    pub const ALL: [TrainerKind; 7] = [
        TrainerKind::Ols,
        TrainerKind::Nnls,
        TrainerKind::Ridge,
        TrainerKind::Logarithmic,
        TrainerKind::Exponential,
        TrainerKind::Logistic,
        TrainerKind::Xgboost,
    ];

    /// The model-DB trainer the files are named after.
    pub fn trainer(self) -> Trainer {
        match self {
            TrainerKind::Ols => Trainer::LinearRegression,
            TrainerKind::Nnls => Trainer::NnlsRegression,
            TrainerKind::Ridge => Trainer::RidgeRegression,
            TrainerKind::Logarithmic => Trainer::LogarithmicRegression,
            TrainerKind::Exponential => Trainer::ExponentialRegression,
            TrainerKind::Logistic => Trainer::LogisticRegression,
            TrainerKind::Xgboost => Trainer::XgboostFit,
        }
    }

    /// File extension of the written model: weight JSON or archive.
    pub fn extension(self) -> &'static str {
        match self {
            TrainerKind::Xgboost => "zip",
            _ => "json",
        }
    }
}

impl std::str::FromStr for TrainerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        serde_json::from_value(serde_json::Value::String(s.to_string())).map_err(|_| {
            format!(
                "unknown trainer {s:?} (known: ols, nnls, ridge, logarithmic, exponential, \
                 logistic, xgboost)"
            )
        })
    }
}

impl std::fmt::Display for TrainerKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.trainer().name())
    }
}

/// Acceptance thresholds: a model passes when its worst component's MAE or MAPE is within.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Acceptance {
    pub max_mae_w: f64,
    pub max_mape_pct: f64,
}

impl Default for Acceptance {
    fn default() -> Self {
        Acceptance {
            max_mae_w: 10.0,
            max_mape_pct: 20.0,
        }
    }
}

/// What to train and how.
#[derive(Debug, Clone, PartialEq)]
pub struct TrainOptions {
    /// Seed of the train/test split (and of the k-fold assignment).
    pub seed: u64,
    /// Share of rows held back for testing, in (0, 1).
    pub test_fraction: f64,
    /// Also report the mean accuracy over a k-fold cross-validation (k ≥ 2).
    pub k_fold: Option<usize>,
    pub trainers: Vec<TrainerKind>,
    pub output_types: Vec<OutputType>,
    /// `None`: every group the dataset has the features of.
    pub feature_groups: Option<Vec<FeatureGroup>>,
    /// The node type in the model names (`XgboostFitTrainer_<node_type>`).
    pub node_type: u32,
    pub acceptance: Acceptance,
    /// Ridge penalty on MaxAbs-scaled features (scikit-learn's `alpha`).
    pub ridge_alpha: f64,
    pub gbt: GbtParams,
    /// Threads that grow the trees of one model's components side by side; 0: as many as
    /// the machine offers ([`std::thread::available_parallelism`]). Models do not depend
    /// on it.
    pub threads: usize,
}

impl TrainOptions {
    /// [`TrainOptions::threads`] with 0 resolved.
    pub(crate) fn threads(&self) -> usize {
        match self.threads {
            0 => std::thread::available_parallelism().map_or(1, usize::from),
            n => n,
        }
    }
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            seed: 42,
            test_fraction: 0.2,
            k_fold: None,
            trainers: TrainerKind::ALL.to_vec(),
            output_types: vec![OutputType::AbsPower, OutputType::DynPower],
            feature_groups: None,
            node_type: 0,
            acceptance: Acceptance::default(),
            ridge_alpha: 1.0,
            gbt: GbtParams::default(),
            threads: 0,
        }
    }
}

/// One trained model, its file and its accuracy on the held-back rows.
#[derive(Debug, Clone)]
pub struct TrainedModel {
    pub output_type: OutputType,
    pub feature_group: FeatureGroup,
    pub trainer: TrainerKind,
    /// `<Trainer>_<node type>`, the file stem.
    pub name: String,
    pub features: Vec<Feature>,
    /// The model file (weight JSON or `.zip` archive), as a server serves it.
    pub bytes: Vec<u8>,
    pub accuracy: Accuracy,
    /// Mean accuracy over the k folds, when asked for.
    pub k_fold: Option<Accuracy>,
    pub accepted: bool,
    /// Per component, (measured, predicted) W on the held-back rows, for plots.
    pub test_points: Vec<(String, Vec<(f64, f64)>)>,
    /// Seconds spent fitting (all components, without evaluation).
    pub fit_seconds: f64,
}

impl TrainedModel {
    /// `<name>.<json|zip>`.
    pub fn file_name(&self) -> String {
        format!("{}.{}", self.name, self.trainer.extension())
    }
}

/// Everything [`train_all`] produced.
#[derive(Debug, Clone)]
pub struct TrainReport {
    pub models: Vec<TrainedModel>,
    pub rows: usize,
    pub train_rows: usize,
    pub test_rows: usize,
    /// The held-back rows (dataset row indices, ascending): to measure other models on the
    /// same rows.
    pub test_indices: Vec<usize>,
    /// Rows the dataset skipped for bad values.
    pub skipped_rows: usize,
    /// Idle power per component (W) removed for DynPower, per feature group's main feature.
    pub idle_w: Vec<(FeatureGroup, Vec<(String, f64)>)>,
    pub acceptance: Acceptance,
    pub seed: u64,
    pub spec: Option<MachineSpec>,
}

impl TrainReport {
    /// The most accurate accepted model per (output type, feature group): lowest worst MAE.
    pub fn best(&self) -> Vec<&TrainedModel> {
        let mut best: Vec<&TrainedModel> = Vec::new();
        for m in self.models.iter().filter(|m| m.accepted) {
            match best
                .iter_mut()
                .find(|b| b.output_type == m.output_type && b.feature_group == m.feature_group)
            {
                Some(b) if m.accuracy.mae_w < b.accuracy.mae_w => *b = m,
                Some(_) => {}
                None => best.push(m),
            }
        }
        best
    }

    /// Guidance when no model passes the acceptance thresholds; `None` when some does.
    pub fn guidance(&self) -> Option<String> {
        if self.models.iter().any(|m| m.accepted) {
            return None;
        }
        let closest = self
            .models
            .iter()
            .min_by(|a, b| a.accuracy.mae_w.total_cmp(&b.accuracy.mae_w));
        let close = closest.map_or(String::new(), |m| {
            format!(
                " The closest is {} {} {} (MAE {:.2} W, MAPE {}).",
                m.output_type,
                m.feature_group,
                m.name,
                m.accuracy.mae_w,
                eval::fmt_pct(m.accuracy.mape_pct)
            )
        });
        Some(format!(
            "No model meets MAE ≤ {} W or MAPE ≤ {} % on the held-back data.{close} Collect more \
             data: longer runs, more load levels and stressor kinds, idle phases, so that the \
             training rows cover the load the models must predict ({} rows were usable).",
            self.acceptance.max_mae_w, self.acceptance.max_mape_pct, self.rows
        ))
    }
}

//! Power models of the Kepler model DB: loading and inference, no Python.
//!
//! A model turns node-level usage rates ([`Feature`]s such as `bpf_cpu_time_ms`,
//! `cpu_instructions`; per second, summed over the node) into watts per power component
//! (`package`, `core`, `uncore`, `dram` for RAPL-like sources, `platform` for ACPI-like ones).
//! Supported formats (DESIGN §7):
//!
//! - **Linear weight JSON** (`SGDRegressorTrainer_*.json`): `b + Σ w·x/s` per component.
//! - **Curve-fit weight JSON** (`CurveFit_Weights`): logarithmic `a·ln(b·x+1)+c` or
//!   exponential `a·e^(b·x)+c` (3 values, told apart by the trainer name), logistic
//!   `A/(1+e^(−k(x−x0)))+off` (4 values), on one feature per component: the feature
//!   group's main feature (`cpu_instructions` or `bpf_cpu_time_ms`), and for `dram` its
//!   memory feature (`cache_miss` or `bpf_page_cache_hit`), as the model server trains them.
//! - **Archives** (`.zip`): `metadata.json`, a component map, per-component models after
//!   MaxAbs scaling: XGBoost JSON trees, and also pickled linear regressors and curve fits.
//!   Scaler and pickled models are read by a small data-only pickle reader.
//!
//! The [`builtin`] module adds default models trained by this project from public data
//! (SPECpower results, the AWS instance dataset), chosen by machine spec; see
//! docs/builtin-models.md.
//!
//! Legacy v0.6 files load too: `mean`/`variance` are ignored and `bpf_cpu_time_us` is read
//! from `bpf_cpu_time_ms` unchanged (see [`features`] for why). A feature name that is none
//! of Kepler's is an error at load ([`ModelError::UnknownFeature`]).
//!
//! The [`fit`] module holds the regression fitting the built-in models are trained with;
//! [`train`] trains model-DB models from a [`dataset::Dataset`] (`kepler-model-server train`).
//!
//! Every model implements [`Predictor`]. Predictions never go below 0 W; missing, NaN or
//! infinite inputs and non-finite results are errors, never silent zeros. The crate does no
//! I/O beyond reading the file [`load_model`] is given.
//!
//! ```no_run
//! use std::collections::HashMap;
//! let model = kepler_models::load_model("SGDRegressorTrainer_0.json".as_ref(), None)?;
//! let input = HashMap::from([("bpf_cpu_time_ms".to_string(), 47938.5)]);
//! for (component, watts) in model.predict(&input)? {
//!     println!("{component}: {watts} W");
//! }
//! # Ok::<(), kepler_models::ModelError>(())
//! ```

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod archive;
pub mod builtin;
mod curvefit;
pub mod dataset;
mod error;
pub mod features;
pub mod fit;
mod linear;
mod model;
mod pickle;
mod sklearn;
pub mod train;
mod trainer;
mod weights;
mod xgboost;

use std::io::Read;
use std::path::Path;

pub use error::ModelError;
pub use features::{Feature, FeatureLookup};
pub use model::ModelKind;
pub use trainer::Trainer;

/// A loaded power model.
pub trait Predictor: Send + Sync + std::fmt::Debug {
    /// The features the model needs: those whose values can change a prediction, sorted by
    /// name. A feature the file lists with zero weight (or that no tree splits on) is not
    /// needed and not read.
    fn features(&self) -> Vec<Feature>;

    /// Every feature the file lists (sorted by name), needed or not.
    fn declared_features(&self) -> Vec<Feature> {
        self.features()
    }

    /// Output components in a stable order: package, core, uncore, dram, platform, then
    /// others by name. [`Predictor::predict`] returns them in this order.
    fn components(&self) -> Vec<String>;

    /// What kind of function the model evaluates.
    fn kind(&self) -> ModelKind;

    /// The model's name (`SGDRegressorTrainer_0`) when the archive or file name tells it.
    fn name(&self) -> Option<&str>;

    /// Watts per component for one input. Errors name every missing feature, or the first
    /// non-finite input; results below zero are clamped to 0.
    fn predict(&self, input: &dyn FeatureLookup) -> Result<Vec<(String, f64)>, ModelError>;
}

/// Largest model file [`load_model`] reads; published files are below 1 MB.
pub const MAX_MODEL_FILE_BYTES: u64 = 256 << 20;

/// Loads a model file (weight JSON or `.zip` archive, recognised by content, not extension).
///
/// `trainer_hint` names the trainer (`LogarithmicRegressionTrainer`, with or without a
/// `_<node type>` suffix); without it the trainer comes from the archive metadata or the file
/// name. It is only needed for 3-value curve fits whose file name does not say.
pub fn load_model(
    path: &Path,
    trainer_hint: Option<&str>,
) -> Result<Box<dyn Predictor>, ModelError> {
    let io = |source| ModelError::Io {
        path: path.to_path_buf(),
        source,
    };
    let too_large = |size| ModelError::TooLarge {
        what: path.display().to_string(),
        size,
        limit: MAX_MODEL_FILE_BYTES,
    };
    let file = std::fs::File::open(path).map_err(io)?;
    // The length is only a shortcut for large regular files: FIFOs, /proc and device files
    // report 0 or lie, so the read itself is bounded too.
    let size = file.metadata().map_err(io)?.len();
    if size > MAX_MODEL_FILE_BYTES {
        return Err(too_large(size));
    }
    let mut bytes = Vec::new();
    file.take(MAX_MODEL_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(io)?;
    if bytes.len() as u64 > MAX_MODEL_FILE_BYTES {
        return Err(too_large(bytes.len() as u64));
    }
    let file_name = path.file_name().and_then(|n| n.to_str());
    load_model_bytes(&bytes, file_name, trainer_hint)
}

/// Loads a model from bytes. `file_name` (for example `ExponentialRegressionTrainer_0.json`)
/// is only used to learn the trainer and the model name; `trainer_hint` wins over it.
pub fn load_model_bytes(
    bytes: &[u8],
    file_name: Option<&str>,
    trainer_hint: Option<&str>,
) -> Result<Box<dyn Predictor>, ModelError> {
    let name = file_name.map(|f| {
        let f = f.rsplit(['/', '\\']).next().unwrap_or(f);
        f.split('.').next().unwrap_or(f).to_string()
    });
    // An explicit hint wins; a file name that names no trainer says nothing.
    let trainer = trainer::resolve(trainer_hint, file_name)?;
    let model = match sniff(bytes) {
        Format::Zip => archive::load(bytes, trainer, name)?,
        Format::Json(text) => weights::load(text, trainer, name)?,
        Format::Unknown(why) => return Err(ModelError::UnknownFormat(why)),
    };
    tracing::debug!(
        kind = %model.kind(),
        components = ?model.components(),
        features = ?model.features(),
        "model loaded"
    );
    Ok(Box::new(model))
}

enum Format<'a> {
    Zip,
    /// The JSON text, without a UTF-8 byte-order mark (serde_json rejects one).
    Json(&'a [u8]),
    Unknown(String),
}

/// Tells the format from the first bytes: a zip local header (or the end record of an empty
/// archive), or a JSON object.
fn sniff(bytes: &[u8]) -> Format<'_> {
    if bytes.starts_with(b"PK\x03\x04") || bytes.starts_with(b"PK\x05\x06") {
        return Format::Zip;
    }
    let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
    match text.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Format::Json(text),
        Some(b'[') => Format::Unknown("a JSON array is not a model".into()),
        None => Format::Unknown("the file is empty".into()),
        Some(_) if bytes.starts_with(b"\x80") => Format::Unknown(
            "a bare pickle is not loadable; use the model's .zip archive or weight JSON".into(),
        ),
        Some(_) => Format::Unknown("neither a weight JSON nor a .zip model archive".into()),
    }
}

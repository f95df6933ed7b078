//! The one error type of the crate. Every failure on external input (a model file, an input
//! row) ends here with a message that names what was wrong, so callers never have to guess.

use std::path::PathBuf;

use kepler_core::features::Feature;

/// Why a model could not be loaded or could not predict.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ModelError {
    /// The model file could not be read.
    #[error("cannot read model file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A file or archive member is larger than any model this crate accepts.
    #[error("{what} is too large ({size} bytes, limit {limit} bytes)")]
    TooLarge { what: String, size: u64, limit: u64 },

    /// The bytes are neither a weight JSON nor a model archive, or the JSON is not a model.
    #[error("unknown model format: {0}")]
    UnknownFormat(String),

    /// Malformed JSON (syntax or types) in a model file or archive member.
    #[error("invalid JSON in {context}: {message}")]
    Json { context: String, message: String },

    /// Well-formed input whose content does not describe a valid model (wrong shapes,
    /// inconsistent lengths, impossible values).
    #[error("invalid model: {0}")]
    Invalid(String),

    /// A weight, scale or tree value in the model is NaN or infinite.
    #[error("non-finite number in model: {0}")]
    NonFiniteWeight(String),

    /// The trainer name (given or taken from a file name) is not a Kepler trainer.
    #[error("unknown trainer {name:?} (known trainers: {known})")]
    UnknownTrainer { name: String, known: String },

    /// The trainer name and the model content disagree.
    #[error("trainer {trainer} does not match the model: {detail}")]
    TrainerMismatch { trainer: String, detail: String },

    /// A recognised model kind this crate cannot evaluate (for example pickled
    /// scikit-learn gradient boosting).
    #[error("unsupported model: {0}")]
    Unsupported(String),

    /// The `.zip` archive is damaged or lacks a member it must have.
    #[error("invalid model archive: {0}")]
    Archive(String),

    /// A pickle member of an archive could not be read.
    #[error("cannot read pickle {file}: {reason}")]
    Pickle { file: String, reason: String },

    /// A model file names a feature that is none of Kepler's features.
    #[error(
        "the model names an unknown feature {name:?} (Kepler's features: {})",
        known_features()
    )]
    UnknownFeature { name: String },

    /// The input lacks features the model needs. Lists every missing feature.
    #[error("missing input feature(s): {}", join(.0))]
    MissingFeatures(Vec<Feature>),

    /// An input feature the model reads is NaN or infinite.
    #[error("input feature {feature} is not finite ({value})")]
    NonFiniteInput { feature: Feature, value: f64 },

    /// The model produced NaN or an infinity for a component (for example an exponential
    /// curve far outside its training range).
    #[error("prediction for component {component} is not finite ({value})")]
    NonFinitePrediction { component: String, value: f64 },
}

fn join(features: &[Feature]) -> String {
    features
        .iter()
        .map(|f| f.as_str())
        .collect::<Vec<_>>()
        .join(", ")
}

fn known_features() -> String {
    join(&Feature::ALL)
}

impl ModelError {
    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        ModelError::Invalid(msg.into())
    }
}

/// Checks that a number read from a model is finite; `what` names it in the error.
pub(crate) fn finite(value: f64, what: impl FnOnce() -> String) -> Result<f64, ModelError> {
    if value.is_finite() {
        Ok(value)
    } else {
        Err(ModelError::NonFiniteWeight(format!(
            "{} is {value}",
            what()
        )))
    }
}

/// Parses JSON bytes, turning serde's error into [`ModelError::Json`]. Python's `json` module
/// writes `NaN`/`Infinity` literals that JSON (and serde_json) reject; such files get a
/// [`ModelError::NonFiniteWeight`] instead of a bare syntax error, because that is the real
/// problem with them.
pub(crate) fn parse_json<T: serde::de::DeserializeOwned>(
    bytes: &[u8],
    context: &str,
) -> Result<T, ModelError> {
    serde_json::from_slice(bytes).map_err(|e| {
        if e.is_syntax() && has_non_finite_literal(bytes, e.line(), e.column()) {
            ModelError::NonFiniteWeight(format!(
                "{context} contains a NaN or Infinity literal (line {}, column {})",
                e.line(),
                e.column()
            ))
        } else {
            ModelError::Json {
                context: context.to_string(),
                message: e.to_string(),
            }
        }
    })
}

/// Whether the syntax error at (line, column) sits on a `NaN`/`Infinity`/`-Infinity` token.
fn has_non_finite_literal(bytes: &[u8], line: usize, column: usize) -> bool {
    let Some(row) = bytes.split(|&b| b == b'\n').nth(line.saturating_sub(1)) else {
        return false;
    };
    // serde_json reports the 1-based column of the offending byte; its exact position
    // relative to the token differs between `NaN` and `-Infinity`, so look around it.
    let start = column.saturating_sub(2).min(row.len());
    let end = column.saturating_add(9).min(row.len());
    let window = row.get(start..end).unwrap_or_default();
    let contains = |needle: &[u8]| window.windows(needle.len()).any(|w| w == needle);
    contains(b"NaN") || contains(b"Infinity")
}

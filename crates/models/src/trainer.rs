//! Trainer names of the Kepler model server and what they tell about a model file.
//!
//! The trainer matters for one thing the file content cannot say: a 3-value `CurveFit_Weights`
//! is either logarithmic or exponential. It also lets us reject a file that does not hold
//! what its name promises.

use crate::ModelError;

/// A trainer of the Kepler model server (`kepler_model.train.trainer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Trainer {
    SgdRegressor,
    LogarithmicRegression,
    ExponentialRegression,
    LogisticRegression,
    XgboostFit,
    PolynomialRegression,
    GradientBoostingRegressor,
    KNeighborsRegressor,
    LinearRegression,
    SvrRegressor,
    /// Ridge least squares (this project's `train`; written as linear weight JSON).
    RidgeRegression,
    /// Non-negative least squares (this project's `train`; written as linear weight JSON).
    NnlsRegression,
}

const ALL: [(Trainer, &str); 12] = [
    (Trainer::SgdRegressor, "SGDRegressorTrainer"),
    (
        Trainer::LogarithmicRegression,
        "LogarithmicRegressionTrainer",
    ),
    (
        Trainer::ExponentialRegression,
        "ExponentialRegressionTrainer",
    ),
    (Trainer::LogisticRegression, "LogisticRegressionTrainer"),
    (Trainer::XgboostFit, "XgboostFitTrainer"),
    (Trainer::PolynomialRegression, "PolynomialRegressionTrainer"),
    (
        Trainer::GradientBoostingRegressor,
        "GradientBoostingRegressorTrainer",
    ),
    (Trainer::KNeighborsRegressor, "KNeighborsRegressorTrainer"),
    (Trainer::LinearRegression, "LinearRegressionTrainer"),
    (Trainer::SvrRegressor, "SVRRegressorTrainer"),
    (Trainer::RidgeRegression, "RidgeRegressionTrainer"),
    (Trainer::NnlsRegression, "NNLSRegressionTrainer"),
];

impl Trainer {
    /// The trainer's name as the model DB spells it.
    pub fn name(self) -> &'static str {
        ALL.iter()
            .find(|(t, _)| *t == self)
            .map_or("unknown", |(_, n)| n)
    }

    /// Parses a trainer name. Accepts the exact model-DB name, case-insensitively, and a
    /// model name with the node-type suffix (`SGDRegressorTrainer_0`).
    pub fn parse(name: &str) -> Result<Trainer, ModelError> {
        let base = strip_node_type(name.trim());
        ALL.iter()
            .find(|(_, n)| n.eq_ignore_ascii_case(base))
            .map(|(t, _)| *t)
            .ok_or_else(|| ModelError::UnknownTrainer {
                name: name.to_string(),
                known: ALL.iter().map(|(_, n)| *n).collect::<Vec<_>>().join(", "),
            })
    }

    /// The trainer a model-DB file name announces (`LogarithmicRegressionTrainer_0.json`).
    /// Names that do not look like `<Something>Trainer[_N]` announce nothing (Kepler's bundled
    /// `intel_rapl_AbsPowerModel.json`, for example); names that do but are unknown are an
    /// error, because a misspelt trainer should not silently pick the wrong curve.
    pub fn from_file_name(file_name: &str) -> Result<Option<Trainer>, ModelError> {
        let file = file_name.rsplit(['/', '\\']).next().unwrap_or(file_name);
        let stem = file.split('.').next().unwrap_or(file);
        let base = strip_node_type(stem);
        if base.ends_with("Trainer") {
            Trainer::parse(base).map(Some)
        } else {
            Ok(None)
        }
    }

    /// Trainers whose models can be linear weight JSON (`b + Σ w·x/s`).
    pub(crate) fn writes_linear_weights(self) -> bool {
        matches!(
            self,
            Trainer::SgdRegressor
                | Trainer::LinearRegression
                | Trainer::RidgeRegression
                | Trainer::NnlsRegression
        )
    }

    /// Trainers whose 3- or 4-value `CurveFit_Weights` this crate evaluates.
    pub(crate) fn is_curve_fit(self) -> bool {
        matches!(
            self,
            Trainer::LogarithmicRegression
                | Trainer::ExponentialRegression
                | Trainer::LogisticRegression
        )
    }
}

impl std::fmt::Display for Trainer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `SGDRegressorTrainer_12` → `SGDRegressorTrainer`: model names end in `_<node type>`.
fn strip_node_type(name: &str) -> &str {
    match name.rsplit_once('_') {
        Some((base, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => base,
        _ => name,
    }
}

/// Resolves the trainer from an explicit hint (wins; unknown names are errors) or else from
/// the file name.
pub(crate) fn resolve(
    hint: Option<&str>,
    file_name: Option<&str>,
) -> Result<Option<Trainer>, ModelError> {
    match hint {
        Some(h) => Trainer::parse(h).map(Some),
        None => match file_name {
            Some(f) => Trainer::from_file_name(f),
            None => Ok(None),
        },
    }
}

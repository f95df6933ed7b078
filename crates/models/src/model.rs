//! The one [`Predictor`] implementation: a set of per-component functions sharing a feature
//! list. Every format (weight JSON, archive) builds one of these, so input checking, output
//! clamping and component ordering live in one place.

use std::collections::BTreeSet;

use crate::features::{Feature, FeatureLookup, Inputs};
use crate::{ModelError, Predictor};

/// What kind of function a model evaluates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ModelKind {
    /// `b + Σ w·x/s` (SGDRegressor weights, or a pickled scikit-learn linear model).
    Linear,
    /// `a·ln(b·x + 1) + c`.
    Logarithmic,
    /// `a·e^(b·x) + c`.
    Exponential,
    /// `A / (1 + e^(−k(x − x0))) + off`.
    Logistic,
    /// Gradient-boosted regression trees in XGBoost's JSON format.
    Xgboost,
}

impl std::fmt::Display for ModelKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ModelKind::Linear => "linear",
            ModelKind::Logarithmic => "logarithmic",
            ModelKind::Exponential => "exponential",
            ModelKind::Logistic => "logistic",
            ModelKind::Xgboost => "xgboost",
        })
    }
}

/// One component's function of the inputs.
pub(crate) trait ComponentFn: Send + Sync + std::fmt::Debug {
    /// The features whose values can change this component's output.
    fn required(&self) -> Vec<Feature>;
    /// Raw (unclamped) prediction in watts.
    fn eval(&self, inputs: &Inputs<'_>) -> Result<f64, ModelError>;
}

/// A model: named components over a common set of input features.
#[derive(Debug)]
pub(crate) struct ComponentModel {
    kind: ModelKind,
    name: Option<String>,
    declared: Vec<Feature>,
    required: Vec<Feature>,
    components: Vec<(String, Box<dyn ComponentFn>)>,
}

/// Output order: RAPL zones as Kepler lists them, then platform, then anything else by name.
/// Files list components in arbitrary (or sorted) order; callers get a stable one.
fn component_rank(name: &str) -> (usize, &str) {
    const ORDER: [&str; 5] = ["package", "core", "uncore", "dram", "platform"];
    let rank = ORDER.iter().position(|o| *o == name).unwrap_or(ORDER.len());
    (rank, name)
}

impl ComponentModel {
    /// Builds a model. `declared` are all features the file lists.
    pub(crate) fn new(
        kind: ModelKind,
        name: Option<String>,
        declared: Vec<Feature>,
        mut components: Vec<(String, Box<dyn ComponentFn>)>,
    ) -> Result<Self, ModelError> {
        if components.is_empty() {
            return Err(ModelError::invalid("the model has no components"));
        }
        components.sort_by(|a, b| component_rank(&a.0).cmp(&component_rank(&b.0)));
        if let Some([a, _]) = components
            .windows(2)
            .find(|w| matches!(w, [a, b] if a.0 == b.0))
        {
            return Err(ModelError::invalid(format!(
                "component {} appears twice",
                a.0
            )));
        }
        // Sets of features sort by name (see `Feature`'s `Ord`), as the files list them.
        let required: BTreeSet<Feature> =
            components.iter().flat_map(|(_, c)| c.required()).collect();
        let mut declared_set: BTreeSet<Feature> = declared.into_iter().collect();
        declared_set.extend(required.iter().copied());
        Ok(ComponentModel {
            kind,
            name,
            declared: declared_set.into_iter().collect(),
            required: required.into_iter().collect(),
            components,
        })
    }
}

impl Predictor for ComponentModel {
    fn features(&self) -> Vec<Feature> {
        self.required.clone()
    }

    fn declared_features(&self) -> Vec<Feature> {
        self.declared.clone()
    }

    fn components(&self) -> Vec<String> {
        self.components.iter().map(|(n, _)| n.clone()).collect()
    }

    fn kind(&self) -> ModelKind {
        self.kind
    }

    fn name(&self) -> Option<&str> {
        self.name.as_deref()
    }

    fn predict(&self, input: &dyn FeatureLookup) -> Result<Vec<(String, f64)>, ModelError> {
        let inputs = Inputs::resolve(&self.required, input)?;
        self.components
            .iter()
            .map(|(name, f)| {
                let raw = f.eval(&inputs)?;
                if !raw.is_finite() {
                    return Err(ModelError::NonFinitePrediction {
                        component: name.clone(),
                        value: raw,
                    });
                }
                // Power cannot be negative; fitted curves and trees can dip below zero outside
                // their training range. `<=` also turns -0.0 into 0.0 so output never shows "-0".
                let watts = if raw <= 0.0 { 0.0 } else { raw };
                Ok((name.clone(), watts))
            })
            .collect()
    }
}

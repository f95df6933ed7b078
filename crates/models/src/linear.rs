//! Linear models: `power = b + Σ w·(x/s)` over named features (SGDRegressorTrainer weight JSON,
//! DESIGN §7).

use crate::features::{Feature, Inputs};
use crate::model::ComponentFn;
use crate::ModelError;

/// One feature's contribution: `weight · value / scale`.
#[derive(Debug, Clone)]
pub(crate) struct Term {
    pub(crate) feature: Feature,
    pub(crate) scale: f64,
    pub(crate) weight: f64,
}

/// A linear component. Scales are validated positive and finite by the loader.
#[derive(Debug, Clone)]
pub(crate) struct Linear {
    pub(crate) bias: f64,
    pub(crate) terms: Vec<Term>,
}

impl ComponentFn for Linear {
    fn required(&self) -> Vec<Feature> {
        // A zero weight means the feature cannot change the output, so the model does not
        // need it (the published BPFOnly models carry bpf_page_cache_hit with weight 0, and
        // a procfs-only agent has no page-cache counter).
        self.terms
            .iter()
            .filter(|t| t.weight != 0.0)
            .map(|t| t.feature)
            .collect()
    }

    fn eval(&self, inputs: &Inputs<'_>) -> Result<f64, ModelError> {
        let mut power = self.bias;
        for t in self.terms.iter().filter(|t| t.weight != 0.0) {
            // Normalise first, then weigh: the order the trainer and Kepler use.
            power += t.weight * (inputs.get(t.feature)? / t.scale);
        }
        Ok(power)
    }
}

//! Curve-fit models (`CurveFit_Weights`): one input feature, normalised by its scale, through a
//! logarithmic, exponential or logistic curve (DESIGN §7).
//!
//! Which feature: the model server's trainer fits each component on the feature group's
//! "main" feature (`cpu_instructions` for counter groups, `bpf_cpu_time_ms` for BPF groups),
//! except `dram`, fitted on the group's memory feature (`cache_miss`, `bpf_page_cache_hit`).
//! The pickles inside the published archives confirm it (`feature_index` 0 for package, 1
//! for dram). Kepler's Go estimator instead feeds every component the first feature; we follow
//! the trainer, since that is what the weights were fitted on.

use crate::features::{Feature, Inputs};
use crate::model::{ComponentFn, ModelKind};
use crate::ModelError;

/// The curve family.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CurveKind {
    Logarithmic,
    Exponential,
    Logistic,
}

impl CurveKind {
    pub(crate) fn model_kind(self) -> ModelKind {
        match self {
            CurveKind::Logarithmic => ModelKind::Logarithmic,
            CurveKind::Exponential => ModelKind::Exponential,
            CurveKind::Logistic => ModelKind::Logistic,
        }
    }

    /// Number of parameters the curve takes.
    pub(crate) fn arity(self) -> usize {
        match self {
            CurveKind::Logarithmic | CurveKind::Exponential => 3,
            CurveKind::Logistic => 4,
        }
    }
}

/// A curve with its fitted parameters, in the order the trainer stores them:
/// logarithmic/exponential `[a, b, c]`, logistic `[A, x0, k, off]`.
#[derive(Debug, Clone)]
pub(crate) struct CurveFn {
    kind: CurveKind,
    p: [f64; 4],
}

impl CurveFn {
    /// Checks the parameter count against the curve kind.
    pub(crate) fn new(kind: CurveKind, params: &[f64]) -> Result<Self, ModelError> {
        if params.len() != kind.arity() {
            return Err(ModelError::invalid(format!(
                "a {} curve takes {} parameters, got {}",
                kind.model_kind(),
                kind.arity(),
                params.len()
            )));
        }
        let mut p = [0.0; 4];
        for (dst, src) in p.iter_mut().zip(params) {
            *dst = crate::error::finite(*src, || "CurveFit_Weights value".to_string())?;
        }
        Ok(CurveFn { kind, p })
    }

    /// Whether the input can change the output at all (`a = 0` gives a constant; the
    /// published files use `[0, 1, 0]` for components with no power, such as core/uncore).
    pub(crate) fn reads_input(&self) -> bool {
        match (self.kind, self.p) {
            (CurveKind::Logarithmic | CurveKind::Exponential, [a, b, _, _]) => a != 0.0 && b != 0.0,
            (CurveKind::Logistic, [a, _x0, k, _off]) => a != 0.0 && k != 0.0,
        }
    }

    /// The curve at normalised input `x`.
    pub(crate) fn apply(&self, x: f64) -> f64 {
        let [p0, p1, p2, p3] = self.p;
        match self.kind {
            // Written as the trainer's formula (ln(b·x + 1), not ln_1p) to reproduce it exactly.
            CurveKind::Logarithmic => p0 * (p1 * x + 1.0).ln() + p2,
            CurveKind::Exponential => p0 * (p1 * x).exp() + p2,
            CurveKind::Logistic => p0 / (1.0 + (-p2 * (x - p1)).exp()) + p3,
        }
    }

    /// The value when the input is not read (see [`CurveFn::reads_input`]).
    fn constant(&self) -> f64 {
        self.apply(0.0)
    }
}

/// A weight-JSON curve component: `curve(value(feature) / scale)`.
#[derive(Debug, Clone)]
pub(crate) struct Curve {
    pub(crate) curve: CurveFn,
    pub(crate) feature: Feature,
    pub(crate) scale: f64,
}

impl ComponentFn for Curve {
    fn required(&self) -> Vec<Feature> {
        if self.curve.reads_input() {
            vec![self.feature]
        } else {
            Vec::new()
        }
    }

    fn eval(&self, inputs: &Inputs<'_>) -> Result<f64, ModelError> {
        if !self.curve.reads_input() {
            return Ok(self.curve.constant());
        }
        Ok(self.curve.apply(inputs.get(self.feature)? / self.scale))
    }
}

/// The feature a curve for `component` is fitted on, among the model's features (sorted by
/// name, see the module docs). `None` when the model has no features.
pub(crate) fn curve_feature(component: &str, features: &[Feature]) -> Option<Feature> {
    let pick = |candidates: &[Feature]| candidates.iter().copied().find(|c| features.contains(c));
    let main = || {
        pick(&[Feature::CpuInstructions, Feature::BpfCpuTimeMs])
            .or_else(|| features.first().copied())
    };
    if component == "dram" {
        pick(&[Feature::CacheMiss, Feature::BpfPageCacheHit]).or_else(main)
    } else {
        main()
    }
}

//! Utilisation held to [0, 1]: a built-in model describes a machine from idle to full load,
//! and a curve read past its ends says nothing true. Busy CPU time above `1000 ×` logical
//! CPUs happens when the spec's CPU count is too low (physical cores given as logical ones,
//! CPUs hot-plugged after start-up) or from rounding in the usage source; it is read as full
//! load, not extrapolated (a 48-CPU model at 2.0 "utilisation" predicted 417 W for a host
//! that draws half that).

use crate::features::{Feature, FeatureLookup};
use crate::{ModelError, ModelKind, Predictor};

/// A predictor whose `bpf_cpu_time_ms` input is clamped to `[0, max_ms]`.
#[derive(Debug)]
pub(crate) struct UtilisationClamp {
    inner: Box<dyn Predictor>,
    max_ms: f64,
}

impl UtilisationClamp {
    /// `logical_cores` is the model's feature scale in CPUs (`max = 1000 ×` it).
    pub(crate) fn new(inner: Box<dyn Predictor>, logical_cores: u32) -> UtilisationClamp {
        UtilisationClamp {
            inner,
            max_ms: 1000.0 * f64::from(logical_cores),
        }
    }
}

struct Clamped<'a> {
    input: &'a dyn FeatureLookup,
    max_ms: f64,
}

impl FeatureLookup for Clamped<'_> {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        let v = self.input.get_feature(feature)?;
        // Non-finite values pass through so the model reports them as errors.
        Some(if feature == Feature::BpfCpuTimeMs && v.is_finite() {
            v.clamp(0.0, self.max_ms)
        } else {
            v
        })
    }
}

impl Predictor for UtilisationClamp {
    fn features(&self) -> Vec<Feature> {
        self.inner.features()
    }

    fn declared_features(&self) -> Vec<Feature> {
        self.inner.declared_features()
    }

    fn components(&self) -> Vec<String> {
        self.inner.components()
    }

    fn kind(&self) -> ModelKind {
        self.inner.kind()
    }

    fn name(&self) -> Option<&str> {
        self.inner.name()
    }

    fn predict(&self, input: &dyn FeatureLookup) -> Result<Vec<(String, f64)>, ModelError> {
        self.inner.predict(&Clamped {
            input,
            max_ms: self.max_ms,
        })
    }
}

/// A predictor reduced to some of its components: those of a built-in model that have no
/// trustworthy estimate are left out ([`super::BuiltinSelection::without_withheld`]), so an
/// agent exports no zone for them rather than a wrong one.
#[derive(Debug)]
pub(crate) struct SomeComponents {
    inner: Box<dyn Predictor>,
    keep: Vec<String>,
}

impl SomeComponents {
    pub(crate) fn new(inner: Box<dyn Predictor>, drop: &[&str]) -> SomeComponents {
        let keep = inner
            .components()
            .into_iter()
            .filter(|c| !drop.contains(&c.as_str()))
            .collect();
        SomeComponents { inner, keep }
    }
}

impl Predictor for SomeComponents {
    fn features(&self) -> Vec<Feature> {
        self.inner.features()
    }

    fn declared_features(&self) -> Vec<Feature> {
        self.inner.declared_features()
    }

    fn components(&self) -> Vec<String> {
        self.keep.clone()
    }

    fn kind(&self) -> ModelKind {
        self.inner.kind()
    }

    fn name(&self) -> Option<&str> {
        self.inner.name()
    }

    fn predict(&self, input: &dyn FeatureLookup) -> Result<Vec<(String, f64)>, ModelError> {
        let mut out = self.inner.predict(input)?;
        out.retain(|(c, _)| self.keep.contains(c));
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    /// package = 10 + 90·u on a 4-CPU scale.
    const LINEAR: &str = r#"{"package": {"All_Weights": {"Bias_Weight": 10.0,
        "Categorical_Variables": {}, "Numerical_Variables":
        {"bpf_cpu_time_ms": {"scale": 4000.0, "weight": 90.0}}}}}"#;

    fn predict(model: &dyn Predictor, x: f64) -> Result<f64, ModelError> {
        let input = HashMap::from([("bpf_cpu_time_ms".to_string(), x)]);
        Ok(model.predict(&input)?[0].1)
    }

    #[test]
    fn utilisation_is_held_between_idle_and_full_load() -> Result<(), ModelError> {
        let inner =
            crate::load_model_bytes(LINEAR.as_bytes(), Some("SGDRegressorTrainer_0.json"), None)?;
        let model = UtilisationClamp::new(inner, 4);
        assert_eq!(predict(&model, 2000.0)?, 55.0);
        assert_eq!(predict(&model, 4000.0)?, 100.0);
        // Twice the CPUs busy that the machine has: full load, not 190 W.
        assert_eq!(predict(&model, 8000.0)?, 100.0);
        assert_eq!(predict(&model, -500.0)?, 10.0);
        assert!(predict(&model, f64::NAN).is_err());
        assert!(predict(&model, f64::INFINITY).is_err());
        Ok(())
    }
}

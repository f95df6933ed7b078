//! How a built-in model's answer is held to what the model can say, by one wrapper
//! ([`Adjusted`]) around the loaded model:
//!
//! - Utilisation held to [0, 1]: a built-in model describes a machine from idle to full load,
//!   and a curve read past its ends says nothing true. Busy CPU time above `1000 ×` logical
//!   CPUs happens when the spec's CPU count is too low (physical cores given as logical ones,
//!   CPUs hot-plugged after start-up) or from rounding in the usage source; it is read as full
//!   load, not extrapolated (a 48-CPU model at 2.0 "utilisation" predicted 417 W for a host
//!   that draws half that).
//! - Components left out: those of a built-in model that have no trustworthy estimate
//!   ([`super::BuiltinSelection::without_withheld`]), so an agent exports no zone for them
//!   rather than a wrong one.
//! - Components capped: the counter built-in ([`super::with_counters`]) at the busy-time
//!   model's full load, so per-event energies learnt on one CPU cannot run far past what the
//!   host's size allows.

use crate::features::{Feature, FeatureLookup};
use crate::{ModelError, ModelKind, Predictor};

/// A predictor that is another one with its input or its answer adjusted; it describes itself
/// (features, kind, name) as the inner model does. Each constructor sets one adjustment;
/// wrapping again combines them.
#[derive(Debug)]
pub(crate) struct Adjusted {
    inner: Box<dyn Predictor>,
    /// `bpf_cpu_time_ms` is clamped to `[0, max]`.
    max_cpu_ms: Option<f64>,
    /// Only these components are output (`None`: all of the inner model's).
    keep: Option<Vec<String>>,
    /// Component → the most watts it may output.
    caps: Vec<(String, f64)>,
}

impl Adjusted {
    fn new(inner: Box<dyn Predictor>) -> Adjusted {
        Adjusted {
            inner,
            max_cpu_ms: None,
            keep: None,
            caps: Vec::new(),
        }
    }

    /// Utilisation held to [0, 1]; `logical_cores` is the model's feature scale in CPUs
    /// (`max = 1000 ×` it).
    pub(crate) fn utilisation_clamp(inner: Box<dyn Predictor>, logical_cores: u32) -> Adjusted {
        Adjusted {
            max_cpu_ms: Some(1000.0 * f64::from(logical_cores)),
            ..Adjusted::new(inner)
        }
    }

    /// The model without the components in `drop`.
    pub(crate) fn without(inner: Box<dyn Predictor>, drop: &[&str]) -> Adjusted {
        let keep = inner
            .components()
            .into_iter()
            .filter(|c| !drop.contains(&c.as_str()))
            .collect();
        Adjusted {
            keep: Some(keep),
            ..Adjusted::new(inner)
        }
    }

    /// The model with each component in `caps` held at or below its cap.
    pub(crate) fn capped(inner: Box<dyn Predictor>, caps: Vec<(String, f64)>) -> Adjusted {
        Adjusted {
            caps,
            ..Adjusted::new(inner)
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

impl Predictor for Adjusted {
    fn features(&self) -> Vec<Feature> {
        self.inner.features()
    }

    fn declared_features(&self) -> Vec<Feature> {
        self.inner.declared_features()
    }

    fn components(&self) -> Vec<String> {
        match &self.keep {
            Some(keep) => keep.clone(),
            None => self.inner.components(),
        }
    }

    fn kind(&self) -> ModelKind {
        self.inner.kind()
    }

    fn name(&self) -> Option<&str> {
        self.inner.name()
    }

    fn predict(&self, input: &dyn FeatureLookup) -> Result<Vec<(String, f64)>, ModelError> {
        let mut out = match self.max_cpu_ms {
            Some(max_ms) => self.inner.predict(&Clamped { input, max_ms })?,
            None => self.inner.predict(input)?,
        };
        if let Some(keep) = &self.keep {
            out.retain(|(c, _)| keep.contains(c));
        }
        for (c, w) in &mut out {
            if let Some((_, cap)) = self.caps.iter().find(|(name, _)| name == c) {
                *w = w.min(*cap);
            }
        }
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
        let model = Adjusted::utilisation_clamp(inner, 4);
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

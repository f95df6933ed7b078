//! Feature names and how a model reads its inputs.
//!
//! Models name their inputs with Kepler's feature names (`bpf_cpu_time_ms`, `cpu_instructions`,
//! ...). Callers hand values over by name through [`FeatureLookup`], implemented for maps and
//! slices of pairs, so the agent and the CLI need no adapter.
//!
//! # Legacy `_us` feature
//!
//! Model DB v0.6 files (and the v0.6 training data) call the CPU-time feature
//! `bpf_cpu_time_us`. Despite the suffix its values are milliseconds of CPU time per second
//! (the nx12 training data peaks at ~29 000 on a 32-thread machine, which only fits ms/s), and
//! Kepler 0.7.11 shipped exactly these weights renamed to `bpf_cpu_time_ms` without rescaling.
//! So a model feature `bpf_cpu_time_us` is read from the agent's `bpf_cpu_time_ms`, value
//! unchanged (no ×1000), and reported by [`crate::Predictor::features`] under that canonical
//! name. If the input has no `bpf_cpu_time_ms` but has `bpf_cpu_time_us` (for example a CSV
//! of the v0.6 training data), that column is used instead.

use std::collections::{BTreeMap, HashMap};

use crate::ModelError;

/// Kepler's name for busy CPU milliseconds per second, the main BPF feature.
pub const BPF_CPU_TIME_MS: &str = "bpf_cpu_time_ms";
/// The v0.6 name of the same feature (see the module docs for why it is not rescaled).
pub const LEGACY_BPF_CPU_TIME_US: &str = "bpf_cpu_time_us";

/// The name the agent uses for a feature named `name` in a model file.
pub fn canonical_feature(name: &str) -> &str {
    if name == LEGACY_BPF_CPU_TIME_US {
        BPF_CPU_TIME_MS
    } else {
        name
    }
}

/// Other input names accepted for a canonical feature when the canonical one is absent.
pub fn feature_aliases(canonical: &str) -> &'static [&'static str] {
    if canonical == BPF_CPU_TIME_MS {
        &[LEGACY_BPF_CPU_TIME_US]
    } else {
        &[]
    }
}

/// Input values looked up by feature name.
pub trait FeatureLookup {
    /// The value of feature `name`, or `None` when the input does not have it.
    fn get_feature(&self, name: &str) -> Option<f64>;
}

impl<S: std::borrow::Borrow<str> + Eq + std::hash::Hash, H: std::hash::BuildHasher> FeatureLookup
    for HashMap<S, f64, H>
{
    fn get_feature(&self, name: &str) -> Option<f64> {
        self.get(name).copied()
    }
}

impl<S: std::borrow::Borrow<str> + Ord> FeatureLookup for BTreeMap<S, f64> {
    fn get_feature(&self, name: &str) -> Option<f64> {
        self.get(name).copied()
    }
}

impl<S: AsRef<str>> FeatureLookup for [(S, f64)] {
    fn get_feature(&self, name: &str) -> Option<f64> {
        // Linear scan: feature lists have a handful of entries.
        self.iter()
            .find(|(k, _)| k.as_ref() == name)
            .map(|(_, v)| *v)
    }
}

impl<S: AsRef<str>> FeatureLookup for Vec<(S, f64)> {
    fn get_feature(&self, name: &str) -> Option<f64> {
        self.as_slice().get_feature(name)
    }
}

impl<S: AsRef<str>, const N: usize> FeatureLookup for [(S, f64); N] {
    fn get_feature(&self, name: &str) -> Option<f64> {
        self.as_slice().get_feature(name)
    }
}

/// The inputs a model needs, resolved once per prediction: every required feature present
/// and finite, in the order of `required`.
#[derive(Debug)]
pub(crate) struct Inputs<'a> {
    names: &'a [String],
    values: Vec<f64>,
}

impl<'a> Inputs<'a> {
    /// Looks up every name in `required` (canonical names), trying aliases when the canonical
    /// name is absent. Missing features are collected so the error names all of them.
    pub(crate) fn resolve(
        required: &'a [String],
        input: &dyn FeatureLookup,
    ) -> Result<Self, ModelError> {
        let mut values = Vec::with_capacity(required.len());
        let mut missing = Vec::new();
        for name in required {
            let value = input.get_feature(name).or_else(|| {
                feature_aliases(name)
                    .iter()
                    .find_map(|alias| input.get_feature(alias))
            });
            match value {
                Some(v) if v.is_finite() => values.push(v),
                Some(v) => {
                    return Err(ModelError::NonFiniteInput {
                        feature: name.clone(),
                        value: v,
                    })
                }
                None => missing.push(name.clone()),
            }
        }
        if missing.is_empty() {
            Ok(Inputs {
                names: required,
                values,
            })
        } else {
            Err(ModelError::MissingFeatures(missing))
        }
    }

    /// The value of a required feature. Components only ask for features they declared, so
    /// `None` means a bug in this crate; it is still an error, not a panic.
    pub(crate) fn get(&self, name: &str) -> Result<f64, ModelError> {
        self.names
            .iter()
            .position(|n| n == name)
            .and_then(|i| self.values.get(i).copied())
            .ok_or_else(|| ModelError::MissingFeatures(vec![name.to_string()]))
    }
}

//! Feature names and how a model reads its inputs.
//!
//! Models name their inputs with Kepler's feature names (`bpf_cpu_time_ms`, `cpu_instructions`,
//! ...). Names in a model file are parsed into [`Feature`] once, when the file is loaded; a
//! name that is none of Kepler's features is an error naming it ([`parse_feature`]). Callers
//! hand values over through [`FeatureLookup`], implemented for the agent's
//! [`FeatureRates`], and for maps and slices of pairs keyed by feature or by name (a CSV
//! header), so the agent and the CLI need no adapter.
//!
//! # Legacy `_us` feature
//!
//! Model DB v0.6 files (and the v0.6 training data) call the CPU-time feature
//! `bpf_cpu_time_us`. Despite the suffix its values are milliseconds of CPU time per second
//! (the nx12 training data peaks at ~29 000 on a 32-thread machine, which only fits ms/s), and
//! Kepler 0.7.11 shipped exactly these weights renamed to `bpf_cpu_time_ms` without rescaling.
//! So a model feature `bpf_cpu_time_us` is read as [`Feature::BpfCpuTimeMs`], value unchanged
//! (no ×1000). If a name-keyed input has no `bpf_cpu_time_ms` but has `bpf_cpu_time_us` (for
//! example a CSV of the v0.6 training data), that column is used instead.

use std::collections::{BTreeMap, HashMap};

pub use kepler_core::features::{Feature, FeatureRates};

use crate::ModelError;

/// The v0.6 name of [`Feature::BpfCpuTimeMs`] (see the module docs for why it is not
/// rescaled).
pub const LEGACY_BPF_CPU_TIME_US: &str = "bpf_cpu_time_us";

/// The name the agent uses for a feature named `name` in a model file.
pub fn canonical_feature(name: &str) -> &str {
    if name == LEGACY_BPF_CPU_TIME_US {
        Feature::BpfCpuTimeMs.as_str()
    } else {
        name
    }
}

/// A feature name from a model file (legacy spellings included) as a [`Feature`].
pub fn parse_feature(name: &str) -> Result<Feature, ModelError> {
    canonical_feature(name)
        .parse()
        .map_err(|_| ModelError::UnknownFeature {
            name: name.to_string(),
        })
}

/// Other input names accepted for a feature when its own name is absent.
pub fn feature_aliases(feature: Feature) -> &'static [&'static str] {
    match feature {
        Feature::BpfCpuTimeMs => &[LEGACY_BPF_CPU_TIME_US],
        _ => &[],
    }
}

/// Input values looked up by feature.
pub trait FeatureLookup {
    /// The value of `feature`, or `None` when the input does not have it.
    fn get_feature(&self, feature: Feature) -> Option<f64>;
}

/// Looks a feature up by its name, then by its legacy aliases.
fn by_name(feature: Feature, get: impl Fn(&str) -> Option<f64>) -> Option<f64> {
    get(feature.as_str()).or_else(|| feature_aliases(feature).iter().find_map(|a| get(a)))
}

impl FeatureLookup for FeatureRates {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        self.get(feature)
    }
}

impl<S: std::borrow::Borrow<str> + Eq + std::hash::Hash, H: std::hash::BuildHasher> FeatureLookup
    for HashMap<S, f64, H>
{
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        by_name(feature, |name| self.get(name).copied())
    }
}

impl<S: std::borrow::Borrow<str> + Ord> FeatureLookup for BTreeMap<S, f64> {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        by_name(feature, |name| self.get(name).copied())
    }
}

/// Pairs keyed by name (`&str`, `String`) or by [`Feature`] (which is `AsRef<str>`).
impl<S: AsRef<str>> FeatureLookup for [(S, f64)] {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        // Linear scan: feature lists have a handful of entries.
        by_name(feature, |name| {
            self.iter()
                .find(|(k, _)| k.as_ref() == name)
                .map(|(_, v)| *v)
        })
    }
}

impl<S: AsRef<str>> FeatureLookup for Vec<(S, f64)> {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        self.as_slice().get_feature(feature)
    }
}

impl<S: AsRef<str>, const N: usize> FeatureLookup for [(S, f64); N] {
    fn get_feature(&self, feature: Feature) -> Option<f64> {
        self.as_slice().get_feature(feature)
    }
}

/// The inputs a model needs, resolved once per prediction: every required feature present
/// and finite, in the order of `required`.
#[derive(Debug)]
pub(crate) struct Inputs<'a> {
    features: &'a [Feature],
    values: Vec<f64>,
}

impl<'a> Inputs<'a> {
    /// Looks up every feature in `required`. Missing features are collected so the error
    /// names all of them.
    pub(crate) fn resolve(
        required: &'a [Feature],
        input: &dyn FeatureLookup,
    ) -> Result<Self, ModelError> {
        let mut values = Vec::with_capacity(required.len());
        let mut missing = Vec::new();
        for &feature in required {
            match input.get_feature(feature) {
                Some(v) if v.is_finite() => values.push(v),
                Some(v) => return Err(ModelError::NonFiniteInput { feature, value: v }),
                None => missing.push(feature),
            }
        }
        if missing.is_empty() {
            Ok(Inputs {
                features: required,
                values,
            })
        } else {
            Err(ModelError::MissingFeatures(missing))
        }
    }

    /// The value of a required feature. Components only ask for features they declared, so
    /// `None` means a bug in this crate; it is still an error, not a panic.
    pub(crate) fn get(&self, feature: Feature) -> Result<f64, ModelError> {
        self.features
            .iter()
            .position(|f| *f == feature)
            .and_then(|i| self.values.get(i).copied())
            .ok_or(ModelError::MissingFeatures(vec![feature]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legacy_names_parse_and_unknown_names_are_errors_naming_them() {
        assert_eq!(
            parse_feature("bpf_cpu_time_us").ok(),
            Some(Feature::BpfCpuTimeMs)
        );
        assert_eq!(parse_feature("cache_miss").ok(), Some(Feature::CacheMiss));
        let err = parse_feature("cgroupfs_cpu_usage_us").unwrap_err();
        assert!(
            matches!(&err, ModelError::UnknownFeature { name } if name == "cgroupfs_cpu_usage_us"),
            "{err}"
        );
        assert!(err.to_string().contains("cgroupfs_cpu_usage_us"), "{err}");
    }

    #[test]
    fn lookups_by_name_try_the_legacy_column() {
        let csv_row = [("bpf_cpu_time_us", 5.0), ("cache_miss", 7.0)];
        assert_eq!(csv_row.get_feature(Feature::BpfCpuTimeMs), Some(5.0));
        assert_eq!(csv_row.get_feature(Feature::CacheMiss), Some(7.0));
        assert_eq!(csv_row.get_feature(Feature::CpuCycles), None);
        let both = [("bpf_cpu_time_us", 5.0), ("bpf_cpu_time_ms", 6.0)];
        assert_eq!(both.get_feature(Feature::BpfCpuTimeMs), Some(6.0));
        let typed = vec![(Feature::CpuCycles, 2.0)];
        assert_eq!(typed.get_feature(Feature::CpuCycles), Some(2.0));
        let rates = FeatureRates {
            bpf_cpu_time_ms: 3.0,
            ..FeatureRates::default()
        };
        assert_eq!(rates.get_feature(Feature::BpfCpuTimeMs), Some(3.0));
        assert_eq!(rates.get_feature(Feature::CacheMiss), None);
    }
}

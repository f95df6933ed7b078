//! The `attribution` section (kepler-rs): how idle power is separated from active power. The
//! policy itself lives in `kepler_core`; this is its spelling in the config file.

use kepler_core::{IdlePolicy, Watts};
use serde::Deserialize;

use super::closed_choice;

closed_choice! {
    /// `attribution.idlePolicy`.
    #[derive(Default)]
    pub enum IdlePolicyName {
        /// Upstream's: idle = (1 − usage) × energy.
        #[default]
        Ratio = "ratio",
        /// A fixed or measured idle power.
        Baseline = "baseline",
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct AttributionSection {
    pub idle_policy: IdlePolicyName,
    /// With `baseline`: a fixed idle power in watts for every zone; unset = measured.
    pub idle_baseline_watts: Option<f64>,
    /// With a measured baseline: intervals at or below this usage ratio count as idle.
    pub low_usage_ratio: f64,
}

impl Default for AttributionSection {
    fn default() -> Self {
        AttributionSection {
            idle_policy: IdlePolicyName::Ratio,
            idle_baseline_watts: None,
            low_usage_ratio: 0.1,
        }
    }
}

impl AttributionSection {
    /// The attribution's idle policy as configured.
    pub fn idle_policy(&self) -> IdlePolicy {
        match self.idle_policy {
            IdlePolicyName::Ratio => IdlePolicy::Ratio,
            IdlePolicyName::Baseline => IdlePolicy::Baseline {
                configured: self.idle_baseline_watts.map(Watts),
                low_usage_ratio: self.low_usage_ratio,
            },
        }
    }
}

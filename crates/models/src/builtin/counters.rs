//! The counter built-in: where the usage source has hardware counters (cycles, instructions,
//! cache misses), a linear model on them replaces the busy-time curve for `package`.
//!
//! Busy CPU time cannot tell a core at 1.2 GHz from one at 3.5 GHz; cycles can, and on the
//! one public RAPL run with counters (nx12) a line on them is about twice as accurate as the
//! best busy-time curve (docs/model-accuracy.md). The model is trained by `kepler-model-server
//! train-builtin` with the model server's own trainer (NNLS, AbsPower, CounterOnly) and
//! committed as an ordinary model-DB weight file.
//!
//! Its weights are watts per event rate, which do not depend on the machine's size; its bias
//! is nx12's own baseline, which does. So on a host the bias is moved by what the busy-time
//! built-in says separates this host's idle from nx12's (`reference_idle_w`: the busy-time
//! built-in's idle for nx12's assumed spec): on nx12 the model is exactly the trained one, on a
//! larger machine its baseline grows as the busy-time model's does. The prediction is capped
//! at the busy-time model's full-load power, so per-event energies learnt on one CPU cannot
//! run far past what the host's size allows.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::clamp::Adjusted;
use super::index::{round_sig, StatedError};
use super::select::{BuiltinFamily, BuiltinSelection};
use super::BuiltinError;
use crate::features::Feature;
use crate::Predictor;

/// Where the counter model's file lives under `crates/models/builtin`.
pub const COUNTER_MODEL_PATH: &str =
    "nx12/rapl-sysfs/AbsPower/CounterOnly/NNLSRegressionTrainer_0.json";

/// The committed counter model (the file at [`COUNTER_MODEL_PATH`]).
pub(crate) const EMBEDDED_COUNTER_MODEL: &str =
    include_str!("../../builtin/nx12/rapl-sysfs/AbsPower/CounterOnly/NNLSRegressionTrainer_0.json");

/// `index.json`'s `counters`: what the counter model was trained on and what it states.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CounterIndex {
    /// The model file, relative to the index ([`COUNTER_MODEL_PATH`]).
    pub model: String,
    /// Trainer name of the file (decides its format).
    pub trainer: String,
    /// The data and how it was split.
    pub data: Vec<String>,
    /// Component → the busy-time `rapl` built-in's idle for the training machine's assumed
    /// spec; a host's bias is moved by its own busy-time idle minus this.
    pub reference_idle_w: BTreeMap<String, f64>,
    /// Component → error on the training run's held-back rows.
    pub expected_error: BTreeMap<String, StatedError>,
    /// Component → why the counter model does not estimate it.
    pub withheld: BTreeMap<String, String>,
}

impl CounterIndex {
    pub(crate) fn check(&self) -> Result<(), String> {
        if self.model != COUNTER_MODEL_PATH {
            return Err(format!(
                "counter model {:?} is not the embedded {COUNTER_MODEL_PATH:?}",
                self.model
            ));
        }
        for (name, w) in &self.reference_idle_w {
            if !(w.is_finite() && *w >= 0.0) {
                return Err(format!("reference idle of {name} must be finite and ≥ 0"));
            }
        }
        for (name, e) in &self.expected_error {
            if !(e.mae_w.is_finite() && e.mae_w >= 0.0 && e.mape.is_finite() && e.mape >= 0.0) {
                return Err(format!("expected error of {name} must be finite and ≥ 0"));
            }
        }
        Ok(())
    }
}

/// Every number of a weight JSON rounded to 12 significant digits, so the committed file does
/// not depend on the last bits of the platform's floating point.
pub fn rounded_weights(text: &str) -> Result<String, BuiltinError> {
    fn round(v: &mut Value) {
        match v {
            Value::Number(n) => {
                if let Some(f) = n.as_f64().filter(|f| f.fract() != 0.0) {
                    if let Some(r) = serde_json::Number::from_f64(round_sig(f)) {
                        *n = r;
                    }
                }
            }
            Value::Array(a) => a.iter_mut().for_each(round),
            Value::Object(o) => o.values_mut().for_each(round),
            _ => {}
        }
    }
    let mut v: Value = serde_json::from_str(text)
        .map_err(|e| BuiltinError::Index(format!("counter model: {e}")))?;
    round(&mut v);
    let mut out = serde_json::to_string_pretty(&v)
        .map_err(|e| BuiltinError::Index(format!("counter model: {e}")))?;
    out.push('\n');
    Ok(out)
}

/// `base` with its `package` estimate from hardware counters, when `available` has every
/// counter the embedded model reads and `family` is RAPL-like; otherwise `base` unchanged.
pub fn with_counters(
    base: BuiltinSelection,
    family: BuiltinFamily,
    available: &[Feature],
) -> Result<BuiltinSelection, BuiltinError> {
    let index = super::embedded_index()?;
    match &index.counters {
        Some(counters) => {
            with_counters_in(counters, EMBEDDED_COUNTER_MODEL, base, family, available)
        }
        None => Ok(base),
    }
}

/// [`with_counters`] with a given index section and model file (the trainer validates the
/// model it is about to write).
pub fn with_counters_in(
    counters: &CounterIndex,
    model_json: &str,
    base: BuiltinSelection,
    family: BuiltinFamily,
    available: &[Feature],
) -> Result<BuiltinSelection, BuiltinError> {
    if family != BuiltinFamily::Rapl {
        return Ok(base);
    }
    let trained = crate::load_model_bytes(model_json.as_bytes(), None, Some(&counters.trainer))?;
    let needs = trained.features();
    if needs.is_empty() || !needs.iter().all(|f| available.contains(f)) {
        return Ok(base);
    }
    let at = |ms: f64| -> Result<BTreeMap<String, f64>, BuiltinError> {
        Ok(base
            .predictor
            .predict(&[(Feature::BpfCpuTimeMs, ms)])?
            .into_iter()
            .collect())
    };
    let base_idle = at(0.0)?;
    // The busy-time built-ins clamp utilisation to 1: any larger input is full load.
    let base_max = at(f64::MAX)?;

    let mut doc: Value = serde_json::from_str(model_json)
        .map_err(|e| BuiltinError::Index(format!("counter model: {e}")))?;
    let Value::Object(map) = &mut doc else {
        return Err(BuiltinError::Index("counter model is not an object".into()));
    };
    // Only the components the family exports, which the base model has an idle for.
    let keep: Vec<String> = family
        .components()
        .iter()
        .filter(|c| map.contains_key(**c) && base_idle.contains_key(**c))
        .map(|c| (*c).to_string())
        .collect();
    map.retain(|k, v| keep.contains(k) || !v.is_object());
    let mut shifts = BTreeMap::new();
    for c in &keep {
        let (Some(reference), Some(host)) = (counters.reference_idle_w.get(c), base_idle.get(c))
        else {
            continue;
        };
        let bias = map
            .get_mut(c)
            .and_then(|v| v.pointer_mut("/All_Weights/Bias_Weight"))
            .ok_or_else(|| BuiltinError::Index(format!("counter model {c} has no bias")))?;
        let trained_bias = bias.as_f64().unwrap_or(0.0);
        let moved = (trained_bias + host - reference).max(0.0);
        *bias = Value::from(round_sig(moved));
        shifts.insert(c.clone(), host - reference);
    }
    let model_json = doc.to_string();
    let predictor = crate::load_model_bytes(model_json.as_bytes(), None, Some(&counters.trainer))?;
    let caps: Vec<(String, f64)> = keep
        .iter()
        .filter_map(|c| base_max.get(c).map(|m| (c.clone(), *m)))
        .collect();
    let predictor: Box<dyn Predictor> = Box::new(Adjusted::capped(predictor, caps.clone()));

    let mut withheld = base.withheld.clone();
    for (c, why) in &counters.withheld {
        withheld.entry(c.clone()).or_insert_with(|| why.clone());
    }
    let expected_error = counters
        .expected_error
        .iter()
        .filter(|(c, _)| keep.contains(c))
        .map(|(c, e)| (c.clone(), e.clone()))
        .collect();
    let names: Vec<&str> = needs.iter().map(|f| f.as_str()).collect();
    let shown = |c: &String| !withheld.contains_key(c);
    let moved: Vec<String> = shifts
        .iter()
        .filter(|(c, _)| shown(c))
        .map(|(c, s)| format!("{c} {s:+.1} W"))
        .collect();
    let capped: Vec<String> = caps
        .iter()
        .filter(|(c, _)| shown(c))
        .map(|(c, m)| format!("{c} {m:.1} W"))
        .collect();
    let reason = format!(
        "hardware counters ({}): the nx12 counter model ({}), baseline moved by the busy-time \
         model's idle difference ({}) and capped at its full load ({}); busy-time model {}: {}",
        names.join(", "),
        counters.trainer,
        moved.join(", "),
        capped.join(", "),
        base.model_name,
        base.reason
    );
    Ok(BuiltinSelection {
        predictor,
        model_name: format!("builtin/nx12/{}_0", counters.trainer),
        matched: base.matched,
        reason,
        model_json,
        guest_host_cpus: base.guest_host_cpus,
        expected_error,
        withheld,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::builtin::{builtin_fallback, select_builtin, MachineSpec};

    const ALL: [Feature; 4] = [
        Feature::BpfCpuTimeMs,
        Feature::CpuCycles,
        Feature::CpuInstructions,
        Feature::CacheMiss,
    ];

    fn spec(processor: &str, cores: u32) -> MachineSpec {
        MachineSpec {
            processor: processor.into(),
            logical_cores: cores,
            physical_cores: None,
            chips: 2,
            memory_gb: 0.0,
            frequency_mhz: None,
        }
    }

    fn package(s: &BuiltinSelection, input: &[(Feature, f64)]) -> f64 {
        s.predictor
            .predict(&input.to_vec())
            .unwrap()
            .into_iter()
            .find(|(c, _)| c == "package")
            .map(|(_, w)| w)
            .unwrap()
    }

    #[test]
    fn counters_are_used_only_when_the_source_has_every_one() {
        let host = spec("intel_xeon_platinum_8259cl", 96);
        let base = || select_builtin(&host, BuiltinFamily::Rapl).unwrap();
        let busy_name = base().model_name;
        let with = with_counters(base(), BuiltinFamily::Rapl, &ALL).unwrap();
        assert_eq!(with.model_name, "builtin/nx12/NNLSRegressionTrainer_0");
        assert!(
            with.reason.starts_with("hardware counters ("),
            "{}",
            with.reason
        );
        assert!(with.reason.contains(&busy_name), "{}", with.reason);
        assert!(with.withheld.contains_key("dram"));
        assert!(with.expected_error.contains_key("package"));

        for partial in [&ALL[..1], &ALL[..3]] {
            let without = with_counters(base(), BuiltinFamily::Rapl, partial).unwrap();
            assert_eq!(without.model_name, busy_name, "{partial:?}");
        }
        let platform = select_builtin(&host, BuiltinFamily::Platform).unwrap();
        let name = platform.model_name.clone();
        let kept = with_counters(platform, BuiltinFamily::Platform, &ALL).unwrap();
        assert_eq!(kept.model_name, name);
    }

    #[test]
    fn power_follows_cycles_at_the_same_busy_time_and_stays_under_full_load() {
        let host = spec("unknown", 32);
        let base = builtin_fallback(&host, BuiltinFamily::Rapl).unwrap();
        let full = package(&base, &[(Feature::BpfCpuTimeMs, 1e9)]);
        let idle = package(&base, &[(Feature::BpfCpuTimeMs, 0.0)]);
        let with = with_counters(base, BuiltinFamily::Rapl, &ALL).unwrap();
        let at = |cycles: f64| {
            package(
                &with,
                &[
                    (Feature::BpfCpuTimeMs, 16_000.0),
                    (Feature::CpuCycles, cycles),
                    (Feature::CpuInstructions, cycles / 2.0),
                    (Feature::CacheMiss, 1e6),
                ],
            )
        };
        // Half the CPUs busy at 1.2 GHz against 3 GHz: busy time alone cannot tell them apart.
        let slow = at(16.0 * 1.2e9);
        let fast = at(16.0 * 3.0e9);
        assert!(slow > idle * 0.5 && slow < fast, "{slow} {fast}");
        assert!(at(1e15) <= full + 1e-9, "{} > {full}", at(1e15));
    }

    #[test]
    fn the_baseline_moves_with_the_busy_time_models_idle() {
        let index = crate::builtin::embedded_index().unwrap();
        let counters = index.counters.as_ref().unwrap();
        let zero = [
            (Feature::BpfCpuTimeMs, 0.0),
            (Feature::CpuCycles, 0.0),
            (Feature::CpuInstructions, 0.0),
            (Feature::CacheMiss, 0.0),
        ];
        let reference = counters.reference_idle_w["package"];
        let trained = crate::load_model_bytes(
            EMBEDDED_COUNTER_MODEL.as_bytes(),
            None,
            Some(&counters.trainer),
        )
        .unwrap();
        let trained_bias = trained.predict(&zero.to_vec()).unwrap()[0].1;
        for cores in [8, 32, 192] {
            let base = builtin_fallback(&spec("unknown", cores), BuiltinFamily::Rapl).unwrap();
            let idle = package(&base, &[(Feature::BpfCpuTimeMs, 0.0)]);
            let with = with_counters(base, BuiltinFamily::Rapl, &ALL).unwrap();
            let want = (trained_bias + idle - reference).max(0.0);
            let got = package(&with, &zero);
            assert!((got - want).abs() < 1e-6, "{cores} CPUs: {got} vs {want}");
        }
    }

    #[test]
    fn the_committed_model_is_rounded_and_reads_counters_only() {
        assert_eq!(
            rounded_weights(EMBEDDED_COUNTER_MODEL).unwrap(),
            EMBEDDED_COUNTER_MODEL
        );
        let m = crate::load_model_bytes(EMBEDDED_COUNTER_MODEL.as_bytes(), None, None).unwrap();
        assert!(!m.features().is_empty());
        assert!(!m.features().contains(&Feature::BpfCpuTimeMs));
    }
}

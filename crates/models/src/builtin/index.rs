//! The built-in model index (`crates/models/builtin/index.json`): per node type the few
//! numbers a model is made of, plus the fallback. Written by `kepler-model-server
//! train-builtin`, embedded in the library, turned into model-DB weight JSON on demand by
//! [`weight_json`] (the same function writes the committed model-DB files).

use std::collections::BTreeMap;
use std::sync::OnceLock;

use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

use super::BuiltinError;
use crate::features::Feature;

/// Version of the index layout; bumped when a field changes meaning.
pub const INDEX_FORMAT: u32 = 1;

/// Trainer names the built-in files are written as (their formats are decided by the name).
pub const LOG_TRAINER: &str = "LogarithmicRegressionTrainer";
pub const LINEAR_TRAINER: &str = "SGDRegressorTrainer";

/// Watts of one component from idle to full load, as a function of utilisation
/// `u = bpf_cpu_time_ms / (1000 × logical CPUs)`:
/// `idle + (max − idle) · g(u)` with `g(u) = ln(1 + b·u) / ln(1 + b)` when `log_b` is set
/// (concave; `g(0) = 0`, `g(1) = 1`) or `g(u) = u` when it is not.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CurveParams {
    pub idle_w: f64,
    pub max_w: f64,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub log_b: Option<f64>,
}

impl CurveParams {
    /// The same curve with both ends multiplied by `k` (a machine `k` times as large).
    pub fn scaled(self, k: f64) -> CurveParams {
        CurveParams {
            idle_w: self.idle_w * k,
            max_w: self.max_w * k,
            log_b: self.log_b,
        }
    }
}

/// One node type: a machine configuration seen in the data, and its model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NodeType {
    /// Node-type number; the model file is `<Trainer>_<id>.json`.
    pub id: u32,
    /// Normalised processor name, with a vendor prefix (`intel_xeon_platinum_8259cl`).
    pub processor: String,
    /// The CPU as the data names it (`Xeon Platinum 8259CL`).
    pub cpu: String,
    /// Logical CPUs of the machine.
    pub cores: u32,
    /// Sockets, when the data tells (SPECpower does, AWS does not).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub chips: Option<u32>,
    /// Installed memory in GB.
    pub memory_gb: f64,
    /// Nominal frequency in MHz, when the data tells.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub frequency_mhz: Option<f64>,
    /// Where the numbers come from (instance types, SPECpower systems).
    pub members: Vec<String>,
    /// Per component, the largest |model − data| in W at the data points not pinned by
    /// construction (AWS 10 % and 50 %); absent when every data point is reproduced exactly.
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub fit_error_w: Option<BTreeMap<String, f64>>,
    /// Component → curve.
    pub components: BTreeMap<String, CurveParams>,
}

impl NodeType {
    /// The model server's machine spec of this node type.
    pub fn machine_spec(&self) -> Value {
        let mut spec = Map::new();
        spec.insert("processor".into(), Value::from(self.processor.clone()));
        spec.insert("cores".into(), Value::from(self.cores));
        if let Some(c) = self.chips {
            spec.insert("chips".into(), Value::from(c));
        }
        spec.insert("memory".into(), super::spec::number(self.memory_gb));
        if let Some(f) = self.frequency_mhz {
            spec.insert("frequency".into(), super::spec::number(f));
        }
        Value::Object(spec)
    }
}

/// `fixed + per_cpu · logical CPUs + per_gb · memory GB`, in watts.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Affine {
    pub fixed_w: f64,
    pub per_cpu_w: f64,
    pub per_gb_w: f64,
}

impl Affine {
    pub fn at(&self, cpus: f64, memory_gb: f64) -> f64 {
        self.fixed_w + self.per_cpu_w * cpus + self.per_gb_w * memory_gb
    }
}

/// The fallback curve of one component: its ends depend on the machine's size.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FallbackCurve {
    pub idle: Affine,
    pub max: Affine,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub log_b: Option<f64>,
}

/// The model used when no node type has the host's CPU.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fallback {
    /// Memory assumed when the host's is unknown: this many GB per logical CPU (median of
    /// the data's node types).
    pub memory_gb_per_cpu: f64,
    pub components: BTreeMap<String, FallbackCurve>,
    /// How the numbers were derived, with the in-sample errors that justified the form.
    pub derivation: Vec<String>,
}

/// A family's expected error for one component on a machine it was not trained on: what
/// the agent states beside every estimate of that component.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StatedError {
    /// Mean absolute error in watts.
    pub mae_w: f64,
    /// Mean absolute percentage error as a ratio (0.25 = 25 %).
    pub mape: f64,
    /// What it was measured on.
    pub basis: String,
}

/// All built-in models of one family.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FamilyIndex {
    /// Directory of the family's model-DB files (`aws`, `specpower`).
    pub pipeline: String,
    /// Model-DB energy source (`rapl-sysfs`, `acpi`).
    pub source: String,
    /// Trainer name the files carry (decides the weight format).
    pub trainer: String,
    /// The data file and how it was read.
    pub data: Vec<String>,
    pub types: Vec<NodeType>,
    pub fallback: Fallback,
    /// Component → expected error on held-out measurements; components without one are
    /// estimated without a stated error.
    #[serde(default)]
    pub expected_error: BTreeMap<String, StatedError>,
    /// Component → why no estimate of it is trustworthy: the agent exports no zone for it
    /// ([`super::BuiltinSelection::without_withheld`]); the model files keep it.
    #[serde(default)]
    pub withheld: BTreeMap<String, String>,
}

impl FamilyIndex {
    /// The size of a typical host in this family's data: the median logical CPU count over
    /// its node types (the lower median, so it is a size the data has). It is the host a
    /// guest of an unknown CPU is assumed to run on. `None` when the family has no node types.
    pub fn typical_host_cpus(&self) -> Option<u32> {
        let mut cores: Vec<u32> = self.types.iter().map(|t| t.cores).collect();
        cores.sort_unstable();
        let lower_median = cores.len().checked_sub(1)? / 2;
        cores.get(lower_median).copied()
    }
}

/// The whole index.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BuiltinIndex {
    pub format: u32,
    pub generated_by: String,
    /// RAPL-like models: `package` and `dram`.
    pub rapl: FamilyIndex,
    /// ACPI-like models: `platform`.
    pub platform: FamilyIndex,
    /// The `package` model for hosts with hardware counters ([`super::with_counters`]).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub counters: Option<super::CounterIndex>,
}

impl BuiltinIndex {
    /// Parses and checks an index: the format, unique ids, and every curve valid, the
    /// fallback's included.
    pub fn parse(text: &str) -> Result<BuiltinIndex, BuiltinError> {
        let index: BuiltinIndex = serde_json::from_str(text)
            .map_err(|e| BuiltinError::Index(format!("not a built-in index: {e}")))?;
        if index.format != INDEX_FORMAT {
            return Err(BuiltinError::Index(format!(
                "index format {} is not {INDEX_FORMAT}",
                index.format
            )));
        }
        if let Some(counters) = &index.counters {
            counters
                .check()
                .map_err(|e| BuiltinError::Index(format!("counters: {e}")))?;
        }
        for family in [&index.rapl, &index.platform] {
            let fallback_curves: BTreeMap<String, CurveParams> = family
                .fallback
                .components
                .iter()
                .map(|(n, f)| {
                    let c = CurveParams {
                        idle_w: 0.0,
                        max_w: 0.0,
                        log_b: f.log_b,
                    };
                    (n.clone(), c)
                })
                .collect();
            if fallback_curves.is_empty() || trainer_for(&fallback_curves) != family.trainer {
                return Err(BuiltinError::Index(format!(
                    "{}: the fallback must have components of the family's kind ({})",
                    family.pipeline, family.trainer
                )));
            }
            check_fallback(&family.fallback)
                .map_err(|e| BuiltinError::Index(format!("{} fallback: {e}", family.pipeline)))?;
            for (name, e) in &family.expected_error {
                let ok = |v: f64| v.is_finite() && v >= 0.0;
                if !ok(e.mae_w) || !ok(e.mape) {
                    return Err(BuiltinError::Index(format!(
                        "{}: expected error of {name} ({} W, {}) must be finite and ≥ 0",
                        family.pipeline, e.mae_w, e.mape
                    )));
                }
            }
            let mut ids = std::collections::BTreeSet::new();
            for t in &family.types {
                if trainer_for(&t.components) != family.trainer || t.components.is_empty() {
                    return Err(BuiltinError::Index(format!(
                        "{}: node type {} is not a {} model",
                        family.pipeline, t.id, family.trainer
                    )));
                }
                if !ids.insert(t.id) {
                    return Err(BuiltinError::Index(format!(
                        "{}: node type {} appears twice",
                        family.pipeline, t.id
                    )));
                }
                if t.cores == 0 {
                    return Err(BuiltinError::Index(format!(
                        "{}: node type {} has no cores",
                        family.pipeline, t.id
                    )));
                }
                for (name, c) in &t.components {
                    check_curve(c).map_err(|e| {
                        BuiltinError::Index(format!(
                            "{}: node type {} component {name}: {e}",
                            family.pipeline, t.id
                        ))
                    })?;
                }
            }
        }
        Ok(index)
    }

    /// The index as committed: pretty at the top, one line per node type, so diffs of a
    /// retraining show which types changed.
    pub fn to_text(&self) -> Result<String, BuiltinError> {
        let ser = |v: &dyn erased::Ser| v.compact();
        let mut out = String::from("{\n");
        out.push_str(&format!("  \"format\": {},\n", self.format));
        out.push_str(&format!(
            "  \"generated_by\": {},\n",
            ser(&self.generated_by)?
        ));
        for (i, (name, family)) in [("rapl", &self.rapl), ("platform", &self.platform)]
            .into_iter()
            .enumerate()
        {
            out.push_str(&format!("  \"{name}\": {{\n"));
            out.push_str(&format!("    \"pipeline\": {},\n", ser(&family.pipeline)?));
            out.push_str(&format!("    \"source\": {},\n", ser(&family.source)?));
            out.push_str(&format!("    \"trainer\": {},\n", ser(&family.trainer)?));
            out.push_str(&format!("    \"data\": {},\n", ser(&family.data)?));
            out.push_str(&format!("    \"fallback\": {},\n", ser(&family.fallback)?));
            out.push_str(&format!(
                "    \"expected_error\": {},\n",
                ser(&family.expected_error)?
            ));
            out.push_str(&format!("    \"withheld\": {},\n", ser(&family.withheld)?));
            out.push_str("    \"types\": [\n");
            let lines = family
                .types
                .iter()
                .map(|t| Ok(format!("      {}", ser(t)?)))
                .collect::<Result<Vec<_>, BuiltinError>>()?;
            out.push_str(&lines.join(",\n"));
            out.push_str("\n    ]\n");
            let last = i == 1 && self.counters.is_none();
            out.push_str(if last { "  }\n" } else { "  },\n" });
        }
        if let Some(counters) = &self.counters {
            let text = serde_json::to_string_pretty(counters)
                .map_err(|e| BuiltinError::Index(e.to_string()))?;
            out.push_str(&format!("  \"counters\": {}\n", text.replace('\n', "\n  ")));
        }
        out.push_str("}\n");
        Ok(out)
    }
}

/// Object-safe "serialize compactly", so [`BuiltinIndex::to_text`] can take fields of
/// different types through one closure.
mod erased {
    use super::BuiltinError;

    pub(super) trait Ser {
        fn compact(&self) -> Result<String, BuiltinError>;
    }

    impl<T: serde::Serialize> Ser for T {
        fn compact(&self) -> Result<String, BuiltinError> {
            serde_json::to_string(self).map_err(|e| BuiltinError::Index(e.to_string()))
        }
    }
}

fn check_curve(c: &CurveParams) -> Result<(), String> {
    let ok = |v: f64| v.is_finite() && v >= 0.0;
    if !ok(c.idle_w) || !ok(c.max_w) {
        return Err(format!(
            "idle {} W and max {} W must be finite and ≥ 0",
            c.idle_w, c.max_w
        ));
    }
    if let Some(b) = c.log_b {
        if !(b.is_finite() && b > 0.0) {
            return Err(format!("log_b {b} must be finite and > 0"));
        }
    }
    Ok(())
}

/// Bound on the fallback's numbers: a megawatt per CPU or GB, or a terabyte of memory per
/// CPU, is far beyond any machine, and keeps every end finite for any CPU count (u32) and
/// memory size a spec may give.
const FALLBACK_BOUND: f64 = 1e6;

/// A fallback is evaluated for any machine size, so its numbers are checked rather than its
/// ends: the assumed memory per CPU must be a size (≥ 0, bounded), every affine coefficient
/// bounded (negative ones are allowed: the ends are clamped at 0 W where a fit dips below
/// zero) and `log_b` as for any curve.
fn check_fallback(f: &Fallback) -> Result<(), String> {
    let m = f.memory_gb_per_cpu;
    if !(0.0..=FALLBACK_BOUND).contains(&m) {
        return Err(format!(
            "memory_gb_per_cpu {m} must be between 0 and {FALLBACK_BOUND}"
        ));
    }
    for (name, c) in &f.components {
        for (end, a) in [("idle", &c.idle), ("max", &c.max)] {
            for (what, v) in [
                ("fixed_w", a.fixed_w),
                ("per_cpu_w", a.per_cpu_w),
                ("per_gb_w", a.per_gb_w),
            ] {
                // contains() is false for NaN and infinities too.
                if !(-FALLBACK_BOUND..=FALLBACK_BOUND).contains(&v) {
                    return Err(format!(
                        "component {name} {end}.{what} {v} must be within ±{FALLBACK_BOUND}"
                    ));
                }
            }
        }
        // The ends do not matter here, only log_b.
        let probe = CurveParams {
            idle_w: 0.0,
            max_w: 0.0,
            log_b: c.log_b,
        };
        check_curve(&probe).map_err(|e| format!("component {name}: {e}"))?;
    }
    Ok(())
}

/// The index compiled into the library.
const EMBEDDED: &str = include_str!("../../builtin/index.json");

/// The embedded index, parsed once. An error means a broken build (the tests load it).
pub fn embedded_index() -> Result<&'static BuiltinIndex, BuiltinError> {
    static INDEX: OnceLock<Result<BuiltinIndex, String>> = OnceLock::new();
    INDEX
        .get_or_init(|| {
            BuiltinIndex::parse(EMBEDDED).map_err(|e| match e {
                // Keep the bare message: it is wrapped in `Index` again below.
                BuiltinError::Index(m) => m,
                other => other.to_string(),
            })
        })
        .as_ref()
        .map_err(|e| BuiltinError::Index(e.clone()))
}

/// Rounds to 12 significant digits. Applied to every number computed with `ln` before it is
/// written, so the files do not depend on the platform's libm in the last bits (the
/// regeneration test compares bytes).
pub fn round_sig(x: f64) -> f64 {
    if x == 0.0 || !x.is_finite() {
        return x;
    }
    // Rust's float formatting and parsing are exact and platform-independent.
    format!("{x:.11e}").parse().unwrap_or(x)
}

/// Writes a model-DB weight JSON for a machine with `logical_cores` CPUs: the feature is
/// `bpf_cpu_time_ms` with scale `1000 × logical_cores`, so the model sees utilisation.
/// Curves with `log_b` become `CurveFit_Weights` `[a, b, c]` of a logarithmic model
/// (`a = (max − idle) / ln(1 + b)`, `c = idle`; load as `LogarithmicRegressionTrainer`);
/// curves without become linear weights (`Bias_Weight = idle`, `weight = max − idle`;
/// `SGDRegressorTrainer`). All components must be of one kind, as a model file is.
/// `model_name` and `machine_spec` go in as metadata (loaders ignore them).
pub fn weight_json(
    model_name: &str,
    machine_spec: &Value,
    logical_cores: u32,
    components: &BTreeMap<String, CurveParams>,
) -> Result<String, BuiltinError> {
    if logical_cores == 0 {
        return Err(BuiltinError::Index("a model needs at least one CPU".into()));
    }
    let scale = 1000.0 * f64::from(logical_cores);
    let cpu_time = Feature::BpfCpuTimeMs.as_str();
    let logarithmic = components.values().any(|c| c.log_b.is_some());
    let mut top = Map::new();
    top.insert("model_name".into(), Value::from(model_name));
    top.insert("machine_spec".into(), machine_spec.clone());
    for (name, c) in components {
        check_curve(c).map_err(|e| BuiltinError::Index(format!("component {name}: {e}")))?;
        let weights = match (logarithmic, c.log_b) {
            (true, Some(b)) => json!({
                "Categorical_Variables": {},
                "Numerical_Variables": { cpu_time: { "scale": scale } },
                // ln(b + 1), written as the curve evaluates it.
                "CurveFit_Weights": [round_sig((c.max_w - c.idle_w) / (b + 1.0).ln()), b, c.idle_w],
            }),
            (false, _) => json!({
                "Bias_Weight": c.idle_w,
                "Categorical_Variables": {},
                "Numerical_Variables": {
                    cpu_time: { "scale": scale, "weight": c.max_w - c.idle_w }
                },
            }),
            (true, None) => {
                return Err(BuiltinError::Index(format!(
                    "component {name} is linear but others are logarithmic; one model file \
                     holds one kind"
                )))
            }
        };
        top.insert(name.clone(), json!({ "All_Weights": weights }));
    }
    let mut text = serde_json::to_string_pretty(&Value::Object(top))
        .map_err(|e| BuiltinError::Index(e.to_string()))?;
    text.push('\n');
    Ok(text)
}

/// The trainer a set of curves is written as (see [`weight_json`]).
pub fn trainer_for(components: &BTreeMap<String, CurveParams>) -> &'static str {
    if components.values().any(|c| c.log_b.is_some()) {
        LOG_TRAINER
    } else {
        LINEAR_TRAINER
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The embedded index with `edit` applied to its JSON.
    fn edited(edit: impl FnOnce(&mut Value)) -> Result<BuiltinIndex, BuiltinError> {
        let mut v: Value = serde_json::from_str(EMBEDDED).expect("embedded index is JSON");
        edit(&mut v);
        BuiltinIndex::parse(&v.to_string())
    }

    #[test]
    fn embedded_index_parses() {
        assert!(edited(|_| {}).is_ok());
    }

    #[test]
    fn broken_fallbacks_are_rejected_at_parse_time() {
        // Values of the right type that are out of range.
        let cases: [(&str, Value); 4] = [
            ("/rapl/fallback/components/package/log_b", json!(-1.0)),
            ("/rapl/fallback/components/dram/log_b", json!(0.0)),
            ("/rapl/fallback/memory_gb_per_cpu", json!(-0.5)),
            ("/platform/fallback/memory_gb_per_cpu", json!(-1e-9)),
        ];
        for (pointer, bad) in cases {
            let r = edited(|v| {
                if let Some(slot) = v.pointer_mut(pointer) {
                    *slot = bad.clone();
                }
            });
            assert!(r.is_err(), "{pointer} = {bad} accepted");
        }
        // Finite but absurd: at 4 billion CPUs these ends would overflow.
        let text = EMBEDDED.replacen("\"fixed_w\":9.62083", "\"fixed_w\":-1e300", 1);
        assert_ne!(text, EMBEDDED);
        let err = BuiltinIndex::parse(&text).expect_err("absurd coefficient");
        assert!(err.to_string().contains("fixed_w"), "{err}");
        let text = EMBEDDED.replacen(
            "\"memory_gb_per_cpu\":1.0",
            "\"memory_gb_per_cpu\":1e300",
            1,
        );
        assert_ne!(text, EMBEDDED);
        let err = BuiltinIndex::parse(&text).expect_err("absurd memory");
        assert!(err.to_string().contains("memory_gb_per_cpu"), "{err}");
    }
}

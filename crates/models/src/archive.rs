//! Model archives (`.zip`), the model server's `/model` answer with `weight: false`.
//!
//! Layout (checked against the published ec2-0.7.11 archives):
//! - `metadata.json`: `model_name`, `model_class` (`xgboost`, `scikit`, `curvefit`),
//!   `model_file` (the component map), `features`, `fe_files`, `output_type`, errors.
//! - the component map `<model_name>.json`: `{component: {"model_file", "features",
//!   "fe_files"}}`.
//! - per component: the model file (XGBoost JSON, or a pickle) and its feature-engineering
//!   files, in practice one `scaler.pkl` (a MaxAbsScaler) applied before the model.
//!
//! The scaler's divisors are read from the pickle itself (see [`crate::pickle`]) rather than
//! from a sibling weight JSON: XGBoost models have no weight JSON, and the archive is then
//! self-contained. For the published models they equal the weight JSON `scale`s.

use std::collections::HashMap;
use std::io::{Cursor, Read};
use std::rc::Rc;
use std::sync::Arc;

use serde::Deserialize;
use serde_json::Value;

use crate::curvefit::{CurveFn, CurveKind};
use crate::error::parse_json;
use crate::features::{parse_feature, Feature, Inputs};
use crate::model::{ComponentFn, ComponentModel, ModelKind};
use crate::trainer::Trainer;
use crate::xgboost::Xgboost;
use crate::{sklearn, ModelError};

/// Largest archive member we decompress: the biggest published member is ~250 KB; the limit
/// guards against zip bombs. Each member is decompressed at most once per load (see
/// [`Archive`]), and all of them together within [`ARCHIVE_LIMIT`].
const MEMBER_LIMIT: u64 = 64 << 20;

/// Most bytes one archive may decompress in all, over every distinct member it reads: the
/// published archives hold about 1 MB; this keeps a small archive with many large members
/// from costing more than one large model.
const ARCHIVE_LIMIT: u64 = 96 << 20;

/// Most components one archive may have: the model server writes at most five (package,
/// core, uncore, dram, or platform). Each component costs a model evaluation per prediction.
const MAX_COMPONENTS: usize = 16;

/// Most feature-engineering files (scalers) one component may apply; the model server writes
/// one.
const MAX_SCALERS: usize = 8;

#[derive(Deserialize)]
struct Metadata {
    #[serde(default)]
    model_name: Option<String>,
    model_class: String,
    model_file: String,
    #[serde(default)]
    fe_files: Vec<String>,
}

#[derive(Deserialize)]
struct ComponentEntry {
    model_file: String,
    features: Vec<String>,
    #[serde(default)]
    fe_files: Vec<String>,
}

/// An archive being loaded. Components may share files (in practice every component uses
/// the same `scaler.pkl`, and a hostile archive can point every component at one huge model),
/// so members, scalers and models are cached by name: each member is decompressed and parsed
/// at most once per load, and all decompression together stays within `total_limit`.
struct Archive<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
    member_limit: u64,
    total_limit: u64,
    /// Bytes decompressed so far in this load.
    decompressed: u64,
    members: HashMap<String, Rc<[u8]>>,
    scalers: HashMap<String, Arc<[f64]>>,
    functions: HashMap<String, (Arc<Function>, ModelKind)>,
}

impl<'a> Archive<'a> {
    fn new(bytes: &'a [u8]) -> Result<Self, ModelError> {
        let zip = zip::ZipArchive::new(Cursor::new(bytes))
            .map_err(|e| ModelError::Archive(e.to_string()))?;
        Ok(Archive {
            zip,
            member_limit: MEMBER_LIMIT,
            total_limit: ARCHIVE_LIMIT,
            decompressed: 0,
            members: HashMap::new(),
            scalers: HashMap::new(),
            functions: HashMap::new(),
        })
    }

    /// A member's bytes, decompressed on first use only.
    fn read(&mut self, name: &str) -> Result<Rc<[u8]>, ModelError> {
        if let Some(data) = self.members.get(name) {
            return Ok(Rc::clone(data));
        }
        // Whichever binds: the per-member limit, or what is left of the archive's total. The
        // error then reports the member's size, or the total it would bring the archive to.
        let remaining = self.total_limit.saturating_sub(self.decompressed);
        let (budget, already, limit, what) = if self.member_limit <= remaining {
            let what = format!("archive member {name}");
            (self.member_limit, 0, self.member_limit, what)
        } else {
            let what = format!("the archive's members (at {name})");
            (remaining, self.decompressed, self.total_limit, what)
        };
        let entry = self
            .zip
            .by_name(name)
            .map_err(|e| ModelError::Archive(format!("member {name}: {e}")))?;
        let too_large = |size: u64| ModelError::TooLarge {
            what: what.clone(),
            size: already.saturating_add(size),
            limit,
        };
        if entry.size() > budget {
            return Err(too_large(entry.size()));
        }
        let mut out = Vec::new();
        // take(): the size in the header may lie; never decompress past the budget.
        entry
            .take(budget + 1)
            .read_to_end(&mut out)
            .map_err(|e| ModelError::Archive(format!("member {name}: {e}")))?;
        let size = out.len() as u64;
        if size > budget {
            return Err(too_large(size));
        }
        self.decompressed += size;
        let data: Rc<[u8]> = out.into();
        self.members.insert(name.to_string(), Rc::clone(&data));
        Ok(data)
    }

    /// The divisors of the MaxAbs scaler in member `fe`, parsed on first use only.
    fn scaler(&mut self, fe: &str) -> Result<Arc<[f64]>, ModelError> {
        if let Some(s) = self.scalers.get(fe) {
            return Ok(Arc::clone(s));
        }
        let scales: Arc<[f64]> = sklearn::max_abs_scales(&self.read(fe)?, fe)?.into();
        self.scalers.insert(fe.to_string(), Arc::clone(&scales));
        Ok(scales)
    }

    /// The model in member `file`, parsed on first use only.
    fn function(
        &mut self,
        file: &str,
        class: ModelClass,
    ) -> Result<(Arc<Function>, ModelKind), ModelError> {
        if let Some((f, k)) = self.functions.get(file) {
            return Ok((Arc::clone(f), *k));
        }
        let data = self.read(file)?;
        let (function, kind) = match class {
            ModelClass::Xgboost => (
                Function::Xgboost(Xgboost::from_json(&data, file)?),
                ModelKind::Xgboost,
            ),
            ModelClass::ScikitLinear => {
                let (coef, intercept) = sklearn::linear(&data, file)?;
                (Function::Linear { coef, intercept }, ModelKind::Linear)
            }
            ModelClass::CurveFit => {
                let (ck, popt, index): (CurveKind, _, _) = sklearn::curve_fit(&data, file)?;
                let curve = CurveFn::new(ck, &popt)
                    .map_err(|e| ModelError::invalid(format!("{file}: {e}")))?;
                (Function::Curve { curve, index }, ck.model_kind())
            }
        };
        let function = Arc::new(function);
        self.functions
            .insert(file.to_string(), (Arc::clone(&function), kind));
        Ok((function, kind))
    }
}

/// Loads a model archive. The trainer is `trainer` if given, else the one `metadata.json`'s
/// `model_name` announces; it must agree with `model_class`.
pub(crate) fn load(
    bytes: &[u8],
    trainer: Option<Trainer>,
    name: Option<String>,
) -> Result<ComponentModel, ModelError> {
    let mut ar = Archive::new(bytes)?;
    load_from(&mut ar, trainer, name)
}

fn load_from(
    ar: &mut Archive<'_>,
    trainer: Option<Trainer>,
    name: Option<String>,
) -> Result<ComponentModel, ModelError> {
    let meta: Metadata = parse_json(&ar.read("metadata.json")?, "metadata.json")?;
    let trainer = match trainer {
        Some(t) => Some(t),
        None => meta
            .model_name
            .as_deref()
            .map(Trainer::from_file_name)
            .transpose()?
            .flatten(),
    };
    let name = meta.model_name.clone().or(name);
    if !meta.fe_files.is_empty() {
        return Err(ModelError::Unsupported(format!(
            "model-level feature engineering ({})",
            meta.fe_files.join(", ")
        )));
    }
    let class = ModelClass::of(&meta.model_class, trainer)?;

    let map_bytes = ar.read(&meta.model_file)?;
    let map: Value = parse_json(&map_bytes, &meta.model_file)?;
    let Value::Object(map) = map else {
        return Err(ModelError::Unsupported(format!(
            "{} is not a per-component map",
            meta.model_file
        )));
    };
    if map.len() > MAX_COMPONENTS {
        return Err(ModelError::invalid(format!(
            "{} has {} components, at most {MAX_COMPONENTS} are allowed",
            meta.model_file,
            map.len()
        )));
    }
    let mut declared = Vec::new();
    let mut kind = None;
    let mut components: Vec<(String, Box<dyn ComponentFn>)> = Vec::new();
    for (component, entry) in map {
        let entry: ComponentEntry =
            serde_json::from_value(entry).map_err(|e| ModelError::Json {
                context: format!("{} component {component}", meta.model_file),
                message: e.to_string(),
            })?;
        let c = load_component(ar, &entry, class)?;
        if kind.is_some_and(|k| k != c.kind) {
            return Err(ModelError::invalid("components of different curve kinds"));
        }
        kind = Some(c.kind);
        declared.extend(c.features.iter().cloned());
        components.push((component, Box::new(c)));
    }
    let kind = kind.ok_or_else(|| ModelError::invalid("the component map is empty"))?;
    if let Some(t) = trainer {
        check_curve_trainer(t, kind)?;
    }
    ComponentModel::new(kind, name, declared, components)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ModelClass {
    Xgboost,
    ScikitLinear,
    CurveFit,
}

impl ModelClass {
    fn of(class: &str, trainer: Option<Trainer>) -> Result<Self, ModelError> {
        let mismatch = |t: Trainer| ModelError::TrainerMismatch {
            trainer: t.to_string(),
            detail: format!("the archive's model_class is {class}"),
        };
        match (class, trainer) {
            ("xgboost", None | Some(Trainer::XgboostFit)) => Ok(ModelClass::Xgboost),
            ("curvefit", None) => Ok(ModelClass::CurveFit),
            ("curvefit", Some(t)) if t.is_curve_fit() => Ok(ModelClass::CurveFit),
            ("scikit", None | Some(Trainer::SgdRegressor | Trainer::LinearRegression)) => {
                Ok(ModelClass::ScikitLinear)
            }
            ("scikit", Some(t)) => Err(ModelError::Unsupported(format!(
                "{t} archives hold pickled scikit-learn models this crate cannot evaluate"
            ))),
            ("xgboost" | "curvefit", Some(t)) => Err(mismatch(t)),
            (other, _) => Err(ModelError::Unsupported(format!("model_class {other:?}"))),
        }
    }
}

fn check_curve_trainer(t: Trainer, kind: ModelKind) -> Result<(), ModelError> {
    let expected = match t {
        Trainer::LogarithmicRegression => ModelKind::Logarithmic,
        Trainer::ExponentialRegression => ModelKind::Exponential,
        Trainer::LogisticRegression => ModelKind::Logistic,
        _ => return Ok(()),
    };
    if expected == kind {
        Ok(())
    } else {
        Err(ModelError::TrainerMismatch {
            trainer: t.to_string(),
            detail: format!("the archive holds {kind} curves"),
        })
    }
}

/// The function of one archive component, on scaled inputs.
#[derive(Debug)]
enum Function {
    Xgboost(Xgboost),
    Linear { coef: Vec<f64>, intercept: f64 },
    Curve { curve: CurveFn, index: usize },
}

/// One component: its features (in column order), the scalers applied in order, and the
/// model.
#[derive(Debug)]
struct ArchiveComponent {
    features: Vec<Feature>,
    scalers: Vec<Arc<[f64]>>,
    /// Shared with the other components that name the same model file.
    function: Arc<Function>,
    kind: ModelKind,
}

fn load_component(
    ar: &mut Archive<'_>,
    entry: &ComponentEntry,
    class: ModelClass,
) -> Result<ArchiveComponent, ModelError> {
    let features: Vec<Feature> = entry
        .features
        .iter()
        .map(|f| parse_feature(f))
        .collect::<Result<_, _>>()?;
    let width = features.len();
    if entry.fe_files.len() > MAX_SCALERS {
        return Err(ModelError::Unsupported(format!(
            "{} feature-engineering files for one component (at most {MAX_SCALERS})",
            entry.fe_files.len()
        )));
    }
    let mut scalers = Vec::new();
    for fe in &entry.fe_files {
        let scales = ar.scaler(fe)?;
        if scales.len() != width {
            return Err(ModelError::invalid(format!(
                "{fe} scales {} features, the component has {width}",
                scales.len()
            )));
        }
        scalers.push(scales);
    }
    let file = entry.model_file.as_str();
    let (function, kind) = ar.function(file, class)?;
    // The width checks belong to the component: two components may share a file yet list
    // different features.
    match &*function {
        Function::Xgboost(m) => {
            if m.num_feature() != width {
                return Err(ModelError::invalid(format!(
                    "{file} takes {} features, the component lists {width}",
                    m.num_feature()
                )));
            }
        }
        Function::Linear { coef, .. } => {
            if coef.len() != width {
                return Err(ModelError::invalid(format!(
                    "{file} has {} coefficients for {width} features",
                    coef.len()
                )));
            }
        }
        Function::Curve { index, .. } => {
            if *index >= width {
                return Err(ModelError::invalid(format!(
                    "{file} reads feature {index} of {width}"
                )));
            }
        }
    }
    Ok(ArchiveComponent {
        features,
        scalers,
        function,
        kind,
    })
}

impl ArchiveComponent {
    /// Column indices whose values can change the output.
    fn used_columns(&self) -> Vec<usize> {
        match &*self.function {
            Function::Xgboost(m) => m.used_features().into_iter().collect(),
            Function::Linear { coef, .. } => coef
                .iter()
                .enumerate()
                .filter(|(_, c)| **c != 0.0)
                .map(|(i, _)| i)
                .collect(),
            Function::Curve { curve, index } => {
                if curve.reads_input() {
                    vec![*index]
                } else {
                    Vec::new()
                }
            }
        }
    }

    /// Column `i` of the input after every scaler.
    fn scaled(&self, inputs: &Inputs<'_>, i: usize) -> Result<f64, ModelError> {
        let feature = self
            .features
            .get(i)
            .ok_or_else(|| ModelError::invalid(format!("no feature column {i}")))?;
        let mut x = inputs.get(*feature)?;
        for s in &self.scalers {
            x /= s.get(i).copied().unwrap_or(1.0);
        }
        Ok(x)
    }
}

impl ComponentFn for ArchiveComponent {
    fn required(&self) -> Vec<Feature> {
        self.used_columns()
            .into_iter()
            .filter_map(|i| self.features.get(i).copied())
            .collect()
    }

    fn eval(&self, inputs: &Inputs<'_>) -> Result<f64, ModelError> {
        match &*self.function {
            Function::Xgboost(m) => {
                // Columns no split reads stay None: the trees never look at them.
                let mut row = vec![None; self.features.len()];
                for i in self.used_columns() {
                    if let Some(slot) = row.get_mut(i) {
                        *slot = Some(self.scaled(inputs, i)? as f32);
                    }
                }
                m.predict(&row)
            }
            Function::Linear { coef, intercept } => {
                let mut power = *intercept;
                for i in self.used_columns() {
                    power += coef.get(i).copied().unwrap_or(0.0) * self.scaled(inputs, i)?;
                }
                Ok(power)
            }
            Function::Curve { curve, index } => {
                if curve.reads_input() {
                    Ok(curve.apply(self.scaled(inputs, *index)?))
                } else {
                    Ok(curve.apply(0.0))
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Predictor;
    use std::io::Write;

    fn published() -> Vec<u8> {
        let path = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(
            "../../data/kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/XgboostFitTrainer_0.zip",
        );
        std::fs::read(path).expect("published archive")
    }

    /// The published XGBoost archive with its component map replaced by `n` components that
    /// all use `package.json` and `scaler.pkl`.
    fn shared_members(n: usize) -> Vec<u8> {
        let mut src = zip::ZipArchive::new(Cursor::new(published())).expect("zip");
        let map: serde_json::Map<String, Value> = (0..n)
            .map(|i| {
                let entry = serde_json::json!({
                    "model_file": "package.json",
                    "features": ["bpf_cpu_time_ms", "bpf_page_cache_hit"],
                    "fe_files": ["scaler.pkl"],
                });
                (format!("c{i:02}"), entry)
            })
            .collect();
        let mut out = zip::ZipWriter::new(Cursor::new(Vec::new()));
        let opts = zip::write::SimpleFileOptions::default();
        for i in 0..src.len() {
            let mut f = src.by_index(i).expect("member");
            let name = f.name().to_string();
            let mut content = Vec::new();
            f.read_to_end(&mut content).expect("read");
            if name == "XgboostFitTrainer_0.json" {
                content = serde_json::to_vec(&map).expect("json");
            }
            out.start_file(name.as_str(), opts).expect("start");
            out.write_all(&content).expect("write");
        }
        out.finish().expect("finish").into_inner()
    }

    #[test]
    fn shared_members_are_decompressed_and_parsed_once() {
        let bytes = shared_members(MAX_COMPONENTS);
        let mut ar = Archive::new(&bytes).expect("archive");
        let model = load_from(&mut ar, None, None).expect("load");
        assert_eq!(model.components().len(), MAX_COMPONENTS);
        // metadata.json, the map, package.json and scaler.pkl, each once: before the caches
        // every component decompressed package.json (231886 bytes) and the scaler again.
        let map_len = ar
            .members
            .get("XgboostFitTrainer_0.json")
            .map_or(0, |m| m.len()) as u64;
        assert_eq!(ar.decompressed, 385 + map_len + 231886 + 471);
        assert_eq!(ar.members.len(), 4);
        assert_eq!((ar.scalers.len(), ar.functions.len()), (1, 1));
    }

    #[test]
    fn component_count_is_capped() {
        let err = load(&shared_members(MAX_COMPONENTS + 1), None, None).expect_err("too many");
        assert!(err.to_string().contains("components"), "{err}");
    }

    #[test]
    fn total_decompressed_bytes_are_capped() {
        let bytes = published();
        // Every member fits the member limit, but not all of them the archive's total.
        let mut ar = Archive::new(&bytes).expect("archive");
        ar.total_limit = 300_000;
        let err = load_from(&mut ar, None, None).expect_err("over the total");
        assert!(
            matches!(&err, ModelError::TooLarge { limit: 300_000, size, .. } if *size > 300_000),
            "{err}"
        );
        assert!(ar.decompressed <= 300_000);
        // The member limit still applies on its own.
        let mut ar = Archive::new(&bytes).expect("archive");
        ar.member_limit = 100_000;
        let err = load_from(&mut ar, None, None).expect_err("over the member limit");
        assert!(
            matches!(&err, ModelError::TooLarge { limit: 100_000, what, .. } if what.contains("member")),
            "{err}"
        );
        // And the published archive fits the real limits.
        let mut ar = Archive::new(&bytes).expect("archive");
        load_from(&mut ar, None, None).expect("load");
        assert_eq!(ar.decompressed, 569_550);
    }
}

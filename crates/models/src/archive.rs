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

use std::io::{Cursor, Read};

use serde::Deserialize;
use serde_json::Value;

use crate::curvefit::{CurveFn, CurveKind};
use crate::error::parse_json;
use crate::features::{canonical_feature, Inputs};
use crate::model::{ComponentFn, ComponentModel, ModelKind};
use crate::trainer::Trainer;
use crate::xgboost::Xgboost;
use crate::{sklearn, ModelError};

/// Largest archive member we decompress: the biggest published member is ~250 KB; the limit
/// guards against zip bombs.
const MEMBER_LIMIT: u64 = 64 << 20;

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

struct Archive<'a> {
    zip: zip::ZipArchive<Cursor<&'a [u8]>>,
}

impl Archive<'_> {
    fn read(&mut self, name: &str) -> Result<Vec<u8>, ModelError> {
        let entry = self
            .zip
            .by_name(name)
            .map_err(|e| ModelError::Archive(format!("member {name}: {e}")))?;
        if entry.size() > MEMBER_LIMIT {
            return Err(ModelError::TooLarge {
                what: format!("archive member {name}"),
                size: entry.size(),
                limit: MEMBER_LIMIT,
            });
        }
        let mut out = Vec::new();
        // take(): the size in the header may lie; never decompress past the limit.
        entry
            .take(MEMBER_LIMIT + 1)
            .read_to_end(&mut out)
            .map_err(|e| ModelError::Archive(format!("member {name}: {e}")))?;
        if out.len() as u64 > MEMBER_LIMIT {
            return Err(ModelError::TooLarge {
                what: format!("archive member {name}"),
                size: out.len() as u64,
                limit: MEMBER_LIMIT,
            });
        }
        Ok(out)
    }
}

/// Loads a model archive. The trainer is `trainer` if given, else the one `metadata.json`'s
/// `model_name` announces; it must agree with `model_class`.
pub(crate) fn load(
    bytes: &[u8],
    trainer: Option<Trainer>,
    name: Option<String>,
) -> Result<ComponentModel, ModelError> {
    let zip =
        zip::ZipArchive::new(Cursor::new(bytes)).map_err(|e| ModelError::Archive(e.to_string()))?;
    let mut ar = Archive { zip };
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
    let mut declared = Vec::new();
    let mut kind = None;
    let mut components: Vec<(String, Box<dyn ComponentFn>)> = Vec::new();
    for (component, entry) in map {
        let entry: ComponentEntry =
            serde_json::from_value(entry).map_err(|e| ModelError::Json {
                context: format!("{} component {component}", meta.model_file),
                message: e.to_string(),
            })?;
        let c = load_component(&mut ar, &entry, class)?;
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

/// One component: its features (canonical names, in column order), the scalers applied in
/// order, and the model.
#[derive(Debug)]
struct ArchiveComponent {
    features: Vec<String>,
    scalers: Vec<Vec<f64>>,
    function: Function,
    kind: ModelKind,
}

fn load_component(
    ar: &mut Archive<'_>,
    entry: &ComponentEntry,
    class: ModelClass,
) -> Result<ArchiveComponent, ModelError> {
    let features: Vec<String> = entry
        .features
        .iter()
        .map(|f| canonical_feature(f).to_string())
        .collect();
    let width = features.len();
    let mut scalers = Vec::new();
    for fe in &entry.fe_files {
        let scales = sklearn::max_abs_scales(&ar.read(fe)?, fe)?;
        if scales.len() != width {
            return Err(ModelError::invalid(format!(
                "{fe} scales {} features, the component has {width}",
                scales.len()
            )));
        }
        scalers.push(scales);
    }
    let file = entry.model_file.as_str();
    let data = ar.read(file)?;
    let (function, kind) = match class {
        ModelClass::Xgboost => {
            let m = Xgboost::from_json(&data, file)?;
            if m.num_feature() != width {
                return Err(ModelError::invalid(format!(
                    "{file} takes {} features, the component lists {width}",
                    m.num_feature()
                )));
            }
            (Function::Xgboost(m), ModelKind::Xgboost)
        }
        ModelClass::ScikitLinear => {
            let (coef, intercept) = sklearn::linear(&data, file)?;
            if coef.len() != width {
                return Err(ModelError::invalid(format!(
                    "{file} has {} coefficients for {width} features",
                    coef.len()
                )));
            }
            (Function::Linear { coef, intercept }, ModelKind::Linear)
        }
        ModelClass::CurveFit => {
            let (ck, popt, index): (CurveKind, _, _) = sklearn::curve_fit(&data, file)?;
            if index >= width {
                return Err(ModelError::invalid(format!(
                    "{file} reads feature {index} of {width}"
                )));
            }
            let curve =
                CurveFn::new(ck, &popt).map_err(|e| ModelError::invalid(format!("{file}: {e}")))?;
            (Function::Curve { curve, index }, ck.model_kind())
        }
    };
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
        match &self.function {
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
        let name = self
            .features
            .get(i)
            .ok_or_else(|| ModelError::invalid(format!("no feature column {i}")))?;
        let mut x = inputs.get(name)?;
        for s in &self.scalers {
            x /= s.get(i).copied().unwrap_or(1.0);
        }
        Ok(x)
    }
}

impl ComponentFn for ArchiveComponent {
    fn required(&self) -> Vec<String> {
        self.used_columns()
            .into_iter()
            .filter_map(|i| self.features.get(i).cloned())
            .collect()
    }

    fn eval(&self, inputs: &Inputs<'_>) -> Result<f64, ModelError> {
        match &self.function {
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

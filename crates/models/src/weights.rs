//! Weight JSON files (`{component: {"All_Weights": {...}}}`), the format the model server's
//! `/model` endpoint returns with `weight: true` and Kepler loads from
//! `/var/lib/kepler/data`. Holds either linear weights or curve-fit parameters.

use serde_json::{Map, Value};

use crate::curvefit::{curve_feature, Curve, CurveFn, CurveKind};
use crate::error::{finite, parse_json};
use crate::features::{canonical_feature, parse_feature, Feature};
use crate::linear::{Linear, Term};
use crate::model::{ComponentFn, ComponentModel, ModelKind};
use crate::trainer::Trainer;
use crate::ModelError;

/// Top-level keys that name power components. An object under one of these without
/// `All_Weights` is a broken component, not metadata to skip.
const COMPONENT_NAMES: [&str; 5] = ["package", "core", "uncore", "dram", "platform"];

/// Loads a weight JSON. `trainer` decides between logarithmic and exponential curves and must
/// agree with the content when given.
pub(crate) fn load(
    bytes: &[u8],
    trainer: Option<Trainer>,
    name: Option<String>,
) -> Result<ComponentModel, ModelError> {
    let root: Value = parse_json(bytes, "weight JSON")?;
    let Value::Object(top) = root else {
        return Err(ModelError::UnknownFormat(
            "a model JSON must be an object of components".into(),
        ));
    };
    if top.contains_key("learner") {
        return Err(ModelError::UnknownFormat(
            "this is a bare XGBoost model; load the model's .zip archive, which carries the \
             scaler and component map"
                .into(),
        ));
    }

    let mut parsed = Vec::new();
    for (component, value) in &top {
        // Other top-level keys (model_name, machine_spec, mae, ...) are metadata.
        let Value::Object(obj) = value else { continue };
        match obj.get("All_Weights") {
            Some(Value::Object(w)) => {
                parsed.push((component.clone(), parse_component(component, w)?))
            }
            Some(_) => {
                return Err(ModelError::invalid(format!(
                    "component {component}: All_Weights must be an object"
                )))
            }
            None if COMPONENT_NAMES.contains(&component.as_str()) => {
                return Err(ModelError::invalid(format!(
                    "component {component} has no All_Weights"
                )))
            }
            None => {}
        }
    }
    if parsed.is_empty() {
        let hint = if top.contains_key("model_class") {
            " (this looks like an archive's metadata.json; load the .zip)"
        } else {
            ""
        };
        return Err(ModelError::UnknownFormat(format!(
            "no component with All_Weights found{hint}"
        )));
    }

    let kind = model_kind(&parsed, trainer)?;
    let mut declared = Vec::new();
    let mut components: Vec<(String, Box<dyn ComponentFn>)> = Vec::new();
    for (component, c) in parsed {
        let (function, features) = build(&component, c, kind)?;
        declared.extend(features);
        components.push((component, function));
    }
    ComponentModel::new(kind, name, declared, components)
}

/// One component's `All_Weights`, before deciding what function it is. Feature names stay
/// text until [`build`]: a file whose shape is wrong is reported for its shape first.
struct Parsed {
    /// (canonical feature name, scale, weight if present), sorted by feature name.
    features: Vec<(String, f64, Option<f64>)>,
    bias: Option<f64>,
    curve: Option<Vec<f64>>,
}

fn parse_component(component: &str, w: &Map<String, Value>) -> Result<Parsed, ModelError> {
    let ctx = |what: &str| format!("component {component}: {what}");
    match w.get("Categorical_Variables") {
        None | Some(Value::Null) => {}
        Some(Value::Object(m)) if m.is_empty() => {}
        Some(Value::Object(_)) => {
            return Err(ModelError::Unsupported(ctx(
                "categorical variables (no Kepler trainer produces them)",
            )))
        }
        Some(_) => {
            return Err(ModelError::invalid(ctx(
                "Categorical_Variables must be an object",
            )))
        }
    }
    let Some(Value::Object(numerical)) = w.get("Numerical_Variables") else {
        return Err(ModelError::invalid(ctx(
            "Numerical_Variables must be an object",
        )));
    };
    let mut features = Vec::with_capacity(numerical.len());
    for (feature, v) in numerical {
        let Value::Object(fv) = v else {
            return Err(ModelError::invalid(ctx(&format!(
                "feature {feature} must be an object"
            ))));
        };
        let scale = number(fv.get("scale"), || ctx(&format!("{feature}.scale")))?
            .ok_or_else(|| ModelError::invalid(ctx(&format!("feature {feature} has no scale"))))?;
        // The trainer's MaxAbsScaler never writes a zero or negative scale; dividing by one
        // would silently zero or flip the feature, so refuse it.
        if scale <= 0.0 {
            return Err(ModelError::invalid(ctx(&format!(
                "feature {feature} has scale {scale}, must be positive"
            ))));
        }
        let weight = number(fv.get("weight"), || ctx(&format!("{feature}.weight")))?;
        // `mean` and `variance` (v0.6 files) are not used by inference: ignored.
        features.push((canonical_feature(feature).to_string(), scale, weight));
    }
    features.sort_by(|a, b| a.0.cmp(&b.0));
    if let Some([a, _]) = features
        .windows(2)
        .find(|w| matches!(w, [a, b] if a.0 == b.0))
    {
        return Err(ModelError::invalid(ctx(&format!(
            "feature {} appears twice (legacy and current name?)",
            a.0
        ))));
    }
    let bias = number(w.get("Bias_Weight"), || ctx("Bias_Weight"))?;
    let curve = match w.get("CurveFit_Weights") {
        None | Some(Value::Null) => None,
        Some(Value::Array(values)) => Some(
            values
                .iter()
                .map(|v| {
                    number(Some(v), || ctx("CurveFit_Weights value"))?
                        .ok_or_else(|| ModelError::invalid(ctx("CurveFit_Weights value is null")))
                })
                .collect::<Result<Vec<_>, _>>()?,
        ),
        Some(_) => {
            return Err(ModelError::invalid(ctx(
                "CurveFit_Weights must be an array",
            )))
        }
    };
    Ok(Parsed {
        features,
        bias,
        curve,
    })
}

/// An optional JSON number, finite. `None` for an absent key or `null`.
fn number(v: Option<&Value>, what: impl Fn() -> String) -> Result<Option<f64>, ModelError> {
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => {
            let x = n
                .as_f64()
                .ok_or_else(|| ModelError::invalid(format!("{} is not a number", what())))?;
            finite(x, &what).map(Some)
        }
        Some(other) => Err(ModelError::invalid(format!(
            "{} must be a number, found {other}",
            what()
        ))),
    }
}

/// Decides the model kind from the first component's shape and the trainer, and checks that
/// they agree.
fn model_kind(
    parsed: &[(String, Parsed)],
    trainer: Option<Trainer>,
) -> Result<ModelKind, ModelError> {
    let mismatch = |t: Trainer, detail: String| ModelError::TrainerMismatch {
        trainer: t.to_string(),
        detail,
    };
    let Some((first_name, first)) = parsed.first() else {
        return Err(ModelError::invalid("the model has no components"));
    };
    let kind = match &first.curve {
        None => {
            if let Some(t) = trainer.filter(|t| !t.writes_linear_weights()) {
                return Err(mismatch(
                    t,
                    "the file holds linear weights (SGDRegressorTrainer)".into(),
                ));
            }
            ModelKind::Linear
        }
        Some(values) => match (values.len(), trainer) {
            (4, None | Some(Trainer::LogisticRegression)) => ModelKind::Logistic,
            (3, Some(Trainer::LogarithmicRegression)) => ModelKind::Logarithmic,
            (3, Some(Trainer::ExponentialRegression)) => ModelKind::Exponential,
            (3, None) => {
                return Err(ModelError::invalid(format!(
                    "component {first_name}: 3 CurveFit_Weights are either logarithmic or \
                     exponential; name the trainer (LogarithmicRegressionTrainer or \
                     ExponentialRegressionTrainer)"
                )))
            }
            (n, Some(t)) if t.is_curve_fit() => {
                return Err(mismatch(
                    t,
                    format!("component {first_name} has {n} CurveFit_Weights"),
                ))
            }
            (_, Some(t)) => return Err(mismatch(t, "the file holds CurveFit_Weights".into())),
            (n, None) => {
                return Err(ModelError::invalid(format!(
                    "component {first_name}: {n} CurveFit_Weights fit no known curve (3 or 4)"
                )))
            }
        },
    };
    for (name, c) in parsed {
        if c.curve.is_some() != first.curve.is_some() {
            return Err(ModelError::invalid(format!(
                "components {first_name} and {name} are of different model kinds"
            )));
        }
    }
    Ok(kind)
}

fn curve_kind(kind: ModelKind) -> Option<CurveKind> {
    match kind {
        ModelKind::Logarithmic => Some(CurveKind::Logarithmic),
        ModelKind::Exponential => Some(CurveKind::Exponential),
        ModelKind::Logistic => Some(CurveKind::Logistic),
        _ => None,
    }
}

/// The component's function, and every feature it lists (parsed into [`Feature`]s here, once).
fn build(
    component: &str,
    c: Parsed,
    kind: ModelKind,
) -> Result<(Box<dyn ComponentFn>, Vec<Feature>), ModelError> {
    if let (Some(ck), Some(values)) = (curve_kind(kind), &c.curve) {
        let curve = CurveFn::new(ck, values)
            .map_err(|e| ModelError::invalid(format!("component {component}: {e}")))?;
        let features = c
            .features
            .iter()
            .map(|(f, scale, _)| Ok((parse_feature(f)?, *scale)))
            .collect::<Result<Vec<(Feature, f64)>, ModelError>>()?;
        let names: Vec<Feature> = features.iter().map(|(f, _)| *f).collect();
        let feature = curve_feature(component, &names).ok_or_else(|| {
            ModelError::invalid(format!("component {component}: a curve needs a feature"))
        })?;
        let scale = features
            .iter()
            .find(|(f, _)| *f == feature)
            .map(|(_, s)| *s)
            .ok_or_else(|| {
                ModelError::invalid(format!("component {component}: no scale for {feature}"))
            })?;
        let curve = Curve {
            curve,
            feature,
            scale,
        };
        return Ok((Box::new(curve), names));
    }
    let bias = c.bias.ok_or_else(|| {
        ModelError::invalid(format!(
            "component {component}: linear weights need a Bias_Weight"
        ))
    })?;
    let terms = c
        .features
        .into_iter()
        .map(|(feature, scale, weight)| {
            let weight = weight.ok_or_else(|| {
                ModelError::invalid(format!(
                    "component {component}: feature {feature} has no weight"
                ))
            })?;
            Ok(Term {
                feature: parse_feature(&feature)?,
                scale,
                weight,
            })
        })
        .collect::<Result<Vec<_>, ModelError>>()?;
    let features = terms.iter().map(|t| t.feature).collect();
    Ok((Box::new(Linear { bias, terms }), features))
}

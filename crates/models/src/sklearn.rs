//! The few scikit-learn (and model-server) objects read out of archive pickles: the MaxAbs
//! scaler, linear regressors and the model server's `CurveFitModel`.

use crate::curvefit::CurveKind;
use crate::pickle::{self, Pickle};
use crate::ModelError;

fn unsupported(file: &str, p: &Pickle) -> ModelError {
    let class = p
        .root_class()
        .map_or_else(|| "a non-object".to_string(), |(m, n)| format!("{m}.{n}"));
    ModelError::Unsupported(format!(
        "{file} holds {class}, which this crate cannot evaluate"
    ))
}

fn missing(file: &str, what: &str) -> ModelError {
    ModelError::Pickle {
        file: file.to_string(),
        reason: format!("no float64 array {what}"),
    }
}

/// `sklearn.preprocessing.MaxAbsScaler`: the divisors of `transform` (`scale_`, which is
/// `max_abs_` with zeros replaced by 1).
pub(crate) fn max_abs_scales(data: &[u8], file: &str) -> Result<Vec<f64>, ModelError> {
    let p = pickle::parse(data, file)?;
    match p.root_class() {
        Some((m, "MaxAbsScaler")) if m.starts_with("sklearn.") => {}
        _ => return Err(unsupported(file, &p)),
    }
    let scales = p
        .float_array("scale_")
        .ok_or_else(|| missing(file, "scale_"))?;
    for (i, s) in scales.iter().enumerate() {
        if !s.is_finite() || *s <= 0.0 {
            return Err(ModelError::invalid(format!(
                "{file}: scale_[{i}] is {s}, must be positive and finite"
            )));
        }
    }
    Ok(scales.to_vec())
}

/// A pickled linear regressor (`SGDRegressor`, `LinearRegression`): coefficients and
/// intercept.
pub(crate) fn linear(data: &[u8], file: &str) -> Result<(Vec<f64>, f64), ModelError> {
    let p = pickle::parse(data, file)?;
    match p.root_class() {
        Some((m, "SGDRegressor" | "LinearRegression")) if m.starts_with("sklearn.linear_model") => {
        }
        _ => return Err(unsupported(file, &p)),
    }
    let coef = p
        .float_array("coef_")
        .ok_or_else(|| missing(file, "coef_"))?;
    // SGDRegressor pickles a one-element array; LinearRegression fitted on a 1-D target a
    // NumPy scalar (both read by `float`). A longer array is a multi-output model.
    let intercept = match p.float_array("intercept_") {
        Some(v) if v.len() != 1 => {
            return Err(ModelError::invalid(format!(
                "{file}: intercept_ has {} values, expected 1",
                v.len()
            )))
        }
        _ => p.float("intercept_").ok_or_else(|| ModelError::Pickle {
            file: file.to_string(),
            reason: "no float64 intercept_ (array, float or NumPy scalar)".into(),
        })?,
    };
    for (what, v) in coef
        .iter()
        .map(|c| ("coef_", *c))
        .chain([("intercept_", intercept)])
    {
        crate::error::finite(v, || format!("{file}: {what}"))?;
    }
    Ok((coef.to_vec(), intercept))
}

/// The model server's `CurveFitModel`: which curve (from the pickled fit function's name),
/// its parameters and the index of the feature it reads.
pub(crate) fn curve_fit(
    data: &[u8],
    file: &str,
) -> Result<(CurveKind, Vec<f64>, usize), ModelError> {
    let p = pickle::parse(data, file)?;
    match p.root_class() {
        Some((_, "CurveFitModel")) => {}
        _ => return Err(unsupported(file, &p)),
    }
    let func = p
        .root_attr("fit_func")
        .and_then(|id| p.global(id))
        .map(|(_, name)| name)
        .ok_or_else(|| ModelError::Pickle {
            file: file.to_string(),
            reason: "no fit_func".into(),
        })?;
    let kind = match func {
        "log_func" => CurveKind::Logarithmic,
        // The model server's trainers name them expo_func and logi_func.
        "expo_func" | "exp_func" => CurveKind::Exponential,
        "logi_func" | "logistic_func" => CurveKind::Logistic,
        other => {
            return Err(ModelError::Unsupported(format!(
                "{file}: unknown curve function {other}"
            )))
        }
    };
    let popt = p.float_array("popt").ok_or_else(|| missing(file, "popt"))?;
    let index = p
        .int("feature_index")
        .and_then(|i| usize::try_from(i).ok())
        .ok_or_else(|| ModelError::Pickle {
            file: file.to_string(),
            reason: "no feature_index".into(),
        })?;
    Ok((kind, popt.to_vec(), index))
}

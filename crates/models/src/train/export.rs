//! Fitted components → model-DB files: linear and curve-fit weight JSON, XGBoost archives.
//! The descriptive keys (`model_name`, `machine_spec`, `output_type`, `mae`, `mape`,
//! `<component>_mae`, `<component>_mape`, -1 when a figure does not apply) are those of
//! upstream's files, so upstream's server and ours read the accuracy from them.

use std::io::Write;

use serde_json::{json, Map, Value};

use super::eval::Accuracy;
use super::gbt::Booster;
use crate::dataset::MachineSpec;
use crate::features::Feature;

/// One component's fitted function.
#[derive(Debug)]
pub(crate) enum Fitted {
    /// `b + Σ w·x/s` over (feature, scale, weight).
    Linear {
        bias: f64,
        terms: Vec<(Feature, f64, f64)>,
    },
    Curve {
        feature: Feature,
        scale: f64,
        params: Vec<f64>,
    },
    Trees(Booster),
}

/// What the files say about the model besides its functions.
pub(crate) struct Describe<'a> {
    pub name: &'a str,
    pub output_type: &'a str,
    pub features: &'a [Feature],
    pub spec: Option<&'a MachineSpec>,
    pub accuracy: Option<&'a Accuracy>,
}

fn figures(d: &Describe<'_>, into: &mut Map<String, Value>) {
    into.insert("model_name".into(), d.name.into());
    into.insert("output_type".into(), d.output_type.into());
    into.insert(
        "features".into(),
        d.features
            .iter()
            .map(|f| f.as_str())
            .collect::<Vec<_>>()
            .into(),
    );
    if let Some(spec) = d.spec {
        into.insert("machine_spec".into(), json!(spec));
    }
    if let Some(a) = d.accuracy {
        let round = |v: f64| (v * 100.0).round() / 100.0;
        into.insert("mae".into(), round(a.mae_w).into());
        into.insert("mape".into(), a.mape_pct.map_or(-1.0, round).into());
        for c in &a.components {
            into.insert(format!("{}_mae", c.component), round(c.mae_w).into());
            into.insert(
                format!("{}_mape", c.component),
                c.mape_pct.map_or(-1.0, round).into(),
            );
        }
    }
}

/// A weight JSON of linear or curve components.
pub(crate) fn weight_json(
    d: &Describe<'_>,
    components: &[(String, Fitted)],
) -> Result<Vec<u8>, String> {
    let mut top = Map::new();
    figures(d, &mut top);
    for (name, f) in components {
        let weights = match f {
            Fitted::Linear { bias, terms } => {
                let vars: Map<String, Value> = terms
                    .iter()
                    .map(|(f, s, w)| (f.as_str().to_string(), json!({"scale": s, "weight": w})))
                    .collect();
                json!({"Bias_Weight": bias, "Categorical_Variables": {}, "Numerical_Variables": vars})
            }
            Fitted::Curve {
                feature,
                scale,
                params,
                ..
            } => json!({
                "Categorical_Variables": {},
                "Numerical_Variables": { feature.as_str(): {"scale": scale} },
                "CurveFit_Weights": params,
            }),
            Fitted::Trees(_) => return Err("trees go into an archive".into()),
        };
        top.insert(name.clone(), json!({ "All_Weights": weights }));
    }
    serde_json::to_vec(&Value::Object(top)).map_err(|e| e.to_string())
}

/// An XGBoost model archive: `metadata.json`, the component map `<name>.json`, and one
/// `<component>.json` booster each. No scaler: the trees split on raw feature values.
pub(crate) fn xgboost_archive(
    d: &Describe<'_>,
    components: &[(String, Fitted)],
) -> Result<Vec<u8>, String> {
    let map_file = format!("{}.json", d.name);
    let features: Vec<&str> = d.features.iter().map(|f| f.as_str()).collect();
    let mut meta = Map::new();
    figures(d, &mut meta);
    meta.insert("model_class".into(), "xgboost".into());
    meta.insert("model_file".into(), map_file.clone().into());
    meta.insert("fe_files".into(), json!([]));
    let mut map = Map::new();
    let mut members: Vec<(String, Vec<u8>)> = Vec::new();
    for (name, f) in components {
        let Fitted::Trees(b) = f else {
            return Err("an XGBoost archive holds trees only".into());
        };
        let file = format!("{name}.json");
        map.insert(
            name.clone(),
            json!({"model_file": file, "features": features, "fe_files": []}),
        );
        members.push((
            file,
            serde_json::to_vec(&b.to_json()).map_err(|e| e.to_string())?,
        ));
    }
    let mut out = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default()
        .compression_method(zip::CompressionMethod::Deflated);
    let json_bytes = |v: &Map<String, Value>| serde_json::to_vec(v).map_err(|e| e.to_string());
    let mut all = vec![
        ("metadata.json".to_string(), json_bytes(&meta)?),
        (map_file, json_bytes(&map)?),
    ];
    all.extend(members);
    for (file, bytes) in all {
        out.start_file(file, opts).map_err(|e| e.to_string())?;
        out.write_all(&bytes).map_err(|e| e.to_string())?;
    }
    let cursor = out.finish().map_err(|e| e.to_string())?;
    Ok(cursor.into_inner())
}

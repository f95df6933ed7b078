//! Writes a training run as a model-DB pipeline directory:
//!
//! ```text
//! <out>/<pipeline>/node_type_index.json
//! <out>/<pipeline>/metadata.json                         (the run: seed, rows, trainers)
//! <out>/<pipeline>/<source>_<AbsPower|DynPower>_model_metadata.csv
//! <out>/<pipeline>/<source>/<AbsPower|DynPower>/<FeatureGroup>/<Trainer>_<node type>.json|zip
//! <out>/<pipeline>/report.html
//! ```
//!
//! Everything is written to a hidden sibling directory first (`serve` skips hidden
//! entries) and swapped in by renames, so a failed run leaves the previous pipeline as it
//! was and a server never sees half a pipeline. A run replaces the whole pipeline directory.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kepler_models::train::{OutputType, TrainReport, TrainedModel, TrainerKind};
use serde_json::json;

use super::{report, Source};

pub fn write_pipeline(
    out: &Path,
    pipeline: &str,
    source: Source,
    report: &TrainReport,
) -> Result<PathBuf> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let unique = format!(
        "{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
    );
    let tmp = out.join(format!(".{pipeline}.tmp-{unique}"));
    let result = fill(&tmp, pipeline, source, report);
    if let Err(e) = result {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    let dest = out.join(pipeline);
    let old = out.join(format!(".{pipeline}.old-{unique}"));
    let had_old = dest.exists();
    if had_old {
        std::fs::rename(&dest, &old)
            .with_context(|| format!("moving the previous {} aside", dest.display()))?;
    }
    if let Err(e) = std::fs::rename(&tmp, &dest) {
        if had_old {
            let _ = std::fs::rename(&old, &dest);
        }
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e).with_context(|| format!("moving the new pipeline to {}", dest.display()));
    }
    if had_old {
        if let Err(e) = std::fs::remove_dir_all(&old) {
            tracing::warn!(dir = %old.display(), "cannot remove the previous pipeline: {e}");
        }
    }
    Ok(dest)
}

fn fill(dir: &Path, pipeline: &str, source: Source, report: &TrainReport) -> Result<()> {
    let write = |rel: &Path, bytes: &[u8]| -> Result<()> {
        let path = dir.join(rel);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .with_context(|| format!("creating {}", parent.display()))?;
        }
        std::fs::write(&path, bytes).with_context(|| format!("writing {}", path.display()))
    };
    for m in &report.models {
        let rel = Path::new(source.as_str())
            .join(m.output_type.to_string())
            .join(m.feature_group.to_string())
            .join(m.file_name());
        write(&rel, &m.bytes)?;
    }
    let node_types: BTreeSet<String> = report
        .models
        .iter()
        .filter_map(|m| m.name.rsplit_once('_').map(|(_, n)| n.to_string()))
        .collect();
    let attrs = report.spec.clone().map_or(json!({}), |mut s| {
        // The index holds machine attributes only; the source is the directory's.
        s.source = None;
        json!(s)
    });
    let index: serde_json::Map<String, serde_json::Value> = node_types
        .into_iter()
        .map(|n| (n, json!({"attrs": attrs, "members": []})))
        .collect();
    write(
        Path::new("node_type_index.json"),
        &serde_json::to_vec_pretty(&index)?,
    )?;
    let trainers = |t: OutputType| -> Vec<String> {
        let set: BTreeSet<&TrainerKind> = report
            .models
            .iter()
            .filter(|m| m.output_type == t)
            .map(|m| &m.trainer)
            .collect();
        set.into_iter()
            .map(|k| k.trainer().name().to_string())
            .collect()
    };
    let meta = json!({
        "name": pipeline,
        "source": source.as_str(),
        "generated_by": "kepler-model-server train",
        "isolator": "min power of the 5 % least-loaded training rows",
        "seed": report.seed,
        "rows": report.rows,
        "train_rows": report.train_rows,
        "test_rows": report.test_rows,
        "skipped_rows": report.skipped_rows,
        "acceptance": report.acceptance,
        "abs_trainers": trainers(OutputType::AbsPower),
        "dyn_trainers": trainers(OutputType::DynPower),
        "idle_w": report
            .idle_w
            .iter()
            .map(|(g, idle)| {
                let per: BTreeMap<&str, f64> = idle.iter().map(|(c, w)| (c.as_str(), *w)).collect();
                (g.to_string(), per)
            })
            .collect::<BTreeMap<_, _>>(),
    });
    write(
        Path::new("metadata.json"),
        &serde_json::to_vec_pretty(&meta)?,
    )?;
    for t in [OutputType::AbsPower, OutputType::DynPower] {
        let models: Vec<&TrainedModel> = report
            .models
            .iter()
            .filter(|m| m.output_type == t)
            .collect();
        if models.is_empty() {
            continue;
        }
        let name = format!("{}_{t}_model_metadata.csv", source.as_str());
        write(Path::new(&name), &metadata_csv(&models)?)?;
    }
    write(
        Path::new("report.html"),
        report::html(pipeline, source.as_str(), report).as_bytes(),
    )?;
    Ok(())
}

/// The model DB's accuracy table (upstream's columns, then ours).
fn metadata_csv(models: &[&TrainedModel]) -> Result<Vec<u8>> {
    let components: Vec<String> = models
        .first()
        .map(|m| {
            m.accuracy
                .components
                .iter()
                .map(|c| c.component.clone())
                .collect()
        })
        .unwrap_or_default();
    let mut w = csv::Writer::from_writer(Vec::new());
    let mut header: Vec<String> = [
        "model_name",
        "model_class",
        "model_file",
        "features",
        "fe_files",
        "output_type",
        "mae",
        "mape",
    ]
    .map(String::from)
    .to_vec();
    header.extend(components.iter().map(|c| format!("{c}_mae")));
    header.extend(components.iter().map(|c| format!("{c}_mape")));
    header.extend(
        [
            "trainer",
            "node_type",
            "feature_group",
            "accepted",
            "cv_mae_w",
            "cv_mape_pct",
            "fit_seconds",
        ]
        .map(String::from),
    );
    w.write_record(&header)?;
    let fig = |v: f64| format!("{:.2}", v);
    let pct = |v: Option<f64>| v.map_or("-1".to_string(), fig);
    for m in models {
        let class = match m.trainer {
            TrainerKind::Xgboost => "xgboost",
            TrainerKind::Logarithmic | TrainerKind::Exponential | TrainerKind::Logistic => {
                "curvefit"
            }
            _ => "scikit",
        };
        let feats: Vec<String> = m
            .features
            .iter()
            .map(|f| format!("'{}'", f.as_str()))
            .collect();
        let mut row = vec![
            m.name.clone(),
            class.to_string(),
            m.file_name(),
            format!("[{}]", feats.join(", ")),
            "[]".to_string(),
            m.output_type.to_string(),
            fig(m.accuracy.mae_w),
            pct(m.accuracy.mape_pct),
        ];
        let comp = |c: &str| m.accuracy.components.iter().find(|a| a.component == c);
        row.extend(
            components
                .iter()
                .map(|c| comp(c).map_or("-1".into(), |a| fig(a.mae_w))),
        );
        row.extend(
            components
                .iter()
                .map(|c| pct(comp(c).and_then(|a| a.mape_pct))),
        );
        row.extend([
            m.trainer.trainer().name().to_string(),
            m.name.rsplit_once('_').map_or("0", |(_, n)| n).to_string(),
            m.feature_group.to_string(),
            m.accepted.to_string(),
            m.k_fold.as_ref().map_or(String::new(), |a| fig(a.mae_w)),
            m.k_fold.as_ref().map_or(String::new(), |a| pct(a.mape_pct)),
            format!("{:.4}", m.fit_seconds),
        ]);
        w.write_record(&row)?;
    }
    w.into_inner().map_err(|e| anyhow::anyhow!("{e}"))
}

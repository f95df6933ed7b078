//! The report's tables: the main comparison, selection reasons, means by load band, and the
//! sensitivity to the assumed spec and to the platform curve's shape.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use kepler_models::builtin::{
    builtin_fallback, embedded_index, select_builtin, weight_json, BuiltinFamily, BuiltinSelection,
    CurveParams, MachineSpec, LOG_TRAINER,
};
use kepler_models::Feature;

use super::{
    assumed_spec, fmt_scores, least_squares, score, Row, Score, ASSUMED_CORES, COMPONENTS,
    CPU_COLUMN,
};

/// Published models evaluated for reference: (label, path under the data dir, note).
const PUBLISHED: [(&str, &str, &str); 9] = [
    ("nx12 v0.6 SGDRegressorTrainer_1 (rapl)", "kepler-model-db/models/v0.6/nx12/std_v0.6/rapl/AbsPower/BPFOnly/SGDRegressorTrainer_1.json", "upstream's model of this machine, from this run's data; Kepler 0.7.11 bundled the same weights"),
    ("Kepler 0.7.11 bundled acpi_AbsPowerModel", "kepler/data/model_weight/acpi_AbsPowerModel.json", "same feature scale as the nx12 model: apparently from this run's data too"),
    ("ec2-0.7.11 SGDRegressorTrainer_0", "kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/SGDRegressorTrainer_0.json", "m5.metal (96 vCPU); Kepler ≥ 0.7.12's bundled rapl model"),
    ("ec2-0.7.11 LogarithmicRegressionTrainer_0", "kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_0.json", "m5.metal"),
    ("ec2-0.7.11 ExponentialRegressionTrainer_0", "kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/ExponentialRegressionTrainer_0.json", "m5.metal"),
    ("ec2-0.7.11 XgboostFitTrainer_0", "kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/XgboostFitTrainer_0.zip", "m5.metal"),
    ("specpower-0.7.11 SGDRegressorTrainer_0", "kepler-model-db/models/v0.7/specpower-0.7.11/acpi/AbsPower/BPFOnly/SGDRegressorTrainer_0.json", "Xeon X3360, 4 cores; Kepler ≥ 0.7.12's bundled acpi model"),
    ("specpower-0.7.11 LogisticRegressionTrainer_0", "kepler-model-db/models/v0.7/specpower-0.7.11/acpi/AbsPower/BPFOnly/LogisticRegressionTrainer_0.json", "Xeon X3360, 4 cores"),
    ("Kepler 0.7.11 bundled intel_rapl_AbsPowerModel", "kepler/data/model_weight/intel_rapl_AbsPowerModel.json", "identical weights to the nx12 v0.6 model"),
];

pub(super) fn report(rows: &[Row], data: &Path) -> Result<String> {
    let mut out = String::new();
    let spec = assumed_spec(ASSUMED_CORES, 0.0);
    let header = "| model | package MAE (W) | package MAPE | package bias (W) | dram MAE (W) | \
                  dram MAPE | dram bias (W) | platform MAE (W) | platform MAPE | platform bias (W) \
                  | note |\n|---|---|---|---|---|---|---|---|---|---|---|\n";
    out.push_str(&format!(
        "Rows: {} (nx12 stress-ng sweep, 3 s steps; `{CPU_COLUMN}` read as busy CPU ms/s). \
         Assumed spec: `{}` (memory unknown → the fallback's median GB per logical CPU).\n\n",
        rows.len(),
        spec.to_spec_json()
    ));
    out.push_str(header);
    let mut builtin_rows = Vec::new();
    for (label, select) in [
        ("built-in, as selected", false),
        ("built-in fallback", true),
    ] {
        let mut scores = BTreeMap::new();
        let mut names = Vec::new();
        for family in [BuiltinFamily::Rapl, BuiltinFamily::Platform] {
            let sel = if select {
                builtin_fallback(&spec, family)?
            } else {
                select_builtin(&spec, family)?
            };
            names.push(format!("`{}` ({})", sel.model_name, sel.matched));
            scores.extend(score(&*sel.predictor, rows)?);
            builtin_rows.push((family, sel));
        }
        out.push_str(&format!(
            "| **{label}** |{} {} |\n",
            fmt_scores(&scores, &COMPONENTS),
            names.join(", ")
        ));
    }
    out.push_str(&format!(
        "| in-sample least-squares line on this run |{} a bound, not a model: the straight line \
         in busy CPU time with the least squared error on these rows |\n",
        fmt_scores(&least_squares(rows), &COMPONENTS)
    ));
    for (label, rel, note) in PUBLISHED {
        let path = data.join(rel);
        let model = kepler_models::load_model(&path, None)
            .with_context(|| format!("loading {}", path.display()))?;
        let scores = score(&*model, rows)?;
        out.push_str(&format!(
            "| {label} |{} {note} |\n",
            fmt_scores(&scores, &COMPONENTS)
        ));
    }
    out.push_str(
        "\nn/a: the component is not in the model, or it needs `bpf_page_cache_hit`, which \
         the nx12 data does not have. Bias = mean(predicted − measured).\n",
    );
    out.push_str(&selection_notes(&builtin_rows));
    out.push_str(&bands(rows, &spec)?);
    out.push_str(&sensitivity(rows)?);
    out.push_str(&shape_check(rows, &spec)?);
    Ok(out)
}

/// SPECpower gives two points, so the platform curve is a line. Would the AWS package
/// curvature (concave) have done better here? Evaluated, not shipped.
fn shape_check(rows: &[Row], spec: &MachineSpec) -> Result<String> {
    let index = embedded_index()?;
    let b = index
        .rapl
        .fallback
        .components
        .get("package")
        .and_then(|c| c.log_b)
        .context("the rapl fallback has no package curvature")?;
    let cpus = f64::from(spec.logical_cores);
    let memory = index.platform.fallback.memory_gb_per_cpu * cpus;
    let components: BTreeMap<String, CurveParams> = index
        .platform
        .fallback
        .components
        .iter()
        .map(|(name, f)| {
            let c = CurveParams {
                idle_w: f.idle.at(cpus, memory).max(0.0),
                max_w: f.max.at(cpus, memory).max(0.0),
                log_b: Some(b),
            };
            (name.clone(), c)
        })
        .collect();
    let json = weight_json(
        "shape-check",
        &spec.to_spec_value(),
        spec.logical_cores,
        &components,
    )?;
    let model = kepler_models::load_model_bytes(json.as_bytes(), None, Some(LOG_TRAINER))?;
    let curved = score(&*model, rows)?;
    let linear = score(
        &*select_builtin(spec, BuiltinFamily::Platform)?.predictor,
        rows,
    )?;
    let cell = |s: &BTreeMap<String, Score>| {
        s.get("platform").map_or("n/a".into(), |s| {
            format!("{:.1} W / {:.1} % / {:+.1} W", s.mae, s.mape, s.bias)
        })
    };
    Ok(format!(
        "
Shape check, platform fallback (MAE / MAPE / bias): linear as shipped {}; with the AWS \
         package curvature b = {b} instead {}.\n",
        cell(&linear),
        cell(&curved)
    ))
}

fn selection_notes(sels: &[(BuiltinFamily, BuiltinSelection)]) -> String {
    let mut out = String::from("\nSelection reasons (as `kepler probe` would show them):\n\n");
    for (family, sel) in sels.iter().take(2) {
        out.push_str(&format!("- {family}: {}\n", sel.reason));
    }
    out
}

/// Measured vs predicted means at idle and at the busiest rows: where the error comes from.
fn bands(rows: &[Row], spec: &MachineSpec) -> Result<String> {
    let rapl = select_builtin(spec, BuiltinFamily::Rapl)?;
    let platform = select_builtin(spec, BuiltinFamily::Platform)?;
    let mut out = String::from(
        "\nMeans by load (built-in as selected):\n\n| rows | n | mean busy CPU (ms/s) | package \
         measured / predicted (W) | dram measured / predicted (W) | platform measured / \
         predicted (W) |\n|---|---|---|---|---|---|\n",
    );
    let bands: [(&str, f64, f64); 3] = [
        ("idle (< 1 000 ms/s)", 0.0, 1000.0),
        ("middle (1 000 – 20 000)", 1000.0, 20_000.0),
        ("busy (≥ 20 000)", 20_000.0, f64::INFINITY),
    ];
    for (label, lo, hi) in bands {
        let sel: Vec<&Row> = rows
            .iter()
            .filter(|r| r.cpu_ms >= lo && r.cpu_ms < hi)
            .collect();
        if sel.is_empty() {
            continue;
        }
        let n = sel.len() as f64;
        let mut measured: BTreeMap<&str, f64> = BTreeMap::new();
        let mut predicted: BTreeMap<String, f64> = BTreeMap::new();
        for r in &sel {
            for (k, v) in &r.watts {
                *measured.entry(k).or_default() += v / n;
            }
            let input = [(Feature::BpfCpuTimeMs, r.cpu_ms)];
            for model in [&rapl.predictor, &platform.predictor] {
                for (k, v) in model.predict(&input)? {
                    *predicted.entry(k).or_default() += v / n;
                }
            }
        }
        let cpu = sel.iter().map(|r| r.cpu_ms).sum::<f64>() / n;
        let pair = |c: &str| {
            format!(
                "{:.1} / {:.1}",
                measured.get(c).copied().unwrap_or(f64::NAN),
                predicted.get(c).copied().unwrap_or(f64::NAN)
            )
        };
        out.push_str(&format!(
            "| {label} | {} | {cpu:.0} | {} | {} | {} |\n",
            sel.len(),
            pair("package"),
            pair("dram"),
            pair("platform")
        ));
    }
    Ok(out)
}

/// How much the unknown spec matters: the fallback under other assumptions.
fn sensitivity(rows: &[Row]) -> Result<String> {
    let mut out = String::from(
        "\nSensitivity of the fallback to the assumed spec (MAE / MAPE):\n\n| logical CPUs | \
         memory (GB) | package | dram | platform |\n|---|---|---|---|---|\n",
    );
    let cases: [(u32, f64); 7] = [
        (32, 0.0),
        (32, 64.0),
        (32, 128.0),
        (32, 256.0),
        (32, 512.0),
        (40, 0.0),
        (48, 0.0),
    ];
    for (cores, memory) in cases {
        let spec = assumed_spec(cores, memory);
        let mut scores = score(
            &*builtin_fallback(&spec, BuiltinFamily::Rapl)?.predictor,
            rows,
        )?;
        scores.extend(score(
            &*builtin_fallback(&spec, BuiltinFamily::Platform)?.predictor,
            rows,
        )?);
        let cell = |c: &str| {
            scores.get(c).map_or("n/a".into(), |s| {
                format!("{:.1} W / {:.1} %", s.mae, s.mape)
            })
        };
        let mem = if memory > 0.0 {
            format!("{memory:.0}")
        } else {
            "unknown".into()
        };
        out.push_str(&format!(
            "| {cores} | {mem} | {} | {} | {} |\n",
            cell("package"),
            cell("dram"),
            cell("platform")
        ));
    }
    Ok(out)
}

//! The counter built-in: a `package` line on cycles, instructions and cache misses, trained
//! with the model server's own trainer (NNLS, AbsPower, CounterOnly, seed 42, 20 % held
//! back) on the one public RAPL run that recorded hardware counters (nx12), and scored on
//! the held-back rows as the agent would run it (`kepler_models::builtin::with_counters_in`
//! over the busy-time fallback of nx12's assumed spec).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use kepler_models::builtin::{
    fallback_in, round_sig, rounded_weights, with_counters_in, BuiltinError, BuiltinFamily,
    BuiltinIndex, BuiltinSelection, CounterIndex, StatedError, COUNTER_MODEL_PATH,
};
use kepler_models::dataset::Dataset;
use kepler_models::train::{train_all, FeatureGroup, OutputType, TrainOptions, TrainerKind};
use kepler_models::{Feature, Predictor};

use crate::evaluate;

/// nx12's RAPL file, with counters.
const FILE: &str = "preprocess_abs_default_rapl_Basic.csv";
const SEED: u64 = 42;
const TEST_FRACTION: f64 = 0.2;

/// MAE (W) and MAPE (%) of one component.
pub type Score = (f64, f64);

/// The trained model file's text and its index section.
/// Logs each component's counter-model error next to the busy-time model's on the same rows.
pub fn log_comparison(rows: &[(String, Score, Score)], what: &str) {
    for (component, counter, busy) in rows {
        tracing::info!(
            component = %component,
            counter_mae_w = format!("{:.2}", counter.0),
            counter_mape = format!("{:.1}", counter.1),
            busy_time_mae_w = format!("{:.2}", busy.0),
            busy_time_mape = format!("{:.1}", busy.1),
            "{what}"
        );
    }
}

pub struct Trained {
    pub path: PathBuf,
    pub text: String,
    pub index: CounterIndex,
    /// (component, counter model MAE W / MAPE %, busy-time fallback MAE W / MAPE %) on the
    /// same held-back rows, for the log and the docs.
    pub comparison: Vec<(String, Score, Score)>,
}

/// MAE (W) and MAPE (%, over samples of at least 1 W, as the trainer counts it).
fn score(points: &[(f64, f64)]) -> Score {
    let n = points.len().max(1) as f64;
    let mae = points.iter().map(|(m, p)| (p - m).abs()).sum::<f64>() / n;
    let big: Vec<&(f64, f64)> = points.iter().filter(|(m, _)| *m >= 1.0).collect();
    let mape =
        100.0 * big.iter().map(|(m, p)| (p - m).abs() / m).sum::<f64>() / big.len().max(1) as f64;
    (mae, mape)
}

/// Per component, (measured, predicted) on `rows` of `data`.
fn points(
    model: &dyn Predictor,
    data: &Dataset,
    rows: &[usize],
) -> Result<BTreeMap<String, Vec<(f64, f64)>>> {
    let mut out: BTreeMap<String, Vec<(f64, f64)>> = BTreeMap::new();
    for &i in rows {
        let input: Vec<(Feature, f64)> = data
            .features
            .iter()
            .filter_map(|(f, col)| col.get(i).map(|v| (*f, *v)))
            .collect();
        for (component, watts) in model.predict(&input)? {
            let Some(measured) = data
                .power
                .iter()
                .find(|(c, _)| *c == component)
                .and_then(|(_, col)| col.get(i))
            else {
                continue;
            };
            out.entry(component).or_default().push((*measured, watts));
        }
    }
    Ok(out)
}

/// Rows `range` of `data`, as a dataset of their own.
fn rows(data: &Dataset, range: std::ops::Range<usize>) -> Dataset {
    let cut = |col: &Vec<f64>| col.get(range.clone()).unwrap_or_default().to_vec();
    Dataset {
        timestamps: cut(&data.timestamps),
        features: data.features.iter().map(|(f, c)| (*f, cut(c))).collect(),
        power: data
            .power
            .iter()
            .map(|(n, c)| (n.clone(), cut(c)))
            .collect(),
        spec: data.spec.clone(),
        skipped_rows: 0,
    }
}

/// The counter model trained on the first 80 % of the run in time and scored on the last
/// 20 % (a part of the sweep it has not seen), with the busy-time fallback on the
/// same rows: a harder test than the random split, which keeps neighbours of every test row.
pub fn later_rows(
    data: &Dataset,
    opts: &TrainOptions,
    counters: &CounterIndex,
    base: &dyn Fn() -> Result<BuiltinSelection, BuiltinError>,
) -> Result<Vec<(String, Score, Score)>> {
    let cut = data.len() * 4 / 5;
    let report = train_all(&rows(data, 0..cut), opts)?;
    let model = report
        .models
        .iter()
        .find(|m| m.feature_group == FeatureGroup::CounterOnly)
        .context("no counter model trained on the first rows")?;
    let text = rounded_weights(std::str::from_utf8(&model.bytes)?)?;
    let features = [
        Feature::BpfCpuTimeMs,
        Feature::CpuCycles,
        Feature::CpuInstructions,
        Feature::CacheMiss,
    ];
    let shipped = with_counters_in(counters, &text, base()?, BuiltinFamily::Rapl, &features)?;
    let test: Vec<usize> = (cut..data.len()).collect();
    let with = points(&*shipped.predictor, data, &test)?;
    let without = points(&*base()?.predictor, data, &test)?;
    Ok(with
        .iter()
        .map(|(c, p)| {
            let busy = without.get(c).map_or((f64::NAN, f64::NAN), |b| score(b));
            (c.clone(), score(p), busy)
        })
        .collect())
}

pub fn train(data_dir: &Path, index: &BuiltinIndex) -> Result<Trained> {
    let path = data_dir.join(evaluate::NX12).join(FILE);
    let data =
        Dataset::read_csv_file(&path).with_context(|| format!("reading {}", path.display()))?;
    let opts = TrainOptions {
        seed: SEED,
        test_fraction: TEST_FRACTION,
        trainers: vec![TrainerKind::Nnls],
        output_types: vec![OutputType::AbsPower],
        feature_groups: Some(vec![FeatureGroup::CounterOnly]),
        ..TrainOptions::default()
    };
    let report = train_all(&data, &opts)?;
    let model = report
        .models
        .iter()
        .find(|m| m.feature_group == FeatureGroup::CounterOnly)
        .context("nx12 has no hardware counters to train on")?;
    let text = rounded_weights(std::str::from_utf8(&model.bytes)?)?;
    let trainer = model.trainer.trainer().name().to_string();

    let spec = evaluate::assumed_spec(evaluate::ASSUMED_CORES, 0.0);
    let base = || fallback_in(index, &spec, BuiltinFamily::Rapl);
    let reference_idle_w: BTreeMap<String, f64> = base()?
        .predictor
        .predict(&[(Feature::BpfCpuTimeMs, 0.0)])?
        .into_iter()
        .map(|(c, w)| (c, round_sig(w)))
        .collect();
    let withheld = BTreeMap::from([(
        "dram".to_string(),
        "a counter line's DRAM baseline is the training machine's own memory (nx12's size is \
         unpublished), so it does not carry over to another host"
            .to_string(),
    )]);
    let mut counters = CounterIndex {
        model: COUNTER_MODEL_PATH.to_string(),
        trainer,
        data: vec![
            format!(
                "{}/{FILE} (kepler-model-db v0.6, Apache-2.0; {} rows, 3 s apart)",
                evaluate::NX12,
                data.len()
            ),
            format!(
                "kepler_models::train NNLS, AbsPower, CounterOnly; seed {SEED}, {} rows trained, \
                 {} held back at random",
                report.train_rows, report.test_rows
            ),
        ],
        reference_idle_w,
        expected_error: BTreeMap::new(),
        withheld,
    };
    let features = [
        Feature::BpfCpuTimeMs,
        Feature::CpuCycles,
        Feature::CpuInstructions,
        Feature::CacheMiss,
    ];
    let shipped = with_counters_in(&counters, &text, base()?, BuiltinFamily::Rapl, &features)?;
    let with = points(&*shipped.predictor, &data, &report.test_indices)?;
    let without = points(&*base()?.predictor, &data, &report.test_indices)?;
    let mut comparison = Vec::new();
    for (component, pts) in &with {
        let counter = score(pts);
        let busy = without
            .get(component)
            .map_or((f64::NAN, f64::NAN), |p| score(p));
        comparison.push((component.clone(), counter, busy));
        if shipped.withheld.contains_key(component) {
            continue;
        }
        counters.expected_error.insert(
            component.clone(),
            StatedError {
                mae_w: round_sig((counter.0 * 10.0).round() / 10.0),
                mape: round_sig((counter.1 * 10.0).round() / 1000.0),
                basis: format!(
                    "the counter built-in on nx12's {} held-back rows (random, seed {SEED}: rows \
                     3 s from a training row, so optimistic), busy-time model the fallback for \
                     {} logical CPUs; no other public run with counters to test it on",
                    report.test_rows,
                    evaluate::ASSUMED_CORES
                ),
            },
        );
    }
    log_comparison(
        &later_rows(&data, &opts, &counters, &base)?,
        "counter built-in trained on nx12's first 80 % in time, scored on the last 20 %",
    );
    Ok(Trained {
        path: PathBuf::from(COUNTER_MODEL_PATH),
        text,
        index: counters,
        comparison,
    })
}

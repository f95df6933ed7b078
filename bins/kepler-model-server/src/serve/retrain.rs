//! `serve --retrain PERIOD`: every period, train per machine type from the metered agents a
//! Prometheus scrapes, and publish a machine type's new pipeline only when it beats the one
//! served now on held-back data.
//!
//! - Machine types: the agents whose zones are measured (`kepler_node_cpu_zone_info{source=
//!   "measured"}`; estimated zones would teach a model its own estimates), grouped by CPU
//!   model and logical CPU count from `kepler_node_cpu_info`.
//! - Data: `train --prometheus`'s range queries ([`crate::train_cmd::prom`]) over those
//!   agents' `instance`s, for `--retrain.since`.
//! - Held back: the most recent fifth of the rows. Neither the new models (trained on the
//!   rest) nor the served ones have seen it; a pipeline's score is its best AbsPower model's
//!   worst-component MAE on it.
//! - Published as pipeline `retrained-<cpu>-<n>cpu` (node type 0, that machine's spec), by
//!   `train`'s atomic directory swap, then the index is rescanned; agents asking
//!   `POST /model` for that machine get it at their next refresh.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kepler_models::dataset::{Dataset, MachineSpec};
use kepler_models::train::{train_all, OutputType, TrainOptions};
use kepler_models::Predictor;

use super::metrics::RetrainOutcome;
use super::routes::AppState;
use crate::train_cmd::{keep_source_components, prom, write, Source};

/// Share of the most recent rows held back to compare the new and the served models.
const HELD_BACK: f64 = 0.2;

#[derive(Debug, Clone)]
pub struct RetrainConfig {
    pub period: Duration,
    pub prometheus: String,
    pub since: Duration,
    pub step: Duration,
    pub timeout: Duration,
    pub source: Source,
}

/// Runs forever: a retrain every period, the first one period after start-up.
pub async fn run_loop(state: Arc<AppState>, cfg: RetrainConfig) {
    let start = tokio::time::Instant::now() + cfg.period;
    let mut ticker = tokio::time::interval_at(start, cfg.period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        let (s, c) = (state.clone(), cfg.clone());
        match tokio::task::spawn_blocking(move || retrain_all(&s, &c)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                state.metrics.retrain(RetrainOutcome::Failed);
                tracing::error!(error = %format!("{e:#}"), "retraining failed; the served models stay");
            }
            Err(e) => tracing::error!(error = %e, "retraining task failed"),
        }
    }
}

/// One machine type of the fleet.
#[derive(Debug, Clone, PartialEq)]
struct MachineType {
    spec: MachineSpec,
    instances: Vec<String>,
}

fn retrain_all(state: &AppState, cfg: &RetrainConfig) -> Result<()> {
    let types = machine_types(cfg)?;
    if types.is_empty() {
        bail!(
            "no metered agent with ebpf.exportFeatures in Prometheus {}",
            cfg.prometheus
        );
    }
    for t in types {
        let pipeline = pipeline_name(&t.spec);
        match retrain_one(state, cfg, &t, &pipeline) {
            Ok(outcome) => state.metrics.retrain(outcome),
            Err(e) => {
                state.metrics.retrain(RetrainOutcome::Failed);
                tracing::warn!(%pipeline, error = %format!("{e:#}"), "retraining this machine type failed");
            }
        }
    }
    Ok(())
}

fn retrain_one(
    state: &AppState,
    cfg: &RetrainConfig,
    t: &MachineType,
    pipeline: &str,
) -> Result<RetrainOutcome> {
    let selector = format!(
        "{{instance=~\"{}\"}}",
        t.instances
            .iter()
            .map(|i| regex_escape(i))
            .collect::<Vec<_>>()
            .join("|")
    );
    let range = prom::Range::from_args(Some(cfg.since), None, None)?;
    let mut data =
        prom::query_live_selected(&cfg.prometheus, &selector, &range, cfg.step, cfg.timeout)?;
    keep_source_components(&mut data, cfg.source)?;
    data.spec = Some(t.spec.clone());
    let (train, held) = split_recent(&data, HELD_BACK);
    let report = train_all(&train, &TrainOptions::default()).context("training")?;
    let new_score = report
        .models
        .iter()
        .filter(|m| m.output_type == OutputType::AbsPower)
        .filter_map(|m| score(&m.bytes, Some(&m.file_name()), &held))
        .fold(None, min);
    let Some(new_score) = new_score else {
        bail!("no new AbsPower model predicts the held-back rows");
    };
    let current = current_score(&state.model_dir.join(pipeline), cfg.source, &held);
    if let Some(cur) = current.filter(|&c| c <= new_score) {
        tracing::info!(%pipeline, new_mae_w = new_score, current_mae_w = cur, rows = data.len(), "retrained models do not beat the served ones; kept");
        return Ok(RetrainOutcome::Kept);
    }
    {
        let _guard = state.write_lock.lock().unwrap_or_else(|p| p.into_inner());
        write::write_pipeline(&state.model_dir, pipeline, cfg.source, &report)?;
        state.rescan_locked()?;
    }
    tracing::info!(%pipeline, new_mae_w = new_score, current_mae_w = ?current, rows = data.len(), "retrained models published");
    Ok(RetrainOutcome::Published)
}

fn min(a: Option<f64>, b: f64) -> Option<f64> {
    Some(a.map_or(b, |a| a.min(b)))
}

/// The served pipeline's score: its best AbsPower model's on `held`; `None` when it has none.
fn current_score(dir: &Path, source: Source, held: &Dataset) -> Option<f64> {
    let abs = dir.join(source.as_str()).join("AbsPower");
    let groups = std::fs::read_dir(&abs).ok()?;
    let mut best = None;
    for group in groups.flatten() {
        let Ok(files) = std::fs::read_dir(group.path()) else {
            continue;
        };
        for f in files.flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if let Ok(bytes) = std::fs::read(f.path()) {
                if let Some(s) = score(&bytes, Some(&name), held) {
                    best = min(best, s);
                }
            }
        }
    }
    best
}

/// A model's worst-component MAE (W) over `held`; `None` when it does not load or lacks a
/// component or feature of the data.
fn score(bytes: &[u8], file_name: Option<&str>, held: &Dataset) -> Option<f64> {
    let model = kepler_models::load_model_bytes(bytes, file_name, None).ok()?;
    mae(model.as_ref(), held)
}

struct Row<'a>(&'a Dataset, usize);

impl kepler_models::FeatureLookup for Row<'_> {
    fn get_feature(&self, f: kepler_models::Feature) -> Option<f64> {
        self.0.feature(f).and_then(|c| c.get(self.1)).copied()
    }
}

fn mae(model: &dyn Predictor, held: &Dataset) -> Option<f64> {
    if held.is_empty() {
        return None;
    }
    let mut errors: BTreeMap<&str, f64> = BTreeMap::new();
    for i in 0..held.len() {
        let predicted = model.predict(&Row(held, i)).ok()?;
        for (component, measured) in &held.power {
            let p = predicted.iter().find(|(c, _)| c == component)?.1;
            *errors.entry(component.as_str()).or_default() += (p - measured.get(i)?).abs();
        }
    }
    // The worst component decides, as in `train`'s acceptance.
    errors
        .values()
        .map(|e| e / held.len() as f64)
        .reduce(f64::max)
}

/// Splits off the most recent `fraction` of the rows (by timestamp).
fn split_recent(data: &Dataset, fraction: f64) -> (Dataset, Dataset) {
    let mut order: Vec<usize> = (0..data.len()).collect();
    let ts = |i: usize| data.timestamps.get(i).copied().unwrap_or(0.0);
    order.sort_by(|&a, &b| ts(a).total_cmp(&ts(b)));
    let held_n = ((data.len() as f64) * fraction).ceil() as usize;
    let cut = data.len().saturating_sub(held_n);
    let (train_rows, held_rows) = order.split_at(cut);
    (subset(data, train_rows), subset(data, held_rows))
}

fn subset(data: &Dataset, rows: &[usize]) -> Dataset {
    let pick = |col: &Vec<f64>| rows.iter().filter_map(|&i| col.get(i).copied()).collect();
    Dataset {
        timestamps: pick(&data.timestamps),
        features: data.features.iter().map(|(f, c)| (*f, pick(c))).collect(),
        power: data
            .power
            .iter()
            .map(|(n, c)| (n.clone(), pick(c)))
            .collect(),
        spec: data.spec.clone(),
        skipped_rows: 0,
    }
}

/// `retrained-<processor>-<n>cpu`: a directory name from a machine spec.
fn pipeline_name(spec: &MachineSpec) -> String {
    let cpu: String = spec
        .processor
        .as_deref()
        .unwrap_or("unknown")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() {
                c.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect();
    format!("retrained-{cpu}-{}cpu", spec.cores.unwrap_or(0))
}

fn regex_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        if "\\.+*?()|[]{}^$".contains(c) {
            out.push('\\');
        }
        if c == '"' {
            out.push('\\');
        }
        out.push(c);
    }
    // Inside a PromQL string a backslash is itself escaped.
    out.replace('\\', "\\\\")
}

/// The metered agents, grouped by machine type, from two instant queries.
fn machine_types(cfg: &RetrainConfig) -> Result<Vec<MachineType>> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(cfg.timeout))
        .build()
        .into();
    let query = |q: &str| -> Result<Vec<BTreeMap<String, String>>> {
        let endpoint = format!("{}/api/v1/query", cfg.prometheus.trim_end_matches('/'));
        let body: serde_json::Value = agent
            .get(&endpoint)
            .query("query", q)
            .call()
            .with_context(|| format!("Prometheus {} query {q}", cfg.prometheus))?
            .body_mut()
            .read_json()
            .with_context(|| {
                format!("Prometheus {} query {q}: not an API answer", cfg.prometheus)
            })?;
        let result = body["data"]["result"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        Ok(result
            .iter()
            .filter_map(|r| serde_json::from_value(r["metric"].clone()).ok())
            .collect())
    };
    let measured: std::collections::BTreeSet<String> = query(
        "count by (instance) (kepler_node_cpu_zone_info{source=\"measured\"}) \
         and on (instance) count by (instance) (kepler_node_model_feature_rate)",
    )?
    .into_iter()
    .filter_map(|m| m.get("instance").cloned())
    .collect();
    let cpus = query("kepler_node_cpu_info")?;
    // instance → (CPU model, logical CPUs).
    let mut per_instance: BTreeMap<String, (String, u32)> = BTreeMap::new();
    for m in cpus {
        let (Some(instance), Some(model)) = (m.get("instance"), m.get("model_name")) else {
            continue;
        };
        if !measured.contains(instance) {
            continue;
        }
        let e = per_instance
            .entry(instance.clone())
            .or_insert((model.clone(), 0));
        e.1 += 1;
    }
    let mut types: BTreeMap<(String, u32), Vec<String>> = BTreeMap::new();
    for (instance, key) in per_instance {
        types.entry(key).or_default().push(instance);
    }
    Ok(types
        .into_iter()
        .map(|((model, cores), instances)| MachineType {
            spec: MachineSpec {
                processor: Some(kepler_models::builtin::normalize_processor(&model)),
                cores: Some(cores),
                ..MachineSpec::default()
            },
            instances,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kepler_models::Feature;

    fn data(n: usize) -> Dataset {
        let cpu: Vec<f64> = (0..n).map(|i| (i * 100 % 2000) as f64).collect();
        let package: Vec<f64> = cpu.iter().map(|c| 10.0 + c / 50.0).collect();
        Dataset {
            timestamps: (0..n).map(|i| i as f64).collect(),
            features: vec![(Feature::BpfCpuTimeMs, cpu)],
            power: vec![("package".into(), package)],
            spec: None,
            skipped_rows: 0,
        }
    }

    fn linear(bias: f64, weight: f64) -> Vec<u8> {
        serde_json::to_vec(&serde_json::json!({"package": {"All_Weights": {
            "Bias_Weight": bias, "Categorical_Variables": {},
            "Numerical_Variables": {"bpf_cpu_time_ms": {"scale": 1.0, "weight": weight}}}}}))
        .unwrap()
    }

    #[test]
    fn held_back_rows_are_the_most_recent() {
        let (train, held) = split_recent(&data(50), 0.2);
        assert_eq!((train.len(), held.len()), (40, 10));
        assert!(held.timestamps.iter().all(|&t| t >= 40.0));
    }

    #[test]
    fn the_better_model_scores_lower() {
        let held = data(20);
        let exact = score(
            &linear(10.0, 0.02),
            Some("SGDRegressorTrainer_0.json"),
            &held,
        )
        .unwrap();
        let off = score(
            &linear(15.0, 0.02),
            Some("SGDRegressorTrainer_0.json"),
            &held,
        )
        .unwrap();
        assert!(exact < 1e-9, "{exact}");
        assert!((off - 5.0).abs() < 1e-9, "{off}");
        // A model without the data's component cannot be scored.
        let dram = serde_json::to_vec(&serde_json::json!({"dram": {"All_Weights": {
            "Bias_Weight": 1.0, "Categorical_Variables": {}, "Numerical_Variables": {}}}}))
        .unwrap();
        assert_eq!(
            score(&dram, Some("SGDRegressorTrainer_0.json"), &held),
            None
        );
    }

    #[test]
    fn pipeline_names_and_selectors_are_safe() {
        let spec = MachineSpec {
            processor: Some("amd_epyc".into()),
            cores: Some(2),
            ..MachineSpec::default()
        };
        assert_eq!(pipeline_name(&spec), "retrained-amd_epyc-2cpu");
        assert_eq!(regex_escape("10.0.0.1:9102"), "10\\\\.0\\\\.0\\\\.1:9102");
    }
}

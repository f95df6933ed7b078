//! Training data from Prometheus: our agents' node energy counters
//! (`kepler_node_cpu_joules_total{zone}`) and the model features they export with
//! `ebpf.exportFeatures` (`kepler_node_model_feature_rate{feature}`), read from a live
//! server's range queries or from a dump of them.
//!
//! Dump format: the JSON body of `/api/v1/query_range` (`{"status": "success", "data":
//! {"resultType": "matrix", "result": [...]}}`), or a JSON array of such bodies, for the
//! raw series (their `__name__` label tells them apart), e.g. the query
//! `{__name__=~"kepler_node_cpu_joules_total|kepler_node_model_feature_rate"}`.
//!
//! Each node (`instance` label) contributes one row per step where its power and every
//! feature are known: power per zone is the counter's increase over the step divided by
//! the step (a counter reset drops that step), summed over the zone's series (sockets);
//! features are the gauge's value at the step's end. Nodes of one machine type make one
//! dataset: that is how a fleet of metered nodes becomes training data.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use kepler_models::dataset::{Dataset, MAX_DATASET_BYTES};
use kepler_models::Feature;
use serde::Deserialize;

pub const ENERGY: &str = "kepler_node_cpu_joules_total";
pub const FEATURE: &str = "kepler_node_model_feature_rate";
/// Prometheus refuses range queries of more than 11 000 points per series.
const MAX_POINTS: f64 = 10_000.0;

#[derive(Deserialize)]
struct Response {
    status: String,
    #[serde(default)]
    data: Option<Data>,
    #[serde(default)]
    error: Option<String>,
}

#[derive(Deserialize)]
struct Data {
    #[serde(rename = "resultType")]
    result_type: String,
    result: Vec<Series>,
}

#[derive(Deserialize)]
struct Series {
    metric: BTreeMap<String, String>,
    #[serde(default)]
    values: Vec<(f64, String)>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum Dump {
    One(Response),
    Many(Vec<Response>),
}

/// A query time range, Unix seconds.
pub struct Range {
    pub start: f64,
    pub end: f64,
}

fn parse_time(s: &str) -> Result<f64> {
    if let Ok(t) = s.trim().parse::<f64>() {
        return Ok(t);
    }
    let t = humantime::parse_rfc3339_weak(s.trim())
        .with_context(|| format!("{s:?} is neither Unix seconds nor an RFC 3339 time"))?;
    Ok(t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64()))
}

impl Range {
    pub fn from_args(
        since: Option<Duration>,
        start: Option<&str>,
        end: Option<&str>,
    ) -> Result<Range> {
        let r = match (since, start, end) {
            (Some(since), None, None) => {
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0.0, |d| d.as_secs_f64());
                Range {
                    start: now - since.as_secs_f64(),
                    end: now,
                }
            }
            (None, Some(s), Some(e)) => Range {
                start: parse_time(s)?,
                end: parse_time(e)?,
            },
            _ => bail!("--prometheus needs --since DURATION or --start and --end"),
        };
        if !r.start.is_finite() || !r.end.is_finite() || r.start >= r.end {
            bail!(
                "the time range is empty (start {} is not before end {})",
                r.start,
                r.end
            );
        }
        Ok(r)
    }
}

fn series_of(resp: Response, what: &str) -> Result<Vec<Series>> {
    if resp.status != "success" {
        bail!(
            "{what}: Prometheus answered {}: {}",
            resp.status,
            resp.error.unwrap_or_default()
        );
    }
    let data = resp
        .data
        .with_context(|| format!("{what}: no data in the answer"))?;
    if data.result_type != "matrix" {
        bail!(
            "{what}: resultType {} (a range query's matrix is needed)",
            data.result_type
        );
    }
    Ok(data.result)
}

/// Reads a dump of range-query answers.
pub fn read_dump(path: &Path) -> Result<Dataset> {
    let size = std::fs::metadata(path)
        .with_context(|| format!("reading {}", path.display()))?
        .len();
    if size > MAX_DATASET_BYTES {
        bail!("{} is too large ({size} bytes)", path.display());
    }
    let bytes = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let what = path.display().to_string();
    let dump: Dump = serde_json::from_slice(&bytes).with_context(|| {
        format!("{what} is not a Prometheus query_range answer (or an array of them)")
    })?;
    let responses = match dump {
        Dump::One(r) => vec![r],
        Dump::Many(rs) => rs,
    };
    let mut all = Vec::new();
    for r in responses {
        all.extend(series_of(r, &what)?);
    }
    to_dataset(all, &what)
}

/// Queries a live Prometheus over `range`, in chunks below its points limit.
pub fn query_live(url: &str, range: &Range, step: Duration, timeout: Duration) -> Result<Dataset> {
    query_live_selected(url, "", range, step, timeout)
}

/// [`query_live`] over the series `selector` (`{instance=~"a|b"}`, or empty) picks: the
/// retrain loop trains each machine type from its own metered nodes.
pub fn query_live_selected(
    url: &str,
    selector: &str,
    range: &Range,
    step: Duration,
    timeout: Duration,
) -> Result<Dataset> {
    let step_s = step.as_secs_f64();
    if step_s < 1.0 {
        bail!("--step must be at least 1s");
    }
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_global(Some(timeout))
        .http_status_as_error(false)
        .build()
        .into();
    let endpoint = format!("{}/api/v1/query_range", url.trim_end_matches('/'));
    let mut all = Vec::new();
    for name in [ENERGY, FEATURE] {
        let query = format!("{name}{selector}");
        let query = query.as_str();
        let mut start = range.start;
        while start < range.end {
            let end = (start + step_s * MAX_POINTS).min(range.end);
            let what = format!("Prometheus {url} query {query}");
            let mut resp = agent
                .get(&endpoint)
                .query("query", query)
                .query("start", format!("{start:.3}"))
                .query("end", format!("{end:.3}"))
                .query("step", format!("{step_s}"))
                .call()
                .map_err(|e| match e {
                    ureq::Error::Timeout(_) => {
                        anyhow::anyhow!(
                            "{what}: no answer within {}",
                            humantime::format_duration(timeout)
                        )
                    }
                    other => anyhow::anyhow!("{what}: {other}"),
                })?;
            let status = resp.status();
            let body = resp
                .body_mut()
                .with_config()
                .limit(MAX_DATASET_BYTES)
                .read_to_vec()
                .with_context(|| format!("{what}: reading the answer"))?;
            let parsed: Response = serde_json::from_slice(&body)
                .with_context(|| format!("{what}: HTTP {status}, not a Prometheus API answer"))?;
            all.extend(series_of(parsed, &what)?);
            start = end + step_s;
        }
    }
    to_dataset(all, &format!("Prometheus {url}"))
}

/// Milliseconds: the row key (range-query timestamps are multiples of the step).
fn key(ts: f64) -> i64 {
    (ts * 1000.0).round() as i64
}

type Node = String;

fn to_dataset(series: Vec<Series>, what: &str) -> Result<Dataset> {
    // Chunks of one series (same labels) are merged before taking differences.
    let mut merged: BTreeMap<BTreeMap<String, String>, BTreeMap<i64, f64>> = BTreeMap::new();
    let mut bad_values = 0usize;
    for s in series {
        let entry = merged.entry(s.metric).or_default();
        for (ts, v) in s.values {
            match v.parse::<f64>() {
                Ok(v) if v.is_finite() && ts.is_finite() => {
                    entry.insert(key(ts), v);
                }
                _ => bad_values += 1,
            }
        }
    }
    if bad_values > 0 {
        tracing::warn!(
            input = what,
            count = bad_values,
            "samples with non-numeric or non-finite values skipped"
        );
    }
    let mut power: BTreeMap<(Node, String), BTreeMap<i64, f64>> = BTreeMap::new();
    let mut features: BTreeMap<(Node, Feature), BTreeMap<i64, f64>> = BTreeMap::new();
    let mut unknown = BTreeSet::new();
    for (labels, values) in merged {
        let node = labels
            .get("instance")
            .or_else(|| labels.get("node_name"))
            .cloned()
            .unwrap_or_default();
        match labels.get("__name__").map(String::as_str) {
            Some(ENERGY) => {
                let Some(zone) = labels.get("zone") else {
                    continue;
                };
                let dst = power.entry((node, zone.clone())).or_default();
                let pts: Vec<(&i64, &f64)> = values.iter().collect();
                for w in pts.windows(2) {
                    let [(t0, e0), (t1, e1)] = w else { continue };
                    let dt = (**t1 - **t0) as f64 / 1000.0;
                    if **e1 >= **e0 && dt > 0.0 {
                        *dst.entry(**t1).or_default() += (**e1 - **e0) / dt;
                    }
                }
            }
            Some(FEATURE) => {
                let Some(name) = labels.get("feature") else {
                    continue;
                };
                match name.parse::<Feature>() {
                    Ok(f) => {
                        features.entry((node, f)).or_default().extend(values);
                    }
                    Err(_) => {
                        unknown.insert(name.clone());
                    }
                }
            }
            _ => {}
        }
    }
    if !unknown.is_empty() {
        tracing::warn!(input = what, features = ?unknown, "unknown feature names skipped");
    }
    let nodes: BTreeSet<&Node> = power.keys().map(|(n, _)| n).collect();
    if nodes.is_empty() {
        bail!("{what}: no {ENERGY} series with a zone label (no power column)");
    }
    // Columns every node has.
    let components: Vec<String> = common(&nodes, power.keys());
    let feats: Vec<Feature> = {
        let mut f: Vec<Feature> = common(&nodes, features.keys());
        f.sort_by_key(|f| Feature::ALL.iter().position(|g| g == f));
        f
    };
    if feats.is_empty() {
        bail!("{what}: no {FEATURE} series common to every node (is ebpf.exportFeatures on?)");
    }
    let mut rows = Vec::new();
    for node in &nodes {
        let Some(first) = components.first() else {
            break;
        };
        let Some(times) = power.get(&((*node).clone(), first.clone())) else {
            continue;
        };
        for ts in times.keys() {
            let p: Option<Vec<f64>> = components
                .iter()
                .map(|c| {
                    power
                        .get(&((*node).clone(), c.clone()))
                        .and_then(|m| m.get(ts))
                        .copied()
                })
                .collect();
            let f: Option<Vec<f64>> = feats
                .iter()
                .map(|f| {
                    features
                        .get(&((*node).clone(), *f))
                        .and_then(|m| m.get(ts))
                        .copied()
                })
                .collect();
            if let (Some(p), Some(f)) = (p, f) {
                rows.push((*ts as f64 / 1000.0, f, p));
            }
        }
    }
    Ok(Dataset::from_rows(what, &feats, &components, rows)?)
}

/// The second key parts that every node has.
fn common<'a, T: Ord + Clone + 'a>(
    nodes: &BTreeSet<&Node>,
    keys: impl Iterator<Item = &'a (Node, T)>,
) -> Vec<T> {
    let mut by: BTreeMap<T, BTreeSet<&Node>> = BTreeMap::new();
    for (n, t) in keys {
        by.entry(t.clone()).or_default().insert(n);
    }
    by.into_iter()
        .filter(|(_, ns)| ns.len() == nodes.len() && nodes.iter().all(|n| ns.contains(n)))
        .map(|(t, _)| t)
        .collect()
}

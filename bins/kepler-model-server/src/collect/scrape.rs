//! One reading of a running agent's `/metrics`: its tick count, the node's model features
//! (`kepler_node_model_feature_rate`, exported with `ebpf.exportFeatures`) and the power of
//! each zone over the same interval (`kepler_node_cpu_watts`, `kepler_platform_watts`).
//! Features and power come from one snapshot, so they describe the same interval.

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};
use kepler_models::Feature;

/// Largest `/metrics` answer read; an agent with thousands of processes stays far below.
const MAX_METRICS_BYTES: u64 = 64 << 20;

/// What one scrape found.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Reading {
    /// `kepler_agent_ticks_total`: tells a new snapshot from one already recorded.
    pub tick: u64,
    pub features: HashMap<Feature, f64>,
    /// Watts per component, summed over the zones of that name (one per socket).
    pub power: BTreeMap<String, f64>,
}

pub struct Agent {
    url: String,
    http: ureq::Agent,
}

impl Agent {
    /// `base`: the agent's address (`http://127.0.0.1:28282`); `/metrics` is appended unless
    /// the URL already names a path.
    pub fn new(base: &str, timeout: Duration) -> Agent {
        let trimmed = base.trim_end_matches('/');
        let has_path = trimmed
            .split_once("://")
            .is_some_and(|(_, rest)| rest.contains('/'));
        let url = if has_path {
            trimmed.to_string()
        } else {
            format!("{trimmed}/metrics")
        };
        let http = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .build()
            .into();
        Agent { url, http }
    }

    pub fn url(&self) -> &str {
        &self.url
    }

    pub fn read(&self) -> Result<Reading> {
        let mut response = self
            .http
            .get(&self.url)
            .call()
            .with_context(|| format!("scraping {}", self.url))?;
        let text = response
            .body_mut()
            .with_config()
            .limit(MAX_METRICS_BYTES)
            .read_to_string()
            .with_context(|| format!("reading {}", self.url))?;
        parse(&text)
    }
}

/// Parses the exposition text. Lines of other families are skipped unparsed.
pub fn parse(text: &str) -> Result<Reading> {
    let mut r = Reading::default();
    let mut saw_tick = false;
    for line in text.lines() {
        let Some((name, _)) = line.split_once(['{', ' ']) else {
            continue;
        };
        if !matches!(
            name,
            "kepler_agent_ticks_total"
                | "kepler_node_model_feature_rate"
                | "kepler_node_cpu_watts"
                | "kepler_platform_watts"
        ) {
            continue;
        }
        let (labels, value) =
            split_sample(line, name).with_context(|| format!("malformed sample line {line:?}"))?;
        let label = |key: &str| {
            labels
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, v)| v.as_str())
        };
        match name {
            "kepler_agent_ticks_total" => {
                // Counters are integers, written without a fraction.
                r.tick = value as u64;
                saw_tick = true;
            }
            "kepler_node_model_feature_rate" => {
                let Some(f) = label("feature") else { continue };
                // A feature this build does not model is skipped, not an error: the agent may
                // be newer.
                if let Ok(feature) = f.parse::<Feature>() {
                    r.features.insert(feature, value);
                }
            }
            "kepler_node_cpu_watts" => {
                let Some(zone) = label("zone").filter(|z| is_component(z)) else {
                    continue;
                };
                *r.power.entry(zone.to_string()).or_default() += value;
            }
            _ => {
                // kepler_platform_watts: one series per platform meter source.
                *r.power.entry("platform".to_string()).or_default() += value;
            }
        }
    }
    if !saw_tick {
        bail!("no kepler_agent_ticks_total: is this a kepler agent's /metrics?");
    }
    Ok(r)
}

/// `package`, `dram`, `psys`: the names the dataset accepts as `<component>_power`.
fn is_component(z: &str) -> bool {
    !z.is_empty()
        && z.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// Splits `name{a="x",b="y"} 1.5` (`line` starts with `name`) into labels and value.
fn split_sample(line: &str, name: &str) -> Result<(Vec<(String, String)>, f64)> {
    let after = line.get(name.len()..).unwrap_or_default();
    let (labels, value_part) = match after.strip_prefix('{') {
        Some(inner) => {
            let (labels, end) = parse_labels(inner)?;
            (labels, inner.get(end..).unwrap_or_default())
        }
        None => (Vec::new(), after),
    };
    let value_text = value_part
        .split_whitespace()
        .next()
        .ok_or_else(|| anyhow!("no value"))?;
    let value = match value_text {
        "NaN" => f64::NAN,
        "+Inf" => f64::INFINITY,
        "-Inf" => f64::NEG_INFINITY,
        v => v.parse().with_context(|| format!("value {v:?}"))?,
    };
    Ok((labels, value))
}

/// Parses `a="x",b="y"}`; returns the labels and the offset just past the `}`.
fn parse_labels(s: &str) -> Result<(Vec<(String, String)>, usize)> {
    let mut labels = Vec::new();
    let mut chars = s.char_indices().peekable();
    loop {
        while chars.next_if(|(_, c)| *c == ',' || *c == ' ').is_some() {}
        match chars.peek() {
            Some(&(i, '}')) => return Ok((labels, i + 1)),
            None => bail!("unterminated labels"),
            _ => {}
        }
        let mut key = String::new();
        for (_, c) in chars.by_ref() {
            if c == '=' {
                break;
            }
            key.push(c);
        }
        if chars.next().map(|(_, c)| c) != Some('"') {
            bail!("label {key} has no quoted value");
        }
        let mut value = String::new();
        let mut closed = false;
        while let Some((_, c)) = chars.next() {
            match c {
                '\\' => match chars.next().map(|(_, c)| c) {
                    Some('n') => value.push('\n'),
                    Some(other) => value.push(other),
                    None => bail!("dangling escape"),
                },
                '"' => {
                    closed = true;
                    break;
                }
                c => value.push(c),
            }
        }
        if !closed {
            bail!("unterminated value of label {key}");
        }
        labels.push((key, value));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TEXT: &str = r#"# HELP kepler_agent_ticks_total Ticks
kepler_agent_ticks_total{node_name="vm"} 42
kepler_node_model_feature_rate{feature="bpf_cpu_time_ms",node_name="vm"} 1500.5
kepler_node_model_feature_rate{feature="some_future_feature",node_name="vm"} 3
kepler_node_cpu_watts{zone="package",path="/sys/class/powercap/intel-rapl:0",node_name="vm"} 30.5
kepler_node_cpu_watts{zone="package",path="/sys/class/powercap/intel-rapl:1",node_name="vm"} 20
kepler_node_cpu_watts{zone="dram",path="/x \"quoted\"",node_name="vm"} 5.25
kepler_node_cpu_joules_total{zone="package",path="/x",node_name="vm"} 100
kepler_platform_watts{source="acpi",node_name="vm"} 120
"#;

    #[test]
    fn reads_ticks_features_and_power_per_component() {
        let r = parse(TEXT).unwrap();
        assert_eq!(r.tick, 42);
        assert_eq!(r.features.len(), 1);
        assert_eq!(r.features[&Feature::BpfCpuTimeMs], 1500.5);
        assert_eq!(r.power["package"], 50.5);
        assert_eq!(r.power["dram"], 5.25);
        assert_eq!(r.power["platform"], 120.0);
    }

    #[test]
    fn not_an_agent_and_malformed_lines_are_errors() {
        assert!(parse("up 1\n").is_err());
        let bad = "kepler_agent_ticks_total 1\nkepler_node_cpu_watts{zone=\"package\" 3\n";
        assert!(parse(bad).is_err());
        let bad = "kepler_agent_ticks_total 1\nkepler_node_cpu_watts{zone=\"package\"} x\n";
        assert!(parse(bad).is_err());
    }

    #[test]
    fn metrics_path_is_added_to_a_bare_address() {
        let t = Duration::from_secs(1);
        assert_eq!(Agent::new("http://h:1", t).url(), "http://h:1/metrics");
        assert_eq!(Agent::new("http://h:1/", t).url(), "http://h:1/metrics");
        assert_eq!(
            Agent::new("http://h:1/x/metrics", t).url(),
            "http://h:1/x/metrics"
        );
    }
}

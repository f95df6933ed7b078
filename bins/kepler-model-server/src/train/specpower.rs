//! Platform (ACPI-like wall power) models from SPECpower_ssj2008 results
//! (`ccf/data/SPECpower-full-results.csv`): one node type per CPU model, threads, sockets
//! and memory (per node), a straight line from the median active-idle to the median 100 %
//! watts. The file has only those two load levels, and nothing in it supports a curvature.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use kepler_models::builtin::{
    cpu_match_key, Affine, CurveParams, Fallback, FallbackCurve, FamilyIndex, NodeType,
    LINEAR_TRAINER,
};

use super::{processor_name, Skipped};
use kepler_models::fit::{mdape, median, round_digits, theil_sen};

pub const FILE: &str = "ccf/data/SPECpower-full-results.csv";

/// One result, per node (multi-node results divided by their node count).
struct Result1 {
    system: String,
    cpu: String,
    threads: u32,
    chips: u32,
    memory_gb: f64,
    mhz: Option<f64>,
    idle_w: f64,
    max_w: f64,
}

fn read_row(
    rec: &csv::StringRecord,
    col: &dyn Fn(&str) -> Option<usize>,
) -> Result<Result1, String> {
    let get = |name: &str| -> Result<&str, String> {
        col(name)
            .and_then(|i| rec.get(i))
            .map(str::trim)
            .ok_or_else(|| format!("no {name} column"))
    };
    let num = |name: &str| -> Result<f64, String> {
        let t = get(name)?;
        t.parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v > 0.0)
            .ok_or_else(|| format!("{name} is {t:?}"))
    };
    // One result has an empty node count (a single PowerEdge R7515): a result is one node
    // unless it says otherwise.
    let nodes = match get("Nodes")? {
        "" => 1.0,
        _ => num("Nodes")?,
    };
    let per_node = |name: &str| -> Result<f64, String> { Ok(num(name)? / nodes) };
    let whole = |name: &str| -> Result<u32, String> {
        let v = per_node(name)?;
        if v.fract() != 0.0 || v > f64::from(u32::MAX) {
            return Err(format!("{name} does not divide into {nodes} nodes"));
        }
        // Exact: integral and in range.
        Ok(v as u32)
    };
    let system = format!(
        "{} {} ({})",
        get("Hardware Vendor Test Sponsor")?,
        get("System Enclosure (if applicable)")?,
        get("Date Submitted")?
    );
    Ok(Result1 {
        system,
        cpu: get("CPU Description")?.to_string(),
        threads: whole("Total Threads")?,
        chips: whole("Chips")?,
        memory_gb: per_node("Total Memory (GB)")?,
        mhz: num("MHz").ok(),
        // "NC" (non-compliant) results have no watts and are skipped here.
        idle_w: per_node("avg. watts @ active idle")?,
        max_w: per_node("avg. watts @ 100%")?,
    })
}

pub fn train(csv_text: &str, skipped: &mut Skipped) -> Result<FamilyIndex> {
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let header = reader
        .headers()
        .context("reading the SPECpower header")?
        .clone();
    let col = |name: &str| header.iter().position(|h| h.trim() == name);
    let mut groups: BTreeMap<(String, u32, u32, u64), Vec<Result1>> = BTreeMap::new();
    let mut total = 0;
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.with_context(|| format!("SPECpower row {}", i + 2))?;
        total += 1;
        let label = format!("row {}", i + 2);
        let r = match read_row(&rec, &col) {
            Ok(r) => r,
            Err(why) => {
                skipped.add(FILE, &label, &why);
                continue;
            }
        };
        let Some(key) = cpu_match_key(&processor_name(&r.cpu)) else {
            skipped.add(
                FILE,
                &label,
                &format!("CPU {:?} has no model number", r.cpu),
            );
            continue;
        };
        let mem = r.memory_gb.to_bits();
        groups
            .entry((key, r.threads, r.chips, mem))
            .or_default()
            .push(r);
    }
    if groups.is_empty() {
        bail!("{FILE}: no usable rows");
    }
    let mut types = Vec::new();
    for results in groups.values() {
        types.push(node_type(results)?);
    }
    types.sort_by(|a, b| {
        (a.processor.as_str(), a.cores, a.chips)
            .cmp(&(b.processor.as_str(), b.cores, b.chips))
            .then(a.memory_gb.total_cmp(&b.memory_gb))
    });
    for (id, t) in types.iter_mut().enumerate() {
        t.id = u32::try_from(id).context("too many node types")?;
    }
    let used: usize = types.iter().map(|t| t.members.len()).sum();
    let fallback = fallback(&types)?;
    Ok(FamilyIndex {
        pipeline: "specpower".into(),
        source: "acpi".into(),
        trainer: LINEAR_TRAINER.into(),
        data: vec![
            format!(
                "{FILE}: {total} results, {used} used, {} node types",
                types.len()
            ),
            "per node: totals divided by Nodes; per type: median active-idle and 100 % watts"
                .into(),
        ],
        types,
        fallback,
        // Filled in by `generate`: it needs the whole index.
        expected_error: BTreeMap::new(),
        withheld: BTreeMap::new(),
    })
}

fn node_type(results: &[Result1]) -> Result<NodeType> {
    let first = results.first().context("empty node type")?;
    let idle = median(results.iter().map(|r| r.idle_w)).context("no idle")?;
    let max = median(results.iter().map(|r| r.max_w)).context("no max")?;
    let mut members: Vec<String> = results.iter().map(|r| r.system.clone()).collect();
    members.sort();
    // The name as most often written in the group, ties alphabetically.
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    for r in results {
        *names.entry(r.cpu.as_str()).or_default() += 1;
    }
    let cpu = names
        .iter()
        .max_by(|a, b| a.1.cmp(b.1).then(b.0.cmp(a.0)))
        .map_or(first.cpu.as_str(), |(n, _)| n);
    Ok(NodeType {
        id: 0,
        processor: processor_name(cpu),
        cpu: cpu.to_string(),
        cores: first.threads,
        chips: Some(first.chips),
        memory_gb: first.memory_gb,
        frequency_mhz: median(results.iter().filter_map(|r| r.mhz)),
        members,
        fit_error_w: None,
        components: BTreeMap::from([(
            "platform".into(),
            CurveParams {
                idle_w: round_digits(idle, 12),
                max_w: round_digits(max, 12),
                log_b: None,
            },
        )]),
    })
}

/// Idle and max affine in threads over node types (Theil–Sen): a server has a fixed part
/// (fans, PSU losses, board, disks) that watts-per-thread scaling misses.
fn fallback(types: &[NodeType]) -> Result<Fallback> {
    let points = |f: fn(&CurveParams) -> f64| -> Vec<(f64, f64)> {
        types
            .iter()
            .filter_map(|t| {
                t.components
                    .get("platform")
                    .map(|c| (f64::from(t.cores), f(c)))
            })
            .collect()
    };
    let idle = points(|c| c.idle_w);
    let max = points(|c| c.max_w);
    let (i0, i1) = theil_sen(&idle).context("no SPECpower data")?;
    let (m0, m1) = theil_sen(&max).context("no SPECpower data")?;
    let per_cpu = |pts: &[(f64, f64)]| median(pts.iter().map(|(n, w)| w / n)).unwrap_or(0.0);
    let (pi, pm) = (per_cpu(&idle), per_cpu(&max));
    let gb_per_cpu =
        median(types.iter().map(|t| t.memory_gb / f64::from(t.cores))).context("no memory data")?;
    let r = |x: f64| round_digits(x, 6);
    let affine = |fixed: f64, per_cpu: f64| Affine {
        fixed_w: r(fixed),
        per_cpu_w: r(per_cpu),
        per_gb_w: 0.0,
    };
    Ok(Fallback {
        memory_gb_per_cpu: r(gb_per_cpu),
        components: BTreeMap::from([(
            "platform".into(),
            FallbackCurve {
                idle: affine(i0, i1),
                max: affine(m0, m1),
                log_b: None,
            },
        )]),
        derivation: vec![
            format!(
                "platform idle and max: Theil-Sen lines in logical CPUs over {} node types; \
                 in-sample median abs. error {:.1} % idle, {:.1} % max, against {:.1} % and \
                 {:.1} % for watts proportional to logical CPUs (median {:.3} and {:.3} W/CPU)",
                idle.len(),
                mdape(&idle, |n| i0 + i1 * n),
                mdape(&max, |n| m0 + m1 * n),
                mdape(&idle, |n| pi * n),
                mdape(&max, |n| pm * n),
                pi,
                pm
            ),
            "platform shape: linear, as every SPECpower node type (two load levels only)".into(),
        ],
    })
}

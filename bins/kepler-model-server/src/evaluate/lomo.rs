//! Leave-one-CPU-out check of the `rapl` fallback's package curve: for each CPU model of
//! the AWS data, the fallback is refitted without that CPU's node types and scored on
//! them, so every figure is an error on a machine the fit did not see. The points are each
//! node type's idle and full-load watts (reproduced exactly by its own model) and its 10 %
//! and 50 % points as its curve gives them (within its `fit_error_w` of the data).

use std::collections::BTreeMap;
use std::fmt::Write;

use anyhow::{Context, Result};
use kepler_models::builtin::{cpu_match_key, embedded_index, NodeType};

/// Loads scored, as utilisation.
const LOADS: [f64; 4] = [0.0, 0.1, 0.5, 1.0];

/// `idle + (max − idle) · ln(1 + b·u) / ln(1 + b)` (linear without `b`).
fn curve(idle: f64, max: f64, b: Option<f64>, u: f64) -> f64 {
    let g = b.map_or(u, |b| (1.0 + b * u).ln() / (1.0 + b).ln());
    idle + (max - idle) * g
}

/// The markdown section: per load, the median and mean absolute percentage error over the
/// held-out node types, and the worst CPU.
pub(super) fn section() -> Result<String> {
    let types = &embedded_index()?.rapl.types;
    let mut by_cpu: BTreeMap<String, Vec<&NodeType>> = BTreeMap::new();
    for t in types {
        if let Some(k) = cpu_match_key(&t.processor) {
            by_cpu.entry(k).or_default().push(t);
        }
    }
    // Per load: (absolute % error, CPU) of every held-out node type.
    let mut errors: Vec<Vec<(f64, String)>> = vec![Vec::new(); LOADS.len()];
    for (key, held_out) in &by_cpu {
        let rest: Vec<NodeType> = types
            .iter()
            .filter(|t| cpu_match_key(&t.processor).as_ref() != Some(key))
            .cloned()
            .collect();
        let fb = crate::train::aws_fallback(&rest)?;
        let pkg = fb
            .components
            .get("package")
            .context("the fallback has no package curve")?;
        for t in held_out {
            let Some(truth) = t.components.get("package") else {
                continue;
            };
            let n = f64::from(t.cores);
            let (idle, max) = (pkg.idle.at(n, 0.0).max(0.0), pkg.max.at(n, 0.0).max(0.0));
            for (slot, u) in errors.iter_mut().zip(LOADS) {
                let want = curve(truth.idle_w, truth.max_w, truth.log_b, u);
                let got = curve(idle, max, pkg.log_b, u);
                if want > 0.0 {
                    slot.push((100.0 * (got - want).abs() / want, t.cpu.clone()));
                }
            }
        }
    }
    let mut out = String::new();
    writeln!(
        out,
        "\nLeave-one-CPU-out, `rapl` fallback, package (AWS data: {} CPU models, {} node types; \
         each CPU's node types scored by a fallback refitted without them):\n",
        by_cpu.len(),
        types.len()
    )?;
    writeln!(
        out,
        "| load | median APE | mean APE | worst (CPU) |\n|---|---|---|---|"
    )?;
    for (u, errs) in LOADS.iter().zip(&mut errors) {
        errs.sort_by(|a, b| a.0.total_cmp(&b.0));
        let median = errs.get(errs.len() / 2).map_or(f64::NAN, |e| e.0);
        let mean = errs.iter().map(|e| e.0).sum::<f64>() / errs.len().max(1) as f64;
        let (worst, cpu) = errs.last().map_or((f64::NAN, ""), |e| (e.0, e.1.as_str()));
        writeln!(
            out,
            "| {:.0} % | {median:.1} % | {mean:.1} % | {worst:.1} % ({cpu}) |",
            u * 100.0
        )?;
    }
    Ok(out)
}

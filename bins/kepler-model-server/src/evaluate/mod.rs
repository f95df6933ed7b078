//! `evaluate-builtin`: accuracy of the built-in models on the nx12 measurements of the model
//! DB (stress-ng sweep with RAPL and ACPI power), next to the published model-DB models on
//! the same rows. Writes the generated part of docs/model-accuracy.md.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kepler_models::builtin::MachineSpec;
use kepler_models::{Feature, Predictor};

mod lomo;
mod tables;

#[derive(clap::Args, Debug)]
pub struct EvaluateArgs {
    /// The data directory (holds kepler-model-db/models/v0.6/nx12); relative to the working directory.
    #[arg(long, value_name = "DIR", default_value = "data")]
    pub data: PathBuf,

    /// Markdown file whose generated section is (re)written; created when missing.
    #[arg(long, value_name = "FILE", default_value = "docs/model-accuracy.md")]
    pub out: PathBuf,
}

pub(crate) const NX12: &str = "kepler-model-db/models/v0.6/nx12/preprocessed_data";
const RAPL_CSV: &str = "preprocess_abs_default_rapl_Basic.csv";
const ACPI_CSV: &str = "preprocess_abs_default_acpi_Basic.csv";
/// The v0.6 column name; its values are busy CPU ms per second (see kepler_models::features).
pub(super) const CPU_COLUMN: &str = "bpf_cpu_time_us";

/// nx12's spec is not published. 32 logical CPUs: the busiest rows reach 29 170 ms/s, and
/// the sweep's 32- and 40-worker steps both saturate at ~28–29 k, which 40 CPUs would not.
/// Sockets are a guess (the fallback does not use them). The CPU model is unknown, so it is
/// given as such; memory is unknown (0), so the fallback's median GB per CPU applies.
pub(crate) const ASSUMED_CORES: u32 = 32;

pub(crate) fn assumed_spec(cores: u32, memory_gb: f64) -> MachineSpec {
    MachineSpec {
        processor: "unknown".into(),
        logical_cores: cores,
        physical_cores: None,
        chips: 2,
        memory_gb,
        frequency_mhz: None,
    }
}

/// One measured row: busy CPU ms/s and measured watts per component.
pub(crate) struct Row {
    pub(super) cpu_ms: f64,
    pub(super) watts: BTreeMap<&'static str, f64>,
}

pub(super) const COMPONENTS: [&str; 3] = ["package", "dram", "platform"];

pub fn run(args: &EvaluateArgs) -> Result<()> {
    let rows = read_rows(&args.data.join(NX12))?;
    let report = tables::report(&rows, &args.data)? + &lomo::section()?;
    splice(&args.out, &report)?;
    tracing::info!(out = %args.out.display(), rows = rows.len(), "accuracy report written");
    Ok(())
}

fn read_csv(path: &Path) -> Result<(csv::StringRecord, Vec<csv::StringRecord>)> {
    let mut reader =
        csv::Reader::from_path(path).with_context(|| format!("opening {}", path.display()))?;
    let header = reader.headers()?.clone();
    let records = reader
        .records()
        .collect::<Result<Vec<_>, _>>()
        .with_context(|| format!("reading {}", path.display()))?;
    Ok((header, records))
}

fn column(header: &csv::StringRecord, name: &str, file: &str) -> Result<usize> {
    header
        .iter()
        .position(|h| h == name)
        .with_context(|| format!("{file} has no {name} column"))
}

fn cell(rec: &csv::StringRecord, col: usize, what: &str) -> Result<f64> {
    let text = rec.get(col).unwrap_or("");
    text.parse::<f64>()
        .ok()
        .filter(|v| v.is_finite())
        .with_context(|| format!("{what}: {text:?} is not a number"))
}

/// The RAPL and ACPI files of the same run, merged on timestamp.
pub(crate) fn read_rows(dir: &Path) -> Result<Vec<Row>> {
    let (rh, rapl) = read_csv(&dir.join(RAPL_CSV))?;
    let (ah, acpi) = read_csv(&dir.join(ACPI_CSV))?;
    let (rt, ru) = (
        column(&rh, "timestamp", RAPL_CSV)?,
        column(&rh, CPU_COLUMN, RAPL_CSV)?,
    );
    let (pkg, dram) = (
        column(&rh, "package_power", RAPL_CSV)?,
        column(&rh, "dram_power", RAPL_CSV)?,
    );
    let (at, ap) = (
        column(&ah, "timestamp", ACPI_CSV)?,
        column(&ah, "platform_power", ACPI_CSV)?,
    );
    let platform: HashMap<&str, &csv::StringRecord> = acpi
        .iter()
        .filter_map(|r| r.get(at).map(|t| (t, r)))
        .collect();
    let mut rows = Vec::with_capacity(rapl.len());
    for (i, rec) in rapl.iter().enumerate() {
        let what = |c: &str| format!("{RAPL_CSV} row {} {c}", i + 2);
        let ts = rec.get(rt).unwrap_or("");
        let acpi_rec = platform
            .get(ts)
            .with_context(|| format!("{ACPI_CSV} has no row for timestamp {ts}"))?;
        rows.push(Row {
            cpu_ms: cell(rec, ru, &what(CPU_COLUMN))?,
            watts: BTreeMap::from([
                ("package", cell(rec, pkg, &what("package_power"))?),
                ("dram", cell(rec, dram, &what("dram_power"))?),
                ("platform", cell(acpi_rec, ap, &format!("{ACPI_CSV} {ts}"))?),
            ]),
        });
    }
    if rows.is_empty() {
        bail!("no nx12 rows");
    }
    Ok(rows)
}

/// MAE (W), MAPE (%), mean signed error (W) of one component.
#[derive(Clone, Copy)]
pub(crate) struct Score {
    pub(crate) mae: f64,
    pub(crate) mape: f64,
    pub(super) bias: f64,
}

/// Scores of `model` per component on `rows`; a component that needs a feature the data
/// lacks is left out (shown as n/a) rather than fed an invented value.
pub(crate) fn score(model: &dyn Predictor, rows: &[Row]) -> Result<BTreeMap<String, Score>> {
    let missing: Vec<Feature> = model
        .features()
        .into_iter()
        .filter(|f| *f != Feature::BpfCpuTimeMs)
        .collect();
    let predict = |cpu_ms: f64, other: f64| {
        let mut input: Vec<(Feature, f64)> = vec![(Feature::BpfCpuTimeMs, cpu_ms)];
        input.extend(missing.iter().map(|f| (*f, other)));
        model.predict(&input)
    };
    // A component depends on an absent feature if changing that feature changes it (or
    // blows it up: an exponential curve overflows at large values).
    let mut depends = std::collections::BTreeSet::new();
    for cpu in [0.0, 10_000.0, 29_000.0] {
        let base = predict(cpu, 0.0)?;
        for probe in [1.0, 1e2, 1e4, 1e6] {
            match predict(cpu, probe) {
                Ok(out) => {
                    for ((name, a), (_, b)) in base.iter().zip(out) {
                        if *a != b {
                            depends.insert(name.clone());
                        }
                    }
                }
                Err(kepler_models::ModelError::NonFinitePrediction { component, .. }) => {
                    depends.insert(component);
                }
                Err(e) => return Err(e.into()),
            }
        }
    }
    let mut sums: BTreeMap<String, (f64, f64, f64)> = BTreeMap::new();
    for row in rows {
        for (name, watts) in predict(row.cpu_ms, 0.0)? {
            let Some(actual) = row.watts.get(name.as_str()) else {
                continue;
            };
            if depends.contains(&name) {
                continue;
            }
            let e = sums.entry(name).or_default();
            e.0 += (watts - actual).abs();
            e.1 += (watts - actual).abs() / actual;
            e.2 += watts - actual;
        }
    }
    let n = rows.len() as f64;
    Ok(sums
        .into_iter()
        .map(|(k, (a, p, b))| {
            (
                k,
                Score {
                    mae: a / n,
                    mape: 100.0 * p / n,
                    bias: b / n,
                },
            )
        })
        .collect())
}

/// Per component, the ordinary least-squares line `watts = a + b·cpu_ms` fitted on `rows`
/// themselves, scored on them: how much of the error no model on this one feature can remove.
pub(super) fn least_squares(rows: &[Row]) -> BTreeMap<String, Score> {
    let n = rows.len() as f64;
    let mx = rows.iter().map(|r| r.cpu_ms).sum::<f64>() / n;
    let mut out = BTreeMap::new();
    for c in COMPONENTS {
        let ys: Vec<(f64, f64)> = rows
            .iter()
            .filter_map(|r| r.watts.get(c).map(|y| (r.cpu_ms, *y)))
            .collect();
        let my = ys.iter().map(|(_, y)| y).sum::<f64>() / n;
        let sxy: f64 = ys.iter().map(|(x, y)| (x - mx) * (y - my)).sum();
        let sxx: f64 = ys.iter().map(|(x, _)| (x - mx).powi(2)).sum();
        let b = if sxx > 0.0 { sxy / sxx } else { 0.0 };
        let a = my - b * mx;
        let (mut mae, mut mape, mut bias) = (0.0, 0.0, 0.0);
        for (x, y) in &ys {
            let e = a + b * x - y;
            mae += e.abs() / n;
            mape += 100.0 * e.abs() / y / n;
            bias += e / n;
        }
        out.insert(c.to_string(), Score { mae, mape, bias });
    }
    out
}

pub(super) fn fmt_scores(scores: &BTreeMap<String, Score>, components: &[&str]) -> String {
    components
        .iter()
        .map(|c| match scores.get(*c) {
            Some(s) => format!(" {:.1} | {:.1} % | {:+.1} |", s.mae, s.mape, s.bias),
            None => " n/a | n/a | n/a |".into(),
        })
        .collect()
}

const BEGIN: &str = "<!-- BEGIN GENERATED by kepler-model-server evaluate-builtin -->";
const END: &str = "<!-- END GENERATED -->";

/// Replaces the generated section of `path`, keeping the hand-written text around it.
fn splice(path: &Path, generated: &str) -> Result<()> {
    let existing = match std::fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            format!("# Built-in model accuracy\n\n{BEGIN}\n{END}\n")
        }
        Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
    };
    let (Some(b), Some(e)) = (existing.find(BEGIN), existing.find(END)) else {
        bail!(
            "{} has no generated section ({BEGIN} … {END}); add the markers where the tables go",
            path.display()
        );
    };
    if e < b {
        bail!("{}: the END marker comes before BEGIN", path.display());
    }
    let before = existing.get(..b + BEGIN.len()).unwrap_or_default();
    let after = existing.get(e..).unwrap_or_default();
    let text = format!("{before}\n{generated}{after}");
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {}", parent.display()))?;
    }
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

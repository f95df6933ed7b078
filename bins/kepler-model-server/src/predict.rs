//! `predict`: evaluate a model on each row of a CSV of features.
//!
//! Input: a CSV whose header names features (`bpf_cpu_time_ms,bpf_page_cache_hit,...`);
//! columns the model does not need are ignored (they may hold anything, timestamps or
//! labels). Output on stdout: a header of the model's components in its stable order
//! (package, core, uncore, dram, platform, ...) and one row of watts per input row, each
//! value printed with Rust's shortest round-trip formatting (full f64 precision).

use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use kepler_models::builtin::BuiltinFamily;
use kepler_models::features::feature_aliases;
use kepler_models::Feature;
use kepler_sources::bounded::{limits, LineLimitedReader};

use crate::model_source::{self, BuiltinModels, ModelSource};

#[derive(clap::Args, Debug)]
pub struct PredictArgs {
    /// The model: a weight .json, a .zip archive, or `builtin` (chosen by --spec).
    #[arg(long, value_name = "FILE|builtin")]
    pub model: ModelSource,

    /// Trainer name, when the file name does not tell it (needed for 3-value curve fits:
    /// LogarithmicRegressionTrainer or ExponentialRegressionTrainer).
    #[arg(long, value_name = "NAME")]
    pub trainer: Option<String>,

    /// Machine spec JSON (processor, cores, chips, memory, frequency) for `--model builtin`;
    /// without it, this machine's /proc/cpuinfo and /proc/meminfo.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,

    /// Built-in model family: `rapl` (package, dram) or `platform` (whole-machine power).
    #[arg(long, value_name = "rapl|platform", default_value = "rapl")]
    pub family: BuiltinFamily,

    /// CSV of features with a header row; `-` reads stdin.
    #[arg(long, value_name = "CSV")]
    pub input: PathBuf,
}

/// Runs the subcommand, writing CSV to stdout.
pub fn run(args: &PredictArgs, builtin: &dyn BuiltinModels) -> Result<()> {
    let model = model_source::load(
        &args.model,
        args.trainer.as_deref(),
        args.spec.as_deref(),
        args.family,
        builtin,
    )?;
    tracing::info!(
        kind = %model.kind(),
        name = model.name().unwrap_or("-"),
        features = ?model.features(),
        components = ?model.components(),
        "model loaded"
    );
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    predict_csv(&*model, &args.input, &mut out)?;
    out.flush().context("writing output")?;
    Ok(())
}

fn open_input(path: &Path) -> Result<csv::Reader<Box<dyn std::io::Read>>> {
    let reader: Box<dyn std::io::Read> = if path.as_os_str() == "-" {
        Box::new(std::io::stdin())
    } else {
        Box::new(
            std::fs::File::open(path)
                .with_context(|| format!("opening input {}", path.display()))?,
        )
    };
    // The CSV parser holds one row in memory: an endless row (`/dev/zero`) must end in an
    // error, not in gigabytes.
    let reader = Box::new(LineLimitedReader::new(reader, limits::CSV_LINE));
    Ok(csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(reader))
}

/// For each feature the model needs, the index of the CSV column holding it (the feature's
/// own name first, then its legacy aliases such as `bpf_cpu_time_us`).
fn feature_columns(features: &[Feature], header: &csv::StringRecord) -> Result<Vec<usize>> {
    let position = |name: &str| header.iter().position(|h| h == name);
    let mut columns = Vec::with_capacity(features.len());
    let mut missing = Vec::new();
    for &f in features {
        let col =
            position(f.as_str()).or_else(|| feature_aliases(f).iter().find_map(|a| position(a)));
        match col {
            Some(c) => columns.push(c),
            None => missing.push(f.as_str()),
        }
    }
    if !missing.is_empty() {
        bail!(
            "the input has no column for feature(s) {} that the model needs (header: {})",
            missing.join(", "),
            header.iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(columns)
}

/// Reads CSV rows from `input`, writes predictions to `out`.
pub fn predict_csv(
    model: &dyn kepler_models::Predictor,
    input: &Path,
    out: &mut dyn Write,
) -> Result<()> {
    let mut reader = open_input(input)?;
    let header = reader
        .headers()
        .with_context(|| format!("reading the header of {}", input.display()))?
        .clone();
    let features = model.features();
    let columns = feature_columns(&features, &header)?;

    let mut writer = csv::Writer::from_writer(out);
    writer
        .write_record(model.components())
        .context("writing output")?;
    for (i, record) in reader.records().enumerate() {
        let row = i + 1;
        let record = record.with_context(|| format!("reading row {row} of {}", input.display()))?;
        let mut values = Vec::with_capacity(features.len());
        for (feature, &col) in features.iter().zip(&columns) {
            let cell = record.get(col).unwrap_or("");
            let value: f64 = cell.parse().with_context(|| {
                format!(
                    "row {row}, column {}: {cell:?} is not a number",
                    header.get(col).unwrap_or(feature.as_str())
                )
            })?;
            values.push((*feature, value));
        }
        let watts = model
            .predict(&values)
            .with_context(|| format!("row {row}"))?;
        writer
            .write_record(watts.iter().map(|(_, w)| w.to_string()))
            .context("writing output")?;
    }
    writer.flush().context("writing output")?;
    Ok(())
}

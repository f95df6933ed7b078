//! `train`: power models from a dataset (collect's CSV, a model-DB preprocessed CSV, a
//! Prometheus range-query dump, or a live Prometheus), written as a model-DB pipeline that
//! `serve` serves, with an HTML accuracy report.

mod accuracy_doc;
pub(crate) mod prom;
mod report;
pub(crate) mod write;

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use kepler_models::dataset::{Dataset, MachineSpec};
use kepler_models::train::{
    train_all, Acceptance, FeatureGroup, OutputType, TrainOptions, TrainerKind,
};

/// The power source the models are for: which components they output.
#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// RAPL zones: package, core, uncore, dram.
    #[value(name = "rapl-sysfs")]
    RaplSysfs,
    /// Whole-platform power: platform.
    #[value(name = "acpi")]
    Acpi,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::RaplSysfs => "rapl-sysfs",
            Source::Acpi => "acpi",
        }
    }

    pub fn components(self) -> &'static [&'static str] {
        match self {
            Source::RaplSysfs => &["package", "core", "uncore", "dram"],
            Source::Acpi => &["platform"],
        }
    }
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("data").required(true).args(["input", "prometheus"])))]
pub struct TrainCmdArgs {
    /// Dataset: collect's CSV (with its `.spec.json`), a model-DB preprocessed CSV, or a
    /// Prometheus range-query dump (JSON), told apart by content.
    #[arg(long, value_name = "FILE")]
    pub input: Option<PathBuf>,

    /// Train from a live Prometheus scraping our agents (with `ebpf.exportFeatures`).
    #[arg(long, value_name = "URL")]
    pub prometheus: Option<String>,

    /// With --prometheus: how far back from now (`7d`, `12h`).
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, conflicts_with_all = ["start", "end"])]
    pub since: Option<Duration>,

    /// With --prometheus: range start, RFC 3339 or Unix seconds.
    #[arg(long, requires = "end")]
    pub start: Option<String>,

    /// With --prometheus: range end, RFC 3339 or Unix seconds.
    #[arg(long, requires = "start")]
    pub end: Option<String>,

    /// With --prometheus: query resolution.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "30s")]
    pub step: Duration,

    /// With --prometheus: per-request timeout.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration, default_value = "60s")]
    pub timeout: Duration,

    /// The power source the models are for.
    #[arg(long, value_enum)]
    pub source: Source,

    /// Model directory to write into (`serve --model-dir`).
    #[arg(long, value_name = "DIR")]
    pub out: PathBuf,

    /// Seed of the train/test split.
    #[arg(long, default_value_t = 42)]
    pub seed: u64,

    /// Pipeline name: the directory under --out that is replaced.
    #[arg(long, default_value = "kepler-rs")]
    pub pipeline: String,

    /// Node type number in the model names and node_type_index.json.
    #[arg(long, default_value_t = 0)]
    pub node_type: u32,

    /// Machine spec JSON (node_type_index attrs); default: the dataset's `.spec.json`.
    #[arg(long, value_name = "FILE")]
    pub spec: Option<PathBuf>,

    /// Trainers (comma separated): ols, nnls, ridge, logarithmic, exponential, logistic,
    /// xgboost. Default: all.
    #[arg(long, value_delimiter = ',')]
    pub trainers: Vec<TrainerKind>,

    /// Share of rows held back for testing.
    #[arg(long, default_value_t = 0.2)]
    pub test_fraction: f64,

    /// Also report k-fold cross-validated accuracy.
    #[arg(long, value_name = "K")]
    pub k_fold: Option<usize>,

    /// Acceptance: worst-component MAE (W) at most this, or ...
    #[arg(long, default_value_t = 10.0)]
    pub max_mae: f64,

    /// ... worst-component MAPE (%) at most this.
    #[arg(long, default_value_t = 20.0)]
    pub max_mape: f64,

    /// Fail (exit 1, nothing written) when no model passes the acceptance thresholds.
    #[arg(long)]
    pub require_accepted: bool,

    /// Also measure this model file (e.g. a published one) on the held-back rows; repeatable.
    #[arg(long, value_name = "MODEL")]
    pub compare: Vec<PathBuf>,

    /// Write the accuracy tables into this Markdown file, replacing its generated section.
    #[arg(long, value_name = "FILE")]
    pub markdown: Option<PathBuf>,

    /// Also write the rows the models were trained and tested on as a dataset CSV (what
    /// `--input` reads): a `--prometheus` run can be repeated or checked offline.
    #[arg(long, value_name = "FILE")]
    pub save_data: Option<PathBuf>,
    /// Threads that fit a tree model's components side by side (0: one per CPU); the models
    /// do not depend on it
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub threads: usize,
}

pub fn run(args: &TrainCmdArgs) -> Result<()> {
    if args.pipeline.is_empty()
        || args.pipeline.starts_with('.')
        || args.pipeline.contains(['/', '\\'])
    {
        bail!(
            "--pipeline must be a plain directory name, not {:?}",
            args.pipeline
        );
    }
    let mut data = load(args)?;
    if let Some(path) = &args.spec {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        data.spec = Some(
            serde_json::from_str::<MachineSpec>(&text)
                .with_context(|| format!("machine spec {}", path.display()))?,
        );
    }
    keep_source_components(&mut data, args.source)?;
    if let Some(path) = &args.save_data {
        let file =
            std::fs::File::create(path).with_context(|| format!("creating {}", path.display()))?;
        data.write_csv(std::io::BufWriter::new(file))
            .with_context(|| format!("writing {}", path.display()))?;
    }
    let opts = TrainOptions {
        seed: args.seed,
        test_fraction: args.test_fraction,
        k_fold: args.k_fold,
        trainers: if args.trainers.is_empty() {
            TrainerKind::ALL.to_vec()
        } else {
            args.trainers.clone()
        },
        output_types: vec![OutputType::AbsPower, OutputType::DynPower],
        feature_groups: Some(FeatureGroup::ALL.to_vec()),
        node_type: args.node_type,
        acceptance: Acceptance {
            max_mae_w: args.max_mae,
            max_mape_pct: args.max_mape,
        },
        threads: args.threads,
        ..TrainOptions::default()
    };
    tracing::info!(rows = data.len(), skipped = data.skipped_rows, "training");
    let report = train_all(&data, &opts).context("training")?;
    for m in &report.models {
        tracing::info!(
            output = %m.output_type, group = %m.feature_group, model = %m.name,
            mae_w = format!("{:.2}", m.accuracy.mae_w),
            mape = m.accuracy.mape_pct.map(|p| format!("{p:.2}")).unwrap_or_else(|| "n/a".into()),
            accepted = m.accepted,
            "model"
        );
    }
    if let Some(guidance) = report.guidance() {
        if args.require_accepted {
            bail!("{guidance}");
        }
        tracing::warn!("{guidance}");
    }
    let compared = args
        .compare
        .iter()
        .map(|p| accuracy_doc::compare(p, &data, &report))
        .collect::<Result<Vec<_>>>()?;
    let dir = write::write_pipeline(&args.out, &args.pipeline, args.source, &report)?;
    if let Some(md) = &args.markdown {
        let mut words = Vec::new();
        let mut argv = std::env::args().skip(1);
        while let Some(a) = argv.next() {
            // The log level says nothing about the figures.
            if a == "--log.level" {
                argv.next();
            } else if !a.starts_with("--log.level=") {
                words.push(a);
            }
        }
        let command = words.join(" ");
        let section = accuracy_doc::section(
            &format!("kepler-model-server {command}"),
            &report,
            &compared,
        );
        accuracy_doc::write_section(md, &section)?;
    }
    println!("{}", dir.display());
    Ok(())
}

/// Reads `--input` or queries `--prometheus`.
fn load(args: &TrainCmdArgs) -> Result<Dataset> {
    if let Some(url) = &args.prometheus {
        let range = prom::Range::from_args(args.since, args.start.as_deref(), args.end.as_deref())?;
        return prom::query_live(url, &range, args.step, args.timeout);
    }
    let Some(path) = &args.input else {
        bail!("--input or --prometheus is required");
    };
    if is_json(path)? {
        prom::read_dump(path)
    } else {
        Dataset::read_csv_file(path).map_err(Into::into)
    }
}

/// Whether the file's first non-blank byte opens a JSON value.
fn is_json(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut head = [0u8; 512];
    let mut file =
        std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let n = file
        .read(&mut head)
        .with_context(|| format!("reading {}", path.display()))?;
    Ok(matches!(
        head.get(..n)
            .unwrap_or_default()
            .iter()
            .find(|b| !b.is_ascii_whitespace()),
        Some(b'{' | b'[')
    ))
}

/// Drops power columns of other sources; an error when none of this source's is left.
pub(crate) fn keep_source_components(data: &mut Dataset, source: Source) -> Result<()> {
    let before: Vec<String> = data.power.iter().map(|(c, _)| c.clone()).collect();
    data.power
        .retain(|(c, _)| source.components().contains(&c.as_str()));
    if data.power.is_empty() {
        bail!(
            "the dataset has no power column for source {} (expected {}; found {})",
            source.as_str(),
            source
                .components()
                .iter()
                .map(|c| format!("{c}_power"))
                .collect::<Vec<_>>()
                .join(", "),
            if before.is_empty() {
                "none".to_string()
            } else {
                before.join(", ")
            }
        );
    }
    Ok(())
}

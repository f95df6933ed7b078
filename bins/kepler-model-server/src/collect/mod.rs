//! `kepler-model-server collect`: runs a training workload with `stress-ng` and records, at a
//! fixed step, a running agent's node features and meter power into a dataset CSV that
//! `train` reads (plus the machine spec beside it, `<out>.spec.json`).
//!
//! - [`plan`]: the phases (idle, then each stressor × instances × load, idle between);
//! - [`scrape`]: one reading of the agent's `/metrics` (`ebpf.exportFeatures` must be on);
//! - [`output`]: the file, appended row by row and resumed where it ends;
//! - [`cpufreq`]: frequency caps, where cpufreq is writable.
//!
//! The agent must run on this machine with a real meter (RAPL, ACPI...) and with
//! `monitor.interval` no longer than `--step`: a row is recorded for each new agent tick.
//! Why `indicatif`: a progress bar with an ETA that hides itself when stderr is no terminal.

mod cpufreq;
mod output;
mod plan;
mod run;
mod scrape;

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;

#[derive(clap::Args, Debug)]
pub struct CollectArgs {
    /// Dataset CSV to write; when it exists (an interrupted run), the plan continues where
    /// the file ends. The machine spec goes beside it (`<out>.spec.json`).
    #[arg(long)]
    pub out: PathBuf,
    /// The running agent's address (its `/metrics` is read).
    #[arg(long, default_value = "http://127.0.0.1:28282")]
    pub agent: String,
    /// How often the agent is read; set the agent's `monitor.interval` to this or less.
    #[arg(long, default_value = "1s", value_parser = humantime::parse_duration)]
    pub step: Duration,
    /// Stressors to run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "cpu,cache,matrix,vm,io")]
    pub stressors: Vec<plan::Stressor>,
    /// Instance counts, comma-separated [default: 1, half the CPUs, all CPUs].
    #[arg(long, value_delimiter = ',', value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub instances: Vec<u32>,
    /// Load levels of the cpu stressor in percent (`stress-ng --cpu-load`), comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "25,50,75,100",
          value_parser = clap::value_parser!(u8).range(1..=100))]
    pub loads: Vec<u8>,
    /// Length of each stress run.
    #[arg(long, default_value = "60s", value_parser = humantime::parse_duration)]
    pub run: Duration,
    /// Length of the idle phase before the first run and after each.
    #[arg(long, default_value = "20s", value_parser = humantime::parse_duration)]
    pub idle: Duration,
    /// Repeat the cpu runs under CPU frequency caps (the lowest frequency and half-way up)
    /// where cpufreq is writable; `false` never touches cpufreq.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub freq_caps: bool,
    /// Where cpufreq lives.
    #[arg(long = "host.sysfs", default_value = "/sys")]
    pub sysfs: PathBuf,
    /// The stress-ng program.
    #[arg(long, default_value = "stress-ng")]
    pub stress_ng: PathBuf,
    /// Print the plan and how long it takes; run nothing, write nothing.
    #[arg(long)]
    pub dry_run: bool,
}

pub fn run(args: &CollectArgs) -> Result<()> {
    run::collect(args)
}

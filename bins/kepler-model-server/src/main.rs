//! `kepler-model-server`: the Rust model server for Kepler: `serve` (the HTTP API over a
//! model directory, legacy `/model` included), `predict` (evaluate a model-DB or built-in
//! model on a CSV of features), `train` (power models from a dataset or Prometheus, see
//! `train_cmd`), `train-builtin` (train the built-in models from the public
//! data) and `evaluate-builtin` (their accuracy report).

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod builtin;
mod collect;
mod evaluate;
mod logging;
mod model_source;
mod predict;
mod serve;
mod train;
mod train_cmd;

use clap::{Parser, Subcommand};

#[derive(Parser, Debug)]
#[command(name = "kepler-model-server", version, about)]
struct Cli {
    /// Log level or tracing filter (also RUST_LOG); logs go to stderr.
    #[arg(long = "log.level", global = true, default_value = "info")]
    log_level: String,

    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Serve a model directory over HTTP(S): the legacy `POST /model` API and `GET /models`.
    Serve(serve::ServeArgs),
    /// Run a stress-ng training workload and record an agent's features and power into a
    /// dataset for `train`.
    Collect(collect::CollectArgs),
    /// Evaluate a power model on every row of a CSV of features; print watts per component.
    Predict(predict::PredictArgs),
    /// Train power models from a dataset or Prometheus; write a model-DB pipeline + report.
    Train(Box<train_cmd::TrainCmdArgs>),
    /// Train the built-in default models from the public data (SPECpower, AWS instances).
    TrainBuiltin(train::TrainArgs),
    /// Evaluate the built-in models against the nx12 measurements; write the report.
    EvaluateBuiltin(evaluate::EvaluateArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log_level);
    let result = match cli.command {
        Command::Serve(args) => serve::run(&args),
        Command::Collect(args) => collect::run(&args),
        Command::Predict(args) => predict::run(&args, &builtin::Embedded),
        Command::Train(args) => train_cmd::run(&args),
        Command::TrainBuiltin(args) => train::run(&args),
        Command::EvaluateBuiltin(args) => evaluate::run(&args),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            // `{:#}` prints the whole context chain on one line.
            eprintln!("error: {e:#}");
            std::process::ExitCode::FAILURE
        }
    }
}

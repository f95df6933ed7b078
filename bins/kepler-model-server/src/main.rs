//! `kepler-model-server`: the Rust model server for Kepler. For now it has the `predict`
//! subcommand (evaluate a model-DB model on a CSV of features); the HTTP server comes with
//! the model-server issue.

mod logging;
mod model_source;
mod predict;

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
    /// Evaluate a power model on every row of a CSV of features; print watts per component.
    Predict(predict::PredictArgs),
}

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    logging::init(&cli.log_level);
    let result = match cli.command {
        Command::Predict(args) => predict::run(&args, &model_source::NotYetBuiltin),
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

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use anyhow::Result;
use clap::Parser;
use kepler_agent::cli::{Cli, Command};
use kepler_agent::config::Config;

fn main() -> Result<()> {
    // kingpin, which upstream uses, exits with status 1 on a bad flag (clap would use 2);
    // scripts and probes written for upstream check for that.
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            // Printing help or the error can only fail if the terminal is gone.
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let loaded = Config::load(cli.config_file.as_deref(), &cli.overrides())?;
    kepler_agent::logging::init(&loaded.config.log)?;
    for key in &loaded.unknown_keys {
        tracing::warn!(key = %key, "unknown config key ignored");
    }
    for key in loaded.config.not_implemented() {
        tracing::warn!(key, "config key not implemented in this version; ignored");
    }
    match cli.command {
        Some(Command::Probe) => {
            print!("{}", kepler_agent::probe::report(&loaded.config));
            Ok(())
        }
        None => kepler_agent::agent::run(loaded.config),
    }
}

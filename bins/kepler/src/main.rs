// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use anyhow::Result;
use clap::Parser;
use kepler_agent::cli::{Cli, Command};
use kepler_agent::config::Config;

fn main() -> Result<()> {
    let cli = Cli::parse();
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

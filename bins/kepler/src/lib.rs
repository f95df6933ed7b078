//! The kepler-rs agent as a library: configuration, start-up selection of sources and meters,
//! the tick loop and `kepler probe`. `main.rs` only parses flags and calls in here, so tests
//! can drive every piece.

pub mod agent;
pub mod cli;
pub mod config;
pub mod estimator;
pub mod probe;
pub mod sampler;
pub mod service;
pub mod setup;

use std::io::IsTerminal;

use anyhow::Result;
use tracing_subscriber::EnvFilter;

use crate::config::Config;

/// Sets up logging to stderr at `log.level` (overridden by `RUST_LOG` when set) in
/// `log.format` (text or json).
pub fn init_logging(config: &Config) -> Result<()> {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(config.log.level.to_ascii_lowercase()))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = if config.log.format == "json" {
        builder.json().try_init()
    } else {
        builder.try_init()
    };
    result.map_err(|e| anyhow::anyhow!("setting up logging: {e}"))
}

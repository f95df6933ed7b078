//! Logging to stderr: the `log` config section and the tracing subscriber it configures.

use std::io::IsTerminal;

use anyhow::Result;
use serde::Deserialize;
use tracing_subscriber::EnvFilter;

use crate::config::closed_choice;

closed_choice! {
    /// `log.level` / `--log.level`: the least severe events logged.
    #[derive(Default)]
    pub enum LogLevel {
        Trace = "trace",
        Debug = "debug",
        #[default]
        Info = "info",
        Warn = "warn",
        Error = "error",
    }
}

closed_choice! {
    /// `log.format`: human-readable lines or one JSON object per event.
    #[derive(Default)]
    pub enum LogFormat {
        #[default]
        Text = "text",
        Json = "json",
    }
}

/// The `log` section.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default)]
pub struct LogConfig {
    pub level: LogLevel,
    pub format: LogFormat,
}

/// Sets up logging to stderr at `log.level` (overridden by `RUST_LOG` when set) in
/// `log.format`; the HTTP client's wire dumps stay off (see `kepler_meters::QUIET_LOG_TARGETS`).
pub fn init(config: &LogConfig) -> Result<()> {
    let mut filter =
        EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(config.level.as_str()))?;
    // Added after the user's directives so they win over `trace` (BMC passwords, DESIGN §8).
    for directive in kepler_meters::QUIET_LOG_TARGETS {
        filter = filter.add_directive(directive.parse()?);
    }
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stderr().is_terminal())
        .with_writer(std::io::stderr);
    let result = match config.format {
        LogFormat::Json => builder.json().try_init(),
        LogFormat::Text => builder.try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("setting up logging: {e}"))
}

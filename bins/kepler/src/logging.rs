//! Logging as upstream logs: the `log` config section and the tracing subscriber it configures,
//! writing Go slog's text or JSON lines (see [`slog`]) to stdout, or to stderr when the stdout
//! exporter owns stdout.

mod slog;

pub use self::slog::SlogFormat;

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

/// Where log lines go: upstream writes them to stdout, and to stderr when the stdout exporter
/// prints its tables there.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn for_stdout_exporter(stdout_exporter: bool) -> Stream {
        if stdout_exporter {
            Stream::Stderr
        } else {
            Stream::Stdout
        }
    }
}

/// Sets up logging at `log.level` (overridden by `RUST_LOG` when set) in `log.format`.
/// The HTTP client's wire dumps stay off (see `kepler_meters::QUIET_LOG_TARGETS`).
pub fn init(config: &LogConfig, stream: Stream) -> Result<()> {
    let mut filter =
        EnvFilter::try_from_default_env().or_else(|_| EnvFilter::try_new(config.level.as_str()))?;
    // Added after the user's directives so they win over `trace` (BMC passwords, DESIGN §8).
    for directive in kepler_meters::QUIET_LOG_TARGETS {
        filter = filter.add_directive(directive.parse()?);
    }
    let format = SlogFormat {
        json: config.format == LogFormat::Json,
        clock: std::time::SystemTime::now,
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .event_format(format);
    let result = match stream {
        Stream::Stdout => builder.with_writer(std::io::stdout).try_init(),
        Stream::Stderr => builder.with_writer(std::io::stderr).try_init(),
    };
    result.map_err(|e| anyhow::anyhow!("setting up logging: {e}"))
}

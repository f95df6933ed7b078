//! Logging set-up: tracing to stderr, so stdout stays clean CSV.

use std::io::IsTerminal;

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber. `RUST_LOG` wins over `level` when set.
pub fn init(level: &str) {
    let filter = EnvFilter::try_from_default_env()
        .or_else(|_| EnvFilter::try_new(level))
        .unwrap_or_else(|_| EnvFilter::new("info"));
    // try_init: a second init (tests) is not an error worth failing for.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        // No colour codes when stderr is a file or a pipe.
        .with_ansi(std::io::stderr().is_terminal())
        .try_init();
}

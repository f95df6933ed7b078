// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use anyhow::Result;
use kepler_agent::cli::{Cli, Command};
use kepler_agent::config::Config;
use kepler_agent::logging::{LogFormat, Stream};

// jemalloc, so that `debug.pprof.enabled` can serve heap profiles from its sampling profiler
// (see kepler_agent::profiling). Profiling is built in but starts inactive: the agent turns it
// on only when asked, and until then pays one branch per allocation.
#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

/// jemalloc reads its options from this symbol at start-up: profiling compiled in (`prof`),
/// sampling off until activated, one sample per 512 KiB allocated on average (Go's heap profile
/// samples every 512 KiB too).
#[cfg(not(target_env = "msvc"))]
#[allow(non_upper_case_globals)]
#[export_name = "malloc_conf"]
pub static malloc_conf: &[u8] = b"prof:true,prof_active:false,lg_prof_sample:19\0";

fn main() -> Result<()> {
    // kingpin, which upstream uses, exits with status 1 on a bad flag (clap would use 2);
    // scripts and probes written for upstream check for that.
    let cli = match Cli::parse_args(std::env::args_os()) {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 1 } else { 0 };
            // Printing help or the error can only fail if the terminal is gone.
            let _ = e.print();
            std::process::exit(code);
        }
    };
    let loaded = Config::load(cli.config_file.as_deref(), &cli.overrides())?;
    // `kepler probe` prints its report on stdout; its logs must not mix into it.
    let stream = match cli.command {
        Some(Command::Probe) => Stream::Stderr,
        None => Stream::for_stdout_exporter(loaded.config.exporter.stdout.enabled),
    };
    kepler_agent::logging::init(&loaded.config.log, stream)?;
    log_start(&loaded.config, stream);
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

/// Upstream's first lines: the version, then (text logs at info level) the effective
/// configuration between rules, on the log stream.
fn log_start(config: &Config, stream: Stream) {
    let build = kepler_agent::setup::build_info();
    tracing::info!(
        version = %build.version,
        gitBranch = %build.branch,
        gitCommit = %build.revision,
        rustVersion = %build.rust_version,
        goOS = std::env::consts::OS,
        goArch = %build.arch,
        "Kepler version information"
    );
    if config.log.format != LogFormat::Text || !tracing::enabled!(tracing::Level::INFO) {
        return;
    }
    let rule = "━".repeat(66);
    let text = format!(
        "\nConfiguration\n{rule}\n{}{rule}\n",
        config.effective_yaml()
    );
    // Best effort: a closed stream only loses this banner.
    let _ = match stream {
        Stream::Stdout => std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes()),
        Stream::Stderr => std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes()),
    };
}

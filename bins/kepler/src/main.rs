// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

use anyhow::Result;
use kepler_agent::cli::{Cli, Command};
use kepler_agent::config::Config;
use kepler_agent::logging::{LogFormat, Stream};

#[cfg(not(target_env = "msvc"))]
mod allocator;

#[cfg(not(target_env = "msvc"))]
#[global_allocator]
static ALLOCATOR: allocator::Switch = allocator::Switch;

fn main() -> Result<()> {
    #[cfg(not(target_env = "msvc"))]
    allocator::tune_system_allocator();
    // The agent re-executes itself to load its eBPF programs (see kepler_ebpf::child): that
    // child parses no flags and reads no config.
    if std::env::args_os().nth(1).as_deref()
        == Some(std::ffi::OsStr::new(kepler_ebpf::LOADER_SUBCOMMAND))
    {
        std::process::exit(kepler_ebpf::run_loader_child());
    }
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
    // Heap profiles need jemalloc from the first allocation: start over on it (see allocator.rs).
    #[cfg(not(target_env = "msvc"))]
    let restart_error =
        (loaded.config.debug.pprof.enabled && cli.command.is_none() && !allocator::jemalloc())
            .then(|| restart_with_heap_profiling(cli.config_file.as_deref()));
    // `kepler probe` prints its report on stdout; its logs must not mix into it.
    let stream = match cli.command {
        Some(Command::Probe) => Stream::Stderr,
        None => Stream::for_stdout_exporter(loaded.config.exporter.stdout.enabled),
    };
    kepler_agent::logging::init(&loaded.config.log, stream)?;
    #[cfg(not(target_env = "msvc"))]
    if let Some(e) = restart_error {
        tracing::warn!(error = %e, "could not restart on jemalloc; heap profiles unavailable");
    }
    log_start(&loaded.config, stream);
    for key in &loaded.unknown_keys {
        tracing::warn!(key = %key, "unknown config key ignored");
    }
    for key in loaded.config.not_implemented() {
        tracing::warn!(key, "config key not implemented in this version; ignored");
    }
    match cli.command {
        Some(Command::Probe) => print_report(&kepler_agent::probe::report(&loaded.config)),
        None => kepler_agent::agent::run(loaded.config),
    }
}

/// Writes the probe report to stdout. A reader that went away (`kepler probe | true`) has
/// nothing left to be told: that is a clean exit, not a panic as `print!` would make it.
fn print_report(report: &str) -> Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(report.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => anyhow::Context::context(other, "writing the probe report"),
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

/// Replaces this process (same pid, same arguments) with one that allocates with jemalloc and
/// profiles its heap. Returns only on failure.
#[cfg(not(target_env = "msvc"))]
fn restart_with_heap_profiling(config_file: Option<&std::path::Path>) -> std::io::Error {
    use std::os::unix::ffi::OsStrExt;
    use std::os::unix::process::CommandExt;
    // The new process reads the configuration again: a pipe (`--config.file <(...)`) would be
    // empty by then and silently change the configuration.
    if config_file.is_some_and(|f| !f.is_file()) {
        return std::io::Error::other(
            "--config.file is not a regular file and cannot be read twice",
        );
    }
    let exe = match std::env::current_exe() {
        Ok(exe) => exe,
        Err(e) => return e,
    };
    let mut args = std::env::args_os();
    let mut command = std::process::Command::new(exe);
    if let Some(arg0) = args.next() {
        command.arg0(arg0);
    }
    let name = std::ffi::OsStr::from_bytes(allocator::ENV.to_bytes());
    command.args(args).env(name, "1").exec()
}

//! Command-line flags: upstream Kepler's names (DESIGN §4), mapped onto config overrides.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use kepler_exporters::MetricsLevel;

use crate::config::{GoDuration, LogLevel, Overrides};

#[derive(Debug, Parser)]
#[command(
    name = "kepler",
    version,
    about = "Measures node power and attributes it to processes, containers, pods and VMs"
)]
pub struct Cli {
    /// YAML config file (upstream keys); flags override it.
    #[arg(long = "config.file", value_name = "FILE")]
    pub config_file: Option<PathBuf>,
    /// trace, debug, info, warn or error (any case).
    #[arg(long = "log.level", value_name = "LEVEL")]
    pub log_level: Option<LogLevel>,
    /// Where the host's sysfs is mounted.
    #[arg(long = "host.sysfs", value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Where the host's procfs is mounted.
    #[arg(long = "host.procfs", value_name = "DIR")]
    pub procfs: Option<PathBuf>,
    /// Sampling interval (5s, 500ms, 1m).
    #[arg(long = "monitor.interval", value_name = "DURATION")]
    pub interval: Option<GoDuration>,
    /// Address to serve metrics on (repeatable), e.g. :28282 or 127.0.0.1:9102.
    #[arg(long = "web.listen-address", value_name = "ADDR")]
    pub listen_addresses: Vec<String>,
    /// Exporter-toolkit web config (TLS, basic auth).
    #[arg(long = "web.config-file", value_name = "FILE")]
    pub web_config_file: Option<PathBuf>,
    /// Enable Kubernetes pod identity.
    #[arg(long = "kube.enable", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub kube_enable: Option<bool>,
    /// Kubeconfig file (default: in-cluster).
    #[arg(long = "kube.config", value_name = "FILE")]
    pub kube_config: Option<PathBuf>,
    /// This node's name in Kubernetes (also the `node_name` label).
    #[arg(long = "kube.node-name", value_name = "NAME")]
    pub kube_node_name: Option<String>,
    /// Metric levels to export (repeatable, or comma-separated): node, process, container, vm,
    /// pod, or all; any case.
    #[arg(long = "metrics", value_name = "LEVEL")]
    pub metrics: Vec<MetricsLevel>,
    /// Also print a summary of every tick to stdout.
    #[arg(long = "exporter.stdout", value_name = "BOOL", num_args = 0..=1, default_missing_value = "true")]
    pub exporter_stdout: Option<bool>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every usage source and power meter with whether it works on this host, and why
    /// not; then exit.
    Probe,
}

impl Cli {
    pub fn overrides(&self) -> Overrides {
        Overrides {
            log_level: self.log_level,
            sysfs: self.sysfs.clone(),
            procfs: self.procfs.clone(),
            interval: self.interval,
            listen_addresses: self.listen_addresses.clone(),
            web_config_file: self.web_config_file.clone(),
            kube_enable: self.kube_enable,
            kube_config: self.kube_config.clone(),
            kube_node_name: self.kube_node_name.clone(),
            // Repeated flags add up: `--metrics node --metrics pod` is `--metrics node,pod`.
            metrics: (!self.metrics.is_empty())
                .then(|| self.metrics.iter().flat_map(|m| m.iter()).collect()),
            exporter_stdout: self.exporter_stdout,
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use kepler_exporters::Level;

    use super::*;
    use crate::config::Config;

    fn cli(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("kepler").chain(args.iter().copied()))
    }

    fn levels(list: &[Level]) -> MetricsLevel {
        list.iter().copied().collect()
    }

    #[test]
    fn metrics_flags_accept_lists_all_and_any_case() {
        let node_pod = levels(&[Level::Node, Level::Pod]);
        for (args, expected) in [
            (&["--metrics", "node,pod"][..], node_pod),
            (&["--metrics", "node", "--metrics", "pod"], node_pod),
            (&["--metrics=node, pod"], node_pod),
            (&["--metrics", "all"], MetricsLevel::ALL),
            (&["--metrics", "ALL"], MetricsLevel::ALL),
            (&["--metrics", "NODE"], levels(&[Level::Node])),
            (&["--metrics", "vm", "--metrics", "all"], MetricsLevel::ALL),
        ] {
            let overrides = cli(args).unwrap().overrides();
            assert_eq!(overrides.metrics, Some(expected), "{args:?}");
            // And through the whole load, where these used to be rejected.
            let config = Config::load(None, &overrides).unwrap().config;
            assert_eq!(
                config.exporter.prometheus.metrics_level, expected,
                "{args:?}"
            );
        }
        assert_eq!(cli(&[]).unwrap().overrides().metrics, None);
    }

    #[test]
    fn typed_flags_parse_once() {
        let o = cli(&["--log.level", "DEBUG", "--monitor.interval", "1m30s"])
            .unwrap()
            .overrides();
        assert_eq!(o.log_level, Some(LogLevel::Debug));
        assert_eq!(o.interval, Some(GoDuration(Duration::from_secs(90))));
        assert!(matches!(
            cli(&["probe"]).unwrap().command,
            Some(Command::Probe)
        ));
    }

    #[test]
    fn bad_flag_values_name_the_flag_and_the_value() {
        for (args, flag, value) in [
            (&["--metrics", "nodes"][..], "--metrics", "nodes"),
            (&["--metrics", "node,gpu"], "--metrics", "gpu"),
            (&["--log.level", "loud"], "--log.level", "loud"),
            (
                &["--monitor.interval", "fast"],
                "--monitor.interval",
                "fast",
            ),
        ] {
            let err = cli(args).unwrap_err().to_string();
            assert!(err.contains(flag), "{args:?}: {err} should name {flag}");
            assert!(err.contains(value), "{args:?}: {err} should show {value}");
        }
    }
}

//! Command-line flags: upstream Kepler's names (DESIGN §4), mapped onto config overrides.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use crate::config::Overrides;

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
    /// trace, debug, info, warn or error.
    #[arg(long = "log.level", value_name = "LEVEL")]
    pub log_level: Option<String>,
    /// Where the host's sysfs is mounted.
    #[arg(long = "host.sysfs", value_name = "DIR")]
    pub sysfs: Option<PathBuf>,
    /// Where the host's procfs is mounted.
    #[arg(long = "host.procfs", value_name = "DIR")]
    pub procfs: Option<PathBuf>,
    /// Sampling interval (5s, 500ms, 1m).
    #[arg(long = "monitor.interval", value_name = "DURATION")]
    pub interval: Option<String>,
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
    /// Metric levels to export (repeatable): node, process, container, vm, pod.
    #[arg(long = "metrics", value_name = "LEVEL")]
    pub metrics: Vec<String>,
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
            log_level: self.log_level.clone(),
            sysfs: self.sysfs.clone(),
            procfs: self.procfs.clone(),
            interval: self.interval.clone(),
            listen_addresses: self.listen_addresses.clone(),
            web_config_file: self.web_config_file.clone(),
            kube_enable: self.kube_enable,
            kube_config: self.kube_config.clone(),
            kube_node_name: self.kube_node_name.clone(),
            metrics: self.metrics.clone(),
            exporter_stdout: self.exporter_stdout,
        }
    }
}

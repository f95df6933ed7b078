//! Command-line flags: upstream Kepler's names (DESIGN §4), mapped onto config overrides.

use std::path::PathBuf;

use clap::{Parser, Subcommand};

use kepler_exporters::MetricsLevel;

use crate::config::{GoDuration, LogFormat, LogLevel, Overrides};

/// A boolean as kingpin (Go's `strconv.ParseBool`) reads it: `1 t T TRUE true True`, and the
/// same for false.
fn go_bool(text: &str) -> Result<bool, String> {
    match text {
        "1" | "t" | "T" | "TRUE" | "true" | "True" => Ok(true),
        "0" | "f" | "F" | "FALSE" | "false" | "False" => Ok(false),
        _ => Err(format!("{text:?} is not a boolean (true or false)")),
    }
}

/// A path that may be empty: upstream's flags default to `""`, meaning "none".
fn any_path(text: &str) -> Result<PathBuf, std::convert::Infallible> {
    Ok(PathBuf::from(text))
}

/// Upstream's 25 kingpin flags. Every flag is global, so it may come before or after the
/// subcommand (`kepler probe --config.file X`). Boolean flags follow kingpin: `--flag`,
/// `--flag=false` and `--no-flag`, the last one given wins; a value must be joined with `=` so
/// that `--kube.enable probe` enables Kubernetes and runs `probe`.
#[derive(Debug, Parser)]
#[command(
    name = "kepler",
    version,
    args_override_self = true,
    about = "Measures node power and attributes it to processes, containers, pods and VMs"
)]
pub struct Cli {
    /// YAML config file (upstream keys); flags override it.
    #[arg(long = "config.file", value_name = "FILE", global = true)]
    pub config_file: Option<PathBuf>,
    /// trace, debug, info, warn or error (any case).
    #[arg(long = "log.level", value_name = "LEVEL", global = true)]
    pub log_level: Option<LogLevel>,
    /// text or json (any case).
    #[arg(long = "log.format", value_name = "FORMAT", global = true)]
    pub log_format: Option<LogFormat>,
    /// Where the host's sysfs is mounted.
    #[arg(long = "host.sysfs", value_name = "DIR", global = true)]
    pub sysfs: Option<PathBuf>,
    /// Where the host's procfs is mounted.
    #[arg(long = "host.procfs", value_name = "DIR", global = true)]
    pub procfs: Option<PathBuf>,
    /// Sampling interval (5s, 500ms, 1m); 0 refreshes on scrape.
    #[arg(long = "monitor.interval", value_name = "DURATION", global = true)]
    pub interval: Option<GoDuration>,
    /// Ended workloads kept: -1 all, 0 none.
    #[arg(
        long = "monitor.max-terminated",
        value_name = "COUNT",
        allow_negative_numbers = true,
        global = true
    )]
    pub max_terminated: Option<i64>,
    /// Upstream's Go profiling endpoints (accepted; there is no Go runtime to profile).
    #[arg(long = "debug.pprof", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool, overrides_with = "no_pprof", global = true)]
    pub pprof: Option<bool>,
    #[arg(
        long = "no-debug.pprof",
        hide = true,
        overrides_with = "pprof",
        global = true
    )]
    pub no_pprof: bool,
    /// Address to serve metrics on (repeatable), e.g. :28282 or 127.0.0.1:9102.
    #[arg(long = "web.listen-address", value_name = "ADDR", global = true)]
    pub listen_addresses: Vec<String>,
    /// Exporter-toolkit web config (TLS, basic auth); empty for none.
    #[arg(long = "web.config-file", value_name = "FILE", value_parser = any_path, global = true)]
    pub web_config_file: Option<PathBuf>,
    /// Also print a summary of every tick to stdout.
    #[arg(long = "exporter.stdout", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool, overrides_with = "no_exporter_stdout", global = true)]
    pub exporter_stdout: Option<bool>,
    #[arg(
        long = "no-exporter.stdout",
        hide = true,
        overrides_with = "exporter_stdout",
        global = true
    )]
    pub no_exporter_stdout: bool,
    /// Serve /metrics (false keeps /healthz, /readyz and / served).
    #[arg(long = "exporter.prometheus", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool, overrides_with = "no_exporter_prometheus", global = true)]
    pub exporter_prometheus: Option<bool>,
    #[arg(
        long = "no-exporter.prometheus",
        hide = true,
        overrides_with = "exporter_prometheus",
        global = true
    )]
    pub no_exporter_prometheus: bool,
    /// Metric levels to export (repeatable, or comma-separated): node, process, container, vm,
    /// pod, or all; any case.
    #[arg(long = "metrics", value_name = "LEVEL", global = true)]
    pub metrics: Vec<MetricsLevel>,
    /// Enable Kubernetes pod identity.
    #[arg(long = "kube.enable", value_name = "BOOL", num_args = 0..=1, require_equals = true,
          default_missing_value = "true", value_parser = go_bool, overrides_with = "no_kube_enable", global = true)]
    pub kube_enable: Option<bool>,
    #[arg(
        long = "no-kube.enable",
        hide = true,
        overrides_with = "kube_enable",
        global = true
    )]
    pub no_kube_enable: bool,
    /// Kubeconfig file (default: in-cluster).
    #[arg(long = "kube.config", value_name = "FILE", value_parser = any_path, global = true)]
    pub kube_config: Option<PathBuf>,
    /// This node's name in Kubernetes (also the `node_name` label).
    #[arg(long = "kube.node-name", value_name = "NAME", global = true)]
    pub kube_node_name: Option<String>,
    /// Redfish BMC platform power.
    #[arg(long = "experimental.platform.redfish.enabled", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool,
          overrides_with = "no_redfish_enabled", global = true)]
    pub redfish_enabled: Option<bool>,
    #[arg(
        long = "no-experimental.platform.redfish.enabled",
        hide = true,
        overrides_with = "redfish_enabled",
        global = true
    )]
    pub no_redfish_enabled: bool,
    /// This node's name in the Redfish config file.
    #[arg(
        long = "experimental.platform.redfish.node-name",
        value_name = "NAME",
        global = true
    )]
    pub redfish_node_name: Option<String>,
    /// The Redfish BMC config file.
    #[arg(long = "experimental.platform.redfish.config-file", value_name = "FILE", value_parser = any_path, global = true)]
    pub redfish_config_file: Option<PathBuf>,
    /// Try hwmon before RAPL.
    #[arg(long = "experimental.hwmon.force-enabled", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool,
          overrides_with = "no_hwmon_force_enabled", global = true)]
    pub hwmon_force_enabled: Option<bool>,
    #[arg(
        long = "no-experimental.hwmon.force-enabled",
        hide = true,
        overrides_with = "hwmon_force_enabled",
        global = true
    )]
    pub no_hwmon_force_enabled: bool,
    /// Upstream v0.11.4's hwmon switch (accepted; hwmon is always in the cpu chain).
    #[arg(long = "experimental.hwmon.enabled", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool,
          overrides_with = "no_hwmon_enabled", global = true)]
    pub hwmon_enabled: Option<bool>,
    #[arg(
        long = "no-experimental.hwmon.enabled",
        hide = true,
        overrides_with = "hwmon_enabled",
        global = true
    )]
    pub no_hwmon_enabled: bool,
    /// hwmon zones to keep (repeatable).
    #[arg(long = "experimental.hwmon.zones", value_name = "ZONE", global = true)]
    pub hwmon_zones: Vec<String>,
    /// GPU power.
    #[arg(long = "experimental.gpu.enabled", value_name = "BOOL", num_args = 0..=1,
          require_equals = true, default_missing_value = "true", value_parser = go_bool,
          overrides_with = "no_gpu_enabled", global = true)]
    pub gpu_enabled: Option<bool>,
    #[arg(
        long = "no-experimental.gpu.enabled",
        hide = true,
        overrides_with = "gpu_enabled",
        global = true
    )]
    pub no_gpu_enabled: bool,
    /// GPU idle power in watts (0: learnt).
    #[arg(
        long = "experimental.gpu.idle-power",
        value_name = "WATTS",
        global = true
    )]
    pub gpu_idle_power: Option<f64>,
    /// dcgm-exporter metrics URL, polled by the `dcgm` GPU meter (empty: none).
    #[arg(
        long = "experimental.gpu.dcgm-endpoint",
        value_name = "URL",
        global = true
    )]
    pub gpu_dcgm_endpoint: Option<String>,
    #[command(subcommand)]
    pub command: Option<Command>,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Print every usage source and power meter with whether it works on this host, and why
    /// not; then exit.
    Probe,
}

/// `args` with the subcommand moved to the end. clap replaces a global repeatable flag given
/// before the subcommand by the same flag given after it; with every flag before the
/// subcommand, repeated flags add up wherever they were written. A token is the subcommand
/// when it is a subcommand name and not the value of a flag written as `--flag value`.
fn subcommand_last(mut args: Vec<std::ffi::OsString>) -> Vec<std::ffi::OsString> {
    use clap::CommandFactory;
    let command = Cli::command();
    let subcommands: Vec<String> = command
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .collect();
    let takes_next = |flag: &str| {
        let Some(long) = flag.strip_prefix("--").filter(|f| !f.contains('=')) else {
            return false;
        };
        command.get_arguments().any(|a| {
            a.get_long() == Some(long)
                && a.get_action().takes_values()
                && !a.is_require_equals_set()
        })
    };
    let mut i = 1;
    while i < args.len() {
        let text = args[i].to_string_lossy().into_owned();
        if text == "--" {
            break;
        }
        if subcommands.contains(&text) {
            let sub = args.remove(i);
            args.push(sub);
            break;
        }
        i += if takes_next(&text) { 2 } else { 1 };
    }
    args
}

/// A kingpin boolean: `--no-flag` (the later of the two, clap keeps only that) is `false`.
fn negatable(value: Option<bool>, negated: bool) -> Option<bool> {
    if negated {
        Some(false)
    } else {
        value
    }
}

/// Upstream writes `""` for "not set" in flags as in files.
fn non_empty<T: Clone>(value: &Option<T>, text: impl Fn(&T) -> bool) -> Option<Option<T>> {
    value.as_ref().map(|v| text(v).then(|| v.clone()))
}

impl Cli {
    /// Parses `args` (the program name first) as kingpin would: flags anywhere around the
    /// subcommand, repeatable flags adding up across it.
    pub fn parse_args<I, T>(args: I) -> Result<Cli, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString>,
    {
        Cli::try_parse_from(subcommand_last(args.into_iter().map(Into::into).collect()))
    }

    pub fn overrides(&self) -> Overrides {
        Overrides {
            log_level: self.log_level,
            log_format: self.log_format,
            sysfs: self.sysfs.clone(),
            procfs: self.procfs.clone(),
            interval: self.interval,
            max_terminated: self.max_terminated,
            pprof: negatable(self.pprof, self.no_pprof),
            listen_addresses: self.listen_addresses.clone(),
            web_config_file: non_empty(&self.web_config_file, |p| !p.as_os_str().is_empty()),
            kube_enable: negatable(self.kube_enable, self.no_kube_enable),
            kube_config: non_empty(&self.kube_config, |p| !p.as_os_str().is_empty()),
            kube_node_name: self.kube_node_name.clone().filter(|n| !n.is_empty()),
            // Repeated flags add up: `--metrics node --metrics pod` is `--metrics node,pod`.
            metrics: (!self.metrics.is_empty())
                .then(|| self.metrics.iter().flat_map(|m| m.iter()).collect()),
            exporter_stdout: negatable(self.exporter_stdout, self.no_exporter_stdout),
            exporter_prometheus: negatable(self.exporter_prometheus, self.no_exporter_prometheus),
            redfish_enabled: negatable(self.redfish_enabled, self.no_redfish_enabled),
            redfish_node_name: self.redfish_node_name.clone().filter(|n| !n.is_empty()),
            redfish_config_file: self
                .redfish_config_file
                .clone()
                .filter(|p| !p.as_os_str().is_empty()),
            hwmon_force_enabled: negatable(self.hwmon_force_enabled, self.no_hwmon_force_enabled),
            hwmon_enabled: negatable(self.hwmon_enabled, self.no_hwmon_enabled),
            hwmon_zones: self.hwmon_zones.clone(),
            gpu_enabled: negatable(self.gpu_enabled, self.no_gpu_enabled),
            gpu_idle_power: self.gpu_idle_power,
            gpu_dcgm_endpoint: non_empty(&self.gpu_dcgm_endpoint, |u| !u.is_empty()),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::time::Duration;

    use kepler_exporters::Level;

    use super::*;
    use crate::config::Config;

    fn cli(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::parse_args(std::iter::once("kepler").chain(args.iter().copied()))
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

    /// Loads the configuration `args` give (no file). Redfish must name its BMC file whenever
    /// it is on (the meter reads the file later), so every load names one.
    fn loaded(args: &[&str]) -> Config {
        let mut args = args.to_vec();
        if !args.iter().any(|a| a.contains("redfish.config-file")) {
            args.push("--experimental.platform.redfish.config-file=/etc/kepler/redfish.yaml");
        }
        let cli = cli(&args).unwrap_or_else(|e| panic!("{args:?}: {e}"));
        Config::load(None, &cli.overrides())
            .unwrap_or_else(|e| panic!("{args:?}: {e}"))
            .config
    }

    type Check = fn(&Config) -> bool;

    /// Every upstream flag (kingpin, v0.11 and v0.11.4), each as `--flag value` and
    /// `--flag=value`, before and after the subcommand.
    #[test]
    fn every_upstream_valued_flag_in_both_spellings_and_positions() {
        let cases: &[(&str, &str, Check)] = &[
            ("--log.level", "debug", |c| c.log.level == LogLevel::Debug),
            ("--log.format", "json", |c| c.log.format == LogFormat::Json),
            ("--host.sysfs", "/host/sys", |c| {
                c.host.sysfs.as_path() == Path::new("/host/sys")
            }),
            ("--host.procfs", "/host/proc", |c| {
                c.host.procfs.as_path() == Path::new("/host/proc")
            }),
            ("--monitor.interval", "10s", |c| {
                c.monitor.interval.0 == Duration::from_secs(10)
            }),
            ("--monitor.max-terminated", "-1", |c| {
                c.monitor.max_terminated == -1
            }),
            ("--web.config-file", "/etc/web.yaml", |c| {
                c.web.config_file == Some(PathBuf::from("/etc/web.yaml"))
            }),
            ("--web.config-file", "", |c| c.web.config_file.is_none()),
            ("--web.listen-address", "127.0.0.1:9102", |c| {
                c.web.listen_addresses == ["127.0.0.1:9102"]
            }),
            ("--metrics", "pod", |c| {
                c.exporter.prometheus.metrics_level == levels(&[Level::Pod])
            }),
            ("--kube.config", "/kubeconfig", |c| {
                c.kube.config == Some(PathBuf::from("/kubeconfig"))
            }),
            ("--kube.node-name", "n1", |c| {
                c.kube.node_name.as_deref() == Some("n1")
            }),
            ("--experimental.platform.redfish.node-name", "n1", |c| {
                c.experimental.platform.redfish.node_name.as_deref() == Some("n1")
            }),
            (
                "--experimental.platform.redfish.config-file",
                "/bmc.yaml",
                |c| c.experimental.platform.redfish.config_file == Some(PathBuf::from("/bmc.yaml")),
            ),
            ("--experimental.hwmon.zones", "power1", |c| {
                c.experimental.hwmon.zones == ["power1"]
            }),
            ("--experimental.gpu.idle-power", "17.5", |c| {
                c.experimental.gpu.idle_power == Some(17.5)
            }),
            (
                "--experimental.gpu.dcgm-endpoint",
                "http://10.0.0.1:9400/metrics",
                |c| {
                    c.experimental.gpu.dcgm_endpoint.as_deref()
                        == Some("http://10.0.0.1:9400/metrics")
                },
            ),
        ];
        for (flag, value, check) in cases {
            let joined = format!("{flag}={value}");
            for args in [
                vec![*flag, *value],
                vec![joined.as_str()],
                vec!["probe", *flag, *value],
                vec![joined.as_str(), "probe"],
            ] {
                assert!(check(&loaded(&args)), "{args:?}");
                let probe = args.contains(&"probe");
                let parsed = cli(&args).unwrap();
                assert_eq!(
                    matches!(parsed.command, Some(Command::Probe)),
                    probe,
                    "{args:?}"
                );
            }
        }
        // Cumulative flags add up as with kingpin, on both sides of the subcommand; a flag's
        // value that happens to be `probe` stays its value.
        let c = loaded(&[
            "--experimental.hwmon.zones",
            "power1",
            "probe",
            "--experimental.hwmon.zones=power2",
        ]);
        assert_eq!(c.experimental.hwmon.zones, ["power1", "power2"]);
        let parsed = cli(&["--kube.node-name", "probe", "--metrics", "node", "probe"]).unwrap();
        assert_eq!(parsed.kube_node_name.as_deref(), Some("probe"));
        assert!(matches!(parsed.command, Some(Command::Probe)));
        let parsed = cli(&["--kube.node-name", "probe"]).unwrap();
        assert!(parsed.command.is_none());
        let c = loaded(&[
            "--experimental.hwmon.zones",
            "power1",
            "--experimental.hwmon.zones=power2",
        ]);
        assert_eq!(c.experimental.hwmon.zones, ["power1", "power2"]);
        let c = loaded(&["--web.listen-address", ":1", "--web.listen-address=:2"]);
        assert_eq!(c.web.listen_addresses, [":1", ":2"]);
    }

    /// Every upstream boolean flag: bare, `=true`, `=false`, Go's other spellings, kingpin's
    /// `--no-` negation (the last given wins), and a bare flag before the subcommand.
    #[test]
    fn every_upstream_boolean_flag_with_negation() {
        let flags: &[(&str, Check)] = &[
            ("--debug.pprof", |c| c.debug.pprof.enabled),
            ("--exporter.stdout", |c| c.exporter.stdout.enabled),
            ("--exporter.prometheus", |c| c.exporter.prometheus.enabled),
            ("--kube.enable", |c| c.kube.enabled),
            ("--experimental.platform.redfish.enabled", |c| {
                c.experimental.platform.redfish.enabled
            }),
            ("--experimental.hwmon.force-enabled", |c| {
                c.experimental.hwmon.force_enabled
            }),
            ("--experimental.hwmon.enabled", |c| {
                c.experimental.hwmon.enabled == Some(true)
            }),
            ("--experimental.gpu.enabled", |c| c.experimental.gpu.enabled),
        ];
        for (flag, get) in flags {
            let negated = format!("--no-{}", &flag[2..]);
            for (args, expected) in [
                (vec![flag.to_string()], true),
                (vec![format!("{flag}=true")], true),
                (vec![format!("{flag}=True")], true),
                (vec![format!("{flag}=1")], true),
                (vec![format!("{flag}=false")], false),
                (vec![format!("{flag}=F")], false),
                (vec![negated.clone()], false),
                (vec![flag.to_string(), negated.clone()], false),
                (vec![negated.clone(), flag.to_string()], true),
                (vec!["probe".into(), negated.clone()], false),
                (vec!["probe".into(), flag.to_string()], true),
            ] {
                let args: Vec<&str> = args.iter().map(String::as_str).collect();
                // `--exporter.prometheus=false` needs no listen address; others keep the default.
                assert_eq!(get(&loaded(&args)), expected, "{args:?}");
            }
            // A bare boolean never takes the subcommand as its value.
            let parsed = cli(&[flag, "probe"]).unwrap_or_else(|e| panic!("{flag} probe: {e}"));
            assert!(
                matches!(parsed.command, Some(Command::Probe)),
                "{flag} probe"
            );
            assert!(get(&loaded(&[flag, "probe"])), "{flag} probe");
            assert!(cli(&[&format!("{flag}=maybe")]).is_err(), "{flag}=maybe");
        }
    }

    #[test]
    fn config_file_flag_before_and_after_the_subcommand() {
        for args in [
            &["--config.file", "/etc/kepler.yaml", "probe"][..],
            &["probe", "--config.file", "/etc/kepler.yaml"],
            &["probe", "--config.file=/etc/kepler.yaml"],
        ] {
            let parsed = cli(args).unwrap();
            assert_eq!(
                parsed.config_file,
                Some(PathBuf::from("/etc/kepler.yaml")),
                "{args:?}"
            );
            assert!(matches!(parsed.command, Some(Command::Probe)), "{args:?}");
        }
        assert!(cli(&["--no-such-flag"]).is_err());
        assert!(cli(&["--monitor.max-terminated", "many"]).is_err());
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

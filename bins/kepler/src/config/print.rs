//! The effective configuration as YAML under upstream's keys, printed at start-up as upstream
//! prints its own (text logs at info level). Written out key by key, so a section added to
//! `Config` does not appear here until someone decides how it is shown; URLs lose any
//! `user:password@` part, since logs travel further than config files.

use std::fmt::{Display, Write as _};
use std::path::Path;

use super::{Config, EbpfMode};

/// `scheme://user:pass@host/...` without the credentials.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    match rest[..authority_end].rfind('@') {
        Some(at) => format!("{scheme}://REDACTED@{}", &rest[at + 1..]),
        None => url.to_string(),
    }
}

/// A flow sequence; items that are plain words stay bare as upstream prints them (`[package,
/// dram]`), anything else is quoted (as JSON, which YAML reads) so the printed config reads
/// back as the same values.
fn list<T: Display>(items: &[T]) -> String {
    let items: Vec<String> = items.iter().map(|i| scalar(&i.to_string())).collect();
    format!("[{}]", items.join(", "))
}

/// A scalar bare when it is a plain word or path (`/sys`, as upstream prints it), else quoted:
/// a path may hold anything, `: ` or a line break included, and must still read back.
fn scalar(item: &str) -> String {
    let plain = item
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '/')
        && item
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
        && !matches!(
            item.to_ascii_lowercase().as_str(),
            "true" | "false" | "null" | "yes" | "no" | "on" | "off" | "y" | "n"
        );
    if plain {
        item.to_string()
    } else {
        quoted(item)
    }
}

/// A double-quoted scalar. JSON's escapes (`\"`, `\\`, `\uXXXX`) are YAML's too; Rust's
/// `{:?}` would write `\u{301}`, which YAML reads differently.
fn quoted(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| format!("{s:?}"))
}

fn path(p: &Option<impl AsRef<Path>>) -> String {
    p.as_ref()
        .map(|p| quoted(&p.as_ref().display().to_string()))
        .unwrap_or_else(|| "\"\"".into())
}

fn text(s: &Option<String>) -> String {
    quoted(&s.as_deref().map(redact_url).unwrap_or_default())
}

impl Config {
    /// The effective configuration (defaults, file and flags applied) as YAML.
    pub fn effective_yaml(&self) -> String {
        let mut y = String::new();
        let c = self;
        let x = &c.experimental;
        let _ = write!(
            y,
            "log:\n  level: {}\n  format: {}\n\
             host:\n  sysfs: {}\n  procfs: {}\n\
             monitor:\n  interval: {}\n  staleness: {}\n  maxTerminated: {}\n  \
             minTerminatedEnergyThreshold: {}\n  terminatedRetention: {}\n\
             cpu:\n  preferredMeters: {}\n\
             rapl:\n  zones: {}\n\
             exporter:\n  stdout:\n    enabled: {}\n  prometheus:\n    enabled: {}\n    \
             debugCollectors: {}\n    metricsLevel: [{}]\n\
             web:\n  configFile: {}\n  listenAddresses: {}\n\
             debug:\n  pprof:\n    enabled: {}\n\
             kube:\n  enabled: {}\n  config: {}\n  nodeName: {}\n  podInformer:\n    mode: {}\n    \
             pollInterval: {}\n    kubeletURL: {}\n    kubeletCAFile: {}\n    kubeletInsecure: {}\n    \
             tokenFile: {}\n",
            c.log.level,
            c.log.format,
            scalar(&c.host.sysfs.display().to_string()),
            scalar(&c.host.procfs.display().to_string()),
            humantime::format_duration(c.monitor.interval.0),
            humantime::format_duration(c.monitor.staleness.0),
            c.monitor.max_terminated,
            c.monitor.min_terminated_energy_threshold,
            humantime::format_duration(c.monitor.terminated_retention.0),
            list(&c.cpu.preferred_meters),
            list(&c.rapl.zones),
            c.exporter.stdout.enabled,
            c.exporter.prometheus.enabled,
            list(&c.exporter.prometheus.debug_collectors),
            c.exporter
                .prometheus
                .metrics_level
                .to_string()
                .replace(',', ", "),
            path(&c.web.config_file),
            list(&c.web.listen_addresses),
            c.debug.pprof.enabled,
            c.kube.enabled,
            path(&c.kube.config),
            text(&c.kube.node_name),
            c.kube.pod_informer.mode,
            humantime::format_duration(c.kube.pod_informer.poll_interval.0),
            text(&c.kube.pod_informer.kubelet_url),
            path(&c.kube.pod_informer.kubelet_ca_file),
            c.kube.pod_informer.kubelet_insecure,
            path(&c.kube.pod_informer.token_file),
        );
        let _ = write!(
            y,
            "experimental:\n  platform:\n    redfish:\n      enabled: {}\n      nodeName: {}\n      \
             configFile: {}\n  hwmon:\n    forceEnabled: {}\n    zones: {}\n  gpu:\n    enabled: {}\n    \
             idlePower: {}\n    dcgmEndpoint: {}\n\
             dev:\n  fake-cpu-meter:\n    enabled: {}\n    zones: {}\n",
            x.platform.redfish.enabled,
            text(&x.platform.redfish.node_name),
            path(&x.platform.redfish.config_file),
            x.hwmon.force_enabled,
            list(&x.hwmon.zones),
            x.gpu.enabled,
            x.gpu.idle_power.unwrap_or(0.0),
            text(&x.gpu.dcgm_endpoint),
            c.dev.fake_cpu_meter.enabled,
            list(&c.dev.fake_cpu_meter.zones),
        );
        let ebpf = match c.ebpf.enabled {
            EbpfMode::Auto => "auto",
            EbpfMode::On => "true",
            EbpfMode::Off => "false",
        };
        let e = &c.estimator;
        let _ = write!(
            y,
            "attribution:\n  idlePolicy: {}\n\
             ebpf:\n  enabled: {ebpf}\n  exportFeatures: {}\n  maxProcesses: {}\n  exits: {}\n\
             estimator:\n  model: {}\n  modelServerURL: {}\n  family: {}\n  outputType: {}\n\
             workloads:\n  podIdsFromCgroups: {}\n",
            c.attribution.idle_policy,
            c.ebpf.export_features,
            c.ebpf.max_processes,
            c.ebpf.exits.as_str(),
            quoted(&redact_url(&e.model)),
            text(&e.model_server_url),
            e.family,
            e.output_type,
            c.workloads.pod_ids_from_cgroups,
        );
        y
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn list_items_that_are_not_plain_words_are_quoted() {
        assert_eq!(
            super::list(&["package", "dram", ":28282", "[::1]:0", "true", "", "a b"]),
            r#"[package, dram, ":28282", "[::1]:0", "true", "", "a b"]"#
        );
        // A combining accent stays as is (YAML reads it), a control character is escaped.
        assert_eq!(super::quoted("e\u{301}\u{1}\""), "\"e\u{301}\\u0001\\\"\"");
    }

    use super::*;

    /// Found by the 1,000,000-case run of the config fuzz target: a single-quoted path that
    /// spans lines reads as one line with `: ` in it, which was printed bare.
    #[test]
    fn paths_that_are_not_plain_are_quoted_and_read_back() {
        let mut c = Config::default();
        c.host.sysfs = " procfs: /host/proc monitor: interval: 5s".into();
        c.host.procfs = "/proc\nx: 'y'".into();
        c.estimator.model = "mo\u{301}del".into();
        let yaml = c.effective_yaml();
        let back = Config::from_yaml(&yaml, Path::new("printed"))
            .unwrap()
            .config;
        assert_eq!(back.host.sysfs, c.host.sysfs, "{yaml}");
        assert_eq!(back.host.procfs, c.host.procfs, "{yaml}");
        assert_eq!(back.estimator.model, c.estimator.model, "{yaml}");
        assert!(Config::default()
            .effective_yaml()
            .contains("  sysfs: /sys\n"));
    }

    #[test]
    fn urls_lose_their_credentials() {
        assert_eq!(
            redact_url("https://user:secret@models.example/x?a=b@c"),
            "https://REDACTED@models.example/x?a=b@c"
        );
        assert_eq!(
            redact_url("http://host:9400/metrics"),
            "http://host:9400/metrics"
        );
        assert_eq!(redact_url("builtin"), "builtin");
    }

    #[test]
    fn effective_yaml_is_yaml_of_the_effective_values() {
        let mut c = Config::default();
        c.estimator.model_server_url = Some("https://u:p@server:8100".into());
        c.web.listen_addresses = vec![":28282".into(), "127.0.0.1:9".into()];
        let yaml = c.effective_yaml();
        assert!(!yaml.contains("u:p"), "{yaml}");
        // It reads back as the same configuration: every printed key is a real key.
        let loaded = Config::from_yaml(&yaml, Path::new("printed")).unwrap();
        assert!(loaded.unknown_keys.is_empty(), "{:?}", loaded.unknown_keys);
        let mut back = loaded.config;
        assert_eq!(
            back.estimator.model_server_url.as_deref(),
            Some("https://REDACTED@server:8100")
        );
        back.estimator.model_server_url = c.estimator.model_server_url.clone();
        assert_eq!(back, c, "{yaml}");
    }
}

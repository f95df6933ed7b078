use std::path::{Path, PathBuf};
use std::time::Duration;

use kepler_core::{IdlePolicy, PowerDomain, Watts};
use kepler_exporters::{Level, MetricsLevel};
use kepler_meters::MeterName;

use super::*;

fn parse(text: &str) -> Result<Loaded, ConfigError> {
    Config::from_yaml(text, Path::new("test.yaml"))
}

fn config(text: &str) -> Config {
    let loaded = parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert!(loaded.unknown_keys.is_empty(), "{:?}", loaded.unknown_keys);
    loaded.config
}

/// A file's configuration that passes every check, as `load` requires.
fn valid(text: &str) -> Config {
    let c = config(text);
    c.validate().unwrap_or_else(|e| panic!("{text}: {e}"));
    c
}

fn meters(names: &[&str]) -> Vec<MeterName> {
    names.iter().map(|n| n.parse().unwrap()).collect()
}

fn levels(list: &[Level]) -> MetricsLevel {
    list.iter().copied().collect()
}

fn cpu_chain(c: &Config) -> Vec<String> {
    let chains = c.meter_chains();
    let cpu = chains
        .iter()
        .find(|c| c.domain == PowerDomain::Cpu)
        .unwrap();
    cpu.meters.iter().map(|m| m.to_string()).collect()
}

#[test]
fn defaults_match_upstream() {
    let c = Config::default();
    assert_eq!(c.log.level, LogLevel::Info);
    assert_eq!(c.log.format, LogFormat::Text);
    assert_eq!(c.monitor.interval.0, Duration::from_secs(5));
    assert_eq!(c.monitor.staleness.0, Duration::from_millis(500));
    assert_eq!(c.monitor.max_terminated, 500);
    assert_eq!(c.cpu.preferred_meters, meters(&["rapl", "hwmon"]));
    assert_eq!(cpu_chain(&c), vec!["rapl", "hwmon", "model"]);
    assert_eq!(c.exporter.prometheus.metrics_level, MetricsLevel::ALL);
    assert_eq!(c.web.listen_addresses, vec![":28282"]);
    assert_eq!(c.host.procfs, PathBuf::from("/proc"));
    assert!(c.exporter.prometheus.enabled);
    assert_eq!(c.kube.pod_informer.mode, PodInformerMode::Kubelet);
    assert_eq!(c.kube.pod_informer.poll_interval.0, Duration::from_secs(15));
    assert_eq!(c.attribution.idle_policy(), IdlePolicy::Ratio);
    assert_eq!(c.estimator.family, EstimatorFamily::Rapl);
    assert_eq!(c.estimator.output_type, EstimatorOutput::Auto);
    assert_eq!(c, config(""), "an empty file is the defaults");
}

#[test]
fn upstream_keys_parse() {
    let c = config(
        "log:\n  level: debug\nhost:\n  sysfs: /host/sys\nmonitor:\n  interval: 1m30s\n  maxTerminated: -1\n\
         rapl:\n  zones: [package, dram]\nexporter:\n  prometheus:\n    metricsLevel: [node, pod]\n\
         dev:\n  fake-cpu-meter:\n    enabled: true\n    zones: [package]\n\
         web:\n  listenAddresses: [\"127.0.0.1:9999\"]\n",
    );
    assert_eq!(c.ebpf.enabled, EbpfMode::Auto);
    assert_eq!(c.log.level, LogLevel::Debug);
    assert_eq!(c.host.sysfs, PathBuf::from("/host/sys"));
    assert_eq!(c.monitor.interval.0, Duration::from_secs(90));
    assert_eq!(c.monitor.max_terminated, -1);
    assert_eq!(c.rapl.zones, vec!["package", "dram"]);
    assert_eq!(
        c.exporter.prometheus.metrics_level,
        levels(&[Level::Node, Level::Pod])
    );
    assert!(c.dev.fake_cpu_meter.enabled);
    assert_eq!(cpu_chain(&c), vec!["fake"]);
    assert_eq!(c.web.listen_addresses, vec!["127.0.0.1:9999"]);
}

#[test]
fn platform_meter_keys_parse_into_the_meters_settings() {
    let c = valid(
        "kube:\n  nodeName: kube-node\nmonitor:\n  interval: 2s\nexperimental:\n  platform:\n    redfish:\n      enabled: true\n      nodeID: bmc-node\n      configFile: /etc/kepler/redfish.yaml\n      httpTimeout: 3s\n      staleness: 1m\n\
         ipmi:\n  enabled: true\n  interface: LanPlus\n  address: 10.0.0.9:1623\n  username: root\n  passwordFile: /run/secrets/ipmi\n  timeout: 7s\n",
    );
    let s = setup_settings(&c);
    assert_eq!(s.node_name, "kube-node");
    assert_eq!(s.poll_interval, Duration::from_secs(2));
    let r = &s.redfish;
    assert!(r.enabled);
    assert_eq!(r.node_name.as_deref(), Some("bmc-node"));
    assert_eq!(
        r.config_file,
        Some(PathBuf::from("/etc/kepler/redfish.yaml"))
    );
    assert_eq!(r.http_timeout, Duration::from_secs(3));
    assert_eq!(r.staleness, Duration::from_secs(60));
    let i = &s.ipmi;
    assert!(i.enabled);
    assert_eq!(i.interface, kepler_meters::IpmiInterface::Lanplus);
    assert_eq!(i.address.as_deref(), Some("10.0.0.9:1623"));
    assert_eq!(i.password_file, Some(PathBuf::from("/run/secrets/ipmi")));
    assert_eq!(i.ipmitool, PathBuf::from("ipmitool"));
    assert_eq!(i.timeout, Duration::from_secs(7));
    assert_eq!(i.staleness, Duration::from_secs(30));
    // Defaults: both off, upstream's 5s timeout.
    let d = setup_settings(&Config::default());
    assert!(!d.redfish.enabled && !d.ipmi.enabled);
    assert_eq!(d.redfish.http_timeout, Duration::from_secs(5));
    let err = parse("ipmi:\n  interface: serial\n")
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("ipmi.interface") && err.contains("open, lanplus"),
        "{err}"
    );
}

/// Closed choices are read in any case, as upstream's names are.
#[test]
fn closed_choices_parse_in_any_case() {
    let node_pod = levels(&[Level::Node, Level::Pod]);
    type Check<'a> = &'a dyn Fn(&Config) -> bool;
    let cases: &[(&str, Check)] = &[
        ("log:\n  level: DEBUG\n", &|c| {
            c.log.level == LogLevel::Debug
        }),
        ("log:\n  level: Warn\n", &|c| c.log.level == LogLevel::Warn),
        ("log:\n  format: JSON\n", &|c| {
            c.log.format == LogFormat::Json
        }),
        (
            "attribution:\n  idlePolicy: Baseline\n  idleBaselineWatts: 20\n",
            &|c| {
                c.attribution.idle_policy()
                    == IdlePolicy::Baseline {
                        configured: Some(Watts(20.0)),
                        low_usage_ratio: 0.1,
                    }
            },
        ),
        ("estimator:\n  family: PLATFORM\n", &|c| {
            c.estimator.family == EstimatorFamily::Platform
        }),
        ("estimator:\n  outputType: dynpower\n", &|c| {
            c.estimator.output_type == EstimatorOutput::DynPower
        }),
        ("estimator:\n  outputType: AbsPower\n", &|c| {
            c.estimator.output_type == EstimatorOutput::AbsPower
        }),
        ("kube:\n  podInformer:\n    mode: APIServer\n", &|c| {
            c.kube.pod_informer.mode == PodInformerMode::Apiserver
        }),
        (
            "kube:\n  podInformer:\n    kubeletURL: https://10.0.0.1:10250\n    \
             kubeletCAFile: /ca.pem\n    tokenFile: /token\n",
            &|c| {
                let s = c.kube.informer_settings("n1");
                s.kubelet.url.as_deref() == Some("https://10.0.0.1:10250")
                    && s.kubelet.trust == kepler_kube::KubeletTrust::CaFile("/ca.pem".into())
                    && s.kubelet.token_file == Some(PathBuf::from("/token"))
                    && s.cluster == kepler_kube::Cluster::InCluster
                    && s.node_name == "n1"
            },
        ),
        (
            "exporter:\n  prometheus:\n    metricsLevel: [node, pod]\n",
            &|c| c.exporter.prometheus.metrics_level == node_pod,
        ),
        ("exporter:\n  prometheus:\n    metricsLevel: all\n", &|c| {
            c.exporter.prometheus.metrics_level == MetricsLevel::ALL
        }),
        (
            "exporter:\n  prometheus:\n    metricsLevel: node,pod\n",
            &|c| c.exporter.prometheus.metrics_level == node_pod,
        ),
        (
            "exporter:\n  prometheus:\n    metricsLevel: [NODE, Pod]\n",
            &|c| c.exporter.prometheus.metrics_level == node_pod,
        ),
        // Upstream's ParseLevel: an empty list is every level.
        ("exporter:\n  prometheus:\n    metricsLevel: []\n", &|c| {
            c.exporter.prometheus.metrics_level == MetricsLevel::ALL
        }),
        ("cpu:\n  preferredMeters: [RAPL, Hwmon]\n", &|c| {
            cpu_chain(c) == ["rapl", "hwmon", "model"]
        }),
        ("cpu:\n  preferredMeters: [hwmon, MODEL, fake]\n", &|c| {
            cpu_chain(c) == ["hwmon", "model", "fake"]
        }),
        ("cpu:\n  preferredMeters: []\n", &|c| {
            cpu_chain(c) == ["model"]
        }),
    ];
    for (yaml, check) in cases {
        let loaded = valid(yaml);
        assert!(check(&loaded), "{yaml}: {loaded:#?}");
    }
}

#[test]
fn invalid_values_name_their_key_and_the_value() {
    for (yaml, key, value) in [
        ("log:\n  level: loud\n", "log.level", "loud"),
        ("log:\n  format: xml\n", "log.format", "xml"),
        ("monitor:\n  interval: fast\n", "monitor.interval", "fast"),
        (
            "monitor:\n  maxTerminated: lots\n",
            "monitor.maxTerminated",
            "lots",
        ),
        (
            "attribution:\n  idlePolicy: equal\n",
            "attribution.idlePolicy",
            "equal",
        ),
        ("estimator:\n  family: gpu\n", "estimator.family", "gpu"),
        (
            "estimator:\n  outputType: Power\n",
            "estimator.outputType",
            "Power",
        ),
        (
            "kube:\n  podInformer:\n    mode: watch\n",
            "kube.podInformer.mode",
            "watch",
        ),
        (
            "exporter:\n  prometheus:\n    metricsLevel: [node, nodes]\n",
            "exporter.prometheus.metricsLevel",
            "nodes",
        ),
        (
            "exporter:\n  prometheus:\n    metricsLevel: node,gpu\n",
            "exporter.prometheus.metricsLevel",
            "gpu",
        ),
        (
            "cpu:\n  preferredMeters: [rapl, magic]\n",
            "cpu.preferredMeters",
            "magic",
        ),
        (
            "cpu:\n  preferredMeters: rapl\n",
            "cpu.preferredMeters",
            "sequence",
        ),
        ("ebpf:\n  enabled: maybe\n", "ebpf.enabled", "maybe"),
        ("ebpf:\n  exits: sometimes\n", "ebpf.exits", "sometimes"),
        ("msr:\n  enabled: maybe\n", "msr.enabled", "maybe"),
    ] {
        let err = parse(yaml).unwrap_err().to_string();
        assert!(err.contains(key), "{yaml}: {err} should name {key}");
        assert!(err.contains(value), "{yaml}: {err} should show {value}");
    }
}

#[test]
fn msr_is_opt_in_and_joins_the_cpu_chain_when_enabled() {
    let c = Config::default();
    assert!(!c.msr.enabled);
    assert_eq!(c.msr.root, PathBuf::from("/dev/cpu"));
    for (yaml, chain) in [
        (
            "msr:\n  enabled: true\n",
            &["rapl", "msr", "hwmon", "model"][..],
        ),
        (
            "msr:\n  enabled: true\ncpu:\n  preferredMeters: [hwmon]\n",
            &["msr", "hwmon", "model"],
        ),
        // A list that places it keeps its place.
        (
            "msr:\n  enabled: true\ncpu:\n  preferredMeters: [hwmon, MSR, rapl]\n",
            &["hwmon", "msr", "rapl", "model"],
        ),
        // Listed but disabled: tried, and unavailable with the reason.
        ("cpu:\n  preferredMeters: [msr]\n", &["msr", "model"]),
        (
            "msr:\n  enabled: true\ndev:\n  fake-cpu-meter:\n    enabled: true\n",
            &["fake"],
        ),
    ] {
        assert_eq!(cpu_chain(&valid(yaml)), chain, "{yaml}");
    }
    let c = valid("msr:\n  root: /host/dev/cpu\n");
    assert_eq!(c.msr.root, PathBuf::from("/host/dev/cpu"));
    assert_eq!(setup_settings(&c).msr, c.msr);
}

fn setup_settings(c: &Config) -> kepler_meters::MeterSettings {
    let host = kepler_sources::HostFacts::read(&c.host.procfs, &c.host.sysfs);
    crate::setup::meter_settings(c, &host)
}

#[test]
fn platform_meters_are_not_cpu_meters() {
    let err = config("cpu:\n  preferredMeters: [rapl, acpi]\n")
        .validate()
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("acpi measures the platform domain, not cpu"),
        "{err}"
    );
}

#[test]
fn ebpf_exits_parse_and_reach_the_source() {
    assert_eq!(Config::default().ebpf.exits, EbpfExits::Auto);
    for (text, exits, source) in [
        ("auto", EbpfExits::Auto, kepler_ebpf::Exits::Auto),
        ("exact", EbpfExits::Exact, kepler_ebpf::Exits::Exact),
        ("cgroups", EbpfExits::Cgroups, kepler_ebpf::Exits::Cgroups),
    ] {
        let c = config(&format!("ebpf:\n  exits: {text}\n"));
        assert_eq!(c.ebpf.exits, exits, "{text}");
        assert_eq!(crate::setup::ebpf_settings(&c).exits, source);
    }
}

#[test]
fn ebpf_modes_parse_from_bools_and_words() {
    for (text, mode) in [
        ("true", EbpfMode::On),
        ("false", EbpfMode::Off),
        ("auto", EbpfMode::Auto),
        ("\"false\"", EbpfMode::Off),
    ] {
        let c = config(&format!("ebpf:\n  enabled: {text}\n"));
        assert_eq!(c.ebpf.enabled, mode, "{text}");
    }
}

#[test]
fn keys_without_an_implementation_are_reported() {
    // Profiles, GPU meters (the MIG endpoint included) and the pod informer are implemented.
    let c = config(
        "debug:\n  pprof:\n    enabled: true\nexperimental:\n  gpu:\n    enabled: true\n\
         kube:\n  enabled: true\n",
    );
    assert!(c.not_implemented().is_empty(), "{:?}", c.not_implemented());
    // hwmon chip rules are applied by the hwmon meter: nothing to warn about.
    let c = config("experimental:\n  hwmon:\n    chipRules: [{name: x, useSameIndex: true}]\n");
    assert!(c.not_implemented().is_empty(), "{:?}", c.not_implemented());
    let c = config("experimental:\n  hwmon:\n    chipRules: []\n");
    assert!(c.not_implemented().is_empty());
    assert!(Config::default().not_implemented().is_empty());
}

#[test]
fn unknown_keys_are_named() {
    let loaded = parse("monitor:\n  intervall: 5s\nbogus: 1\n").unwrap();
    assert_eq!(loaded.unknown_keys, vec!["monitor.intervall", "bogus"]);
}

#[test]
fn flags_override_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("c.yaml");
    std::fs::write(
        &file,
        "monitor:\n  interval: 10s\nhost:\n  procfs: /x\nlog:\n  level: warn\n\
         exporter:\n  prometheus:\n    metricsLevel: [pod]\n",
    )
    .unwrap();
    let overrides = Overrides {
        interval: Some(GoDuration(Duration::from_secs(2))),
        log_level: Some(LogLevel::Trace),
        metrics: Some(levels(&[Level::Node])),
        ..Overrides::default()
    };
    let c = Config::load(Some(&file), &overrides).unwrap().config;
    assert_eq!(c.monitor.interval.0, Duration::from_secs(2));
    assert_eq!(c.host.procfs, PathBuf::from("/x"));
    assert_eq!(c.log.level, LogLevel::Trace);
    assert_eq!(c.exporter.prometheus.metrics_level, levels(&[Level::Node]));

    let c = Config::load(Some(&file), &Overrides::default())
        .unwrap()
        .config;
    assert_eq!(c.log.level, LogLevel::Warn);
    assert_eq!(c.exporter.prometheus.metrics_level, levels(&[Level::Pod]));
}

#[test]
fn out_of_range_values_are_rejected_by_key() {
    for (yaml, key) in [
        ("monitor:\n  interval: 50ms\n", "monitor.interval"),
        ("monitor:\n  maxTerminated: -2\n", "monitor.maxTerminated"),
        (
            "monitor:\n  minTerminatedEnergyThreshold: -1\n",
            "monitor.minTerminatedEnergyThreshold",
        ),
        ("web:\n  listenAddresses: []\n", "web.listenAddresses"),
        (
            "attribution:\n  idleBaselineWatts: -5\n",
            "attribution.idleBaselineWatts",
        ),
        (
            "attribution:\n  lowUsageRatio: 2\n",
            "attribution.lowUsageRatio",
        ),
        ("estimator:\n  model: \" \"\n", "estimator.model"),
        (
            "experimental:\n  platform:\n    redfish:\n      enabled: true\n",
            "experimental.platform.redfish.configFile",
        ),
        (
            "experimental:\n  platform:\n    redfish:\n      httpTimeout: 0s\n",
            "experimental.platform.redfish.httpTimeout",
        ),
        ("ipmi:\n  timeout: 0s\n", "ipmi.timeout"),
        (
            "kube:\n  podInformer:\n    kubeletURL: 10.0.0.1:10250\n",
            "kube.podInformer.kubeletURL",
        ),
        (
            "kube:\n  podInformer:\n    kubeletInsecure: true\n    kubeletCAFile: /ca.pem\n",
            "kube.podInformer.kubeletInsecure",
        ),
        (
            "kube:\n  podInformer:\n    pollInterval: 0s\n",
            "kube.podInformer.pollInterval",
        ),
    ] {
        let err = config(yaml).validate().unwrap_err().to_string();
        assert!(err.contains(key), "{yaml}: {err} should name {key}");
    }
    let err = Config::load(
        None,
        &Overrides {
            interval: Some(GoDuration(Duration::from_millis(10))),
            ..Overrides::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("monitor.interval"), "{err}");
}

#[test]
fn a_missing_file_is_a_clear_error() {
    let err = Config::load(
        Some(Path::new("/nonexistent/k.yaml")),
        &Overrides::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("/nonexistent/k.yaml"), "{err}");
}

#[test]
fn gpu_keys_reach_the_meter_settings() {
    let c = config(
        "experimental:\n  gpu:\n    enabled: true\n    idlePower: 12.5\n    dcgmEndpoint: http://localhost:9400/metrics\n\
         dev:\n  fake-gpu:\n    enabled: true\n    devices:\n      - watts: 80\n        energy: true\n        processes: [{pid: 7, weight: 3}, {pid: 8}]\n",
    );
    let host = kepler_sources::HostFacts::read(&c.host.procfs, &c.host.sysfs);
    let s = crate::setup::meter_settings(&c, &host).gpu;
    assert!(s.enabled);
    assert_eq!(s.idle_power, Some(kepler_core::Watts(12.5)));
    assert_eq!(
        s.dcgm_endpoint.as_deref(),
        Some("http://localhost:9400/metrics")
    );
    let fake = s.fake.unwrap();
    assert_eq!(fake.devices[0].processes, vec![(7, Some(3)), (8, None)]);
    assert!(fake.devices[0].energy);
    assert!(config("")
        .experimental
        .gpu
        .settings(&Default::default())
        .fake
        .is_none());
    let err = parse("experimental:\n  gpu:\n    idlePower: -1\n")
        .and_then(|l| l.config.validate().map(|_| l))
        .unwrap_err();
    assert!(
        err.to_string().contains("experimental.gpu.idlePower"),
        "{err}"
    );
}

#[test]
fn upstream_only_keys_are_known_and_empty_strings_mean_unset() {
    let c = valid(
        "web:\n  configFile: \"\"\n  listenAddresses: [\":28282\"]\n\
         kube:\n  enabled: false\n  config: \"\"\n  nodeName: \"\"\n\
         exporter:\n  prometheus:\n    enabled: true\n    debugCollectors: [go, PROCESS]\n\
         debug:\n  pprof:\n    enabled: false\n\
         experimental:\n  hwmon:\n    enabled: false\n    forceEnabled: false\n    zones: []\n    chipRules: []\n\
         \x20 gpu:\n    enabled: false\n    idlePower: 0\n    dcgmEndpoint: \"\"\n",
    );
    assert_eq!(c.web.config_file, None);
    assert_eq!(c.kube.config, None);
    assert_eq!(c.kube.node_name, None);
    assert_eq!(
        c.exporter.prometheus.debug_collectors,
        [DebugCollector::Go, DebugCollector::Process]
    );
    assert_eq!(c.experimental.gpu.dcgm_endpoint, None);
    assert!(c.not_implemented().is_empty(), "{:?}", c.not_implemented());
    assert_eq!(
        Config::default().exporter.prometheus.debug_collectors,
        [DebugCollector::Go]
    );

    let c = valid(
        "debug:\n  pprof:\n    enabled: true\n\
         experimental:\n  hwmon:\n    chipRules:\n      - name: ina3221\n        useSameIndex: true\n\
         \x20 gpu:\n    dcgmEndpoint: http://10.0.0.1:9400/metrics\n",
    );
    assert!(c.debug.pprof.enabled);
    let warned = c.not_implemented().join(" ");
    // Profiles are served (crate::profiling): nothing to warn about.
    assert!(!warned.contains("debug.pprof"), "{warned}");
    assert!(!warned.contains("chipRules"), "{warned}");
    // The `dcgm` meter polls it: nothing to warn about.
    assert!(!warned.contains("dcgmEndpoint"), "{warned}");
    assert_eq!(
        c.experimental.gpu.dcgm_endpoint.as_deref(),
        Some("http://10.0.0.1:9400/metrics")
    );
    assert!(parse("exporter:\n  prometheus:\n    debugCollectors: [python]\n").is_err());
}

#[test]
fn hwmon_force_enabled_puts_hwmon_first() {
    let c = valid("experimental:\n  hwmon:\n    forceEnabled: true\n");
    assert_eq!(cpu_chain(&c), ["hwmon", "rapl", "model"]);
    let c = valid("experimental:\n  hwmon:\n    enabled: true\n");
    assert_eq!(cpu_chain(&c), ["rapl", "hwmon", "model"]);
}

/// Upstream's own published files load with no unknown key, no error and no warning.
#[test]
fn upstream_published_files_load_cleanly() {
    for (name, text) in [
        (
            "hack-config.yaml",
            include_str!("../../tests/upstream/hack-config.yaml"),
        ),
        (
            "helm-values-config.yaml",
            include_str!("../../tests/upstream/helm-values-config.yaml"),
        ),
        (
            "k8s-configmap-config.yaml",
            include_str!("../../tests/upstream/k8s-configmap-config.yaml"),
        ),
    ] {
        let loaded = parse(text).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert!(
            loaded.unknown_keys.is_empty(),
            "{name}: {:?}",
            loaded.unknown_keys
        );
        let c = loaded.config;
        c.validate().unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(c.web.config_file, None, "{name}");
        assert_eq!(c.kube.config, None, "{name}");
        assert_eq!(
            c.exporter.prometheus.metrics_level,
            MetricsLevel::ALL,
            "{name}"
        );
        let warned = c.not_implemented();
        assert!(warned.is_empty(), "{name}: {warned:?}");
    }
}

#[test]
fn zero_interval_is_refresh_on_scrape() {
    for yaml in [
        "monitor:\n  interval: 0s\n",
        "monitor:\n  interval: 0\n",
        "monitor:\n  interval: \"0\"\n",
    ] {
        let c = valid(yaml);
        assert!(c.monitor.interval.0.is_zero(), "{yaml}");
    }
}

#[test]
fn pods_need_kubernetes_or_our_key() {
    assert!(
        !Config::default().workloads.pod_ids(false),
        "upstream: no pods without kube"
    );
    assert!(Config::default().workloads.pod_ids(true));
    let c = valid("workloads:\n  podIdsFromCgroups: true\n");
    assert!(c.workloads.pod_ids(false));
}

#[test]
fn hwmon_chip_rules_are_parsed_and_checked() {
    let c = valid(
        "experimental:\n  hwmon:\n    chipRules:\n      - name: max20730\n        pairings: {2: 1}\n\
         \x20     - name: ina3221\n        useSameIndex: true\n        skipVoltages: [4, 5]\n\
         \x20       skipCurrents: [7]\n",
    );
    let rules = &c.experimental.hwmon.chip_rules;
    assert_eq!(rules.len(), 2);
    assert_eq!(rules[0].name, "max20730");
    assert_eq!(rules[0].pairings.get(&2), Some(&1));
    assert!(!rules[0].use_same_index);
    assert!(rules[1].use_same_index);
    assert_eq!(rules[1].skip_voltages, [4, 5]);
    assert_eq!(rules[1].skip_currents, [7]);
    // The hwmon meter gets them.
    assert_eq!(&setup_settings(&c).hwmon_chip_rules, rules);
    // Upstream's empty forms: no rules.
    for empty in ["chipRules: []", "chipRules:", "chipRules: null"] {
        let c = valid(&format!("experimental:\n  hwmon:\n    {empty}\n"));
        assert!(c.experimental.hwmon.chip_rules.is_empty(), "{empty}");
    }
    // Malformed rules are errors naming the key.
    for bad in [
        "chipRules: [{name: x, pairings: [1]}]",
        "chipRules: [{name: x, skipVoltages: one}]",
        "chipRules: [{useSameIndex: true}]",
        "chipRules: {name: x}",
    ] {
        let err = parse(&format!("experimental:\n  hwmon:\n    {bad}\n"))
            .err()
            .unwrap_or_else(|| panic!("{bad} should be rejected"))
            .to_string();
        assert!(err.contains("experimental.hwmon.chipRules"), "{bad}: {err}");
    }
    let c = config("experimental:\n  hwmon:\n    chipRules: [{name: ' '}]\n");
    let err = c.validate().unwrap_err().to_string();
    assert!(
        err.contains("experimental.hwmon.chipRules[0].name"),
        "{err}"
    );
}

//! Encoding of hand-built snapshots: exact lines, escaping, levels, both formats, and promtool.

mod support;

use std::collections::HashSet;
use std::io::Write;
use std::process::{Command, Stdio};

use kepler_exporters::{encode, Format, Level, MetricsLevel};

fn render(ctx: &kepler_exporters::ExportContext, format: Format) -> String {
    let snapshot = support::snapshot();
    let mut out = Vec::new();
    encode(Some(&snapshot), ctx, format, &mut out);
    String::from_utf8(out).expect("utf-8")
}

fn assert_lines(text: &str, expected: &[&str]) {
    let lines: HashSet<&str> = text.lines().collect();
    for line in expected {
        assert!(lines.contains(line), "missing line\n  {line}\nin\n{text}");
    }
}

const NODE_PKG: &str =
    r#"zone="package",path="/sys/class/powercap/intel-rapl:0",node_name="node-1""#;
const NODE_DRAM: &str = r#"zone="dram",path="aggregated-dram",node_name="node-1""#;

#[test]
fn text_format_exact_lines() {
    let text = render(&support::context(), Format::Text004);
    assert_lines(
        &text,
        &[
            "# HELP kepler_node_cpu_joules_total Energy consumption of cpu at node level in joules",
            "# TYPE kepler_node_cpu_joules_total counter",
            &format!("kepler_node_cpu_joules_total{{{NODE_PKG}}} 123.456789"),
            &format!("kepler_node_cpu_joules_total{{{NODE_DRAM}}} 5"),
            "# TYPE kepler_node_cpu_watts gauge",
            &format!("kepler_node_cpu_watts{{{NODE_PKG}}} 24.5"),
            &format!("kepler_node_cpu_active_joules_total{{{NODE_PKG}}} 100"),
            &format!("kepler_node_cpu_active_watts{{{NODE_DRAM}}} 0.8"),
            &format!("kepler_node_cpu_idle_joules_total{{{NODE_PKG}}} 23.456789"),
            &format!("kepler_node_cpu_idle_watts{{{NODE_PKG}}} 4.5"),
            r#"kepler_node_cpu_usage_ratio{node_name="node-1"} 0.25"#,
            &format!("kepler_node_cpu_unattributed_joules_total{{{NODE_PKG}}} 1"),
            &format!("kepler_node_cpu_unattributed_joules_total{{{NODE_DRAM}}} 0"),
            &format!("kepler_node_cpu_hidden_process_joules_total{{{NODE_PKG}}} 2.5"),
            &format!("kepler_node_cpu_hidden_process_joules_total{{{NODE_DRAM}}} 0"),
            &format!("kepler_node_cpu_hidden_process_watts{{{NODE_PKG}}} 0.5"),
            &format!("kepler_node_cpu_hidden_process_watts{{{NODE_DRAM}}} 0.0"),
            r#"kepler_node_cpu_zone_info{zone="package",path="/sys/class/powercap/intel-rapl:0",meter="rapl",source="measured",model="",reason="",node_name="node-1"} 1"#,
            r#"kepler_node_cpu_zone_info{zone="dram",path="aggregated-dram",meter="rapl",source="measured",model="",reason="",node_name="node-1"} 1"#,
            r#"kepler_node_cpu_idle_policy_info{policy="baseline",baseline="pending",node_name="node-1"} 1"#,
            &format!("kepler_node_cpu_idle_baseline_watts{{{NODE_PKG}}} 4.5"),
            r#"kepler_build_info{arch="x86_64",branch="main",revision="abc123",version="0.1.0",goversion="1.95.0"} 1"#,
            r#"kepler_node_cpu_info{processor="0",vendor_id="GenuineIntel",model_name="Intel(R) Xeon(R) \"Gold\"",physical_id="0",core_id="0"} 1"#,
            r#"kepler_agent_tick_duration_seconds{node_name="node-1"} 0.0025"#,
            "# TYPE kepler_agent_ticks_total counter",
            r#"kepler_agent_ticks_total{node_name="node-1"} 12"#,
            r#"kepler_agent_processes{node_name="node-1"} 3"#,
            r#"kepler_process_cpu_joules_total{pid="42",comm="nginx",exe="/usr/sbin/nginx",type="container",state="running",container_id="c0ffee",vm_id="",zone="package",node_name="node-1"} 1.5"#,
            r#"kepler_process_cpu_watts{pid="42",comm="nginx",exe="/usr/sbin/nginx",type="container",state="running",container_id="c0ffee",vm_id="",zone="dram",node_name="node-1"} 0.05"#,
            r#"kepler_process_cpu_joules_total{pid="99",comm="qemu-system-x86",exe="/usr/bin/qemu-system-x86_64",type="vm",state="running",container_id="",vm_id="vm-uuid-1",zone="package",node_name="node-1"} 9"#,
            r#"kepler_process_cpu_seconds_total{pid="99",comm="qemu-system-x86",exe="/usr/bin/qemu-system-x86_64",type="vm",container_id="",vm_id="vm-uuid-1",node_name="node-1"} 1.25"#,
            r#"kepler_container_cpu_joules_total{container_id="c0ffee",container_name="nginx",runtime="containerd",state="running",zone="dram",pod_id="pod-uid-1",node_name="node-1"} 0.25"#,
            r#"kepler_container_cpu_seconds_total{container_id="c0ffee",container_name="nginx",runtime="containerd",state="running",pod_id="pod-uid-1",node_name="node-1"} 1.25"#,
            r#"kepler_pod_cpu_watts{pod_id="pod-uid-1",pod_name="web-0",pod_namespace="default",state="running",zone="package",node_name="node-1"} 0.3"#,
            r#"kepler_vm_cpu_joules_total{vm_id="vm-uuid-1",vm_name="guest",hypervisor="kvm",state="running",zone="package",node_name="node-1"} 9"#,
        ],
    );
    // Only zones with a known baseline get a baseline sample.
    assert!(!text.contains(&format!(
        "kepler_node_cpu_idle_baseline_watts{{{NODE_DRAM}}}"
    )));
    assert!(!text.contains("# EOF"));
    // 3 processes x 2 zones x 2 families + 3 cpu-seconds.
    let process_lines = text
        .lines()
        .filter(|l| l.starts_with("kepler_process_"))
        .count();
    assert_eq!(process_lines, 15);
}

#[test]
fn label_values_are_escaped() {
    let text = render(&support::context(), Format::Text004);
    assert_lines(
        &text,
        &[
            r#"kepler_process_cpu_watts{pid="7",comm="we\"ird\\name",exe="/opt/new\nline",type="regular",state="terminated",container_id="",vm_id="",zone="dram",node_name="node-1"} 0.0"#,
        ],
    );
    // A raw newline inside a value would split the sample: every line must be a comment or
    // start with a metric name.
    for line in text.lines() {
        assert!(
            line.starts_with("# ") || line.starts_with("kepler_"),
            "{line:?}"
        );
    }
    let mut ctx = support::context();
    ctx.node_name = "odd\"node\\".into();
    let text = render(&ctx, Format::Text004);
    assert!(
        text.contains(r#"kepler_node_cpu_usage_ratio{node_name="odd\"node\\"} 0.25"#),
        "{text}"
    );
}

#[test]
fn levels_filter_families() {
    let mut ctx = support::context();
    ctx.levels = MetricsLevel::NONE.with(Level::Node);
    let text = render(&ctx, Format::Text004);
    assert!(text.contains("kepler_node_cpu_joules_total{"));
    for prefix in [
        "kepler_process_",
        "kepler_container_",
        "kepler_pod_",
        "kepler_vm_",
    ] {
        assert!(!text.contains(prefix), "{prefix} present with levels=node");
    }

    ctx.levels = "pod,vm".parse().unwrap();
    let text = render(&ctx, Format::Text004);
    assert!(text.contains("kepler_pod_cpu_joules_total{"));
    assert!(text.contains("kepler_vm_cpu_watts{"));
    for prefix in [
        "kepler_node_cpu_joules",
        "kepler_process_",
        "kepler_container_",
    ] {
        assert!(
            !text.contains(prefix),
            "{prefix} present with levels=pod,vm"
        );
    }
    // Always-on families do not depend on levels.
    for name in [
        "kepler_build_info{",
        "kepler_node_cpu_info{",
        "kepler_agent_ticks_total{",
    ] {
        assert!(text.contains(name), "{name}");
    }
}

#[test]
fn every_power_series_has_node_name() {
    let text = render(&support::context(), Format::Text004);
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let exempt =
            line.starts_with("kepler_build_info") || line.starts_with("kepler_node_cpu_info");
        assert_eq!(line.contains(r#"node_name="node-1""#), !exempt, "{line}");
    }
}

#[test]
fn without_snapshot_only_build_cpu_and_agent_info() {
    let mut out = Vec::new();
    encode(None, &support::context(), Format::Text004, &mut out);
    let text = String::from_utf8(out).unwrap();
    let names: HashSet<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#'))
        .map(|l| l.split(['{', ' ']).next().unwrap())
        .collect();
    assert_eq!(
        names,
        HashSet::from([
            "kepler_build_info",
            "kepler_node_cpu_info",
            "kepler_agent_tick_duration_seconds",
            "kepler_agent_ticks_total",
        ])
    );
}

/// Samples of a family must be contiguous and follow their HELP and TYPE lines, and be named
/// as the format requires: in text 0.0.4 exactly as the family; in OpenMetrics a counter's
/// samples are `<family>_total` and a gauge's are named as the family.
fn check_grouping(text: &str, format: Format) {
    let mut seen = HashSet::new();
    let mut current: Option<(String, String)> = None;
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if let Some(rest) = line.strip_prefix("# HELP ") {
            let family = rest.split(' ').next().unwrap().to_string();
            assert!(seen.insert(family.clone()), "family {family} appears twice");
            let ty = lines.next().unwrap();
            let kind = ty
                .strip_prefix(&format!("# TYPE {family} "))
                .unwrap_or_else(|| panic!("{ty} does not follow # HELP {family}"));
            assert!(matches!(kind, "counter" | "gauge"), "{ty}");
            current = Some((family, kind.to_string()));
        } else if line == "# EOF" {
            assert_eq!(format, Format::OpenMetrics);
            assert!(lines.peek().is_none(), "# EOF must be last");
        } else {
            let name = line.split(['{', ' ']).next().unwrap();
            let (family, kind) = current.as_ref().expect("sample before any HELP");
            let expected = match (format, kind.as_str()) {
                (Format::OpenMetrics, "counter") => format!("{family}_total"),
                _ => family.clone(),
            };
            assert_eq!(
                name, expected,
                "{kind} sample under family {family} ({format:?})"
            );
        }
    }
}

#[test]
fn check_grouping_rejects_misnamed_samples() {
    let bad = [
        // An OpenMetrics counter sample without _total.
        (
            "# HELP x_joules a\n# TYPE x_joules counter\nx_joules 1\n# EOF\n",
            Format::OpenMetrics,
        ),
        // A gauge sample with it.
        (
            "# HELP x_watts a\n# TYPE x_watts gauge\nx_watts_total 1\n# EOF\n",
            Format::OpenMetrics,
        ),
        // Text 0.0.4 names samples exactly as the family.
        (
            "# HELP x_joules_total a\n# TYPE x_joules_total counter\nx_joules 1\n",
            Format::Text004,
        ),
    ];
    for (text, format) in bad {
        let caught = std::panic::catch_unwind(|| check_grouping(text, format)).is_err();
        assert!(caught, "check_grouping accepted {text:?} as {format:?}");
    }
    check_grouping(
        "# HELP x_joules a\n# TYPE x_joules counter\nx_joules_total 1\n# EOF\n",
        Format::OpenMetrics,
    );
}

#[test]
fn families_are_grouped_in_both_formats() {
    for format in [Format::Text004, Format::OpenMetrics] {
        check_grouping(&render(&support::context(), format), format);
        let mut out = Vec::new();
        encode(
            Some(&support::synthetic(50, 3)),
            &support::context(),
            format,
            &mut out,
        );
        check_grouping(std::str::from_utf8(&out).unwrap(), format);
    }
}

#[test]
fn openmetrics_names_counter_families_without_total_and_ends_with_eof() {
    let text = render(&support::context(), Format::OpenMetrics);
    assert_lines(
        &text,
        &[
            "# HELP kepler_node_cpu_joules Energy consumption of cpu at node level in joules",
            "# TYPE kepler_node_cpu_joules counter",
            &format!("kepler_node_cpu_joules_total{{{NODE_PKG}}} 123.456789"),
            "# TYPE kepler_node_cpu_watts gauge",
            "# TYPE kepler_process_cpu_seconds counter",
            "# TYPE kepler_agent_ticks counter",
            r#"kepler_agent_ticks_total{node_name="node-1"} 12"#,
        ],
    );
    assert!(!text.contains("# TYPE kepler_node_cpu_joules_total"));
    assert!(text.ends_with("\n# EOF\n"), "{}", &text[text.len() - 40..]);
    assert_eq!(text.matches("# EOF").count(), 1);

    let mut out = Vec::new();
    encode(None, &support::context(), Format::OpenMetrics, &mut out);
    assert!(out.ends_with(b"# EOF\n"));
}

#[test]
fn encode_appends_to_the_buffer() {
    let mut out = b"prefix\n".to_vec();
    encode(None, &support::context(), Format::Text004, &mut out);
    assert!(out.starts_with(b"prefix\n# HELP "));
}

fn promtool_check(text: &str) -> Option<(bool, String)> {
    let mut child = match Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            support::skip_missing_tool(&format!("promtool check: promtool not runnable ({e})"));
            return None;
        }
    };
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Some((out.status.success(), report))
}

#[test]
fn promtool_accepts_text_output() {
    let mut ctx = support::context();
    ctx.cpu_info = vec![Default::default(); 4].into();
    for snapshot in [support::snapshot(), support::synthetic(200, 4)] {
        let mut out = Vec::new();
        encode(Some(&snapshot), &ctx, Format::Text004, &mut out);
        let text = String::from_utf8(out).unwrap();
        let Some((ok, report)) = promtool_check(&text) else {
            return;
        };
        assert!(ok && report.trim().is_empty(), "promtool: {report}");
    }
}

#[test]
fn promtool_would_catch_a_broken_exposition() {
    // Guards the test above: promtool must fail on a counter without _total and on a bad line.
    let Some((ok, report)) =
        promtool_check("# HELP x_joules a\n# TYPE x_joules counter\nx_joules 1\n")
    else {
        return;
    };
    assert!(!ok, "promtool accepted a lint problem: {report}");
    let Some((ok, _)) = promtool_check("kepler_x{a=\"b\n\"} 1\n") else {
        return;
    };
    assert!(!ok);
}

#[test]
fn features_and_ebpf_counts_appear_only_when_present() {
    use kepler_core::features::{FeatureRates, Features};
    let mut ctx = support::context();
    let plain = render(&ctx, Format::Text004);
    assert!(!plain.contains("kepler_node_model_feature_rate"));
    assert!(!plain.contains("kepler_agent_ebpf_dropped_total"));

    let mut snapshot = support::snapshot();
    let key = snapshot.processes[0].key;
    let comm = snapshot.processes[0].info.comm.clone();
    let rates = FeatureRates {
        bpf_cpu_time_ms: 250.0,
        bpf_net_rx_irq: Some(12.0),
        ..FeatureRates::default()
    };
    snapshot.features = Some(std::sync::Arc::new(Features {
        interval: std::time::Duration::from_secs(5),
        node: FeatureRates {
            bpf_cpu_time_ms: 1500.0,
            ..rates
        },
        processes: vec![(key, rates)],
    }));
    ctx.agent.ebpf = Some(kepler_exporters::EbpfCounts {
        dropped: 3,
        tracked: 42,
        exits_deferred: 7,
        task_iterator: true,
        exits_counted: true,
    });
    let mut out = Vec::new();
    encode(Some(&snapshot), &ctx, Format::Text004, &mut out);
    let text = String::from_utf8(out).unwrap();
    assert_lines(
        &text,
        &[
            r#"kepler_agent_ebpf_dropped_total{node_name="node-1"} 3"#,
            r#"kepler_agent_ebpf_exits_deferred_total{node_name="node-1"} 7"#,
            r#"kepler_agent_ebpf_tracked_processes{node_name="node-1"} 42"#,
            r#"kepler_agent_ebpf_accounting_info{accounting="task_iterator",exits="cgroup_counters",node_name="node-1"} 1"#,
            r#"kepler_node_model_feature_rate{feature="bpf_cpu_time_ms",node_name="node-1"} 1500.0"#,
            r#"kepler_node_model_feature_rate{feature="bpf_net_rx_irq",node_name="node-1"} 12.0"#,
            &format!(
                r#"kepler_process_model_feature_rate{{pid="{}",comm="{}",feature="bpf_cpu_time_ms",node_name="node-1"}} 250.0"#,
                key.pid, comm
            ),
        ],
    );
    assert!(
        !text.contains(r#"feature="cpu_cycles""#),
        "unmeasured features stay out"
    );
    let check = promtool_check(&text);
    if let Some((ok, output)) = check {
        assert!(ok, "{output}");
    }
}

#[test]
fn a_dynamic_only_meter_claims_no_idle_policy() {
    // An estimate inside a VM: dynamic power only, whatever attribution.idlePolicy says.
    let mut snapshot = support::snapshot();
    let dynamic = std::sync::Arc::new(kepler_core::ZoneMeta {
        provenance: kepler_core::Provenance::Estimated,
        model: Some("builtin-x".into()),
        includes_idle: false,
        reason: Some("fallback match: no \"x\" node type".into()),
        ..kepler_core::ZoneMeta::measured("model")
    });
    for z in &mut snapshot.zones {
        z.meta = dynamic.clone();
    }
    snapshot.idle_policy = kepler_core::IdlePolicyState::Baseline {
        configured: true,
        watts: vec![None, None],
    };
    let mut out = Vec::new();
    encode(
        Some(&snapshot),
        &support::context(),
        Format::Text004,
        &mut out,
    );
    let text = String::from_utf8(out).unwrap();
    assert_lines(
        &text,
        &[
            r#"kepler_node_cpu_idle_policy_info{policy="none",baseline="none",node_name="node-1"} 1"#,
            r#"kepler_node_cpu_zone_info{zone="package",path="/sys/class/powercap/intel-rapl:0",meter="model",source="estimated",model="builtin-x",reason="fallback match: no \"x\" node type",node_name="node-1"} 1"#,
        ],
    );
    assert!(
        !text.contains("kepler_node_cpu_idle_baseline_watts{"),
        "{text}"
    );
}

#[test]
fn gpu_zones_stay_out_of_the_cpu_families() {
    let mut snapshot = support::snapshot();
    let gpu = std::sync::Arc::new(kepler_core::ZoneMeta {
        domain: kepler_core::PowerDomain::Gpu,
        ..kepler_core::ZoneMeta::measured("nvml")
    });
    snapshot.zones[1].zone = "gpu0".into();
    snapshot.zones[1].meta = gpu;
    let mut out = Vec::new();
    encode(
        Some(&snapshot),
        &support::context(),
        Format::Text004,
        &mut out,
    );
    let text = String::from_utf8(out).unwrap();
    assert!(!text.contains("gpu0"), "{text}");
    assert!(text.contains(r#"kepler_process_cpu_joules_total{pid="42""#));
}

#[test]
fn component_health_is_exported() {
    let ctx = support::context();
    let meter = ctx
        .health
        .register(kepler_core::ComponentKind::Meter, "rapl");
    ctx.health
        .register(kepler_core::ComponentKind::Output, "stdout");
    meter.set_down();
    meter.set_down();
    let text = render(&ctx, Format::Text004);
    assert_lines(
        &text,
        &[
            "# TYPE kepler_agent_component_up gauge",
            r#"kepler_agent_component_up{component="meter",name="rapl",node_name="node-1"} 0"#,
            r#"kepler_agent_component_up{component="output",name="stdout",node_name="node-1"} 1"#,
            "# TYPE kepler_agent_component_errors_total counter",
            r#"kepler_agent_component_errors_total{component="meter",name="rapl",node_name="node-1"} 2"#,
        ],
    );
}

#[test]
fn platform_readings_carry_upstream_labels_and_only_at_node_level() {
    let mut snapshot = support::snapshot();
    let psu = |id: &str, watts: f64| kepler_core::PlatformPower {
        labels: std::sync::Arc::new(kepler_core::PlatformLabels {
            source: "redfish".into(),
            bmc_id: "bmc-1".into(),
            chassis_id: "1U".into(),
            source_id: id.into(),
            source_name: format!("PSU \"{id}\""),
            source_type: "PowerSupply".into(),
        }),
        watts: kepler_core::Watts(watts),
    };
    snapshot.platform = vec![psu("0", 150.5), psu("1", 99.0)];
    let ctx = support::context();
    let mut out = Vec::new();
    encode(Some(&snapshot), &ctx, Format::Text004, &mut out);
    let text = String::from_utf8(out).expect("utf-8");
    assert_lines(
        &text,
        &[
            "# TYPE kepler_platform_watts gauge",
            r#"kepler_platform_watts{source="redfish",bmc_id="bmc-1",chassis_id="1U",source_id="0",source_name="PSU \"0\"",source_type="PowerSupply",node_name="node-1"} 150.5"#,
            r#"kepler_platform_watts{source="redfish",bmc_id="bmc-1",chassis_id="1U",source_id="1",source_name="PSU \"1\"",source_type="PowerSupply",node_name="node-1"} 99.0"#,
        ],
    );
    // No platform readings (the BMC is down): no family at all, rather than stale numbers.
    assert!(!render(&ctx, Format::Text004).contains("kepler_platform_watts"));
    let mut pods_only = support::context();
    pods_only.levels = [Level::Pod].into_iter().collect::<MetricsLevel>();
    let mut out = Vec::new();
    encode(Some(&snapshot), &pods_only, Format::Text004, &mut out);
    assert!(!String::from_utf8_lossy(&out).contains("kepler_platform_watts"));
}

/// A process that never changes, so the output does not depend on the test's own process.
#[derive(Debug)]
struct Fixed(kepler_exporters::ProcessStats);

impl kepler_exporters::OwnProcess for Fixed {
    fn read(&self) -> std::io::Result<kepler_exporters::ProcessStats> {
        Ok(self.0)
    }
}

#[test]
fn self_process_families_follow_the_debug_collectors() {
    let mut ctx = support::context();
    ctx.own_process = Some(std::sync::Arc::new(Fixed(kepler_exporters::ProcessStats {
        cpu_seconds: 2.5,
        resident_memory_bytes: 4096,
        virtual_memory_bytes: 8192,
        open_fds: 7,
        max_fds: 1024,
        start_time_seconds: 1_700_000_000.25,
        threads: 3,
    })));
    let text = render(&ctx, Format::Text004);
    assert!(!text.contains("process_open_fds"), "off by default");

    ctx.self_collectors.process = true;
    let text = render(&ctx, Format::Text004);
    assert_lines(
        &text,
        &[
            "# TYPE process_cpu_seconds_total counter",
            "process_cpu_seconds_total 2.5",
            "process_resident_memory_bytes 4096",
            "process_virtual_memory_bytes 8192",
            "process_open_fds 7",
            "process_max_fds 1024",
            "process_start_time_seconds 1700000000.25",
        ],
    );
    assert!(!text.contains("process_threads"));

    ctx.self_collectors = kepler_exporters::SelfCollectors {
        process: false,
        runtime: true,
    };
    let text = render(&ctx, Format::Text004);
    assert_lines(
        &text,
        &["# TYPE process_threads gauge", "process_threads 3"],
    );
    assert!(!text.contains("process_open_fds"));
}

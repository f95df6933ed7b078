use super::*;
use crate::model::test_server::serve;
use kepler_core::PowerMeter;

const CPUINFO: &str = "processor\t: 0\nvendor_id\t: GenuineIntel\n\
    model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 0\n\
    flags\t\t: fpu vme lahf_lm\n\nprocessor\t: 1\nvendor_id\t: GenuineIntel\n\
    model name\t: Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz\nphysical id\t: 0\n\
    flags\t\t: fpu vme lahf_lm\n\n";
const MEMINFO: &str = "MemTotal:       16318412 kB\n";

/// package = 10 + 0.01·x with x = bpf_cpu_time_ms.
const LINEAR: &str = r#"{"package": {"All_Weights": {"Bias_Weight": 10.0, "Categorical_Variables": {},
    "Numerical_Variables": {"bpf_cpu_time_ms": {"scale": 1.0, "weight": 0.01}}}}}"#;

/// A host read from fixture files: bare metal, or a guest (the hypervisor CPU flag).
fn host(dir: &tempfile::TempDir, guest: bool) -> HostFacts {
    let proc = dir.path().join("proc");
    std::fs::create_dir_all(&proc).unwrap();
    let cpuinfo = if guest {
        CPUINFO.replace("lahf_lm", "hypervisor lahf_lm")
    } else {
        CPUINFO.to_string()
    };
    std::fs::write(proc.join("cpuinfo"), cpuinfo).unwrap();
    std::fs::write(proc.join("meminfo"), MEMINFO).unwrap();
    HostFacts::read(&proc, &dir.path().join("sys"))
}

const CPU_TIME: &[Feature] = &[Feature::BpfCpuTimeMs];

#[test]
fn settings_parse_from_the_config_strings() {
    assert_eq!("builtin".parse(), Ok(ModelChoice::Builtin));
    assert_eq!(
        "https://h/m.json".parse(),
        Ok(ModelChoice::Url("https://h/m.json".into()))
    );
    assert_eq!(
        "/m/model.zip".parse(),
        Ok(ModelChoice::File("/m/model.zip".into()))
    );
    assert!(" ".parse::<ModelChoice>().is_err());
    assert_eq!("DynPower".parse(), Ok(OutputChoice::Dyn));
    assert_eq!("AbsPower".parse(), Ok(OutputChoice::Abs));
    assert_eq!("auto".parse(), Ok(OutputChoice::Auto));
    assert!("dyn".parse::<OutputChoice>().is_err());
}

#[test]
fn the_builtin_model_follows_the_host() {
    let dir = tempfile::tempdir().unwrap();
    let background = Background::new();
    let settings = EstimatorSettings::default();
    let bare = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap();
    assert!(bare.model_name().starts_with("builtin/aws/"), "{bare:?}");
    assert_eq!(bare.output(), OutputType::Abs);
    let detail = bare.detail().unwrap();
    assert!(detail.contains("intel_xeon_platinum_8259cl"), "{detail}");
    // The zones carry the selection's reason, for kepler_node_cpu_zone_info.
    let reason = bare.meta().reason.unwrap();
    assert!(reason.contains("8259CL"), "{reason}");
    assert!(detail.contains(&*reason), "{detail} lacks {reason}");
    // The built-in DRAM estimate is withheld (see the index), and says so.
    let withheld = &kepler_models::builtin::embedded_index()
        .unwrap()
        .rapl
        .withheld;
    if withheld.contains_key("dram") {
        assert_eq!(bare.zones(), ["package"]);
        assert!(detail.contains("no dram estimate: "), "{detail}");
    } else {
        assert_eq!(bare.zones(), ["package", "dram"]);
    }

    // Inside a VM: dynamic power only, unless configured otherwise.
    let guest_host = host(&dir, true);
    let guest = open_model_meter(&settings, &guest_host, CPU_TIME, &background).unwrap();
    assert_eq!(guest.output(), OutputType::Dyn);
    assert!(!guest.includes_idle());
    let abs = EstimatorSettings {
        output: OutputChoice::Abs,
        family: BuiltinFamily::Platform,
        ..EstimatorSettings::default()
    };
    let meter = open_model_meter(&abs, &guest_host, CPU_TIME, &background).unwrap();
    assert_eq!(meter.output(), OutputType::Abs);
    assert_eq!(meter.zones(), ["platform"]);
    assert!(
        background.take().is_empty(),
        "built-in models need no refresh"
    );
}

#[test]
fn a_host_without_cpuinfo_says_which_file_is_missing() {
    let dir = tempfile::tempdir().unwrap();
    let host = HostFacts::read(&dir.path().join("proc"), &dir.path().join("sys"));
    let err = open_model_meter(
        &EstimatorSettings::default(),
        &host,
        CPU_TIME,
        &Background::new(),
    )
    .unwrap_err();
    assert!(err.reason.contains("proc/cpuinfo"), "{err}");
}

#[test]
fn a_model_file_is_watched_and_its_features_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("SGDRegressorTrainer_0.json");
    std::fs::write(&path, LINEAR).unwrap();
    let settings = EstimatorSettings {
        model: ModelChoice::File(path.clone()),
        ..EstimatorSettings::default()
    };
    let background = Background::new();
    let meter = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap();
    assert_eq!(meter.model_name(), "SGDRegressorTrainer_0");
    assert!(meter.detail().unwrap().contains("model file"));
    let reason = meter.meta().reason.unwrap();
    assert_eq!(&*reason, format!("model file {}", path.display()));
    assert!(
        background.take().is_empty(),
        "a local file needs no download"
    );

    std::fs::write(&path, LINEAR.replace("bpf_cpu_time_ms", "cpu_instructions")).unwrap();
    let err = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap_err();
    assert!(err.reason.contains("cpu_instructions"), "{err}");
}

#[test]
fn a_model_server_is_asked_for_this_machine_and_its_answer_refreshed() {
    let (url, server) = serve(vec![LINEAR.into()]);
    let dir = tempfile::tempdir().unwrap();
    let settings = EstimatorSettings {
        model_server_url: Some(url.clone()),
        cache_dir: dir.path().join("cache"),
        trainer: Some("SGDRegressorTrainer".into()),
        ..EstimatorSettings::default()
    };
    let background = Background::new();
    let features = [Feature::BpfCpuTimeMs, Feature::BpfPageCacheHit];
    let meter = open_model_meter(&settings, &host(&dir, false), &features, &background).unwrap();
    assert_eq!(meter.output(), OutputType::Abs);
    assert!(meter.detail().unwrap().contains("model server"));
    let tasks = background.take();
    assert_eq!(tasks.len(), 1);
    assert_eq!(tasks[0].kind(), kepler_core::ComponentKind::ModelRefresh);

    let requests = server.join().unwrap();
    assert_eq!(requests.len(), 1);
    assert_eq!(requests[0].0, "POST /model");
    let body: serde_json::Value = serde_json::from_str(&requests[0].1).unwrap();
    assert_eq!(
        body["metrics"],
        serde_json::json!(["bpf_cpu_time_ms", "bpf_page_cache_hit"])
    );
    assert_eq!(body["output_type"], "AbsPower");
    assert_eq!(body["source"], "rapl-sysfs");
    assert_eq!(body["trainer_name"], "SGDRegressorTrainer");
    assert_eq!(
        body["machine_spec"]["processor"],
        "intel_xeon_platinum_8259cl"
    );
    assert_eq!(body["machine_spec"]["cores"], 2);
    // This server names no file: the answer is cached under a fixed name.
    assert!(dir.path().join("cache/server/model.json").exists());
}

#[test]
fn an_unreachable_url_without_a_cache_is_unavailable() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/m.json", listener.local_addr().unwrap());
    drop(listener);
    let dir = tempfile::tempdir().unwrap();
    let settings = EstimatorSettings {
        model: ModelChoice::Url(url),
        cache_dir: dir.path().join("cache"),
        ..EstimatorSettings::default()
    };
    let background = Background::new();
    let err = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap_err();
    assert!(err.reason.starts_with("estimator: "), "{err}");
    assert!(background.take().is_empty());
}

#[test]
fn builtin_estimates_state_the_expected_error_of_their_model() {
    let dir = tempfile::tempdir().unwrap();
    let background = Background::new();
    let settings = EstimatorSettings::default();
    let bare = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap();
    let meta = bare.meta();
    let index = kepler_models::builtin::embedded_index().unwrap();
    let stated: Vec<(&str, f64, f64)> = meta
        .expected_error
        .iter()
        .map(|e| (&*e.zone, e.mae.0, e.mape))
        .collect();
    let mut want: Vec<(&str, f64, f64)> = index
        .rapl
        .expected_error
        .iter()
        .map(|(zone, e)| (zone.as_str(), e.mae_w, e.mape))
        .collect();
    // Only zones the meter exports state an error.
    want.retain(|w| bare.zones().iter().any(|z| z == w.0));
    want.sort_by_key(|w| bare.zones().iter().position(|z| z == w.0));
    let mut stated_sorted = stated.clone();
    stated_sorted.sort_by_key(|w| bare.zones().iter().position(|z| z == w.0));
    assert_eq!(stated_sorted, want);
    assert_eq!(stated.len(), bare.zones().len(), "{stated:?}");
    assert!(stated.iter().all(|s| s.1 > 0.0 && s.2 > 0.0), "{stated:?}");
    let detail = bare.detail().unwrap();
    assert!(
        detail.contains("expected error ") && detail.contains("package ±"),
        "{detail}"
    );

    // A guest's dynamic power was never validated: no stated error.
    let guest = open_model_meter(&settings, &host(&dir, true), CPU_TIME, &background).unwrap();
    assert!(guest.meta().expected_error.is_empty());
    // Nor for a model file, whose validation the agent does not know.
    let path = dir.path().join("SGDRegressorTrainer_0.json");
    std::fs::write(&path, LINEAR).unwrap();
    let file = EstimatorSettings {
        model: ModelChoice::File(path),
        ..EstimatorSettings::default()
    };
    let meter = open_model_meter(&file, &host(&dir, false), CPU_TIME, &background).unwrap();
    assert!(meter.meta().expected_error.is_empty());
}

#[test]
fn a_url_reason_leaves_credentials_out() {
    assert_eq!(
        without_userinfo("model server https://u:secret@h:8100/x@y"),
        "model server https://h:8100/x@y"
    );
    assert_eq!(without_userinfo("http://h/m.json"), "http://h/m.json");
    assert_eq!(without_userinfo("model file /a@b"), "model file /a@b");
}

#[test]
fn a_source_with_hardware_counters_gets_the_counter_model() {
    let dir = tempfile::tempdir().unwrap();
    let background = Background::new();
    let settings = EstimatorSettings::default();
    let counters = [
        Feature::BpfCpuTimeMs,
        Feature::CacheMiss,
        Feature::CpuCycles,
        Feature::CpuInstructions,
    ];
    let with = open_model_meter(&settings, &host(&dir, false), &counters, &background).unwrap();
    let without = open_model_meter(&settings, &host(&dir, false), CPU_TIME, &background).unwrap();
    assert!(
        with.model_name().starts_with("builtin/nx12/"),
        "{}",
        with.model_name()
    );
    assert!(without.model_name().starts_with("builtin/aws/"));
    // The counter model estimates package only, and states its own error.
    assert_eq!(with.zones(), ["package"]);
    let reason = with.meta().reason.unwrap();
    assert!(reason.starts_with("hardware counters ("), "{reason}");
    assert!(reason.contains(without.model_name()), "{reason}");
    let stated = &with.meta().expected_error;
    let index = kepler_models::builtin::embedded_index().unwrap();
    let want = &index.counters.as_ref().unwrap().expected_error["package"];
    assert_eq!(stated.len(), 1);
    assert!((stated[0].mae.0 - want.mae_w).abs() < 1e-12);
    assert!(with.detail().unwrap().contains("hardware counters"));

    // Some counters but not all: the busy-time model, not a model fed invented values.
    let partial = [Feature::BpfCpuTimeMs, Feature::CpuInstructions];
    let meter = open_model_meter(&settings, &host(&dir, false), &partial, &background).unwrap();
    assert!(meter.model_name().starts_with("builtin/aws/"));
    // Platform power has no counter model.
    let platform = EstimatorSettings {
        family: BuiltinFamily::Platform,
        ..EstimatorSettings::default()
    };
    let meter = open_model_meter(&platform, &host(&dir, false), &counters, &background).unwrap();
    assert!(meter.model_name().starts_with("builtin/specpower/"));
}

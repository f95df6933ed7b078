use super::*;
use crate::model::test_server::serve;
use kepler_core::Health;

/// package = 10 + 0.01·x with x = bpf_cpu_time_ms.
const LINEAR: &str = r#"{"package": {"All_Weights": {"Bias_Weight": 10.0, "Categorical_Variables": {},
    "Numerical_Variables": {"bpf_cpu_time_ms": {"scale": 1.0, "weight": 0.01}}}}}"#;

/// A URL on which nothing listens: connections are refused at once.
fn closed_url() -> String {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!(
        "http://{}/SGDRegressorTrainer_0.json",
        listener.local_addr().unwrap()
    );
    drop(listener);
    url
}

fn health() -> Arc<ComponentHealth> {
    Health::new().register(ComponentKind::ModelRefresh, ModelRefresh::COMPONENT)
}

#[test]
fn cache_files_are_named_safely() {
    let dir = Path::new("/cache");
    let file = |url: &str| Remote::File { url: url.into() }.cache_path(dir, None);
    assert_eq!(
        file("https://h/m/SGDRegressorTrainer_0.json?x=1"),
        dir.join("SGDRegressorTrainer_0.json")
    );
    assert_eq!(file("https://h/m/..%2f..%2fetc"), dir.join("_2f.._2fetc"));
    assert_eq!(file("https://h/.hidden"), dir.join("hidden"));
    assert_eq!(file("https://h/"), dir.join("model"));
    let server = |trainer: &str| Remote::Server {
        url: "http://s".into(),
        request: serde_json::json!({ "trainer_name": trainer }),
    };
    let served = |name: &str| server("").cache_path(dir, Some(name));
    assert_eq!(
        served("ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_0.json"),
        dir.join("server/LogarithmicRegressionTrainer_0.json")
    );
    assert_eq!(served("../../etc/passwd"), dir.join("server/passwd"));
    assert_eq!(served(".."), dir.join("server/model"));
    assert_eq!(
        server("").cache_path(dir, None),
        dir.join("server/model.json")
    );
}

/// A model server's curve fit is cached under the name the server gives it, so its trainer
/// is known when the file is loaded (a 3-value curve is logarithmic or exponential only by
/// name); a later answer naming another file gets a cache file of its own and the pointer
/// the meter follows moves to it, so the switch needs no restart.
#[test]
fn a_served_model_keeps_its_name_and_a_switch_moves_the_pointer() {
    let curve = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../data/kepler-model-db/models/v0.7/ec2-0.7.11/rapl-sysfs/AbsPower/BPFOnly/LogarithmicRegressionTrainer_0.json"
    ))
    .unwrap();
    let header = |name: &str| format!("X-Kepler-Model: ec2/rapl-sysfs/AbsPower/BPFOnly/{name}\r\n");
    let (url, server) = crate::model::test_server::serve_with_headers(vec![
        (header("LogarithmicRegressionTrainer_0.json"), curve.clone()),
        (header("ExponentialRegressionTrainer_0.json"), curve.clone()),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::Server {
        url,
        request: serde_json::json!({ "trainer_name": "" }),
    };
    let (path, mut refresh) = prepare(remote, dir.path(), Duration::from_secs(60)).unwrap();
    let first = dir
        .path()
        .join("server/LogarithmicRegressionTrainer_0.json");
    assert_eq!(path, first);
    let model = kepler_models::load_model(&path, None).unwrap();
    assert_eq!(model.name(), Some("LogarithmicRegressionTrainer_0"));
    let pointer = refresh.pointer().unwrap();
    assert_eq!(pointed_model(&pointer), Some(first.clone()));

    let health = health();
    assert!(refresh.refresh_once(&health).unwrap());
    let second = dir
        .path()
        .join("server/ExponentialRegressionTrainer_0.json");
    assert_eq!(refresh.path(), second);
    assert_eq!(pointed_model(&pointer), Some(second.clone()));
    let model = kepler_models::load_model(&second, None).unwrap();
    assert_eq!(model.name(), Some("ExponentialRegressionTrainer_0"));
    assert!(first.exists(), "the previous model stays cached");
    assert!(health.is_up());
    server.join().unwrap();
}

#[test]
fn a_pointer_names_only_a_file_in_its_own_directory() {
    let dir = tempfile::tempdir().unwrap();
    let pointer = dir.path().join(CURRENT_POINTER);
    assert_eq!(pointed_model(&pointer), None);
    for bad in ["", "../etc/passwd", "/etc/passwd", ".hidden", "a b"] {
        std::fs::write(&pointer, bad).unwrap();
        assert_eq!(pointed_model(&pointer), None, "{bad:?}");
    }
    std::fs::write(&pointer, "SGDRegressorTrainer_0.json\n").unwrap();
    assert_eq!(
        pointed_model(&pointer),
        Some(dir.path().join("SGDRegressorTrainer_0.json"))
    );
}

#[test]
fn the_cache_is_replaced_only_by_a_usable_changed_model() {
    let (url, server) = serve(vec![LINEAR.into(), LINEAR.into(), "{not json".into()]);
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::File {
        url: format!("{url}/m/SGDRegressorTrainer_0.json"),
    };
    let mut path = remote.cache_path(dir.path(), None);
    let timeout = Duration::from_secs(10);
    assert!(
        refresh(&remote, &mut path, timeout).unwrap(),
        "first download"
    );
    assert!(!refresh(&remote, &mut path, timeout).unwrap(), "same bytes");
    let err = refresh(&remote, &mut path, timeout).unwrap_err();
    assert!(matches!(err, FetchError::Unusable { .. }), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), LINEAR);
    let requests = server.join().unwrap();
    assert_eq!(requests.len(), 3);
    assert_eq!(requests[0].0, "GET /m/SGDRegressorTrainer_0.json");
}

#[test]
fn a_failing_refresh_shows_in_the_health_handle_until_one_succeeds() {
    let (url, server) = serve(vec!["{not json".into(), LINEAR.into()]);
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::File {
        url: format!("{url}/SGDRegressorTrainer_0.json"),
    };
    let path = remote.cache_path(dir.path(), None);
    let mut refresh = ModelRefresh::new(
        remote,
        path,
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    let health = health();
    assert!(refresh.refresh_once(&health).is_err());
    assert!(!health.is_up());
    assert_eq!(health.errors(), 1);
    assert!(refresh.refresh_once(&health).unwrap());
    assert!(health.is_up());
    assert_eq!(health.errors(), 1);
    server.join().unwrap();

    // Nothing listening: down again, each failure counted.
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::File { url: closed_url() };
    let path = remote.cache_path(dir.path(), None);
    let mut refresh = ModelRefresh::new(
        remote,
        path,
        Duration::from_secs(60),
        Duration::from_secs(10),
    );
    for errors in 1..=2 {
        let err = refresh.refresh_once(&health).unwrap_err();
        assert!(matches!(err, FetchError::Request { .. }), "{err}");
        assert!(!health.is_up());
        assert_eq!(health.errors(), 1 + errors);
    }
}

#[test]
fn the_refresh_task_stops_at_once_on_the_stop_signal() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::File { url: closed_url() };
    let path = remote.cache_path(dir.path(), None);
    // An hour between refreshes: the thread only ends early because the stop wakes it.
    let task = ModelRefresh::new(
        remote,
        path,
        Duration::from_secs(3600),
        Duration::from_secs(1),
    )
    .into_task();
    assert_eq!(task.thread_name(), ModelRefresh::THREAD);
    assert_eq!(task.kind(), ComponentKind::ModelRefresh);
    let health = health();
    let stop = StopSignal::new();
    let thread = {
        let (stop, health) = (stop.clone(), health.clone());
        std::thread::spawn(move || task.run(stop, health))
    };
    stop.stop();
    thread.join().unwrap();
    // It ended in its wait: no refresh was tried (one would have failed and counted).
    assert!(health.is_up());
    assert_eq!(health.errors(), 0);
}

#[test]
fn start_up_falls_back_to_the_cache_and_reports_the_model_stale() {
    let dir = tempfile::tempdir().unwrap();
    let remote = Remote::File { url: closed_url() };
    let err = prepare(remote.clone(), dir.path(), Duration::from_secs(60)).unwrap_err();
    assert!(matches!(err, FetchError::Request { .. }), "{err}");

    std::fs::write(remote.cache_path(dir.path(), None), LINEAR).unwrap();
    let (path, refresh) = prepare(remote.clone(), dir.path(), Duration::from_secs(60)).unwrap();
    assert_eq!(path, remote.cache_path(dir.path(), None));
    assert_eq!(refresh.path(), path);
    let health = health();
    let stop = StopSignal::new();
    stop.stop();
    refresh.run(&stop, &health);
    assert!(
        !health.is_up(),
        "the cached copy is what the remote served earlier"
    );
}

//! The informer as a background task: health while its server is unreachable, and a prompt
//! stop.

use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::{Catalogue, ComponentKind, Health, StopSignal};
use kepler_kube::{
    Cluster, Informer, InformerSettings, KubeletSettings, KubeletTrust, Mode, COMPONENT,
};

#[test]
fn an_unreachable_kubelet_is_reported_down_and_the_informer_stops_at_once() {
    // A port nothing listens on: bind, learn it, close.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("token"), "t").unwrap();
    let settings = InformerSettings {
        mode: Mode::Kubelet,
        node_name: "n".into(),
        poll_interval: Duration::from_secs(3600),
        cluster: Cluster::InCluster,
        kubelet: KubeletSettings {
            url: Some(format!("https://127.0.0.1:{port}")),
            trust: KubeletTrust::Insecure,
            token_file: Some(dir.path().join("token")),
        },
    };
    let catalogue = Arc::new(Catalogue::new());
    let task = Informer::new(settings, catalogue.clone()).into_task();
    assert_eq!(task.kind(), ComponentKind::Poller);
    assert_eq!(task.component(), COMPONENT);
    let health = Health::new().register(task.kind(), task.component());
    let stop = StopSignal::new();
    let thread = {
        let (stop, health) = (stop.clone(), health.clone());
        std::thread::spawn(move || task.run(stop, health))
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while health.is_up() {
        assert!(Instant::now() < deadline, "never reported down");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(health.errors(), 1);
    assert_eq!(
        catalogue.generation(),
        0,
        "nothing written without an answer"
    );

    // Waiting for its next poll an hour away, it still ends promptly.
    let stopped = Instant::now();
    stop.stop();
    thread.join().unwrap();
    assert!(
        stopped.elapsed() < Duration::from_secs(2),
        "{:?}",
        stopped.elapsed()
    );
}

//! The pod informer end to end: the real agent against a fake kubelet / API server over HTTPS
//! with a bearer token (tests/common/fake_kube.rs), with real processes in cgroups whose
//! paths carry a pod uid and a container id, as the kubelet's cgroupfs driver makes them.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::fake_kube::{pod, FakeKube};
use common::*;
use kepler_testkit::tools::skip;

const NODE: &str = "node-1";
const TOKEN: &str = "s3cret-token";
const LIMIT: Duration = Duration::from_secs(60);

fn container_id(tag: u32) -> String {
    format!(
        "{:08x}{}{:08x}",
        tag,
        "fedcba9876543210".repeat(3),
        std::process::id()
    )
}

fn pod_uid(tag: u32) -> String {
    format!("{tag:08x}-aaaa-bbbb-cccc-{:012x}", std::process::id())
}

/// Starts the agent on a simulated RAPL tree with `kube` settings (YAML under `kube:`).
fn agent(kube: &str, dir: &Path, sysfs: &Path) -> (Proc, u16) {
    let config = dir.join("kepler.yaml");
    std::fs::write(
        &config,
        format!("kube:\n  enabled: true\n  nodeName: {NODE}\n{kube}"),
    )
    .unwrap();
    let (agent, port) = start_agent(&[
        "--config.file",
        config.to_str().unwrap(),
        "--host.sysfs",
        sysfs.to_str().unwrap(),
        "--monitor.interval",
        "1s",
    ]);
    wait_ready(port, Duration::from_secs(30));
    (agent, port)
}

/// Scrapes until `check` holds; the last scrape.
fn wait_for(port: u16, what: &str, check: impl Fn(&[Sample]) -> bool) -> Vec<Sample> {
    let deadline = Instant::now() + LIMIT;
    loop {
        let samples = scrape(port);
        if check(&samples) {
            return samples;
        }
        assert!(Instant::now() < deadline, "{what} within {LIMIT:?}");
        std::thread::sleep(Duration::from_millis(300));
    }
}

fn labels<'a>(sample: &'a Sample, key: &str) -> &'a str {
    sample.labels.get(key).map(String::as_str).unwrap_or("")
}

/// The `container_name` of container `id`'s package series, if exported.
fn container_name(samples: &[Sample], id: &str) -> Option<String> {
    select(
        samples,
        "kepler_container_cpu_watts",
        &[("container_id", id), ("zone", "package")],
    )
    .first()
    .map(|s| labels(s, "container_name").to_string())
}

/// (pod_name, pod_namespace) of pod `uid`'s package series, if exported.
fn pod_names(samples: &[Sample], uid: &str) -> Option<(String, String)> {
    select(
        samples,
        "kepler_pod_cpu_watts",
        &[("pod_id", uid), ("zone", "package")],
    )
    .first()
    .map(|s| {
        (
            labels(s, "pod_name").to_string(),
            labels(s, "pod_namespace").to_string(),
        )
    })
}

fn informer_up(samples: &[Sample]) -> Option<f64> {
    select(
        samples,
        "kepler_agent_component_up",
        &[("component", "poller"), ("name", "pod_informer")],
    )
    .first()
    .map(|s| s.value)
}

fn informer_errors(samples: &[Sample]) -> f64 {
    select(
        samples,
        "kepler_agent_component_errors_total",
        &[("component", "poller"), ("name", "pod_informer")],
    )
    .first()
    .map_or(0.0, |s| s.value)
}

fn root_or_skip() -> bool {
    if common::is_root() {
        return true;
    }
    skip("SKIP: needs root to place workloads in pod cgroups");
    false
}

#[test]
fn kubelet_names_pods_keeps_them_through_an_outage_and_follows_after() {
    if !root_or_skip() {
        return;
    }
    let uid = pod_uid(1);
    let (first, second) = (container_id(1), container_id(2));
    let first_cgroup = PodCgroup::create(&uid, &first).expect("a writable cgroup hierarchy");
    let second_cgroup = PodCgroup::create(&uid, &second).expect("a writable cgroup hierarchy");
    let mut fake = FakeKube::start(NODE, TOKEN);
    fake.set_pod(pod(&uid, "web-1", "shop", &[("nginx", &first)]));
    let _load = first_cgroup.run();

    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 40.0, 1 << 40)]);
    let dir = tempfile::tempdir().unwrap();
    let kube = format!(
        "  podInformer:\n    pollInterval: 1s\n    kubeletURL: {}\n    kubeletCAFile: {}\n    \
         tokenFile: {}\n",
        fake.url(),
        fake.ca_file().display(),
        fake.token_file().display()
    );
    let (_agent, port) = agent(&kube, dir.path(), sysfs.path());

    let samples = wait_for(port, "pod and container names from the kubelet", |s| {
        container_name(s, &first).as_deref() == Some("nginx")
            && pod_names(s, &uid) == Some(("web-1".into(), "shop".into()))
    });
    assert_eq!(informer_up(&samples), Some(1.0));
    let container = &select(
        &samples,
        "kepler_container_cpu_watts",
        &[("container_id", &first), ("zone", "package")],
    )[0];
    assert_eq!(labels(container, "pod_id"), uid);
    assert!(container.value > 0.0, "a busy container draws power");
    assert!(fake.requests().iter().all(|r| r == "/pods"));
    assert_eq!(
        fake.unauthorised(),
        0,
        "the token file is sent as a bearer token"
    );

    // The kubelet goes away: names stay, health says so.
    fake.stop();
    let samples = wait_for(port, "the informer reported down", |s| {
        informer_up(s) == Some(0.0) && informer_errors(s) >= 1.0
    });
    assert_eq!(container_name(&samples, &first).as_deref(), Some("nginx"));
    assert_eq!(
        pod_names(&samples, &uid),
        Some(("web-1".into(), "shop".into()))
    );

    // Meanwhile the container restarts under a new id, which nobody can name yet.
    fake.set_pod(pod(&uid, "web-1", "shop", &[("nginx", &second)]));
    let _restarted = second_cgroup.run();
    let samples = wait_for(port, "the restarted container exported", |s| {
        container_name(s, &second).is_some()
    });
    assert_eq!(container_name(&samples, &second).as_deref(), Some(""));
    assert_eq!(informer_up(&samples), Some(0.0));

    // The kubelet comes back: names follow.
    fake.resume();
    let samples = wait_for(port, "names of the restarted container", |s| {
        container_name(s, &second).as_deref() == Some("nginx") && informer_up(s) == Some(1.0)
    });
    assert_eq!(
        pod_names(&samples, &uid),
        Some(("web-1".into(), "shop".into()))
    );
}

#[test]
fn an_unknown_container_triggers_an_early_kubelet_poll() {
    if !root_or_skip() {
        return;
    }
    let uid = pod_uid(3);
    let id = container_id(3);
    let cgroup = PodCgroup::create(&uid, &id).expect("a writable cgroup hierarchy");
    let fake = FakeKube::start(NODE, TOKEN);
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 40.0, 1 << 40)]);
    let dir = tempfile::tempdir().unwrap();
    // An hour between polls: only the early poll can name the pod within the test.
    let kube = format!(
        "  podInformer:\n    pollInterval: 1h\n    kubeletURL: {}\n    kubeletCAFile: {}\n    \
         tokenFile: {}\n",
        fake.url(),
        fake.ca_file().display(),
        fake.token_file().display()
    );
    let (_agent, port) = agent(&kube, dir.path(), sysfs.path());
    let deadline = Instant::now() + LIMIT;
    while fake.requests().is_empty() {
        assert!(Instant::now() < deadline, "no first poll");
        std::thread::sleep(Duration::from_millis(100));
    }

    fake.set_pod(pod(&uid, "late-pod", "jobs", &[("worker", &id)]));
    let _load = cgroup.run();
    wait_for(port, "names of a pod created after the last poll", |s| {
        container_name(s, &id).as_deref() == Some("worker")
            && pod_names(s, &uid) == Some(("late-pod".into(), "jobs".into()))
    });
    let polls = fake.requests().len();
    assert!(
        (2..=3).contains(&polls),
        "one early poll for the new container, not one per process: {polls}"
    );
}

#[test]
fn apiserver_watch_names_pods_and_lists_again_after_410() {
    if !root_or_skip() {
        return;
    }
    let (first_uid, second_uid) = (pod_uid(4), pod_uid(5));
    let (first, second) = (container_id(4), container_id(5));
    let first_cgroup = PodCgroup::create(&first_uid, &first).expect("a writable hierarchy");
    let second_cgroup = PodCgroup::create(&second_uid, &second).expect("a writable hierarchy");
    let fake = FakeKube::start(NODE, TOKEN);
    fake.set_pod(pod(&first_uid, "db-0", "data", &[("postgres", &first)]));
    let first_load = first_cgroup.run();
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 40.0, 1 << 40)]);
    let dir = tempfile::tempdir().unwrap();
    let kube = format!(
        "  config: {}\n  podInformer:\n    mode: apiserver\n    pollInterval: 1s\n",
        fake.kubeconfig().display()
    );
    let (_agent, port) = agent(&kube, dir.path(), sysfs.path());
    wait_for(port, "names from the API server's list", |s| {
        container_name(s, &first).as_deref() == Some("postgres")
            && pod_names(s, &first_uid) == Some(("db-0".into(), "data".into()))
    });

    // The stored history is compacted: the watch ends with 410 and the informer lists again;
    // a pod added afterwards is named through the new list or watch.
    fake.expire();
    fake.set_pod(pod(&second_uid, "cache-0", "data", &[("redis", &second)]));
    let _second_load = second_cgroup.run();
    let samples = wait_for(port, "names of a pod added after the 410", |s| {
        container_name(s, &second).as_deref() == Some("redis")
    });
    assert_eq!(informer_up(&samples), Some(1.0));
    let requests = fake.requests();
    let lists = requests
        .iter()
        .filter(|r| r.starts_with("/api/v1/pods?") && !r.contains("watch=true"))
        .count();
    assert!(lists >= 2, "listed again after 410: {requests:?}");
    assert!(
        requests
            .iter()
            .all(|r| !r.starts_with("/api/v1/pods?")
                || r.contains("fieldSelector=spec.nodeName=node-1")),
        "every pod request selects this node: {requests:?}"
    );

    // A deleted pod's series keep their names until they retire: the catalogue drops the
    // pod, attribution keeps what it joined. The pod after it in the stream tells that the
    // deletion was applied.
    fake.delete_pod(&first_uid);
    drop(first_load);
    let (third_uid, third) = (pod_uid(6), container_id(6));
    let third_cgroup = PodCgroup::create(&third_uid, &third).expect("a writable hierarchy");
    fake.set_pod(pod(&third_uid, "queue-0", "data", &[("rabbit", &third)]));
    let _third_load = third_cgroup.run();
    let samples = wait_for(port, "names of the pod after the deletion", |s| {
        container_name(s, &third).as_deref() == Some("rabbit")
    });
    assert_eq!(
        container_name(&samples, &first).as_deref(),
        Some("postgres")
    );
    assert_eq!(
        pod_names(&samples, &first_uid),
        Some(("db-0".into(), "data".into()))
    );
}

#[test]
fn kubelet_address_comes_from_the_node_object_and_the_token_is_read_every_poll() {
    let fake = FakeKube::start(NODE, TOKEN);
    let sysfs = sysfs_dir();
    let _sim = PowercapSim::start(sysfs.path(), &[("package-0", 40.0, 1 << 40)]);
    let dir = tempfile::tempdir().unwrap();
    let kube = format!(
        "  config: {}\n  podInformer:\n    pollInterval: 1s\n",
        fake.kubeconfig().display()
    );
    let (_agent, port) = agent(&kube, dir.path(), sysfs.path());
    wait_for(port, "the informer up", |s| informer_up(s) == Some(1.0));
    let deadline = Instant::now() + LIMIT;
    while !fake.requests().iter().any(|r| r == "/pods") {
        assert!(
            Instant::now() < deadline,
            "no kubelet poll: {:?}",
            fake.requests()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let requests = fake.requests();
    assert_eq!(requests[0], format!("/api/v1/nodes/{NODE}"), "{requests:?}");

    // A rotated token that the server does not accept: the informer goes down...
    std::fs::write(fake.token_file(), "rotated-wrong\n").unwrap();
    let samples = wait_for(port, "the informer down on 401", |s| {
        informer_up(s) == Some(0.0)
    });
    assert!(informer_errors(&samples) >= 1.0);
    assert!(fake.unauthorised() >= 1);
    // ...and up again once the file holds a good token, without a restart.
    std::fs::write(fake.token_file(), format!("{TOKEN}\n")).unwrap();
    wait_for(port, "the informer up again", |s| {
        informer_up(s) == Some(1.0)
    });
}

#[test]
fn probe_reports_what_the_kubelet_and_the_api_server_answer() {
    let fake = FakeKube::start(NODE, TOKEN);
    fake.set_pod(pod(&pod_uid(7), "p", "ns", &[("c", &container_id(7))]));
    let dir = tempfile::tempdir().unwrap();
    let probe = |kube: String| {
        let config = dir.path().join("probe.yaml");
        std::fs::write(
            &config,
            format!("ebpf:\n  enabled: false\nkube:\n  enabled: true\n  nodeName: {NODE}\n{kube}"),
        )
        .unwrap();
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_kepler"))
            .args(["probe", "--config.file", config.to_str().unwrap()])
            .output()
            .expect("kepler probe");
        assert!(out.status.success());
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    let kubeconfig = format!("  config: {}\n", fake.kubeconfig().display());
    let out = probe(kubeconfig.clone());
    let want = format!(
        "  kube     available      kubelet {} lists 1 pods",
        fake.url()
    );
    assert!(out.contains(&want), "{out}");
    let out = probe(format!("{kubeconfig}  podInformer:\n    mode: apiserver\n"));
    let want = format!(
        "  kube     available      API server {} lists 1 pods on node {NODE}",
        fake.url()
    );
    assert!(out.contains(&want), "{out}");
    // A kubelet whose certificate is not the configured CA's is refused, with the reason.
    let out = probe(format!(
        "  podInformer:\n    kubeletURL: {}\n    kubeletCAFile: {}\n    tokenFile: {}\n",
        fake.url(),
        dir.path().join("missing-ca.pem").display(),
        fake.token_file().display()
    ));
    assert!(
        out.contains("  kube     not available  kube.podInformer.kubeletCAFile"),
        "{out}"
    );
}

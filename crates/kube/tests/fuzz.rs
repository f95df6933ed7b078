//! Fuzz targets for the pod JSON of the kubelet's `/pods` and the API server's list and watch
//! answers: pod lists built from random fields, then mutated byte by byte, and random text; and
//! the Node object the kubelet's address is taken from.
//! `KEPLER_FUZZ_CASES` sets the cases per target (docs/security.md records the long local runs).

use kepler_kube::kubelet::{kubelet_url, Node, DEFAULT_PORT};
use kepler_kube::pods::{strip_runtime, PodIndex, PodList};
use kepler_kube::watch::{Applied, Reflector, WatchEvent};
use kepler_testkit::fuzz::{edits, mutate};
use proptest::prelude::*;
use serde_json::{json, Value};

#[derive(Clone, Debug)]
struct GenPod {
    uid: String,
    name: String,
    containers: Vec<(String, String, Option<String>)>,
}

fn container_id() -> impl Strategy<Value = String> {
    prop_oneof![
        "[0-9a-f]{64}".prop_map(|id| format!("containerd://{id}")),
        "[0-9a-f]{12}".prop_map(|id| format!("cri-o://{id}")),
        "\\PC{0,20}",
        Just(String::new()),
    ]
}

fn pod() -> impl Strategy<Value = GenPod> {
    (
        prop_oneof!["[0-9a-f-]{36}", Just(String::new()), "\\PC{0,8}"],
        prop_oneof!["[a-z0-9-]{1,20}", Just(String::new())],
        prop::collection::vec(
            (
                container_id(),
                "[a-z0-9-]{0,12}",
                prop::option::of(container_id()),
            ),
            0..4,
        ),
    )
        .prop_map(|(uid, name, containers)| GenPod {
            uid,
            name,
            containers,
        })
}

fn pod_json(p: &GenPod, version: u32) -> Value {
    let statuses: Vec<Value> = p
        .containers
        .iter()
        .map(|(id, name, previous)| {
            let mut s = json!({ "name": name, "containerID": id, "ready": true });
            if let Some(prev) = previous {
                s["lastState"] = json!({ "terminated": { "containerID": prev, "exitCode": 1 } });
            }
            s
        })
        .collect();
    json!({
        "metadata": {
            "name": p.name, "namespace": "default", "uid": p.uid,
            "resourceVersion": version.to_string(), "labels": { "app": "x" }
        },
        "spec": { "containers": [{ "name": "c", "image": "i" }] },
        "status": { "phase": "Running", "containerStatuses": statuses }
    })
}

fn check_index(index: &PodIndex) -> Result<(), TestCaseError> {
    for id in index.container_ids() {
        prop_assert!(!id.is_empty());
        prop_assert!(index.knows_container(&id));
    }
    Ok(())
}

proptest! {
    #![proptest_config(kepler_testkit::fuzz::config(1024))]

    #[test]
    fn pod_lists(pods in prop::collection::vec(pod(), 0..6), edits in edits()) {
        let list = json!({
            "kind": "PodList", "apiVersion": "v1",
            "metadata": { "resourceVersion": "42" },
            "items": pods.iter().map(|p| pod_json(p, 1)).collect::<Vec<_>>(),
        });
        let text = serde_json::to_vec(&list).unwrap_or_default();
        let parsed: PodList = serde_json::from_slice(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let mut reflector = Reflector::new();
        let skipped = reflector.listed(&parsed);
        prop_assert_eq!(reflector.resource_version(), Some("42"));
        // Every pod with a uid and a name is indexed (the last of a duplicated uid wins), with
        // each non-empty container id, runtime prefix removed.
        let kept: Vec<&GenPod> = pods.iter().filter(|p| !p.uid.is_empty() && !p.name.is_empty()).collect();
        prop_assert_eq!(skipped.len(), pods.len() - kept.len());
        for p in &kept {
            let last = kept.iter().rev().find(|q| q.uid == p.uid).map(|q| q.name.as_str());
            prop_assert_eq!(reflector.index.pod(&p.uid).map(|r| r.name.as_str()), last);
        }
        if let Some(p) = kept.last() {
            for (id, _, previous) in &p.containers {
                for id in std::iter::once(id).chain(previous) {
                    let id = strip_runtime(id);
                    prop_assert!(id.is_empty() || reflector.index.knows_container(id));
                }
            }
        }
        check_index(&reflector.index)?;

        if let Ok(list) = serde_json::from_slice::<PodList>(&mutate(text, &edits)) {
            let mut index = PodIndex::new();
            let skipped = index.replace(&list);
            prop_assert!(index.len() + skipped.len() <= list.items.len());
            check_index(&index)?;
        }
    }

    #[test]
    fn watch_events(
        events in prop::collection::vec(
            (prop::sample::select(vec!["ADDED", "MODIFIED", "DELETED", "BOOKMARK", "ERROR", "OTHER"]),
             pod(), any::<u16>(), edits()),
            1..8),
    ) {
        let mut reflector = Reflector::new();
        for (n, (kind, p, code, edits)) in events.iter().enumerate() {
            let object = if *kind == "ERROR" {
                json!({ "kind": "Status", "code": code, "reason": "Expired", "message": "too old" })
            } else {
                pod_json(p, n as u32)
            };
            let line = serde_json::to_vec(&json!({ "type": kind, "object": object })).unwrap_or_default();
            let line = if n % 2 == 0 { line } else { mutate(line, edits) };
            let Ok(event) = serde_json::from_slice::<WatchEvent>(&line) else {
                continue;
            };
            let before = reflector.index.len();
            match reflector.apply(event) {
                Applied::Relist(why) => {
                    prop_assert!(why.contains("watch error"));
                    prop_assert_eq!(reflector.resource_version(), None);
                }
                Applied::Unchanged | Applied::Skipped(_) => prop_assert_eq!(reflector.index.len(), before),
                Applied::Changed => {}
            }
            check_index(&reflector.index)?;
        }
    }

    /// The kubelet's URL from a Node object: either a typed error naming the node, or an
    /// `https` URL whose host is exactly the first InternalIP that is an IP address, and whose
    /// port is the object's (10250 when absent or 0).
    #[test]
    fn node_objects(
        addresses in prop::collection::vec((
            prop_oneof![Just("InternalIP".to_string()), Just("ExternalIP".to_string()), Just("Hostname".to_string()), "\\PC{0,12}"],
            prop_oneof![
                any::<std::net::Ipv4Addr>().prop_map(|a| a.to_string()),
                any::<std::net::Ipv6Addr>().prop_map(|a| a.to_string()),
                "[a-z0-9.:@/?#\\[\\]-]{0,24}",
                "\\PC{0,24}",
            ],
        ), 0..4),
        port in prop_oneof![
            (0u32..=65535).prop_map(|p| json!(p)),
            any::<i64>().prop_map(|p| json!(p)),
            "\\PC{0,6}".prop_map(|p| json!(p)),
            Just(Value::Null),
        ],
        edits in edits(),
    ) {
        let addresses: Vec<Value> = addresses.iter().map(|(kind, address)| json!({ "type": kind, "address": address })).collect();
        let object = json!({ "metadata": { "name": "n1" }, "status": {
            "addresses": addresses, "daemonEndpoints": { "kubeletEndpoint": { "Port": port } } } });
        let text = serde_json::to_vec(&object).unwrap_or_default();
        for data in [text.clone(), mutate(text, &edits)] {
            let Ok(node) = serde_json::from_slice::<Node>(&data) else { continue };
            match kubelet_url("n1", &node) {
                Ok(url) => {
                    let ip = node.status.addresses.iter()
                        .filter(|a| a.kind == "InternalIP")
                        .find_map(|a| a.address.parse::<std::net::IpAddr>().ok());
                    prop_assert!(ip.is_some(), "{url}");
                    let want_port = match node.status.daemon_endpoints.kubelet_endpoint.port { 0 => DEFAULT_PORT, p => p };
                    let parsed = reqwest::Url::parse(&url).map_err(|e| TestCaseError::fail(format!("{url}: {e}")))?;
                    prop_assert_eq!(parsed.scheme(), "https");
                    let host = parsed.host_str().unwrap_or("").trim_start_matches('[').trim_end_matches(']').to_string();
                    prop_assert_eq!(host.parse::<std::net::IpAddr>().ok(), ip, "{}", url);
                    prop_assert_eq!(parsed.port_or_known_default(), Some(want_port), "{}", url);
                    prop_assert_eq!(parsed.path(), "/");
                    prop_assert!(parsed.username().is_empty() && parsed.query().is_none());
                }
                Err(e) => {
                    let e = e.to_string();
                    prop_assert!(e.contains("n1") && e.contains("InternalIP"), "{}", e);
                }
            }
        }
    }

    #[test]
    fn random_text(text in "\\PC{0,400}", bytes in prop::collection::vec(any::<u8>(), 0..400)) {
        for data in [text.as_bytes(), &bytes[..]] {
            if let Ok(list) = serde_json::from_slice::<PodList>(data) {
                let mut index = PodIndex::new();
                index.replace(&list);
                check_index(&index)?;
            }
            if let Ok(event) = serde_json::from_slice::<WatchEvent>(data) {
                Reflector::new().apply(event);
            }
        }
    }
}

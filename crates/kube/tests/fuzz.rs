//! Fuzz targets for the pod JSON of the kubelet's `/pods` and the API server's list and watch
//! answers: pod lists built from random fields, then mutated byte by byte, and random text.
//! `KEPLER_FUZZ_CASES` sets the cases per target (docs/security.md records the long local runs).

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

//! The informer's state machine and container-id mapping on kubelet `/pods` and API-server
//! list/watch answers in the shape a cluster gives them (tests/data: pods with init and
//! ephemeral containers, a restarted container, a container not created yet, a finished pod, a
//! pod without uid; watch events adding, restarting, deleting, a bookmark and 410 Gone).

use kepler_core::Catalogue;
use kepler_kube::pods::{PodIndex, PodList, Skipped};
use kepler_kube::watch::{Applied, Reflector, WatchEvent};

fn id(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

fn data(name: &str) -> String {
    std::fs::read_to_string(format!("{}/tests/data/{name}", env!("CARGO_MANIFEST_DIR"))).unwrap()
}

/// (container name, pod uid, pod name, namespace) of a container id, as the catalogue has it.
fn names(catalogue: &Catalogue, container: &str) -> Option<(String, String, String, String)> {
    let view = catalogue.view();
    let c = view.container(container)?;
    let uid = c.pod_id.clone()?;
    let pod = view.pod(&uid)?;
    Some((c.name.clone(), uid, pod.name.clone(), pod.namespace.clone()))
}

fn expect(catalogue: &Catalogue, container: u8, want: (&str, &str, &str, &str)) {
    let got = names(catalogue, &id(container));
    let want = (
        want.0.to_string(),
        want.1.to_string(),
        want.2.to_string(),
        want.3.to_string(),
    );
    assert_eq!(got, Some(want), "container {}", id(container));
}

const WEB: &str = "11111111-2222-3333-4444-555555555555";
const DB: &str = "66666666-7777-8888-9999-000000000000";
const JOB: &str = "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee";

#[test]
fn kubelet_pods_map_every_container_id_to_its_pod() {
    let list: PodList = serde_json::from_str(&data("kubelet_pods.json")).unwrap();
    let mut index = PodIndex::new();
    let skipped = index.replace(&list);
    assert_eq!(skipped, vec![Skipped::NoUid("no-uid".into())]);
    let catalogue = Catalogue::new();
    index.write_to(&catalogue);

    expect(&catalogue, 1, ("nginx", WEB, "web-7d4b9c", "shop"));
    // The instance before the restart keeps its names too.
    expect(&catalogue, 2, ("nginx", WEB, "web-7d4b9c", "shop"));
    expect(&catalogue, 3, ("sidecar", WEB, "web-7d4b9c", "shop"));
    expect(&catalogue, 4, ("migrate", WEB, "web-7d4b9c", "shop"));
    expect(&catalogue, 5, ("debugger", WEB, "web-7d4b9c", "shop"));
    // cri-o:// and docker:// prefixes are stripped like containerd://.
    expect(&catalogue, 6, ("postgres", DB, "db-0", "shop"));
    // A finished pod is still listed, so its names stay.
    expect(&catalogue, 7, ("work", JOB, "job-x", "batch"));
    assert!(index.knows_container(&id(6)));
    // A container still being created has no id and no entry.
    assert_eq!(index.container_ids().len(), 7);
    assert!(!index.knows_container(""));
}

#[test]
fn a_later_poll_replaces_the_view_deleted_pods_leave() {
    let list: PodList = serde_json::from_str(&data("kubelet_pods.json")).unwrap();
    let catalogue = Catalogue::new();
    let mut index = PodIndex::new();
    index.replace(&list);
    index.write_to(&catalogue);
    let generation = catalogue.generation();

    // Same answer: nothing changes, so attribution need not re-join names.
    index.replace(&list);
    index.write_to(&catalogue);
    assert_eq!(catalogue.generation(), generation);

    let mut smaller: PodList = serde_json::from_str(&data("kubelet_pods.json")).unwrap();
    smaller.items.retain(|p| p.metadata.uid == DB);
    index.replace(&smaller);
    index.write_to(&catalogue);
    assert!(catalogue.generation() > generation);
    assert_eq!(names(&catalogue, &id(1)), None);
    assert!(catalogue.view().pod(WEB).is_none());
    expect(&catalogue, 6, ("postgres", DB, "db-0", "shop"));
}

#[test]
fn apiserver_list_then_watch_events_in_order() {
    let list: PodList = serde_json::from_str(&data("apiserver_list.json")).unwrap();
    let mut reflector = Reflector::new();
    assert!(reflector.listed(&list).is_empty());
    assert_eq!(reflector.resource_version(), Some("2000"));
    let catalogue = Catalogue::new();
    reflector.index.write_to(&catalogue);
    expect(&catalogue, 1, ("nginx", WEB, "web-7d4b9c", "shop"));
    assert_eq!(names(&catalogue, &id(7)), None);

    let text = data("apiserver_watch.jsonl");
    let events: Vec<WatchEvent> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut events = events.into_iter();
    let mut step = |want: Applied, version: Option<&str>| {
        let got = reflector.apply(events.next().unwrap());
        assert_eq!(got, want);
        assert_eq!(reflector.resource_version(), version);
        reflector.index.write_to(&catalogue);
    };

    // ADDED: the job.
    step(Applied::Changed, Some("2001"));
    expect(&catalogue, 7, ("work", JOB, "job-x", "batch"));
    // MODIFIED: postgres restarted under a new id; the pending container got one.
    step(Applied::Changed, Some("2002"));
    expect(&catalogue, 8, ("postgres", DB, "db-0", "shop"));
    expect(&catalogue, 6, ("postgres", DB, "db-0", "shop"));
    expect(&catalogue, 9, ("pending", DB, "db-0", "shop"));
    // DELETED: the web pod and all its containers leave the catalogue.
    step(Applied::Changed, Some("2003"));
    for n in 1..=5 {
        assert_eq!(names(&catalogue, &id(n)), None, "container {n}");
    }
    assert!(catalogue.view().pod(WEB).is_none());
    // BOOKMARK: only the version moves.
    let generation = catalogue.generation();
    step(Applied::Unchanged, Some("2010"));
    assert_eq!(catalogue.generation(), generation);
    // ERROR 410: the version is forgotten, the next round lists; names stay meanwhile.
    let got = reflector.apply(events.next().unwrap());
    assert!(
        matches!(&got, Applied::Relist(why) if why.contains("410")),
        "{got:?}"
    );
    assert_eq!(reflector.resource_version(), None);
    expect(&catalogue, 8, ("postgres", DB, "db-0", "shop"));

    // Deleting a pod twice (a replayed event) changes nothing.
    let replay: WatchEvent = serde_json::from_str(text.lines().nth(2).unwrap()).unwrap();
    assert_eq!(reflector.apply(replay), Applied::Unchanged);
}

#[test]
fn garbage_events_are_errors_not_panics() {
    for line in [
        "{}",
        "{\"type\":\"ADDED\"}",
        "{\"type\":\"EXPLODED\",\"object\":{}}",
        "not json",
        "{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"uid\":7}}}",
    ] {
        assert!(
            serde_json::from_str::<WatchEvent>(line).is_err(),
            "{line} parsed"
        );
    }
    // A well-formed event about a pod without a uid is skipped, not indexed under "".
    let event: WatchEvent =
        serde_json::from_str("{\"type\":\"ADDED\",\"object\":{\"metadata\":{\"name\":\"p\"}}}")
            .unwrap();
    let mut reflector = Reflector::new();
    assert_eq!(
        reflector.apply(event),
        Applied::Skipped(Skipped::NoUid("p".into()))
    );
    assert!(reflector.index.is_empty());
}

//! The parts of the Kubernetes `Pod` object the informer reads, and the index of this node's
//! pods by container id that both modes keep.
//!
//! Only the fields needed to name containers are declared; serde skips the rest, so a kubelet
//! `/pods` answer of a few megabytes parses without building the whole object tree.

use std::collections::{HashMap, HashSet};

use kepler_core::{Catalogue, ContainerNames, NameSource, PodNames};
use serde::Deserialize;

/// `PodList` as the kubelet's `/pods` and the API server's list answer it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PodList {
    pub metadata: ListMeta,
    pub items: Vec<Pod>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ListMeta {
    pub resource_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pod {
    pub metadata: ObjectMeta,
    pub status: PodStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ObjectMeta {
    pub name: String,
    pub namespace: String,
    pub uid: String,
    pub resource_version: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct PodStatus {
    pub container_statuses: Vec<ContainerStatus>,
    pub init_container_statuses: Vec<ContainerStatus>,
    pub ephemeral_container_statuses: Vec<ContainerStatus>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct ContainerStatus {
    pub name: String,
    /// `<runtime>://<id>`; empty while the container has not been created.
    #[serde(rename = "containerID")]
    pub container_id: String,
    pub last_state: ContainerState,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ContainerState {
    pub terminated: Option<Terminated>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Terminated {
    #[serde(rename = "containerID")]
    pub container_id: String,
}

/// The id as cgroup paths carry it: `containerd://abc…` → `abc…`.
pub fn strip_runtime(container_id: &str) -> &str {
    match container_id.split_once("://") {
        Some((_, id)) => id,
        None => container_id,
    }
}

/// What the index keeps of one pod.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRecord {
    pub name: String,
    pub namespace: String,
    /// (container id without runtime prefix, container name).
    pub containers: Vec<(String, String)>,
}

/// Why a pod of an answer was left out.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Skipped {
    #[error("pod without metadata.uid (name {0:?})")]
    NoUid(String),
    #[error("pod {0} without metadata.name")]
    NoName(String),
}

impl PodRecord {
    /// Every container id the pod's statuses name: current containers of all three kinds,
    /// and the previous instance of a restarted one, whose processes may still be reported
    /// under their own id for one more tick.
    pub fn from_pod(pod: &Pod) -> Result<(String, PodRecord), Skipped> {
        let meta = &pod.metadata;
        if meta.uid.is_empty() {
            return Err(Skipped::NoUid(meta.name.clone()));
        }
        if meta.name.is_empty() {
            return Err(Skipped::NoName(meta.uid.clone()));
        }
        let status = &pod.status;
        let mut containers = Vec::new();
        for c in status
            .container_statuses
            .iter()
            .chain(&status.init_container_statuses)
            .chain(&status.ephemeral_container_statuses)
        {
            let previous = c.last_state.terminated.as_ref().map(|t| &t.container_id);
            for id in std::iter::once(&c.container_id).chain(previous) {
                let id = strip_runtime(id);
                if !id.is_empty() {
                    containers.push((id.to_string(), c.name.clone()));
                }
            }
        }
        Ok((
            meta.uid.clone(),
            PodRecord {
                name: meta.name.clone(),
                namespace: meta.namespace.clone(),
                containers,
            },
        ))
    }
}

/// This node's pods by uid, with their containers; written to the catalogue as one complete
/// view, so pods that left the list leave the catalogue (their series keep the names they
/// had until they retire; see the catalogue).
#[derive(Debug, Default)]
pub struct PodIndex {
    pods: HashMap<String, PodRecord>,
    /// Container ids of all pods, for the "is this container known" question of the
    /// classifier; rebuilt on each change.
    ids: HashSet<String>,
}

impl PodIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn len(&self) -> usize {
        self.pods.len()
    }

    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    pub fn pod(&self, uid: &str) -> Option<&PodRecord> {
        self.pods.get(uid)
    }

    pub fn knows_container(&self, id: &str) -> bool {
        self.ids.contains(id)
    }

    pub fn container_ids(&self) -> HashSet<String> {
        self.ids.clone()
    }

    /// Replaces everything with a complete list; returns the pods left out and why.
    pub fn replace(&mut self, list: &PodList) -> Vec<Skipped> {
        let mut skipped = Vec::new();
        self.pods.clear();
        for pod in &list.items {
            match PodRecord::from_pod(pod) {
                Ok((uid, record)) => {
                    self.pods.insert(uid, record);
                }
                Err(why) => skipped.push(why),
            }
        }
        self.reindex();
        skipped
    }

    /// Adds or updates one pod.
    pub fn upsert(&mut self, pod: &Pod) -> Result<(), Skipped> {
        let (uid, record) = PodRecord::from_pod(pod)?;
        self.pods.insert(uid, record);
        self.reindex();
        Ok(())
    }

    /// Removes one pod; true when it was there.
    pub fn remove(&mut self, uid: &str) -> bool {
        let removed = self.pods.remove(uid).is_some();
        if removed {
            self.reindex();
        }
        removed
    }

    fn reindex(&mut self) {
        self.ids = self
            .pods
            .values()
            .flat_map(|p| p.containers.iter().map(|(id, _)| id.clone()))
            .collect();
    }

    /// Writes the whole index as the Kubernetes view of the catalogue.
    pub fn write_to(&self, catalogue: &Catalogue) {
        let containers = self.pods.iter().flat_map(|(uid, pod)| {
            pod.containers.iter().map(move |(id, name)| {
                (
                    id.clone(),
                    ContainerNames {
                        name: name.clone(),
                        pod_id: Some(uid.clone()),
                    },
                )
            })
        });
        let pods = self.pods.iter().map(|(uid, pod)| {
            (
                uid.clone(),
                PodNames {
                    name: pod.name.clone(),
                    namespace: pod.namespace.clone(),
                },
            )
        });
        catalogue.replace_all_from(NameSource::Kubernetes, containers, pods);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runtime_prefixes_are_stripped() {
        assert_eq!(strip_runtime("containerd://abc"), "abc");
        assert_eq!(strip_runtime("cri-o://abc"), "abc");
        assert_eq!(strip_runtime("docker://abc"), "abc");
        assert_eq!(strip_runtime("abc"), "abc");
        assert_eq!(strip_runtime(""), "");
    }

    #[test]
    fn pods_without_uid_or_name_are_skipped() {
        let list: PodList = serde_json::from_str(
            r#"{"items":[{"metadata":{"name":"a"}},{"metadata":{"uid":"u"}},
                {"metadata":{"name":"ok","namespace":"ns","uid":"u2"}}]}"#,
        )
        .unwrap();
        let mut index = PodIndex::new();
        let skipped = index.replace(&list);
        assert_eq!(
            skipped,
            vec![Skipped::NoUid("a".into()), Skipped::NoName("u".into())]
        );
        assert_eq!(index.len(), 1);
        assert_eq!(index.pod("u2").map(|p| p.name.as_str()), Some("ok"));
    }
}

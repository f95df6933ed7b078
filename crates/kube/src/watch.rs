//! The API server's list+watch protocol as a state machine without I/O: a list replaces the
//! index and gives the resource version to watch from; each watch event moves the index and
//! the version on; a version the server no longer has (410 Gone) means list again.

use serde::Deserialize;

use crate::pods::{Pod, PodIndex, PodList, Skipped};

/// One line of a watch stream.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", content = "object")]
pub enum WatchEvent {
    #[serde(rename = "ADDED")]
    Added(Pod),
    #[serde(rename = "MODIFIED")]
    Modified(Pod),
    #[serde(rename = "DELETED")]
    Deleted(Pod),
    /// Only moves the resource version on (`allowWatchBookmarks`).
    #[serde(rename = "BOOKMARK")]
    Bookmark(Pod),
    #[serde(rename = "ERROR")]
    Error(Status),
}

/// `metav1.Status`, as an `ERROR` event or an error answer carries it.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Status {
    pub code: u16,
    pub reason: String,
    pub message: String,
}

/// What an event did.
#[derive(Debug, PartialEq, Eq)]
pub enum Applied {
    /// The index changed: write it to the catalogue.
    Changed,
    /// Only the resource version moved.
    Unchanged,
    /// A pod of the event was left out.
    Skipped(Skipped),
    /// The watch cannot go on from here: list again.
    Relist(String),
}

/// The informer's state in `apiserver` mode.
#[derive(Debug, Default)]
pub struct Reflector {
    pub index: PodIndex,
    /// Where the next watch starts; none until a list succeeded.
    resource_version: Option<String>,
}

impl Reflector {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn resource_version(&self) -> Option<&str> {
        self.resource_version.as_deref()
    }

    /// A complete list: replaces the index and the version; returns pods left out.
    pub fn listed(&mut self, list: &PodList) -> Vec<Skipped> {
        self.resource_version = list.metadata.resource_version.clone();
        self.index.replace(list)
    }

    /// The watch answered 410 Gone, or the stream said so: the next round lists.
    pub fn forget_version(&mut self) {
        self.resource_version = None;
    }

    pub fn apply(&mut self, event: WatchEvent) -> Applied {
        let (pod, deleted) = match event {
            WatchEvent::Added(pod) | WatchEvent::Modified(pod) => (pod, false),
            WatchEvent::Deleted(pod) => (pod, true),
            WatchEvent::Bookmark(pod) => {
                self.bump(&pod);
                return Applied::Unchanged;
            }
            WatchEvent::Error(status) => {
                // 410 Gone is the documented answer to a version the server compacted away;
                // any other error status also leaves the stream unusable, so list again.
                self.forget_version();
                return Applied::Relist(format!(
                    "watch error {} {}: {}",
                    status.code, status.reason, status.message
                ));
            }
        };
        self.bump(&pod);
        if deleted {
            return match self.index.remove(&pod.metadata.uid) {
                true => Applied::Changed,
                false => Applied::Unchanged,
            };
        }
        match self.index.upsert(&pod) {
            Ok(()) => Applied::Changed,
            Err(why) => Applied::Skipped(why),
        }
    }

    fn bump(&mut self, pod: &Pod) {
        if let Some(version) = &pod.metadata.resource_version {
            self.resource_version = Some(version.clone());
        }
    }
}

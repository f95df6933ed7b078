//! How the classifier asks the informer for an early kubelet poll.

use std::collections::HashSet;
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::Notify;
use tracing::debug;

use crate::pods::PodIndex;

/// Tells the informer that a container of some pod was seen; cheap, never blocks.
#[derive(Clone, Debug, Default)]
pub struct Nudge {
    notify: Arc<Notify>,
    ids: Arc<Mutex<Ids>>,
}

#[derive(Debug, Default)]
struct Ids {
    /// Containers of the last list.
    known: HashSet<String>,
    /// Containers that already asked for an early poll: each asks once, so a container the
    /// kubelet never lists (a pod deleted meanwhile) does not keep the kubelet busy.
    asked: HashSet<String>,
}

/// More unlisted containers than this and the oldest questions are forgotten.
const MAX_ASKED: usize = 4096;

impl Nudge {
    /// Asks for an early poll when `container_id` is not among the listed containers and has
    /// not asked before.
    pub fn seen(&self, container_id: &str) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        if ids.known.contains(container_id) || ids.asked.contains(container_id) {
            return;
        }
        if ids.asked.len() >= MAX_ASKED {
            ids.asked.clear();
        }
        ids.asked.insert(container_id.to_string());
        drop(ids);
        debug!(
            id = container_id,
            "container not listed by the kubelet yet; asking for an early poll"
        );
        self.notify.notify_one();
    }

    pub(crate) fn publish(&self, index: &PodIndex) {
        let mut ids = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        ids.known = index.container_ids();
        let Ids { known, asked } = &mut *ids;
        asked.retain(|id| !known.contains(id));
    }

    /// Completes when some container asked since the last call (or is asking now).
    pub(crate) async fn notified(&self) {
        self.notify.notified().await
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::pods::PodList;

    #[test]
    fn each_unlisted_container_asks_for_one_early_poll() {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let nudge = Nudge::default();
        let asked = || {
            runtime.block_on(async {
                tokio::time::timeout(Duration::from_millis(20), nudge.notify.notified())
                    .await
                    .is_ok()
            })
        };
        assert!(!asked());
        nudge.seen("a");
        assert!(asked());
        // More processes of the same container: no more polls.
        nudge.seen("a");
        assert!(!asked());
        // Once listed, a container never asks.
        let list: PodList = serde_json::from_str(
            r#"{"items":[{"metadata":{"name":"p","namespace":"n","uid":"u"},
                "status":{"containerStatuses":[{"name":"c","containerID":"containerd://b"}]}}]}"#,
        )
        .unwrap();
        let mut index = PodIndex::new();
        index.replace(&list);
        nudge.publish(&index);
        nudge.seen("b");
        assert!(!asked());
        nudge.seen("c");
        assert!(asked());
    }
}

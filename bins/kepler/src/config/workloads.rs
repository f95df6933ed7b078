//! The `workloads` section (kepler-rs): how processes are grouped when Kubernetes is off.

use serde::Deserialize;

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct WorkloadsConfig {
    /// Pod ids read from cgroup paths even with `kube.enabled: false`. Upstream has no pods
    /// without Kubernetes (no pod series, empty `pod_id` on containers), and that is the
    /// default; this turns on pod series keyed by the pod UID in the cgroup path.
    pub pod_ids_from_cgroups: bool,
}

impl WorkloadsConfig {
    /// Whether containers carry the pod id their cgroup path tells.
    pub fn pod_ids(&self, kube_enabled: bool) -> bool {
        kube_enabled || self.pod_ids_from_cgroups
    }
}

//! The `kube` section: Kubernetes pod identity.

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::{closed_choice, GoDuration};

#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct KubeConfig {
    pub enabled: bool,
    /// `""` (upstream's files) means in-cluster.
    #[serde(deserialize_with = "super::compat::empty_as_none")]
    pub config: Option<PathBuf>,
    #[serde(deserialize_with = "super::compat::empty_as_none")]
    pub node_name: Option<String>,
    pub pod_informer: PodInformerConfig,
}

closed_choice! {
    /// `kube.podInformer.mode`: where pods are learnt from.
    #[derive(Default)]
    pub enum PodInformerMode {
        /// The node's kubelet `/pods` endpoint, polled.
        #[default]
        Kubelet = "kubelet",
        /// A watch on the API server, filtered to this node.
        Apiserver = "apiserver",
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(default, rename_all = "camelCase")]
pub struct PodInformerConfig {
    pub mode: PodInformerMode,
    pub poll_interval: GoDuration,
}

impl Default for PodInformerConfig {
    fn default() -> Self {
        PodInformerConfig {
            mode: PodInformerMode::Kubelet,
            poll_interval: GoDuration(Duration::from_secs(15)),
        }
    }
}

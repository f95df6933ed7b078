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
    /// `https://host:port` of the kubelet (kepler-rs); unset: the Node object's InternalIP
    /// and kubelet port. Set, the API server is not needed in `kubelet` mode.
    #[serde(
        rename = "kubeletURL",
        deserialize_with = "super::compat::empty_as_none"
    )]
    pub kubelet_url: Option<String>,
    /// CA bundle for the kubelet's serving certificate (kepler-rs); unset: the cluster's CA.
    #[serde(
        rename = "kubeletCAFile",
        deserialize_with = "super::compat::empty_as_none"
    )]
    pub kubelet_ca_file: Option<PathBuf>,
    /// Skip checking the kubelet's certificate, as upstream does (kepler-rs).
    pub kubelet_insecure: bool,
    /// Bearer token file for the kubelet (kepler-rs); unset: the cluster's credentials.
    #[serde(deserialize_with = "super::compat::empty_as_none")]
    pub token_file: Option<PathBuf>,
}

impl Default for PodInformerConfig {
    fn default() -> Self {
        PodInformerConfig {
            mode: PodInformerMode::Kubelet,
            poll_interval: GoDuration(Duration::from_secs(15)),
            kubelet_url: None,
            kubelet_ca_file: None,
            kubelet_insecure: false,
            token_file: None,
        }
    }
}

impl KubeConfig {
    /// Checks what serde cannot: a usable URL, one way of trusting the kubelet.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        let informer = &self.pod_informer;
        if let Some(url) = &informer.kubelet_url {
            if !(url.starts_with("https://") || url.starts_with("http://")) {
                return Err((
                    "kube.podInformer.kubeletURL",
                    format!("{url:?} is not an http(s):// URL"),
                ));
            }
        }
        if informer.kubelet_insecure && informer.kubelet_ca_file.is_some() {
            return Err((
                "kube.podInformer.kubeletInsecure",
                "set either kubeletInsecure or kubeletCAFile, not both".into(),
            ));
        }
        if informer.poll_interval.0.is_zero() {
            return Err((
                "kube.podInformer.pollInterval",
                "must be longer than 0s".into(),
            ));
        }
        Ok(())
    }

    /// The informer's settings; `node_name` is the agent's (`kube.nodeName`, else `NODE_NAME`,
    /// else the hostname).
    pub fn informer_settings(&self, node_name: &str) -> kepler_kube::InformerSettings {
        let informer = &self.pod_informer;
        let trust = match (&informer.kubelet_ca_file, informer.kubelet_insecure) {
            (_, true) => kepler_kube::KubeletTrust::Insecure,
            (Some(file), false) => kepler_kube::KubeletTrust::CaFile(file.clone()),
            (None, false) => kepler_kube::KubeletTrust::ClusterCa,
        };
        kepler_kube::InformerSettings {
            mode: match informer.mode {
                PodInformerMode::Kubelet => kepler_kube::Mode::Kubelet,
                PodInformerMode::Apiserver => kepler_kube::Mode::ApiServer,
            },
            node_name: node_name.to_string(),
            poll_interval: informer.poll_interval.0,
            cluster: match &self.config {
                Some(path) => kepler_kube::Cluster::Kubeconfig(path.clone()),
                None => kepler_kube::Cluster::InCluster,
            },
            kubelet: kepler_kube::KubeletSettings {
                url: informer.kubelet_url.clone(),
                trust,
                token_file: informer.token_file.clone(),
            },
        }
    }
}

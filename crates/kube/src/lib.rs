//! Kubernetes pod identity for kepler-rs: a pod informer that learns this node's pods and
//! writes their names to the identity catalogue ([`kepler_core::Catalogue`], as
//! [`kepler_core::NameSource::Kubernetes`]), so attribution can label pod and container
//! series with pod name, namespace and container name.
//!
//! Two modes, as upstream Kepler:
//! - **kubelet** (default): `GET https://<node InternalIP>:<kubelet port>/pods` every poll
//!   interval, with a bearer token read from its file for every poll (projected tokens rotate).
//!   The kubelet's address comes from this node's `Node` object on the API server, or from
//!   `kube.podInformer.kubeletURL`, in which case the API server is never asked. A container the
//!   agent sees before the kubelet listed it triggers one early poll, at most one per
//!   [`EARLY_POLL_GAP`].
//! - **apiserver**: a list of the pods with `spec.nodeName=<node>`, then a watch from the
//!   list's resource version, resumed from the last version seen when the stream ends, and a
//!   new list when the server answers 410 Gone.
//!
//! Every container id in `containerStatuses`, `initContainerStatuses` and
//! `ephemeralContainerStatuses` (and the previous instance of a restarted container) maps to
//! its pod uid, pod name, namespace and container name. While the kubelet or API server cannot
//! be reached the catalogue keeps the last names it got, and the informer's health entry
//! (`kepler_agent_component_up{component="poller",name="pod_informer"}`) is 0 with its errors
//! counted.
//!
//! Why not kube-rs: it is the heaviest dependency of the workspace (about 4 minutes and 1 GB of
//! compiler memory, DESIGN §9), and the informer needs one GET, one list and one watch of a
//! single resource, plus a kubelet endpoint kube-rs does not cover. A small list+watch over the
//! same HTTPS client (reqwest with rustls/ring, already in the workspace) does all of it; the
//! serde structs declare only the fields read, so large pod lists parse cheaply.
//!
//! `kubeletInsecure` (upstream's behaviour) encrypts the connection but checks no certificate:
//! anyone able to intercept traffic to the kubelet port gets the service-account token (which
//! can read pods and nodes cluster-wide) and can feed the agent made-up pod names. Prefer
//! `kubeletCAFile` with the CA that signs kubelet serving certificates.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod classifier;
mod client;
mod cluster;
mod informer;
pub mod kubelet;
mod nudge;
pub mod pods;
pub mod watch;

use std::path::PathBuf;
use std::time::Duration;

pub use classifier::NudgingClassifier;
pub use client::{Credentials, Endpoint, EndpointConfig, Trust};
pub use cluster::{Cluster, SERVICE_ACCOUNT_DIR};
pub use informer::{Informer, COMPONENT, EARLY_POLL_GAP};
pub use nudge::Nudge;

/// Where pods are learnt from.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum Mode {
    #[default]
    Kubelet,
    ApiServer,
}

/// How the kubelet's certificate is checked.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum KubeletTrust {
    /// The cluster's CA (the service account's `ca.crt`, or the kubeconfig's), which signs
    /// kubelet certificates where serving certificates are bootstrapped from the cluster.
    #[default]
    ClusterCa,
    /// A CA bundle of its own (`kube.podInformer.kubeletCAFile`).
    CaFile(PathBuf),
    /// No check (`kube.podInformer.kubeletInsecure`): see the crate docs for its cost.
    Insecure,
}

/// The kubelet side of `kubelet` mode.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KubeletSettings {
    /// `https://host:port`; none: from the Node object.
    pub url: Option<String>,
    pub trust: KubeletTrust,
    /// None: the cluster's credentials (in cluster: the service account token).
    pub token_file: Option<PathBuf>,
}

/// Everything the informer needs; built by the agent from its `kube` section.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InformerSettings {
    pub mode: Mode,
    pub node_name: String,
    /// Kubelet polls; in `apiserver` mode, the delay before retrying a failed list or watch.
    pub poll_interval: Duration,
    pub cluster: Cluster,
    pub kubelet: KubeletSettings,
}

/// What can go wrong talking to Kubernetes.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Config(String),
    #[error("TLS: {0}")]
    Tls(String),
    #[error("token file {path}: {message}")]
    Token { path: PathBuf, message: String },
    #[error("{url}: {message}")]
    Http { url: String, message: String },
    #[error("{url}: HTTP {status}: {excerpt}")]
    Status {
        url: String,
        status: u16,
        excerpt: String,
    },
    #[error("{url}: not the expected JSON: {message}")]
    Json { url: String, message: String },
    #[error("node {node}: {message}")]
    Node { node: String, message: String },
    /// The resource version is too old (HTTP 410, or an ERROR event): list again.
    #[error("resource version expired (410 Gone)")]
    Gone,
}

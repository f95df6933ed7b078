//! Who a process belongs to: a container (and its pod) or a virtual machine.

use std::sync::Arc;

/// The `type` label of process metrics.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum ProcessType {
    #[default]
    Regular,
    Container,
    Vm,
}

impl ProcessType {
    pub fn as_str(self) -> &'static str {
        match self {
            ProcessType::Regular => "regular",
            ProcessType::Container => "container",
            ProcessType::Vm => "vm",
        }
    }
}

/// The `runtime` label of container metrics.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Runtime {
    Docker,
    Containerd,
    Crio,
    Podman,
    Kubernetes,
    #[default]
    Unknown,
}

impl Runtime {
    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Docker => "docker",
            Runtime::Containerd => "containerd",
            Runtime::Crio => "crio",
            Runtime::Podman => "podman",
            Runtime::Kubernetes => "kubernetes",
            Runtime::Unknown => "unknown",
        }
    }
}

/// A container as sources classify it: ids only. Names are joined from the
/// [`Catalogue`](crate::catalogue::Catalogue) at every tick.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ContainerId {
    /// Full container id (64 hex digits for the common runtimes).
    pub id: String,
    pub runtime: Runtime,
    /// Pod UID, when the cgroup path tells it.
    pub pod_id: Option<String>,
}

/// A virtual machine as sources classify it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VmId {
    /// The VM's UUID when the hypervisor command line has one, else its name.
    pub id: String,
    pub hypervisor: String,
}

/// A pod with its names joined, as snapshots carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// Pod UID (from the cgroup path or the Kubernetes API).
    pub id: String,
    pub name: String,
    pub namespace: String,
}

/// A container with its names joined, as snapshots carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct ContainerRef {
    /// Full container id (64 hex digits for the common runtimes).
    pub id: String,
    pub name: String,
    pub runtime: Runtime,
    pub pod: Option<Arc<PodRef>>,
}

/// A virtual machine with its name joined, as snapshots carry it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct VmRef {
    /// The VM's UUID when the hypervisor command line has one, else its name.
    pub id: String,
    pub name: String,
    pub hypervisor: String,
}

/// Who a process belongs to, by id. Sources share one `Arc` per container and VM, so grouping
/// by the pointer is as good as grouping by the id.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WorkloadIdentity {
    pub process_type: ProcessType,
    pub container: Option<Arc<ContainerId>>,
    pub vm: Option<Arc<VmId>>,
}

/// Decides the workload identity of a process from what was read about it once. Implemented by
/// the workloads crate; sources call it when they first see a process.
pub trait Classifier: Send + Sync {
    fn classify(&self, info: &crate::usage::ProcessInfo) -> WorkloadIdentity;

    /// [`Classifier::classify`] for a live process `pid`, so that a classifier may read more
    /// about it once (its environment, for a container's name). Sources call this.
    fn classify_process(&self, _pid: u32, info: &crate::usage::ProcessInfo) -> WorkloadIdentity {
        self.classify(info)
    }
}

/// Classifies every process as a plain process; for tests and hosts without containers.
pub struct NoWorkloads;

impl Classifier for NoWorkloads {
    fn classify(&self, _info: &crate::usage::ProcessInfo) -> WorkloadIdentity {
        WorkloadIdentity::default()
    }
}

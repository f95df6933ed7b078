//! The classifier sources call once per new process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use kepler_core::{
    Classifier, ContainerRef, PodRef, ProcessInfo, ProcessType, VmRef, WorkloadIdentity,
};

use crate::cgroup::container_from_cgroup_path;
use crate::vm::vm_from_cmdline;

/// Classifies processes by cgroup path (containers, pods) and command line (VMs).
///
/// A kernel thread is always a regular process. A hypervisor process is a VM; when it also runs
/// in a container (KubeVirt's virt-launcher pods) both are set, so its energy counts for the VM
/// and for the container and pod, and its type is `vm`, the more specific of the two.
///
/// Identities are shared: every process of a container gets the same `Arc<ContainerRef>`, and
/// every container of a pod the same `Arc<PodRef>`. An identity nobody else holds any more is
/// dropped when the tables have doubled since the last sweep, so memory follows the live set.
#[derive(Default)]
pub struct CgroupClassifier {
    tables: Mutex<Tables>,
}

#[derive(Default)]
struct Tables {
    containers: Interner<ContainerRef>,
    pods: Interner<PodRef>,
    vms: Interner<VmRef>,
}

impl CgroupClassifier {
    pub fn new() -> Self {
        Self::default()
    }
}

impl std::fmt::Debug for CgroupClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("CgroupClassifier")
            .field("containers", &tables.containers.map.len())
            .field("pods", &tables.pods.map.len())
            .field("vms", &tables.vms.map.len())
            .finish()
    }
}

impl Classifier for CgroupClassifier {
    fn classify(&self, info: &ProcessInfo) -> WorkloadIdentity {
        if info.kernel_thread {
            return WorkloadIdentity::default();
        }
        let found = container_from_cgroup_path(&info.cgroup_path);
        let vm = vm_from_cmdline(&info.cmdline);
        if found.is_none() && vm.is_none() {
            return WorkloadIdentity::default();
        }
        // A poisoned lock only means another thread panicked mid-insert; the maps stay valid.
        let mut tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        let container = found.map(|(id, runtime, pod_uid)| {
            let pod = pod_uid.map(|uid| {
                tables.pods.intern(
                    &uid,
                    |_| true,
                    || PodRef {
                        id: uid.clone(),
                        ..PodRef::default()
                    },
                )
            });
            let same = |c: &ContainerRef| {
                c.runtime == runtime && c.pod.as_ref().map(|p| &p.id) == pod.as_ref().map(|p| &p.id)
            };
            tables.containers.intern(&id, same, || {
                tracing::debug!(id, runtime = runtime.as_str(), "new container");
                ContainerRef {
                    id: id.clone(),
                    name: String::new(),
                    runtime,
                    pod: pod.clone(),
                }
            })
        });
        let vm = vm.map(|vm| {
            let id = vm.id.clone();
            tables.vms.intern(
                &id,
                |known| *known == vm,
                || {
                    tracing::debug!(id = vm.id, name = vm.name, "new virtual machine");
                    vm.clone()
                },
            )
        });
        let process_type = if vm.is_some() {
            ProcessType::Vm
        } else {
            ProcessType::Container
        };
        WorkloadIdentity {
            process_type,
            container,
            vm,
        }
    }
}

/// One shared `Arc` per id.
struct Interner<T> {
    map: HashMap<String, Arc<T>>,
    /// Size at which unused entries are swept next: doubling keeps sweeps amortised O(1).
    sweep_at: usize,
}

impl<T> Default for Interner<T> {
    fn default() -> Self {
        Interner {
            map: HashMap::new(),
            sweep_at: MIN_SWEEP,
        }
    }
}

const MIN_SWEEP: usize = 64;

impl<T> Interner<T> {
    /// The shared value for `id`, made by `make` when there is none or the known one is not
    /// `same` (an id reused with different details replaces the old value).
    fn intern(&mut self, id: &str, same: impl Fn(&T) -> bool, make: impl FnOnce() -> T) -> Arc<T> {
        if let Some(known) = self.map.get(id).filter(|known| same(known)) {
            return known.clone();
        }
        if self.map.len() >= self.sweep_at {
            self.map.retain(|_, value| Arc::strong_count(value) > 1);
            self.sweep_at = (self.map.len() * 2).max(MIN_SWEEP);
        }
        let value = Arc::new(make());
        self.map.insert(id.to_owned(), value.clone());
        value
    }
}

#[cfg(test)]
mod tests;

//! The classifier sources call once per new process.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

use std::path::{Path, PathBuf};

use kepler_core::{
    Catalogue, Classifier, ContainerId, ContainerNames, NameSource, ProcessInfo, ProcessType, VmId,
    WorkloadIdentity,
};

use crate::cgroup::container_from_cgroup_path;
use crate::names::{
    container_name_from_cmdline, container_name_from_environ, in_container, read_environ, read_ppid,
};
use crate::vm::vm_from_cmdline;

/// Classifies processes by cgroup path (containers, pods) and command line (VMs).
///
/// A kernel thread is always a regular process. A hypervisor process is a VM; when it also runs
/// in a container (KubeVirt's virt-launcher pods) both are set, so its energy counts for the VM
/// and for the container and pod, and its type is `vm`, the more specific of the two.
///
/// Identities are ids, shared: every process of a container gets the same `Arc<ContainerId>`.
/// The VM name a command line gives is written to the identity catalogue, where attribution
/// joins it. An identity nobody else holds any more is dropped when the tables have doubled
/// since the last sweep, so memory follows the live set; its catalogue names go with it.
#[derive(Default)]
pub struct CgroupClassifier {
    tables: Mutex<Tables>,
    catalogue: Arc<Catalogue>,
    /// Where to read a container process's environment for its name; none: no names.
    procfs: Option<PathBuf>,
    /// Containers get no pod id (upstream without Kubernetes has no pods).
    no_pod_ids: bool,
}

#[derive(Default)]
struct Tables {
    containers: Interner<ContainerId>,
    vms: Interner<VmId>,
}

impl CgroupClassifier {
    /// A classifier writing names to a catalogue of its own (see [`Self::with_catalogue`]).
    pub fn new() -> Self {
        Self::default()
    }

    /// Writes the names it reads (VM names from command lines) to `catalogue`.
    pub fn with_catalogue(catalogue: Arc<Catalogue>) -> Self {
        CgroupClassifier {
            tables: Mutex::default(),
            catalogue,
            procfs: None,
            no_pod_ids: false,
        }
    }

    /// Leaves the pod id that a cgroup path tells off every container, as upstream does
    /// without Kubernetes: no pod series, an empty `pod_id` on container series.
    pub fn without_pod_ids(mut self) -> Self {
        self.no_pod_ids = true;
        self
    }

    /// Also names containers as upstream does without Kubernetes: from the environment of a
    /// process in a container the catalogue has no name for (read from `procfs`, bounded), else
    /// from its command line.
    pub fn with_procfs(mut self, procfs: impl Into<PathBuf>) -> Self {
        self.procfs = Some(procfs.into());
        self
    }

    /// Writes the name of `container` that process `pid` tells, unless one is known already.
    fn learn_container_name(&self, pid: u32, info: &ProcessInfo, container: &ContainerId) {
        let Some(procfs) = &self.procfs else {
            return;
        };
        if self.catalogue.view().container(&container.id).is_some() {
            return;
        }
        let name = Self::environ_name(procfs, pid, &container.id)
            .or_else(|| container_name_from_cmdline(&info.cmdline));
        if let Some(name) = name {
            tracing::debug!(id = container.id, name, "container name from the process");
            self.catalogue.set_container(
                &container.id,
                ContainerNames { name, pod_id: None },
                NameSource::Process,
            );
        }
    }
}

impl CgroupClassifier {
    /// The name the environment of `pid`, else of its nearest ancestors in the same container,
    /// gives. Workers that rewrite their process title (stress-ng, nginx, postgres) overwrite
    /// their environment with it, and with eBPF the parent that kept it may never run within
    /// an interval, so it is never classified itself.
    fn environ_name(procfs: &Path, pid: u32, container_id: &str) -> Option<String> {
        /// Ancestors looked at; a container's process tree is rarely deeper before its init.
        const MAX_ANCESTORS: usize = 4;
        let mut current = pid;
        for hop in 0..=MAX_ANCESTORS {
            if hop > 0 && (current <= 1 || !in_container(procfs, current, container_id)) {
                return None;
            }
            if let Some(name) =
                read_environ(procfs, current).and_then(|env| container_name_from_environ(&env))
            {
                return Some(name);
            }
            current = read_ppid(procfs, current)?;
        }
        None
    }
}

impl std::fmt::Debug for CgroupClassifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let tables = self.tables.lock().unwrap_or_else(PoisonError::into_inner);
        f.debug_struct("CgroupClassifier")
            .field("containers", &tables.containers.map.len())
            .field("vms", &tables.vms.map.len())
            .finish()
    }
}

impl Classifier for CgroupClassifier {
    fn classify_process(&self, pid: u32, info: &ProcessInfo) -> WorkloadIdentity {
        let identity = self.classify(info);
        if let Some(container) = &identity.container {
            self.learn_container_name(pid, info, container);
        }
        identity
    }

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
        let mut forgotten_vms = Vec::new();
        let mut forgotten_containers = Vec::new();
        let container = found.map(|(id, runtime, pod_uid)| {
            let ids = ContainerId {
                id: id.clone(),
                runtime,
                pod_id: pod_uid.filter(|_| !self.no_pod_ids),
            };
            let (container, swept) = tables.containers.intern(
                &id,
                |known| *known == ids,
                || {
                    tracing::debug!(id, runtime = runtime.as_str(), "new container");
                    ids.clone()
                },
            );
            // Names learnt from processes go with their containers.
            forgotten_containers = swept;
            container
        });
        let vm = vm.map(|vm| {
            let ids = VmId {
                id: vm.id.clone(),
                hypervisor: vm.hypervisor.clone(),
            };
            let (shared, swept) = tables.vms.intern(
                &vm.id,
                |known| *known == ids,
                || {
                    tracing::debug!(id = vm.id, name = vm.name, "new virtual machine");
                    ids.clone()
                },
            );
            forgotten_vms = swept;
            if !vm.name.is_empty() {
                self.catalogue.set_vm_name(&vm.id, &vm.name);
            }
            shared
        });
        drop(tables);
        self.catalogue.forget(&forgotten_containers, &forgotten_vms);
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
    /// `same` (an id reused with different details replaces the old value); with the ids a
    /// sweep dropped on the way.
    fn intern(
        &mut self,
        id: &str,
        same: impl Fn(&T) -> bool,
        make: impl FnOnce() -> T,
    ) -> (Arc<T>, Vec<String>) {
        if let Some(known) = self.map.get(id).filter(|known| same(known)) {
            return (known.clone(), Vec::new());
        }
        let mut swept = Vec::new();
        if self.map.len() >= self.sweep_at {
            self.map.retain(|key, value| {
                let used = Arc::strong_count(value) > 1;
                if !used {
                    swept.push(key.clone());
                }
                used
            });
            self.sweep_at = (self.map.len() * 2).max(MIN_SWEEP);
        }
        let value = Arc::new(make());
        self.map.insert(id.to_owned(), value.clone());
        (value, swept)
    }
}

#[cfg(test)]
mod tests;

//! The identity catalogue: names of containers, pods and VMs, keyed by the ids sources
//! classify processes into. Writers (the classifier reading command lines, a pod informer)
//! update it whenever they learn something; attribution joins it at every tick, so a name
//! learnt late appears at the next tick without touching the processes already seen.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{PoisonError, RwLock, RwLockReadGuard};

/// Who wrote a container name. A name from Kubernetes is authoritative; one guessed from a
/// process (its environment or `--name` on its command line) never replaces it.
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum NameSource {
    Process,
    Kubernetes,
}

/// What the catalogue knows about a container.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ContainerNames {
    pub name: String,
    /// The pod UID, for writers that know it when the cgroup path does not tell it.
    pub pod_id: Option<String>,
}

/// What the catalogue knows about a pod.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PodNames {
    pub name: String,
    pub namespace: String,
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Entry<T> {
    value: T,
    source: NameSource,
}

#[derive(Debug, Default)]
struct State {
    containers: HashMap<String, Entry<ContainerNames>>,
    pods: HashMap<String, Entry<PodNames>>,
    vms: HashMap<String, String>,
}

/// Shared between writers and attribution; see the module docs.
#[derive(Debug, Default)]
pub struct Catalogue {
    state: RwLock<State>,
    /// Bumped on every change, so readers can tell cheaply that nothing changed.
    generation: AtomicU64,
}

/// A consistent read of the catalogue; hold it only briefly (writers wait).
pub struct CatalogueView<'a> {
    state: RwLockReadGuard<'a, State>,
}

impl CatalogueView<'_> {
    pub fn container(&self, id: &str) -> Option<&ContainerNames> {
        self.state.containers.get(id).map(|e| &e.value)
    }

    pub fn pod(&self, id: &str) -> Option<&PodNames> {
        self.state.pods.get(id).map(|e| &e.value)
    }

    pub fn vm_name(&self, id: &str) -> Option<&str> {
        self.state.vms.get(id).map(String::as_str)
    }
}

impl Catalogue {
    pub fn new() -> Self {
        Self::default()
    }

    /// Changes so far; equal values mean nothing changed in between.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn view(&self) -> CatalogueView<'_> {
        CatalogueView {
            // A poisoned lock only means a writer panicked mid-update of a map of plain
            // values; the maps stay usable.
            state: self.state.read().unwrap_or_else(PoisonError::into_inner),
        }
    }

    fn write(&self, change: impl FnOnce(&mut State) -> bool) {
        let mut state = self.state.write().unwrap_or_else(PoisonError::into_inner);
        if change(&mut state) {
            self.generation.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Records a container's names, unless a more authoritative writer already did.
    pub fn set_container(&self, id: &str, names: ContainerNames, source: NameSource) {
        self.write(|s| upsert(&mut s.containers, id, names, source))
    }

    pub fn set_pod(&self, id: &str, names: PodNames, source: NameSource) {
        self.write(|s| upsert(&mut s.pods, id, names, source))
    }

    pub fn set_vm_name(&self, id: &str, name: &str) {
        self.write(|s| {
            if s.vms.get(id).is_some_and(|known| known == name) {
                return false;
            }
            s.vms.insert(id.to_string(), name.to_string());
            true
        })
    }

    /// Replaces everything `source` wrote with its complete current view (a pod informer's
    /// list): entries it no longer lists go, others' entries stay.
    pub fn replace_all_from(
        &self,
        source: NameSource,
        containers: impl IntoIterator<Item = (String, ContainerNames)>,
        pods: impl IntoIterator<Item = (String, PodNames)>,
    ) {
        let containers: HashMap<String, ContainerNames> = containers.into_iter().collect();
        let pods: HashMap<String, PodNames> = pods.into_iter().collect();
        self.write(|s| {
            let mut changed = replace_from(&mut s.containers, source, containers);
            changed |= replace_from(&mut s.pods, source, pods);
            changed
        })
    }

    /// Drops names of containers and VMs that no process refers to any more (the classifier
    /// calls this when it forgets an id); Kubernetes entries stay, their writer owns them.
    pub fn forget(&self, container_ids: &[String], vm_ids: &[String]) {
        if container_ids.is_empty() && vm_ids.is_empty() {
            return;
        }
        self.write(|s| {
            let mut changed = false;
            for id in container_ids {
                if s.containers
                    .get(id)
                    .is_some_and(|e| e.source == NameSource::Process)
                {
                    s.containers.remove(id);
                    changed = true;
                }
            }
            for id in vm_ids {
                changed |= s.vms.remove(id).is_some();
            }
            changed
        })
    }
}

fn upsert<T: PartialEq>(
    map: &mut HashMap<String, Entry<T>>,
    id: &str,
    value: T,
    source: NameSource,
) -> bool {
    match map.get_mut(id) {
        Some(known) if known.source > source => false,
        Some(known) if known.source == source && known.value == value => false,
        Some(known) => {
            *known = Entry { value, source };
            true
        }
        None => {
            map.insert(id.to_string(), Entry { value, source });
            true
        }
    }
}

fn replace_from<T: PartialEq>(
    map: &mut HashMap<String, Entry<T>>,
    source: NameSource,
    mut fresh: HashMap<String, T>,
) -> bool {
    let before = map.len();
    let mut changed = false;
    map.retain(|id, entry| {
        if entry.source != source {
            return true;
        }
        match fresh.remove(id) {
            Some(value) => {
                if entry.value != value {
                    entry.value = value;
                    changed = true;
                }
                true
            }
            None => false,
        }
    });
    changed |= map.len() != before;
    for (id, value) in fresh {
        changed |= upsert(map, &id, value, source);
    }
    changed
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(name: &str) -> ContainerNames {
        ContainerNames {
            name: name.into(),
            pod_id: None,
        }
    }

    #[test]
    fn kubernetes_names_win_over_process_guesses() {
        let c = Catalogue::new();
        c.set_container("a", names("from-env"), NameSource::Process);
        assert_eq!(
            c.view().container("a").map(|n| n.name.as_str()),
            Some("from-env")
        );
        c.set_container("a", names("web"), NameSource::Kubernetes);
        c.set_container("a", names("from-env"), NameSource::Process);
        assert_eq!(
            c.view().container("a").map(|n| n.name.as_str()),
            Some("web")
        );
    }

    #[test]
    fn generation_moves_only_on_change() {
        let c = Catalogue::new();
        let g0 = c.generation();
        c.set_vm_name("u1", "vm1");
        let g1 = c.generation();
        assert!(g1 > g0);
        c.set_vm_name("u1", "vm1");
        assert_eq!(c.generation(), g1);
        c.forget(&[], &["u1".into()]);
        assert!(c.generation() > g1);
        assert_eq!(c.view().vm_name("u1"), None);
    }

    #[test]
    fn a_full_view_replaces_only_its_writers_entries() {
        let c = Catalogue::new();
        c.set_container("proc", names("guess"), NameSource::Process);
        c.replace_all_from(
            NameSource::Kubernetes,
            [
                ("k1".to_string(), names("one")),
                ("k2".to_string(), names("two")),
            ],
            [("p".to_string(), PodNames::default())],
        );
        let g = c.generation();
        c.replace_all_from(
            NameSource::Kubernetes,
            [("k2".to_string(), names("two"))],
            Vec::new(),
        );
        assert!(c.generation() > g);
        let v = c.view();
        assert!(v.container("k1").is_none());
        assert_eq!(v.container("k2").map(|n| n.name.as_str()), Some("two"));
        assert_eq!(v.container("proc").map(|n| n.name.as_str()), Some("guess"));
        assert!(v.pod("p").is_none());
    }
}

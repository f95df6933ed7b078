//! Workload identity for kepler-rs: which container, pod or virtual machine a process is part
//! of.
//!
//! [`CgroupClassifier`] implements [`kepler_core::Classifier`]: sources call it once per new
//! process with what they read about it. Containers and pod UIDs come from the process's cgroup
//! path ([`container_from_cgroup_path`]), VMs from a hypervisor's command line
//! ([`vm_from_cmdline`]). Names of containers and pods are not in those paths; they are left
//! empty here, for a Kubernetes-aware layer to fill in.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod cgroup;
mod classifier;
mod names;
mod vm;

pub use cgroup::container_from_cgroup_path;
pub use classifier::CgroupClassifier;
pub use names::{container_name_from_cmdline, container_name_from_environ, read_environ};
pub use vm::vm_from_cmdline;

//! Usage sources for kepler-rs: where per-process and node CPU time come from.
//!
//! [`procfs::ProcfsSource`] scans a procfs tree each tick, reading only `/proc/<pid>/stat` for
//! processes it already knows and everything that identifies a process (exe, command line,
//! cgroup, and the workload a [`kepler_core::Classifier`] derives from them) once per process.
//! Every path is relative to a configurable root so the readers run on fixture trees.
//!
//! [`procfs::ProcfsReader`] is the reading layer under that source, shared with the eBPF source:
//! node CPU times, a process's key, and its description, read and converted the same way.
//!
//! [`cgroups`] reads the usage counters of the cgroups that count the listed processes, for
//! both sources: what they moved beyond those processes is the time of processes no listing
//! showed.
//!
//! [`host::HostFacts`] is the one reader of facts about the host (cpuinfo, meminfo, hostname,
//! hypervisor), read once at start-up under `host.procfs` and `host.sysfs`.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod bounded;
pub mod cgroups;
pub mod host;
pub mod procfs;

pub use host::{
    parse_cpu_model, read_cpu_model, CpuModel, HostFactError, HostFacts, Virtualization,
};
pub use procfs::{probe, NodeStat, ProcessDescription, ProcessState, ProcfsReader, ProcfsSource};

//! Usage sources for kepler-rs: where per-process and node CPU time come from.
//!
//! [`procfs::ProcfsSource`] scans a procfs tree each tick, reading only `/proc/<pid>/stat` for
//! processes it already knows and everything that identifies a process (exe, command line,
//! cgroup, and the workload a [`kepler_core::Classifier`] derives from them) once per process.
//! Every path is relative to a configurable root so the readers run on fixture trees.
//!
//! [`procfs::ProcfsReader`] is the reading layer under that source, shared with the eBPF source:
//! node CPU times, a process's key, and its description, read and converted the same way.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod procfs;

pub use procfs::{
    parse_cpu_model, probe, read_cpu_info, read_cpu_model, CpuModel, ProcessDescription,
    ProcfsReader, ProcfsSource,
};

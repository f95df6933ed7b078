//! eBPF usage source for kepler-rs.
//!
//! A CO-RE BPF program on `sched_switch` (bpf/kepler.bpf.c, compiled by `make bpf` and
//! embedded here, so `cargo build` needs no clang) charges every thread group's on-CPU time,
//! context switches and cgroup id; when a group's last thread leaves the CPU for good its
//! totals go to a ring buffer that each snapshot drains. So processes that live less than one
//! interval, invisible to a procfs scan, are reported once with `exited: true` and reach their
//! container through their cgroup id even though `/proc/<pid>` is gone.
//!
//! Optional probes add page-cache hits, softirq counts and hardware counters; each one that
//! the kernel refuses is reported in [`Probes`] and the rest carries on.
//!
//! Process keys use the same start time as `/proc/<pid>/stat` (the group leader's
//! `start_boottime`, floored to clock ticks), so the same process has the same key in the
//! procfs and eBPF sources. CPU times count from when the programs were loaded: attribution
//! only uses differences, and a process older than the agent gets a baseline first reading.
//!
//! Entry points: [`probe`] (can eBPF be used here, and if not why) and [`EbpfSource::new`].
//! The model features of two snapshots are computed by `kepler_core::features`.

mod abi;
mod caps;
mod cgroups;
mod loader;
mod perf;
mod proc;
mod source;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use kepler_core::{NoWorkloads, Unavailable};

pub use loader::{ProbeState, Probes};
pub use source::EbpfSource;

/// Tunables of the eBPF source (config section `ebpf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EbpfSettings {
    /// Capacity of the per-process map; groups beyond it are dropped and counted in
    /// [`EbpfStats::tasks_full`].
    pub max_processes: u32,
    /// Bytes of the ring buffer holding exited groups between two snapshots (rounded up to a
    /// power of two; one record is 128 bytes with its header, so 4 MiB holds ~32k exits).
    pub exit_buffer_bytes: u32,
    pub page_cache: bool,
    pub softirq: bool,
    pub hw_counters: bool,
    /// Where cgroup2 is mounted; `None` finds it in `<procfs>/self/mountinfo`.
    pub cgroup2_root: Option<PathBuf>,
}

impl Default for EbpfSettings {
    fn default() -> Self {
        EbpfSettings {
            max_processes: 16_384,
            exit_buffer_bytes: 4 << 20,
            page_cache: true,
            softirq: true,
            hw_counters: true,
            cgroup2_root: None,
        }
    }
}

/// Self-metrics of the source. Kernel-side counts are totals since load.
#[derive(Debug, Default)]
pub struct EbpfStats {
    /// New groups not tracked because the process map was full (their time is lost).
    pub tasks_full: AtomicU64,
    /// Exited groups lost because the ring buffer was full.
    pub exits_lost: AtomicU64,
    /// Stale entries found for a reused tgid (handed over as exited).
    pub tgid_reused: AtomicU64,
    /// Entries of vanished processes removed by user space.
    pub gc_removed: AtomicU64,
    /// Map entries that disappeared while being read (harmless: they are in the ring).
    pub map_read_errors: AtomicU64,
    pub malformed_records: AtomicU64,
    pub snapshots: AtomicU64,
    /// Groups in the process map at the last snapshot.
    pub tracked_processes: AtomicU64,
}

impl EbpfStats {
    /// Entries dropped for lack of room, in the kernel maps together: the self-metric.
    pub fn dropped(&self) -> u64 {
        self.tasks_full
            .load(Ordering::Relaxed)
            .saturating_add(self.exits_lost.load(Ordering::Relaxed))
    }
}

/// Whether the eBPF source can run here: loads and attaches everything, then detaches. `Ok`
/// describes what would be measured, `Err` says why eBPF cannot be used (for `kepler probe`
/// and for `ebpf.enabled: auto` falling back to procfs).
pub fn probe(procfs: impl Into<PathBuf>, settings: &EbpfSettings) -> Result<String, Unavailable> {
    let source = EbpfSource::new(procfs, Arc::new(NoWorkloads), settings.clone())?;
    Ok(format!(
        "eBPF: sched_switch accounting on; {}",
        source.probes()
    ))
}

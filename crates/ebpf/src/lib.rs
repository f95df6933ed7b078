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
//! Where nothing needs per-switch counts (the optional probes all detached, see
//! `UsageSource::retain_features`), the source may turn to [`Accounting::Iterator`] before its
//! first snapshot: a task iterator reads every thread's runtime as the scheduler counts it once
//! per snapshot, and a `sched_switch` program that acts only on a thread's final switch takes
//! the charging one's place (exits stay exact).
//! Its cost follows threads per snapshot instead of switches; the source picks whichever costs
//! the host less ([`HostLoad`]).
//!
//! Process keys use the same start time as `/proc/<pid>/stat` (the group leader's
//! `start_boottime`, floored to clock ticks), so the same process has the same key in the
//! procfs and eBPF sources. With `sched_switch` accounting CPU times count from when the
//! programs were loaded, with the task iterator from the first snapshot (the scheduler's count
//! runs from each task's start; a process alive then is reported relative to its reading
//! there): either way a process is reported once it has run since the agent started.
//!
//! Entry points: [`probe`] (can eBPF be used here, and if not why) and [`EbpfSource::new`].
//! The model features of two snapshots are computed by `kepler_core::features`.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod abi;
mod accounting;
mod caps;
mod cgroups;
mod child;
mod exits;
mod fdpass;
mod live_table;
mod loader;
mod map_batch;
mod map_read;
mod mapped;
mod pass_out;
mod perf;
mod probes;
mod proc;
mod reconcile;
mod slim_btf;
mod slots;
mod source;
mod task_iter;
mod unseen;

use std::fmt;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{NoWorkloads, Unavailable};

pub use accounting::HostLoad;
pub use child::{run_loader_child, LoaderCommand, LOADER_SUBCOMMAND};
pub use exits::Exits;
pub use probes::{ProbeState, Probes};
pub use source::{Accounting, EbpfSource};

/// Tunables of the eBPF source (config section `ebpf`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EbpfSettings {
    /// Capacity of the per-process map; groups beyond it are dropped and counted in
    /// [`EbpfStats::tasks_full`].
    pub max_processes: u32,
    /// Bytes of the ring buffer holding exited groups between two snapshots (rounded up to a
    /// power of two; a record takes 176 bytes, 168 of data and the ring's 8-byte header, so
    /// 256 KiB holds ~1.5k exits). When exits come faster than an interval's worth of it,
    /// the source asks to be drained between snapshots ([`EbpfSource`]'s `drain_every`).
    /// Exits beyond it stay in the process map, marked, until a snapshot collects them
    /// ([`EbpfStats::exits_deferred`]): nothing is lost, but they cost map room meanwhile and
    /// lose their exit-time details (command name, v1 cpu cgroup). The ring is mapped into the
    /// agent twice (as BPF rings are), so it counts double in its RSS.
    pub exit_buffer_bytes: u32,
    pub page_cache: bool,
    pub softirq: bool,
    pub hw_counters: bool,
    /// Where cgroup2 is mounted; `None` finds it in `<procfs>/self/mountinfo`.
    pub cgroup2_root: Option<PathBuf>,
    /// Which process loads the programs.
    pub loader: Loader,
    /// How often snapshots are taken: the task iterator's cost per snapshot is weighed against
    /// `sched_switch`'s per switch when the source chooses how to account CPU time.
    pub interval: Duration,
    /// With the task iterator, how ended processes are learnt (`ebpf.exits`).
    pub exits: Exits,
}

/// Where the programs are loaded. Loading parses the kernel's BTF, the largest allocation the
/// agent would ever make: done in a child, it stays out of the agent's memory.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum Loader {
    /// Here: for programs that cannot run a loader child (tests, examples).
    #[default]
    InProcess,
    /// In a child that hands its descriptors over and exits (see [`run_loader_child`]).
    Child(LoaderCommand),
}

impl Default for EbpfSettings {
    fn default() -> Self {
        EbpfSettings {
            max_processes: 16_384,
            exit_buffer_bytes: 256 << 10,
            page_cache: true,
            softirq: true,
            hw_counters: true,
            cgroup2_root: None,
            loader: Loader::InProcess,
            interval: Duration::from_secs(5),
            exits: Exits::Auto,
        }
    }
}

/// Self-metrics of the source. Kernel-side counts are totals since load.
#[derive(Debug, Default)]
pub struct EbpfStats {
    /// New groups not tracked because the process map was full (their time is lost).
    pub tasks_full: AtomicU64,
    /// Exited groups whose totals are lost: the ring buffer was full, or snapshots kept
    /// failing while drained records piled up in user space.
    pub exits_lost: AtomicU64,
    /// Exit records too short to parse (a kernel/user-space layout mismatch, never expected):
    /// their totals are lost.
    pub malformed_records: AtomicU64,
    /// Failed reads of the process map. The snapshot misses the entries not read yet; nothing
    /// is lost, since the next snapshot reports their cumulative totals.
    pub map_read_errors: AtomicU64,
    /// Races recovered without loss: stale entries the kernel found for a reused tgid and
    /// handed over as exited.
    pub tgid_reused: AtomicU64,
    /// Races recovered without loss: entries of processes gone without an exit record,
    /// removed and reported as exited by user space.
    pub gc_removed: AtomicU64,
    /// Recovered without loss of CPU time: exited groups the full exit ring could not take,
    /// left in the process map for the next snapshot to collect. Many mean the ring
    /// (`exit_buffer_bytes`) is small for the exit rate.
    pub exits_deferred: AtomicU64,
    /// Groups in the process map at the last snapshot.
    pub tracked_processes: AtomicU64,
    /// Groups read with a slot of the `slots` array at the last snapshot (per-switch
    /// accounting): their switches are charged there rather than to their process-map entry.
    /// Fewer than those tracked where groups whose tgids meet in a slot charge their entries.
    pub slotted_processes: AtomicU64,
    /// Whether CPU time is accounted by the task iterator rather than at every switch (see
    /// [`Accounting`]).
    pub task_iterator: AtomicBool,
    /// Whether, with the task iterator, ended processes are counted through the cgroups'
    /// usage counters rather than handed over exact at their final switch (see [`Exits`]).
    pub exits_counted: AtomicBool,
    /// Turns between exact and counted exits while running.
    pub exit_turns: AtomicU64,
}

impl EbpfStats {
    /// Process data lost for lack of room or to unreadable records: the self-metric.
    pub fn dropped(&self) -> u64 {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        get(&self.tasks_full)
            .saturating_add(get(&self.exits_lost))
            .saturating_add(get(&self.malformed_records))
    }
}

/// One line for the agent's log, with the causes behind [`EbpfStats::dropped`] and the races
/// that were recovered.
impl fmt::Display for EbpfStats {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        write!(
            f,
            "{} processes tracked; lost: {} new (map full), {} exited (ring full or held too \
             long), {} malformed records; recovered: {} reused tgids, {} gone entries \
             collected, {} exits deferred (ring full); {} map read errors; {} read with a slot",
            get(&self.tracked_processes),
            get(&self.tasks_full),
            get(&self.exits_lost),
            get(&self.malformed_records),
            get(&self.tgid_reused),
            get(&self.gc_removed),
            get(&self.exits_deferred),
            get(&self.map_read_errors),
            get(&self.slotted_processes),
        )
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

#[cfg(test)]
pub(crate) mod test_support {
    /// True (and a printed reason) when a test that loads BPF programs cannot run here. With
    /// `KEPLER_REQUIRE_TOOLS=1` (CI sets it) the missing privilege fails the test instead: a
    /// green CI run must mean these tests ran.
    pub(crate) fn skip_unless_root(test: &str) -> bool {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            return false;
        }
        let reason = "needs root to load eBPF programs";
        assert!(
            std::env::var("KEPLER_REQUIRE_TOOLS").as_deref() != Ok("1"),
            "{test}: {reason} (KEPLER_REQUIRE_TOOLS=1)"
        );
        println!("SKIP {test}: {reason}");
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lost_data_is_dropped_and_recovered_races_are_not() {
        let stats = EbpfStats::default();
        stats.tasks_full.store(1, Ordering::Relaxed);
        stats.exits_lost.store(2, Ordering::Relaxed);
        stats.malformed_records.store(4, Ordering::Relaxed);
        stats.map_read_errors.store(8, Ordering::Relaxed);
        stats.tgid_reused.store(16, Ordering::Relaxed);
        stats.gc_removed.store(32, Ordering::Relaxed);
        stats.exits_deferred.store(64, Ordering::Relaxed);
        assert_eq!(stats.dropped(), 7);
        let line = stats.to_string();
        for part in [
            "1 new",
            "2 exited",
            "4 malformed",
            "8 map read",
            "16 reused",
            "32 gone",
            "64 exits deferred",
        ] {
            assert!(line.contains(part), "{line}");
        }
    }
}

//! The optional probes (softirq and page-cache counting, hardware counters): what state each
//! is in, and how each is detached once the agent knows that nothing reads its counts. A
//! program attached in this process is unloaded by name; one attached by a loader child is
//! known by the descriptors its attach opened, which the child lists before and after
//! attaching it and hands over labelled (with the counters' own descriptors).

use std::fmt;
use std::os::fd::RawFd;

use aya::programs::{Program, ProgramError};
use aya::Ebpf;
use kepler_core::Feature;

/// State of one optional probe.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum ProbeState {
    /// Attached; the text says where (function or tracepoint).
    Active(String),
    /// Turned off in the settings.
    Disabled,
    /// Wanted but refused or missing on this kernel; the text says why.
    Unavailable(String),
    /// Attached, then detached because nothing reads what it counts (no estimating model
    /// needs it and the features are not exported): each call cost something for nothing.
    Unneeded,
}

impl ProbeState {
    pub fn is_active(&self) -> bool {
        matches!(self, ProbeState::Active(_))
    }
}

impl fmt::Display for ProbeState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ProbeState::Active(at) => write!(f, "on ({at})"),
            ProbeState::Disabled => f.write_str("off (disabled)"),
            ProbeState::Unavailable(why) => write!(f, "unavailable: {why}"),
            ProbeState::Unneeded => f.write_str("off (detached: nothing reads it)"),
        }
    }
}

/// What the loaded source measures besides CPU time and context switches.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Probes {
    pub page_cache: ProbeState,
    pub softirq: ProbeState,
    pub hw_counters: ProbeState,
    /// The task iterator, which iterator accounting runs on.
    pub task_iterator: ProbeState,
}

impl fmt::Display for Probes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page cache hits {}; softirqs {}; hardware counters {}; task iterator {}",
            self.page_cache, self.softirq, self.hw_counters, self.task_iterator
        )
    }
}

impl Probes {
    pub(crate) fn state(&self, probe: OptionalProbe) -> &ProbeState {
        match probe {
            OptionalProbe::Softirq => &self.softirq,
            OptionalProbe::PageCache => &self.page_cache,
            OptionalProbe::HwCounters => &self.hw_counters,
        }
    }

    pub(crate) fn state_mut(&mut self, probe: OptionalProbe) -> &mut ProbeState {
        match probe {
            OptionalProbe::Softirq => &mut self.softirq,
            OptionalProbe::PageCache => &mut self.page_cache,
            OptionalProbe::HwCounters => &mut self.hw_counters,
        }
    }
}

/// The probes that can be detached once loaded: two programs that run on events of their
/// own (every softirq, every page-cache access), and the hardware counters that
/// `sched_switch` reads at every switch (three PMU reads each, and three PMU counters per CPU
/// taken from whoever else profiles the node).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum OptionalProbe {
    Softirq,
    PageCache,
    HwCounters,
}

impl OptionalProbe {
    pub(crate) const ALL: [OptionalProbe; 3] = [
        OptionalProbe::Softirq,
        OptionalProbe::PageCache,
        OptionalProbe::HwCounters,
    ];

    /// The model features its counts feed.
    pub(crate) fn features(self) -> &'static [Feature] {
        match self {
            OptionalProbe::Softirq => &[
                Feature::BpfBlockIrq,
                Feature::BpfNetRxIrq,
                Feature::BpfNetTxIrq,
            ],
            OptionalProbe::PageCache => &[Feature::BpfPageCacheHit],
            OptionalProbe::HwCounters => &[
                Feature::CpuCycles,
                Feature::CpuInstructions,
                Feature::CacheMiss,
            ],
        }
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            OptionalProbe::Softirq => "softirq counting",
            OptionalProbe::PageCache => "page-cache counting",
            OptionalProbe::HwCounters => "hardware counters",
        }
    }
}

/// What a group of descriptors from a loader child is for, so that the agent can detach it or
/// use it later; descriptors without a label are kept as they are.
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) enum Part {
    /// An optional probe's program, link, kprobe event or counters.
    Probe(OptionalProbe),
    /// The task iterator's link: each snapshot's pass is created from it.
    IterLink,
    /// The task iterator's final-switch program (`kepler_exit`), loaded, not attached.
    ExitProg,
    /// What `kepler_switch` is attached through, for the source to detach it when it puts
    /// `kepler_exit` in its place.
    Switch,
}

/// Detaches and unloads one program of a loaded object; one never loaded (a probe that did not
/// attach, or attached another way) has nothing to detach.
pub(crate) fn unload(ebpf: &mut Ebpf, name: &str) -> Result<(), String> {
    let result = match ebpf.program_mut(name) {
        None => return Ok(()),
        Some(Program::BtfTracePoint(p)) => p.unload(),
        Some(Program::FEntry(p)) => p.unload(),
        Some(Program::KProbe(p)) => p.unload(),
        Some(_) => return Err(format!("{name}: not a program this loader attaches")),
    };
    match result {
        Ok(()) | Err(ProgramError::NotLoaded) => Ok(()),
        Err(e) => Err(format!("{name}: {}", crate::loader::chain(&e))),
    }
}

/// Whether the loader notes which descriptors each optional probe opened.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Labels {
    /// It can: the loader child, single-threaded, sees only its own descriptors come and go.
    Fds,
    /// In a threaded process other threads open descriptors meanwhile; the loaded object
    /// detaches its programs by name instead.
    None,
}

/// The descriptors open in this process.
pub(crate) fn open_fds() -> std::io::Result<Vec<RawFd>> {
    let listed: Vec<RawFd> = std::fs::read_dir("/proc/self/fd")?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    // The listing's own descriptor is in it, and closed by now: its number is free for the
    // next open, which must not look as if it had been open before.
    // SAFETY: F_GETFD only reads a descriptor's flags; a closed one gives an error.
    Ok(listed
        .into_iter()
        .filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } >= 0)
        .collect())
}

/// Runs one optional probe's attach; with [`Labels::Fds`] also returns the descriptors it left
/// open (listed before and after), which are that probe's.
pub(crate) fn attach_labelled(
    labels: Labels,
    attach: impl FnOnce() -> ProbeState,
) -> (ProbeState, Vec<RawFd>) {
    opened_by(labels, attach, ProbeState::is_active)
}

/// Runs `attach`; with [`Labels::Fds`] also returns the descriptors it left open when
/// `attached` says that it did.
pub(crate) fn opened_by<T>(
    labels: Labels,
    attach: impl FnOnce() -> T,
    attached: impl FnOnce(&T) -> bool,
) -> (T, Vec<RawFd>) {
    let before = match labels {
        Labels::Fds => open_fds().ok(),
        Labels::None => None,
    };
    let state = attach();
    let opened = match (before, attached(&state)) {
        (Some(before), true) => open_fds()
            .map(|after| {
                after
                    .into_iter()
                    .filter(|fd| !before.contains(fd))
                    .collect()
            })
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    (state, opened)
}

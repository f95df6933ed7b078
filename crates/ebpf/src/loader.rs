//! Loading the object and attaching its programs. `sched_switch` is required; the page-cache,
//! softirq and hardware-counter probes are optional and each reports why it is off, and so is
//! the task iterator of iterator accounting (linked, and idle until the source runs a pass;
//! its final-switch program loaded, attached in `sched_switch`'s place when the source turns
//! to it).

use std::collections::HashMap;
use std::os::fd::{AsFd, OwnedFd, RawFd};

use aya::maps::{Map, MapData, RingBuf};
use aya::programs::{BtfTracePoint, FEntry, Iter, KProbe};
use aya::{Btf, Ebpf, EbpfLoader, Endianness};
use kepler_core::Unavailable;

use crate::abi::{names, OBJECT};
use crate::perf;
use crate::probes::{attach_labelled, opened_by, unload};
use crate::probes::{Labels, OptionalProbe, Part, ProbeState, Probes};
use crate::slim_btf;
use crate::task_iter;
use crate::EbpfSettings;

/// Everything that must stay alive while the source runs: dropping `ebpf` detaches the
/// programs, dropping the counters closes the perf events.
pub(crate) struct Loaded {
    pub ebpf: Attached,
    pub exits: RingBuf<MapData>,
    pub probes: Probes,
    /// The hardware counters opened in this process (a loader child's arrive among the
    /// descriptors, labelled).
    pub counters: Option<perf::Counters>,
    /// Warnings met on the way, for the agent's log (a loader child has none of its own).
    pub notes: Vec<String>,
    /// The descriptors each attached optional probe opened (its program, its link, a kprobe's
    /// perf event), for a loader child to label them when it hands them over; empty unless
    /// asked for (see [`Labels`]).
    pub probe_fds: Vec<(Part, Vec<RawFd>)>,
}

/// The object's maps by name, and what keeps its programs attached: the loaded object itself,
/// or the descriptors a loader child handed over (links, programs, perf events, maps).
pub(crate) struct Attached {
    maps: HashMap<String, Map>,
    keep: Keep,
    /// What iterator accounting runs on, when it is possible.
    iterator: Option<IterParts>,
    /// `kepler_exit`'s attachment, once it replaced `kepler_switch`.
    exit_link: Option<OwnedFd>,
}

/// Iterator accounting's programs: the task iterator's link (each snapshot's pass is made
/// from it) and the loaded, not yet attached, final-switch program (`kepler_exit`).
pub(crate) struct IterParts {
    pub link: OwnedFd,
    pub exit_prog: OwnedFd,
}

/// Held only to be dropped last, but for the optional probes, which can be detached earlier.
enum Keep {
    Object {
        ebpf: Ebpf,
    },
    Fds {
        _fds: Vec<OwnedFd>,
        /// What each optional probe attached through, and the task iterator's link, as the
        /// loader child labelled them.
        probes: Vec<(Part, Vec<OwnedFd>)>,
    },
}

impl Attached {
    /// Takes every map out of a loaded object, which then only holds the programs.
    fn from_object(mut ebpf: Ebpf, iterator: Option<IterParts>) -> Self {
        let names: Vec<String> = ebpf.maps().map(|(n, _)| n.to_string()).collect();
        let maps = names
            .into_iter()
            .filter_map(|n| Some((n.clone(), ebpf.take_map(&n)?)))
            .collect();
        Attached {
            maps,
            keep: Keep::Object { ebpf },
            iterator,
            exit_link: None,
        }
    }

    /// Maps rebuilt from received descriptors; `probes` holds what each labelled part was
    /// attached through (the task iterator's parts among them) and `keep` everything else
    /// received.
    pub(crate) fn from_fds(
        maps: HashMap<String, Map>,
        keep: Vec<OwnedFd>,
        mut probes: Vec<(Part, Vec<OwnedFd>)>,
    ) -> Self {
        let mut take = |part: Part| {
            let at = probes.iter().position(|(p, _)| *p == part)?;
            probes.swap_remove(at).1.into_iter().next()
        };
        let iterator = match (take(Part::IterLink), take(Part::ExitProg)) {
            (Some(link), Some(exit_prog)) => Some(IterParts { link, exit_prog }),
            _ => None,
        };
        Attached {
            maps,
            keep: Keep::Fds { _fds: keep, probes },
            iterator,
            exit_link: None,
        }
    }

    /// The task iterator's link, if it could be linked.
    pub(crate) fn iter_link(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.iterator.as_ref().map(|parts| parts.link.as_fd())
    }

    /// The final-switch program (`kepler_exit`), attached or not.
    pub(crate) fn exit_prog(&self) -> Option<std::os::fd::BorrowedFd<'_>> {
        self.iterator.as_ref().map(|parts| parts.exit_prog.as_fd())
    }

    /// Puts `kepler_exit` on `sched_switch` in `kepler_switch`'s place: from here on switches
    /// are not charged, final switches are handed over. Attached before the other is detached,
    /// so that no final switch goes unseen; one in between is seen by both, which the caller
    /// must allow for (the source turns before its first snapshot, which makes every reading a
    /// baseline). On an error `kepler_switch` is left as it was, and `kepler_exit` detached.
    pub(crate) fn put_exit_in_switch_place(&mut self) -> Result<(), String> {
        if self.exit_link.is_some() {
            return Ok(());
        }
        let prog = self.exit_prog().ok_or("no final-switch program")?;
        let link = task_iter::attach_raw_tracepoint(prog)
            .map_err(|e| format!("attaching {}: {e}", names::EXIT_PROG))?;
        match &mut self.keep {
            Keep::Object { ebpf } => unload(ebpf, names::SWITCH_PROG)?,
            Keep::Fds { .. } => self.drop_labelled(Part::Switch)?,
        }
        self.exit_link = Some(link);
        Ok(())
    }

    /// Takes `kepler_switch` off `sched_switch` with nothing in its place: the task iterator
    /// then reads every group on the kernel's basis, and a group's end is learnt from the
    /// passes (see `reconcile::Basis::Kernel`).
    pub(crate) fn take_switch_out(&mut self) -> Result<(), String> {
        self.exit_prog().ok_or("no task iterator")?;
        match &mut self.keep {
            Keep::Object { ebpf } => unload(ebpf, names::SWITCH_PROG),
            Keep::Fds { .. } => self.drop_labelled(Part::Switch),
        }
    }

    /// Puts `kepler_exit` on `sched_switch` (again), once `kepler_switch` is off it.
    pub(crate) fn attach_exit(&mut self) -> Result<(), String> {
        if self.exit_link.is_some() {
            return Ok(());
        }
        let prog = self.exit_prog().ok_or("no final-switch program")?;
        let link = task_iter::attach_raw_tracepoint(prog)
            .map_err(|e| format!("attaching {}: {e}", names::EXIT_PROG))?;
        self.exit_link = Some(link);
        Ok(())
    }

    /// Takes `kepler_exit` off `sched_switch`: closing its link detaches it at once.
    pub(crate) fn detach_exit(&mut self) {
        self.exit_link = None;
    }

    /// Removes the descriptors labelled `part`; an error if a loader child did not label it.
    fn drop_labelled(&mut self, part: Part) -> Result<(), String> {
        if let Keep::Fds { probes, .. } = &mut self.keep {
            let at = probes
                .iter()
                .position(|(p, _)| *p == part)
                .ok_or("the loader process did not say which descriptors are its")?;
            // Closing the link (and a kprobe's perf event) detaches; a program goes with its
            // last descriptor, a counter with its own.
            drop(probes.swap_remove(at));
        }
        Ok(())
    }

    /// Detaches an optional probe: its programs stop running on their events at once, or,
    /// for the hardware counters, `sched_switch` stops reading them (the caller then closes
    /// counters it opened itself). Counts left in the maps stay as they were. An error means
    /// that the probe may still be counting: a loader child's probe without labels is left
    /// untouched, and a program the kernel would not detach stays.
    pub(crate) fn detach(&mut self, probe: OptionalProbe) -> Result<(), String> {
        if let Keep::Fds { probes, .. } = &self.keep {
            if !probes.iter().any(|(p, _)| *p == Part::Probe(probe)) {
                return Err("the loader process did not say which descriptors are its".into());
            }
        }
        if probe == OptionalProbe::HwCounters {
            // From here the counts cannot be trusted whatever happens, so a slot that cannot
            // be emptied is only logged: its reads go on costing, but count for nothing.
            for name in [names::HW_CYCLES, names::HW_INSTR, names::HW_CMISS] {
                if let Err(why) = self.clear_perf_array(name) {
                    tracing::warn!(map = name, %why, "hardware counter slots left in place");
                }
            }
        }
        match &mut self.keep {
            Keep::Object { ebpf } => match probe {
                OptionalProbe::Softirq => unload(ebpf, names::SOFTIRQ_PROG),
                OptionalProbe::PageCache => {
                    unload(ebpf, names::PGCACHE_FENTRY_PROG)?;
                    unload(ebpf, names::PGCACHE_PROG)
                }
                // Opened in this process: their owner closes them.
                OptionalProbe::HwCounters => Ok(()),
            },
            Keep::Fds { .. } => self.drop_labelled(Part::Probe(probe)),
        }
    }

    /// Empties every slot of the `PERF_EVENT_ARRAY` `name`.
    fn clear_perf_array(&self, name: &str) -> Result<(), String> {
        let Some(Map::PerfEventArray(data)) = self.maps.get(name) else {
            return Err(format!("no {name} map"));
        };
        let slots = data.info().map_err(|e| chain(&e))?.max_entries();
        perf::clear(data.fd().as_fd(), slots).map_err(|e| e.to_string())
    }

    pub fn map(&self, name: &str) -> Option<&Map> {
        self.maps.get(name)
    }

    pub fn map_mut(&mut self, name: &str) -> Option<&mut Map> {
        self.maps.get_mut(name)
    }

    pub fn take_map(&mut self, name: &str) -> Option<Map> {
        self.maps.remove(name)
    }

    /// The maps by name, for handing them over.
    pub(crate) fn maps(&self) -> impl Iterator<Item = (&str, &Map)> {
        self.maps.iter().map(|(n, m)| (n.as_str(), m))
    }
}

/// An error and its causes on one line: aya nests the useful part (errno, verifier log).
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let t = c.to_string();
        if !s.contains(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        cur = c.source();
    }
    // Verifier logs run to thousands of lines; the end says what failed.
    const MAX: usize = 2000;
    if s.len() > MAX {
        let cut = s.len() - MAX;
        let start = (cut..s.len())
            .find(|&i| s.is_char_boundary(i))
            .unwrap_or(s.len());
        s = format!("…{}", &s[start..]);
    }
    s
}

pub(crate) fn unavailable(what: &str, e: &dyn std::error::Error) -> Unavailable {
    Unavailable::new(format!("eBPF: {what}: {}", chain(e)))
}

/// The ring buffer size the kernel accepts: a power of two, at least one page.
pub(crate) fn ring_size(bytes: u32) -> u32 {
    bytes.clamp(4096, 1 << 30).next_power_of_two()
}

/// Loads and attaches, in this process or in a loader child as the settings say, and logs
/// what is on and what is not.
pub(crate) fn load(settings: &EbpfSettings) -> Result<Loaded, Unavailable> {
    let loaded = match &settings.loader {
        crate::Loader::InProcess => load_here(settings, Labels::None)?,
        crate::Loader::Child(command) => crate::child::load(command, settings)?,
    };
    for note in &loaded.notes {
        tracing::warn!("{note}");
    }
    for probe in OptionalProbe::ALL {
        if let ProbeState::Unavailable(why) = loaded.probes.state(probe) {
            tracing::warn!(%why, "{} unavailable", probe.name());
        }
    }
    tracing::info!(probes = %loaded.probes, "eBPF programs attached");
    Ok(loaded)
}

/// Loads and attaches in this process (parsing the kernel's BTF here).
pub(crate) fn load_here(settings: &EbpfSettings, labels: Labels) -> Result<Loaded, Unavailable> {
    load_with(settings, labels, perf::open_all)
}

/// `load`, with the function that opens the hardware counters given (tests pass one whose
/// descriptors the maps refuse).
fn load_with(
    settings: &EbpfSettings,
    labels: Labels,
    open_counters: impl FnOnce(&[u32]) -> Result<perf::Counters, String>,
) -> Result<Loaded, Unavailable> {
    crate::caps::check_self().map_err(|r| Unavailable::denied(format!("eBPF: {r}")))?;
    // aya's EbpfLoader::new() parses all of the kernel's BTF (~19 MiB of heap here) whatever
    // `.btf()` says later. Made first, while nothing else is held, and its copy dropped at
    // once, that parse is the start-up peak alone; the one loader serves both loads below.
    let mut loader = EbpfLoader::new();
    loader.btf(None);
    let mut notes = Vec::new();
    let btf = kernel_btf(&mut notes)?;
    loader.btf(Some(&btf));

    // The opened counters, or the state that says why there are none.
    let hw: Result<perf::Counters, ProbeState> = if settings.hw_counters {
        aya::util::online_cpus()
            .map_err(|(path, e)| format!("reading {path}: {e}"))
            .and_then(|cpus| open_counters(&cpus))
            .map_err(ProbeState::Unavailable)
    } else {
        Err(ProbeState::Disabled)
    };

    let mut ebpf = load_object(&mut loader, settings, hw.is_ok())?;
    // The descriptors go into maps that exist only once the object is loaded, with the flag
    // that makes sched_switch read them already fixed (it is read-only data). If storing
    // fails, the counters are closed and the object loaded again with the flag off, before
    // anything is attached: no switch then reads half-filled maps, and no perf event stays
    // open for nothing.
    let (counters, hw_counters) = match hw {
        Ok(c) => match store_counters(&ebpf, &c) {
            Ok(()) => (Some(c), ProbeState::Active(HW_ACTIVE.into())),
            Err(why) => {
                drop(c);
                drop(ebpf);
                ebpf = load_object(&mut loader, settings, false)?;
                (None, ProbeState::Unavailable(why))
            }
        },
        Err(state) => (None, state),
    };

    let (switch, switch_fds) = opened_by(labels, || attach_switch(&mut ebpf, &btf), Result::is_ok);
    switch?;
    let mut probe_fds = vec![(Part::Switch, switch_fds)];
    let softirq = if settings.softirq {
        let (state, fds) = attach_labelled(labels, || attach_softirq(&mut ebpf, &btf));
        probe_fds.push((Part::Probe(OptionalProbe::Softirq), fds));
        state
    } else {
        ProbeState::Disabled
    };
    let page_cache = if settings.page_cache {
        let (state, fds) = attach_labelled(labels, || attach_page_cache(&mut ebpf, &btf));
        probe_fds.push((Part::Probe(OptionalProbe::PageCache), fds));
        state
    } else {
        ProbeState::Disabled
    };
    let (task_iterator, iterator) = match attach_task_iterator(&mut ebpf, &btf) {
        Ok(parts) => (ProbeState::Active(ITER_ACTIVE.into()), Some(parts)),
        Err(why) => (ProbeState::Unavailable(why), None),
    };
    probe_fds.retain(|(_, fds)| !fds.is_empty());
    let mut ebpf = Attached::from_object(ebpf, iterator);
    let exits = exits_ring(&mut ebpf)?;
    Ok(Loaded {
        ebpf,
        exits,
        probes: Probes {
            page_cache,
            softirq,
            hw_counters,
            task_iterator,
        },
        counters,
        notes,
        probe_fds,
    })
}

/// The exits ring, mapped into this process.
pub(crate) fn exits_ring(ebpf: &mut Attached) -> Result<RingBuf<MapData>, Unavailable> {
    let exits = ebpf
        .take_map(names::EXITS)
        .ok_or_else(|| Unavailable::new("eBPF: object has no exits map"))?;
    RingBuf::try_from(exits).map_err(|e| unavailable("mapping exits ring", &e))
}

const VMLINUX: &str = "/sys/kernel/btf/vmlinux";

/// The kernel types the loader looks up: the structs and enum that the program's CO-RE
/// relocations name (those of bpf/kernel_types.h), and the attach points.
pub(crate) const BTF_NAMES: &[&str] = &[
    "task_struct",
    "signal_struct",
    "css_set",
    "cgroup_subsys_state",
    "cgroup",
    "kernfs_node",
    "cgroup_subsys_id",
    "sched_entity",
    "btf_trace_sched_switch",
    "btf_trace_softirq_entry",
    "bpf_iter_task",
    "bpf_iter_meta",
    PAGE_CACHE_FNS[0],
    PAGE_CACHE_FNS[1],
];

/// The kernel's BTF, slimmed to what the loader looks up (see [`slim_btf`]): parsing all of it
/// is most of the agent's start-up memory. Falls back to the whole when slimming fails.
fn kernel_btf(notes: &mut Vec<String>) -> Result<Btf, Unavailable> {
    let unusable =
        |e: &dyn std::error::Error| unavailable(&format!("kernel BTF ({VMLINUX}) unusable"), e);
    let raw = std::fs::read(VMLINUX).map_err(|e| unusable(&e))?;
    let parsed = match slim_btf::slim(&raw, BTF_NAMES) {
        Ok(slim) => {
            drop(raw);
            Btf::parse(&slim, Endianness::default())
        }
        Err(e) => {
            notes.push(format!(
                "cannot slim the kernel BTF ({e}); parsed all of it"
            ));
            Btf::parse(&raw, Endianness::default())
        }
    };
    parsed.map_err(|e| unusable(&e))
}

/// Creates the maps and relocates the programs (nothing is attached yet), with the
/// hardware-counter flag fixed to `hw_counters`.
fn load_object(
    loader: &mut EbpfLoader<'_>,
    settings: &EbpfSettings,
    hw_counters: bool,
) -> Result<Ebpf, Unavailable> {
    // 'static: the loader keeps the value it is given for as long as it lives.
    let hw_flag: &'static u8 = if hw_counters { &1 } else { &0 };
    let slots = slot_count(settings.max_processes, pid_max());
    let slot_mask: &'static u32 = SLOT_MASKS
        .get(slots.trailing_zeros() as usize)
        .unwrap_or(&0);
    loader
        .map_max_entries(names::TASKS, settings.max_processes.max(1))
        .map_max_entries(names::SLOTS, slots)
        .override_global(names::SLOT_MASK_GLOBAL, slot_mask, true)
        // A slot for every group the process map can hold.
        .map_max_entries(names::PASS_OUT, settings.max_processes.max(1))
        .map_max_entries(names::EXITS, ring_size(settings.exit_buffer_bytes))
        .override_global(names::HW_GLOBAL, hw_flag, true)
        .load(OBJECT)
        .map_err(|e| unavailable("creating maps", &e))
}

/// `slot_mask` for each size of `slots` (2^i slots: 2^i - 1), given to the loader by reference.
static SLOT_MASKS: [u32; 32] = {
    let mut masks = [0u32; 32];
    let mut i = 0;
    while i < 32 {
        masks[i] = (1u32 << i) - 1;
        i += 1;
    }
    masks
};

/// The most slots `slots` gets: 4 MiB of kernel memory. Past that, groups whose tgids meet in
/// one slot charge their entries, as any group does without a slot.
const MAX_SLOTS: u32 = 1 << 16;

/// How many slots `slots` gets: a power of two, one per group the process map holds, no more
/// than the kernel has pids (no two groups can then meet in a slot) or [`MAX_SLOTS`].
fn slot_count(max_processes: u32, pid_max: Option<u32>) -> u32 {
    let wanted = max_processes.min(pid_max.unwrap_or(u32::MAX)).max(1);
    wanted
        .checked_next_power_of_two()
        .unwrap_or(MAX_SLOTS)
        .min(MAX_SLOTS)
}

/// `/proc/sys/kernel/pid_max`, the pids the kernel gives out; `None` when unreadable.
fn pid_max() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/pid_max")
        .ok()?
        .trim()
        .parse()
        .ok()
}

fn attach_switch(ebpf: &mut Ebpf, btf: &Btf) -> Result<(), Unavailable> {
    let prog: &mut BtfTracePoint = ebpf
        .program_mut(names::SWITCH_PROG)
        .ok_or_else(|| Unavailable::new("eBPF: object has no sched_switch program"))?
        .try_into()
        .map_err(|e| unavailable("sched_switch program", &e))?;
    prog.load("sched_switch", btf)
        .map_err(|e| unavailable("loading sched_switch program", &e))?;
    prog.attach()
        .map_err(|e| unavailable("attaching to sched_switch", &e))?;
    Ok(())
}

const ITER_ACTIVE: &str = "iter/task";

/// Loads the task iterator and links it (a link costs nothing until a pass is made from it),
/// and loads its final-switch program without attaching it.
fn attach_task_iterator(ebpf: &mut Ebpf, btf: &Btf) -> Result<IterParts, String> {
    let prog: &mut Iter = ebpf
        .program_mut(names::ITER_PROG)
        .ok_or("object has no task iterator")?
        .try_into()
        .map_err(|e| chain(&e))?;
    prog.load("task", btf).map_err(|e| chain(&e))?;
    let prog_fd = prog.fd().map_err(|e| chain(&e))?;
    let link = task_iter::link(prog_fd.as_fd()).map_err(|e| format!("linking iter/task: {e}"))?;
    let exit: &mut BtfTracePoint = ebpf
        .program_mut(names::EXIT_PROG)
        .ok_or("object has no final-switch program")?
        .try_into()
        .map_err(|e| chain(&e))?;
    exit.load("sched_switch", btf)
        .map_err(|e| format!("loading {}: {}", names::EXIT_PROG, chain(&e)))?;
    // A descriptor of its own: the object's goes when the object is dropped or handed over.
    let exit_prog = exit
        .fd()
        .map_err(|e| chain(&e))?
        .as_fd()
        .try_clone_to_owned()
        .map_err(|e| format!("{}: {e}", names::EXIT_PROG))?;
    Ok(IterParts { link, exit_prog })
}

fn attach_softirq(ebpf: &mut Ebpf, btf: &Btf) -> ProbeState {
    let result = (|| -> Result<(), String> {
        let prog: &mut BtfTracePoint = ebpf
            .program_mut(names::SOFTIRQ_PROG)
            .ok_or("object has no softirq program")?
            .try_into()
            .map_err(|e| chain(&e))?;
        prog.load("softirq_entry", btf).map_err(|e| chain(&e))?;
        prog.attach().map_err(|e| chain(&e))?;
        Ok(())
    })();
    match result {
        Ok(()) => ProbeState::Active("tp_btf/softirq_entry".into()),
        Err(why) => ProbeState::Unavailable(why),
    }
}

/// Kernels since 5.16 mark pages through `folio_mark_accessed` (`mark_page_accessed` became a
/// wrapper, and is gone in some builds); older ones only have `mark_page_accessed`.
const PAGE_CACHE_FNS: [&str; 2] = ["folio_mark_accessed", "mark_page_accessed"];

/// Tries fentry on each function, then a kprobe on each; the first that attaches wins.
fn attach_page_cache(ebpf: &mut Ebpf, btf: &Btf) -> ProbeState {
    let mut errors = Vec::new();
    match attach_page_cache_fentry(ebpf, btf) {
        Ok(at) => return ProbeState::Active(at),
        Err(why) => errors.push(why),
    }
    match attach_page_cache_kprobe(ebpf) {
        Ok(at) => return ProbeState::Active(at),
        Err(why) => errors.push(why),
    }
    ProbeState::Unavailable(errors.join("; "))
}

fn attach_page_cache_fentry(ebpf: &mut Ebpf, btf: &Btf) -> Result<String, String> {
    let mut errors = Vec::new();
    for f in PAGE_CACHE_FNS {
        // The attach target is fixed at load time, so each try loads a fresh copy.
        let prog: &mut FEntry = ebpf
            .program_mut(names::PGCACHE_FENTRY_PROG)
            .ok_or("object has no fentry page-cache program")?
            .try_into()
            .map_err(|e| chain(&e))?;
        let tried = prog
            .load(f, btf)
            .map_err(|e| chain(&e))
            .and_then(|()| prog.attach().map(|_| ()).map_err(|e| chain(&e)));
        match tried {
            Ok(()) => return Ok(format!("fentry/{f}")),
            Err(why) => {
                errors.push(format!("fentry/{f}: {why}"));
                let _ = prog.unload();
            }
        }
    }
    Err(errors.join("; "))
}

fn attach_page_cache_kprobe(ebpf: &mut Ebpf) -> Result<String, String> {
    // aya attaches kprobes through the kprobe PMU or tracefs kprobe_events; with neither the
    // kernel was built without kprobes, which says more than aya's missing-file error.
    let pmu = std::path::Path::new("/sys/bus/event_source/devices/kprobe");
    let events = [
        "/sys/kernel/tracing/kprobe_events",
        "/sys/kernel/debug/tracing/kprobe_events",
    ];
    if !pmu.exists() && !events.iter().any(|p| std::path::Path::new(p).exists()) {
        return Err("kprobe: this kernel has no kprobe support (CONFIG_KPROBES off)".into());
    }
    let prog: &mut KProbe = ebpf
        .program_mut(names::PGCACHE_PROG)
        .ok_or("object has no kprobe page-cache program")?
        .try_into()
        .map_err(|e| chain(&e))?;
    prog.load().map_err(|e| format!("kprobe: {}", chain(&e)))?;
    let mut errors = Vec::new();
    for f in PAGE_CACHE_FNS {
        match prog.attach(f, 0) {
            Ok(_) => return Ok(format!("kprobe/{f}")),
            Err(e) => errors.push(format!("kprobe/{f}: {}", chain(&e))),
        }
    }
    Err(errors.join("; "))
}

const HW_ACTIVE: &str = "perf_event_open per CPU: cycles, instructions, cache-misses";

/// Puts every counter's descriptor into its map; on failure says which one was refused.
fn store_counters(ebpf: &Ebpf, counters: &perf::Counters) -> Result<(), String> {
    let maps = [names::HW_CYCLES, names::HW_INSTR, names::HW_CMISS];
    for (map_name, fds) in maps.iter().zip(counters) {
        let Some(Map::PerfEventArray(data)) = ebpf.map(map_name) else {
            return Err(format!("object has no {map_name} map"));
        };
        for (cpu, fd) in fds {
            perf::store_fd(data.fd().as_fd(), *cpu, fd)
                .map_err(|e| format!("storing {map_name}[{cpu}]: {e}"))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ring_sizes_are_powers_of_two_pages() {
        assert_eq!(ring_size(0), 4096);
        assert_eq!(ring_size(5000), 8192);
        assert_eq!(ring_size(4 << 20), 4 << 20);
    }

    /// The loaded object's `.rodata`: the hardware-counter flag (byte 0), then `slot_mask`
    /// (bytes 4 to 8, `llvm-objdump -t`).
    fn rodata(ebpf: &Attached) -> Option<[u8; 8]> {
        let map = ebpf.map(".rodata")?;
        let arr = aya::maps::Array::<&MapData, [u8; 8]>::try_from(map).ok()?;
        arr.get(&0, 0).ok()
    }

    /// The object loaded with `settings` and the hardware-counter flag `hw_counters`, nothing
    /// attached (root).
    fn object_with(settings: &EbpfSettings, hw_counters: bool) -> Attached {
        let btf = kernel_btf(&mut Vec::new()).unwrap();
        let mut loader = EbpfLoader::new();
        loader.btf(Some(&btf));
        Attached::from_object(
            load_object(&mut loader, settings, hw_counters).unwrap(),
            None,
        )
    }

    /// The hardware-counter flag the loaded object runs with.
    fn hw_flag(ebpf: &Attached) -> Option<u8> {
        rodata(ebpf).map(|r| r[0])
    }

    #[test]
    fn slots_are_a_power_of_two_no_more_than_pids_or_the_cap() {
        assert_eq!(slot_count(16_384, Some(4_194_304)), 16_384);
        assert_eq!(slot_count(16_384, Some(32_768)), 16_384);
        // No more slots than pids: two groups then never meet in one.
        assert_eq!(slot_count(100_000, Some(32_768)), 32_768);
        assert_eq!(slot_count(1_000, None), 1_024);
        assert_eq!(slot_count(0, None), 1);
        assert_eq!(slot_count(u32::MAX, None), MAX_SLOTS);
        assert_eq!(slot_count(1 << 20, Some(4_194_304)), MAX_SLOTS);
        for (i, mask) in SLOT_MASKS.iter().enumerate() {
            assert_eq!(u64::from(*mask) + 1, 1u64 << i);
        }
    }

    #[test]
    fn the_slot_mask_fits_the_slots_array() {
        let test = "the_slot_mask_fits_the_slots_array";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let settings = EbpfSettings {
            max_processes: 3_000,
            ..Default::default()
        };
        let object = object_with(&settings, false);
        let slots = slot_count(3_000, pid_max());
        assert!(slots.is_power_of_two() && slots <= 4_096);
        let Some(Map::Array(data)) = object.map(names::SLOTS) else {
            panic!("no slots array");
        };
        assert_eq!(data.info().unwrap().max_entries(), slots);
        let r = rodata(&object).unwrap();
        let mask = u32::from_ne_bytes([r[4], r[5], r[6], r[7]]);
        assert_eq!(mask, slots - 1);
    }

    #[test]
    fn counters_the_maps_refuse_are_closed_and_their_code_off() {
        let test = "counters_the_maps_refuse_are_closed_and_their_code_off";
        if crate::test_support::skip_unless_root(test) {
            return;
        }
        let settings = EbpfSettings {
            page_cache: false,
            softirq: false,
            hw_counters: true,
            ..Default::default()
        };
        // The flag reads back as set when it is.
        assert_eq!(hw_flag(&object_with(&settings, true)), Some(1));

        // Descriptors that are not perf events: the first store fails, with the second CPU's
        // and the other events' counters opened but never stored.
        let dev_null = || std::os::fd::OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let mut opened: Vec<std::os::fd::RawFd> = Vec::new();
        let loaded = load_with(&settings, Labels::None, |cpus| {
            let mut c: perf::Counters = Default::default();
            for slot in c.iter_mut() {
                for &cpu in cpus {
                    let fd = dev_null();
                    opened.push(std::os::fd::AsRawFd::as_raw_fd(&fd));
                    slot.push((cpu, fd));
                }
            }
            Ok(c)
        })
        .unwrap();
        match &loaded.probes.hw_counters {
            ProbeState::Unavailable(why) => assert!(why.starts_with("storing hw_cycles["), "{why}"),
            other => panic!("hardware counters {other}"),
        }
        assert!(loaded.counters.is_none());
        assert_eq!(
            hw_flag(&loaded.ebpf),
            Some(0),
            "loaded again with the flag off"
        );
        // Every descriptor was closed: none of the numbers is open on /dev/null any more (a
        // number can have been reused, by the reload's maps, but not for /dev/null).
        for fd in opened {
            let target = std::fs::read_link(format!("/proc/self/fd/{fd}"));
            assert!(
                target.map_or(true, |t| t != std::path::Path::new("/dev/null")),
                "fd {fd} still open"
            );
        }
    }

    /// From a loader child, a probe is detached by closing the descriptors labelled with it;
    /// one it did not label cannot be, and nothing changes. The labelled descriptor is a
    /// pipe's write end: its reader sees the end of the pipe once, and only once, it closes.
    #[test]
    fn received_probes_are_detached_by_their_labels() {
        use std::io::Read;
        use std::os::fd::FromRawFd;
        let mut ends = [0; 2];
        // Non-blocking: with the write end still open, the read fails instead of waiting.
        let flags = libc::O_CLOEXEC | libc::O_NONBLOCK;
        // SAFETY: `ends` has room for the two descriptors pipe2 writes.
        assert_eq!(unsafe { libc::pipe2(ends.as_mut_ptr(), flags) }, 0);
        // SAFETY: both descriptors were just created and nothing else owns them.
        let (reader, writer) =
            unsafe { (OwnedFd::from_raw_fd(ends[0]), OwnedFd::from_raw_fd(ends[1])) };
        let mut reader = std::fs::File::from(reader);
        let dev_null = OwnedFd::from(std::fs::File::open("/dev/null").unwrap());
        let mut attached = Attached::from_fds(
            HashMap::new(),
            vec![dev_null],
            vec![(Part::Probe(OptionalProbe::Softirq), vec![writer])],
        );
        assert!(attached.detach(OptionalProbe::PageCache).is_err());
        attached.detach(OptionalProbe::Softirq).unwrap();
        let mut rest = Vec::new();
        let read = reader.read_to_end(&mut rest);
        assert_eq!(read.map_err(|e| e.kind()), Ok(0), "write end closed");
        assert!(
            attached.detach(OptionalProbe::Softirq).is_err(),
            "detached twice"
        );
    }

    /// Whether a program of this id is loaded anywhere on the machine.
    fn program_loaded(id: u32) -> bool {
        aya::programs::loaded_programs().any(|p| p.is_ok_and(|p| p.id() == id))
    }

    /// Whether the program is gone within a few seconds: the kernel frees a detached link,
    /// and with it the program's last reference, from a work queue after an RCU grace period.
    fn program_unloaded_soon(id: u32) -> bool {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
        while program_loaded(id) {
            if std::time::Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        true
    }

    /// The one optional probe a detach test loads.
    enum Probe {
        Softirq,
        /// Software CPU-clock events in the hardware counters' maps.
        SoftwareCounters,
    }

    /// Loads in this process with `probe` as the only optional probe; `None` (the test
    /// skipped) unless root.
    fn load_as_root(test: &str, probe: Probe) -> Option<Loaded> {
        if crate::test_support::skip_unless_root(test) {
            return None;
        }
        let counters = matches!(probe, Probe::SoftwareCounters);
        let settings = EbpfSettings {
            page_cache: false,
            softirq: !counters,
            hw_counters: counters,
            ..Default::default()
        };
        Some(load_with(&settings, Labels::None, perf::open_all_software).unwrap())
    }

    /// Detaching the softirq probe of an object loaded in this process unloads its program
    /// from the kernel, and leaves `sched_switch` attached.
    #[test]
    fn a_detached_probe_leaves_the_kernel() {
        let test = "a_detached_probe_leaves_the_kernel";
        let Some(mut loaded) = load_as_root(test, Probe::Softirq) else {
            return;
        };
        assert!(loaded.probes.softirq.is_active(), "{}", loaded.probes);
        assert!(loaded.probe_fds.is_empty(), "labelled without being asked");
        let id = |ebpf: &Attached, name: &str| match &ebpf.keep {
            Keep::Object { ebpf } => ebpf.program(name).unwrap().info().unwrap().id(),
            Keep::Fds { .. } => panic!("loaded in this process"),
        };
        let softirq = id(&loaded.ebpf, names::SOFTIRQ_PROG);
        let switch = id(&loaded.ebpf, names::SWITCH_PROG);
        assert!(program_loaded(softirq) && program_loaded(switch));

        loaded.ebpf.detach(OptionalProbe::Softirq).unwrap();
        assert!(
            program_unloaded_soon(softirq),
            "softirq program still loaded"
        );
        assert!(program_loaded(switch), "sched_switch went too");
        // Nothing left to detach: page cache was never attached, softirq is gone.
        loaded.ebpf.detach(OptionalProbe::PageCache).unwrap();
        loaded.ebpf.detach(OptionalProbe::Softirq).unwrap();
    }

    /// With the counters detached, `sched_switch` no longer reads them: this process's count
    /// stops moving however much it runs. Software CPU-clock events stand in for the PMU,
    /// which this VM does not have; the program reads them the same way.
    #[test]
    fn detached_counters_are_no_longer_read() {
        let test = "detached_counters_are_no_longer_read";
        let Some(mut loaded) = load_as_root(test, Probe::SoftwareCounters) else {
            return;
        };
        assert!(loaded.probes.hw_counters.is_active(), "{}", loaded.probes);
        let me = std::process::id();
        // The process's entry and its slot: switches charge the slot once it holds one.
        let slots = crate::slots::PagedSlots::of(&loaded.ebpf).unwrap();
        let counted = |ebpf: &Attached| {
            let map = ebpf.map(names::TASKS).unwrap();
            let tasks =
                aya::maps::HashMap::<&MapData, u32, crate::abi::TaskTotals>::try_from(map).unwrap();
            let mut t = tasks.get(&me, 0).unwrap_or_default();
            crate::slots::add_slot(me, &mut t, &slots);
            t.cycles
        };
        // Runs, then sleeps: the switch out charges the clock that ran meanwhile.
        let run = || {
            let end = std::time::Instant::now() + std::time::Duration::from_millis(30);
            while std::time::Instant::now() < end {
                std::hint::black_box(0u64);
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        };
        run();
        let before = counted(&loaded.ebpf);
        run();
        assert!(counted(&loaded.ebpf) > before, "counted while attached");

        loaded.ebpf.detach(OptionalProbe::HwCounters).unwrap();
        loaded.counters = None;
        run();
        let after = counted(&loaded.ebpf);
        run();
        assert_eq!(counted(&loaded.ebpf), after, "still read after detaching");
    }

    /// The slim BTF has every name the loader looks up at the id the whole one has, aya
    /// reads it, and BTF_NAMES names every type bpf/kernel_types.h declares (those are what
    /// CO-RE relocates).
    #[test]
    fn slim_kernel_btf_has_the_ids_of_the_whole() {
        let full = std::fs::read(VMLINUX).unwrap();
        let slim = slim_btf::slim(&full, BTF_NAMES).unwrap();
        assert!(
            slim.len() < full.len() / 2,
            "{} of {} bytes",
            slim.len(),
            full.len()
        );
        let mut found = 0;
        for name in BTF_NAMES {
            let want = slim_btf::ids_named(&full, name);
            found += usize::from(!want.is_empty());
            assert_eq!(slim_btf::ids_named(&slim, name), want, "{name}");
        }
        // One of the page-cache functions may be missing on a kernel.
        assert!(found >= BTF_NAMES.len() - 1, "{found} names found");
        let mut notes = Vec::new();
        assert!(kernel_btf(&mut notes).is_ok());
        assert!(notes.is_empty(), "{notes:?}");
        let header = include_str!("../bpf/kernel_types.h");
        for line in header.lines() {
            let decl = line.strip_prefix("struct ").or(line.strip_prefix("enum "));
            if let Some(name) = decl.and_then(|d| d.strip_suffix(" {")) {
                assert!(BTF_NAMES.contains(&name), "{name} missing from BTF_NAMES");
            }
        }
    }

    #[test]
    fn chains_are_one_line_and_bounded() {
        let e = std::io::Error::other("x".repeat(5000));
        let s = chain(&e);
        assert!(s.starts_with('…'));
        assert!(s.len() <= 2000 + '…'.len_utf8());
    }
}

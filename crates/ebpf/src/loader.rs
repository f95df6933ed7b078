//! Loading the object and attaching its programs. `sched_switch` is required; the page-cache,
//! softirq and hardware-counter probes are optional and each reports why it is off.

use std::fmt;
use std::os::fd::AsFd;

use aya::maps::{Map, MapData, RingBuf};
use aya::programs::{BtfTracePoint, FEntry, KProbe};
use aya::{Btf, Ebpf, EbpfLoader};
use kepler_core::Unavailable;

use crate::abi::{names, OBJECT};
use crate::perf;
use crate::EbpfSettings;

/// State of one optional probe.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ProbeState {
    /// Attached; the text says where (function or tracepoint).
    Active(String),
    /// Turned off in the settings.
    Disabled,
    /// Wanted but refused or missing on this kernel; the text says why.
    Unavailable(String),
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
        }
    }
}

/// What the loaded source measures besides CPU time and context switches.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Probes {
    pub page_cache: ProbeState,
    pub softirq: ProbeState,
    pub hw_counters: ProbeState,
}

impl fmt::Display for Probes {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "page cache hits {}; softirqs {}; hardware counters {}",
            self.page_cache, self.softirq, self.hw_counters
        )
    }
}

/// Everything that must stay alive while the source runs: dropping `ebpf` detaches the
/// programs, dropping the counters closes the perf events.
pub(crate) struct Loaded {
    pub ebpf: Ebpf,
    pub exits: RingBuf<MapData>,
    pub probes: Probes,
    pub _counters: Option<perf::Counters>,
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

fn unavailable(what: &str, e: &dyn std::error::Error) -> Unavailable {
    Unavailable::new(format!("eBPF: {what}: {}", chain(e)))
}

/// The ring buffer size the kernel accepts: a power of two, at least one page.
fn ring_size(bytes: u32) -> u32 {
    bytes.clamp(4096, 1 << 30).next_power_of_two()
}

pub(crate) fn load(settings: &EbpfSettings) -> Result<Loaded, Unavailable> {
    crate::caps::check_self().map_err(|r| Unavailable::new(format!("eBPF: {r}")))?;
    let btf = Btf::from_sys_fs()
        .map_err(|e| unavailable("kernel BTF (/sys/kernel/btf/vmlinux) unusable", &e))?;

    let (counters, hw_state) = if settings.hw_counters {
        match aya::util::online_cpus()
            .map_err(|(path, e)| format!("reading {path}: {e}"))
            .and_then(|cpus| perf::open_all(&cpus))
        {
            Ok(c) => (Some(c), None),
            Err(why) => (None, Some(ProbeState::Unavailable(why))),
        }
    } else {
        (None, Some(ProbeState::Disabled))
    };
    let hw_flag: u8 = u8::from(counters.is_some());

    let mut ebpf = EbpfLoader::new()
        .btf(Some(&btf))
        .map_max_entries(names::TASKS, settings.max_processes.max(1))
        .map_max_entries(names::EXITS, ring_size(settings.exit_buffer_bytes))
        .override_global(names::HW_GLOBAL, &hw_flag, true)
        .load(OBJECT)
        .map_err(|e| unavailable("creating maps", &e))?;

    attach_switch(&mut ebpf, &btf)?;
    let softirq = if settings.softirq {
        attach_softirq(&mut ebpf, &btf)
    } else {
        ProbeState::Disabled
    };
    let page_cache = if settings.page_cache {
        attach_page_cache(&mut ebpf, &btf)
    } else {
        ProbeState::Disabled
    };
    let hw_counters = match (hw_state, &counters) {
        (Some(state), _) => state,
        (None, Some(c)) => store_counters(&ebpf, c),
        (None, None) => ProbeState::Disabled,
    };

    let exits = ebpf
        .take_map(names::EXITS)
        .ok_or_else(|| Unavailable::new("eBPF: object has no exits map"))?;
    let exits = RingBuf::try_from(exits).map_err(|e| unavailable("mapping exits ring", &e))?;
    let probes = Probes {
        page_cache,
        softirq,
        hw_counters,
    };
    tracing::info!(%probes, "eBPF programs attached");
    Ok(Loaded {
        ebpf,
        exits,
        probes,
        _counters: counters,
    })
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
        Err(why) => {
            tracing::warn!(%why, "softirq counting unavailable");
            ProbeState::Unavailable(why)
        }
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
    let why = errors.join("; ");
    tracing::warn!(%why, "page-cache counting unavailable");
    ProbeState::Unavailable(why)
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

fn store_counters(ebpf: &Ebpf, counters: &perf::Counters) -> ProbeState {
    let maps = [names::HW_CYCLES, names::HW_INSTR, names::HW_CMISS];
    for (map_name, fds) in maps.iter().zip(counters) {
        let Some(Map::PerfEventArray(data)) = ebpf.map(map_name) else {
            return ProbeState::Unavailable(format!("object has no {map_name} map"));
        };
        for (cpu, fd) in fds {
            if let Err(e) = perf::store_fd(data.fd().as_fd(), *cpu, fd) {
                return ProbeState::Unavailable(format!("storing {map_name}[{cpu}]: {e}"));
            }
        }
    }
    ProbeState::Active("perf_event_open per CPU: cycles, instructions, cache-misses".into())
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

    #[test]
    fn chains_are_one_line_and_bounded() {
        let e = std::io::Error::other("x".repeat(5000));
        let s = chain(&e);
        assert!(s.starts_with('…'));
        assert!(s.len() <= 2000 + '…'.len_utf8());
    }
}

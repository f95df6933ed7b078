//! Hardware counters (cycles, instructions, cache misses): one `perf_event_open` per online CPU
//! and event, whose descriptors go into the program's `PERF_EVENT_ARRAY` maps so that
//! `sched_switch` can read them with `bpf_perf_event_read_value`. Many VMs do not virtualise the
//! PMU; opening then fails (ENOENT/EOPNOTSUPP) and the source carries on without them.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_COUNT_HW_CPU_CYCLES: u64 = 0;
const PERF_COUNT_HW_INSTRUCTIONS: u64 = 1;
const PERF_COUNT_HW_CACHE_MISSES: u64 = 3;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 8;
const BPF_MAP_UPDATE_ELEM: libc::c_long = 2;
const BPF_MAP_DELETE_ELEM: libc::c_long = 3;

/// `struct perf_event_attr` up to its first published size (PERF_ATTR_SIZE_VER0 = 64 bytes),
/// which is all a counting event needs; the kernel zero-extends the rest.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const _: () = assert!(std::mem::size_of::<PerfEventAttr>() == 64);

/// The three events, in the order of the maps they fill.
pub(crate) const EVENTS: [(&str, u64); 3] = [
    ("cycles", PERF_COUNT_HW_CPU_CYCLES),
    ("instructions", PERF_COUNT_HW_INSTRUCTIONS),
    ("cache-misses", PERF_COUNT_HW_CACHE_MISSES),
];

/// Opens one hardware counting event on `cpu` for every task (pid −1).
fn open_counter(config: u64, cpu: u32) -> io::Result<OwnedFd> {
    open_event(PERF_TYPE_HARDWARE, config, cpu)
}

fn open_event(type_: u32, config: u64, cpu: u32) -> io::Result<OwnedFd> {
    let attr = PerfEventAttr {
        type_,
        size: std::mem::size_of::<PerfEventAttr>() as u32,
        config,
        ..Default::default()
    };
    // SAFETY: `attr` is a valid, fully initialised perf_event_attr of the size it declares.
    let fd = unsafe {
        libc::syscall(
            libc::SYS_perf_event_open,
            &attr as *const PerfEventAttr,
            -1 as libc::pid_t,
            cpu as libc::c_int,
            -1 as libc::c_int,
            PERF_FLAG_FD_CLOEXEC,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    let fd = libc::c_int::try_from(fd).map_err(|_| io::Error::other("fd out of range"))?;
    // SAFETY: the kernel just returned this descriptor and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Per event (in `EVENTS` order), the opened descriptors as (cpu, fd).
pub(crate) type Counters = [Vec<(u32, OwnedFd)>; 3];

/// Opens all three events on every CPU, or explains why hardware counters are unusable.
pub(crate) fn open_all(cpus: &[u32]) -> Result<Counters, String> {
    let mut out: Counters = Default::default();
    for (slot, (name, config)) in out.iter_mut().zip(EVENTS) {
        for &cpu in cpus {
            let fd = open_counter(config, cpu).map_err(|e| {
                let hint = match e.raw_os_error() {
                    Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) => " (not supported here)",
                    _ => "",
                };
                format!("perf_event_open({name}, cpu {cpu}): {e}{hint}")
            })?;
            slot.push((cpu, fd));
        }
    }
    Ok(out)
}

/// The software CPU clock on every CPU in place of the three hardware events, for tests on
/// machines without a PMU: it counts nanoseconds on the CPU, and the program reads it the same
/// way.
#[cfg(test)]
pub(crate) fn open_all_software(cpus: &[u32]) -> Result<Counters, String> {
    const PERF_TYPE_SOFTWARE: u32 = 1;
    const PERF_COUNT_SW_CPU_CLOCK: u64 = 0;
    let mut out: Counters = Default::default();
    for slot in out.iter_mut() {
        for &cpu in cpus {
            let fd = open_event(PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK, cpu)
                .map_err(|e| format!("cpu-clock on cpu {cpu}: {e}"))?;
            slot.push((cpu, fd));
        }
    }
    Ok(out)
}

/// `union bpf_attr` as used by BPF_MAP_UPDATE_ELEM and BPF_MAP_DELETE_ELEM.
#[repr(C)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// One element command (`BPF_MAP_UPDATE_ELEM` with a value, `BPF_MAP_DELETE_ELEM` without)
/// on slot `key` of a `PERF_EVENT_ARRAY`, whose values are descriptors. aya 0.14 only offers
/// that map as an output buffer, hence the raw `bpf(2)` call.
fn elem_command(
    cmd: libc::c_long,
    map: BorrowedFd<'_>,
    key: u32,
    value_fd: Option<BorrowedFd<'_>>,
) -> io::Result<()> {
    let negative = |_| io::Error::other("negative fd");
    let value: u32 = match value_fd {
        Some(fd) => u32::try_from(fd.as_raw_fd()).map_err(negative)?,
        None => 0,
    };
    let attr = MapElemAttr {
        map_fd: u32::try_from(map.as_raw_fd()).map_err(negative)?,
        _pad: 0,
        key: &key as *const u32 as u64,
        value: if value_fd.is_some() {
            &value as *const u32 as u64
        } else {
            0
        },
        flags: 0,
    };
    // SAFETY: `attr` points at `key` and `value`, which outlive the call.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            &attr as *const MapElemAttr,
            std::mem::size_of::<MapElemAttr>() as libc::c_uint,
        )
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Stores `value_fd` at index `cpu` of a `PERF_EVENT_ARRAY`.
pub(crate) fn store_fd(map: BorrowedFd<'_>, cpu: u32, value_fd: &OwnedFd) -> io::Result<()> {
    elem_command(BPF_MAP_UPDATE_ELEM, map, cpu, Some(value_fd.as_fd()))
}

/// Empties slots `0..slots` of a `PERF_EVENT_ARRAY`: the map lets go of its events, and the
/// program's reads of them fail (it then counts nothing) instead of reading the PMU.
pub(crate) fn clear(map: BorrowedFd<'_>, slots: u32) -> io::Result<()> {
    for key in 0..slots {
        match elem_command(BPF_MAP_DELETE_ELEM, map, key, None) {
            // A CPU that was offline at load has no event to let go of.
            Err(e) if e.raw_os_error() != Some(libc::ENOENT) => return Err(e),
            _ => {}
        }
    }
    Ok(())
}

//! The `kepler` binary's global allocator: the system's, or jemalloc with its sampling heap
//! profiler when heap profiles are wanted (`debug.pprof.enabled`, see
//! `kepler_agent::profiling`).
//!
//! jemalloc's profiler has to be on from a process's first allocation, and having it compiled
//! in and on costs memory (about 3 MiB of RSS more than the system allocator without it, 7 MiB
//! with it, measured on a debug build): an agent that serves no profiles should not pay that.
//! So the choice is made once, before the first allocation, from the environment:
//! `KEPLER_HEAP_PROFILING` (`kepler_agent::profiling::HEAP_ENV`) set selects jemalloc, and `main` re-runs the binary with it set when
//! the configuration asks for profiles. A block is always freed by the allocator that made it,
//! since the choice never changes within a process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::CStr;
use std::sync::atomic::{AtomicU8, Ordering};

use tikv_jemallocator::Jemalloc;

/// Set (to anything) in a process's environment, selects jemalloc with heap profiling on.
pub const ENV: &CStr = kepler_agent::profiling::HEAP_ENV;

const UNDECIDED: u8 = 0;
const SYSTEM: u8 = 1;
const JEMALLOC: u8 = 2;
static MODE: AtomicU8 = AtomicU8::new(UNDECIDED);

/// jemalloc's options, read by it at its first use: profiling on and sampling from the start,
/// one sample per 512 KiB allocated on average (as Go's heap profile).
#[allow(non_upper_case_globals)]
#[export_name = "_rjem_malloc_conf"]
pub static malloc_conf: &[u8] = b"prof:true,prof_active:true,lg_prof_sample:19\0";

/// Blocks of at least this size get their own mapping from glibc's malloc (its default start
/// value, held fixed; see [`tune_system_allocator`]).
pub const MMAP_THRESHOLD: usize = 128 * 1024;

/// Holds glibc's mmap threshold at [`MMAP_THRESHOLD`], so that every large block goes back to
/// the system when it is freed. Call once, early in `main`; does nothing under jemalloc.
///
/// glibc starts with a 128 KiB threshold but raises it to the size of each mapped block that is
/// freed (up to 32 MiB). The agent's large blocks come and go with the load: hash tables and
/// process lists that grow with a fork storm, a multi-megabyte `/metrics` body per snapshot.
/// After the first such free, blocks of that size come from the arena instead, where a small
/// live allocation above them keeps their pages resident after they are freed. Measured with a
/// starved agent under the faults-and-load plan (docs/security.md): the arena held 43 MB of
/// which 6 MB were in use, and RSS grew from 53 to 94 MB. Setting the threshold also turns
/// off the dynamic adjustment, which is the point.
pub fn tune_system_allocator() {
    if jemalloc() || threshold_set_by_user() {
        return;
    }
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes a malloc parameter; it is safe to call at any time.
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, MMAP_THRESHOLD as libc::c_int);
    }
}

/// glibc's own settings for the threshold, `MALLOC_MMAP_THRESHOLD_` or the
/// `glibc.malloc.mmap_threshold` tunable, win: they also hold it fixed.
fn threshold_set_by_user() -> bool {
    std::env::var_os("MALLOC_MMAP_THRESHOLD_").is_some()
        || std::env::var("GLIBC_TUNABLES").is_ok_and(|t| t.contains("glibc.malloc.mmap_threshold"))
}

/// Whether this process allocates with jemalloc.
pub fn jemalloc() -> bool {
    mode() == JEMALLOC
}

fn mode() -> u8 {
    let mode = MODE.load(Ordering::Relaxed);
    if mode != UNDECIDED {
        return mode;
    }
    // Threads racing here at start-up read the same environment and agree.
    // SAFETY: getenv reads the environment without allocating; the result is only null-checked.
    // Nothing in this process calls setenv.
    let set = unsafe { !libc::getenv(ENV.as_ptr()).is_null() };
    let mode = if set { JEMALLOC } else { SYSTEM };
    MODE.store(mode, Ordering::Relaxed);
    mode
}

/// The system allocator or jemalloc, chosen once per process.
pub struct Switch;

// SAFETY: every call goes to one of two sound allocators, the same one for the whole life of
// the process, so each block is freed and resized by the allocator that made it.
unsafe impl GlobalAlloc for Switch {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract is passed on unchanged.
        unsafe {
            if jemalloc() {
                Jemalloc.alloc(layout)
            } else {
                System.alloc(layout)
            }
        }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as in alloc.
        unsafe {
            if jemalloc() {
                Jemalloc.alloc_zeroed(layout)
            } else {
                System.alloc_zeroed(layout)
            }
        }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as in alloc; `ptr` came from the same allocator (the choice never changes).
        unsafe {
            if jemalloc() {
                Jemalloc.dealloc(ptr, layout)
            } else {
                System.dealloc(ptr, layout)
            }
        }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as in dealloc.
        unsafe {
            if jemalloc() {
                Jemalloc.realloc(ptr, layout, new_size)
            } else {
                System.realloc(ptr, layout, new_size)
            }
        }
    }
}

#[cfg(test)]
#[cfg(target_env = "gnu")]
mod tests {
    use super::*;

    /// Whether `block` has a mapping of its own: glibc puts such a block two words after the
    /// mapping's start (its chunk header), where an arena block never is (an arena's mapping
    /// starts with the arena's own header, far longer).
    fn mapped_on_its_own(block: &[u8]) -> bool {
        let start = block.as_ptr() as usize;
        let end = start + block.len();
        let header = 2 * std::mem::size_of::<usize>();
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        maps.lines().any(|line| {
            let range = line.split_whitespace().next().unwrap();
            let (lo, hi) = range.split_once('-').unwrap();
            let lo = usize::from_str_radix(lo, 16).unwrap();
            let hi = usize::from_str_radix(hi, 16).unwrap();
            start.checked_sub(lo) == Some(header) && end <= hi
        })
    }

    fn touched(len: usize) -> Vec<u8> {
        let mut v = vec![0u8; len];
        for b in v.iter_mut().step_by(4096) {
            *b = 1;
        }
        v
    }

    #[test]
    fn large_blocks_stay_mapped_after_a_larger_one_is_freed() {
        tune_system_allocator();
        assert!(!jemalloc());
        // Without the fixed threshold, freeing this raises glibc's threshold to 8 MiB and the
        // blocks below come from the arena, where a free does not give their pages back. (A
        // block just above the threshold can still be cut from the arena's free top: glibc
        // maps only what the arena cannot serve, so the blocks here are well above it.)
        drop(touched(8 << 20));
        for len in [1 << 20, 4 << 20] {
            let block = touched(len);
            assert!(
                mapped_on_its_own(&block),
                "a {len} B block came from the arena"
            );
        }
    }
}

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

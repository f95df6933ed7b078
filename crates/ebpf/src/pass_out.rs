//! Iterator accounting's pass output: the `pass_out` array, mapped read-only, where each task
//! iterator pass leaves what it read of every group it met, one slot per group from slot 0
//! (`bpf/kepler.bpf.c`). Reading a pass from it costs a copy of the slots used; a batch read of
//! the process map walks every bucket of the map (16,384 by default) and copies each entry
//! twice, ~0.2 µs an entry.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use crate::abi::PassSlot;

pub(crate) struct PassOut {
    base: NonNull<PassSlot>,
    slots: usize,
    bytes: usize,
}

// SAFETY: the mapping is read-only and holds plain integers; it is unmapped only on drop.
unsafe impl Send for PassOut {}

impl PassOut {
    /// Maps the `slots` slots of the array behind `map` (created with `BPF_F_MMAPABLE`).
    pub(crate) fn map(map: BorrowedFd<'_>, slots: usize) -> io::Result<PassOut> {
        let bytes = slots
            .checked_mul(std::mem::size_of::<PassSlot>())
            .filter(|&b| b > 0)
            .ok_or_else(|| io::Error::other("no slots to map"))?;
        // SAFETY: a fresh shared read-only mapping of a descriptor we hold; the kernel checks
        // that the map allows it and that `bytes` is within it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                0,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base = NonNull::new(ptr.cast::<PassSlot>())
            .ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(PassOut { base, slots, bytes })
    }

    /// The first `used` slots (no more than the array has). Read after the pass, which ran
    /// in this thread's own read of the iterator: nothing writes them meanwhile.
    pub(crate) fn slots(&self, used: usize) -> impl Iterator<Item = PassSlot> + '_ {
        (0..used.min(self.slots)).map(move |i| {
            // SAFETY: `i` is below the number of slots mapped, the mapping lives as long as
            // `self`, and every bit pattern is a valid `PassSlot`. Volatile: the kernel writes
            // this memory, which the compiler cannot see.
            unsafe { std::ptr::read_volatile(self.base.as_ptr().add(i)) }
        })
    }
}

impl Drop for PassOut {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `map`, unmapped once.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

//! Iterator accounting's pass output: the `pass_out` array, mapped read-only, where each task
//! iterator pass leaves what it read of every group it met, one slot per group from slot 0
//! (`bpf/kepler.bpf.c`). Reading a pass from it costs a copy of the slots used; a batch read of
//! the process map walks every bucket of the map (16,384 by default) and copies each entry
//! twice, ~0.2 µs an entry.
//!
//! Only the slots in use are mapped, grown by powers of two: the kernel maps an array's pages
//! all at once, so a mapping of all 16,384 slots would add 640 KiB to the agent's resident
//! memory whatever the number of processes.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;

use crate::abi::PassSlot;

/// Slots mapped at first.
pub(crate) const FIRST_SLOTS: usize = 1024;

pub(crate) struct PassOut {
    map: OwnedFd,
    /// The array's slots.
    total: usize,
    mapping: Mapping,
}

struct Mapping {
    base: NonNull<PassSlot>,
    slots: usize,
    bytes: usize,
}

// SAFETY: the mapping is read-only and holds plain integers; it is unmapped only on drop.
unsafe impl Send for Mapping {}

impl Mapping {
    fn new(map: BorrowedFd<'_>, slots: usize) -> io::Result<Mapping> {
        let bytes = slots
            .checked_mul(std::mem::size_of::<PassSlot>())
            .filter(|&b| b > 0)
            .ok_or_else(|| io::Error::other("no slots to map"))?;
        // SAFETY: a fresh shared read-only mapping of a descriptor we hold; the kernel checks
        // that the map allows it and that `bytes` lies within it.
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
        Ok(Mapping { base, slots, bytes })
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

impl PassOut {
    /// Maps the array behind `map` (created with `BPF_F_MMAPABLE`), which has `total` slots.
    pub(crate) fn map(map: BorrowedFd<'_>, total: usize) -> io::Result<PassOut> {
        let mapping = Mapping::new(map, total.min(FIRST_SLOTS))?;
        Ok(PassOut {
            map: map.try_clone_to_owned()?,
            total,
            mapping,
        })
    }

    /// Slots mapped now.
    #[cfg(test)]
    pub(crate) fn mapped(&self) -> usize {
        self.mapping.slots
    }

    /// Grows the mapping, if need be, to hold the first `used` slots (no more than the array
    /// has).
    pub(crate) fn reserve(&mut self, used: usize) -> io::Result<()> {
        let used = used.min(self.total);
        if used > self.mapping.slots {
            let slots = used
                .checked_next_power_of_two()
                .unwrap_or(used)
                .min(self.total);
            self.mapping = Mapping::new(self.map.as_fd(), slots)?;
        }
        Ok(())
    }

    /// The first `used` slots, as far as they are mapped ([`reserve`](Self::reserve) first).
    /// Read after the pass, which ran in this thread's own read of the iterator: nothing
    /// writes them meanwhile.
    pub(crate) fn slots(&self, used: usize) -> impl Iterator<Item = PassSlot> + '_ {
        let mapping = &self.mapping;
        (0..used.min(mapping.slots)).map(move |i| {
            // SAFETY: `i` is below the number of slots mapped, the mapping lives as long as
            // the borrow of `self`, and every bit pattern is a valid `PassSlot`. Volatile: the
            // kernel writes this memory, which the compiler cannot see.
            unsafe { std::ptr::read_volatile(mapping.base.as_ptr().add(i)) }
        })
    }
}

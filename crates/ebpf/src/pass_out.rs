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
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use crate::abi::PassSlot;
use crate::mapped::Mapping;

/// Slots mapped at first.
pub(crate) const FIRST_SLOTS: usize = 1024;

pub(crate) struct PassOut {
    map: OwnedFd,
    /// The array's slots.
    total: usize,
    mapping: Mapping<PassSlot>,
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
        self.mapping.slots()
    }

    /// Grows the mapping, if need be, to hold the first `used` slots (no more than the array
    /// has).
    pub(crate) fn reserve(&mut self, used: usize) -> io::Result<()> {
        let used = used.min(self.total);
        if used > self.mapping.slots() {
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
        (0..used).map_while(|i| self.mapping.get(i))
    }
}

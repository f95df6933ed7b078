//! BPF arrays created with `BPF_F_MMAPABLE`, mapped read-only into the agent: what the
//! programs write there is read with plain loads, without a syscall per read (`pass_out`, the
//! `pass_fill` and `kstats` arrays read every snapshot, and `slots` a page at a time).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use aya::maps::Map;

use crate::loader::Attached;

/// A shared read-only mapping of the first `slots` elements of a BPF array created with
/// `BPF_F_MMAPABLE`. `T` must be a plain-integer `repr(C)` type whose size is a multiple of 8
/// (the kernel lays an mmapable array's elements out at 8-byte multiples).
pub(crate) struct Mapping<T> {
    base: NonNull<T>,
    slots: usize,
    bytes: usize,
}

// SAFETY: the mapping is read-only and holds plain integers; it is unmapped only on drop.
unsafe impl<T> Send for Mapping<T> {}

impl<T: aya::Pod> Mapping<T> {
    pub(crate) fn new(map: BorrowedFd<'_>, slots: usize) -> io::Result<Mapping<T>> {
        Mapping::new_at(map, 0, slots)
    }

    /// The `slots` elements from element `first` on, which must start a page.
    pub(crate) fn new_at(
        map: BorrowedFd<'_>,
        first: usize,
        slots: usize,
    ) -> io::Result<Mapping<T>> {
        if !std::mem::size_of::<T>().is_multiple_of(8) {
            return Err(io::Error::other(
                "elements are not laid out at their own size",
            ));
        }
        let bytes = slots
            .checked_mul(std::mem::size_of::<T>())
            .filter(|&b| b > 0)
            .ok_or_else(|| io::Error::other("no slots to map"))?;
        let offset = first
            .checked_mul(std::mem::size_of::<T>())
            .and_then(|o| libc::off_t::try_from(o).ok())
            .ok_or_else(|| io::Error::other("offset out of range"))?;
        // SAFETY: a fresh shared read-only mapping of a descriptor we hold; the kernel checks
        // that the map allows it and that `bytes` lies within it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ,
                libc::MAP_SHARED,
                map.as_raw_fd(),
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let base =
            NonNull::new(ptr.cast::<T>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { base, slots, bytes })
    }

    /// Elements mapped.
    pub(crate) fn slots(&self) -> usize {
        self.slots
    }

    /// Element `i`, `None` past the mapping. What a BPF program writes meanwhile may be seen
    /// or not, but an aligned 8-byte field is never seen half-written.
    pub(crate) fn get(&self, i: usize) -> Option<T> {
        // SAFETY: `i` is below the number of slots mapped, the mapping lives as long as the
        // borrow of `self`, and every bit pattern is a valid `T` (`Pod`). Volatile: the kernel
        // writes this memory, which the compiler cannot see.
        (i < self.slots).then(|| unsafe { std::ptr::read_volatile(self.base.as_ptr().add(i)) })
    }
}

impl<T> Drop for Mapping<T> {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe {
            libc::munmap(self.base.as_ptr().cast(), self.bytes);
        }
    }
}

/// All of the array `name` of `ebpf`, mapped.
pub(crate) fn map_array<T: aya::Pod>(ebpf: &Attached, name: &str) -> io::Result<Mapping<T>> {
    let (fd, slots) = array(ebpf, name)?;
    Mapping::new(fd, slots)
}

/// The descriptor of the array `name` of `ebpf` and its number of elements.
pub(crate) fn array<'a>(ebpf: &'a Attached, name: &str) -> io::Result<(BorrowedFd<'a>, usize)> {
    let Some(Map::Array(data)) = ebpf.map(name) else {
        return Err(io::Error::other(format!("no array {name}")));
    };
    let info = data.info().map_err(|e| io::Error::other(e.to_string()))?;
    let slots = usize::try_from(info.max_entries()).unwrap_or(0);
    Ok((data.fd().as_fd(), slots))
}

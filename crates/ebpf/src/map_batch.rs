//! `BPF_MAP_LOOKUP_BATCH` and `BPF_MAP_DELETE_BATCH` on a hash map, through the raw bpf(2)
//! syscall: aya 0.14 has no batch API, and reading a map of N entries with get-next-key and
//! lookup costs 2N syscalls, where a batch of B entries costs one per B (N/B + 1 in all);
//! deleting K entries costs one call instead of K.

use std::io;
use std::marker::PhantomData;
use std::mem::size_of;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use aya::maps::{MapData, MapError, MapType};
use aya::Pod;

/// `BPF_MAP_LOOKUP_BATCH` and `BPF_MAP_DELETE_BATCH` in `enum bpf_cmd` (uapi/linux/bpf.h),
/// kernel 5.6 and later.
const BPF_MAP_LOOKUP_BATCH: libc::c_long = 24;
const BPF_MAP_DELETE_BATCH: libc::c_long = 27;
/// The kernel's internal "operation not supported" (not in libc): what bpf(2) answers for a
/// map type without batch operations.
const ENOTSUPP: i32 = 524;

/// The `batch` member of `union bpf_attr`. The kernel reads only the size passed and treats
/// the rest of the union as zero, so this prefix is a complete request.
#[repr(C)]
#[derive(Default)]
struct BatchAttr {
    in_batch: u64,
    out_batch: u64,
    keys: u64,
    values: u64,
    count: u32,
    map_fd: u32,
    elem_flags: u64,
    flags: u64,
}

/// One batch command on `attr`; `true` on success, else the error is in `errno`. The kernel
/// writes the number of entries it handled back into `attr.count` either way.
///
/// # Safety
/// The buffers `attr` points to must hold `attr.count` keys (and values, for a lookup) of the
/// map's sizes, writable for a lookup, and stay borrowed for the call.
unsafe fn batch_call(cmd: libc::c_long, attr: &mut BatchAttr) -> bool {
    // SAFETY: `attr` is a valid `bpf_attr` prefix of the size passed; what it points to is the
    // caller's promise.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            std::ptr::from_mut(attr),
            size_of::<BatchAttr>() as u32,
        )
    };
    rc == 0
}

/// Where a batch read stands in a hash map: the bucket to start the next batch from. The
/// kernel reads and writes it as a `u32` for hash maps; it is given 8 bytes all the same.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Cursor(pub(crate) u64);

/// What one batch call returned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Chunk {
    /// Entries written to the front of the key and value buffers.
    pub count: usize,
    /// Where the next batch starts; `None` when the map has been read to its end.
    pub next: Option<Cursor>,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum BatchError {
    /// The kernel has no batch lookup (before 5.6), or not for this map type.
    #[error("the kernel refuses batch lookups: {0}")]
    Unsupported(io::Error),
    /// One bucket of the map holds more entries than the buffers: retry with larger ones.
    #[error("a batch buffer is smaller than one bucket of the map")]
    NoSpace,
    /// A key to delete has no entry (someone else deleted it first).
    #[error("no entry for a key to delete")]
    NotFound,
    #[error("batch operation: {0}")]
    Syscall(io::Error),
    #[error("reading the map's layout: {0}")]
    Info(#[from] MapError),
    #[error("the map is not a hash map of {key}-byte keys and {value}-byte values")]
    Layout { key: usize, value: usize },
}

/// A map whose layout [`BatchMap::new`] confirmed, by descriptor: while it stays open a
/// descriptor names the same map, so a caller that holds the map needs the check once, not
/// once a snapshot (a `BPF_OBJ_GET_INFO_BY_FD` call each).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Checked(RawFd);

/// A hash map whose key and value sizes the kernel confirmed to be those of `K` and `V`, so
/// that the kernel never writes past buffers of `K`s and `V`s.
pub(crate) struct BatchMap<'a, K, V> {
    fd: BorrowedFd<'a>,
    _types: PhantomData<(K, V)>,
}

impl<'a, K: Pod, V: Pod> BatchMap<'a, K, V> {
    /// Checks the layout with the kernel's own description of the map (one syscall).
    pub(crate) fn new(data: &'a MapData) -> Result<Self, BatchError> {
        let info = data.info()?;
        let layout = BatchError::Layout {
            key: size_of::<K>(),
            value: size_of::<V>(),
        };
        let hash = matches!(info.map_type(), Ok(MapType::Hash | MapType::LruHash));
        // Per-CPU maps would write one value per possible CPU; only these two types are taken.
        if !hash
            || usize::try_from(info.key_size()).ok() != Some(size_of::<K>())
            || usize::try_from(info.value_size()).ok() != Some(size_of::<V>())
        {
            return Err(layout);
        }
        Ok(BatchMap {
            fd: data.fd().as_fd(),
            _types: PhantomData,
        })
    }

    /// What lets [`BatchMap::again`] skip the check for this map.
    pub(crate) fn checked(&self) -> Checked {
        Checked(self.fd.as_raw_fd())
    }

    /// `data` without asking the kernel again, when `checked` came from a `BatchMap` of the
    /// same descriptor; `None` otherwise. The caller holds `data` open since that check (the
    /// process map lives as long as the source), so the number is not another map's.
    pub(crate) fn again(data: &'a MapData, checked: Checked) -> Option<Self> {
        let fd = data.fd().as_fd();
        (fd.as_raw_fd() == checked.0).then_some(BatchMap {
            fd,
            _types: PhantomData,
        })
    }

    /// Reads up to `min(keys.len(), values.len())` entries, whole buckets only, starting at
    /// `from` (`None`: the start of the map).
    pub(crate) fn lookup(
        &self,
        from: Option<Cursor>,
        keys: &mut [K],
        values: &mut [V],
    ) -> Result<Chunk, BatchError> {
        let room = keys.len().min(values.len());
        let count = u32::try_from(room).unwrap_or(u32::MAX);
        let in_batch = from.unwrap_or_default();
        let mut out_batch = Cursor::default();
        let mut attr = BatchAttr {
            in_batch: match &from {
                Some(_) => std::ptr::from_ref(&in_batch.0) as u64,
                None => 0,
            },
            out_batch: std::ptr::from_mut(&mut out_batch.0) as u64,
            keys: keys.as_mut_ptr() as u64,
            values: values.as_mut_ptr() as u64,
            count,
            map_fd: u32::try_from(self.fd.as_raw_fd()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        // SAFETY: the kernel writes at most `count` keys and values of the map's sizes, which
        // `new` checked are those of `K` and `V`, so at most `count` elements of each buffer,
        // both at least `count` long and borrowed mutably for the call; the cursors are 8 bytes
        // each, of which a hash map uses 4. Every bit pattern is a valid `Pod`.
        let ok = unsafe { batch_call(BPF_MAP_LOOKUP_BATCH, &mut attr) };
        let got = usize::try_from(attr.count).unwrap_or(0).min(room);
        if ok {
            return Ok(Chunk {
                count: got,
                next: Some(out_batch),
            });
        }
        let err = io::Error::last_os_error();
        match err.raw_os_error() {
            // The end of the map; the last entries come with it.
            Some(libc::ENOENT) => Ok(Chunk {
                count: got,
                next: None,
            }),
            Some(libc::ENOSPC) => Err(BatchError::NoSpace),
            Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) => Err(BatchError::Unsupported(err)),
            _ => Err(BatchError::Syscall(err)),
        }
    }

    /// Deletes the entries of `keys` in order, up to the first that cannot be deleted: returns
    /// how many were, and why the next one was not (`NotFound`: it had no entry).
    pub(crate) fn delete(&self, keys: &[K]) -> (usize, Option<BatchError>) {
        let count = u32::try_from(keys.len()).unwrap_or(u32::MAX);
        let mut attr = BatchAttr {
            keys: keys.as_ptr() as u64,
            count,
            map_fd: u32::try_from(self.fd.as_raw_fd()).unwrap_or(u32::MAX),
            ..Default::default()
        };
        // SAFETY: the kernel reads `count` keys of the map's key size, which `new` checked is
        // that of `K`, from `keys`, which holds at least `count`.
        let ok = unsafe { batch_call(BPF_MAP_DELETE_BATCH, &mut attr) };
        let done = usize::try_from(attr.count).unwrap_or(0).min(keys.len());
        if ok {
            return (done, None);
        }
        let err = io::Error::last_os_error();
        let why = match err.raw_os_error() {
            Some(libc::ENOENT) => BatchError::NotFound,
            Some(libc::EINVAL | libc::EOPNOTSUPP | ENOTSUPP) if done == 0 => {
                BatchError::Unsupported(err)
            }
            _ => BatchError::Syscall(err),
        };
        (done, Some(why))
    }
}

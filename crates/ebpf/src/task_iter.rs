//! The task iterator of iterator accounting: its link, made once, and one pass per snapshot;
//! and the attachment of its final-switch program. Raw `bpf(2)` calls: aya 0.14 keeps an
//! iterator's link to itself (an `IterLink` can only be turned into one pass, once), and a
//! loader child's link and programs arrive as bare descriptors.

use std::io::{self, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `BPF_RAW_TRACEPOINT_OPEN`, `BPF_LINK_CREATE` and `BPF_ITER_CREATE` in `enum bpf_cmd`,
/// `BPF_TRACE_ITER` in `enum bpf_attach_type` (uapi/linux/bpf.h).
const BPF_RAW_TRACEPOINT_OPEN: libc::c_long = 17;
const BPF_LINK_CREATE: libc::c_long = 28;
const BPF_ITER_CREATE: libc::c_long = 33;
const BPF_TRACE_ITER: u32 = 28;

/// `union bpf_attr` as used by `BPF_LINK_CREATE` for an iterator.
#[repr(C)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_fd: u32,
    attach_type: u32,
    flags: u32,
    iter_info: u64,
    iter_info_len: u32,
    _pad: u32,
}

/// `union bpf_attr` as used by `BPF_RAW_TRACEPOINT_OPEN` (kernels from 6.10 have a cookie
/// after the padding; older ones refuse a longer attribute unless its tail is zero).
#[repr(C)]
struct RawTracepointAttr {
    name: u64,
    prog_fd: u32,
    _pad: u32,
}

/// `union bpf_attr` as used by `BPF_ITER_CREATE`.
#[repr(C)]
struct IterCreateAttr {
    link_fd: u32,
    flags: u32,
}

fn fd_number(fd: BorrowedFd<'_>) -> io::Result<u32> {
    u32::try_from(fd.as_raw_fd()).map_err(|_| io::Error::other("negative fd"))
}

/// A `bpf(2)` call that returns a new descriptor.
///
/// # Safety
/// `attr` must be the attribute layout the kernel expects for `cmd`, and whatever it points
/// at must outlive the call.
unsafe fn fd_call<A>(cmd: libc::c_long, attr: &A) -> io::Result<OwnedFd> {
    // SAFETY: as the caller promises.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_bpf,
            cmd,
            attr as *const A,
            std::mem::size_of::<A>() as libc::c_uint,
        )
    };
    let fd = i32::try_from(rc).map_err(|_| io::Error::other("bpf(2) returned no descriptor"))?;
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this descriptor to us, and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Links a loaded `iter/task` program to visit every thread of the host; the link lives as
/// long as the returned descriptor (and any copy of it, such as one handed to the agent).
pub(crate) fn link(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let attr = LinkCreateAttr {
        prog_fd: fd_number(prog)?,
        target_fd: 0,
        attach_type: BPF_TRACE_ITER,
        flags: 0,
        iter_info: 0,
        iter_info_len: 0,
        _pad: 0,
    };
    // SAFETY: the layout is BPF_LINK_CREATE's, and it points at nothing.
    unsafe { fd_call(BPF_LINK_CREATE, &attr) }
}

/// Attaches a loaded `tp_btf` program to the tracepoint it was loaded for; it stays attached as
/// long as the returned descriptor.
pub(crate) fn attach_raw_tracepoint(prog: BorrowedFd<'_>) -> io::Result<OwnedFd> {
    let attr = RawTracepointAttr {
        // No name: a BTF-typed program's tracepoint is fixed at load.
        name: 0,
        prog_fd: fd_number(prog)?,
        _pad: 0,
    };
    // SAFETY: the layout is BPF_RAW_TRACEPOINT_OPEN's, and it points at nothing.
    unsafe { fd_call(BPF_RAW_TRACEPOINT_OPEN, &attr) }
}

/// Runs one pass of the iterator: every task once, then the end call. The program writes
/// nothing to the file, so one read returns 0 once the pass is over; a read that returns bytes
/// anyway (a program that prints) is read to the end.
pub(crate) fn run_pass(link: BorrowedFd<'_>) -> io::Result<()> {
    let attr = IterCreateAttr {
        link_fd: fd_number(link)?,
        flags: 0,
    };
    // SAFETY: the layout is BPF_ITER_CREATE's, and it points at nothing.
    let fd = unsafe { fd_call(BPF_ITER_CREATE, &attr)? };
    let mut file = std::fs::File::from(fd);
    let mut buf = [0u8; 256];
    loop {
        match file.read(&mut buf) {
            Ok(0) => return Ok(()),
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

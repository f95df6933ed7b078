//! Messages with file descriptors attached (`SCM_RIGHTS`) over a `SOCK_SEQPACKET` unix socket
//! pair: the loader child hands its maps and links to the agent this way. Sequenced packets
//! keep each message whole and apart from the next, so no framing is needed.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

/// Descriptors per message: the kernel takes at most 253 (SCM_MAX_FD).
pub(crate) const MAX_FDS: usize = 250;

/// A connected pair, close-on-exec on both ends.
pub(crate) fn socketpair() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: `fds` has room for the two descriptors written.
    let rc = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: both were just created and are owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Room for `n` descriptors of control data, aligned as `cmsghdr` wants.
fn control_buffer(n: usize) -> Vec<u64> {
    // SAFETY: CMSG_SPACE is arithmetic.
    let bytes = unsafe { libc::CMSG_SPACE((n * std::mem::size_of::<RawFd>()) as u32) } as usize;
    vec![0u64; bytes.div_ceil(8)]
}

/// Sends one message with `fds` (at most [`MAX_FDS`]) attached. A peer that is gone gives
/// `EPIPE`, not a SIGPIPE.
pub(crate) fn send(sock: BorrowedFd<'_>, data: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors for one message",
        ));
    }
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut control = control_buffer(fds.len());
    // SAFETY: a zeroed msghdr is valid; every pointer set below outlives the sendmsg call, and
    // the control buffer is sized by CMSG_SPACE for exactly the descriptors copied into it.
    let rc = unsafe {
        let mut msg: libc::msghdr = std::mem::zeroed();
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        if !fds.is_empty() {
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = (control.len() * 8) as _;
            let cmsg = libc::CMSG_FIRSTHDR(&msg);
            (*cmsg).cmsg_level = libc::SOL_SOCKET;
            (*cmsg).cmsg_type = libc::SCM_RIGHTS;
            (*cmsg).cmsg_len =
                libc::CMSG_LEN((fds.len() * std::mem::size_of::<RawFd>()) as u32) as _;
            let out = libc::CMSG_DATA(cmsg).cast::<RawFd>();
            for (i, fd) in fds.iter().enumerate() {
                out.add(i).write_unaligned(fd.as_raw_fd());
            }
        }
        libc::sendmsg(sock.as_raw_fd(), &msg, libc::MSG_NOSIGNAL)
    };
    if rc < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// One received message: its bytes (empty when the peer closed its end) and descriptors.
pub(crate) struct Received {
    pub data: Vec<u8>,
    pub fds: Vec<OwnedFd>,
}

/// Receives one message of at most `max_len` bytes, waiting until `deadline`. A message that
/// did not fit, or whose descriptors did not, is an error (the kernel has closed the
/// descriptors it could not pass).
pub(crate) fn recv(
    sock: BorrowedFd<'_>,
    max_len: usize,
    deadline: Instant,
) -> io::Result<Received> {
    let mut data = vec![0u8; max_len];
    let mut control = control_buffer(MAX_FDS);
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        set_recv_timeout(sock, left)?;
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // SAFETY: a zeroed msghdr is valid; the buffers it points to outlive the call.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_iov = &mut iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = (control.len() * 8) as _;
        // SAFETY: as above; MSG_CMSG_CLOEXEC keeps received descriptors from leaking into
        // processes the agent starts later.
        let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) };
        if n < 0 {
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) => continue, // the deadline check above decides
                _ => return Err(e),
            }
        }
        // SAFETY: the kernel filled `msg`; walking its control messages with the CMSG macros
        // stays inside `msg_controllen`, and each SCM_RIGHTS entry holds new descriptors that
        // this process now owns (taken once each).
        let fds = unsafe { take_fds(&msg) };
        if msg.msg_flags & (libc::MSG_TRUNC | libc::MSG_CTRUNC) != 0 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "message or its descriptors truncated",
            ));
        }
        data.truncate(n as usize);
        return Ok(Received { data, fds });
    }
}

/// # Safety
/// `msg` must have been filled by a successful `recvmsg`.
unsafe fn take_fds(msg: &libc::msghdr) -> Vec<OwnedFd> {
    // SAFETY: see the caller.
    unsafe {
        let mut fds = Vec::new();
        let mut cmsg = libc::CMSG_FIRSTHDR(msg);
        while !cmsg.is_null() {
            if (*cmsg).cmsg_level == libc::SOL_SOCKET && (*cmsg).cmsg_type == libc::SCM_RIGHTS {
                let header = libc::CMSG_LEN(0) as usize;
                let count = ((*cmsg).cmsg_len as usize).saturating_sub(header)
                    / std::mem::size_of::<RawFd>();
                let data = libc::CMSG_DATA(cmsg).cast::<RawFd>();
                for i in 0..count {
                    fds.push(OwnedFd::from_raw_fd(data.add(i).read_unaligned()));
                }
            }
            cmsg = libc::CMSG_NXTHDR(msg, cmsg);
        }
        fds
    }
}

fn set_recv_timeout(sock: BorrowedFd<'_>, timeout: Duration) -> io::Result<()> {
    // Zero would mean "no timeout".
    let timeout = timeout.max(Duration::from_millis(1));
    let tv = libc::timeval {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_usec: timeout.subsec_micros() as libc::suseconds_t,
    };
    // SAFETY: `tv` is a valid timeval of the size given.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVTIMEO,
            (&tv as *const libc::timeval).cast(),
            std::mem::size_of::<libc::timeval>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn descriptors_cross_in_order_and_stay_usable() {
        let (a, b) = socketpair().unwrap();
        let files: Vec<std::fs::File> = (0..3).map(|_| tempfile::tempfile().unwrap()).collect();
        for (i, f) in files.iter().enumerate() {
            use std::io::Write;
            (&*f).write_all(format!("file {i}").as_bytes()).unwrap();
        }
        let borrowed: Vec<BorrowedFd<'_>> = files.iter().map(|f| f.as_fd()).collect();
        send(a.as_fd(), b"three", &borrowed).unwrap();
        send(a.as_fd(), b"none", &[]).unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        let got = recv(b.as_fd(), 64, deadline).unwrap();
        assert_eq!(got.data, b"three");
        assert_eq!(got.fds.len(), 3);
        for (i, fd) in got.fds.into_iter().enumerate() {
            use std::io::{Read, Seek};
            let mut f = std::fs::File::from(fd);
            f.rewind().unwrap();
            let mut s = String::new();
            f.read_to_string(&mut s).unwrap();
            assert_eq!(s, format!("file {i}"));
        }
        let got = recv(b.as_fd(), 64, deadline).unwrap();
        assert_eq!((got.data.as_slice(), got.fds.len()), (&b"none"[..], 0));
        drop(a);
        let eof = recv(b.as_fd(), 64, deadline).unwrap();
        assert!(eof.data.is_empty());
    }

    #[test]
    fn silence_ends_at_the_deadline_and_oversize_is_refused() {
        let (a, b) = socketpair().unwrap();
        let start = Instant::now();
        let e = recv(b.as_fd(), 64, start + Duration::from_millis(200))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(start.elapsed() >= Duration::from_millis(200));
        send(a.as_fd(), &[7u8; 100], &[]).unwrap();
        let e = recv(b.as_fd(), 64, Instant::now() + Duration::from_secs(10))
            .err()
            .unwrap();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        let too_many: Vec<BorrowedFd<'_>> = (0..=MAX_FDS).map(|_| a.as_fd()).collect();
        assert!(send(a.as_fd(), b"x", &too_many).is_err());
    }
}

//! Reading files of external origin with a size limit suited to what they hold, and without
//! blocking. A config file that is `/dev/zero`, an endless `cmdline` or an input stream with
//! no end must end in a clear error, not in gigabytes of memory; a FIFO planted where a
//! regular file is expected must not hold a thread forever. Every reader of such files in the
//! workspace goes through here (procfs reads through [`open_nonblocking`] and their own
//! reused buffer, with the same limits).

use std::fs::{File, OpenOptions};
use std::io::{self, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Limits per kind of file, in bytes.
pub mod limits {
    /// The agent's YAML config, a web config, a BMC list: hand-written files of kilobytes.
    pub const CONFIG: u64 = 4 << 20;
    /// A single procfs or sysfs file the agent parses (`stat`, `cgroup`, `status`).
    pub const PROC_FILE: usize = 1 << 20;
    /// The part of `/proc/<pid>/cmdline` kept: enough for any label, far below what a process
    /// can make the kernel print.
    pub const CMDLINE: usize = 64 << 10;
    /// A model file (weights as JSON, an archive).
    pub const MODEL: u64 = 256 << 20;
    /// One line of a CSV of feature rows given to `kepler-model-server predict` (a row is
    /// tens of numbers); the stream as a whole is parsed as it comes and may be long.
    pub const CSV_LINE: u64 = 1 << 20;
}

/// Why a bounded read failed.
#[derive(Debug, thiserror::Error)]
pub enum BoundedReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} is larger than {limit} bytes; not a file of this kind")]
    TooLarge { path: String, limit: u64 },
    #[error("{path} is not UTF-8 text")]
    NotText { path: String },
}

/// Opens `path` for reading with `O_NONBLOCK`, so that a FIFO or a device answers at once
/// (with no data) instead of blocking; regular and procfs files read as usual.
pub fn open_nonblocking(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
}

/// The whole file, or an error when it holds more than `limit` bytes.
pub fn read_limited(path: &Path, limit: u64) -> Result<Vec<u8>, BoundedReadError> {
    let io = |source| BoundedReadError::Io {
        path: path.display().to_string(),
        source,
    };
    let file = open_nonblocking(path).map_err(io)?;
    let mut out = Vec::new();
    LimitedReader::new(file, limit)
        .read_to_end(&mut out)
        .map_err(|e| match e.kind() {
            io::ErrorKind::FileTooLarge => BoundedReadError::TooLarge {
                path: path.display().to_string(),
                limit,
            },
            _ => io(e),
        })?;
    Ok(out)
}

/// [`read_limited`] as UTF-8 text.
pub fn read_to_string_limited(path: &Path, limit: u64) -> Result<String, BoundedReadError> {
    String::from_utf8(read_limited(path, limit)?).map_err(|_| BoundedReadError::NotText {
        path: path.display().to_string(),
    })
}

/// Reads a file held open again from its start into `buf`: `Some(length)` when the whole of
/// it fit, `None` when `buf` filled first. A procfs file (`/proc/<pid>/stat`) read this way
/// shows the process as it is now, for one `pread` instead of an open, reads and a close. A
/// short read that ends a line is taken as the whole file: procfs makes the text in one go
/// and hands all of it to a large enough read, so the read that would return 0 is skipped.
pub fn read_again_from_start(file: &File, buf: &mut [u8]) -> io::Result<Option<usize>> {
    let mut len = 0;
    loop {
        let Some(rest) = buf.get_mut(len..).filter(|r| !r.is_empty()) else {
            return Ok(None);
        };
        let room = rest.len();
        match file.read_at(rest, len as u64) {
            Ok(0) => return Ok(Some(len)),
            Ok(n) => {
                len += n;
                if n < room && buf.get(len - 1) == Some(&b'\n') {
                    return Ok(Some(len));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// Whether `file` lives on sysfs. A sysfs attribute makes its value afresh at each read from
/// its start and cannot be replaced by another file under its name, so a reader may hold it
/// open; a file elsewhere (a fixture tree, a simulator's output) may be rewritten by rename.
pub fn is_sysfs(file: &File) -> bool {
    /// The kernel's `SYSFS_MAGIC` ("beer"), which the libc crate does not define.
    const SYSFS_MAGIC: i64 = 0x6265_6572;
    // SAFETY: an all-zero statfs is a valid value for fstatfs to overwrite.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: the descriptor is open for `file`'s lifetime and `st` is a statfs.
    if unsafe { libc::fstatfs(file.as_raw_fd(), &mut st) } != 0 {
        return false;
    }
    // `f_type` is an i64 here but narrower on some targets.
    #[allow(clippy::useless_conversion)]
    let fs = i64::from(st.f_type);
    fs == SYSFS_MAGIC
}

/// This process's soft limit on open descriptors, which bounds how many files a reader may
/// keep open; "unlimited" is `u64::MAX`. Read when needed, not once: the HTTP server raises
/// it after the other components start.
pub fn open_file_limit() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit, which `limit` is.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if limit.rlim_cur == libc::RLIM_INFINITY {
        u64::MAX
    } else {
        limit.rlim_cur
    })
}

/// A reader that fails with [`io::ErrorKind::FileTooLarge`] once more than `limit` bytes came
/// through, for streams parsed as they are read.
pub struct LimitedReader<R> {
    inner: R,
    left: u64,
    limit: u64,
}

impl<R: Read> LimitedReader<R> {
    pub fn new(inner: R, limit: u64) -> Self {
        LimitedReader {
            inner,
            left: limit,
            limit,
        }
    }
}

impl<R: Read> Read for LimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // One byte beyond the limit tells "exactly at the limit" from "more".
        let want = usize::try_from(self.left.saturating_add(1))
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = self.inner.read(buf.get_mut(..want).unwrap_or_default())?;
        if n as u64 > self.left {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("input larger than {} bytes", self.limit),
            ));
        }
        self.left -= n as u64;
        Ok(n)
    }
}

/// A reader that fails with [`io::ErrorKind::FileTooLarge`] when a line grows beyond `limit`
/// bytes, for line-based streams of any length (CSV) whose parser buffers one line.
pub struct LineLimitedReader<R> {
    inner: R,
    line: u64,
    limit: u64,
}

impl<R: Read> LineLimitedReader<R> {
    pub fn new(inner: R, limit: u64) -> Self {
        LineLimitedReader {
            inner,
            line: 0,
            limit,
        }
    }
}

impl<R: Read> Read for LineLimitedReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        let data = buf.get(..n).unwrap_or_default();
        self.line = match data.iter().rposition(|&b| b == b'\n') {
            Some(last) => (n - last - 1) as u64,
            None => self.line.saturating_add(n as u64),
        };
        if self.line > self.limit {
            return Err(io::Error::new(
                io::ErrorKind::FileTooLarge,
                format!("a line longer than {} bytes", self.limit),
            ));
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_longer_than_the_buffer_is_not_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("stat");
        std::fs::write(&path, vec![b'7'; 64]).unwrap();
        let file = File::open(&path).unwrap();
        let mut small = [0u8; 16];
        assert_eq!(read_again_from_start(&file, &mut small).unwrap(), None);
        let mut big = [0u8; 128];
        assert_eq!(read_again_from_start(&file, &mut big).unwrap(), Some(64));
    }

    #[test]
    fn endless_files_end_in_an_error() {
        let err = read_limited(Path::new("/dev/zero"), 1 << 16).unwrap_err();
        assert!(matches!(err, BoundedReadError::TooLarge { .. }), "{err}");
        assert!(err.to_string().contains("/dev/zero"), "{err}");
    }

    #[test]
    fn files_up_to_the_limit_are_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"12345").unwrap();
        assert_eq!(read_limited(&p, 5).unwrap(), b"12345");
        assert!(read_limited(&p, 4).is_err());
        assert_eq!(read_to_string_limited(&p, 5).unwrap(), "12345");
        std::fs::write(&p, [0xff, 0xfe]).unwrap();
        assert!(matches!(
            read_to_string_limited(&p, 5),
            Err(BoundedReadError::NotText { .. })
        ));
    }

    #[test]
    fn long_streams_pass_but_endless_lines_fail() {
        let ok = "a,b\n1,2\n".repeat(10_000);
        let mut out = Vec::new();
        LineLimitedReader::new(ok.as_bytes(), 8)
            .read_to_end(&mut out)
            .unwrap();
        assert_eq!(out.len(), ok.len());
        let zero = File::open("/dev/zero").unwrap();
        let err = LineLimitedReader::new(zero, 1 << 16)
            .read_to_end(&mut Vec::new())
            .unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::FileTooLarge);
    }

    #[test]
    fn a_fifo_does_not_block() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fifo");
        let c = std::ffi::CString::new(p.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        // No writer: the read ends at once, empty, instead of waiting for one.
        assert_eq!(read_limited(&p, 10).unwrap(), b"");
    }
}

//! Reading small procfs files into a reused buffer, with a fixed number of syscalls.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::FileExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;

use kepler_core::ReadError;

use crate::bounded::{limits, open_nonblocking, read_again_from_start};

/// A reusable read buffer. Its `Vec` stays at full length so reads need no re-zeroing;
/// `len` says how much of it the last read filled.
#[derive(Debug)]
pub(crate) struct Buffer {
    data: Vec<u8>,
    len: usize,
}

impl Buffer {
    pub fn new() -> Self {
        Buffer {
            data: vec![0; 4096],
            len: 0,
        }
    }

    pub fn bytes(&self) -> &[u8] {
        self.data.get(..self.len).unwrap_or(&[])
    }

    /// Reads the whole file. `std::fs::read` would also `statx` and `lseek` to size the buffer,
    /// which procfs answers with 0 anyway: two wasted syscalls per file per tick; and a short
    /// read that ends a line (or a NUL-separated command line) ends the read. A file
    /// larger than [`limits::PROC_FILE`] is an error.
    pub fn read_all(&mut self, path: &Path) -> io::Result<&[u8]> {
        self.fill(path, limits::PROC_FILE, false)
    }

    /// Reads at most `cap` bytes of the file, the rest left unread (a `cmdline` is kept only
    /// up to what a label needs).
    pub fn read_prefix(&mut self, path: &Path, cap: usize) -> io::Result<&[u8]> {
        self.fill(path, cap, true)
    }

    /// Reads a file held open from its start until the buffer holds a complete first line (or
    /// the file ends): `/proc/stat` is tens of kilobytes on large hosts and only its first line
    /// is needed. One `pread` where the first line fits the buffer.
    pub fn read_first_line_at(&mut self, file: &File) -> io::Result<&[u8]> {
        self.len = 0;
        loop {
            if self.len >= limits::PROC_FILE {
                return Err(too_large(limits::PROC_FILE));
            }
            if self.len == self.data.len() {
                let grown = self.data.len() * 2;
                self.data.resize(grown, 0);
            }
            let spare = self.data.get_mut(self.len..).unwrap_or_default();
            match file.read_at(spare, self.len as u64) {
                Ok(0) => break,
                Ok(n) => {
                    let start = self.len;
                    self.len += n;
                    if self
                        .data
                        .get(start..self.len)
                        .is_some_and(|b| b.contains(&b'\n'))
                    {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(self.bytes())
    }

    /// Reads the whole of a file held open, from its start (see
    /// [`read_again_from_start`]), the buffer growing as needed. A file larger than
    /// [`limits::PROC_FILE`] is an error.
    pub fn read_all_at(&mut self, file: &File) -> io::Result<&[u8]> {
        self.len = 0;
        loop {
            if let Some(len) = read_again_from_start(file, &mut self.data)? {
                self.len = len;
                return Ok(self.bytes());
            }
            if self.data.len() >= limits::PROC_FILE {
                return Err(too_large(limits::PROC_FILE));
            }
            let grown = self.data.len() * 2;
            self.data.resize(grown, 0);
        }
    }

    fn fill(&mut self, path: &Path, cap: usize, truncate: bool) -> io::Result<&[u8]> {
        self.len = 0;
        // Non-blocking: a FIFO in place of a procfs file reads as empty rather than hanging.
        let mut file = open_nonblocking(path)?;
        loop {
            if self.len >= cap {
                if truncate {
                    self.len = cap;
                    break;
                }
                return Err(too_large(cap));
            }
            if self.len == self.data.len() {
                let grown = self.data.len() * 2;
                self.data.resize(grown, 0);
            }
            let spare = self.data.get_mut(self.len..).unwrap_or_default();
            let room = spare.len();
            match file.read(spare) {
                Ok(0) => break,
                Ok(n) => {
                    self.len += n;
                    // As in `read_again_from_start`: procfs hands a whole record to a read
                    // with room for it, so a short read ending one is the file, and the read
                    // that would return 0 is skipped (one syscall of four per file). A
                    // command line's record ends in a NUL. A regular file (a fixture) reads
                    // short only at its end.
                    if n < room && matches!(self.data.get(self.len - 1), Some(b'\n' | 0)) {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // A FIFO with a writer but no data.
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) => return Err(e),
            }
        }
        Ok(self.bytes())
    }
}

fn too_large(cap: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::FileTooLarge,
        format!("larger than {cap} bytes"),
    )
}

/// The process went away between listing `/proc` and reading its files.
pub(crate) fn is_vanished(error: &io::Error) -> bool {
    error.kind() == io::ErrorKind::NotFound || error.raw_os_error() == Some(libc::ESRCH)
}

pub(crate) fn io_error(path: &Path, source: io::Error) -> ReadError {
    ReadError::Io {
        path: path.display().to_string(),
        source,
    }
}

pub(crate) fn parse_error(path: &Path, message: impl Into<String>) -> ReadError {
    ReadError::Parse {
        path: path.display().to_string(),
        message: message.into(),
    }
}

/// USER_HZ, the unit of every tick count in procfs. Asked of the C library rather than assumed
/// to be 100, which is only the common value.
pub(crate) fn user_hz() -> Option<u64> {
    // SAFETY: sysconf only reads a constant of the C library; no pointers are involved.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    u64::try_from(hz).ok().filter(|&hz| hz > 0)
}

/// Whether `file` is on a procfs mount, whose files the kernel writes afresh on each read and
/// never replaces, so that one may be held open and read again.
pub(crate) fn is_procfs(file: &File) -> bool {
    const PROC_SUPER_MAGIC: libc::c_long = 0x9fa0;
    let mut fs = std::mem::MaybeUninit::<libc::statfs>::uninit();
    // SAFETY: the descriptor is open for the call's length (borrowed from `file`), and fstatfs
    // writes at most one `statfs` into the buffer, which is only read once it reports success.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), fs.as_mut_ptr()) };
    if rc != 0 {
        return false;
    }
    // SAFETY: fstatfs returned 0, so it filled the whole struct.
    let fs = unsafe { fs.assume_init() };
    libc::c_long::from(fs.f_type) == PROC_SUPER_MAGIC
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A read that fills the buffer to a line's end is not the file's end: only a short one is.
    #[test]
    fn files_of_whole_lines_are_read_to_their_end() {
        let dir = tempfile::tempdir().unwrap();
        let mut buf = Buffer::new();
        for len in [1, 4095, 4096, 4097, 8192, 20_000] {
            let text: Vec<u8> = (0..len)
                .map(|i| {
                    if i % 64 == 63 || i + 1 == len {
                        b'\n'
                    } else {
                        b'x'
                    }
                })
                .collect();
            let path = dir.path().join(format!("f{len}"));
            std::fs::write(&path, &text).unwrap();
            assert_eq!(buf.read_all(&path).unwrap(), &text[..], "{len} bytes");
            let args: Vec<u8> = text
                .iter()
                .map(|&b| if b == b'\n' { 0 } else { b })
                .collect();
            std::fs::write(&path, &args).unwrap();
            assert_eq!(buf.read_prefix(&path, 1 << 20).unwrap(), &args[..], "{len}");
        }
    }

    /// procfs files end at the short read, whole: this process's `stat` and `cmdline`.
    #[test]
    fn procfs_files_read_whole() {
        let mut buf = Buffer::new();
        let stat = buf.read_all(Path::new("/proc/self/stat")).unwrap().to_vec();
        assert!(
            stat.ends_with(b"\n") && stat.starts_with(std::process::id().to_string().as_bytes())
        );
        let cmdline = buf
            .read_prefix(Path::new("/proc/self/cmdline"), 1 << 20)
            .unwrap()
            .to_vec();
        let args: Vec<u8> = std::env::args_os()
            .flat_map(|a| {
                let mut b = a.into_encoded_bytes();
                b.push(0);
                b
            })
            .collect();
        assert_eq!(cmdline, args);
    }
}

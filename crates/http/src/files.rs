//! Size-limited reads of the files a web config names (the config itself, certificates, keys,
//! client CAs): a path that points at `/dev/zero` or a huge file must fail start-up with a
//! message, not grow the process until the kernel kills it.

use std::io::{self, Read};
use std::os::unix::fs::FileTypeExt;
use std::path::Path;

/// A web config is a few lines; this is far above any real one.
pub(crate) const WEB_CONFIG_LIMIT: u64 = 1024 * 1024;
/// A PEM file: a chain or a CA bundle (the whole public web PKI bundle is about 250 KiB).
pub(crate) const PEM_LIMIT: u64 = 4 * 1024 * 1024;

/// Reads `path` whole, failing if it holds more than `limit` bytes. FIFOs and sockets are
/// refused before opening, since opening a FIFO blocks until someone writes to it.
pub(crate) fn read_limited(path: &Path, limit: u64) -> io::Result<Vec<u8>> {
    let kind = std::fs::metadata(path)?.file_type();
    if kind.is_fifo() || kind.is_socket() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file (a FIFO or socket)",
        ));
    }
    let mut data = Vec::new();
    std::fs::File::open(path)?
        .take(limit + 1)
        .read_to_end(&mut data)?;
    if data.len() as u64 > limit {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("larger than the {limit} bytes allowed"),
        ));
    }
    Ok(data)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endless_and_blocking_files_are_refused() {
        let err = read_limited(Path::new("/dev/zero"), 4096).unwrap_err();
        assert!(err.to_string().contains("4096"), "{err}");
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("fifo");
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads a valid NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
        let err = read_limited(&fifo, 4096).unwrap_err();
        assert!(err.to_string().contains("FIFO"), "{err}");
        let file = dir.path().join("f");
        std::fs::write(&file, b"abc").unwrap();
        assert_eq!(read_limited(&file, 3).unwrap(), b"abc");
        assert!(read_limited(&file, 2).is_err());
    }
}

//! Small helpers shared by the sysfs meters: reading single-value attribute files without
//! allocating on every tick, and ordering kernel object names the way people number them.

use std::cmp::Ordering;
use std::fs::File;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use kepler_core::ReadError;

/// Failure to read one sysfs attribute.
#[derive(Debug, thiserror::Error)]
pub(crate) enum AttrError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("parsing {path}: {value:?} is not {expected}")]
    Parse {
        path: String,
        value: String,
        expected: &'static str,
    },
}

impl AttrError {
    pub(crate) fn io_kind(&self) -> Option<io::ErrorKind> {
        match self {
            AttrError::Io { source, .. } => Some(source.kind()),
            AttrError::Parse { .. } => None,
        }
    }
}

impl From<AttrError> for ReadError {
    fn from(e: AttrError) -> Self {
        match e {
            AttrError::Io { path, source } => ReadError::Io { path, source },
            AttrError::Parse {
                path,
                value,
                expected,
            } => ReadError::Parse {
                path,
                message: format!("{value:?} is not {expected}"),
            },
        }
    }
}

/// Reads a whole attribute into `buf`, reusing its capacity, from the file opened afresh.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> Result<(), AttrError> {
    read_opened(path, buf).map(drop)
}

/// [`read_into`], returning the file it opened.
fn read_opened(path: &Path, buf: &mut String) -> Result<File, AttrError> {
    buf.clear();
    let io = |source| AttrError::Io {
        path: path.display().to_string(),
        source,
    };
    // Non-blocking and bounded: a FIFO or an endless file in place of an attribute must
    // neither hang the sampler nor fill memory.
    let mut file = kepler_sources::bounded::open_nonblocking(path).map_err(io)?;
    // An attribute is one line that the kernel hands over in one read: a short read ending in a
    // newline is all of it, without a second read to find the end.
    let mut first = [0u8; 64];
    let n = loop {
        match file.read(&mut first) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            read => break read.map_err(io)?,
        }
    };
    let head = first.get(..n).unwrap_or_default();
    let mut bytes = Vec::new();
    if n > 0 && (n == first.len() || head.last() != Some(&b'\n')) {
        // Longer, or handed over in pieces: the rest as it comes, the whole bounded.
        bytes.extend_from_slice(head);
        let rest = kepler_sources::bounded::limits::PROC_FILE.saturating_sub(n);
        (&mut file)
            .take(rest as u64)
            .read_to_end(&mut bytes)
            .map_err(io)?;
    }
    let text = if bytes.is_empty() { head } else { &bytes };
    let text = std::str::from_utf8(text).map_err(|_| {
        io(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    buf.push_str(text);
    Ok(file)
}

/// An attribute a meter reads at every tick. On sysfs the file is held open and read again
/// from its start, one `pread` instead of an open, a read and a close per zone and tick (the
/// kernel makes the value afresh at each read from offset 0, and nothing can take the file's
/// place under its name; when its driver goes away, reads of the held file fail and it is
/// opened again by path). Anywhere else (fixture trees, simulators) it is opened at every
/// read, as a file rewritten by rename would otherwise read stale.
#[derive(Debug)]
pub(crate) struct Attr {
    path: PathBuf,
    held: Option<File>,
    /// Found off sysfs at its first open: opened at every read, without asking again.
    off_sysfs: bool,
}

impl Attr {
    pub(crate) fn new(path: PathBuf) -> Self {
        Attr {
            path,
            held: None,
            off_sysfs: false,
        }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn read_u64(&mut self, buf: &mut String) -> Result<u64, AttrError> {
        self.read_into(buf)?;
        parse_trimmed(&self.path, buf, "an unsigned integer")
    }

    pub(crate) fn read_i64(&mut self, buf: &mut String) -> Result<i64, AttrError> {
        self.read_into(buf)?;
        parse_trimmed(&self.path, buf, "an integer")
    }

    fn read_into(&mut self, buf: &mut String) -> Result<(), AttrError> {
        if let Some(file) = &self.held {
            if read_held(file, buf) {
                return Ok(());
            }
            // Failed (the driver went away), longer than an attribute or not text: read by
            // path as at first, which says what is wrong if anything still is.
            self.held = None;
        }
        let file = read_opened(&self.path, buf)?;
        if !self.off_sysfs {
            if kepler_sources::bounded::is_sysfs(&file) {
                self.held = Some(file);
            } else {
                self.off_sysfs = true;
            }
        }
        Ok(())
    }
}

/// Reads a held attribute again from its start into `buf`; false when that did not give the
/// whole of it as text.
fn read_held(file: &File, buf: &mut String) -> bool {
    buf.clear();
    let mut bytes = [0u8; 64];
    let Ok(Some(n)) = kepler_sources::bounded::read_again_from_start(file, &mut bytes) else {
        return false;
    };
    match bytes.get(..n).map(std::str::from_utf8) {
        Some(Ok(text)) => {
            buf.push_str(text);
            true
        }
        _ => false,
    }
}

pub(crate) fn read_u64(path: &Path, buf: &mut String) -> Result<u64, AttrError> {
    read_into(path, buf)?;
    parse_trimmed(path, buf, "an unsigned integer")
}

pub(crate) fn read_i64(path: &Path, buf: &mut String) -> Result<i64, AttrError> {
    read_into(path, buf)?;
    parse_trimmed(path, buf, "an integer")
}

pub(crate) fn parse_trimmed<T: std::str::FromStr>(
    path: &Path,
    buf: &str,
    expected: &'static str,
) -> Result<T, AttrError> {
    let text = buf.trim();
    text.parse().map_err(|_| AttrError::Parse {
        path: path.display().to_string(),
        value: text.chars().take(64).collect(),
        expected,
    })
}

/// Which zones of a meter of several files failed their last read. One failing file (a
/// socket's `energy_uj` gone or garbled) leaves only its own reading out, and core's
/// `zone_energies` then drops only that zone for the interval; the meter fails as a whole only
/// when no file could be read.
#[derive(Debug, Default)]
pub(crate) struct ZoneFailures {
    failing: Vec<bool>,
    first_error: Option<AttrError>,
    read: usize,
}

impl ZoneFailures {
    pub(crate) fn new(zones: usize) -> Self {
        ZoneFailures {
            failing: vec![false; zones],
            ..Self::default()
        }
    }

    /// Starts a read of every zone.
    pub(crate) fn begin(&mut self) {
        self.first_error = None;
        self.read = 0;
    }

    /// The value of zone `index` if its read worked; a change of state is logged once.
    pub(crate) fn note<T>(&mut self, index: usize, result: Result<T, AttrError>) -> Option<T> {
        let failing = self.failing.get_mut(index);
        match result {
            Ok(v) => {
                if let Some(f) = failing.filter(|f| **f) {
                    *f = false;
                    tracing::warn!(zone = index, "meter zone readable again");
                }
                self.read += 1;
                Some(v)
            }
            Err(e) => {
                if let Some(f) = failing.filter(|f| !**f) {
                    *f = true;
                    tracing::warn!(error = %e, "meter zone unreadable; left out until it recovers, other zones go on");
                }
                self.first_error.get_or_insert(e);
                None
            }
        }
    }

    /// The meter's result: an error only when every zone failed.
    pub(crate) fn finish(&mut self) -> Result<(), ReadError> {
        match self.first_error.take() {
            Some(e) if self.read == 0 => Err(e.into()),
            _ => Ok(()),
        }
    }
}

/// Reads a short text attribute (`name`, a label), trimmed. Used at start-up only.
pub(crate) fn read_text(path: &Path) -> Result<String, AttrError> {
    let mut buf = String::new();
    read_into(path, &mut buf)?;
    Ok(buf.trim().to_string())
}

/// Compares names such as `hwmon2` and `hwmon10`, or `intel-rapl:0:1` and `intel-rapl:1`, by
/// their digit runs as numbers, so that listings come out in the order the kernel numbered them.
pub(crate) fn natural_cmp(a: &str, b: &str) -> Ordering {
    let (mut a, mut b) = (a.as_bytes(), b.as_bytes());
    loop {
        match (a.split_first(), b.split_first()) {
            (None, None) => return Ordering::Equal,
            (None, Some(_)) => return Ordering::Less,
            (Some(_), None) => return Ordering::Greater,
            (Some((x, _)), Some((y, _))) if x.is_ascii_digit() && y.is_ascii_digit() => {
                let (na, ra) = split_digits(a);
                let (nb, rb) = split_digits(b);
                let ord = cmp_digit_runs(na, nb);
                if ord != Ordering::Equal {
                    return ord;
                }
                a = ra;
                b = rb;
            }
            (Some((x, ra)), Some((y, rb))) => {
                if x != y {
                    return x.cmp(y);
                }
                a = ra;
                b = rb;
            }
        }
    }
}

fn split_digits(s: &[u8]) -> (&[u8], &[u8]) {
    let n = s.iter().take_while(|c| c.is_ascii_digit()).count();
    s.split_at(n)
}

/// Compares two runs of ASCII digits as numbers of any length.
fn cmp_digit_runs(a: &[u8], b: &[u8]) -> Ordering {
    let strip = |s: &[u8]| -> usize { s.iter().take_while(|&&c| c == b'0').count() };
    let (a, b) = (a.split_at(strip(a)).1, b.split_at(strip(b)).1);
    a.len().cmp(&b.len()).then_with(|| a.cmp(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn natural_order_follows_numbers() {
        let mut names = vec![
            "hwmon10",
            "hwmon2",
            "intel-rapl:1",
            "intel-rapl:0:1",
            "intel-rapl:0",
            "hwmon1",
            "intel-rapl:0:10",
            "intel-rapl:0:2",
        ];
        names.sort_by(|a, b| natural_cmp(a, b));
        assert_eq!(
            names,
            vec![
                "hwmon1",
                "hwmon2",
                "hwmon10",
                "intel-rapl:0",
                "intel-rapl:0:1",
                "intel-rapl:0:2",
                "intel-rapl:0:10",
                "intel-rapl:1",
            ]
        );
    }

    #[test]
    fn parse_errors_name_the_file_and_value() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("energy_uj");
        std::fs::write(&p, "12x\n").unwrap();
        let mut buf = String::new();
        let err = read_u64(&p, &mut buf).unwrap_err();
        assert!(err.to_string().contains("energy_uj"), "{err}");
        assert!(err.to_string().contains("\"12x\""), "{err}");
        std::fs::write(&p, " 42\n").unwrap();
        assert_eq!(read_u64(&p, &mut buf).unwrap(), 42);
        std::fs::write(&p, "-7\n").unwrap();
        assert_eq!(read_i64(&p, &mut buf).unwrap(), -7);
    }

    #[test]
    fn attributes_of_any_length_read_whole() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("label");
        let mut buf = String::new();
        // Past the first read's buffer, a multi-byte character across its end; no newline;
        // empty.
        let long = format!("{}é{}\n", "a".repeat(63), "b".repeat(200));
        for text in [long.as_str(), "no newline", "", "x\n", "\n"] {
            std::fs::write(&p, text).unwrap();
            read_into(&p, &mut buf).unwrap();
            assert_eq!(buf, text);
        }
        std::fs::write(&p, b"\xff\n").unwrap();
        assert!(read_into(&p, &mut buf).is_err());
    }

    #[test]
    fn an_attribute_off_sysfs_is_opened_at_every_read() {
        // A simulator may replace its file by rename: a held file would read the old one.
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("energy_uj");
        std::fs::write(&p, "5\n").unwrap();
        let mut attr = Attr::new(p.clone());
        let mut buf = String::new();
        assert_eq!(attr.read_u64(&mut buf).unwrap(), 5);
        assert!(attr.held.is_none());
        assert!(
            attr.off_sysfs,
            "found off sysfs once, not asked at each read"
        );
        let next = dir.path().join("next");
        std::fs::write(&next, "7\n").unwrap();
        std::fs::rename(&next, &p).unwrap();
        assert_eq!(attr.read_u64(&mut buf).unwrap(), 7);
        std::fs::remove_file(&p).unwrap();
        assert!(attr.read_u64(&mut buf).is_err());
    }

    #[test]
    fn a_held_attribute_that_fails_is_read_by_path_again() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("power1_input");
        std::fs::write(&p, "9\n").unwrap();
        // A descriptor whose reads fail, as a held file's do once its driver is gone.
        let gone = tempfile::tempdir().unwrap();
        let mut attr = Attr {
            path: p,
            held: Some(File::open(gone.path()).unwrap()),
            off_sysfs: false,
        };
        let mut buf = String::new();
        assert_eq!(attr.read_i64(&mut buf).unwrap(), 9);
        assert!(attr.held.is_none(), "not on sysfs: not held again");
    }

    #[test]
    fn a_sysfs_attribute_is_held_and_reads_its_value_afresh() {
        // The loopback device's packet counter: a value that moves when asked to.
        let p = Path::new("/sys/class/net/lo/statistics/tx_packets");
        if !p.exists() {
            kepler_testkit::tools::skip(&format!("skipped: no {}", p.display()));
            return;
        }
        let mut attr = Attr::new(p.to_path_buf());
        let mut buf = String::new();
        let before = attr.read_u64(&mut buf).unwrap();
        assert!(attr.held.is_some(), "a sysfs file is held");
        let socket = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let to = socket.local_addr().unwrap();
        for _ in 0..3 {
            socket.send_to(b"x", to).unwrap();
        }
        let after = attr.read_u64(&mut buf).unwrap();
        assert!(attr.held.is_some());
        assert!(after >= before + 3, "{before} then {after}: read stale");
    }
}

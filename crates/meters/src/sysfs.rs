//! Small helpers shared by the sysfs meters: reading single-value attribute files without
//! allocating on every tick, and ordering kernel object names the way people number them.

use std::cmp::Ordering;
use std::io::{self, Read};
use std::path::Path;

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

/// Reads a whole attribute into `buf`, reusing its capacity. The file is reopened each time
/// rather than kept open: a driver reload or a rewritten fixture file is then picked up, and
/// the cost (one open per zone per tick) is negligible next to the tick interval.
pub(crate) fn read_into(path: &Path, buf: &mut String) -> Result<(), AttrError> {
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
        file.take(rest as u64).read_to_end(&mut bytes).map_err(io)?;
    }
    let text = if bytes.is_empty() { head } else { &bytes };
    let text = std::str::from_utf8(text).map_err(|_| {
        io(io::Error::new(
            io::ErrorKind::InvalidData,
            "stream did not contain valid UTF-8",
        ))
    })?;
    buf.push_str(text);
    Ok(())
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
}

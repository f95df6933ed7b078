//! RAPL through the kernel's powercap interface: `<sysfs>/class/powercap/intel-rapl:N[:M]` and
//! `intel-rapl-mmio:N[:M]`, each with `name`, `energy_uj` and `max_energy_range_uj`.
//!
//! Readings are the raw per-socket counters with their wrap point; summing sockets and handling
//! wraps is `kepler_core::zone_energies`' job, so that every meter is treated alike.

use std::collections::{HashMap, HashSet};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kepler_core::{
    MeterInput, MicroJoules, PowerMeter, ReadError, Unavailable, ZoneReading, ZoneSample,
};
use tracing::{debug, warn};

use crate::sysfs::{natural_cmp, read_text, read_u64, Attr, AttrError, ZoneFailures};

const MSR_PREFIX: &str = "intel-rapl:";
const MMIO_PREFIX: &str = "intel-rapl-mmio:";

/// The powercap RAPL meter.
#[derive(Debug)]
pub struct RaplMeter {
    zones: Vec<RaplZone>,
    buf: String,
    failures: ZoneFailures,
}

#[derive(Debug)]
struct RaplZone {
    zone: Arc<str>,
    path: Arc<str>,
    energy_file: Attr,
    max: Option<MicroJoules>,
}

/// A zone directory as found in the powercap class, before it is validated.
#[derive(Debug)]
struct Candidate {
    dir_name: String,
    dir: PathBuf,
    mmio: bool,
    /// The socket and sub-zone numbers of `intel-rapl:N:M`.
    indices: Vec<u32>,
    /// The kernel's `name`, such as `package-0` or `dram`.
    raw_name: String,
}

impl RaplMeter {
    /// Finds the RAPL zones under `<sysfs>/class/powercap`, keeping those whose zone name is in
    /// `filter` (compared case-insensitively; empty keeps all), and checks that each can be read.
    pub fn open(sysfs: &Path, filter: &[String]) -> Result<Self, Unavailable> {
        let powercap = sysfs.join("class").join("powercap");
        let candidates = list_candidates(&powercap)?;
        if candidates.is_empty() {
            return Err(Unavailable::new(format!(
                "no intel-rapl zones in {}: the intel_rapl_msr module is not loaded or the CPU has no RAPL",
                powercap.display()
            )));
        }
        let candidates = drop_mmio_duplicates(candidates);

        let wanted: Vec<String> = filter
            .iter()
            .map(|z| z.trim().to_lowercase())
            .filter(|z| !z.is_empty())
            .collect();
        let mut found_names: Vec<String> = Vec::new();
        let mut skipped: Vec<String> = Vec::new();
        let mut zones = Vec::new();
        let mut buf = String::new();
        for c in candidates {
            let zone = zone_name(&c.raw_name);
            if !found_names.contains(&zone) {
                found_names.push(zone.clone());
            }
            if !wanted.is_empty() && !wanted.contains(&zone) {
                debug!(dir = %c.dir.display(), zone, "RAPL zone left out by rapl.zones");
                continue;
            }
            let mut energy_file = Attr::new(c.dir.join("energy_uj"));
            if let Err(e) = energy_file.read_u64(&mut buf) {
                let reason = skip_reason(energy_file.path(), e)?;
                warn!(reason, "skipping RAPL zone");
                skipped.push(reason);
                continue;
            }
            let max = read_max(&c.dir.join("max_energy_range_uj"), &mut buf);
            debug!(dir = %c.dir.display(), zone, ?max, "RAPL zone");
            zones.push(RaplZone {
                zone: zone.into(),
                path: c.dir.to_string_lossy().into(),
                energy_file,
                max,
            });
        }

        for w in &wanted {
            if !found_names.contains(w) {
                warn!(zone = %w, found = ?found_names, "rapl.zones names a zone this host does not have");
            }
        }
        if zones.is_empty() {
            return Err(if skipped.is_empty() {
                Unavailable::new(format!(
                    "no RAPL zone matches rapl.zones {wanted:?}; this host has {found_names:?}"
                ))
            } else {
                Unavailable::new(format!("no readable RAPL zone: {}", skipped.join("; ")))
            });
        }
        Ok(RaplMeter {
            failures: ZoneFailures::new(zones.len()),
            zones,
            buf,
        })
    }
}

impl PowerMeter for RaplMeter {
    fn name(&self) -> &str {
        "rapl"
    }

    fn zones(&self) -> Vec<String> {
        self.zones.iter().map(|z| z.zone.to_string()).collect()
    }

    fn read(
        &mut self,
        _input: &MeterInput<'_>,
        out: &mut Vec<ZoneReading>,
    ) -> Result<(), ReadError> {
        self.failures.begin();
        for (i, z) in self.zones.iter_mut().enumerate() {
            let read = z.energy_file.read_u64(&mut self.buf);
            let Some(counter) = self.failures.note(i, read) else {
                continue;
            };
            out.push(ZoneReading {
                zone: z.zone.clone(),
                path: z.path.clone(),
                sample: ZoneSample::Energy {
                    counter: MicroJoules(counter),
                    max: z.max,
                },
                shares: None,
                idle: None,
                device: None,
            });
        }
        self.failures.finish()
    }
}

/// The exported zone of a kernel zone name: every socket's `package-N` (and `package-N-die-M`
/// on multi-die parts) is `package`, so that sockets are summed under one zone.
pub(crate) fn zone_name(raw: &str) -> String {
    let lower = raw.trim().to_lowercase();
    match lower.strip_prefix("package-") {
        Some(rest) if rest.starts_with(|c: char| c.is_ascii_digit()) => "package".to_string(),
        _ => lower,
    }
}

/// Decides what a failed first read of `energy_uj` means. A permission error makes the whole
/// meter unusable (every zone has the same mode, and the user must act), so it is returned as
/// `Err`; anything else only disqualifies that zone, and `Ok` carries the reason.
pub(crate) fn skip_reason(energy_file: &Path, err: AttrError) -> Result<String, Unavailable> {
    if err.io_kind() == Some(io::ErrorKind::PermissionDenied) {
        return Err(Unavailable::denied(format!(
            "permission denied reading {}: run as root or grant read access (CVE-2020-8694 made it root-only)",
            energy_file.display()
        )));
    }
    Ok(err.to_string())
}

/// A missing, unparsable or zero wrap point is "unknown": core then drops a decreasing sample
/// instead of inventing a wrap.
fn read_max(path: &Path, buf: &mut String) -> Option<MicroJoules> {
    match read_u64(path, buf) {
        Ok(0) => {
            debug!(path = %path.display(), "max_energy_range_uj is 0; wrap point unknown");
            None
        }
        Ok(v) => Some(MicroJoules(v)),
        Err(e) => {
            debug!(error = %e, "wrap point unknown");
            None
        }
    }
}

fn list_candidates(powercap: &Path) -> Result<Vec<Candidate>, Unavailable> {
    let entries = std::fs::read_dir(powercap).map_err(|e| {
        if e.kind() == io::ErrorKind::NotFound {
            Unavailable::new(format!(
                "{} not found: kernel lacks powercap/intel_rapl or not a RAPL CPU",
                powercap.display()
            ))
        } else {
            Unavailable::new(format!("cannot list {}: {e}", powercap.display()))
        }
    })?;
    let mut out = Vec::new();
    for entry in entries.flatten() {
        let Ok(dir_name) = entry.file_name().into_string() else {
            continue;
        };
        let (mmio, rest) = if let Some(rest) = dir_name.strip_prefix(MMIO_PREFIX) {
            (true, rest)
        } else if let Some(rest) = dir_name.strip_prefix(MSR_PREFIX) {
            (false, rest)
        } else {
            continue;
        };
        let Some(indices) = rest
            .split(':')
            .map(|n| n.parse::<u32>().ok())
            .collect::<Option<Vec<u32>>>()
        else {
            debug!(dir_name, "ignoring powercap entry with an unexpected name");
            continue;
        };
        let dir = entry.path();
        let raw_name = match read_text(&dir.join("name")) {
            Ok(n) if !n.is_empty() => n,
            Ok(_) => {
                warn!(dir = %dir.display(), "RAPL zone has an empty name; skipped");
                continue;
            }
            Err(e) => {
                warn!(error = %e, "RAPL zone has no readable name; skipped");
                continue;
            }
        };
        out.push(Candidate {
            dir_name,
            dir,
            mmio,
            indices,
            raw_name,
        });
    }
    // Plain RAPL first so that it wins over its MMIO duplicate, then in kernel numbering.
    out.sort_by(|a, b| {
        a.mmio
            .cmp(&b.mmio)
            .then_with(|| natural_cmp(&a.dir_name, &b.dir_name))
    });
    Ok(out)
}

/// Newer Intel parts expose the package domain both through MSRs (`intel-rapl:N`) and through
/// MMIO (`intel-rapl-mmio:N`); both count the same energy, so reading both would double it.
/// A zone is identified by its own name and its parent's name (`package-0`/`dram`).
fn drop_mmio_duplicates(candidates: Vec<Candidate>) -> Vec<Candidate> {
    let names: HashMap<(bool, Vec<u32>), String> = candidates
        .iter()
        .map(|c| ((c.mmio, c.indices.clone()), c.raw_name.clone()))
        .collect();
    let key = |c: &Candidate| -> (String, String) {
        let parent = c
            .indices
            .split_last()
            .filter(|(_, up)| !up.is_empty())
            .and_then(|(_, up)| names.get(&(c.mmio, up.to_vec())).cloned())
            .unwrap_or_default();
        (parent, c.raw_name.clone())
    };
    let plain: HashSet<(String, String)> = candidates.iter().filter(|c| !c.mmio).map(key).collect();
    let keys: Vec<(String, String)> = candidates.iter().map(key).collect();
    candidates
        .into_iter()
        .zip(keys)
        .filter_map(|(c, k)| {
            if c.mmio && plain.contains(&k) {
                debug!(dir = %c.dir.display(), name = %c.raw_name, "MMIO RAPL zone duplicates an MSR zone; ignored");
                None
            } else {
                Some(c)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_names_map_to_zones() {
        assert_eq!(zone_name("package-0"), "package");
        assert_eq!(zone_name("package-12"), "package");
        assert_eq!(zone_name("package-1-die-0"), "package");
        assert_eq!(zone_name("core"), "core");
        assert_eq!(zone_name("DRAM\n"), "dram");
        assert_eq!(zone_name("psys"), "psys");
        assert_eq!(zone_name("package-x"), "package-x");
    }

    #[test]
    fn permission_denied_explains_the_cve() {
        let p = Path::new("/sys/class/powercap/intel-rapl:0/energy_uj");
        let io_err = |source| AttrError::Io {
            path: p.display().to_string(),
            source,
        };
        let r = skip_reason(p, io_err(io::Error::from(io::ErrorKind::PermissionDenied)));
        assert!(
            r.as_ref().is_err_and(|e| e.denied),
            "reported as denied access"
        );
        assert_eq!(
            r.unwrap_err().reason,
            "permission denied reading /sys/class/powercap/intel-rapl:0/energy_uj: run as root or grant read access (CVE-2020-8694 made it root-only)"
        );
        // EACCES as the kernel returns it maps the same way.
        let r = skip_reason(p, io_err(io::Error::from_raw_os_error(13)));
        assert!(r
            .unwrap_err()
            .reason
            .starts_with("permission denied reading"));
        // Other failures only skip the zone, and say which file failed.
        let r = skip_reason(p, io_err(io::Error::from(io::ErrorKind::NotFound))).unwrap();
        assert!(r.contains("energy_uj") && !r.contains("CVE"), "{r}");
        let parse = AttrError::Parse {
            path: p.display().to_string(),
            value: "x".into(),
            expected: "an unsigned integer",
        };
        assert!(skip_reason(p, parse).is_ok());
    }
}

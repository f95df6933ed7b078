//! Facts about the host, read once at start-up from one place: `<procfs>/cpuinfo` (per-CPU
//! entries for `kepler_node_cpu_info`, and the text built-in models derive a machine spec
//! from), `<procfs>/meminfo`, the hostname (`<procfs>/sys/kernel/hostname`) and whether the
//! host is a virtual machine. Every path is under `host.procfs`/`host.sysfs`, so fixture
//! trees stand in for the host, and every read is bounded: a FIFO or a huge file put where a
//! fact is expected costs at most the limit.
//!
//! A fact that cannot be read is kept as the error that says why, so each user reports it in
//! its own terms (the estimator as unavailable, the exporter as an empty info metric).

mod cpuinfo;

pub use cpuinfo::{parse_cpu_model, CpuModel};

use std::fs::OpenOptions;
use std::io::Read;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use kepler_core::CpuInfo;

/// Largest cpuinfo read: about 2 KB per logical CPU, so room for several thousand CPUs.
const CPUINFO_LIMIT: u64 = 16 << 20;
/// Largest meminfo read; the real file is under 2 KB.
const MEMINFO_LIMIT: u64 = 1 << 20;
/// Largest hostname or hypervisor-type read; a hostname has at most 64 bytes.
const SHORT_LIMIT: u64 = 4096;

/// Why a fact could not be read.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum HostFactError {
    #[error("reading {path}: {reason}")]
    Read { path: PathBuf, reason: String },
    #[error("{path} is larger than {limit} bytes")]
    TooLarge { path: PathBuf, limit: u64 },
    #[error("parsing {path}: {reason}")]
    Parse { path: PathBuf, reason: String },
}

/// Whether the host runs on a hypervisor.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Virtualization {
    /// Nothing says the host is virtual.
    BareMetal,
    /// A virtual machine: the CPU flag hypervisors set, or `<sysfs>/hypervisor/type`, which
    /// also names the hypervisor (`xen`).
    Guest { hypervisor: Option<String> },
}

impl Virtualization {
    pub fn is_guest(&self) -> bool {
        matches!(self, Virtualization::Guest { .. })
    }
}

impl std::fmt::Display for Virtualization {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Virtualization::BareMetal => f.write_str("bare metal"),
            Virtualization::Guest {
                hypervisor: Some(h),
            } => write!(f, "virtual machine ({h})"),
            Virtualization::Guest { hypervisor: None } => f.write_str("virtual machine"),
        }
    }
}

/// See the module docs.
#[derive(Clone, Debug, PartialEq)]
pub struct HostFacts {
    cpuinfo: Result<String, HostFactError>,
    meminfo: Result<String, HostFactError>,
    cpus: Result<Vec<CpuInfo>, HostFactError>,
    hostname: Result<String, HostFactError>,
    virtualization: Virtualization,
}

impl HostFacts {
    /// Reads every fact under `procfs` and `sysfs` (`host.procfs`, `host.sysfs`).
    pub fn read(procfs: &Path, sysfs: &Path) -> HostFacts {
        let cpuinfo_path = procfs.join("cpuinfo");
        let cpuinfo = read_bounded(&cpuinfo_path, CPUINFO_LIMIT);
        let cpus = cpuinfo.clone().and_then(|text| {
            let cpus = cpuinfo::parse_cpu_info(&text);
            if cpus.is_empty() {
                Err(HostFactError::Parse {
                    path: cpuinfo_path.clone(),
                    reason: "no `processor` entries".into(),
                })
            } else {
                Ok(cpus)
            }
        });
        let hostname_path = procfs.join("sys/kernel/hostname");
        let hostname = read_bounded(&hostname_path, SHORT_LIMIT).and_then(|h| {
            let h = h.trim();
            if h.is_empty() {
                Err(HostFactError::Parse {
                    path: hostname_path.clone(),
                    reason: "empty".into(),
                })
            } else {
                Ok(h.to_string())
            }
        });
        let virtualization = virtualization(cpuinfo.as_deref().ok(), sysfs);
        HostFacts {
            meminfo: read_bounded(&procfs.join("meminfo"), MEMINFO_LIMIT),
            cpuinfo,
            cpus,
            hostname,
            virtualization,
        }
    }

    /// The text of `<procfs>/cpuinfo`.
    pub fn cpuinfo(&self) -> Result<&str, &HostFactError> {
        self.cpuinfo.as_deref()
    }

    /// The text of `<procfs>/meminfo`.
    pub fn meminfo(&self) -> Result<&str, &HostFactError> {
        self.meminfo.as_deref()
    }

    /// One entry per logical CPU (the `kepler_node_cpu_info` series).
    pub fn cpus(&self) -> Result<&[CpuInfo], &HostFactError> {
        self.cpus.as_deref()
    }

    /// The hostname, trimmed; an error when unreadable or empty.
    pub fn hostname(&self) -> Result<&str, &HostFactError> {
        self.hostname.as_deref()
    }

    pub fn virtualization(&self) -> &Virtualization {
        &self.virtualization
    }

    pub fn is_virtual_machine(&self) -> bool {
        self.virtualization.is_guest()
    }
}

/// The hypervisor flag of x86 guests; otherwise (arm64 guests have no such flag) a hypervisor
/// type in sysfs, which Xen guests have.
fn virtualization(cpuinfo: Option<&str>, sysfs: &Path) -> Virtualization {
    let named = read_bounded(&sysfs.join("hypervisor/type"), SHORT_LIMIT)
        .ok()
        .map(|t| t.trim().to_string())
        .filter(|t| !t.is_empty());
    if named.is_some() || cpuinfo.is_some_and(cpuinfo::has_hypervisor_flag) {
        Virtualization::Guest { hypervisor: named }
    } else {
        Virtualization::BareMetal
    }
}

/// The processor model from `<procfs_root>/cpuinfo`, for meters whose registers depend on it
/// (read once when such a meter opens).
pub fn read_cpu_model(procfs_root: &Path) -> Result<CpuModel, HostFactError> {
    let path = procfs_root.join("cpuinfo");
    let text = read_bounded(&path, CPUINFO_LIMIT)?;
    parse_cpu_model(&text).ok_or_else(|| HostFactError::Read {
        path,
        reason: "no `processor` entries".into(),
    })
}

/// The whole file as text (invalid UTF-8 replaced), or an error when it cannot be read or
/// holds more than `limit` bytes. Sizes from metadata are not trusted: procfs reports 0.
/// Opened non-blocking, so a FIFO without a writer reads as empty instead of hanging the
/// start-up; regular and procfs files ignore the flag.
fn read_bounded(path: &Path, limit: u64) -> Result<String, HostFactError> {
    let failed = |e: std::io::Error| HostFactError::Read {
        path: path.to_path_buf(),
        reason: e.to_string(),
    };
    let mut bytes = Vec::new();
    OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK)
        .open(path)
        .map_err(failed)?
        .take(limit + 1)
        .read_to_end(&mut bytes)
        .map_err(failed)?;
    if bytes.len() as u64 > limit {
        return Err(HostFactError::TooLarge {
            path: path.to_path_buf(),
            limit,
        });
    }
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

#[cfg(test)]
mod tests;

//! CPU frequency caps through cpufreq (`<sysfs>/devices/system/cpu/cpu*/cpufreq/
//! scaling_max_freq`), where this process may write them. A cap lasts while its guard lives;
//! dropping the guard puts every CPU's previous maximum back.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The writable cpufreq policies of a host.
#[derive(Debug, Clone)]
pub struct Cpufreq {
    /// Every CPU's `scaling_max_freq`.
    max_files: Vec<PathBuf>,
    pub min_khz: u64,
    pub max_khz: u64,
}

fn read_khz(path: &Path) -> Option<u64> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

impl Cpufreq {
    /// The host's cpufreq when every CPU's maximum is writable; otherwise why not.
    pub fn detect(sysfs: &Path) -> Result<Cpufreq, String> {
        let cpus = sysfs.join("devices/system/cpu");
        let entries = std::fs::read_dir(&cpus).map_err(|e| format!("{}: {e}", cpus.display()))?;
        let mut max_files: Vec<PathBuf> = entries
            .flatten()
            .filter(|e| {
                let name = e.file_name();
                let name = name.to_string_lossy();
                name.strip_prefix("cpu")
                    .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
            })
            .map(|e| e.path().join("cpufreq/scaling_max_freq"))
            .collect();
        max_files.sort();
        let Some(first) = max_files.first() else {
            return Err(format!("no CPUs under {}", cpus.display()));
        };
        let policy = first.parent().map(Path::to_path_buf).unwrap_or_default();
        let (Some(min_khz), Some(max_khz)) = (
            read_khz(&policy.join("cpuinfo_min_freq")),
            read_khz(&policy.join("cpuinfo_max_freq")),
        ) else {
            return Err(format!("no cpufreq limits under {}", policy.display()));
        };
        for f in &max_files {
            // Opening for writing changes nothing and says whether a cap could be set.
            if let Err(e) = std::fs::OpenOptions::new().write(true).open(f) {
                return Err(format!("{} is not writable: {e}", f.display()));
            }
        }
        Ok(Cpufreq {
            max_files,
            min_khz,
            max_khz,
        })
    }

    /// Caps worth measuring: the lowest frequency and half-way to the highest.
    pub fn default_caps(&self) -> Vec<u64> {
        let mid = (self.min_khz + self.max_khz) / 2;
        let mut caps = vec![self.min_khz, mid];
        caps.retain(|&c| c < self.max_khz);
        caps.dedup();
        caps
    }

    /// Caps every CPU at `khz` until the guard is dropped.
    pub fn cap(&self, khz: u64) -> Result<CapGuard> {
        let mut guard = CapGuard {
            previous: Vec::new(),
        };
        for f in &self.max_files {
            let before =
                std::fs::read_to_string(f).with_context(|| format!("reading {}", f.display()))?;
            std::fs::write(f, format!("{khz}\n"))
                .with_context(|| format!("capping {}", f.display()))?;
            guard.previous.push((f.clone(), before));
        }
        Ok(guard)
    }
}

/// Restores the maximum frequencies a cap replaced.
#[derive(Debug)]
pub struct CapGuard {
    previous: Vec<(PathBuf, String)>,
}

impl Drop for CapGuard {
    fn drop(&mut self) {
        for (f, before) in &self.previous {
            if let Err(e) = std::fs::write(f, before) {
                tracing::error!(file = %f.display(), error = %e, "cannot restore the CPU's maximum frequency");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake_host(cpus: usize) -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        for i in 0..cpus {
            let p = dir
                .path()
                .join(format!("devices/system/cpu/cpu{i}/cpufreq"));
            std::fs::create_dir_all(&p).unwrap();
            std::fs::write(p.join("cpuinfo_min_freq"), "800000\n").unwrap();
            std::fs::write(p.join("cpuinfo_max_freq"), "3000000\n").unwrap();
            std::fs::write(p.join("scaling_max_freq"), "3000000\n").unwrap();
        }
        std::fs::create_dir_all(dir.path().join("devices/system/cpu/cpufreq")).unwrap();
        dir
    }

    #[test]
    fn caps_apply_to_every_cpu_and_are_undone() {
        let host = fake_host(2);
        let freq = Cpufreq::detect(host.path()).unwrap();
        assert_eq!(freq.default_caps(), [800_000, 1_900_000]);
        let file = |i: usize| {
            host.path().join(format!(
                "devices/system/cpu/cpu{i}/cpufreq/scaling_max_freq"
            ))
        };
        let guard = freq.cap(1_900_000).unwrap();
        for i in 0..2 {
            assert_eq!(std::fs::read_to_string(file(i)).unwrap(), "1900000\n");
        }
        drop(guard);
        for i in 0..2 {
            assert_eq!(std::fs::read_to_string(file(i)).unwrap(), "3000000\n");
        }
    }

    #[test]
    fn hosts_without_cpufreq_say_why() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("devices/system/cpu/cpu0")).unwrap();
        let why = Cpufreq::detect(dir.path()).unwrap_err();
        assert!(why.contains("no cpufreq limits"), "{why}");
    }
}

//! Builders for simulated sysfs trees and MSR devices, for this crate's tests and for other
//! crates' tests that need a host with RAPL or hwmon (enable the `fixtures` feature).
//!
//! Sysfs values are written to a temporary file and renamed into place, so a meter reading
//! concurrently sees either the old or the new value, never an empty file. MSR devices are
//! sparse files whose 8 bytes at each register's offset hold its value, written in place
//! (pread of an aligned 8-byte range sees the old or the new value).

use std::fs;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

/// A simulated `<sysfs>/class/powercap` with RAPL zones.
#[derive(Debug)]
pub struct PowercapTree {
    powercap: PathBuf,
    zones: Vec<FixtureZone>,
    top_level: usize,
}

#[derive(Debug)]
struct FixtureZone {
    dir: PathBuf,
    max: Option<u64>,
    /// Sub-zones made so far, to number the next one.
    children: usize,
}

impl PowercapTree {
    /// Creates `<sysfs>/class/powercap` with the `intel-rapl` control type directory the kernel
    /// also shows, and no zones.
    pub fn empty(sysfs: &Path) -> io::Result<Self> {
        let powercap = sysfs.join("class").join("powercap");
        let control = powercap.join("intel-rapl");
        fs::create_dir_all(&control)?;
        write_atomic(&control.join("enabled"), "1\n")?;
        Ok(PowercapTree {
            powercap,
            zones: Vec::new(),
            top_level: 0,
        })
    }

    /// Creates a tree laid out like the kernel's: each `package-N` becomes a top-level zone
    /// `intel-rapl:K`; `core`, `uncore` and `dram` become sub-zones `intel-rapl:K:M` of the
    /// package before them (top-level if none); anything else (`psys`) is top-level. Each entry
    /// is (kernel name, `max_energy_range_uj`). Counters start at 0. Zone indexes for
    /// [`set_energy`](Self::set_energy) follow the order of `zones`.
    pub fn create(sysfs: &Path, zones: &[(&str, u64)]) -> io::Result<Self> {
        let mut tree = Self::empty(sysfs)?;
        let mut package: Option<usize> = None;
        for &(name, max) in zones {
            let is_sub = matches!(name, "core" | "uncore" | "dram");
            match package.filter(|_| is_sub) {
                Some(parent) => {
                    tree.add_sub_zone(parent, name, Some(max))?;
                }
                None => {
                    let idx =
                        tree.add_zone(&format!("intel-rapl:{}", tree.top_level), name, Some(max))?;
                    if name.starts_with("package") {
                        package = Some(idx);
                    }
                }
            }
        }
        Ok(tree)
    }

    /// Adds a zone directory named `dir_name` (such as `intel-rapl-mmio:0`) with kernel name
    /// `name`, counter 0, and a `max_energy_range_uj` file unless `max` is `None`. Returns its
    /// index.
    pub fn add_zone(&mut self, dir_name: &str, name: &str, max: Option<u64>) -> io::Result<usize> {
        if dir_name.split(':').count() == 2 && dir_name.starts_with("intel-rapl:") {
            self.top_level += 1;
        }
        self.make_zone(self.powercap.join(dir_name), name, max)
    }

    /// Adds a sub-zone `<parent dir>:M` under the zone with index `parent`. Returns its index.
    pub fn add_sub_zone(
        &mut self,
        parent: usize,
        name: &str,
        max: Option<u64>,
    ) -> io::Result<usize> {
        let p = self.zones.get_mut(parent).ok_or_else(|| no_zone(parent))?;
        let m = p.children;
        p.children += 1;
        let parent_name = p
            .dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        self.make_zone(self.powercap.join(format!("{parent_name}:{m}")), name, max)
    }

    fn make_zone(&mut self, dir: PathBuf, name: &str, max: Option<u64>) -> io::Result<usize> {
        fs::create_dir_all(&dir)?;
        write_atomic(&dir.join("name"), &format!("{name}\n"))?;
        write_atomic(&dir.join("energy_uj"), "0\n")?;
        if let Some(max) = max {
            write_atomic(&dir.join("max_energy_range_uj"), &format!("{max}\n"))?;
        }
        self.zones.push(FixtureZone {
            dir,
            max,
            children: 0,
        });
        Ok(self.zones.len() - 1)
    }

    /// Sets a zone's counter.
    pub fn set_energy(&self, zone: usize, uj: u64) -> io::Result<()> {
        let z = self.zones.get(zone).ok_or_else(|| no_zone(zone))?;
        write_atomic(&z.dir.join("energy_uj"), &format!("{uj}\n"))
    }

    /// Reads a zone's counter back.
    pub fn energy(&self, zone: usize) -> io::Result<u64> {
        let z = self.zones.get(zone).ok_or_else(|| no_zone(zone))?;
        let text = fs::read_to_string(z.dir.join("energy_uj"))?;
        text.trim()
            .parse()
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
    }

    /// Advances a zone's counter by `uj`, wrapping past its `max_energy_range_uj` to 0 as the
    /// hardware does (the counter counts 0..=max). Returns the new counter.
    pub fn add_energy(&self, zone: usize, uj: u64) -> io::Result<u64> {
        let z = self.zones.get(zone).ok_or_else(|| no_zone(zone))?;
        let now = u128::from(self.energy(zone)?) + u128::from(uj);
        let next = match z.max {
            Some(max) => now % (u128::from(max) + 1),
            None => now,
        };
        let next = u64::try_from(next).unwrap_or(u64::MAX);
        self.set_energy(zone, next)?;
        Ok(next)
    }

    /// A zone's directory, as the meter reports it in each reading's `path`.
    pub fn zone_dir(&self, zone: usize) -> Option<&Path> {
        self.zones.get(zone).map(|z| z.dir.as_path())
    }

    /// `<sysfs>/class/powercap`.
    pub fn powercap_dir(&self) -> &Path {
        &self.powercap
    }
}

/// A simulated `<sysfs>/class/hwmon`.
#[derive(Debug)]
pub struct HwmonTree {
    sysfs: PathBuf,
    class: PathBuf,
    next: usize,
}

impl HwmonTree {
    /// Creates an empty `<sysfs>/class/hwmon`.
    pub fn create(sysfs: &Path) -> io::Result<Self> {
        let class = sysfs.join("class").join("hwmon");
        fs::create_dir_all(&class)?;
        Ok(HwmonTree {
            sysfs: sysfs.to_path_buf(),
            class,
            next: 0,
        })
    }

    /// Adds `hwmonN` as a plain directory with a `name` file (unless `name` is `None`) and the
    /// given attribute files (relative paths such as `power1_average` or
    /// `device/power1_average`). Returns the chip directory.
    pub fn add_chip(&mut self, name: Option<&str>, files: &[(&str, &str)]) -> io::Result<PathBuf> {
        let dir = self.class.join(format!("hwmon{}", self.next));
        self.next += 1;
        populate(&dir, name, files)?;
        Ok(dir)
    }

    /// Like [`add_chip`](Self::add_chip), but the chip lives under `<sysfs>/devices/…` and
    /// `hwmonN` is a symlink to it, as on a real host. Returns the symlink's path.
    pub fn add_linked_chip(
        &mut self,
        name: Option<&str>,
        files: &[(&str, &str)],
    ) -> io::Result<PathBuf> {
        let n = self.next;
        self.next += 1;
        let real = self
            .sysfs
            .join("devices")
            .join(format!("platform/dev{n}/hwmon/hwmon{n}"));
        populate(&real, name, files)?;
        let link = self.class.join(format!("hwmon{n}"));
        std::os::unix::fs::symlink(&real, &link)?;
        Ok(link)
    }

    /// Writes one attribute of a chip.
    pub fn write(chip: &Path, file: &str, value: &str) -> io::Result<()> {
        let path = chip.join(file);
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent)?;
        }
        write_atomic(&path, value)
    }
}

/// Simulated MSR devices (`<root>/<cpu>/msr`), the CPU topology under
/// `<sysfs>/devices/system/cpu` and `<procfs>/cpuinfo`.
#[derive(Debug)]
pub struct MsrTree {
    sysfs: PathBuf,
    root: PathBuf,
}

impl MsrTree {
    /// Creates the MSR root and the sysfs CPU directory, with no CPU yet.
    pub fn create(sysfs: &Path, root: &Path) -> io::Result<Self> {
        fs::create_dir_all(root)?;
        fs::create_dir_all(sysfs.join("devices/system/cpu"))?;
        Ok(MsrTree {
            sysfs: sysfs.to_path_buf(),
            root: root.to_path_buf(),
        })
    }

    /// Adds logical CPU `cpu` in `package` and `core`: its topology files and an empty MSR
    /// device, where every register reads 0 until written (a read past the end fails, as an
    /// absent register does with EIO).
    pub fn add_cpu(&self, cpu: u32, package: u32, core: u32) -> io::Result<()> {
        let topology = self
            .sysfs
            .join(format!("devices/system/cpu/cpu{cpu}/topology"));
        fs::create_dir_all(&topology)?;
        write_atomic(
            &topology.join("physical_package_id"),
            &format!("{package}\n"),
        )?;
        write_atomic(&topology.join("core_id"), &format!("{core}\n"))?;
        write_atomic(&topology.join("die_id"), "0\n")?;
        let device = self.msr_file(cpu);
        if let Some(dir) = device.parent() {
            fs::create_dir_all(dir)?;
        }
        fs::File::create(device).map(drop)
    }

    /// Sets a register of a CPU's device (8 bytes, little-endian, at the register's offset).
    /// In a file, registers less than 8 apart share bytes (AMD's unit, core and package
    /// registers are consecutive): write the lower one first, and keep registers whose windows
    /// would overlap on different CPUs, as the meter reads them.
    pub fn write(&self, cpu: u32, register: u64, value: u64) -> io::Result<()> {
        let file = fs::OpenOptions::new()
            .write(true)
            .open(self.msr_file(cpu))?;
        file.write_all_at(&value.to_le_bytes(), register)
    }

    /// `<root>/<cpu>/msr`.
    pub fn msr_file(&self, cpu: u32) -> PathBuf {
        self.root.join(cpu.to_string()).join("msr")
    }

    /// Writes `<procfs>/cpuinfo` with `cpus` processors of one model.
    pub fn write_cpuinfo(
        procfs: &Path,
        vendor: &str,
        family: u32,
        model: u32,
        cpus: u32,
    ) -> io::Result<()> {
        fs::create_dir_all(procfs)?;
        let text: String = (0..cpus)
            .map(|n| {
                format!(
                    "processor\t: {n}\nvendor_id\t: {vendor}\ncpu family\t: {family}\n\
                     model\t\t: {model}\nmodel name\t: fixture CPU\nflags\t\t: fpu msr\n\n"
                )
            })
            .collect();
        write_atomic(&procfs.join("cpuinfo"), &text)
    }
}

fn populate(dir: &Path, name: Option<&str>, files: &[(&str, &str)]) -> io::Result<()> {
    fs::create_dir_all(dir)?;
    if let Some(name) = name {
        write_atomic(&dir.join("name"), &format!("{name}\n"))?;
    }
    for (file, value) in files {
        HwmonTree::write(dir, file, value)?;
    }
    Ok(())
}

fn no_zone(i: usize) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, format!("no fixture zone {i}"))
}

fn write_atomic(path: &Path, value: &str) -> io::Result<()> {
    let mut tmp = path.as_os_str().to_owned();
    tmp.push(".tmp");
    fs::write(&tmp, value)?;
    fs::rename(&tmp, path)
}

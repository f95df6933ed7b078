//! Power and energy sensors of hwmon chips: `<sysfs>/class/hwmon/hwmonN/`.
//!
//! Per chip and channel N: `energyN_input` (µJ counter) is preferred, then `powerN_average`,
//! then `powerN_input` (µW). A chip with neither power nor energy sensors is measured as
//! `inN_input` (mV) × `currN_input` (mA) for each N that has both, or for the pairs that
//! `experimental.hwmon.chipRules` give its chip ([`crate::hwmon_rules`]). Zones are named
//! `platform` for the ACPI power meter (`power_meter`), else the sensor's label, lowercased,
//! else the chip name (`<chip>-<kind>N` when an unlabelled chip has several sensors).
//!
//! The ACPI power meter measures the whole machine, not the CPU: it is its own meter, `acpi`
//! in the platform domain ([`HwmonMeter::open_platform`]), and the CPU domain's `hwmon` meter
//! ([`HwmonMeter::open`]) always leaves it out. So a host with RAPL exports both, and a host
//! whose only sensor is the ACPI meter gets its CPU zones from the next meter of the CPU
//! chain (the estimation model) and the machine's power under zone `platform`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kepler_core::{
    MeterInput, MicroJoules, PowerDomain, PowerMeter, ReadError, Unavailable, Watts, ZoneReading,
    ZoneSample,
};
use tracing::{debug, warn};

use crate::hwmon_rules::{ChipRule, Pairing};
use crate::sysfs::{natural_cmp, read_text, Attr, AttrError, ZoneFailures};

/// The hwmon meter: CPU-domain sensors (`hwmon`) or the ACPI power meter (`acpi`).
#[derive(Debug)]
pub struct HwmonMeter {
    role: Role,
    sensors: Vec<Sensor>,
    buf: String,
    failures: ZoneFailures,
}

/// Which chips a meter takes.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
enum Role {
    /// Every chip but the ACPI power meter.
    Cpu,
    /// The ACPI power meter only.
    Platform,
}

/// The ACPI power meter's chip name.
const ACPI_CHIP: &str = "power_meter";

impl Role {
    fn takes(self, chip: &str) -> bool {
        (normalize(chip) == ACPI_CHIP) == (self == Role::Platform)
    }
}

#[derive(Debug)]
struct Sensor {
    zone: Arc<str>,
    path: Arc<str>,
    kind: SensorKind,
}

#[derive(Debug)]
enum SensorKind {
    /// µJ counter; hwmon documents no wrap point.
    Energy(Attr),
    /// µW.
    Power(Attr),
    /// mV and mA.
    VoltCurrent { volt: Attr, curr: Attr },
}

/// The attribute files of one channel number of one sensor type.
#[derive(Default, Debug)]
struct Channel {
    input: Option<PathBuf>,
    average: Option<PathBuf>,
    label: Option<PathBuf>,
}

#[derive(Default, Debug)]
struct ChipFiles {
    energy: BTreeMap<u32, Channel>,
    power: BTreeMap<u32, Channel>,
    volt: BTreeMap<u32, Channel>,
    curr: BTreeMap<u32, Channel>,
}

impl ChipFiles {
    fn is_empty(&self) -> bool {
        self.energy.is_empty()
            && self.power.is_empty()
            && self.volt.is_empty()
            && self.curr.is_empty()
    }
}

impl HwmonMeter {
    /// Finds the power and energy sensors of every chip under `<sysfs>/class/hwmon` except the
    /// ACPI power meter, keeping those whose zone name is in `filter` (case-insensitive; empty
    /// keeps all), and checks that each can be read.
    pub fn open(sysfs: &Path, filter: &[String]) -> Result<Self, Unavailable> {
        Self::open_role(sysfs, filter, &[], Role::Cpu)
    }

    /// [`HwmonMeter::open`], pairing the voltage and current channels of chips without power
    /// sensors as `rules` (`experimental.hwmon.chipRules`) say.
    pub fn open_with_rules(
        sysfs: &Path,
        filter: &[String],
        rules: &[ChipRule],
    ) -> Result<Self, Unavailable> {
        Self::open_role(sysfs, filter, rules, Role::Cpu)
    }

    /// The ACPI power meter (chip `power_meter`, zone `platform`) for the platform domain;
    /// `filter` (`experimental.hwmon.zones`) leaves it out unless empty or naming `platform`.
    pub fn open_platform(sysfs: &Path, filter: &[String]) -> Result<Self, Unavailable> {
        Self::open_role(sysfs, filter, &[], Role::Platform)
    }

    fn open_role(
        sysfs: &Path,
        filter: &[String],
        rules: &[ChipRule],
        role: Role,
    ) -> Result<Self, Unavailable> {
        let class = sysfs.join("class").join("hwmon");
        let entries = std::fs::read_dir(&class).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                Unavailable::new(format!(
                    "{} not found: kernel without hwmon support",
                    class.display()
                ))
            } else {
                Unavailable::new(format!("cannot list {}: {e}", class.display()))
            }
        })?;
        let mut chips: Vec<(String, PathBuf)> = entries
            .flatten()
            .filter_map(|e| Some((e.file_name().into_string().ok()?, e.path())))
            .filter(|(name, _)| name.starts_with("hwmon"))
            .collect();
        chips.sort_by(|a, b| natural_cmp(&a.0, &b.0));
        if chips.is_empty() {
            return Err(Unavailable::new(format!(
                "no hwmon chips in {}",
                class.display()
            )));
        }

        let mut chip_names = Vec::new();
        let mut candidates = Vec::new();
        for (_, dir) in &chips {
            // `dir` may be a symlink into /sys/devices; every access below follows it.
            let Some((chip, sensors)) = discover_chip(dir, rules) else {
                continue;
            };
            if role.takes(&chip) {
                candidates.extend(sensors);
            } else {
                debug!(chip, ?role, "hwmon chip belongs to the other hwmon meter");
            }
            chip_names.push(chip);
        }
        if candidates.is_empty() {
            let chips = chip_names.join(", ");
            return Err(Unavailable::new(match role {
                Role::Cpu if chip_names.iter().any(|c| normalize(c) == ACPI_CHIP) => format!(
                    "no hwmon chip but the ACPI power meter reports power or energy (chips: {chips}); the ACPI power meter feeds the platform domain (meter acpi)"
                ),
                Role::Cpu => format!("no hwmon chip reports power or energy (chips: {chips})"),
                Role::Platform => format!(
                    "no ACPI power meter (hwmon chip {ACPI_CHIP}) reports power (chips: {chips})"
                ),
            }));
        }

        let wanted: Vec<String> = filter
            .iter()
            .map(|z| z.trim().to_lowercase())
            .filter(|z| !z.is_empty())
            .collect();
        let found: Vec<String> = candidates.iter().map(|s| s.zone.to_string()).collect();
        let mut buf = String::new();
        let mut skipped = Vec::new();
        let mut sensors = Vec::new();
        for mut s in candidates {
            if !wanted.is_empty() && !wanted.iter().any(|w| **w == *s.zone) {
                debug!(path = %s.path, zone = %s.zone, "hwmon sensor left out by experimental.hwmon.zones");
                continue;
            }
            // ACPI power meters in particular expose files that fail with ENODATA or EIO.
            match s.sample(&mut buf) {
                Ok(_) => {
                    debug!(path = %s.path, zone = %s.zone, "hwmon sensor");
                    sensors.push(s);
                }
                Err(e) => {
                    warn!(error = %e, "skipping unreadable hwmon sensor");
                    skipped.push(e.to_string());
                }
            }
        }
        if sensors.is_empty() {
            return Err(if skipped.is_empty() {
                Unavailable::new(format!(
                    "no hwmon zone matches experimental.hwmon.zones {wanted:?}; this host has {found:?}"
                ))
            } else {
                Unavailable::new(format!(
                    "no readable hwmon power or energy sensor: {}",
                    skipped.join("; ")
                ))
            });
        }
        Ok(HwmonMeter {
            role,
            failures: ZoneFailures::new(sensors.len()),
            sensors,
            buf,
        })
    }
}

impl PowerMeter for HwmonMeter {
    fn name(&self) -> &str {
        match self.role {
            Role::Cpu => "hwmon",
            Role::Platform => "acpi",
        }
    }

    fn domain(&self) -> PowerDomain {
        match self.role {
            Role::Cpu => PowerDomain::Cpu,
            Role::Platform => PowerDomain::Platform,
        }
    }

    fn zones(&self) -> Vec<String> {
        self.sensors.iter().map(|s| s.zone.to_string()).collect()
    }

    fn read(
        &mut self,
        _input: &MeterInput<'_>,
        out: &mut Vec<ZoneReading>,
    ) -> Result<(), ReadError> {
        self.failures.begin();
        for (i, s) in self.sensors.iter_mut().enumerate() {
            let read = s.sample(&mut self.buf);
            let Some(sample) = self.failures.note(i, read) else {
                continue;
            };
            out.push(ZoneReading {
                zone: s.zone.clone(),
                path: s.path.clone(),
                sample,
                shares: None,
                idle: None,
                device: None,
            });
        }
        self.failures.finish()
    }
}

impl Sensor {
    fn sample(&mut self, buf: &mut String) -> Result<ZoneSample, AttrError> {
        Ok(match &mut self.kind {
            SensorKind::Energy(file) => ZoneSample::Energy {
                counter: MicroJoules(file.read_u64(buf)?),
                max: None,
            },
            SensorKind::Power(file) => ZoneSample::Power(Watts(file.read_u64(buf)? as f64 / 1e6)),
            SensorKind::VoltCurrent { volt, curr } => {
                let mv = volt.read_i64(buf)?;
                let ma = curr.read_i64(buf)?;
                // mV × mA is µW.
                ZoneSample::Power(Watts(mv as f64 * ma as f64 / 1e6))
            }
        })
    }
}

/// The chip's name and its sensors, or `None` when the directory is not a usable chip.
fn discover_chip(dir: &Path, rules: &[ChipRule]) -> Option<(String, Vec<Sensor>)> {
    // Drivers registered through the old hwmon API keep their attributes, name included, in
    // the parent device directory (the ACPI power meter on older kernels does).
    let (attr_dir, files) = [dir.to_path_buf(), dir.join("device")]
        .into_iter()
        .map(|d| {
            let files = scan(&d);
            (d, files)
        })
        .find(|(_, files)| !files.is_empty())
        .unwrap_or_else(|| (dir.to_path_buf(), ChipFiles::default()));
    let chip = [dir.join("name"), dir.join("device").join("name")]
        .iter()
        .find_map(|p| read_text(p).ok().filter(|n| !n.is_empty()))
        .or_else(|| Some(dir.file_name()?.to_string_lossy().into_owned()))?;
    let sensors = sensors_of(&chip, &attr_dir, files, rules);
    Some((chip, sensors))
}

fn scan(dir: &Path) -> ChipFiles {
    let mut files = ChipFiles::default();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let Ok(file) = entry.file_name().into_string() else {
            continue;
        };
        let Some((kind, index, attr)) = split_attr(&file) else {
            continue;
        };
        let map = match kind {
            "energy" => &mut files.energy,
            "power" => &mut files.power,
            "in" => &mut files.volt,
            "curr" => &mut files.curr,
            _ => continue,
        };
        let channel = map.entry(index).or_default();
        let slot = match attr {
            "input" => &mut channel.input,
            "average" => &mut channel.average,
            "label" => &mut channel.label,
            _ => continue,
        };
        *slot = Some(entry.path());
    }
    files
}

/// Splits `power1_average` into (`power`, 1, `average`).
fn split_attr(file: &str) -> Option<(&str, u32, &str)> {
    let kind_len = file.find(|c: char| c.is_ascii_digit())?;
    let (kind, rest) = file.split_at(kind_len);
    let (num, attr) = rest.split_once('_')?;
    Some((kind, num.parse().ok()?, attr))
}

fn sensors_of(chip: &str, dir: &Path, files: ChipFiles, rules: &[ChipRule]) -> Vec<Sensor> {
    let ChipFiles {
        mut energy,
        mut power,
        volt,
        mut curr,
    } = files;
    // (channel such as `power2`, its label file, how to read it)
    let mut found: Vec<(String, Option<PathBuf>, SensorKind)> = Vec::new();
    let channels: Vec<u32> = {
        let mut c: Vec<u32> = energy.keys().chain(power.keys()).copied().collect();
        c.sort_unstable();
        c.dedup();
        c
    };
    for n in channels {
        let e = energy.remove(&n).unwrap_or_default();
        let p = power.remove(&n).unwrap_or_default();
        let label = e.label.or(p.label);
        // A channel with both measures one thing twice; the counter loses nothing between
        // ticks, an averaged or instantaneous power does.
        if let Some(file) = e.input {
            found.push((
                format!("energy{n}"),
                label,
                SensorKind::Energy(Attr::new(file)),
            ));
        } else if let Some(file) = p.average.or(p.input) {
            found.push((
                format!("power{n}"),
                label,
                SensorKind::Power(Attr::new(file)),
            ));
        }
    }
    if found.is_empty() {
        let with_input = |m: &BTreeMap<u32, Channel>| -> Vec<u32> {
            m.iter()
                .filter(|(_, c)| c.input.is_some())
                .map(|(n, _)| *n)
                .collect()
        };
        let pairs = Pairing::for_chip(chip, rules).pairs(&with_input(&volt), &with_input(&curr));
        let mut volt = volt;
        for (n, m) in pairs {
            let (Some(v), Some(c)) = (volt.remove(&n), curr.remove(&m)) else {
                continue;
            };
            if let (Some(volt), Some(curr_file)) = (v.input, c.input) {
                found.push((
                    format!("in{n}"),
                    v.label.or(c.label),
                    SensorKind::VoltCurrent {
                        volt: Attr::new(volt),
                        curr: Attr::new(curr_file),
                    },
                ));
            }
        }
    }
    let single = found.len() == 1;
    found
        .into_iter()
        .map(|(channel, label, kind)| {
            let label = label
                .and_then(|p| read_text(&p).ok())
                .map(|l| normalize(&l))
                .filter(|l| !l.is_empty());
            let zone = zone_for(chip, label.as_deref(), &channel, single);
            let path = match &kind {
                SensorKind::Energy(f) | SensorKind::Power(f) => f.path().display().to_string(),
                SensorKind::VoltCurrent { volt, curr } => {
                    format!("{}*{}", volt.path().display(), file_name(curr.path()))
                }
            };
            debug!(chip, channel, zone, dir = %dir.display(), "hwmon sensor found");
            Sensor {
                zone: zone.into(),
                path: path.into(),
                kind,
            }
        })
        .collect()
}

fn file_name(p: &Path) -> String {
    p.file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default()
}

/// Lowercases and joins words with `_`, so a label such as "CPU Power" can be named in config.
fn normalize(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join("_")
        .to_lowercase()
}

pub(crate) fn zone_for(chip: &str, label: Option<&str>, channel: &str, single: bool) -> String {
    let chip = normalize(chip);
    if chip == ACPI_CHIP {
        return "platform".to_string();
    }
    match label {
        Some(label) => label.to_string(),
        None if single => chip,
        None => format!("{chip}-{channel}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn attribute_names_split() {
        assert_eq!(split_attr("power1_average"), Some(("power", 1, "average")));
        assert_eq!(split_attr("energy12_input"), Some(("energy", 12, "input")));
        assert_eq!(split_attr("in0_input"), Some(("in", 0, "input")));
        assert_eq!(
            split_attr("power1_average_interval"),
            Some(("power", 1, "average_interval"))
        );
        assert_eq!(split_attr("name"), None);
        assert_eq!(split_attr("uevent"), None);
    }

    #[test]
    fn zone_names() {
        assert_eq!(zone_for("power_meter", None, "power1", true), "platform");
        assert_eq!(
            zone_for("power_meter", Some("x"), "power1", true),
            "platform"
        );
        assert_eq!(
            zone_for("zenpower", Some("svi2_p_core"), "power1", false),
            "svi2_p_core"
        );
        assert_eq!(zone_for("amd_energy", None, "energy1", true), "amd_energy");
        assert_eq!(zone_for("ina3221", None, "in2", false), "ina3221-in2");
        assert_eq!(normalize(" CPU  Power\n"), "cpu_power");
    }
}

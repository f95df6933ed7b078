//! AMD GPUs through the amdgpu driver's files: power from the card's hwmon chip
//! (`<sysfs>/class/drm/cardN/device/hwmon/hwmonM/power1_average` or `power1_input`, µW), and
//! per-process engine time from DRM fdinfo (`/proc/<pid>/fdinfo/<fd>`: `drm-pdev`,
//! `drm-client-id`, `drm-engine-gfx` / `drm-engine-compute` in ns), on kernels that provide it
//! (5.19 and later for amdgpu). Without fdinfo the device's energy stays unattributed.

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use kepler_core::{DeviceInfo, ReadError, Unavailable, Watts};

use super::{DeviceSample, GpuBackend, ProcessUse};
use crate::sysfs::{natural_cmp, Attr};

/// The registry name of the amdgpu meter.
pub const NAME: &str = "amdgpu";

/// PCI vendor id of AMD/ATI.
const AMD_VENDOR: &str = "0x1002";

struct Card {
    info: Arc<DeviceInfo>,
    /// `power1_average` or `power1_input`, whichever the chip has.
    power: Attr,
    /// The PCI address DRM fdinfo names the device by (`drm-pdev`).
    pdev: String,
    /// Engine nanoseconds per (pid, client id) at the previous read: the baseline of deltas.
    previous: HashMap<(u32, u64), u64>,
}

/// The amdgpu backend.
pub struct AmdGpu {
    procfs: PathBuf,
    infos: Vec<Arc<DeviceInfo>>,
    cards: Vec<Card>,
    /// This read's engine times per card: procfs is scanned once per read of all cards.
    scanned: Vec<HashMap<(u32, u64), u64>>,
    buf: String,
}

impl AmdGpu {
    pub fn open(sysfs: &Path, procfs: &Path) -> Result<AmdGpu, Unavailable> {
        let drm = sysfs.join("class/drm");
        let entries = fs::read_dir(&drm)
            .map_err(|e| Unavailable::new(format!("cannot list {}: {e}", drm.display())))?;
        let mut names: Vec<String> = entries
            .filter_map(Result::ok)
            .filter_map(|e| e.file_name().into_string().ok())
            // card0-DP-1 and the like are connectors, renderD128 a node of the same card.
            .filter(|n| n.starts_with("card") && n[4..].bytes().all(|b| b.is_ascii_digit()))
            .collect();
        names.sort_by(|a, b| natural_cmp(a, b));
        let mut cards = Vec::new();
        let mut skipped = Vec::new();
        for name in names {
            match card(&drm.join(&name), &name) {
                Ok(c) => cards.push(c),
                Err(why) => skipped.push(format!("{name}: {why}")),
            }
        }
        if cards.is_empty() {
            let why = if skipped.is_empty() {
                format!("no DRM cards under {}", drm.display())
            } else {
                skipped.join("; ")
            };
            return Err(Unavailable::new(format!(
                "no amdgpu device with power ({why})"
            )));
        }
        Ok(AmdGpu {
            procfs: procfs.to_path_buf(),
            infos: cards.iter().map(|c| c.info.clone()).collect(),
            cards,
            scanned: Vec::new(),
            buf: String::new(),
        })
    }

    /// Engine nanoseconds of every DRM client of each card now, keyed by (pid, client id).
    /// Processes that vanish or deny access while being read are skipped: they are someone
    /// else's, and the next read starts from what it finds.
    fn engine_times(&self) -> Vec<HashMap<(u32, u64), u64>> {
        let mut per_card = vec![HashMap::new(); self.cards.len()];
        let Ok(procs) = fs::read_dir(&self.procfs) else {
            return per_card;
        };
        for p in procs.filter_map(Result::ok) {
            let Some(pid) = p.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            let Ok(fds) = fs::read_dir(p.path().join("fdinfo")) else {
                continue;
            };
            let links = p.path().join("fd");
            for fd in fds.filter_map(Result::ok) {
                // Only DRM device files have DRM fdinfo: one readlink spares reading the
                // fdinfo of every socket and file on the host each tick.
                let is_drm = fs::read_link(links.join(fd.file_name()))
                    .is_ok_and(|target| target.starts_with("/dev/dri"));
                if !is_drm {
                    continue;
                }
                let Ok(text) = fs::read_to_string(fd.path()) else {
                    continue;
                };
                let Some(client) = parse_fdinfo(&text) else {
                    continue;
                };
                if let Some(i) = self.cards.iter().position(|c| c.pdev == client.pdev) {
                    // Several fds may share one client: the client id counts it once.
                    per_card[i].insert((pid, client.id), client.engine_ns);
                }
            }
        }
        per_card
    }
}

fn card(dir: &Path, name: &str) -> Result<Card, String> {
    let device = dir.join("device");
    let vendor = fs::read_to_string(device.join("vendor")).map_err(|e| format!("vendor: {e}"))?;
    if vendor.trim() != AMD_VENDOR {
        return Err(format!("vendor {} is not AMD", vendor.trim()));
    }
    let hwmon_dir = device.join("hwmon");
    let mut chips: Vec<PathBuf> = fs::read_dir(&hwmon_dir)
        .map_err(|e| format!("no hwmon: {e}"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .collect();
    chips.sort();
    let power = chips
        .iter()
        .flat_map(|c| [c.join("power1_average"), c.join("power1_input")])
        .find(|p| p.exists())
        .ok_or("no power1_average or power1_input")?;
    // The PCI address: the device link's target (real sysfs), else a `pdev` file is not a
    // thing, so fixtures without a link fall back to the uevent's PCI_SLOT_NAME.
    let pdev = fs::read_link(&device)
        .ok()
        .and_then(|t| t.file_name().and_then(|n| n.to_str()).map(str::to_string))
        .or_else(|| {
            fs::read_to_string(device.join("uevent"))
                .ok()
                .and_then(|u| {
                    u.lines()
                        .find_map(|l| l.strip_prefix("PCI_SLOT_NAME=").map(str::to_string))
                })
        })
        .unwrap_or_default();
    let text = |f: &str| {
        fs::read_to_string(device.join(f))
            .ok()
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
    };
    let index = name[4..].parse::<u32>().map_err(|e| e.to_string())?;
    let uuid = text("unique_id")
        .or_else(|| (!pdev.is_empty()).then(|| pdev.clone()))
        .unwrap_or_else(|| name.to_string());
    Ok(Card {
        info: Arc::new(DeviceInfo {
            index,
            uuid: uuid.into(),
            name: text("product_name")
                .unwrap_or_else(|| "AMD GPU".to_string())
                .into(),
            vendor: "amd".into(),
        }),
        power: Attr::new(power),
        pdev,
        previous: HashMap::new(),
    })
}

/// One DRM client as fdinfo describes it.
#[derive(Debug, PartialEq, Eq)]
pub struct DrmClient {
    pub pdev: String,
    pub id: u64,
    /// gfx + compute engine time.
    pub engine_ns: u64,
}

/// Parses an amdgpu fdinfo file; `None` for other drivers and files without engine times.
pub fn parse_fdinfo(text: &str) -> Option<DrmClient> {
    let mut driver = None;
    let mut pdev = None;
    let mut id = None;
    let mut ns: Option<u64> = None;
    for line in text.lines() {
        let Some((key, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim();
        match key.trim() {
            "drm-driver" => driver = Some(value),
            "drm-pdev" => pdev = Some(value),
            "drm-client-id" => id = value.parse().ok(),
            "drm-engine-gfx" | "drm-engine-compute" => {
                let n = value.strip_suffix("ns")?.trim().parse::<u64>().ok()?;
                ns = Some(ns.unwrap_or(0).saturating_add(n));
            }
            _ => {}
        }
    }
    if driver != Some("amdgpu") {
        return None;
    }
    Some(DrmClient {
        pdev: pdev?.to_string(),
        id: id?,
        engine_ns: ns?,
    })
}

impl GpuBackend for AmdGpu {
    fn devices(&self) -> &[Arc<DeviceInfo>] {
        &self.infos
    }

    fn sample(&mut self, i: usize) -> Result<DeviceSample, ReadError> {
        // The meter samples cards in order each read: scan when it starts over.
        if i == 0 || self.scanned.len() != self.cards.len() {
            self.scanned = self.engine_times();
        }
        let now = self
            .scanned
            .get_mut(i)
            .map(std::mem::take)
            .unwrap_or_default();
        let card = self
            .cards
            .get_mut(i)
            .ok_or_else(|| ReadError::Other(format!("no amdgpu card {i}")))?;
        let microwatts = card.power.read_u64(&mut self.buf)?;
        // Engine time since the previous read per pid; a client seen for the first time is a
        // baseline (its earlier time belongs to earlier intervals).
        let mut used: HashMap<u32, u64> = HashMap::new();
        for (key, ns) in &now {
            if let Some(before) = card.previous.get(key) {
                let delta = ns.saturating_sub(*before);
                if delta > 0 {
                    *used.entry(key.0).or_default() += delta;
                }
            }
        }
        card.previous = now;
        let mut processes: Vec<ProcessUse> = used
            .into_iter()
            .map(|(pid, ns)| ProcessUse {
                pid,
                weight: Some(ns),
            })
            .collect();
        processes.sort_by_key(|p| p.pid);
        Ok(DeviceSample {
            power: Some(Watts(microwatts as f64 / 1e6)),
            energy: None,
            processes,
        })
    }
}

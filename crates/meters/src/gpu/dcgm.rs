//! dcgm-exporter's Prometheus text, for MIG: with MIG on, NVML's per-process utilisation is
//! unavailable, and dcgm-exporter labels each GPU instance (`GPU_I_ID`, `GPU_I_PROFILE`).
//! This module turns one scrape into per-device and per-instance records; the GPU power fields
//! (`DCGM_FI_DEV_POWER_USAGE`, W; `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ) are per physical
//! GPU, and `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0..1) per instance tells how the GPU's power
//! divides among its instances.

use std::collections::BTreeMap;
use std::sync::Arc;

use kepler_core::{DeviceInfo, MicroJoules, Watts, ZoneReading};

/// What one scrape says about one GPU or GPU instance.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DcgmEntity {
    /// The `gpu` label: the physical GPU's index.
    pub gpu: u32,
    pub uuid: String,
    pub model: String,
    /// `GPU_I_ID` for a MIG instance; `None` for a whole GPU.
    pub instance: Option<u32>,
    /// `GPU_I_PROFILE`, e.g. `1g.5gb`.
    pub profile: Option<String>,
    pub power_watts: Option<f64>,
    pub energy_millijoules: Option<f64>,
    /// Graphics-engine activity of the entity, 0..1.
    pub engine_active: Option<f64>,
}

/// Parses dcgm-exporter's text exposition. Lines that are not samples of the fields above
/// are skipped; a malformed sample line of those fields is skipped too (one bad line from a
/// remote exporter must not lose the rest).
pub fn parse(text: &str) -> Vec<DcgmEntity> {
    let mut entities: BTreeMap<(u32, Option<u32>), DcgmEntity> = BTreeMap::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let Some((name, labels, value)) = split_sample(line) else {
            continue;
        };
        let field = match name {
            "DCGM_FI_DEV_POWER_USAGE" => 0,
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION" => 1,
            "DCGM_FI_PROF_GR_ENGINE_ACTIVE" => 2,
            _ => continue,
        };
        let label = |k: &str| labels.iter().find(|(n, _)| *n == k).map(|(_, v)| v.clone());
        let Some(gpu) = label("gpu").and_then(|g| g.parse::<u32>().ok()) else {
            continue;
        };
        let instance = label("GPU_I_ID").and_then(|i| i.parse::<u32>().ok());
        let e = entities
            .entry((gpu, instance))
            .or_insert_with(|| DcgmEntity {
                gpu,
                uuid: label("UUID").unwrap_or_default(),
                model: label("modelName").unwrap_or_default(),
                instance,
                profile: label("GPU_I_PROFILE").filter(|p| !p.is_empty()),
                ..DcgmEntity::default()
            });
        match field {
            0 => e.power_watts = Some(value),
            1 => e.energy_millijoules = Some(value),
            _ => e.engine_active = Some(value),
        }
    }
    entities.into_values().collect()
}

/// The GPU-domain readings of one scrape: a whole GPU is one zone (`gpu<index>`, its energy
/// counter when exported, else its power); a GPU split into MIG instances is one zone per
/// instance (`gpu<index>-mig<id>`, path `<UUID>/<id>`) holding the GPU's power divided by the
/// instances' graphics-engine activity (equally when none is active), since DCGM meters power
/// per physical GPU only. dcgm-exporter names no processes, so the shares are empty: the
/// active energy stays unattributed rather than following CPU time. `idle` is each zone's idle
/// power (a MIG instance gets its part of the GPU's).
pub fn readings(entities: &[DcgmEntity], idle: Watts) -> Vec<ZoneReading> {
    let mut out = Vec::new();
    let mut gpus: BTreeMap<u32, (Option<&DcgmEntity>, Vec<&DcgmEntity>)> = BTreeMap::new();
    for e in entities {
        let slot = gpus.entry(e.gpu).or_default();
        match e.instance {
            None => slot.0 = Some(e),
            Some(_) => slot.1.push(e),
        }
    }
    let device = |e: &DcgmEntity, uuid: String, name: String| {
        Some(Arc::new(DeviceInfo {
            index: e.gpu,
            uuid: uuid.into(),
            name: name.into(),
            vendor: "nvidia".into(),
        }))
    };
    for (gpu, (whole, instances)) in gpus {
        if instances.is_empty() {
            let Some(e) = whole else { continue };
            let (zone, path): (Arc<str>, Arc<str>) =
                (super::zone_name(gpu).into(), e.uuid.as_str().into());
            let mut r = match (e.energy_millijoules, e.power_watts) {
                (Some(mj), _) if mj.is_finite() && mj >= 0.0 => {
                    ZoneReading::energy(zone, path, MicroJoules((mj * 1000.0) as u64), None)
                }
                (_, Some(w)) if w.is_finite() && w >= 0.0 => {
                    ZoneReading::power(zone, path, Watts(w))
                }
                _ => continue,
            };
            r.shares = Some(Vec::new().into());
            r.idle = Some(idle);
            r.device = device(e, e.uuid.clone(), e.model.clone());
            out.push(r);
            continue;
        }
        // Every instance carries its GPU's power; take it from the first that has it.
        let Some(power) = instances
            .iter()
            .find_map(|e| e.power_watts)
            .filter(|w| w.is_finite() && *w >= 0.0)
        else {
            continue;
        };
        let activity: Vec<f64> = instances
            .iter()
            .map(|e| {
                e.engine_active
                    .filter(|a| a.is_finite() && *a > 0.0)
                    .unwrap_or(0.0)
            })
            .collect();
        let total: f64 = activity.iter().sum();
        let n = instances.len() as f64;
        for (e, a) in instances.iter().zip(&activity) {
            let part = if total > 0.0 { a / total } else { 1.0 / n };
            let id = e.instance.unwrap_or_default();
            let uuid = format!("{}/{id}", e.uuid);
            let name = match &e.profile {
                Some(p) => format!("{} MIG {p}", e.model),
                None => e.model.clone(),
            };
            let mut r = ZoneReading::power(
                format!("{}-mig{id}", super::zone_name(gpu)).into(),
                uuid.as_str().into(),
                Watts(power * part),
            );
            r.shares = Some(Vec::new().into());
            r.idle = Some(Watts(idle.0 / n));
            r.device = device(e, uuid, name);
            out.push(r);
        }
    }
    out
}

/// A sample line's label pairs, values unescaped.
type Labels<'a> = Vec<(&'a str, String)>;

/// `name{k="v",...} value [timestamp]` → (name, labels, value).
fn split_sample(line: &str) -> Option<(&str, Labels<'_>, f64)> {
    let (name, rest) = match line.find('{') {
        Some(i) => (&line[..i], &line[i + 1..]),
        None => {
            let mut parts = line.split_whitespace();
            let name = parts.next()?;
            let value = parts.next()?.parse().ok()?;
            return Some((name, Vec::new(), value));
        }
    };
    let mut labels = Vec::new();
    let mut rest = rest;
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            rest = after;
            break;
        }
        let eq = rest.find('=')?;
        let key = rest[..eq].trim();
        let mut chars = rest[eq + 1..].char_indices();
        if chars.next()?.1 != '"' {
            return None;
        }
        let mut value = String::new();
        let mut end = None;
        let mut escaped = false;
        for (i, c) in chars {
            match (escaped, c) {
                (true, 'n') => {
                    value.push('\n');
                    escaped = false;
                }
                (true, c) => {
                    value.push(c);
                    escaped = false;
                }
                (false, '\\') => escaped = true,
                (false, '"') => {
                    end = Some(eq + 1 + i + 1);
                    break;
                }
                (false, c) => value.push(c),
            }
        }
        labels.push((key, value));
        rest = &rest[end?..];
    }
    let value = rest.split_whitespace().next()?.parse().ok()?;
    Some((name.trim(), labels, value))
}

#[cfg(test)]
mod tests {
    use super::*;
    use kepler_core::ZoneSample;

    const SAMPLE: &str = include_str!("../../tests/data/dcgm-exporter-mig.txt");

    #[test]
    fn parses_whole_gpus_and_mig_instances() {
        let entities = parse(SAMPLE);
        let whole: Vec<_> = entities.iter().filter(|e| e.instance.is_none()).collect();
        let mig: Vec<_> = entities.iter().filter(|e| e.instance.is_some()).collect();
        assert_eq!(whole.len(), 1, "{entities:#?}");
        assert_eq!(whole[0].gpu, 1);
        assert_eq!(whole[0].power_watts, Some(61.2));
        assert_eq!(whole[0].energy_millijoules, Some(987654321.0));
        assert_eq!(mig.len(), 2);
        assert_eq!(mig[0].gpu, 0);
        assert_eq!(mig[0].instance, Some(1));
        assert_eq!(mig[0].profile.as_deref(), Some("1g.10gb"));
        assert_eq!(mig[0].model, "NVIDIA A100-SXM4-80GB");
        assert_eq!(mig[0].uuid, "GPU-5a4d3c1e-0000-1111-2222-333344445555");
        assert_eq!(mig[0].power_watts, Some(88.5));
        assert_eq!(mig[0].energy_millijoules, Some(123456789.0));
        assert_eq!(mig[0].engine_active, Some(0.25));
        assert_eq!(mig[1].instance, Some(2));
        assert_eq!(mig[1].engine_active, Some(0.75));
    }

    #[test]
    fn mig_instances_split_their_gpus_power_by_engine_activity() {
        let r = readings(&parse(SAMPLE), Watts(40.0));
        let zones: Vec<&str> = r.iter().map(|r| &*r.zone).collect();
        assert_eq!(zones, ["gpu0-mig1", "gpu0-mig2", "gpu1"]);
        let power = |i: usize| match r[i].sample {
            ZoneSample::Power(w) => w.0,
            ZoneSample::Energy { .. } => f64::NAN,
        };
        // 88.5 W split 0.25 : 0.75.
        assert!((power(0) - 22.125).abs() < 1e-9);
        assert!((power(1) - 66.375).abs() < 1e-9);
        assert_eq!(r[0].idle, Some(Watts(20.0)));
        assert_eq!(&*r[1].path, "GPU-5a4d3c1e-0000-1111-2222-333344445555/2");
        let d = r[1].device.as_ref().unwrap();
        assert_eq!(
            (d.index, &*d.name),
            (0, "NVIDIA A100-SXM4-80GB MIG 3g.40gb")
        );
        // A whole GPU with an energy counter uses it (mJ -> µJ).
        assert_eq!(
            r[2].sample,
            ZoneSample::Energy {
                counter: MicroJoules(987_654_321_000),
                max: None
            }
        );
        assert!(r
            .iter()
            .all(|r| r.shares.as_ref().is_some_and(|s| s.is_empty())));
    }

    #[test]
    fn garbage_lines_are_skipped() {
        let text = "DCGM_FI_DEV_POWER_USAGE{gpu=\"0\" 12\nDCGM_FI_DEV_POWER_USAGE{gpu=\"x\"} 1\n\
                    DCGM_FI_DEV_POWER_USAGE{gpu=\"2\",modelName=\"a\\\"b\"} nope\n\
                    DCGM_FI_DEV_POWER_USAGE{gpu=\"3\",modelName=\"a\\\"b\"} 7 1700000000\n";
        let e = parse(text);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].gpu, 3);
        assert_eq!(e[0].model, "a\"b");
        assert_eq!(e[0].power_watts, Some(7.0));
    }
}

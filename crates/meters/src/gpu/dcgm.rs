//! dcgm-exporter's Prometheus text, for MIG: with MIG on, NVML's per-process utilisation is
//! unavailable, and dcgm-exporter labels each GPU instance (`GPU_I_ID`, `GPU_I_PROFILE`).
//! This module turns one scrape into per-device and per-instance records; the GPU power fields
//! (`DCGM_FI_DEV_POWER_USAGE`, W; `DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION`, mJ) are per physical
//! GPU, and `DCGM_FI_PROF_GR_ENGINE_ACTIVE` (0..1) per instance tells how the GPU's power
//! divides among its instances.

use std::collections::BTreeMap;

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

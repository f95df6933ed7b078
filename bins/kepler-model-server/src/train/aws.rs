//! RAPL-like (`package`, `dram`) models from the AWS instance dataset
//! (`ccf/data/aws-instances.csv`): one node type per platform (CPU model, platform vCPUs,
//! platform memory), one logarithmic curve per component through its idle/10/50/100 % watts.

use std::collections::BTreeMap;

use anyhow::{bail, Context, Result};
use kepler_models::builtin::{
    cpu_match_key, Affine, CurveParams, Fallback, FallbackCurve, FamilyIndex, NodeType, LOG_TRAINER,
};

use super::{processor_name, Skipped};
use kepler_models::fit::{fit_log_curve, mdape, median, round_digits, theil_sen};

pub const FILE: &str = "ccf/data/aws-instances.csv";

/// Load levels of the dataset, as utilisation.
const LOADS: [(&str, f64); 4] = [("Idle", 0.0), ("10%", 0.1), ("50%", 0.5), ("100%", 1.0)];

/// One instance row, scaled up to its whole platform.
struct Row {
    instance: String,
    cpu: String,
    instance_vcpu: f64,
    instance_mem: f64,
    platform_vcpu: u32,
    platform_mem: f64,
    /// Platform watts at the [`LOADS`]: the instance's share times platform/instance.
    package: [f64; 4],
    dram: [f64; 4],
}

/// "0,29" → 0.29: the dataset writes decimal commas.
fn number(text: &str) -> Option<f64> {
    text.trim().replace(',', ".").parse().ok()
}

fn read_row(rec: &csv::StringRecord, col: &dyn Fn(&str) -> Option<usize>) -> Result<Row, String> {
    let get = |name: &str| -> Result<&str, String> {
        col(name)
            .and_then(|i| rec.get(i))
            .ok_or_else(|| format!("no {name} column"))
    };
    let num = |name: &str| -> Result<f64, String> {
        let t = get(name)?;
        number(t)
            .filter(|v| v.is_finite() && *v >= 0.0)
            .ok_or_else(|| format!("{name} is {t:?}"))
    };
    let instance_vcpu = num("Instance vCPU")?;
    let platform_vcpu = num("Platform Total Number of vCPU")?;
    let instance_mem = num("Instance Memory (in GB)")?;
    let platform_mem = num("Platform Memory (in GB)")?;
    if instance_vcpu <= 0.0 || platform_vcpu < instance_vcpu || platform_vcpu.fract() != 0.0 {
        return Err(format!(
            "instance vCPUs {instance_vcpu} do not fit platform vCPUs {platform_vcpu}"
        ));
    }
    // t1.micro says 613 GB (for 0.613): an instance cannot have more memory than its host.
    if instance_mem <= 0.0 || platform_mem < instance_mem {
        return Err(format!(
            "instance memory {instance_mem} GB does not fit platform memory {platform_mem} GB"
        ));
    }
    let vcpu_k = platform_vcpu / instance_vcpu;
    let mem_k = platform_mem / instance_mem;
    let mut package = [0.0; 4];
    let mut dram = [0.0; 4];
    for (i, (load, _)) in LOADS.iter().enumerate() {
        // The dataset gives an instance its vCPU share of package power and its memory
        // share of DRAM power, so the platform is the instance scaled back up.
        if let (Some(p), Some(d)) = (package.get_mut(i), dram.get_mut(i)) {
            *p = num(&format!("PkgWatt @ {load}"))? * vcpu_k;
            *d = num(&format!("RAMWatt @ {load}"))? * mem_k;
        }
    }
    Ok(Row {
        instance: get("Instance type")?.trim().to_string(),
        cpu: get("Platform CPU Name")?.trim().to_string(),
        instance_vcpu,
        instance_mem,
        // Exact: checked integral above, and vCPU counts are small.
        platform_vcpu: platform_vcpu as u32,
        platform_mem,
        package,
        dram,
    })
}

/// Idle/full ends and fitted curvature through the four points; also the largest miss at
/// the two inner points, in W.
fn curve(points: &[f64; 4]) -> Result<(CurveParams, f64)> {
    let at_loads: Vec<(f64, f64)> = LOADS
        .iter()
        .zip(points)
        .map(|((_, u), p)| (*u, *p))
        .collect();
    fit_log_curve(&at_loads).context("a curve needs its idle and full-load points")
}

pub fn train(csv_text: &str, skipped: &mut Skipped) -> Result<FamilyIndex> {
    let mut reader = csv::Reader::from_reader(csv_text.as_bytes());
    let header = reader.headers().context("reading the AWS header")?.clone();
    let col = |name: &str| header.iter().position(|h| h.trim() == name);
    let mut groups: BTreeMap<(String, u32, u64), Vec<Row>> = BTreeMap::new();
    let mut total = 0;
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.with_context(|| format!("AWS row {}", i + 2))?;
        total += 1;
        let row = match read_row(&rec, &col) {
            Ok(r) => r,
            Err(why) => {
                skipped.add(FILE, rec.get(0).unwrap_or("?"), &why);
                continue;
            }
        };
        let Some(key) = cpu_match_key(&processor_name(&row.cpu)) else {
            skipped.add(FILE, &row.instance, "CPU name has no model number");
            continue;
        };
        let mem_bits = row.platform_mem.to_bits();
        groups
            .entry((key, row.platform_vcpu, mem_bits))
            .or_default()
            .push(row);
    }
    if groups.is_empty() {
        bail!("{FILE}: no usable rows");
    }
    let mut types = Vec::new();
    for rows in groups.values() {
        types.push(node_type(rows)?);
    }
    // Ids in a stable order independent of the CSV's: processor, cores, memory.
    types.sort_by(|a, b| {
        (a.processor.as_str(), a.cores)
            .cmp(&(b.processor.as_str(), b.cores))
            .then(a.memory_gb.total_cmp(&b.memory_gb))
    });
    for (id, t) in types.iter_mut().enumerate() {
        t.id = u32::try_from(id).context("too many node types")?;
    }
    let used: usize = types.iter().map(|t| t.members.len()).sum();
    let fallback = fallback(&types)?;
    Ok(FamilyIndex {
        pipeline: "aws".into(),
        source: "rapl-sysfs".into(),
        trainer: LOG_TRAINER.into(),
        data: vec![
            format!(
                "{FILE}: {total} instance rows, {used} used, {} node types",
                types.len()
            ),
            "platform watts = instance PkgWatt × platform/instance vCPUs, RAMWatt × \
             platform/instance memory; each type's numbers from its largest instance"
                .into(),
        ],
        types,
        fallback,
        // Filled in by `generate`: it needs the whole index.
        expected_error: BTreeMap::new(),
        withheld: BTreeMap::new(),
    })
}

fn node_type(rows: &[Row]) -> Result<NodeType> {
    // The largest instance: the dataset rounds instance watts to 0.01 W, and the scale-up
    // multiplies that rounding by platform/instance size.
    let rep = rows
        .iter()
        .max_by(|a, b| {
            a.instance_vcpu
                .total_cmp(&b.instance_vcpu)
                .then(a.instance_mem.total_cmp(&b.instance_mem))
                .then(b.instance.cmp(&a.instance))
        })
        .context("empty node type")?;
    let (package, miss_p) = curve(&rep.package)?;
    let (dram, miss_d) = curve(&rep.dram)?;
    let mut members: Vec<String> = rows.iter().map(|r| r.instance.clone()).collect();
    members.sort();
    Ok(NodeType {
        id: 0,
        processor: processor_name(&rep.cpu),
        cpu: rep.cpu.clone(),
        cores: rep.platform_vcpu,
        chips: None,
        memory_gb: rep.platform_mem,
        frequency_mhz: None,
        members,
        fit_error_w: Some(BTreeMap::from([
            ("package".into(), round_digits(miss_p, 3)),
            ("dram".into(), round_digits(miss_d, 3)),
        ])),
        components: BTreeMap::from([("package".into(), package), ("dram".into(), dram)]),
    })
}

/// Package: affine in vCPUs over platforms (CPU model × vCPUs, memory variants counted
/// once); dram: proportional to memory, median W/GB over node types.
pub(crate) fn fallback(types: &[NodeType]) -> Result<Fallback> {
    let comp = |t: &NodeType, name: &str| t.components.get(name).copied();
    let mut platforms: BTreeMap<(String, u32), CurveParams> = BTreeMap::new();
    for t in types {
        if let Some(p) = comp(t, "package") {
            platforms.entry((t.processor.clone(), t.cores)).or_insert(p);
        }
    }
    let idle: Vec<(f64, f64)> = platforms
        .iter()
        .map(|((_, n), c)| (f64::from(*n), c.idle_w))
        .collect();
    let max: Vec<(f64, f64)> = platforms
        .iter()
        .map(|((_, n), c)| (f64::from(*n), c.max_w))
        .collect();
    let (i0, i1) = theil_sen(&idle).context("no package data")?;
    let (m0, m1) = theil_sen(&max).context("no package data")?;
    let per_cpu = |pts: &[(f64, f64)]| median(pts.iter().map(|(n, w)| w / n)).unwrap_or(0.0);
    let (pi, pm) = (per_cpu(&idle), per_cpu(&max));
    let package_b = median(platforms.values().filter_map(|c| c.log_b)).context("no shape")?;
    let drams: Vec<(f64, CurveParams)> = types
        .iter()
        .filter_map(|t| comp(t, "dram").map(|c| (t.memory_gb, c)))
        .collect();
    let dram_idle = median(drams.iter().map(|(m, c)| c.idle_w / m)).context("no dram data")?;
    let dram_max = median(drams.iter().map(|(m, c)| c.max_w / m)).context("no dram data")?;
    let dram_b = median(drams.iter().filter_map(|(_, c)| c.log_b)).context("no dram shape")?;
    let gb_per_cpu =
        median(types.iter().map(|t| t.memory_gb / f64::from(t.cores))).context("no memory data")?;
    let r = |x: f64| round_digits(x, 6);
    let affine = |fixed: f64, per_cpu: f64, per_gb: f64| Affine {
        fixed_w: r(fixed),
        per_cpu_w: r(per_cpu),
        per_gb_w: r(per_gb),
    };
    Ok(Fallback {
        memory_gb_per_cpu: r(gb_per_cpu),
        components: BTreeMap::from([
            (
                "package".into(),
                FallbackCurve {
                    idle: affine(i0, i1, 0.0),
                    max: affine(m0, m1, 0.0),
                    log_b: Some(r(package_b)),
                },
            ),
            (
                "dram".into(),
                FallbackCurve {
                    idle: affine(0.0, 0.0, dram_idle),
                    max: affine(0.0, 0.0, dram_max),
                    log_b: Some(r(dram_b)),
                },
            ),
        ]),
        derivation: vec![
            format!(
                "package idle and max: Theil-Sen lines in vCPUs over {} platforms (CPU model x \
                 vCPUs); in-sample median abs. error {:.1} % idle, {:.1} % max, against {:.1} % \
                 and {:.1} % for watts proportional to vCPUs (median {:.3} and {:.3} W/vCPU)",
                platforms.len(),
                mdape(&idle, |n| i0 + i1 * n),
                mdape(&max, |n| m0 + m1 * n),
                mdape(&idle, |n| pi * n),
                mdape(&max, |n| pm * n),
                pi,
                pm
            ),
            format!(
                "package shape: median curvature b of the {} platforms",
                platforms.len()
            ),
            format!(
                "dram: proportional to memory (the dataset's dram watts are W/GB x GB within a \
                 platform), median W/GB over {} node types; shape: their median b",
                drams.len()
            ),
            "memory_gb_per_cpu: median GB per vCPU over the node types".into(),
        ],
    })
}

//! Choosing a built-in model for a machine spec (rules in the [`super`] module docs).

use std::collections::BTreeMap;

use super::clamp::Adjusted;
use super::index::{
    embedded_index, trainer_for, weight_json, BuiltinIndex, CurveParams, FamilyIndex, NodeType,
    StatedError,
};
use super::spec::{cpu_key, names_core_only, MachineSpec};
use super::BuiltinError;
use crate::Predictor;

/// Which kind of power a model estimates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum BuiltinFamily {
    /// RAPL-like: `package` and `dram` (trained on the AWS instance data).
    Rapl,
    /// ACPI-like whole-machine power: `platform` (trained on SPECpower results).
    Platform,
}

impl BuiltinFamily {
    /// The components the family's models output.
    pub fn components(self) -> &'static [&'static str] {
        match self {
            BuiltinFamily::Rapl => &["package", "dram"],
            BuiltinFamily::Platform => &["platform"],
        }
    }

    fn of(self, index: &BuiltinIndex) -> &FamilyIndex {
        match self {
            BuiltinFamily::Rapl => &index.rapl,
            BuiltinFamily::Platform => &index.platform,
        }
    }
}

impl std::fmt::Display for BuiltinFamily {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            BuiltinFamily::Rapl => "rapl",
            BuiltinFamily::Platform => "platform",
        })
    }
}

impl std::str::FromStr for BuiltinFamily {
    type Err = BuiltinError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.to_ascii_lowercase().as_str() {
            "rapl" => Ok(BuiltinFamily::Rapl),
            "platform" | "acpi" => Ok(BuiltinFamily::Platform),
            _ => Err(BuiltinError::UnknownFamily(s.to_string())),
        }
    }
}

/// How well the chosen model fits the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum MatchQuality {
    /// Same CPU model and logical CPU count (and sockets, when both are known).
    Exact,
    /// Same CPU model, different size: the nearest node type scaled by the core ratio.
    SameCpuScaled,
    /// Only the CPU core design matched: the host names a core (arm64 cpuinfo says
    /// `ARM Neoverse-N1`, not the chip), and the node type is a chip built on it
    /// (`Graviton2`), used as [`MatchQuality::Exact`] or [`MatchQuality::SameCpuScaled`]
    /// would (the reason says which). Other chips share the core (Ampere Altra), so the
    /// model may not be the host's.
    SameCoreDesign,
    /// No node type has this CPU: the generic size-scaled fallback.
    Fallback,
}

impl std::fmt::Display for MatchQuality {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            MatchQuality::Exact => "exact",
            MatchQuality::SameCpuScaled => "same-cpu-scaled",
            MatchQuality::SameCoreDesign => "same-core-design",
            MatchQuality::Fallback => "fallback",
        })
    }
}

/// The chosen model and why.
#[derive(Debug)]
pub struct BuiltinSelection {
    /// Input `bpf_cpu_time_ms`; outputs [`BuiltinFamily::components`].
    pub predictor: Box<dyn Predictor>,
    /// `builtin/aws/LogarithmicRegressionTrainer_17`, `builtin/specpower/fallback`.
    pub model_name: String,
    pub matched: MatchQuality,
    /// One line for logs and `kepler probe`: what matched, what was scaled and by how much.
    pub reason: String,
    /// The model-DB weight JSON the predictor was loaded from (for an unscaled exact match,
    /// byte for byte the committed file).
    pub model_json: String,
    /// For a guest ([`select_builtin_for_guest`]): the logical CPUs of the host the model
    /// describes (its feature scale is `1000 ×` this). `None` for bare metal.
    pub guest_host_cpus: Option<u32>,
    /// Component → the family's expected error on machines it was not trained on
    /// ([`FamilyIndex::expected_error`]), for the components this model outputs.
    pub expected_error: BTreeMap<String, StatedError>,
    /// Components of this model without a trustworthy estimate on this host, and why
    /// ([`BuiltinSelection::without_withheld`] leaves them out).
    pub withheld: BTreeMap<String, String>,
}

impl BuiltinSelection {
    /// The selection without its [`BuiltinSelection::withheld`] components: the predictor no
    /// longer outputs them, they state no error, and the reason says why they are missing.
    /// This is what an agent exports; the model files and [`BuiltinSelection::model_json`]
    /// keep every component.
    pub fn without_withheld(mut self) -> BuiltinSelection {
        if self.withheld.is_empty() {
            return self;
        }
        let drop: Vec<&str> = self.withheld.keys().map(String::as_str).collect();
        self.predictor = Box::new(Adjusted::without(self.predictor, &drop));
        self.expected_error
            .retain(|c, _| !drop.contains(&c.as_str()));
        let why: Vec<String> = self
            .withheld
            .iter()
            .map(|(c, why)| format!("no {c} estimate: {why}"))
            .collect();
        self.reason = format!("{}; {}", self.reason, why.join("; "));
        self
    }
}

/// RAPL has a DRAM domain on Intel server CPUs only: AMD's RAPL registers cover package and
/// cores (DESIGN §6), Arm has no RAPL. A RAPL-like DRAM estimate on other CPUs describes a
/// reading the machine does not have.
fn dram_domain_withheld(spec: &MachineSpec) -> Option<String> {
    let intel = spec.processor.starts_with("intel") || spec.processor.contains("xeon");
    (!intel).then(|| {
        format!(
            "RAPL has a DRAM domain on Intel CPUs only, and processor {:?} is not one",
            spec.processor
        )
    })
}

/// Chooses the built-in model of `family` for `spec` from the embedded index.
pub fn select_builtin(
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    select_in(embedded_index()?, spec, family)
}

/// The fallback of `family` for `spec`, whatever the CPU (for comparisons and tests).
pub fn builtin_fallback(
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    fallback_in(embedded_index()?, spec, family)
}

/// [`builtin_fallback`] over a given index (the trainer validates a fresh one).
pub fn fallback_in(
    index: &BuiltinIndex,
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    spec.validate()?;
    fallback(family.of(index), spec, "fallback requested".into()).map(|s| host_notes(s, spec))
}

/// [`select_builtin`] over a given index.
pub fn select_in(
    index: &BuiltinIndex,
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    spec.validate()?;
    select_by_rules(index, spec, family).map(|s| host_notes(s, spec))
}

/// What every selection gets from the host's own spec: the DRAM domain rule, and which CPU
/// count sized the model when the host's physical and logical counts differ (so a spec read
/// the wrong way round shows in `kepler probe`).
fn host_notes(mut sel: BuiltinSelection, spec: &MachineSpec) -> BuiltinSelection {
    let has_dram = sel.predictor.components().iter().any(|c| c == "dram");
    if has_dram && !sel.withheld.contains_key("dram") {
        if let Some(why) = dram_domain_withheld(spec) {
            sel.withheld.insert("dram".into(), why);
        }
    }
    if let Some(p) = spec.physical_cores.filter(|p| *p != spec.logical_cores) {
        sel.reason = format!(
            "{}; sized by the host's {} logical CPUs (it has {p} physical cores); utilisation \
             held to [0, 1]",
            sel.reason, spec.logical_cores
        );
    }
    sel
}

fn select_by_rules(
    index: &BuiltinIndex,
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    let fam = family.of(index);
    let Some(key) = cpu_key(&spec.processor) else {
        let why = format!(
            "processor {:?} names no CPU model (no model number)",
            spec.processor
        );
        return fallback(fam, spec, why);
    };
    let same_cpu: Vec<&NodeType> = fam
        .types
        .iter()
        .filter(|t| cpu_key(&t.processor).as_deref() == Some(key.as_str()))
        .collect();
    let cores = spec.logical_cores;
    let exact = same_cpu
        .iter()
        .copied()
        .filter(|t| t.cores == cores && chips_agree(t.chips, spec.chips))
        .min_by(|a, b| {
            closeness(spec, a)
                .total_cmp(&closeness(spec, b))
                .then(a.id.cmp(&b.id))
        });
    if let Some(t) = exact {
        return from_type(fam, t, spec, MatchQuality::Exact).map(|s| core_only(s, spec, t));
    }
    let nearest = same_cpu.iter().copied().min_by(|a, b| {
        core_distance(cores, a)
            .total_cmp(&core_distance(cores, b))
            .then(chips_agree(b.chips, spec.chips).cmp(&chips_agree(a.chips, spec.chips)))
            .then(closeness(spec, a).total_cmp(&closeness(spec, b)))
            .then(a.id.cmp(&b.id))
    });
    match nearest {
        Some(t) => {
            from_type(fam, t, spec, MatchQuality::SameCpuScaled).map(|s| core_only(s, spec, t))
        }
        None => {
            let why = format!(
                "no {} node type has CPU {:?} (match key {key:?}; the data covers {} CPU models)",
                fam.pipeline,
                spec.processor,
                distinct_cpus(fam)
            );
            fallback(fam, spec, why)
        }
    }
}

/// Chooses the built-in model of `family` for a **guest** (virtual machine) with spec `spec`,
/// from the embedded index; [`select_builtin`] is for bare metal.
///
/// The feature is absolute (1000 busy ms/s = one busy CPU), so a guest's busy vCPUs are
/// busy CPUs of its host, and the guest's dynamic power is the host's:
/// `predict(x) − predict(0)` of the host's model at the guest's busy time `x`. The model
/// returned is that host's, unscaled (feature scale `1000 ×` host CPUs); its `predict(0)`
/// is the host's idle, which is not the guest's, so only the dynamic part is meaningful
/// (the agent reports DynPower inside a VM). The host is (rules in the [`super`] docs):
///
/// - the guest's CPU is in the data: the node type of that CPU at least as large as the
///   guest, nearest to the family's typical host size ([`FamilyIndex::typical_host_cpus`]),
///   the memory variant by the guest's GB per vCPU; unscaled, [`MatchQuality::Exact`]. A
///   guest larger than every node type of its CPU gets the largest scaled up to its size
///   ([`MatchQuality::SameCpuScaled`]).
/// - otherwise: the fallback at the typical host size (or the guest's, when larger), with
///   the guest's GB per vCPU ([`MatchQuality::Fallback`]).
pub fn select_builtin_for_guest(
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    select_for_guest_in(embedded_index()?, spec, family)
}

/// [`select_builtin_for_guest`] over a given index.
pub fn select_for_guest_in(
    index: &BuiltinIndex,
    spec: &MachineSpec,
    family: BuiltinFamily,
) -> Result<BuiltinSelection, BuiltinError> {
    spec.validate()?;
    let fam = family.of(index);
    let vcpus = spec.logical_cores;
    // A family without node types (only a hand-edited index) has no typical size: the
    // guest's own is the only one left.
    let typical = fam.typical_host_cpus().unwrap_or(vcpus);
    let typical_note = format!(
        "the median of the {} {} node types",
        fam.types.len(),
        fam.pipeline
    );
    let key = cpu_key(&spec.processor);
    let same_cpu: Vec<&NodeType> = fam
        .types
        .iter()
        .filter(|t| key.is_some() && cpu_key(&t.processor) == key)
        .collect();
    let large_enough = same_cpu.iter().copied().filter(|t| t.cores >= vcpus);
    let host_of = |t: &NodeType| closeness(&host_equivalent(spec, t.cores), t);
    let nearest_typical = large_enough.min_by(|a, b| {
        core_distance(typical, a)
            .total_cmp(&core_distance(typical, b))
            .then(host_of(a).total_cmp(&host_of(b)))
            .then(a.id.cmp(&b.id))
    });
    let largest = same_cpu.iter().copied().min_by(|a, b| {
        b.cores
            .cmp(&a.cores)
            .then(host_of(a).total_cmp(&host_of(b)))
            .then(a.id.cmp(&b.id))
    });
    let (mut selection, host, host_cpus) = match (nearest_typical, largest) {
        (Some(t), _) => {
            // The node type itself is the host: its own spec, so nothing is scaled and the
            // model is the committed file.
            let host = MachineSpec {
                processor: t.processor.clone(),
                logical_cores: t.cores,
                physical_cores: None,
                chips: t.chips.unwrap_or(0),
                memory_gb: t.memory_gb,
                frequency_mhz: t.frequency_mhz,
            };
            let sizes: std::collections::BTreeSet<u32> = same_cpu
                .iter()
                .filter(|o| o.cores >= vcpus)
                .map(|o| o.cores)
                .collect();
            let size = if sizes.len() > 1 {
                format!("the size nearest {typical}, {typical_note}")
            } else {
                "the only size at least the guest's".to_string()
            };
            let why = format!(
                "{} node type {} of the guest's CPU ({} logical CPUs, {size}{})",
                fam.pipeline,
                t.id,
                t.cores,
                memory_choice(spec, &same_cpu, t)
            );
            let chosen = core_only(from_type(fam, t, &host, MatchQuality::Exact)?, spec, t);
            (chosen, why, t.cores)
        }
        (None, Some(t)) => {
            let host = host_equivalent(spec, vcpus);
            let why = format!(
                "one of the guest's CPU and own size, {vcpus} logical CPUs (the largest {} \
                 node type of that CPU has {})",
                fam.pipeline, t.cores
            );
            let chosen = core_only(
                from_type(fam, t, &host, MatchQuality::SameCpuScaled)?,
                spec,
                t,
            );
            (chosen, why, vcpus)
        }
        (None, None) => {
            let cpus = typical.max(vcpus);
            let host = host_equivalent(spec, cpus);
            let size = if cpus == typical {
                format!("{cpus} logical CPUs ({typical_note})")
            } else {
                format!("{cpus} logical CPUs (the guest's own: more than the typical {typical})")
            };
            let memory = if host.memory_gb > 0.0 {
                format!(
                    ", {:.0} GB (the guest's {:.2} GB per vCPU)",
                    host.memory_gb,
                    spec.memory_gb / f64::from(vcpus)
                )
            } else {
                String::new()
            };
            let why = match &key {
                None => format!(
                    "processor {:?} names no CPU model (no model number)",
                    spec.processor
                ),
                Some(k) => format!(
                    "no {} node type has CPU {:?} (match key {k:?})",
                    fam.pipeline, spec.processor
                ),
            };
            let host_note = format!("a generic one of {size}{memory}");
            (fallback(fam, &host, why)?, host_note, cpus)
        }
    };
    selection.reason = format!(
        "guest (virtual machine) with {vcpus} vCPUs: its busy CPU time is evaluated on an \
         assumed host, dynamic part only (the host's idle is not the guest's); host: {host}. \
         Host model: {}",
        selection.reason
    );
    selection.guest_host_cpus = Some(host_cpus);
    Ok(host_notes(selection, spec))
}

/// The guest's spec grown to a host of `cores` logical CPUs with the guest's memory per vCPU
/// (an instance family's GB per vCPU is its platform's: 2 for c5, 4 for m5, 8 for r5 in the
/// AWS data); memory stays unknown (0) when the guest's is. Sockets are unknown: a guest's
/// say nothing about its host's.
fn host_equivalent(spec: &MachineSpec, cores: u32) -> MachineSpec {
    let memory = spec.memory_gb / f64::from(spec.logical_cores) * f64::from(cores);
    MachineSpec {
        processor: spec.processor.clone(),
        logical_cores: cores,
        physical_cores: None,
        chips: 0,
        // Growing an absurd memory figure (a spec file's 1e308 GB) can overflow; such a
        // figure says nothing, so it is taken as unknown rather than made infinite.
        memory_gb: if memory.is_finite() { memory } else { 0.0 },
        frequency_mhz: spec.frequency_mhz,
    }
}

/// Why this memory variant, when the CPU and size have several.
fn memory_choice(spec: &MachineSpec, same_cpu: &[&NodeType], t: &NodeType) -> String {
    let variants = same_cpu
        .iter()
        .filter(|o| o.cores == t.cores && o.chips == t.chips)
        .count();
    if variants < 2 {
        String::new()
    } else if spec.memory_gb > 0.0 {
        format!(
            "; {} GB of {variants} memory variants, nearest the guest's {:.2} GB per vCPU",
            t.memory_gb,
            spec.memory_gb / f64::from(spec.logical_cores)
        )
    } else {
        format!(
            "; {} GB of {variants} memory variants (guest memory unknown)",
            t.memory_gb
        )
    }
}

fn distinct_cpus(fam: &FamilyIndex) -> usize {
    fam.types
        .iter()
        .filter_map(|t| cpu_key(&t.processor))
        .collect::<std::collections::BTreeSet<_>>()
        .len()
}

/// Sockets only disagree when both sides know them.
fn chips_agree(model: Option<u32>, host: u32) -> bool {
    host == 0 || model.is_none_or(|m| m == host)
}

fn core_distance(cores: u32, t: &NodeType) -> f64 {
    (f64::from(cores) / f64::from(t.cores)).ln().abs()
}

/// How far memory and frequency are (log ratios; 0 when the host does not know).
fn closeness(spec: &MachineSpec, t: &NodeType) -> f64 {
    let mem = if spec.memory_gb > 0.0 && t.memory_gb > 0.0 {
        (spec.memory_gb / t.memory_gb).ln().abs()
    } else {
        0.0
    };
    let freq = match (spec.frequency_mhz, t.frequency_mhz) {
        (Some(h), Some(m)) if h > 0.0 && m > 0.0 => (h / m).ln().abs(),
        _ => 0.0,
    };
    // Memory first: it changes dram power; frequency only breaks ties.
    mem * 1e3 + freq
}

/// Memory ratios within this factor count as equal: `MemTotal` is 1–3 % below the installed
/// memory the data states (the kernel keeps some), which is no reason to rescale.
const SAME_MEMORY: f64 = 1.05;

/// host memory / model memory, 1 when close, the core ratio when the host's is unknown
/// (same memory per CPU assumed).
fn memory_factor(spec: &MachineSpec, t: &NodeType, core_k: f64) -> f64 {
    if spec.memory_gb <= 0.0 || t.memory_gb <= 0.0 {
        return core_k;
    }
    let k = spec.memory_gb / t.memory_gb;
    if k.ln().abs() <= SAME_MEMORY.ln() {
        1.0
    } else {
        k
    }
}

/// Marks a selection whose CPU matched only by core design (see
/// [`MatchQuality::SameCoreDesign`]): the host names a core, the node type a chip.
fn core_only(mut sel: BuiltinSelection, spec: &MachineSpec, t: &NodeType) -> BuiltinSelection {
    if names_core_only(&spec.processor) && !names_core_only(&t.processor) {
        sel.reason = format!(
            "only the CPU core design matched: {:?} names a core, not a chip, and {} is built              on it (other chips with this core may draw different power); {}",
            spec.processor, t.cpu, sel.reason
        );
        sel.matched = MatchQuality::SameCoreDesign;
    }
    sel
}

fn from_type(
    fam: &FamilyIndex,
    t: &NodeType,
    spec: &MachineSpec,
    matched: MatchQuality,
) -> Result<BuiltinSelection, BuiltinError> {
    let core_k = f64::from(spec.logical_cores) / f64::from(t.cores);
    let mem_k = memory_factor(spec, t, core_k);
    // dram follows memory (in the AWS data dram watts are proportional to it within a CPU
    // model); everything else follows the CPU count.
    let factor = |component: &str| if component == "dram" { mem_k } else { core_k };
    let mut scaled = Vec::new();
    let components: BTreeMap<String, CurveParams> = t
        .components
        .iter()
        .map(|(name, c)| {
            let k = factor(name);
            if k != 1.0 {
                scaled.push(format!("{name} ×{k:.4}"));
            }
            (name.clone(), c.scaled(k))
        })
        .collect();
    let model_name = format!("builtin/{}/{}_{}", fam.pipeline, fam.trainer, t.id);
    let described = format!(
        "{} node type {} ({}, {} logical CPUs{}, {} GB; from {})",
        fam.pipeline,
        t.id,
        t.cpu,
        t.cores,
        t.chips
            .map(|c| format!(", {c} sockets"))
            .unwrap_or_default(),
        t.memory_gb,
        members_summary(&t.members)
    );
    let reason = match (matched, scaled.is_empty()) {
        (MatchQuality::Exact, true) => format!("exact match: {described}"),
        (MatchQuality::Exact, false) => format!(
            "exact CPU and size match: {described}; host memory {:.0} GiB, so {}",
            spec.memory_gb,
            scaled.join(", ")
        ),
        _ => format!(
            "same CPU model, {} logical CPUs instead of {}: {described}, scaled {}",
            spec.logical_cores,
            t.cores,
            scaled.join(", ")
        ),
    };
    // An unscaled model is the committed file; a scaled one describes the host.
    let machine_spec = if scaled.is_empty() {
        t.machine_spec()
    } else {
        spec.to_spec_value()
    };
    build(
        model_name,
        &format!("{}_{}", fam.trainer, t.id),
        &machine_spec,
        spec.logical_cores,
        &components,
        matched,
        reason,
    )
    .map(|s| family_notes(s, fam))
}

fn members_summary(members: &[String]) -> String {
    match members {
        [] => "no listed source".into(),
        [one] => one.clone(),
        [first, rest @ ..] => format!("{first} and {} more", rest.len()),
    }
}

fn fallback(
    fam: &FamilyIndex,
    spec: &MachineSpec,
    why: String,
) -> Result<BuiltinSelection, BuiltinError> {
    let cpus = f64::from(spec.logical_cores);
    let uses_memory = fam
        .fallback
        .components
        .values()
        .any(|f| f.idle.per_gb_w != 0.0 || f.max.per_gb_w != 0.0);
    let (memory, memory_note) = if spec.memory_gb > 0.0 || !uses_memory {
        (spec.memory_gb, String::new())
    } else {
        let m = fam.fallback.memory_gb_per_cpu * cpus;
        (m, format!(", memory unknown so {m:.0} GB assumed"))
    };
    let mut parts = Vec::new();
    let components: BTreeMap<String, CurveParams> = fam
        .fallback
        .components
        .iter()
        .map(|(name, f)| {
            // An affine fit can dip below zero far outside the data; power cannot.
            let c = CurveParams {
                idle_w: f.idle.at(cpus, memory).max(0.0),
                max_w: f.max.at(cpus, memory).max(0.0),
                log_b: f.log_b,
            };
            parts.push(format!("{name} {:.1}–{:.1} W", c.idle_w, c.max_w));
            (name.clone(), c)
        })
        .collect();
    let reason = format!(
        "{why}; generic fallback for {} logical CPUs{memory_note}: {}",
        spec.logical_cores,
        parts.join(", ")
    );
    build(
        format!("builtin/{}/fallback", fam.pipeline),
        &format!("{}_fallback", trainer_for(&components)),
        &spec.to_spec_value(),
        spec.logical_cores,
        &components,
        MatchQuality::Fallback,
        reason,
    )
    .map(|s| family_notes(s, fam))
}

/// The family's stated errors and withheld components, for the components `sel` outputs.
fn family_notes(mut sel: BuiltinSelection, fam: &FamilyIndex) -> BuiltinSelection {
    let components = sel.predictor.components();
    let has = |c: &String| components.contains(c);
    sel.expected_error = fam
        .expected_error
        .iter()
        .filter(|(c, _)| has(c))
        .map(|(c, e)| (c.clone(), e.clone()))
        .collect();
    sel.withheld = fam
        .withheld
        .iter()
        .filter(|(c, _)| has(c))
        .map(|(c, why)| (c.clone(), why.clone()))
        .collect();
    sel
}

fn build(
    model_name: String,
    stem: &str,
    machine_spec: &serde_json::Value,
    cores: u32,
    components: &BTreeMap<String, CurveParams>,
    matched: MatchQuality,
    reason: String,
) -> Result<BuiltinSelection, BuiltinError> {
    let model_json = weight_json(&model_name, machine_spec, cores, components)?;
    let predictor = crate::load_model_bytes(
        model_json.as_bytes(),
        Some(&format!("{stem}.json")),
        Some(trainer_for(components)),
    )?;
    let predictor = Box::new(Adjusted::utilisation_clamp(predictor, cores));

    Ok(BuiltinSelection {
        predictor,
        model_name,
        matched,
        reason,
        model_json,
        guest_host_cpus: None,
        expected_error: BTreeMap::new(),
        withheld: BTreeMap::new(),
    })
}

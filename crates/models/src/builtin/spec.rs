//! The machine spec a built-in model is chosen by, and its sources: `/proc/cpuinfo` and
//! `/proc/meminfo` text (the caller reads the files; this module does no I/O) or the model
//! server's spec JSON (`{"processor": "intel_xeon_platinum_8259cl", "cores": 96, "chips": 2,
//! "memory": 377, "frequency": 3500}`).

use serde_json::{Map, Value};

use super::procfs::{parse_cpuinfo, parse_meminfo_gib};
use super::BuiltinError;

/// What the host is: enough to pick a built-in model and scale it.
#[derive(Debug, Clone, PartialEq)]
pub struct MachineSpec {
    /// Normalised processor name ([`normalize_processor`]): `intel_xeon_platinum_8259cl`.
    pub processor: String,
    /// Logical CPUs (hardware threads) of the whole node: what the usage features are summed
    /// over, so what a model's utilisation is relative to. The spec JSON's `cores`, unless the
    /// spec says those are physical ([`MachineSpec::from_spec_value`]).
    pub logical_cores: u32,
    /// Physical cores of the whole node, when cpuinfo or the spec tells them apart from
    /// logical CPUs. Only reported: every model is scaled by logical CPUs.
    pub physical_cores: Option<u32>,
    /// Sockets; 0 when unknown.
    pub chips: u32,
    /// Memory in GiB (`MemTotal`); 0 when unknown.
    pub memory_gb: f64,
    /// Nominal frequency in MHz when known (only used to break ties between node types).
    pub frequency_mhz: Option<f64>,
}

/// Most logical CPUs a spec may claim; far above any real machine, it keeps `1000 × cores`
/// (the model scale) exact and rejects garbage.
const MAX_CORES: u32 = 1 << 20;

/// Tokens dropped from processor names: trademarks, filler, and frequencies are formatting,
/// not identity (SPECpower writes "Intel Xeon X5570, 2.933 GHz" for the CPU cpuinfo calls
/// "Intel(R) Xeon(R) CPU X5570 @ 2.93GHz").
const FILLER: [&str; 4] = ["cpu", "processor", "@", "0"];

/// Normalises a processor name the way the model server's spec does: lowercase, trademarks,
/// filler words (`CPU`, `Processor`, `64-Core`, a lone `0`), frequencies and anything after
/// `with` (`with Radeon Graphics`) removed, other non-alphanumerics turned into single `_`.
/// `Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz` → `intel_xeon_platinum_8259cl`.
/// Idempotent, so already-normalised names from a spec file pass through unchanged.
pub fn normalize_processor(raw: &str) -> String {
    let mut text = raw.to_lowercase();
    for mark in ["(r)", "(tm)", "(c)", "®", "™"] {
        text = text.replace(mark, " ");
    }
    let words: Vec<&str> = text
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter(|w| !w.is_empty())
        .collect();
    let mut kept = Vec::new();
    let mut i = 0;
    while let Some(&w) = words.get(i) {
        i += 1;
        if w == "with" {
            break;
        }
        if FILLER.contains(&w) || is_core_count(w) || is_frequency(w) {
            continue;
        }
        // "2.6 GHz": a number followed by a unit word.
        if w.parse::<f64>().is_ok() && words.get(i).is_some_and(|u| is_unit(u)) {
            i += 1;
            continue;
        }
        kept.push(w);
    }
    let joined = kept.join("_");
    let mut out = String::with_capacity(joined.len());
    for c in joined.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    out.trim_end_matches('_').to_string()
}

fn is_unit(w: &str) -> bool {
    matches!(w, "ghz" | "mhz")
}

/// `2.50ghz`, `3500mhz`.
fn is_frequency(w: &str) -> bool {
    frequency_mhz_of_word(w).is_some()
}

pub(super) fn frequency_mhz_of_word(w: &str) -> Option<f64> {
    let (num, factor) = if let Some(n) = w.strip_suffix("ghz") {
        (n, 1000.0)
    } else {
        (w.strip_suffix("mhz")?, 1.0)
    };
    let v: f64 = num.parse().ok()?;
    (v.is_finite() && v > 0.0).then_some(v * factor)
}

/// `64-core`, `8-core`: AMD names carry the core count, which the spec has separately.
fn is_core_count(w: &str) -> bool {
    w.strip_suffix("-core")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

impl MachineSpec {
    /// The spec of the machine whose `/proc/cpuinfo` and `/proc/meminfo` texts are given.
    pub fn from_proc(cpuinfo: &str, meminfo: &str) -> Result<MachineSpec, BuiltinError> {
        let cpu = parse_cpuinfo(cpuinfo)?;
        let memory_gb = parse_meminfo_gib(meminfo)?;
        let processor = normalize_processor(&cpu.model_name);
        Ok(MachineSpec {
            processor: if processor.is_empty() {
                "unknown".into()
            } else {
                processor
            },
            logical_cores: cpu.logical_cores,
            physical_cores: cpu.physical_cores,
            chips: cpu.chips,
            memory_gb,
            frequency_mhz: cpu.frequency_mhz,
        })
    }

    /// Parses the model server's spec JSON text.
    pub fn from_spec_json(text: &str) -> Result<MachineSpec, BuiltinError> {
        let value: Value = serde_json::from_str(text)
            .map_err(|e| BuiltinError::Spec(format!("machine spec is not JSON: {e}")))?;
        MachineSpec::from_spec_value(&value)
    }

    /// Reads a parsed spec JSON object. `processor` and `cores` are required; `chips` and
    /// `memory` may be absent (unknown), `frequency` absent or null. Numbers may be written
    /// as floats (`4.0`, as in the SPECpower node-type index). Other keys are ignored.
    ///
    /// `cores` counts logical CPUs, as in the model server's EC2 index (`cores: 96` for an
    /// m5.metal with 48 physical cores). A spec may say otherwise, and then the logical count
    /// is resolved ([`resolve_cores`]):
    ///
    /// - `threads` (logical CPUs, SPECpower's column) larger than `cores`: `cores` are physical;
    /// - `threads_per_core` (lscpu's "Thread(s) per core") above 1: `cores` (or
    ///   `physical_cores`) are physical, logical = physical × threads per core;
    /// - `physical_cores` alone is only recorded.
    ///
    /// A spec whose numbers contradict each other (`threads` below `cores`, or not
    /// physical × threads per core) is an error: which count is the machine's cannot be told.
    pub fn from_spec_value(value: &Value) -> Result<MachineSpec, BuiltinError> {
        let Value::Object(obj) = value else {
            return Err(BuiltinError::Spec(
                "machine spec must be a JSON object".into(),
            ));
        };
        let processor = match obj.get("processor") {
            Some(Value::String(s)) if !normalize_processor(s).is_empty() => normalize_processor(s),
            Some(other) => {
                return Err(BuiltinError::Spec(format!(
                    "machine spec processor must be a non-empty name, found {other}"
                )))
            }
            None => return Err(BuiltinError::Spec("machine spec has no processor".into())),
        };
        let cores = count(obj, "cores")?
            .ok_or_else(|| BuiltinError::Spec("machine spec has no cores".into()))?;
        let (logical_cores, physical_cores) = resolve_cores(
            cores,
            count(obj, "threads")?,
            count(obj, "physical_cores")?,
            count(obj, "threads_per_core")?,
        )?;
        let chips = count(obj, "chips")?.unwrap_or(0);
        let memory_gb = positive(obj, "memory")?.unwrap_or(0.0);
        let frequency_mhz = positive(obj, "frequency")?;
        Ok(MachineSpec {
            processor,
            logical_cores,
            physical_cores,
            chips,
            memory_gb,
            frequency_mhz,
        })
    }

    /// The spec as the model server writes it. `memory` is whole GiB (rounded), as there;
    /// unknown chips/memory and frequency are left out.
    pub fn to_spec_value(&self) -> Value {
        let mut obj = Map::new();
        obj.insert("processor".into(), Value::from(self.processor.clone()));
        obj.insert("cores".into(), Value::from(self.logical_cores));
        // Only when it differs: `cores` stays the logical count either way.
        if let Some(p) = self.physical_cores.filter(|p| *p != self.logical_cores) {
            obj.insert("physical_cores".into(), Value::from(p));
        }
        if self.chips > 0 {
            obj.insert("chips".into(), Value::from(self.chips));
        }
        if self.memory_gb > 0.0 && self.memory_gb.is_finite() {
            obj.insert("memory".into(), number(self.memory_gb.round()));
        }
        if let Some(f) = self.frequency_mhz.filter(|f| f.is_finite()) {
            obj.insert("frequency".into(), number(f));
        }
        Value::Object(obj)
    }

    /// [`MachineSpec::to_spec_value`] as JSON text.
    pub fn to_spec_json(&self) -> String {
        self.to_spec_value().to_string()
    }

    /// Checks what selection relies on: a processor name, at least one logical CPU (the
    /// model's scale is `1000 × cores`), finite non-negative memory.
    pub(crate) fn validate(&self) -> Result<(), BuiltinError> {
        if self.logical_cores == 0 || self.logical_cores > MAX_CORES {
            return Err(BuiltinError::Spec(format!(
                "logical cores must be between 1 and {MAX_CORES}, got {}",
                self.logical_cores
            )));
        }
        if !(self.memory_gb.is_finite() && self.memory_gb >= 0.0) {
            return Err(BuiltinError::Spec(format!(
                "memory must be a finite number of GiB ≥ 0, got {}",
                self.memory_gb
            )));
        }
        Ok(())
    }
}

/// Logical and physical cores from a spec's `cores`, `threads`, `physical_cores` and
/// `threads_per_core` (rules in [`MachineSpec::from_spec_value`]).
pub(crate) fn resolve_cores(
    cores: u32,
    threads: Option<u32>,
    physical: Option<u32>,
    threads_per_core: Option<u32>,
) -> Result<(u32, Option<u32>), BuiltinError> {
    let bad = |why: String| Err(BuiltinError::Spec(format!("machine spec {why}")));
    if cores == 0 {
        return bad("cores must be at least 1".into());
    }
    if threads_per_core == Some(0) || threads == Some(0) || physical == Some(0) {
        return bad("threads, physical_cores and threads_per_core must be at least 1".into());
    }
    let tpc = threads_per_core.unwrap_or(1);
    let (logical, phys) = match (threads, physical) {
        (Some(t), _) if t < cores => {
            return bad(format!(
                "threads {t} are fewer than cores {cores}: a core has at least one thread"
            ))
        }
        (Some(t), p) if t > cores => (t, Some(p.unwrap_or(cores))),
        (Some(t), p) => (t, p),
        // With threads per core above 1, a core count is a physical one (as lscpu gives
        // them); `physical_cores` says so outright.
        (None, Some(p)) if tpc > 1 => {
            let logical = p.saturating_mul(tpc);
            if cores != p && cores != logical {
                return bad(format!(
                    "cores {cores} are neither the {p} physical cores nor {p} × {tpc} threads"
                ));
            }
            (logical, Some(p))
        }
        (None, None) if tpc > 1 => (cores.saturating_mul(tpc), Some(cores)),
        (None, p) => (cores, p),
    };
    if let Some(p) = phys {
        if p > logical {
            return bad(format!(
                "physical_cores {p} exceed the {logical} logical CPUs"
            ));
        }
        if threads_per_core.is_some() && p.saturating_mul(tpc) != logical {
            return bad(format!(
                "{p} physical cores × {tpc} threads per core are not the {logical} logical CPUs"
            ));
        }
    }
    if logical > MAX_CORES {
        return bad(format!("logical CPUs {logical} exceed {MAX_CORES}"));
    }
    Ok((logical, phys))
}

/// Whole numbers print without a fraction (`377`, not `377.0`), as the model server writes.
pub(crate) fn number(v: f64) -> Value {
    if v.fract() == 0.0 && v.abs() < 9e15 {
        // Exact: |v| < 2^53 and integral.
        Value::from(v as i64)
    } else {
        Value::from(v)
    }
}

/// A positive whole number (`96` or `96.0`), absent → `None`.
fn count(obj: &Map<String, Value>, key: &str) -> Result<Option<u32>, BuiltinError> {
    let Some(v) = positive(obj, key)? else {
        return Ok(None);
    };
    if v.fract() != 0.0 || v > f64::from(MAX_CORES) {
        return Err(BuiltinError::Spec(format!(
            "machine spec {key} must be a whole number up to {MAX_CORES}, found {v}"
        )));
    }
    // Exact: integral and within u32.
    Ok(Some(v as u32))
}

/// A finite number ≥ 0; absent or null → `None`.
fn positive(obj: &Map<String, Value>, key: &str) -> Result<Option<f64>, BuiltinError> {
    match obj.get(key) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => match n.as_f64() {
            Some(v) if v.is_finite() && v >= 0.0 => Ok(Some(v)),
            _ => Err(BuiltinError::Spec(format!(
                "machine spec {key} must be a number ≥ 0, found {n}"
            ))),
        },
        Some(other) => Err(BuiltinError::Spec(format!(
            "machine spec {key} must be a number, found {other}"
        ))),
    }
}

/// Tokens that name a vendor or brand rather than a model. Dropped for matching because the
/// sources disagree on them: SPECpower writes "Intel X3350" and "Xeon L5420", AWS writes
/// "Xeon Platinum 8259CL", cpuinfo "Intel(R) Xeon(R) CPU X3350". Model numbers stay unique
/// without them (an Intel `E5-2670` is a Xeon; `Core i7`, `EPYC`, `Opteron` are kept).
const BRAND_TOKENS: [&str; 5] = ["intel", "amd", "aws", "arm", "xeon"];

/// Cloud CPUs named by brand in the AWS data, and the core they are built on, which is all
/// arm64 cpuinfo tells.
const ALIASES: [(&str, &str); 2] = [("graviton", "cortexa72"), ("graviton2", "neoversen1")];

/// The identity of a CPU model for matching: the normalised name without brand tokens, with
/// separators removed (`intel_xeon_e5_2686_v4` and `intel_xeon_e5_2686v4` are one CPU).
/// `None` when no model number is left (`intel_xeon`, `qemu_virtual`): such a name says
/// nothing about power and must not match anything.
pub(crate) fn cpu_key(processor: &str) -> Option<String> {
    let key = name_key(processor);
    let key = ALIASES
        .iter()
        .find(|(brand, _)| *brand == key)
        .map_or(key, |(_, core)| (*core).to_string());
    key.bytes().any(|b| b.is_ascii_digit()).then_some(key)
}

/// [`cpu_key`] before aliases: what the name itself says.
fn name_key(processor: &str) -> String {
    normalize_processor(processor)
        .split('_')
        .filter(|t| !BRAND_TOKENS.contains(t))
        .collect()
}

/// Whether `processor` names only a CPU core design that [`ALIASES`] maps chips onto
/// (`ARM Neoverse-N1`, what arm64 cpuinfo tells), not a chip. Such a name matches the
/// chips built on that core (Graviton2), but other chips share the core (Ampere Altra is
/// also Neoverse-N1, a Raspberry Pi 4 is Cortex-A72) and draw different power, so a match
/// through it is reported as a core match, not as the CPU model's.
pub(crate) fn names_core_only(processor: &str) -> bool {
    let key = name_key(processor);
    ALIASES.iter().any(|(_, core)| *core == key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalises_like_the_model_server() {
        let cases = [
            (
                "Intel(R) Xeon(R) Platinum 8259CL CPU @ 2.50GHz",
                "intel_xeon_platinum_8259cl",
            ),
            ("intel_xeon_platinum_8259cl", "intel_xeon_platinum_8259cl"),
            ("AMD EPYC 7742 64-Core Processor", "amd_epyc_7742"),
            ("Intel Xeon X5570, 2.933 GHz", "intel_xeon_x5570"),
            ("2.6 GHz AMD Opteron 2435", "amd_opteron_2435"),
            ("AMD Opteron(r) Processor 8376 HE", "amd_opteron_8376_he"),
            (
                "Intel(R) Xeon(R) CPU E5-2670 0 @ 2.60GHz",
                "intel_xeon_e5_2670",
            ),
            (
                "AMD Ryzen 7 5800H with Radeon Graphics",
                "amd_ryzen_7_5800h",
            ),
            ("  ", ""),
        ];
        for (raw, want) in cases {
            assert_eq!(normalize_processor(raw), want, "{raw}");
        }
    }

    #[test]
    fn cpu_keys_ignore_brand_and_separators() {
        let same = [
            (
                "intel_xeon_e5_2686v4",
                "Intel(R) Xeon(R) CPU E5-2686 v4 @ 2.30GHz",
            ),
            ("Intel X3350", "Intel(R) Xeon(R) CPU X3350 @ 2.66GHz"),
            ("EPYC 7R32", "AMD EPYC 7R32"),
            ("Graviton2", "ARM Neoverse-N1"),
        ];
        for (a, b) in same {
            assert_eq!(cpu_key(a), cpu_key(b), "{a} vs {b}");
            assert!(cpu_key(a).is_some(), "{a}");
        }
        assert!(names_core_only("ARM Neoverse-N1"));
        assert!(names_core_only("ARM Cortex-A72"));
        assert!(!names_core_only("Graviton2"));
        assert!(!names_core_only("aws_graviton"));
        assert!(!names_core_only("Xeon Platinum 8259CL"));
        // Exact, not substring: a v2 is not the v1 part, an 8259 is not an 8259CL.
        assert_ne!(cpu_key("Xeon E5-2660"), cpu_key("Xeon E5-2660 v2"));
        assert_ne!(
            cpu_key("Xeon Platinum 8259"),
            cpu_key("Xeon Platinum 8259CL")
        );
        assert_eq!(cpu_key("Intel Xeon Processor"), None);
        assert_eq!(cpu_key("Intel Xeon 3.8GHz"), None);
    }

    #[test]
    fn spec_json_round_trips() -> Result<(), BuiltinError> {
        let text = r#"{"processor": "intel_xeon_platinum_8259cl", "cores": 96, "chips": 2, "memory": 377, "frequency": 3500}"#;
        let spec = MachineSpec::from_spec_json(text)?;
        assert_eq!(spec.logical_cores, 96);
        assert_eq!(spec.chips, 2);
        assert_eq!(spec.memory_gb, 377.0);
        assert_eq!(spec.frequency_mhz, Some(3500.0));
        let back: Value = serde_json::from_str(&spec.to_spec_json())
            .map_err(|e| BuiltinError::Spec(e.to_string()))?;
        let orig: Value =
            serde_json::from_str(text).map_err(|e| BuiltinError::Spec(e.to_string()))?;
        assert_eq!(back, orig);
        // SPECpower index style: floats for counts.
        let f = MachineSpec::from_spec_json(
            r#"{"processor": "intel_xeon_x3360", "cores": 4.0, "chips": 1.0, "memory": 4.0}"#,
        )?;
        assert_eq!((f.logical_cores, f.chips, f.frequency_mhz), (4, 1, None));
        Ok(())
    }

    #[test]
    fn physical_cores_in_a_spec_resolve_to_logical_cpus() -> Result<(), BuiltinError> {
        let cores = |text: &str| {
            MachineSpec::from_spec_json(text).map(|s| (s.logical_cores, s.physical_cores))
        };
        let p = r#""processor": "intel_xeon_platinum_8259cl""#;
        // The model server's convention: cores are logical.
        assert_eq!(cores(&format!(r#"{{{p}, "cores": 96}}"#))?, (96, None));
        // SPECpower's columns: cores and threads.
        assert_eq!(
            cores(&format!(r#"{{{p}, "cores": 48, "threads": 96}}"#))?,
            (96, Some(48))
        );
        assert_eq!(
            cores(&format!(r#"{{{p}, "cores": 96, "threads": 96}}"#))?,
            (96, None)
        );
        // lscpu's: cores and threads per core.
        assert_eq!(
            cores(&format!(r#"{{{p}, "cores": 48, "threads_per_core": 2}}"#))?,
            (96, Some(48))
        );
        assert_eq!(
            cores(&format!(
                r#"{{{p}, "cores": 96, "physical_cores": 48, "threads_per_core": 2}}"#
            ))?,
            (96, Some(48))
        );
        assert_eq!(
            cores(&format!(r#"{{{p}, "cores": 96, "physical_cores": 48}}"#))?,
            (96, Some(48))
        );
        assert_eq!(
            cores(&format!(r#"{{{p}, "cores": 8, "threads_per_core": 1}}"#))?,
            (8, None)
        );
        // Contradictions are errors, not guesses.
        for bad in [
            r#""cores": 96, "threads": 48"#,
            r#""cores": 96, "physical_cores": 100"#,
            r#""cores": 90, "physical_cores": 48, "threads_per_core": 2"#,
            r#""cores": 48, "threads": 100, "threads_per_core": 2"#,
            r#""cores": 48, "threads_per_core": 0"#,
        ] {
            assert!(cores(&format!("{{{p}, {bad}}}")).is_err(), "{bad}");
        }
        Ok(())
    }

    #[test]
    fn bad_spec_json_is_an_error() {
        for bad in [
            "[]",
            "{}",
            r#"{"processor": "x_1"}"#,
            r#"{"processor": "", "cores": 4}"#,
            r#"{"processor": 7, "cores": 4}"#,
            r#"{"processor": "x_1", "cores": 0}"#,
            r#"{"processor": "x_1", "cores": 2.5}"#,
            r#"{"processor": "x_1", "cores": -4}"#,
            r#"{"processor": "x_1", "cores": 4, "memory": "lots"}"#,
            r#"{"processor": "x_1", "cores": 1e300}"#,
            "not json",
        ] {
            assert!(MachineSpec::from_spec_json(bad).is_err(), "{bad}");
        }
    }
}

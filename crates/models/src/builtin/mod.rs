//! Built-in default models, chosen by machine spec, for hosts without a trained model.
//!
//! Trained by `kepler-model-server train-builtin` from public data (docs/builtin-models.md):
//!
//! - **`rapl` family** (`package`, `dram`): the AWS instance dataset, package and DRAM watts
//!   at idle/10/50/100 % per EC2 platform (CPU model, platform vCPUs, platform memory).
//! - **`platform` family** (`platform`, ACPI-like wall power): SPECpower_ssj2008 results,
//!   idle and 100 % watts per server (CPU model, threads, sockets, memory).
//!
//! - **counter built-in** (`package`, [`with_counters`]): for hosts whose usage source has
//!   cycles, instructions and cache misses, a line on them trained on nx12 (kepler-model-db).
//!
//! Every busy-time model reads one feature, `bpf_cpu_time_ms` (busy CPU ms per second over all
//! logical CPUs), as utilisation `u = x / (1000 × logical CPUs)`, and is a model-DB weight
//! JSON (logarithmic `CurveFit_Weights` for `rapl`, linear weights for `platform`); the
//! index ([`BuiltinIndex`]) holds the curve ends and shape per node type.
//!
//! # Selection rules
//!
//! 1. The host processor is normalised ([`normalize_processor`]) and reduced to a **match
//!    key**: brand tokens (`intel`, `amd`, `aws`, `arm`, `xeon`) and separators removed,
//!    `graviton`/`graviton2` mapped to their cores (`cortexa72`/`neoversen1`, all arm64
//!    cpuinfo tells). A host that names only the core matches those chips' node types under
//!    rules 2 and 3, reported as [`MatchQuality::SameCoreDesign`] since other chips share
//!    the core. A name without a digit (`Intel Xeon Processor`, a QEMU model) has no
//!    key and matches nothing. Keys are compared for **equality**, never as substrings: an
//!    `E5-2660` is not an `E5-2660 v2`, an `8259` is not an `8259CL`.
//! 2. **Exact**: a node type with the same key and the same logical CPU count (and sockets,
//!    when both sides know them). Among several (memory variants), the nearest memory, then
//!    frequency, then the lowest id. `dram` is scaled by host/model memory when they differ
//!    by more than 5 % (MemTotal is a little below installed memory; in the AWS data dram
//!    watts are proportional to memory within a CPU model).
//! 3. **Same CPU, scaled**: otherwise the same-key node type with the nearest logical CPU
//!    count (log ratio; ties: same sockets, nearest memory, lowest id), every component but
//!    `dram` scaled by host/model logical CPUs (a VM with 4 of 96 vCPUs gets 4/96 of the
//!    platform, as the AWS data itself is built), `dram` by memory as above.
//! 4. **Fallback**: no node type has the key. Idle and full-load watts are affine in the
//!    machine size, `fixed + per_cpu·CPUs + per_gb·GB`, fitted over all node types of the
//!    family (Theil–Sen); the curve shape is the family's median. Unknown memory (0) is
//!    taken as the median GB per logical CPU of the data.
//!
//! Every selected model holds utilisation to [0, 1] (busy CPU time beyond the machine's
//! logical CPUs is full load), and the machine's size is its **logical** CPU count however
//! the spec states it ([`MachineSpec::from_spec_value`]; cpuinfo counts both).
//!
//! Every selection also carries what its family's index says about trust: the expected
//! error per component on held-out measurements (`expected_error`, which agents export
//! beside the estimate) and the components without a trustworthy estimate (`withheld`, with
//! the reason; `dram` on hosts whose CPU has no RAPL DRAM domain too), which
//! `BuiltinSelection::without_withheld` leaves out of the predictor.
//!
//! The [`BuiltinSelection::reason`] says which rule applied, to what, and the factors used.
//!
//! # Guests (virtual machines)
//!
//! [`select_builtin`] describes the machine the spec names; for a VM that is the wrong
//! machine. `bpf_cpu_time_ms` is absolute (1000 = one busy CPU), so a guest's busy vCPUs are
//! busy CPUs of its host, and the guest's dynamic power is the **host's** dynamic power at the
//! guest's busy time: `predict_host(x) − predict_host(0)`. [`select_builtin_for_guest`]
//! returns that host's model (feature scale `1000 ×` host CPUs, in
//! [`BuiltinSelection::guest_host_cpus`]); its `predict(0)` is the host's idle, not the
//! guest's, so only the dynamic part is meaningful (the agent reports DynPower in a VM). The
//! host is:
//!
//! 1. **Same CPU**: the guest's CPU key has node types: the one with at least the guest's
//!    logical CPUs, nearest in size to the typical host below (log ratio), the memory variant
//!    nearest the guest's GB per vCPU grown to that size (an instance family's GB per vCPU is
//!    its platform's), ties to the lowest id; unscaled ([`MatchQuality::Exact`]). A guest
//!    larger than every node type of its CPU gets the largest, scaled to the guest's own size
//!    as rule 3 does ([`MatchQuality::SameCpuScaled`]).
//! 2. **Fallback**: otherwise the fallback at the family's typical host size,
//!    [`FamilyIndex::typical_host_cpus`] (the lower median of its node types' logical CPUs:
//!    72 for `rapl`, 32 for `platform`), or the guest's own when larger, with memory the
//!    guest's GB per vCPU times the host's CPUs (unknown stays unknown).
//!
//! Rule 3's scaling of a VM-sized spec ([`select_builtin`]) is not this rule: it gives the
//! guest its vCPU share of a host running at the guest's utilisation, which is how the AWS
//! data attributes watts to instances. For a linear curve (`platform`) the two agree; for the
//! concave `rapl` curves the share is lower (m5n.xlarge, 4 busy vCPUs: 16.3 W against the
//! host's 33.7 W for 4 busy CPUs of an otherwise idle host).

mod clamp;
mod counters;
mod index;
mod procfs;
mod select;
mod spec;

pub use counters::{
    rounded_weights, with_counters, with_counters_in, CounterIndex, COUNTER_MODEL_PATH,
};
pub use index::{
    embedded_index, round_sig, trainer_for, weight_json, Affine, BuiltinIndex, CurveParams,
    Fallback, FallbackCurve, FamilyIndex, NodeType, StatedError, INDEX_FORMAT, LINEAR_TRAINER,
    LOG_TRAINER,
};
pub use procfs::{parse_cpuinfo, parse_meminfo_gib, CpuInfo};
pub use select::{
    builtin_fallback, fallback_in, select_builtin, select_builtin_for_guest, select_for_guest_in,
    select_in, BuiltinFamily, BuiltinSelection, MatchQuality,
};
pub use spec::{normalize_processor, MachineSpec};

/// Why a machine spec could not be read or a built-in model not be built.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuiltinError {
    /// cpuinfo/meminfo text or spec JSON that does not describe a machine.
    #[error("invalid machine spec: {0}")]
    Spec(String),
    /// A family name other than `rapl` or `platform`.
    #[error("unknown built-in model family {0:?} (rapl or platform)")]
    UnknownFamily(String),
    /// The built-in index is malformed (a broken build or a hand-edited file).
    #[error("invalid built-in model index: {0}")]
    Index(String),
    /// The generated model did not load (a bug: every embedded model is loaded by the tests).
    #[error(transparent)]
    Model(#[from] crate::ModelError),
}

/// Match key of a processor name (exposed for the trainer, which must group by the same key
/// the selection compares).
pub fn cpu_match_key(processor: &str) -> Option<String> {
    spec::cpu_key(processor)
}

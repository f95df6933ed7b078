//! The traits that sources of usage and power implement, and how they explain unavailability.

use std::sync::Arc;
use std::time::Duration;

use crate::domain::{ExpectedError, PowerDomain, ZoneMeta};
use crate::energy::ZoneReading;
use crate::features::{Feature, FeatureRates};
use crate::usage::UsageSnapshot;

/// Why a source or meter cannot be used on this host. Shown by `kepler probe` and logged once.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{reason}")]
pub struct Unavailable {
    pub reason: String,
    /// Whether the host has the thing but the agent may not use it: that one the user can fix
    /// by granting access, so the agent reports it in its health metrics too.
    pub denied: bool,
}

impl Unavailable {
    /// The host lacks it, or the configuration turned it off.
    pub fn new(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
            denied: false,
        }
    }

    /// The host has it, but the agent's user or capabilities may not read it.
    pub fn denied(reason: impl Into<String>) -> Self {
        Unavailable {
            reason: reason.into(),
            denied: true,
        }
    }
}

/// An error while reading a source that was available at start-up.
#[derive(Debug, thiserror::Error)]
pub enum ReadError {
    #[error("reading {path}: {source}")]
    Io {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing {path}: {message}")]
    Parse { path: String, message: String },
    #[error("{0}")]
    Other(String),
}

/// Where a meter's numbers come from; exported so users can tell real watts from estimates.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Provenance {
    Measured,
    Estimated,
    /// The development fake meter: neither measured nor estimated.
    Synthetic,
}

impl Provenance {
    pub fn as_str(self) -> &'static str {
        match self {
            Provenance::Measured => "measured",
            Provenance::Estimated => "estimated",
            Provenance::Synthetic => "synthetic",
        }
    }
}

/// What a meter may use to produce the readings of the interval that ends now. Passed to
/// every read, so no meter depends on being told things in a particular order.
#[derive(Clone, Copy, Debug, Default)]
pub struct MeterInput<'a> {
    /// The node's model features over the interval, computed once per tick; `None` on the
    /// first tick (no interval yet) or when no meter asked for them.
    pub features: Option<&'a FeatureRates>,
}

/// A power meter: reads every zone it provides at one instant.
pub trait PowerMeter: Send {
    /// Short name used in config and logs (`rapl`, `hwmon`, `fake`, `model`, ...).
    fn name(&self) -> &str;
    /// The power domain whose fallback chain this meter belongs to.
    fn domain(&self) -> PowerDomain {
        PowerDomain::Cpu
    }
    /// Where the numbers come from: hardware, a model, or a development simulation.
    fn provenance(&self) -> Provenance {
        Provenance::Measured
    }
    /// The model behind estimated numbers, for the zone info metric.
    fn estimation_model(&self) -> Option<&str> {
        None
    }
    /// False for meters that report dynamic power only (an estimate inside a VM): their whole
    /// reading is active power and idle is zero by construction.
    fn includes_idle(&self) -> bool {
        true
    }
    /// The expected error of each estimated zone (see [`ExpectedError`]); none for measured
    /// zones, or when the model states none.
    fn expected_error(&self) -> Vec<ExpectedError> {
        Vec::new()
    }
    /// Why an estimating meter uses its model (the built-in rule that matched, or the model's
    /// origin), one line for `kepler_node_cpu_zone_info`; `None` for measured zones.
    fn estimation_reason(&self) -> Option<String> {
        None
    }
    /// Why this meter reads what it reads (which model was chosen and why), for
    /// `kepler probe`.
    fn detail(&self) -> Option<String> {
        None
    }
    /// Whether [`PowerMeter::read`] needs the interval's node features (estimating meters).
    fn needs_features(&self) -> bool {
        false
    }
    /// The model features this meter's reads may ever use, so that the usage source can stop
    /// collecting the others. An estimating meter that can load another model while it runs
    /// names every feature it was offered.
    fn features_used(&self) -> Vec<Feature> {
        Vec::new()
    }
    /// Zone name of every reading this meter reports, in order; a name repeats once per socket
    /// (sockets are summed later, by `zone_energies`).
    fn zones(&self) -> Vec<String>;
    /// The device's own breakdown of the readings the last successful [`PowerMeter::read`]
    /// returned (a BMC's power supplies), for `kepler_platform_watts`. The sampler copies it
    /// into the snapshot right after that read, so the detail and the zone always agree.
    fn platform_sources(&self) -> &[crate::platform::PlatformPower] {
        &[]
    }
    /// Appends one reading per zone to `out` (cleared by the caller).
    fn read(&mut self, input: &MeterInput<'_>, out: &mut Vec<ZoneReading>)
        -> Result<(), ReadError>;
    /// The facts every zone of this meter carries into the snapshot.
    fn meta(&self) -> ZoneMeta {
        ZoneMeta {
            domain: self.domain(),
            meter: Arc::from(self.name()),
            provenance: self.provenance(),
            model: self.estimation_model().map(Arc::from),
            includes_idle: self.includes_idle(),
            expected_error: self.expected_error().into(),
            reason: self.estimation_reason().map(Arc::from),
        }
    }
}

/// A source of node and per-process CPU usage.
pub trait UsageSource: Send {
    fn name(&self) -> &str;
    /// Takes a snapshot of node and process usage now.
    fn snapshot(&mut self) -> Result<UsageSnapshot, ReadError>;
    /// Whether cumulative CPU times start at zero when the source starts (eBPF counts from
    /// program load), rather than at the task's start (procfs).
    fn counts_from_start(&self) -> bool {
        false
    }
    /// Model features (DESIGN §7) that `kepler_core::features::node_features` can compute from
    /// this source's snapshots. Every source gives busy CPU time.
    fn features(&self) -> Vec<Feature> {
        vec![Feature::BpfCpuTimeMs]
    }
    /// Stops collecting the optional features not in `needed`, where collecting them costs
    /// something on every event (eBPF probes on each softirq or page-cache access, hardware
    /// counters read at each context switch); returns [`UsageSource::features`] as it is
    /// afterwards. Called once, after the meters are chosen.
    fn retain_features(&mut self, needed: &[Feature]) -> Vec<Feature> {
        let _ = needed;
        self.features()
    }
    /// How often to call [`UsageSource::drain`] between snapshots, when what arrives between
    /// two of them would otherwise outgrow the source's buffers (the eBPF exit ring under
    /// heavy churn); `None` when snapshots alone keep up. Asked after each snapshot.
    fn drain_every(&self) -> Option<Duration> {
        None
    }
    /// Takes in what the source's buffers hold so far, between snapshots; what it takes in
    /// is reported by the next snapshot, as if it had waited there.
    fn drain(&mut self) {}
    /// Bad inputs the source has skipped since it started (an odd or unreadable cgroup usage
    /// counter), each left out of its snapshots with a log line. The agent counts them in the
    /// source's `kepler_agent_component_errors_total`; the source stays up.
    fn skipped_inputs(&self) -> u64 {
        0
    }
}

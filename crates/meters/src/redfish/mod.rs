//! Platform power from a BMC over Redfish (`redfish` meter, platform domain), upstream's
//! `experimental.platform.redfish` feature.
//!
//! The node's BMC comes from the BMC file ([`bmc`]); the `client` module talks HTTP(S) to it and
//! [`power`] walks `/redfish/v1/Chassis` to the power supplies (or the deprecated power
//! controls). BMCs answer in seconds and sometimes not at all, so the meter is a
//! [`PolledMeter`]: a poller thread on the agent's service asks the BMC every interval (with
//! exponential backoff while it fails) and the tick takes the cached answer, or an error once
//! it is older than the staleness limit. A BMC that is down makes this meter's health down and
//! its zone drop out; the CPU and other domains go on as before.
//!
//! Each reading is a power reading of zone `platform` with its own path
//! (`<bmc>:<@odata.id>`); the core sums them into the zone, integrates power to energy and
//! attributes it like any zone. The labelled per-reading detail travels with the answer
//! ([`crate::polled::Polled::platform`]) into the snapshot for `kepler_platform_watts`.

pub mod bmc;
mod client;
pub mod power;

use std::path::PathBuf;
use std::time::Duration;

use kepler_core::{PowerDomain, Provenance, ReadError, Unavailable};

use crate::polled::{PollTiming, Polled, PolledMeter, SlowDevice};
use crate::registry::OpenContext;

/// The registry name of this meter.
pub const NAME: &str = "redfish";

/// `experimental.platform.redfish` (upstream's keys) and the agent facts it depends on.
#[derive(Clone, Debug, PartialEq)]
pub struct RedfishSettings {
    pub enabled: bool,
    /// `nodeName`: the node's key in the BMC file; `None` uses the agent's node name.
    pub node_name: Option<String>,
    /// `configFile`: the BMC file.
    pub config_file: Option<PathBuf>,
    /// `httpTimeout`: the limit of each request.
    pub http_timeout: Duration,
    /// `staleness`: how old a cached answer may be when the tick takes it.
    pub staleness: Duration,
}

impl Default for RedfishSettings {
    fn default() -> Self {
        RedfishSettings {
            enabled: false,
            node_name: None,
            config_file: None,
            http_timeout: Duration::from_secs(5),
            staleness: Duration::from_secs(30),
        }
    }
}

/// What went wrong talking to a BMC. Never holds a password or token.
#[derive(Debug, thiserror::Error)]
pub enum RedfishError {
    #[error("{path}: {message}")]
    Transport { path: String, message: String },
    #[error("{path}: HTTP status {status}")]
    Status { path: String, status: u16 },
    #[error("the BMC refused the credentials (HTTP status {status})")]
    Auth { status: u16 },
    #[error("{path}: {message}")]
    Answer { path: String, message: String },
    #[error(
        "no chassis reports power (neither PowerSubsystem power supplies nor Power/PowerControl)"
    )]
    NoReading,
}

struct RedfishDevice {
    client: client::Client,
    bmc_id: String,
}

impl SlowDevice for RedfishDevice {
    fn poll(&mut self) -> Result<Polled, ReadError> {
        power::collect(&mut self.client, &self.bmc_id).map_err(|e| ReadError::Other(e.to_string()))
    }
}

/// Opens the meter: the node's BMC from the BMC file, and its poller started on the agent's
/// service. Without a service to run on (`kepler probe`), it asks the BMC once, now, and says
/// what it answered.
pub fn open(cx: &OpenContext<'_>) -> Result<PolledMeter, Unavailable> {
    let s = &cx.settings.redfish;
    if !s.enabled {
        return Err(Unavailable::new(
            "experimental.platform.redfish.enabled is false",
        ));
    }
    let file = s
        .config_file
        .as_ref()
        .ok_or_else(|| Unavailable::new("experimental.platform.redfish.configFile is not set"))?;
    let node = s
        .node_name
        .as_deref()
        .filter(|n| !n.is_empty())
        .unwrap_or(&cx.settings.node_name);
    let (bmc_id, bmc) = bmc::load(file, node).map_err(|e| Unavailable::new(e.to_string()))?;
    let mut detail = format!("BMC {bmc_id} at {} for node {node}", bmc.endpoint);
    if bmc.insecure {
        detail.push_str(" (TLS verification off)");
    }
    let device = RedfishDevice {
        client: client::Client::new(&bmc, s.http_timeout),
        bmc_id,
    };
    let timing = PollTiming {
        every: cx.settings.poll_interval,
        staleness: s.staleness.max(cx.settings.poll_interval),
        max_backoff: backoff_limit(cx.settings.poll_interval),
    };
    crate::polled::start(
        cx,
        NAME,
        PowerDomain::Platform,
        Provenance::Measured,
        Box::new(device),
        timing,
        detail,
    )
}

/// The longest wait between polls of a failing device: a minute's worth of intervals, at most
/// five minutes, so a BMC that comes back is read again within minutes at the latest.
pub(crate) fn backoff_limit(every: Duration) -> Duration {
    (every * 60).clamp(every, Duration::from_secs(300))
}

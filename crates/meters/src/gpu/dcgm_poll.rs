//! The `dcgm` meter (GPU domain): polls dcgm-exporter's `/metrics` at
//! `experimental.gpu.dcgmEndpoint` and turns each answer into per-GPU and per-MIG-instance
//! zones with [`super::dcgm`]. The exporter is a remote HTTP server that can be slow or gone,
//! so, like the BMC meters, this is a [`PolledMeter`]: a poller on the agent's service fetches
//! every interval and the tick takes the cached answer, never waiting on the network.

use std::io::Read;
use std::time::Duration;

use kepler_core::{PowerDomain, Provenance, ReadError, Unavailable, Watts};
use tracing::debug;

use crate::polled::{PollTiming, Polled, PolledMeter, SlowDevice};
use crate::registry::OpenContext;

/// The registry name of this meter.
pub const NAME: &str = "dcgm";

/// Per-request limit. dcgm-exporter answers from its own cache in milliseconds; a request
/// that takes longer is from an exporter in trouble, and the poller should back off rather
/// than sit on the connection.
const HTTP_TIMEOUT: Duration = Duration::from_secs(5);

/// Largest answer read. A node with 8 GPUs of 7 MIG instances each and the default field set
/// is a few hundred KiB; a larger answer is not a dcgm-exporter scrape, and a truncated one
/// would silently lose instances, so it is an error instead.
const MAX_BODY: u64 = 8 << 20;

/// What went wrong fetching the exporter's text.
#[derive(Debug, thiserror::Error)]
pub enum DcgmError {
    #[error("{endpoint}: {message}")]
    Transport { endpoint: String, message: String },
    #[error("{endpoint}: HTTP status {status}")]
    Status { endpoint: String, status: u16 },
    #[error("{endpoint}: answer larger than {} bytes", MAX_BODY)]
    TooLarge { endpoint: String },
    #[error("{endpoint}: no GPU power samples (DCGM_FI_DEV_POWER_USAGE) in the answer")]
    NoReading { endpoint: String },
}

struct DcgmDevice {
    agent: ureq::Agent,
    url: String,
    /// The endpoint without user information, for messages and `kepler probe`.
    shown: String,
    idle: Watts,
}

impl DcgmDevice {
    fn fetch(&self) -> Result<String, DcgmError> {
        let transport = |message: String| DcgmError::Transport {
            endpoint: self.shown.clone(),
            message,
        };
        let mut response = self
            .agent
            .get(&self.url)
            .header("Accept", "text/plain")
            .call()
            .map_err(|e| transport(describe(e)))?;
        let status = response.status().as_u16();
        if !(200..=299).contains(&status) {
            return Err(DcgmError::Status {
                endpoint: self.shown.clone(),
                status,
            });
        }
        let mut text = String::new();
        // One byte past the limit tells a full answer of exactly the limit from a longer one.
        response
            .body_mut()
            .as_reader()
            .take(MAX_BODY + 1)
            .read_to_string(&mut text)
            .map_err(|e| transport(e.to_string()))?;
        if text.len() as u64 > MAX_BODY {
            return Err(DcgmError::TooLarge {
                endpoint: self.shown.clone(),
            });
        }
        Ok(text)
    }
}

impl SlowDevice for DcgmDevice {
    fn poll(&mut self) -> Result<Polled, ReadError> {
        let text = self.fetch().map_err(|e| ReadError::Other(e.to_string()))?;
        let entities = super::dcgm::parse(&text);
        let readings = super::dcgm::readings(&entities, self.idle);
        debug!(
            endpoint = self.shown,
            entities = entities.len(),
            zones = readings.len(),
            "dcgm-exporter polled"
        );
        // An answer without power samples (an error page served as 200, the wrong URL, an
        // exporter whose field set leaves power out) must fail the read, not look like a
        // node without GPUs.
        if readings.is_empty() {
            return Err(ReadError::Other(
                DcgmError::NoReading {
                    endpoint: self.shown.clone(),
                }
                .to_string(),
            ));
        }
        Ok(readings.into())
    }
}

/// Opens the meter when GPUs are enabled and an endpoint is configured, its poller started on
/// the agent's service (or, for `kepler probe`, the exporter asked once now).
pub fn open(cx: &OpenContext<'_>) -> Result<PolledMeter, Unavailable> {
    let g = &cx.settings.gpu;
    if !g.enabled {
        return Err(Unavailable::new("experimental.gpu.enabled is false"));
    }
    let url = g
        .dcgm_endpoint
        .as_deref()
        .map(str::trim)
        .filter(|u| !u.is_empty())
        .ok_or_else(|| Unavailable::new("experimental.gpu.dcgmEndpoint is not set"))?;
    let shown = check_url(url)?;
    let agent = ureq::Agent::config_builder()
        .timeout_global(Some(HTTP_TIMEOUT))
        // Statuses are ours to report (the error then names the status, not ureq's wording).
        .http_status_as_error(false)
        .user_agent("kepler-rs")
        .build()
        .into();
    // dcgm-exporter names no processes, so there is nothing to learn an idle baseline from
    // (no "no process ran" moments): the configured idle power, else none (all active).
    let idle = g.idle_power.unwrap_or(Watts(0.0));
    let device = DcgmDevice {
        agent,
        url: url.to_string(),
        shown: shown.clone(),
        idle,
    };
    let every = cx.settings.poll_interval;
    let timing = PollTiming {
        every,
        // A reading outlives one failed poll that used its whole timeout; after that the
        // zones drop out rather than repeat old power.
        staleness: every * 2 + HTTP_TIMEOUT,
        max_backoff: crate::redfish::backoff_limit(every),
    };
    crate::polled::start(
        cx,
        NAME,
        PowerDomain::Gpu,
        Provenance::Measured,
        Box::new(device),
        timing,
        format!("dcgm-exporter at {shown}"),
    )
}

/// An `http(s)://host[:port]/path` URL, or why not; returns it without user information, so
/// a password in the URL never reaches logs or `kepler probe`.
fn check_url(url: &str) -> Result<String, Unavailable> {
    let invalid =
        |why: &str| Unavailable::new(format!("experimental.gpu.dcgmEndpoint is invalid: {why}"));
    let not_http = || invalid("not an http:// or https:// URL");
    let uri: ureq::http::Uri = url.parse().map_err(|_| not_http())?;
    let scheme = uri.scheme_str().unwrap_or_default();
    if scheme != "http" && scheme != "https" {
        return Err(not_http());
    }
    let authority = uri.authority().ok_or_else(|| invalid("no host"))?;
    let host = authority.host();
    if host.is_empty() {
        return Err(invalid("no host"));
    }
    let port = authority
        .port()
        .map(|p| format!(":{p}"))
        .unwrap_or_default();
    Ok(format!("{scheme}://{host}{port}{}", uri.path()))
}

/// A transport error in a few words (the URL is already in the message).
fn describe(e: ureq::Error) -> String {
    match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_checked_and_shown_without_credentials() {
        assert_eq!(
            check_url("http://user:pw@10.0.0.1:9400/metrics").unwrap(),
            "http://10.0.0.1:9400/metrics"
        );
        assert_eq!(
            check_url("https://dcgm.local/metrics").unwrap(),
            "https://dcgm.local/metrics"
        );
        for (bad, why) in [
            ("localhost:9400/metrics", "http:// or https://"),
            ("ftp://h/metrics", "http:// or https://"),
            ("not a url", "http:// or https://"),
        ] {
            let reason = check_url(bad).unwrap_err().reason;
            assert!(
                reason.contains("dcgmEndpoint is invalid"),
                "{bad}: {reason}"
            );
            assert!(reason.contains(why), "{bad}: {reason}");
        }
    }
}

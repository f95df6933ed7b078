//! The HTTP side of Redfish: one blocking `ureq` agent per BMC (rustls with ring, as the rest
//! of the workspace), per-request timeouts, no redirects, bounded answers, and authentication
//! by a Redfish session (`POST /redfish/v1/SessionService/Sessions`, then `X-Auth-Token`; a
//! 401 logs in again once) or, where the BMC has no session service, HTTP basic auth.
//!
//! Only `@odata.id` paths of the BMC itself are requested, so credentials never go to another
//! host. Error messages name paths and statuses, never the endpoint's credentials or tokens.

use std::io::Read;
use std::time::Duration;

use base64::Engine;
use serde_json::Value;
use tracing::debug;

use super::bmc::{Bmc, Secret};
use super::power::Fetch;
use super::RedfishError;

/// Larger answers are not Redfish resources we read (a chassis is a few KiB).
const MAX_BODY: u64 = 1 << 20;

/// How long closing the session may hold up the poller's exit at shutdown.
const LOGOUT_TIMEOUT: Duration = Duration::from_secs(1);

enum Auth {
    /// Not logged in yet (or the session expired).
    Pending,
    /// The token, and the session's own path (`Location`) to close it with.
    Session(Secret, Option<String>),
    Basic(Secret),
    /// No username configured.
    None,
}

pub struct Client {
    agent: ureq::Agent,
    endpoint: String,
    username: String,
    password: Secret,
    auth: Auth,
}

impl Client {
    pub fn new(bmc: &Bmc, timeout: Duration) -> Client {
        let tls = ureq::tls::TlsConfig::builder()
            .disable_verification(bmc.insecure)
            .build();
        let agent = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .http_status_as_error(false)
            .max_redirects(0)
            .tls_config(tls)
            .user_agent("kepler-rs")
            .build()
            .into();
        Client {
            agent,
            endpoint: bmc.endpoint.clone(),
            username: bmc.username.clone(),
            password: bmc.password.clone(),
            auth: if bmc.username.is_empty() {
                Auth::None
            } else {
                Auth::Pending
            },
        }
    }

    fn url(&self, path: &str) -> Result<String, RedfishError> {
        // Paths come from the BMC's own answers: only absolute paths on the same host.
        if !path.starts_with('/') || path.starts_with("//") || path.contains(['\\', '@']) {
            return Err(RedfishError::Answer {
                path: path.to_string(),
                message: "link is not a path on this BMC".into(),
            });
        }
        let path = path.split('#').next().unwrap_or(path);
        Ok(format!("{}{path}", self.endpoint))
    }

    fn login(&mut self) -> Result<(), RedfishError> {
        const SESSIONS: &str = "/redfish/v1/SessionService/Sessions";
        let body = serde_json::json!({
            "UserName": self.username,
            "Password": self.password.expose(),
        });
        let response = self
            .agent
            .post(&self.url(SESSIONS)?)
            .header("Content-Type", "application/json")
            .send(body.to_string())
            .map_err(|e| transport(SESSIONS, e))?;
        let status = response.status().as_u16();
        let token = response
            .headers()
            .get("X-Auth-Token")
            .and_then(|t| t.to_str().ok())
            .filter(|t| !t.is_empty());
        match (status, token) {
            (200..=299, Some(token)) => {
                debug!(endpoint = self.endpoint, "Redfish session opened");
                // Only a path on this BMC (a full URL is reduced to its path) is kept.
                let location = response
                    .headers()
                    .get("Location")
                    .and_then(|l| l.to_str().ok())
                    .map(|l| match l.split_once("://") {
                        Some((_, rest)) => rest.find('/').and_then(|i| rest.get(i..)).unwrap_or(""),
                        None => l,
                    })
                    .filter(|l| self.url(l).is_ok())
                    .map(str::to_string);
                self.auth = Auth::Session(Secret::new(token), location);
                Ok(())
            }
            // No session service here (or one that hands out no token, as simple emulators
            // do): every request carries basic auth instead.
            (200..=299 | 404 | 405 | 501, _) => {
                debug!(
                    endpoint = self.endpoint,
                    status, "no Redfish session token; using basic auth"
                );
                let pair = format!("{}:{}", self.username, self.password.expose());
                let encoded = base64::engine::general_purpose::STANDARD.encode(pair);
                self.auth = Auth::Basic(Secret::new(format!("Basic {encoded}")));
                Ok(())
            }
            (401 | 403, _) => Err(RedfishError::Auth { status }),
            _ => Err(RedfishError::Status {
                path: SESSIONS.into(),
                status,
            }),
        }
    }

    fn get_once(&mut self, path: &str) -> Result<(u16, String), RedfishError> {
        if matches!(self.auth, Auth::Pending) {
            self.login()?;
        }
        let mut request = self.agent.get(&self.url(path)?);
        request = match &self.auth {
            Auth::Session(token, _) => request.header("X-Auth-Token", token.expose()),
            Auth::Basic(header) => request.header("Authorization", header.expose()),
            Auth::Pending | Auth::None => request,
        };
        let mut response = request
            .header("Accept", "application/json")
            .call()
            .map_err(|e| transport(path, e))?;
        let status = response.status().as_u16();
        let mut text = String::new();
        response
            .body_mut()
            .as_reader()
            .take(MAX_BODY)
            .read_to_string(&mut text)
            .map_err(|e| RedfishError::Transport {
                path: path.to_string(),
                message: e.to_string(),
            })?;
        Ok((status, text))
    }
}

impl Drop for Client {
    /// Closes the session, so agent restarts do not use up the BMC's few session slots while
    /// the old ones wait for their timeout. Best effort, and quick: the agent is stopping.
    fn drop(&mut self) {
        let Auth::Session(token, Some(path)) = &self.auth else {
            return;
        };
        let Ok(url) = self.url(path) else {
            return;
        };
        let closed = self
            .agent
            .delete(&url)
            .header("X-Auth-Token", token.expose())
            .config()
            .timeout_global(Some(LOGOUT_TIMEOUT))
            .build()
            .call();
        debug!(
            endpoint = self.endpoint,
            closed = closed.is_ok_and(|r| r.status().is_success()),
            "Redfish session closed"
        );
    }
}

impl Fetch for Client {
    fn get(&mut self, path: &str) -> Result<Value, RedfishError> {
        let (mut status, mut text) = self.get_once(path)?;
        if status == 401 && matches!(self.auth, Auth::Session(..)) {
            // The session expired or the BMC restarted: log in again, once.
            self.auth = Auth::Pending;
            (status, text) = self.get_once(path)?;
        }
        match status {
            200..=299 => serde_json::from_str(&text).map_err(|e| RedfishError::Answer {
                path: path.to_string(),
                message: format!("not JSON: {e}"),
            }),
            401 | 403 => {
                // Try a fresh login at the next poll rather than repeating a refused token.
                self.auth = Auth::Pending;
                Err(RedfishError::Auth { status })
            }
            _ => Err(RedfishError::Status {
                path: path.to_string(),
                status,
            }),
        }
    }
}

/// A transport error, described without the URL (which holds the endpoint only, but the
/// error types of the HTTP stack are not ours to audit).
fn transport(path: &str, e: ureq::Error) -> RedfishError {
    let message = match e {
        ureq::Error::Timeout(t) => format!("timed out ({t})"),
        ureq::Error::Io(io) => io.to_string(),
        ureq::Error::ConnectionFailed => "connection failed".into(),
        ureq::Error::HostNotFound => "host not found".into(),
        ureq::Error::Tls(t) => format!("TLS: {t}"),
        ureq::Error::Rustls(t) => format!("TLS: {t}"),
        other => other.to_string(),
    };
    RedfishError::Transport {
        path: path.to_string(),
        message,
    }
}

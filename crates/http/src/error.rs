//! The one error type of this crate: what can stop binding or serving.

use std::net::SocketAddr;

use crate::web_config::WebConfigError;

#[derive(Debug, thiserror::Error)]
pub enum HttpError {
    #[error("no listen address given")]
    NoAddress,
    #[error("invalid listen address {address:?}: {reason}")]
    Address { address: String, reason: String },
    #[error("binding {address}: {source}")]
    Bind {
        address: String,
        #[source]
        source: std::io::Error,
    },
    /// The web config was parsed, but its certificates or basic auth could not be prepared.
    #[error(transparent)]
    WebConfig(#[from] WebConfigError),
    #[error("serving on {address}: {source}")]
    Serve {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

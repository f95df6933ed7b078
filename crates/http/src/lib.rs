//! The HTTP(S) server shared by the kepler-rs binaries: the agent serves its Prometheus
//! endpoints with it, the model server its API. It serves any [`axum::Router`] on one or more
//! listen addresses, configured by the Prometheus exporter-toolkit web config file
//! ([`WebConfig`], `web.configFile`), so that files written for upstream Kepler and other
//! exporters keep working.
//!
//! # What it does
//!
//! - [`WebConfig::load`]: the web config, checked strictly when read (unknown fields and toolkit
//!   fields rustls cannot honour are errors naming the field).
//! - [`Server::bind`]: listen addresses as Go writes them (`":28282"`, `"[::1]:9102"`,
//!   `"host:0"`), bound before serving so that a bad address or certificate stops start-up.
//! - [`Server::serve`]: plain HTTP or TLS 1.2/1.3; basic auth (bcrypt) and extra headers on
//!   every route of the router; header-read and first-request timeouts; graceful shutdown.
//!   Against hostile clients (limits in docs/security.md): a connection cap derived from the
//!   open-file limit, write-stall and whole-response timeouts, bodies sent as shared slices,
//!   per-client budgets of bcrypt checks, size-limited reads of the files the web config names,
//!   certificates reloaded when their files change, and a 400 for plain HTTP on a TLS port.
//! - [`Refusals`]: counts of connections and requests turned away, by reason, for the
//!   binaries' own metrics.
//! - [`shutdown_signal`]: SIGINT/SIGTERM as the shutdown future.
//!
//! # Why these dependencies
//!
//! - `axum` for routing, because both binaries write their handlers with it; `axum-server` to
//!   serve it over TLS, with the connection builder, first-request timeout and graceful
//!   shutdown handles that `axum::serve` lacks.
//! - `rustls` with the `ring` provider, passed explicitly: one crypto backend across the
//!   workspace (no aws-lc-rs, which needs CMake and a C toolchain), and no dependence on a
//!   process-wide default provider (DESIGN §9).
//! - `bcrypt` because the toolkit's `basic_auth_users` are bcrypt hashes; `ring`'s HMAC keys the
//!   cache of verified credentials, so the cache holds no password (see the `auth` module).
//! - `serde_yaml` for the config file, `base64` for the `Authorization` header.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

mod allowed_sans;
mod auth;
mod body;
mod budget;
mod conn;
mod error;
mod files;
mod listen;
mod rate_limit;
mod refusals;
mod server;
mod signal;
mod tls;
mod tls_accept;
mod tls_choice;
pub mod web_config;

#[cfg(test)]
mod fuzz;

pub use conn::MAX_CONNECTIONS;
pub use error::HttpError;
pub use refusals::{Refusal, Refusals};
pub use server::{Server, RESPONSE_TIMEOUT, WRITE_STALL_TIMEOUT};
pub use signal::shutdown_signal;
pub use web_config::{
    BcryptHash, ClientAuth, Pem, TlsConfig, TlsVersion, WebConfig, WebConfigError, MAX_BCRYPT_COST,
};

//! The kepler-rs agent as a library: configuration, start-up selection of sources and meters,
//! the tick loop and `kepler probe`. `main.rs` only parses flags and calls in here, so tests
//! can drive every piece.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod agent;
pub mod cli;
pub mod config;
pub mod estimator;
pub mod logging;
pub mod probe;
pub mod profiling;
pub mod sampler;
pub mod service;
pub mod setup;
pub mod startup_code;

//! Helpers that the workspace's tests share, so that each is written once: the byte edits and
//! case counts of the fuzz targets ([`fuzz`]), the check for external tools that skips a test
//! locally and fails it in CI ([`tools`]), a real Prometheus scraping local ports
//! ([`prometheus`]), a real CUDA compute process ([`cuda`]), CPU time burnt to measure
//! ([`cpu`]) and short-lived processes churning in a cgroup of their own ([`churn`]). Used
//! only as a `[dev-dependencies]` entry; never published.

// No unwrap or expect; set per crate root, see [workspace.lints] in Cargo.toml. Setup failures
// here panic with a message instead, as a test's own helpers would.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod churn;
pub mod cpu;
pub mod cuda;
pub mod fuzz;
pub mod prometheus;
pub mod tools;

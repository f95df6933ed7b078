//! Prometheus exposition of kepler-rs power snapshots, and the axum router for `/metrics`.
//!
//! # Shape
//!
//! - [`registry`]: one static descriptor per metric family (name, help, type, label names as a
//!   const array, level). The encoder, `docs/metrics.md` ([`metrics_markdown`]) and the lint
//!   tests all read the descriptors.
//! - [`encode()`]: writes a [`PowerSnapshot`](kepler_core::PowerSnapshot) plus an
//!   [`ExportContext`] as Prometheus text 0.0.4 or OpenMetrics 1.0.0 into a byte buffer.
//! - [`AgentState`]: the latest snapshot and context, published by the tick loop and read by
//!   scrapes; [`router()`]: `/metrics`, `/healthz`, `/readyz` and `/` over it. Serving the
//!   router (listen addresses, TLS, basic auth from the exporter-toolkit web config, timeouts)
//!   is the shared `kepler-http` crate's job, so this crate carries no TLS or auth code.
//!
//! # Why a hand-written encoder
//!
//! The two Rust client libraries were measured against what this exporter needs (the numbers
//! are in `crates/exporters/README.md`, with the commands that produced them):
//!
//! - `prometheus-client` writes OpenMetrics only. Its counters come out as
//!   `# HELP x ...`/`# TYPE x counter` with samples `x_total`, which is correct OpenMetrics but
//!   which Debian's `promtool` 2.42 rejects when served as the classic text format (DESIGN §9),
//!   and older scrapers and tools only speak text 0.0.4.
//! - The `prometheus` crate speaks text 0.0.4, but it is built around a mutable registry of
//!   long-lived metric handles: exporting a fresh immutable snapshot each tick means resetting
//!   and refilling every labelled family (hashing each label set) or writing a custom collector
//!   that builds protobuf-shaped `MetricFamily` values — allocations per series per scrape.
//!
//! Our data is already an immutable snapshot, so encoding is a straight walk over it: label
//! values are borrowed from the snapshot, numbers go through `itoa`/`ryu` (energy as exact
//! decimals of micro-joules), and nothing is allocated per sample. Label counts are checked at
//! compile time through const generics, so hand-writing does not mean string-building lines.

// No unwrap or expect outside tests; set per crate root, see [workspace.lints] in Cargo.toml.
#![warn(clippy::unwrap_used, clippy::expect_used)]

pub mod context;
pub mod encode;
mod encode_gpu;
mod encode_workloads;
pub mod level;
pub mod liveness;
pub mod on_demand;
pub mod outputs;
pub mod registry;
pub mod routes;
pub mod scrape;
pub mod self_process;
pub mod state;

pub use context::{AgentStats, BuildInfo, EbpfCounts, ExportContext};
pub use encode::{encode, FamilyWriter, Format, MetricWriter, SampleValue};
pub use level::{Level, LevelError, MetricsLevel};
pub use on_demand::RefreshOnScrape;
pub use outputs::{Output, OutputError, PrometheusOutput, Publication, StdoutOutput};
pub use registry::{metrics_markdown, Desc, Describe, MetricType};
pub use routes::{router, router_with, Routes};
pub use scrape::ScrapeBody;
pub use self_process::{OwnProcess, ProcessStats, SelfCollectors, SelfReader};
pub use state::{AgentState, Readiness};

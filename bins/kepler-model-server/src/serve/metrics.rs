//! `GET /metrics`: the server's own figures in the Prometheus text format: requests by route
//! and status, a latency histogram per route, the models loaded and broken, uploads, the
//! retrain loop's runs and the process's resident memory.
//!
//! Requests are counted by a middleware inside the shared server's guard, so requests that
//! basic auth turns away (401) are not counted there but in `kepler_model_server_http_refused_total`,
//! with the server's other refusals. Routes are the router's templates
//! (`/models/{*path}`), never the request path, so that random 404 paths cannot grow the
//! label set; a request no route matched counts under `route="unmatched"`.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::routes::AppState;

/// Upper bounds of the latency buckets, in seconds: a model answer takes well under a
/// millisecond, an upload or a fetch of a large archive a few.
const BUCKETS: [f64; 14] = [
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 5.0,
];

#[derive(Debug, Default)]
struct Histogram {
    /// Per bucket (not cumulative); the last slot is +Inf.
    counts: [u64; BUCKETS.len() + 1],
    sum_seconds: f64,
}

impl Histogram {
    fn observe(&mut self, seconds: f64) {
        let slot = BUCKETS
            .iter()
            .position(|&b| seconds <= b)
            .unwrap_or(BUCKETS.len());
        if let Some(c) = self.counts.get_mut(slot) {
            *c += 1;
        }
        self.sum_seconds += seconds;
    }
}

#[derive(Debug, Default)]
struct ByRoute {
    requests: BTreeMap<(String, u16), u64>,
    latency: BTreeMap<String, Histogram>,
}

/// Outcome of an upload attempt that got past authentication or was refused by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum UploadOutcome {
    Stored,
    Invalid,
    Unauthorized,
}

impl UploadOutcome {
    fn label(self) -> &'static str {
        match self {
            UploadOutcome::Stored => "stored",
            UploadOutcome::Invalid => "invalid",
            UploadOutcome::Unauthorized => "unauthorized",
        }
    }
}

/// The retrain loop's result for one machine type in one run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum RetrainOutcome {
    Published,
    Kept,
    Failed,
}

impl RetrainOutcome {
    fn label(self) -> &'static str {
        match self {
            RetrainOutcome::Published => "published",
            RetrainOutcome::Kept => "kept",
            RetrainOutcome::Failed => "failed",
        }
    }
}

/// Everything `/metrics` reports that the index does not hold.
#[derive(Debug, Default)]
pub struct ServerMetrics {
    by_route: Mutex<ByRoute>,
    uploads: Mutex<BTreeMap<UploadOutcome, u64>>,
    retrains: Mutex<BTreeMap<RetrainOutcome, u64>>,
    rescans: AtomicU64,
    /// What the HTTP server turned away before any route (these never reach [`track`]).
    pub http_refusals: Arc<kepler_http::Refusals>,
}

impl ServerMetrics {
    pub fn observe(&self, route: &str, status: u16, seconds: f64) {
        // A poisoned lock only means a panic elsewhere mid-update; the counts stay usable.
        let mut m = self.by_route.lock().unwrap_or_else(|p| p.into_inner());
        *m.requests.entry((route.to_string(), status)).or_default() += 1;
        match m.latency.get_mut(route) {
            Some(h) => h.observe(seconds),
            None => {
                let mut h = Histogram::default();
                h.observe(seconds);
                m.latency.insert(route.to_string(), h);
            }
        }
    }

    pub fn upload(&self, outcome: UploadOutcome) {
        let mut m = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(outcome).or_default() += 1;
    }

    pub fn retrain(&self, outcome: RetrainOutcome) {
        let mut m = self.retrains.lock().unwrap_or_else(|p| p.into_inner());
        *m.entry(outcome).or_default() += 1;
    }

    pub fn rescanned(&self) {
        self.rescans.fetch_add(1, Ordering::Relaxed);
    }

    /// The exposition text; `models` and `broken` come from the current index.
    pub fn encode(&self, models: usize, broken: usize, rss_bytes: Option<u64>) -> String {
        let mut out = String::with_capacity(4096);
        let _ = self.encode_into(&mut out, models, broken, rss_bytes);
        out
    }

    fn encode_into(
        &self,
        out: &mut String,
        models: usize,
        broken: usize,
        rss_bytes: Option<u64>,
    ) -> std::fmt::Result {
        let by_route = self.by_route.lock().unwrap_or_else(|p| p.into_inner());
        family(
            out,
            "kepler_model_server_http_requests_total",
            "counter",
            "HTTP requests answered, by route template and status code",
        )?;
        for ((route, status), n) in &by_route.requests {
            writeln!(
                out,
                "kepler_model_server_http_requests_total{{route=\"{}\",status=\"{status}\"}} {n}",
                escape(route)
            )?;
        }
        let name = "kepler_model_server_http_request_duration_seconds";
        family(
            out,
            name,
            "histogram",
            "Time to answer an HTTP request, by route template",
        )?;
        for (route, h) in &by_route.latency {
            let route = escape(route);
            let mut cumulative = 0u64;
            for (bound, n) in BUCKETS.iter().zip(h.counts.iter()) {
                cumulative += n;
                writeln!(
                    out,
                    "{name}_bucket{{route=\"{route}\",le=\"{bound}\"}} {cumulative}"
                )?;
            }
            let total: u64 = h.counts.iter().sum();
            writeln!(
                out,
                "{name}_bucket{{route=\"{route}\",le=\"+Inf\"}} {total}"
            )?;
            writeln!(out, "{name}_sum{{route=\"{route}\"}} {}", h.sum_seconds)?;
            writeln!(out, "{name}_count{{route=\"{route}\"}} {total}")?;
        }
        drop(by_route);

        let refused = "kepler_model_server_http_refused_total";
        family(
            out,
            refused,
            "counter",
            "Connections and requests the HTTP server turned away: connection_limit (waited for a free connection slot), unauthorized (401, basic auth) or rate_limited (429)",
        )?;
        for reason in kepler_http::Refusal::ALL {
            let n = self.http_refusals.get(reason);
            writeln!(out, "{refused}{{reason=\"{}\"}} {n}", reason.as_str())?;
        }

        family(
            out,
            "kepler_model_server_models_loaded",
            "gauge",
            "Model files served from the current index",
        )?;
        writeln!(out, "kepler_model_server_models_loaded {models}")?;
        family(
            out,
            "kepler_model_server_models_broken",
            "gauge",
            "Files of the model directory that did not load and are not served",
        )?;
        writeln!(out, "kepler_model_server_models_broken {broken}")?;
        family(
            out,
            "kepler_model_server_rescans_total",
            "counter",
            "Successful re-reads of the model directory (SIGHUP, uploads, retraining)",
        )?;
        writeln!(
            out,
            "kepler_model_server_rescans_total {}",
            self.rescans.load(Ordering::Relaxed)
        )?;

        family(
            out,
            "kepler_model_server_uploads_total",
            "counter",
            "Model uploads by outcome: stored, invalid (bad name or content) or unauthorized",
        )?;
        let uploads = self.uploads.lock().unwrap_or_else(|p| p.into_inner());
        for outcome in [
            UploadOutcome::Stored,
            UploadOutcome::Invalid,
            UploadOutcome::Unauthorized,
        ] {
            let n = uploads.get(&outcome).copied().unwrap_or(0);
            writeln!(
                out,
                "kepler_model_server_uploads_total{{outcome=\"{}\"}} {n}",
                outcome.label()
            )?;
        }
        drop(uploads);

        family(
            out,
            "kepler_model_server_retrain_runs_total",
            "counter",
            "Retraining results per machine type: published (beat the served models), kept or failed",
        )?;
        let retrains = self.retrains.lock().unwrap_or_else(|p| p.into_inner());
        for outcome in [
            RetrainOutcome::Published,
            RetrainOutcome::Kept,
            RetrainOutcome::Failed,
        ] {
            let n = retrains.get(&outcome).copied().unwrap_or(0);
            writeln!(
                out,
                "kepler_model_server_retrain_runs_total{{outcome=\"{}\"}} {n}",
                outcome.label()
            )?;
        }
        drop(retrains);

        if let Some(rss) = rss_bytes {
            family(
                out,
                "process_resident_memory_bytes",
                "gauge",
                "Resident memory size in bytes.",
            )?;
            writeln!(out, "process_resident_memory_bytes {rss}")?;
        }
        Ok(())
    }
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) -> std::fmt::Result {
    writeln!(out, "# HELP {name} {help}")?;
    writeln!(out, "# TYPE {name} {kind}")
}

/// Label values per the exposition format: backslash, double quote and newline escaped.
fn escape(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// This process's resident set size, from `/proc/self/status` (`VmRSS`, in kB); `None` where
/// there is no procfs.
pub fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// The middleware that times and counts every routed request.
pub async fn track(State(state): State<Arc<AppState>>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| "unmatched".to_string(), |p| p.as_str().to_string());
    let started = Instant::now();
    let response = next.run(request).await;
    state.metrics.observe(
        &route,
        response.status().as_u16(),
        started.elapsed().as_secs_f64(),
    );
    response
}

/// `GET /metrics`.
pub async fn get(State(state): State<Arc<AppState>>) -> Response {
    let index = state.index();
    let body = state
        .metrics
        .encode(index.models.len(), index.broken.len(), resident_bytes());
    (
        StatusCode::OK,
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative_and_counts_match() {
        let m = ServerMetrics::default();
        m.observe("/model", 200, 0.0002);
        m.observe("/model", 200, 0.003);
        m.observe("/model", 400, 10.0);
        let text = m.encode(3, 1, Some(4096));
        let line = |prefix: &str| {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .unwrap_or_else(|| panic!("{prefix} missing in\n{text}"))
                .rsplit(' ')
                .next()
                .unwrap()
                .to_string()
        };
        let h = "kepler_model_server_http_request_duration_seconds";
        assert_eq!(
            line(&format!("{h}_bucket{{route=\"/model\",le=\"0.0001\"}}")),
            "0"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{route=\"/model\",le=\"0.00025\"}}")),
            "1"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{route=\"/model\",le=\"0.005\"}}")),
            "2"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{route=\"/model\",le=\"5\"}}")),
            "2"
        );
        assert_eq!(
            line(&format!("{h}_bucket{{route=\"/model\",le=\"+Inf\"}}")),
            "3"
        );
        assert_eq!(line(&format!("{h}_count{{route=\"/model\"}}")), "3");
        let r = "kepler_model_server_http_requests_total";
        assert_eq!(
            line(&format!("{r}{{route=\"/model\",status=\"200\"}}")),
            "2"
        );
        assert_eq!(
            line(&format!("{r}{{route=\"/model\",status=\"400\"}}")),
            "1"
        );
        assert_eq!(line("kepler_model_server_models_loaded "), "3");
        assert_eq!(line("kepler_model_server_models_broken "), "1");
        assert_eq!(line("process_resident_memory_bytes "), "4096");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(escape("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }

    #[test]
    fn this_process_has_a_resident_size() {
        assert!(resident_bytes().is_some_and(|b| b > 0));
    }
}

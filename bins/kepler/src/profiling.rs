//! `debug.pprof.enabled` (`--debug.pprof`): CPU and heap profiles at upstream's
//! `/debug/pprof/` paths, in pprof protobuf format, gzipped as Go serves them, so `go tool
//! pprof http://node:28282/debug/pprof/profile` works against this agent as against upstream.
//! The routes join the exporter's router, so the same TLS and basic auth guard them.
//!
//! CPU profiles sample stacks on `SIGPROF` at Go's 100 Hz (the `pprof` crate). Heap profiles
//! come from jemalloc's own sampling profiler, which exists only where jemalloc is the
//! allocator: the `kepler` binary allocates with the system allocator unless profiles are
//! asked for, and then restarts itself on jemalloc with profiling on (bins/kepler/src/
//! allocator.rs). Off, none of these paths is served (404). A heap dump goes through a
//! temporary file (jemalloc writes its dumps to files), so `/debug/pprof/heap` needs a writable
//! `TMPDIR`.

use std::io::Write;
use std::time::Duration;

use axum::extract::Query;
use axum::http::header::{CONTENT_DISPOSITION, CONTENT_TYPE};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use serde::Deserialize;

/// Go's `runtime.SetCPUProfileRate` default.
const CPU_HZ: i32 = 100;
/// Go's default profile length.
const DEFAULT_SECONDS: u64 = 30;
/// A longer profile holds the (process-wide, single) profiler and a connection for longer
/// than anyone means to; Go bounds it by the server's write timeout.
const MAX_SECONDS: u64 = 600;

/// Set in a process's environment, the `kepler` binary allocates with jemalloc and profiles
/// its heap from the first allocation (bins/kepler/src/allocator.rs); it sets it itself and
/// restarts when `debug.pprof.enabled` is on.
pub const HEAP_ENV: &std::ffi::CStr = c"KEPLER_HEAP_PROFILING";

/// Whether this process allocates with jemalloc: the allocator chose from the same variable
/// before the first allocation, and nothing changes the environment since.
fn on_jemalloc() -> bool {
    HEAP_ENV.to_str().ok().and_then(std::env::var_os).is_some()
}

/// Why a profile could not be served.
#[derive(Debug, thiserror::Error)]
pub enum ProfileError {
    #[error("seconds must be a whole number from 1 to {MAX_SECONDS}, got {0}")]
    BadSeconds(u64),
    #[error("could not start the CPU profiler (is another profile running?): {0}")]
    CpuStart(pprof::Error),
    #[error("could not build the CPU profile: {0}")]
    CpuReport(pprof::Error),
    #[error(
        "heap profiling is not available: this binary does not run on jemalloc with profiling"
    )]
    HeapUnavailable,
    #[error("could not dump the heap profile: {0}")]
    HeapDump(String),
    #[error("could not encode the profile: {0}")]
    Encode(std::io::Error),
}

impl IntoResponse for ProfileError {
    fn into_response(self) -> Response {
        let status = match self {
            ProfileError::BadSeconds(_) => StatusCode::BAD_REQUEST,
            ProfileError::HeapUnavailable => StatusCode::NOT_IMPLEMENTED,
            _ => StatusCode::INTERNAL_SERVER_ERROR,
        };
        (status, format!("{self}\n")).into_response()
    }
}

/// The profile routes, to merge into the served router.
pub fn router() -> Router {
    Router::new()
        .route("/debug/pprof/", get(index))
        .route("/debug/pprof/profile", get(cpu))
        .route("/debug/pprof/heap", get(heap))
}

/// Every path [`router`] serves (for docs/compatibility.md's check).
pub const PATHS: &[&str] = &["/debug/pprof/", "/debug/pprof/profile", "/debug/pprof/heap"];

async fn index() -> Html<&'static str> {
    Html(
        "<html><head><title>/debug/pprof/</title></head><body>\n\
         <p>Profiles of the kepler-rs agent, in pprof format (gzipped protobuf):</p>\n\
         <ul>\n\
         <li><a href=\"profile?seconds=30\">profile</a>: CPU profile; <code>seconds</code> sets its length (default 30)</li>\n\
         <li><a href=\"heap\">heap</a>: memory in use, sampled by jemalloc</li>\n\
         </ul>\n\
         <p>Read them with <code>go tool pprof</code>.</p>\n\
         </body></html>\n",
    )
}

#[derive(Deserialize)]
struct CpuParams {
    seconds: Option<u64>,
}

async fn cpu(Query(params): Query<CpuParams>) -> Result<Response, ProfileError> {
    let seconds = params.seconds.unwrap_or(DEFAULT_SECONDS);
    if seconds == 0 || seconds > MAX_SECONDS {
        return Err(ProfileError::BadSeconds(seconds));
    }
    let guard = pprof::ProfilerGuardBuilder::default()
        .frequency(CPU_HZ)
        // Unwinding through these from a signal handler can deadlock or crash.
        .blocklist(&["libc", "libgcc", "pthread", "vdso"])
        .build()
        .map_err(ProfileError::CpuStart)?;
    tokio::time::sleep(Duration::from_secs(seconds)).await;
    let profile = guard
        .report()
        .build()
        .and_then(|report| report.pprof())
        .map_err(ProfileError::CpuReport)?;
    drop(guard);
    let bytes = gzip(&pprof::protos::Message::encode_to_vec(&profile))?;
    Ok(profile_response(bytes, "profile"))
}

async fn heap() -> Result<Response, ProfileError> {
    let bytes = heap_profile().await?;
    Ok(profile_response(bytes, "heap"))
}

fn profile_response(bytes: Vec<u8>, name: &str) -> Response {
    (
        [
            (CONTENT_TYPE, "application/octet-stream".to_string()),
            (
                CONTENT_DISPOSITION,
                format!("attachment; filename=\"{name}\""),
            ),
        ],
        bytes,
    )
        .into_response()
}

fn gzip(data: &[u8]) -> Result<Vec<u8>, ProfileError> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    encoder.write_all(data).map_err(ProfileError::Encode)?;
    encoder.finish().map_err(ProfileError::Encode)
}

#[cfg(not(target_env = "msvc"))]
async fn heap_profile() -> Result<Vec<u8>, ProfileError> {
    // jemalloc linked in but not allocating would answer with an empty profile.
    if !on_jemalloc() {
        return Err(ProfileError::HeapUnavailable);
    }
    let ctl = jemalloc_pprof::PROF_CTL
        .as_ref()
        .ok_or(ProfileError::HeapUnavailable)?
        .clone();
    // Writing the dump, reading it back and symbolising it is file and CPU work: off the
    // async workers.
    tokio::task::spawn_blocking(move || {
        let mut ctl = ctl.blocking_lock();
        if !ctl.activated() {
            return Err(ProfileError::HeapUnavailable);
        }
        ctl.dump_pprof()
            .map_err(|e| ProfileError::HeapDump(format!("{e:#}")))
    })
    .await
    .map_err(|e| ProfileError::HeapDump(e.to_string()))?
}

#[cfg(target_env = "msvc")]
async fn heap_profile() -> Result<Vec<u8>, ProfileError> {
    Err(ProfileError::HeapUnavailable)
}

/// Makes sure jemalloc's allocation sampling is on. Returns whether heap profiles will be
/// served; `false` where the process does not run on jemalloc with profiling (the library's own
/// tests, or a binary that could not restart on it).
pub async fn activate_heap_profiling() -> bool {
    #[cfg(not(target_env = "msvc"))]
    {
        if !on_jemalloc() {
            return false;
        }
        let Some(ctl) = jemalloc_pprof::PROF_CTL.as_ref() else {
            return false;
        };
        let mut ctl = ctl.lock().await;
        match ctl.activate() {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!(error = %e, "could not activate jemalloc heap profiling");
                false
            }
        }
    }
    #[cfg(target_env = "msvc")]
    false
}

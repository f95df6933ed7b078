//! The HTTP(S) server: `/metrics`, `/healthz`, `/readyz` and a landing page, with optional TLS
//! and basic auth from the web config.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE, WWW_AUTHENTICATE};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use base64::Engine as _;
use ring::hmac;
use tokio::sync::Semaphore;

use crate::encode::Format;
use crate::state::{AgentState, Readiness};
use crate::web_config::{BcryptHash, WebConfig, WebConfigError};

/// How long in-flight requests may take to finish once shutdown starts.
const GRACE: Duration = Duration::from_secs(5);
/// A new connection must have its first request dispatched within this time. This bounds what
/// hyper's own timers do not: protocol detection (HTTP/1 or the HTTP/2 preface) and the first
/// request of an HTTP/2 connection. For TLS the clock starts after the handshake, which the
/// rustls acceptor bounds by itself (10 s by default).
const FIRST_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// An HTTP/1 connection must deliver each request's complete header within this time (the
/// slow-loris guard on keep-alive connections; axum-server turns hyper's default off). Hyper
/// starts the clock as soon as it waits for the next request, so this also closes HTTP/1
/// connections left idle this long; it is above Prometheus' default 1 m scrape interval so that
/// a scraper's keep-alive connection normally survives between scrapes. HTTP/2 connections
/// (prior-knowledge clients only, see [`WebConfig::http1_only`]) are not covered by it.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(90);

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
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
    #[error(transparent)]
    WebConfig(#[from] WebConfigError),
    #[error("serving on {address}: {source}")]
    Serve {
        address: SocketAddr,
        #[source]
        source: std::io::Error,
    },
}

/// Bound sockets and the checked web config, ready to serve. Splitting binding from serving
/// lets callers learn the actual addresses (port 0 in tests) and fail start-up on a bad address
/// or certificate before anything else runs.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    addrs: Vec<SocketAddr>,
    tls: Option<Arc<rustls::ServerConfig>>,
    http1_only: bool,
    guard: Arc<Guard>,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addrs", &self.addrs)
            .field("tls", &self.tls.is_some())
            .field("http1_only", &self.http1_only)
            .field("basic_auth", &self.guard.auth.is_some())
            .finish()
    }
}

/// Binds every listen address (`":28282"`, `"127.0.0.1:0"`, `"[::1]:9102"`, `"host:port"`) and
/// prepares TLS and basic auth from `web`.
pub async fn bind(listen: &[String], web: Option<WebConfig>) -> Result<Server, ServeError> {
    if listen.is_empty() {
        return Err(ServeError::NoAddress);
    }
    let (tls, guard) = match &web {
        Some(web) => (web.rustls_config()?, Guard::new(web)?),
        None => (None, Guard::default()),
    };
    let mut listeners = Vec::with_capacity(listen.len());
    let mut addrs = Vec::with_capacity(listen.len());
    for address in listen {
        let listener = bind_one(address).await?;
        let local = listener.local_addr().map_err(|source| ServeError::Bind {
            address: address.clone(),
            source,
        })?;
        listeners.push(listener);
        addrs.push(local);
    }
    Ok(Server {
        listeners,
        addrs,
        tls,
        http1_only: web.as_ref().is_some_and(|w| w.http1_only),
        guard: Arc::new(guard),
    })
}

/// Binds and serves until `shutdown` completes; see [`bind`] and [`Server::serve`].
pub async fn serve(
    listen: Vec<String>,
    web: Option<WebConfig>,
    state: Arc<AgentState>,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServeError> {
    bind(&listen, web).await?.serve(state, shutdown).await
}

async fn bind_one(address: &str) -> Result<std::net::TcpListener, ServeError> {
    let bad = |reason: &str| ServeError::Address {
        address: address.to_string(),
        reason: reason.to_string(),
    };
    let bind_err = |source| ServeError::Bind {
        address: address.to_string(),
        source,
    };
    let (host, port) = address
        .rsplit_once(':')
        .ok_or_else(|| bad("expected host:port or :port"))?;
    let port: u16 = port.parse().map_err(|_| bad("the port is not a number"))?;
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);

    if host.is_empty() {
        // ":port" means every interface, as in Go. An IPv6 wildcard socket also takes IPv4
        // on Linux (bindv6only=0); hosts with IPv6 disabled get the IPv4 wildcard instead.
        let v6 = SocketAddr::new(IpAddr::V6(Ipv6Addr::UNSPECIFIED), port);
        return match std::net::TcpListener::bind(v6) {
            Ok(l) => Ok(l),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse => Err(bind_err(e)),
            Err(e) => {
                tracing::debug!(error = %e, "IPv6 wildcard bind failed; using 0.0.0.0");
                let v4 = SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), port);
                std::net::TcpListener::bind(v4).map_err(bind_err)
            }
        };
    }
    let target = match host.parse::<IpAddr>() {
        Ok(ip) => SocketAddr::new(ip, port),
        Err(_) => tokio::net::lookup_host((host, port))
            .await
            .map_err(|e| bad(&format!("cannot resolve {host:?}: {e}")))?
            .next()
            .ok_or_else(|| bad(&format!("{host:?} resolves to no address")))?,
    };
    std::net::TcpListener::bind(target).map_err(bind_err)
}

impl Server {
    /// The bound addresses, in the order of the listen list.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Serves until `shutdown` completes, then stops accepting and lets in-flight requests
    /// finish (up to a few seconds). Returns early with an error if a listener fails.
    pub async fn serve(
        self,
        state: Arc<AgentState>,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServeError> {
        let app = router(state, self.guard.clone());
        let mut handles = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (listener, address) in self.listeners.into_iter().zip(self.addrs.iter().copied()) {
            let handle = axum_server::Handle::new();
            handles.push(handle.clone());
            let make = app.clone().into_make_service();
            let serve_err = move |source| ServeError::Serve { address, source };
            match &self.tls {
                Some(tls) => {
                    let config = axum_server::tls_rustls::RustlsConfig::from_config(tls.clone());
                    let server = axum_server::from_tcp_rustls(listener, config)
                        .map_err(serve_err)?
                        .handle(handle);
                    let server = limit_connections(server, self.http1_only);
                    tasks.spawn(async move { server.serve(make).await.map_err(serve_err) });
                }
                None => {
                    let server = axum_server::from_tcp(listener)
                        .map_err(serve_err)?
                        .handle(handle);
                    let server = limit_connections(server, self.http1_only);
                    tasks.spawn(async move { server.serve(make).await.map_err(serve_err) });
                }
            }
            tracing::info!(%address, tls = self.tls.is_some(), "serving metrics");
        }

        let mut result = Ok(());
        tokio::select! {
            () = shutdown => {}
            Some(ended) = tasks.join_next() => {
                // A listener stopped on its own: that is a failure; stop the others too.
                result = match ended {
                    Ok(r) => r,
                    Err(join) => Err(ServeError::Serve {
                        address: self.addrs.first().copied().unwrap_or(SocketAddr::from(([0, 0, 0, 0], 0))),
                        source: std::io::Error::other(join.to_string()),
                    }),
                };
            }
        }
        for handle in &handles {
            handle.graceful_shutdown(Some(GRACE));
        }
        while let Some(ended) = tasks.join_next().await {
            if let Ok(Err(e)) = ended {
                if result.is_ok() {
                    result = Err(e);
                }
            }
        }
        result
    }
}

/// The per-connection limits, the same for plain and TLS listeners.
fn limit_connections<A: axum_server::Address, Acc>(
    server: axum_server::Server<A, Acc>,
    http1_only: bool,
) -> axum_server::Server<A, Acc> {
    let mut server = if http1_only {
        server.http1_only()
    } else {
        server
    };
    // axum-server's builder already has a Tokio timer, which hyper needs for this timeout.
    server
        .http_builder()
        .http1()
        .header_read_timeout(HEADER_READ_TIMEOUT);
    server.first_request_timeout(FIRST_REQUEST_TIMEOUT)
}

fn router(state: Arc<AgentState>, guard: Arc<Guard>) -> Router {
    Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .route("/", get(index))
        .with_state(state)
        .layer(middleware::from_fn_with_state(guard, guard_layer))
}

async fn metrics(State(state): State<Arc<AgentState>>, headers: HeaderMap) -> Response {
    let accept = headers.get(ACCEPT).and_then(|v| v.to_str().ok());
    let format = Format::negotiate(accept);
    // Only encoding happens here: the snapshot was computed by the tick loop.
    let body = state.encode(format);
    (
        [(
            CONTENT_TYPE,
            HeaderValue::from_static(format.content_type()),
        )],
        Body::from(body),
    )
        .into_response()
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(state): State<Arc<AgentState>>) -> Response {
    match state.readiness() {
        Readiness::Ready => (StatusCode::OK, "ready").into_response(),
        Readiness::NotReady { reason } => (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("not ready: {reason}"),
        )
            .into_response(),
    }
}

async fn index(State(state): State<Arc<AgentState>>) -> Html<String> {
    let version = escape_html(&state.context().build.version);
    Html(format!(
        "<!DOCTYPE html>\n<html><head><title>Kepler</title></head><body>\n\
         <h1>Kepler</h1>\n<p>Power consumption exporter (kepler-rs {version}).</p>\n<ul>\n\
         <li><a href=\"metrics\">metrics</a></li>\n\
         <li><a href=\"healthz\">healthz</a></li>\n\
         <li><a href=\"readyz\">readyz</a></li>\n</ul>\n</body></html>\n"
    ))
}

fn escape_html(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Basic auth and extra headers, applied to every route.
#[derive(Default)]
struct Guard {
    auth: Option<BasicAuth>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

impl Guard {
    /// `web` was checked when it was parsed (header names and values, bcrypt hashes); what can
    /// still fail here is preparing basic auth (randomness, the dummy hash).
    fn new(web: &WebConfig) -> Result<Guard, WebConfigError> {
        let auth = if web.basic_auth_users.is_empty() {
            None
        } else {
            Some(BasicAuth::new(web)?)
        };
        Ok(Guard {
            auth,
            headers: web.headers.clone(),
        })
    }
}

async fn guard_layer(State(guard): State<Arc<Guard>>, request: Request, next: Next) -> Response {
    let mut response = match &guard.auth {
        Some(auth) if !auth.check(request.headers().get(AUTHORIZATION)).await => {
            let mut r = (StatusCode::UNAUTHORIZED, "Unauthorized\n").into_response();
            r.headers_mut().insert(
                WWW_AUTHENTICATE,
                HeaderValue::from_static("Basic realm=\"kepler\", charset=\"UTF-8\""),
            );
            r
        }
        _ => next.run(request).await,
    };
    for (name, value) in &guard.headers {
        response.headers_mut().insert(name.clone(), value.clone());
    }
    response
}

/// Basic auth against bcrypt hashes. bcrypt is deliberately slow (tens of milliseconds at the
/// usual cost), too slow to pay on every scrape, so a successful check is remembered under an
/// HMAC of the presented credentials with a per-process random key: the cache holds no
/// password, and its keys are useless outside this process.
///
/// Failed checks are not cached, so every request with bad credentials costs a bcrypt run. To
/// keep an unauthenticated client from occupying every core with them, at most
/// [`BasicAuth::MAX_CONCURRENT_BCRYPT`] run at once and further requests wait their turn
/// (exporter-toolkit serialises them behind a mutex). Credentials already verified skip the
/// queue, so a scraper that has authenticated once keeps being answered during such a flood.
struct BasicAuth {
    users: HashMap<String, BcryptHash>,
    /// Checked for unknown users so that a wrong name costs as much as a wrong password, which
    /// keeps user names from being probed by timing.
    dummy_hash: String,
    key: hmac::Key,
    verified: Mutex<HashSet<[u8; 32]>>,
    /// One permit per bcrypt run allowed at a time.
    bcrypt_permits: Arc<Semaphore>,
    /// bcrypt runs in progress and the most seen at once, so that tests can check the bound.
    bcrypt_running: Arc<BcryptRunning>,
}

#[derive(Default)]
struct BcryptRunning {
    now: AtomicUsize,
    peak: AtomicUsize,
}

impl BasicAuth {
    /// Bounds the cache; every entry is a distinct valid credential, so this is only reached
    /// by many users or password changes without restart.
    const MAX_CACHED: usize = 1024;
    /// Small enough to leave cores for the tick loop and for scrapes; two rather than the
    /// toolkit's one so that a single check in progress does not stall every other login.
    const MAX_CONCURRENT_BCRYPT: usize = 2;

    fn new(web: &WebConfig) -> Result<BasicAuth, WebConfigError> {
        let err = |message: String| WebConfigError::Field {
            file: web.file.clone(),
            field: "basic_auth_users".to_string(),
            message,
        };
        // bcrypt's minimum cost; the dummy hash costs as much as the dearest real one.
        let cost = web
            .basic_auth_users
            .values()
            .map(BcryptHash::cost)
            .fold(4, u32::max);
        let dummy_hash = bcrypt::hash("kepler-dummy-password", cost)
            .map_err(|e| err(format!("preparing bcrypt: {e}")))?;
        let rng = ring::rand::SystemRandom::new();
        let key = hmac::Key::generate(hmac::HMAC_SHA256, &rng)
            .map_err(|_| err("no system randomness".into()))?;
        Ok(BasicAuth {
            users: web.basic_auth_users.clone().into_iter().collect(),
            dummy_hash,
            key,
            verified: Mutex::new(HashSet::new()),
            bcrypt_permits: Arc::new(Semaphore::new(Self::MAX_CONCURRENT_BCRYPT)),
            bcrypt_running: Arc::default(),
        })
    }

    async fn check(&self, header: Option<&HeaderValue>) -> bool {
        let Some(decoded) = header.and_then(decode_basic) else {
            return false;
        };
        let mut tag = [0u8; 32];
        tag.copy_from_slice(hmac::sign(&self.key, &decoded).as_ref());
        if self.cache().contains(&tag) {
            return true;
        }

        let Some(colon) = decoded.iter().position(|&b| b == b':') else {
            return false;
        };
        let (user, password) = (&decoded[..colon], decoded[colon + 1..].to_vec());
        let user_hash = std::str::from_utf8(user)
            .ok()
            .and_then(|u| self.users.get(u));
        let (hash, known) = match user_hash {
            Some(h) => (h.as_str().to_string(), true),
            None => (self.dummy_hash.clone(), false),
        };
        // Wait for a turn (FIFO). The semaphore is never closed, so an error cannot happen;
        // should it, the request is refused rather than let through.
        let Ok(permit) = self.bcrypt_permits.clone().acquire_owned().await else {
            return false;
        };
        let running = self.bcrypt_running.clone();
        // bcrypt blocks for tens of milliseconds: keep it off the async workers. Passwords
        // longer than bcrypt's 72 bytes are rejected rather than truncated, as Go's bcrypt does.
        let ok = tokio::task::spawn_blocking(move || {
            // The permit lives in the blocking task, not in the request: a client that hangs
            // up mid-check would otherwise free its permit while bcrypt still runs.
            let _permit = permit;
            let now = running.now.fetch_add(1, Ordering::SeqCst) + 1;
            running.peak.fetch_max(now, Ordering::SeqCst);
            let ok = bcrypt::non_truncating_verify(&password, &hash).unwrap_or(false);
            running.now.fetch_sub(1, Ordering::SeqCst);
            ok
        })
        .await
        .unwrap_or(false);
        if ok && known {
            let mut cache = self.cache();
            if cache.len() >= Self::MAX_CACHED {
                cache.clear();
            }
            cache.insert(tag);
            true
        } else {
            false
        }
    }

    fn cache(&self) -> std::sync::MutexGuard<'_, HashSet<[u8; 32]>> {
        self.verified.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// `Basic <base64(user:password)>` → the decoded bytes.
fn decode_basic(value: &HeaderValue) -> Option<Vec<u8>> {
    let value = value.to_str().ok()?.trim();
    let (scheme, rest) = value.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    base64::engine::general_purpose::STANDARD
        .decode(rest.trim())
        .ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn basic_header_decoding() {
        let v = HeaderValue::from_static("Basic YWxpY2U6c2VjcmV0");
        assert_eq!(decode_basic(&v).unwrap(), b"alice:secret");
        let v = HeaderValue::from_static("basic   YWxpY2U6c2VjcmV0 ");
        assert_eq!(decode_basic(&v).unwrap(), b"alice:secret");
        assert!(decode_basic(&HeaderValue::from_static("Bearer abc")).is_none());
        assert!(decode_basic(&HeaderValue::from_static("Basic !!!")).is_none());
    }

    #[tokio::test]
    async fn bad_addresses_are_named() {
        for a in ["28282", "127.0.0.1:http", "[::1]:99999"] {
            let err = bind(&[a.to_string()], None).await.unwrap_err();
            assert!(err.to_string().contains(a), "{err}");
        }
        assert!(matches!(bind(&[], None).await, Err(ServeError::NoAddress)));
    }

    fn basic(user: &str, password: &str) -> HeaderValue {
        let encoded =
            base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        HeaderValue::from_str(&format!("Basic {encoded}")).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn bcrypt_checks_are_bounded_and_verified_credentials_skip_the_queue() {
        // Cost 6 makes each check long enough that, without the bound, many would overlap.
        let hash = bcrypt::hash("s3cret", 6).unwrap();
        let web = WebConfig::parse(
            &format!("basic_auth_users:\n  alice: '{hash}'\n"),
            std::path::Path::new("."),
            "web.yml",
        )
        .unwrap();
        let auth = Arc::new(BasicAuth::new(&web).unwrap());
        let good = basic("alice", "s3cret");
        assert!(auth.check(Some(&good)).await);
        // That check ran bcrypt once; count from here.
        auth.bcrypt_running.peak.store(0, Ordering::SeqCst);

        // Take every permit: no bcrypt check can start until they are given back.
        let held = auth
            .bcrypt_permits
            .clone()
            .acquire_many_owned(BasicAuth::MAX_CONCURRENT_BCRYPT as u32)
            .await
            .unwrap();
        let mut bad = tokio::task::JoinSet::new();
        for i in 0..32 {
            let auth = auth.clone();
            // Wrong passwords and unknown users: both cost a bcrypt run.
            let header = if i % 2 == 0 {
                basic("alice", &format!("guess{i}"))
            } else {
                basic(&format!("user{i}"), "s3cret")
            };
            bad.spawn(async move { auth.check(Some(&header)).await });
        }
        for _ in 0..100 {
            tokio::task::yield_now().await;
        }
        // Verified credentials are answered from the cache while the bad ones are queued. The
        // timeout only turns a hang (the cached path waiting for a permit) into a failure.
        let cached = tokio::time::timeout(Duration::from_secs(30), auth.check(Some(&good)))
            .await
            .expect("verified credentials must not wait for a bcrypt permit");
        assert!(cached);
        assert_eq!(auth.bcrypt_running.peak.load(Ordering::SeqCst), 0);

        drop(held);
        while let Some(result) = bad.join_next().await {
            assert!(!result.unwrap(), "bad credentials were accepted");
        }
        let peak = auth.bcrypt_running.peak.load(Ordering::SeqCst);
        assert!(
            (1..=BasicAuth::MAX_CONCURRENT_BCRYPT).contains(&peak),
            "{peak} bcrypt checks ran at once"
        );
        assert_eq!(auth.bcrypt_running.now.load(Ordering::SeqCst), 0);
        assert_eq!(
            auth.bcrypt_permits.available_permits(),
            BasicAuth::MAX_CONCURRENT_BCRYPT
        );
    }

    /// With the clock paused, Tokio jumps to the next timer whenever every task waits, so this
    /// runs instantly and does not depend on how fast the machine is.
    #[tokio::test(start_paused = true)]
    async fn http1_connections_that_stall_in_a_header_are_closed() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let server = bind(&["127.0.0.1:0".to_string()], None).await.unwrap();
        let addr = server.local_addrs()[0];
        let state = Arc::new(AgentState::new(crate::ExportContext::new("n")));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(state, async {
            let _ = stopped.await;
        }));

        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        // A complete first request: past the first-request timeout, into keep-alive.
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: k\r\n\r\n")
            .await
            .unwrap();
        let mut buf = [0u8; 1024];
        let mut response = Vec::new();
        while !response.ends_with(b"\r\n\r\nok") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "closed before answering");
            response.extend_from_slice(&buf[..n]);
        }
        // A second request whose header never ends.
        conn.write_all(b"GET /healthz HTTP/1.1\r\nHost: k\r\n")
            .await
            .unwrap();
        let started = tokio::time::Instant::now();
        let closed = tokio::time::timeout(HEADER_READ_TIMEOUT * 2, async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    // An error response (408) may come before the close.
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(closed.is_ok(), "the stalled connection was left open");
        assert!(started.elapsed() <= HEADER_READ_TIMEOUT);

        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn wildcard_and_named_hosts_bind() {
        let s = bind(&[":0".to_string(), "localhost:0".to_string()], None)
            .await
            .unwrap();
        assert_eq!(s.local_addrs().len(), 2);
        assert!(s.local_addrs()[0].ip().is_unspecified());
        assert!(s.local_addrs()[1].ip().is_loopback());
    }
}

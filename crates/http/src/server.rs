//! Binding listen addresses and serving a router on them, over plain HTTP or TLS, with basic
//! auth in front of every route, per-connection timeouts and graceful shutdown.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::middleware;
use axum::response::Response;
use axum::Router;
use axum_server::tls_rustls::{RustlsAcceptor, RustlsConfig};
use tokio::sync::Semaphore;

use crate::auth::{guard_layer, Guard};
use crate::body::Paced;
use crate::conn::{connection_limit, CappedListener, ClientAddr};
use crate::error::HttpError;
use crate::listen::bind_one;
use crate::refusals::Refusals;
use crate::tls_accept::{reload_on_change, RefusePlainHttp, RELOAD_CHECK};
use crate::web_config::WebConfig;

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
/// A write that makes no progress this long closes the connection: the peer stopped reading.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(20);
/// A response must be sent whole within this time. It bounds how long a reader that drains a
/// little now and then keeps a response, and the snapshot it was encoded from, in memory.
/// Above the scrape timeouts Prometheus allows in practice (at most the scrape interval).
pub const RESPONSE_TIMEOUT: Duration = Duration::from_secs(60);

/// Bound sockets and the checked web config, ready to serve. Splitting binding from serving
/// lets callers learn the actual addresses (port 0 in tests) and fail start-up on a bad address
/// or certificate before anything else runs.
pub struct Server {
    listeners: Vec<std::net::TcpListener>,
    addrs: Vec<SocketAddr>,
    tls: Option<Arc<rustls::ServerConfig>>,
    http1_only: bool,
    guard: Guard,
    /// Kept to rebuild the TLS configuration when its files change.
    web: Option<WebConfig>,
    max_connections: usize,
}

impl std::fmt::Debug for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Server")
            .field("addrs", &self.addrs)
            .field("tls", &self.tls.is_some())
            .field("http1_only", &self.http1_only)
            .field("basic_auth", &self.guard.has_basic_auth())
            .field("max_connections", &self.max_connections)
            .finish()
    }
}

impl Server {
    /// Binds every listen address (`":28282"`, `"127.0.0.1:0"`, `"[::1]:9102"`, `"host:port"`)
    /// and prepares TLS and basic auth from `web`, reading the certificate files now.
    pub async fn bind(listen: &[String], web: Option<WebConfig>) -> Result<Server, HttpError> {
        if listen.is_empty() {
            return Err(HttpError::NoAddress);
        }
        let (tls, guard) = match &web {
            Some(web) => (web.rustls_config()?, Guard::new(web)?),
            None => (None, Guard::default()),
        };
        let mut listeners = Vec::with_capacity(listen.len());
        let mut addrs = Vec::with_capacity(listen.len());
        for address in listen {
            let listener = bind_one(address).await?;
            let local = listener.local_addr().map_err(|source| HttpError::Bind {
                address: address.clone(),
                source,
            })?;
            listeners.push(listener);
            addrs.push(local);
        }
        let max_connections = connection_limit();
        tracing::info!(max_connections, "HTTP connection limit");
        Ok(Server {
            listeners,
            addrs,
            tls,
            http1_only: web.as_ref().is_some_and(|w| w.http1_only),
            guard,
            web,
            max_connections,
        })
    }

    /// How many connections are served at once, over all listen addresses; further ones wait
    /// in the listen backlog. Derived from the open-file limit (see the `conn` module).
    pub fn max_connections(&self) -> usize {
        self.max_connections
    }

    /// The bound addresses, in the order of the listen list.
    pub fn local_addrs(&self) -> &[SocketAddr] {
        &self.addrs
    }

    pub fn is_tls(&self) -> bool {
        self.tls.is_some()
    }

    /// Counts what this server turns away into `refusals` (by default, counters of its own).
    pub fn with_refusals(mut self, refusals: Arc<Refusals>) -> Self {
        self.guard.refusals = refusals;
        self
    }

    /// What this server has turned away so far, by reason.
    pub fn refusals(&self) -> Arc<Refusals> {
        self.guard.refusals.clone()
    }

    /// Serves `router` until `shutdown` completes, then stops accepting and lets in-flight
    /// requests finish (up to a few seconds). Returns early with an error if a listener fails.
    ///
    /// Basic auth and the configured extra headers apply to every route of `router`, its
    /// fallback (404s) included, so that the routes a caller adds cannot bypass them.
    pub async fn serve(
        self,
        router: Router,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), HttpError> {
        // Layered last, over the whole router: axum applies a layer to the routes and the
        // fallback that exist when it is added.
        let refusals = self.guard.refusals.clone();
        let app = router
            .layer(middleware::from_fn_with_state(
                Arc::new(self.guard),
                guard_layer,
            ))
            .layer(middleware::map_response(pace));
        let slots = Arc::new(Semaphore::new(self.max_connections));
        // One TLS configuration for every listener, so that a reload reaches them all.
        let tls = self.tls.clone().map(RustlsConfig::from_config);
        let mut handles = Vec::new();
        let mut tasks = tokio::task::JoinSet::new();
        for (listener, address) in self.listeners.into_iter().zip(self.addrs.iter().copied()) {
            let serve_err = move |source| HttpError::Serve { address, source };
            let listener = CappedListener::new(
                listener,
                slots.clone(),
                WRITE_STALL_TIMEOUT,
                refusals.clone(),
            )
            .map_err(serve_err)?;
            let handle = axum_server::Handle::new();
            handles.push(handle.clone());
            let make = app
                .clone()
                .into_make_service_with_connect_info::<SocketAddr>();
            let server = axum_server::Server::<ClientAddr>::from_listener(listener).handle(handle);
            match &tls {
                Some(config) => {
                    let acceptor = RustlsAcceptor::new(config.clone()).acceptor(RefusePlainHttp);
                    let server = limit_connections(server.acceptor(acceptor), self.http1_only);
                    tasks.spawn(async move { server.serve(make).await.map_err(serve_err) });
                }
                None => {
                    let server = limit_connections(server, self.http1_only);
                    tasks.spawn(async move { server.serve(make).await.map_err(serve_err) });
                }
            }
            tracing::info!(%address, tls = tls.is_some(), "serving HTTP");
        }
        let reload = match (&tls, &self.web) {
            (Some(config), Some(web)) => Some(
                tokio::spawn(reload_on_change(web.clone(), config.clone(), RELOAD_CHECK))
                    .abort_handle(),
            ),
            _ => None,
        };

        let mut result = Ok(());
        tokio::select! {
            () = shutdown => {}
            Some(ended) = tasks.join_next() => {
                // A listener stopped on its own: that is a failure; stop the others too.
                result = match ended {
                    Ok(r) => r,
                    Err(join) => Err(HttpError::Serve {
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
        if let Some(reload) = reload {
            reload.abort();
        }
        result
    }
}

/// Every response body goes out in shared slices and within [`RESPONSE_TIMEOUT`].
async fn pace(response: Response) -> Response {
    response.map(|body| Body::new(Paced::new(body, RESPONSE_TIMEOUT)))
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

#[cfg(test)]
mod tests {
    use axum::routing::get;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Serves a router with one route, `/healthz` answering `ok`, on a loopback port.
    async fn start() -> (
        SocketAddr,
        tokio::sync::oneshot::Sender<()>,
        tokio::task::JoinHandle<Result<(), HttpError>>,
    ) {
        let server = Server::bind(&["127.0.0.1:0".to_string()], None)
            .await
            .unwrap();
        let addr = server.local_addrs()[0];
        let router = Router::new().route("/healthz", get(|| async { "ok" }));
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve(router, async {
            let _ = stopped.await;
        }));
        (addr, stop, serving)
    }

    /// Reads until the peer closes (or resets) the connection, up to `limit`; `false` if it
    /// was still open then.
    async fn closed_within(conn: &mut tokio::net::TcpStream, limit: Duration) -> bool {
        let mut buf = [0u8; 1024];
        tokio::time::timeout(limit, async {
            loop {
                match conn.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    // An error response (408) may come before the close.
                    Ok(_) => {}
                }
            }
        })
        .await
        .is_ok()
    }

    /// With the clock paused, Tokio jumps to the next timer whenever every task waits, so this
    /// runs instantly and does not depend on how fast the machine is.
    #[tokio::test(start_paused = true)]
    async fn http1_connections_that_stall_in_a_header_are_closed() {
        let (addr, stop, serving) = start().await;

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
        assert!(
            closed_within(&mut conn, HEADER_READ_TIMEOUT * 2).await,
            "the stalled connection was left open"
        );
        assert!(started.elapsed() <= HEADER_READ_TIMEOUT);

        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    }

    /// A connection that never sends a request is closed by the first-request timeout, which
    /// covers protocol detection, where hyper's header timeout does not run yet.
    #[tokio::test(start_paused = true)]
    async fn silent_connections_are_closed_after_the_first_request_timeout() {
        let (addr, stop, serving) = start().await;

        let mut conn = tokio::net::TcpStream::connect(addr).await.unwrap();
        let started = tokio::time::Instant::now();
        assert!(
            closed_within(&mut conn, HEADER_READ_TIMEOUT * 2).await,
            "the silent connection was left open"
        );
        let waited = started.elapsed();
        assert!(
            (FIRST_REQUEST_TIMEOUT..HEADER_READ_TIMEOUT).contains(&waited),
            "closed after {waited:?}"
        );

        let _ = stop.send(());
        serving.await.unwrap().unwrap();
    }

    #[tokio::test]
    async fn no_address_is_an_error() {
        assert!(matches!(
            Server::bind(&[], None).await,
            Err(HttpError::NoAddress)
        ));
        let err = Server::bind(&["127.0.0.1:0".to_string(), "nope".to_string()], None)
            .await
            .unwrap_err();
        assert!(err.to_string().contains("nope"), "{err}");
    }

    #[tokio::test]
    async fn wildcard_and_named_hosts_bind() {
        let s = Server::bind(&[":0".to_string(), "localhost:0".to_string()], None)
            .await
            .unwrap();
        assert_eq!(s.local_addrs().len(), 2);
        assert!(s.local_addrs()[0].ip().is_unspecified());
        assert!(s.local_addrs()[1].ip().is_loopback());
        assert!(!s.is_tls());
    }
}

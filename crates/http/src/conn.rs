//! Connection-level limits, below HTTP: how many connections are open at once and how long a
//! write may stall.
//!
//! Every open connection costs a file descriptor and some memory. Without a cap, a thousand idle
//! sockets exhaust the usual 1024 open-file limit and the agent's sampler can no longer open
//! `/proc/stat`; slow readers that never drain their responses pin buffers for as long as they
//! like. Here:
//!
//! - [`CappedListener`] accepts a connection only once it holds a slot of a semaphore shared by
//!   every listener of the server. At the cap, the accept loop waits: new connections queue in
//!   the kernel's listen backlog, where they cost this process no descriptor, and are accepted
//!   as slots free up (idle connections are closed by the HTTP timeouts).
//! - The cap is derived from `RLIMIT_NOFILE` ([`connection_limit`]), after raising the soft
//!   limit to the hard one: half of the descriptors still free at start-up, at most
//!   [`MAX_CONNECTIONS`]. The other half stays for the sampler, meters and model files.
//! - [`Guarded`] fails a write that makes no progress for the stall timeout, so a peer that stops
//!   reading loses its connection (and everything its response held) instead of keeping it.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;

use crate::refusals::{Refusal, Refusals};

/// Upper bound on connections whatever the open-file limit: an exporter has a few scrapers and
/// the model server a few agents per node; each connection costs buffers and a task.
pub const MAX_CONNECTIONS: usize = 1024;

/// The client's address, as the server's make-service receives it; handlers see it as
/// `ConnectInfo<SocketAddr>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientAddr(pub SocketAddr);

impl axum_server::Address for ClientAddr {
    type Stream = Guarded;
    type Listener = CappedListener;
}

impl axum::extract::connect_info::Connected<ClientAddr> for SocketAddr {
    fn connect_info(target: ClientAddr) -> Self {
        target.0
    }
}

/// A listener that accepts only while a connection slot is free.
pub struct CappedListener {
    inner: TcpListener,
    slots: Arc<Semaphore>,
    write_stall: Duration,
    /// Set while the cap is reached, so that reaching it is logged once per episode.
    at_cap: AtomicBool,
    refusals: Arc<Refusals>,
}

impl CappedListener {
    pub(crate) fn new(
        listener: std::net::TcpListener,
        slots: Arc<Semaphore>,
        write_stall: Duration,
        refusals: Arc<Refusals>,
    ) -> io::Result<CappedListener> {
        listener.set_nonblocking(true)?;
        Ok(CappedListener {
            inner: TcpListener::from_std(listener)?,
            slots,
            write_stall,
            at_cap: AtomicBool::new(false),
            refusals,
        })
    }
}

impl axum_server::AddrListener<Guarded, ClientAddr> for CappedListener {
    async fn bind_to(addr: ClientAddr) -> io::Result<Self> {
        // Server binds its sockets itself, before serving; this path is never taken.
        Err(io::Error::other(format!(
            "{} must be bound before serving",
            addr.0
        )))
    }

    async fn accept_stream(&self) -> io::Result<(Guarded, ClientAddr)> {
        let slot = match self.slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if !self.at_cap.swap(true, Ordering::Relaxed) {
                    tracing::warn!(
                        "connection limit reached; new connections wait in the listen backlog \
                         until open ones close"
                    );
                }
                // The semaphore is never closed; should it be, stop accepting with an error.
                let slot = self
                    .slots
                    .clone()
                    .acquire_owned()
                    .await
                    .map_err(io::Error::other)?;
                // The connection accepted next is one that waited for this slot.
                self.refusals.count(Refusal::ConnectionLimit);
                slot
            }
        };
        let (stream, addr) = self.inner.accept().await?;
        if self.at_cap.swap(false, Ordering::Relaxed) {
            tracing::info!("below the connection limit again");
        }
        Ok((
            Guarded {
                inner: stream,
                _slot: slot,
                write_stall: self.write_stall,
                stalled: None,
            },
            ClientAddr(addr),
        ))
    }

    fn get_local_addr(&self) -> io::Result<ClientAddr> {
        self.inner.local_addr().map(ClientAddr)
    }
}

/// An accepted connection: holds its slot until dropped, and fails writes that stall.
pub struct Guarded {
    inner: TcpStream,
    _slot: OwnedSemaphorePermit,
    write_stall: Duration,
    /// Started when a write first found the socket full; cleared by any progress.
    stalled: Option<Pin<Box<Sleep>>>,
}

impl Guarded {
    /// Reads without consuming, to tell TLS from plain HTTP before the handshake.
    pub(crate) async fn peek(&self, buf: &mut [u8]) -> io::Result<usize> {
        self.inner.peek(buf).await
    }

    /// The socket is full: pending, unless it has been since the stall timeout.
    fn stall<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        let limit = self.write_stall;
        let timer = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(limit)));
        match timer.as_mut().poll(cx) {
            Poll::Ready(()) => Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                format!("the peer read nothing for {limit:?}"),
            ))),
            Poll::Pending => Poll::Pending,
        }
    }

    fn progress<T>(
        &mut self,
        polled: Poll<io::Result<T>>,
        cx: &mut Context<'_>,
    ) -> Poll<io::Result<T>> {
        match polled {
            Poll::Pending => self.stall(cx),
            ready => {
                self.stalled = None;
                ready
            }
        }
    }
}

impl AsyncRead for Guarded {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl AsyncWrite for Guarded {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.progress(polled, cx)
    }

    // Vectored writes let hyper queue a response's shared buffers instead of copying them into
    // its own (it copies when the transport is not vectored).
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let polled = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.progress(polled, cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_flush(cx);
        self.progress(polled, cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let polled = Pin::new(&mut self.inner).poll_shutdown(cx);
        self.progress(polled, cx)
    }
}

/// The number of connections to serve at once: half of the descriptors free now (after
/// raising the soft open-file limit to the hard one), between 1 and [`MAX_CONNECTIONS`].
pub fn connection_limit() -> usize {
    let limit = raise_nofile_limit();
    let open = open_descriptors().unwrap_or(64);
    derive_limit(limit, open)
}

fn derive_limit(nofile: u64, open: u64) -> usize {
    let free = nofile.saturating_sub(open);
    usize::try_from(free / 2)
        .unwrap_or(MAX_CONNECTIONS)
        .clamp(1, MAX_CONNECTIONS)
}

/// Raises the soft `RLIMIT_NOFILE` to the hard limit and returns the soft limit in effect.
fn raise_nofile_limit() -> u64 {
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes into the struct we own and has no other effect.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) } != 0 {
        tracing::warn!(error = %io::Error::last_os_error(), "reading the open-file limit");
        return 1024;
    }
    if lim.rlim_cur < lim.rlim_max {
        let raised = libc::rlimit {
            rlim_cur: lim.rlim_max,
            rlim_max: lim.rlim_max,
        };
        // SAFETY: setrlimit reads the struct we own; raising the soft limit up to the hard one
        // needs no privilege.
        if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &raised) } == 0 {
            tracing::debug!(
                from = lim.rlim_cur,
                to = lim.rlim_max,
                "raised the open-file limit"
            );
            return lim.rlim_max;
        }
        tracing::warn!(error = %io::Error::last_os_error(), "raising the open-file limit");
    }
    lim.rlim_cur
}

/// Descriptors this process has open now.
fn open_descriptors() -> Option<u64> {
    let dir = std::fs::read_dir("/proc/self/fd").ok()?;
    Some(dir.count() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cap_keeps_half_the_free_descriptors() {
        assert_eq!(derive_limit(1024, 24), 500);
        assert_eq!(derive_limit(128, 28), 50);
        assert_eq!(derive_limit(1 << 20, 50), MAX_CONNECTIONS);
        assert_eq!(
            derive_limit(16, 40),
            1,
            "never zero: the server must still answer"
        );
        assert_eq!(derive_limit(u64::MAX, 0), MAX_CONNECTIONS);
    }
}

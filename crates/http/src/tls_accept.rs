//! What happens on a TLS port besides the handshake itself: plain HTTP is answered with a 400
//! that says so (as Go's server does) instead of a handshake error the client cannot read, and
//! certificate files are watched and reloaded when they change, so that a renewed certificate
//! (cert-manager, a rotated Kubernetes secret) is served without a restart.

use std::future::Future;
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use axum_server::accept::Accept;
use axum_server::tls_rustls::RustlsConfig;
use tokio::io::AsyncWriteExt;

use crate::conn::Guarded;
use crate::web_config::{Pem, WebConfig};

/// How long a new connection on a TLS port may stay silent before its first byte.
const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(10);
/// How often the certificate files are checked for changes.
pub(crate) const RELOAD_CHECK: Duration = Duration::from_secs(2);

/// The first byte of every TLS connection: a handshake record.
const TLS_HANDSHAKE: u8 = 0x16;

const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\nContent-Type: text/plain; \
charset=utf-8\r\nConnection: close\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// Runs before the TLS handshake: lets TLS through, answers plain HTTP and closes.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RefusePlainHttp;

impl<S: Send + 'static> Accept<Guarded, S> for RefusePlainHttp {
    type Stream = Guarded;
    type Service = S;
    type Future = Pin<Box<dyn Future<Output = io::Result<(Guarded, S)>> + Send>>;

    fn accept(&self, stream: Guarded, service: S) -> Self::Future {
        Box::pin(async move {
            let mut first = [0u8; 1];
            let n = tokio::time::timeout(FIRST_BYTE_TIMEOUT, stream.peek(&mut first))
                .await
                .map_err(|_| io::Error::new(io::ErrorKind::TimedOut, "no TLS handshake"))??;
            if n == 1 && first[0] != TLS_HANDSHAKE {
                if first[0].is_ascii_alphabetic() {
                    let mut stream = stream;
                    let _ = tokio::time::timeout(
                        FIRST_BYTE_TIMEOUT,
                        stream.write_all(PLAIN_HTTP_ANSWER),
                    )
                    .await;
                    let _ = stream.shutdown().await;
                }
                tracing::debug!("refused a connection that is not TLS on a TLS port");
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "plain HTTP on a TLS port",
                ));
            }
            Ok((stream, service))
        })
    }
}

/// What identifies a file's content without reading it.
type Fingerprint = Option<(Option<SystemTime>, u64, u64, u64)>;

fn fingerprint(files: &[PathBuf]) -> Vec<Fingerprint> {
    files
        .iter()
        .map(|f| {
            // Follows symlinks: a Kubernetes secret volume swaps a symlink to a new directory.
            std::fs::metadata(f)
                .ok()
                .map(|m| (m.modified().ok(), m.len(), m.ino(), m.dev()))
        })
        .collect()
}

/// The certificate, key and client CA files of `web`, if any are files.
pub(crate) fn watched_files(web: &WebConfig) -> Vec<PathBuf> {
    let Some(tls) = &web.tls else {
        return Vec::new();
    };
    [Some(&tls.cert), Some(&tls.key), tls.client_ca.as_ref()]
        .into_iter()
        .flatten()
        .filter_map(|pem| match pem {
            Pem::File(path) => Some(path.clone()),
            Pem::Inline(_) => None,
        })
        .collect()
}

/// Checks the TLS files every `every` and, when any changed, rebuilds the TLS configuration
/// from them; new connections get it, open ones keep theirs. A change that does not make a
/// usable configuration (a key written before its certificate, a bad file) is logged and the
/// previous configuration stays, until the next change.
pub(crate) async fn reload_on_change(web: WebConfig, config: RustlsConfig, every: Duration) {
    let files = watched_files(&web);
    if files.is_empty() {
        return;
    }
    let mut seen = fingerprint(&files);
    loop {
        tokio::time::sleep(every).await;
        let now = fingerprint(&files);
        if now == seen {
            continue;
        }
        seen = now;
        let web = web.clone();
        match tokio::task::spawn_blocking(move || web.rustls_config()).await {
            Ok(Ok(Some(fresh))) => {
                config.reload_from_config(fresh);
                tracing::info!(files = ?files, "TLS files changed; serving the new certificates");
            }
            Ok(Ok(None)) => {}
            Ok(Err(e)) => tracing::warn!(
                error = %e,
                "TLS files changed but cannot be used; still serving the previous certificates"
            ),
            Err(e) => tracing::warn!(error = %e, "reloading TLS files"),
        }
    }
}

//! The shutdown trigger both binaries use: SIGINT (Ctrl-C) or SIGTERM (what Kubernetes sends
//! when it stops a pod).

/// Completes when the process receives SIGINT or SIGTERM. If a signal handler cannot be
/// installed, that is logged and the other signal still works; the future never completes by
/// itself, so a failure here does not stop a running server.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::error!(error = %e, "cannot listen for SIGINT");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::error!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT received, shutting down"),
        _ = term => tracing::info!("SIGTERM received, shutting down"),
    }
}

//! Listen addresses as Go and the exporter-toolkit write them (`":28282"`, `"127.0.0.1:0"`,
//! `"[::1]:9102"`, `"host:port"`), bound to standard listeners.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::error::HttpError;

/// Binds one listen address. Binding happens here, before serving, so that a taken port or a
/// bad address stops start-up with a message naming it.
pub(crate) async fn bind_one(address: &str) -> Result<std::net::TcpListener, HttpError> {
    let bad = |reason: &str| HttpError::Address {
        address: address.to_string(),
        reason: reason.to_string(),
    };
    let bind_err = |source| HttpError::Bind {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn bad_addresses_are_named() {
        for a in ["28282", "127.0.0.1:http", "[::1]:99999", ":-1"] {
            let err = bind_one(a).await.unwrap_err();
            assert!(matches!(err, HttpError::Address { .. }), "{a}: {err}");
            assert!(err.to_string().contains(a), "{err}");
        }
    }

    #[tokio::test]
    async fn bracketed_ipv6_and_ipv4_literals_bind_where_they_say() {
        let v4 = bind_one("127.0.0.1:0").await.unwrap();
        assert_eq!(
            v4.local_addr().unwrap().ip(),
            IpAddr::V4(Ipv4Addr::LOCALHOST)
        );
        // Hosts without IPv6 loopback cannot run this half; that is not a failure of ours.
        match bind_one("[::1]:0").await {
            Ok(v6) => assert_eq!(
                v6.local_addr().unwrap().ip(),
                IpAddr::V6(Ipv6Addr::LOCALHOST)
            ),
            Err(HttpError::Bind { .. }) => {}
            Err(other) => panic!("[::1]:0 was not parsed as IPv6 loopback: {other}"),
        }
    }

    #[tokio::test]
    async fn a_taken_port_is_a_bind_error() {
        let first = bind_one("127.0.0.1:0").await.unwrap();
        let taken = first.local_addr().unwrap();
        let err = bind_one(&taken.to_string()).await.unwrap_err();
        assert!(matches!(err, HttpError::Bind { .. }), "{err}");
    }
}

//! The rustls server configuration built from a checked [`WebConfig`]: certificate chain, key,
//! protocol versions, client certificate verification and ALPN.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::web_config::{ClientAuth, TlsVersion, WebConfig, WebConfigError};

impl WebConfig {
    /// The rustls configuration, reading the certificate files now. Uses the ring provider
    /// explicitly, so it does not depend on a process-wide default provider being installed.
    pub fn rustls_config(&self) -> Result<Option<Arc<rustls::ServerConfig>>, WebConfigError> {
        let Some(tls) = &self.tls else {
            return Ok(None);
        };
        let file = self.file.as_str();
        let field_err = |field: &str, message: String| WebConfigError::Field {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };

        let cert_pem = tls.cert.read(file, "tls_server_config.cert_file")?;
        let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(&cert_pem)
            .collect::<Result<_, _>>()
            .map_err(|e| field_err("tls_server_config.cert_file", format!("bad PEM: {e}")))?;
        if certs.is_empty() {
            return Err(field_err(
                "tls_server_config.cert_file",
                "no certificate found".to_string(),
            ));
        }
        let key_pem = tls.key.read(file, "tls_server_config.key_file")?;
        let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(|e| {
            field_err(
                "tls_server_config.key_file",
                format!("no usable private key: {e}"),
            )
        })?;

        let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
        let max = tls.max_version.unwrap_or(TlsVersion::Tls13);
        if tls.min_version <= TlsVersion::Tls12 && max >= TlsVersion::Tls12 {
            versions.push(&rustls::version::TLS12);
        }
        if max >= TlsVersion::Tls13 {
            versions.push(&rustls::version::TLS13);
        }

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = rustls::ServerConfig::builder_with_provider(provider.clone())
            .with_protocol_versions(&versions)
            .map_err(|e| field_err("tls_server_config.min_version", e.to_string()))?;
        let builder = match (&tls.client_auth, &tls.client_ca) {
            (ClientAuth::None, _) | (_, None) => builder.with_no_client_auth(),
            (auth, Some(ca)) => {
                let ca_pem = ca.read(file, "tls_server_config.client_ca_file")?;
                let mut roots = rustls::RootCertStore::empty();
                for cert in CertificateDer::pem_slice_iter(&ca_pem) {
                    let cert = cert.map_err(|e| {
                        field_err("tls_server_config.client_ca_file", format!("bad PEM: {e}"))
                    })?;
                    roots.add(cert).map_err(|e| {
                        field_err("tls_server_config.client_ca_file", e.to_string())
                    })?;
                }
                if roots.is_empty() {
                    return Err(field_err(
                        "tls_server_config.client_ca_file",
                        "no certificate found".to_string(),
                    ));
                }
                let mut verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
                    Arc::new(roots),
                    provider,
                );
                if *auth == ClientAuth::VerifyIfGiven {
                    verifier = verifier.allow_unauthenticated();
                }
                let verifier = verifier
                    .build()
                    .map_err(|e| field_err("tls_server_config.client_ca_file", e.to_string()))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let mut config = builder.with_single_cert(certs, key).map_err(|e| {
            field_err(
                "tls_server_config.key_file",
                format!("does not match the certificate or is unusable: {e}"),
            )
        })?;
        // Only http/1.1 is offered in ALPN, so TLS clients (Prometheus, curl) speak HTTP/1.1,
        // which the server's header read timeout covers. This does not make the server
        // HTTP/1-only: a client that skips ALPN and opens with the HTTP/2 preface is still
        // served HTTP/2 unless `http2: false` is set.
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Some(Arc::new(config)))
    }
}

#[cfg(test)]
mod tests {
    use crate::web_config::tests::{field_of, parse};

    #[test]
    fn missing_certificate_file_is_named() {
        let c = parse(
            "tls_server_config:\n  cert_file: /nonexistent/c.pem\n  key_file: /nonexistent/k.pem\n",
        )
        .unwrap();
        let err = c.rustls_config().unwrap_err();
        assert_eq!(field_of(err), "tls_server_config.cert_file");
    }
}

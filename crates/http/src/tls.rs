//! The rustls server configuration built from a checked [`WebConfig`]: certificate chain, key,
//! protocol versions, client certificate verification and ALPN.

use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

use crate::allowed_sans::AllowedSans;
use crate::tls_choice::Curve;
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

        let provider = Arc::new(provider(tls));
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
                match &tls.client_allowed_sans {
                    Some(allowed) => builder.with_client_cert_verifier(Arc::new(AllowedSans {
                        inner: verifier,
                        allowed: allowed.clone(),
                    })),
                    None => builder.with_client_cert_verifier(verifier),
                }
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

/// ring's provider, narrowed to the configured TLS 1.2 suites (TLS 1.3 suites stay, as in Go)
/// and key exchange groups, in the configured order.
fn provider(tls: &crate::web_config::TlsConfig) -> rustls::crypto::CryptoProvider {
    let mut provider = rustls::crypto::ring::default_provider();
    if let Some(wanted) = &tls.cipher_suites {
        let all = std::mem::take(&mut provider.cipher_suites);
        let (tls13, tls12): (Vec<_>, Vec<_>) = all
            .into_iter()
            .partition(|s| s.version() == &rustls::version::TLS13);
        provider.cipher_suites = wanted
            .iter()
            .filter_map(|name| {
                tls12
                    .iter()
                    .find(|s| format!("{:?}", s.suite()) == *name)
                    .copied()
            })
            .chain(tls13)
            .collect();
    }
    if let Some(wanted) = &tls.curves {
        use rustls::crypto::ring::kx_group;
        provider.kx_groups = wanted
            .iter()
            .map(|c| match c {
                Curve::X25519 => kx_group::X25519,
                Curve::P256 => kx_group::SECP256R1,
                Curve::P384 => kx_group::SECP384R1,
            })
            .collect();
    }
    provider
}

#[cfg(test)]
mod tests {
    use crate::web_config::tests::{field_of, parse};

    #[test]
    fn cipher_suites_and_curves_narrow_the_provider() {
        let c = parse(
            "tls_server_config:\n  cert_file: a\n  key_file: b\n  \
             cipher_suites: [TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384]\n  \
             curve_preferences: [CurveP384, X25519]\n",
        )
        .unwrap();
        let p = super::provider(c.tls.as_ref().unwrap());
        let tls12: Vec<String> = p
            .cipher_suites
            .iter()
            .filter(|s| s.version() == &rustls::version::TLS12)
            .map(|s| format!("{:?}", s.suite()))
            .collect();
        assert_eq!(tls12, ["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"]);
        assert!(p
            .cipher_suites
            .iter()
            .any(|s| s.version() == &rustls::version::TLS13));
        let groups: Vec<String> = p
            .kx_groups
            .iter()
            .map(|g| format!("{:?}", g.name()))
            .collect();
        assert_eq!(groups, ["secp384r1", "X25519"]);
        // Every Go name we accept is a suite ring really offers.
        let all = rustls::crypto::ring::default_provider();
        for name in [
            "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ] {
            assert!(
                all.cipher_suites
                    .iter()
                    .any(|s| format!("{:?}", s.suite()) == name),
                "{name}"
            );
        }
    }

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

//! exporter-toolkit's `client_allowed_sans`: after the client certificate verified against the
//! client CA, it must also name one of the allowed DNS names or IP addresses in its subject
//! alternative names. Otherwise the handshake fails, as with the toolkit.

use std::sync::Arc;

use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::{DigitallySignedStruct, DistinguishedName, Error, SignatureScheme};

/// The names `client_allowed_sans` lists, each checked when the config is parsed: a DNS name or
/// an IP address (the toolkit also matches e-mail and URI names, which rustls' verifier cannot
/// read, so those are rejected rather than never matching).
pub fn parse_sans(names: &[String]) -> Result<Vec<ServerName<'static>>, String> {
    names
        .iter()
        .map(|n| {
            ServerName::try_from(n.trim().to_string()).map_err(|_| {
                format!("{n:?} is not a DNS name or IP address (e-mail and URI names are not supported)")
            })
        })
        .collect()
}

/// Verifies as `inner`, then requires one of `allowed` among the certificate's names.
#[derive(Debug)]
pub struct AllowedSans {
    pub inner: Arc<dyn ClientCertVerifier>,
    pub allowed: Vec<ServerName<'static>>,
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, Error> {
        let verified = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let cert = webpki::EndEntityCert::try_from(end_entity)
            .map_err(|e| Error::General(format!("client certificate: {e}")))?;
        if self
            .allowed
            .iter()
            .any(|name| cert.verify_is_valid_for_subject_name(name).is_ok())
        {
            Ok(verified)
        } else {
            Err(Error::General(
                "client certificate names none of client_allowed_sans".into(),
            ))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_dns_names_or_ips() {
        let names: Vec<String> = ["scraper", "prometheus.monitoring.svc", "10.0.0.1"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(parse_sans(&names).unwrap().len(), 3);
        let err = parse_sans(&["ops@example.com".to_string()]).unwrap_err();
        assert!(err.contains("ops@example.com"), "{err}");
    }
}

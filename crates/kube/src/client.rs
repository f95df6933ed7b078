//! One HTTPS endpoint (an API server or a kubelet): TLS trust, credentials read when a request
//! is made, and JSON answers with a size limit.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use reqwest::StatusCode;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{ring, verify_tls12_signature, verify_tls13_signature, CryptoProvider};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use serde::de::DeserializeOwned;

use crate::Error;

/// A server that does not accept the connection by then is down.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// Longest silence on a connection: above the watch's own `timeoutSeconds`, so only a server
/// that stopped answering hits it.
const READ_TIMEOUT: Duration = Duration::from_secs(330);
/// Whole answers (a list, `/pods`, a Node) must arrive by then.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Largest answer read: a kubelet `/pods` of a full node (110 pods) is a few megabytes.
pub const MAX_BODY: usize = 64 << 20;

/// How the server's certificate is checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Trust {
    /// Certificates signed by one of these (PEM); no system roots, a cluster has its own CA.
    CaPem(Vec<u8>),
    /// No check at all: anyone on the path can read the token and answer with any pods.
    Insecure,
}

/// Who we are to the server.
#[derive(Clone, Debug, PartialEq, Eq, Default)]
pub enum Credentials {
    #[default]
    None,
    /// A bearer token file, read again for every request: projected service-account tokens
    /// are rotated by the kubelet.
    TokenFile(PathBuf),
    /// A token given inline (kubeconfig `token`).
    Token(String),
    /// A client certificate and key, PEM.
    ClientCert { cert: Vec<u8>, key: Vec<u8> },
}

/// Where and how to connect.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EndpointConfig {
    /// `https://host:port`, without a trailing slash.
    pub base_url: String,
    pub trust: Trust,
    pub credentials: Credentials,
}

/// A connected endpoint (the client keeps its connections).
#[derive(Clone, Debug)]
pub struct Endpoint {
    base_url: String,
    credentials: Credentials,
    client: reqwest::Client,
}

impl Endpoint {
    pub fn new(config: &EndpointConfig) -> Result<Endpoint, Error> {
        let tls = tls_config(config)?;
        let client = reqwest::Client::builder()
            .use_preconfigured_tls(tls)
            .connect_timeout(CONNECT_TIMEOUT)
            .read_timeout(READ_TIMEOUT)
            .build()
            .map_err(|e| Error::Tls(format!("building the HTTP client: {e}")))?;
        Ok(Endpoint {
            base_url: config.base_url.trim_end_matches('/').to_string(),
            credentials: config.credentials.clone(),
            client,
        })
    }

    pub fn base_url(&self) -> &str {
        &self.base_url
    }

    /// Starts a GET of `path_and_query` and checks the status; the body is left to read,
    /// within `timeout` from now when there is one.
    pub async fn get(
        &self,
        path_and_query: &str,
        timeout: Option<Duration>,
    ) -> Result<reqwest::Response, Error> {
        let url = format!("{}{}", self.base_url, path_and_query);
        let mut request = self.client.get(&url).header("Accept", "application/json");
        if let Some(timeout) = timeout {
            request = request.timeout(timeout);
        }
        match &self.credentials {
            Credentials::None | Credentials::ClientCert { .. } => {}
            Credentials::Token(token) => request = request.bearer_auth(token),
            Credentials::TokenFile(path) => request = request.bearer_auth(read_token(path)?),
        }
        let response = request.send().await.map_err(|e| Error::Http {
            url: url.clone(),
            message: chain(&e),
        })?;
        let status = response.status();
        if status.is_success() {
            return Ok(response);
        }
        if status == StatusCode::GONE {
            return Err(Error::Gone);
        }
        // The first line of the server's answer says why; never more (it could be large).
        let text = read_limited(response, 4096).await.unwrap_or_default();
        let excerpt: String = String::from_utf8_lossy(&text)
            .lines()
            .next()
            .unwrap_or("")
            .chars()
            .take(200)
            .collect();
        Err(Error::Status {
            url,
            status: status.as_u16(),
            excerpt,
        })
    }

    /// GET and parse a whole JSON answer of at most [`MAX_BODY`] bytes.
    pub async fn get_json<T: DeserializeOwned>(&self, path_and_query: &str) -> Result<T, Error> {
        let response = self.get(path_and_query, Some(REQUEST_TIMEOUT)).await?;
        let url = format!("{}{}", self.base_url, path_and_query);
        let body = read_limited(response, MAX_BODY)
            .await
            .map_err(|message| Error::Http {
                url: url.clone(),
                message,
            })?;
        serde_json::from_slice(&body).map_err(|e| Error::Json {
            url,
            message: e.to_string(),
        })
    }
}

async fn read_limited(mut response: reqwest::Response, limit: usize) -> Result<Vec<u8>, String> {
    let mut body = Vec::new();
    while let Some(chunk) = response.chunk().await.map_err(|e| chain(&e))? {
        if body.len() + chunk.len() > limit {
            return Err(format!("answer larger than {limit} bytes"));
        }
        body.extend_from_slice(&chunk);
    }
    Ok(body)
}

/// The error and its causes on one line: reqwest's own message alone says only "error
/// sending request".
pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

fn read_token(path: &Path) -> Result<String, Error> {
    let token = std::fs::read_to_string(path).map_err(|e| Error::Token {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    let token = token.trim();
    if token.is_empty() {
        return Err(Error::Token {
            path: path.to_path_buf(),
            message: "empty".into(),
        });
    }
    Ok(token.to_string())
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(ring::default_provider())
}

fn tls_config(config: &EndpointConfig) -> Result<rustls::ClientConfig, Error> {
    let builder = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| Error::Tls(e.to_string()))?;
    let builder = match &config.trust {
        Trust::CaPem(pem) => {
            let mut roots = rustls::RootCertStore::empty();
            for cert in CertificateDer::pem_slice_iter(pem) {
                let cert = cert.map_err(|e| Error::Tls(format!("CA bundle: {e}")))?;
                roots
                    .add(cert)
                    .map_err(|e| Error::Tls(format!("CA bundle: {e}")))?;
            }
            if roots.is_empty() {
                return Err(Error::Tls("CA bundle holds no certificate".into()));
            }
            builder.with_root_certificates(roots)
        }
        Trust::Insecure => builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(NoVerification(provider()))),
    };
    match &config.credentials {
        Credentials::ClientCert { cert, key } => {
            let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert)
                .collect::<Result<_, _>>()
                .map_err(|e| Error::Tls(format!("client certificate: {e}")))?;
            let key = PrivateKeyDer::from_pem_slice(key)
                .map_err(|e| Error::Tls(format!("client key: {e}")))?;
            builder
                .with_client_auth_cert(chain, key)
                .map_err(|e| Error::Tls(format!("client certificate: {e}")))
        }
        _ => Ok(builder.with_no_client_auth()),
    }
}

/// Accepts any server certificate (`kubeletInsecure`); signatures are still checked, so the
/// session is encrypted, but not who it is with.
#[derive(Debug)]
struct NoVerification(Arc<CryptoProvider>);

impl ServerCertVerifier for NoVerification {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

//! Where the API server is: in-cluster (the pod's service account) or a kubeconfig file.

use std::path::{Path, PathBuf};

use base64::Engine;
use serde::Deserialize;

use crate::client::{Credentials, EndpointConfig, Trust};
use crate::Error;

/// The service account files Kubernetes mounts into every pod.
pub const SERVICE_ACCOUNT_DIR: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// How to reach the API server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Cluster {
    /// `KUBERNETES_SERVICE_HOST`/`_PORT` and the service account's token and `ca.crt`.
    InCluster,
    /// A kubeconfig file (`kube.config`): its current context's cluster and user.
    Kubeconfig(PathBuf),
}

impl Cluster {
    pub fn endpoint(&self) -> Result<EndpointConfig, Error> {
        match self {
            Cluster::InCluster => in_cluster(
                std::env::var("KUBERNETES_SERVICE_HOST").ok(),
                std::env::var("KUBERNETES_SERVICE_PORT").ok(),
                Path::new(SERVICE_ACCOUNT_DIR),
            ),
            Cluster::Kubeconfig(path) => kubeconfig(path),
        }
    }
}

fn in_cluster(
    host: Option<String>,
    port: Option<String>,
    account: &Path,
) -> Result<EndpointConfig, Error> {
    let (Some(host), Some(port)) = (host.filter(|h| !h.is_empty()), port) else {
        return Err(Error::Config(
            "not in a cluster (KUBERNETES_SERVICE_HOST/PORT unset); set kube.config".into(),
        ));
    };
    // An IPv6 service address needs brackets in a URL.
    let host = if host.contains(':') {
        format!("[{host}]")
    } else {
        host
    };
    let ca = account.join("ca.crt");
    let pem = std::fs::read(&ca)
        .map_err(|e| Error::Config(format!("service account CA {}: {e}", ca.display())))?;
    Ok(EndpointConfig {
        base_url: format!("https://{host}:{port}"),
        trust: Trust::CaPem(pem),
        credentials: Credentials::TokenFile(account.join("token")),
    })
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct Kubeconfig {
    current_context: String,
    contexts: Vec<Named<Context>>,
    clusters: Vec<Named<ClusterEntry>>,
    users: Vec<Named<User>>,
}

#[derive(Debug, Default, Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "context", alias = "cluster", alias = "user")]
    value: T,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
struct Context {
    cluster: String,
    user: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct ClusterEntry {
    server: String,
    certificate_authority: Option<PathBuf>,
    certificate_authority_data: Option<String>,
    insecure_skip_tls_verify: bool,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "kebab-case")]
struct User {
    token: Option<String>,
    #[serde(rename = "tokenFile")]
    token_file: Option<PathBuf>,
    client_certificate: Option<PathBuf>,
    client_certificate_data: Option<String>,
    client_key: Option<PathBuf>,
    client_key_data: Option<String>,
}

/// The current context of a kubeconfig. Exec plugins and auth providers are not supported:
/// an agent runs unattended and needs a token, a token file or a client certificate.
fn kubeconfig(path: &Path) -> Result<EndpointConfig, Error> {
    let bad = |what: String| Error::Config(format!("kube.config {}: {what}", path.display()));
    let text = std::fs::read_to_string(path).map_err(|e| bad(e.to_string()))?;
    // A kubeconfig holds tokens and keys: its parse errors quote nothing it says.
    let config: Kubeconfig = serde_yaml::from_str(&text).map_err(|e| {
        let place = e.location().map(|l| (l.line(), l.column()));
        bad(kepler_core::redact::yaml_error_without_values(
            &e.to_string(),
            place,
        ))
    })?;
    let dir = path.parent().unwrap_or(Path::new("."));
    let context = match config
        .contexts
        .iter()
        .find(|c| c.name == config.current_context)
    {
        Some(c) => &c.value,
        None if config.contexts.len() == 1 => &config.contexts[0].value,
        None => return Err(bad(format!("no context {:?}", config.current_context))),
    };
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .map(|c| &c.value)
        .ok_or_else(|| bad(format!("no cluster {:?}", context.cluster)))?;
    if !cluster.server.starts_with("https://") && !cluster.server.starts_with("http://") {
        return Err(bad(format!("server {:?} is not a URL", cluster.server)));
    }
    let user = config.users.iter().find(|u| u.name == context.user);
    let file_or_data = |file: &Option<PathBuf>, data: &Option<String>, what: &str| {
        pem_from(dir, file, data).map_err(|e| bad(format!("{what}: {e}")))
    };
    let trust = if cluster.insecure_skip_tls_verify {
        Trust::Insecure
    } else {
        match file_or_data(
            &cluster.certificate_authority,
            &cluster.certificate_authority_data,
            "certificate-authority",
        )? {
            Some(pem) => Trust::CaPem(pem),
            None => return Err(bad("the cluster has no certificate-authority".into())),
        }
    };
    let credentials = match user {
        None => Credentials::None,
        Some(Named { value: user, .. }) => {
            let cert = file_or_data(
                &user.client_certificate,
                &user.client_certificate_data,
                "client-certificate",
            )?;
            let key = file_or_data(&user.client_key, &user.client_key_data, "client-key")?;
            match (&user.token, &user.token_file, cert, key) {
                (Some(token), _, _, _) => Credentials::Token(token.clone()),
                (None, Some(file), _, _) => Credentials::TokenFile(dir.join(file)),
                (None, None, Some(cert), Some(key)) => Credentials::ClientCert { cert, key },
                (None, None, None, None) => Credentials::None,
                _ => {
                    return Err(bad(
                        "client certificate without key, or key without certificate".into(),
                    ))
                }
            }
        }
    };
    Ok(EndpointConfig {
        base_url: cluster.server.trim_end_matches('/').to_string(),
        trust,
        credentials,
    })
}

fn pem_from(
    dir: &Path,
    file: &Option<PathBuf>,
    data: &Option<String>,
) -> Result<Option<Vec<u8>>, String> {
    if let Some(data) = data.as_ref().filter(|d| !d.is_empty()) {
        return base64::engine::general_purpose::STANDARD
            .decode(data.trim())
            .map(Some)
            .map_err(|e| format!("not base64: {e}"));
    }
    match file {
        Some(file) => {
            let path = dir.join(file);
            std::fs::read(&path)
                .map(Some)
                .map_err(|e| format!("{}: {e}", path.display()))
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_cluster_reads_the_service_account() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "PEM").unwrap();
        let e = in_cluster(Some("fd00::1".into()), Some("443".into()), dir.path()).unwrap();
        assert_eq!(e.base_url, "https://[fd00::1]:443");
        assert_eq!(e.trust, Trust::CaPem(b"PEM".to_vec()));
        assert_eq!(
            e.credentials,
            Credentials::TokenFile(dir.path().join("token"))
        );
        let err = in_cluster(None, None, dir.path()).unwrap_err().to_string();
        assert!(err.contains("KUBERNETES_SERVICE_HOST"), "{err}");
    }

    #[test]
    fn kubeconfig_current_context_with_relative_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.pem"), "CA").unwrap();
        let path = dir.path().join("config");
        std::fs::write(
            &path,
            "apiVersion: v1\nkind: Config\ncurrent-context: b\n\
             contexts:\n- name: a\n  context: {cluster: x, user: x}\n\
             - name: b\n  context: {cluster: c, user: u}\n\
             clusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:6443/\n    \
             certificate-authority: ca.pem\n\
             users:\n- name: u\n  user:\n    tokenFile: tok\n",
        )
        .unwrap();
        let e = kubeconfig(&path).unwrap();
        assert_eq!(e.base_url, "https://127.0.0.1:6443");
        assert_eq!(e.trust, Trust::CaPem(b"CA".to_vec()));
        assert_eq!(
            e.credentials,
            Credentials::TokenFile(dir.path().join("tok"))
        );

        std::fs::write(
            &path,
            "current-context: b\ncontexts:\n- name: b\n  context: {cluster: c, user: u}\n\
             clusters:\n- name: c\n  cluster:\n    server: https://h\n    \
             certificate-authority-data: Q0E=\n\
             users:\n- name: u\n  user:\n    client-certificate-data: Q0VSVA==\n",
        )
        .unwrap();
        let err = kubeconfig(&path).unwrap_err().to_string();
        assert!(err.contains("without key"), "{err}");
        let err = kubeconfig(&dir.path().join("none"))
            .unwrap_err()
            .to_string();
        assert!(err.contains("kube.config"), "{err}");
    }

    /// A token one level off, or glued to its key, is not quoted by the parse error.
    #[test]
    fn kubeconfig_errors_do_not_quote_tokens() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config");
        for text in [
            "current-context: b\nusers:\n- name: u\n  user: eyJtoken123\n",
            "current-context: b\nusers:\n- name: u\n  user:\n    token: [eyJtoken123]\n",
            "current-context: b\nusers:\n- name: u\n  user:\n    token:eyJtoken123\n",
            "current-context: b\nusers: {eyJtoken123: 1}\n",
        ] {
            std::fs::write(&path, text).unwrap();
            let err = kubeconfig(&path).unwrap_err().to_string();
            assert!(!err.contains("eyJtoken123"), "{err}");
            assert!(
                err.contains("kube.config") && err.contains("line "),
                "{err}"
            );
        }
    }
}

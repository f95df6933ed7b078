//! Finding and reaching this node's kubelet.

use std::net::{IpAddr, SocketAddr};

use serde::Deserialize;

use crate::client::{Credentials, Endpoint, EndpointConfig, Trust};
use crate::{Error, KubeletSettings, KubeletTrust};

/// The kubelet's port when the Node object does not say.
pub const DEFAULT_PORT: u16 = 10250;

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Node {
    pub status: NodeStatus,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct NodeStatus {
    pub addresses: Vec<NodeAddress>,
    pub daemon_endpoints: DaemonEndpoints,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct NodeAddress {
    #[serde(rename = "type")]
    pub kind: String,
    pub address: String,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default, rename_all = "camelCase")]
pub struct DaemonEndpoints {
    pub kubelet_endpoint: KubeletEndpoint,
}

#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct KubeletEndpoint {
    #[serde(rename = "Port")]
    pub port: u16,
}

/// `https://<InternalIP>:<port>` of a Node object. The address must be an IP literal, as the
/// API server writes it: anything else (a name, or text with `/`, `@` or `?`) would make the URL
/// point somewhere the field does not say, and is refused.
pub fn kubelet_url(node_name: &str, node: &Node) -> Result<String, Error> {
    let fail = |message: String| Error::Node {
        node: node_name.to_string(),
        message,
    };
    let internal: Vec<&str> = node
        .status
        .addresses
        .iter()
        .filter(|a| a.kind == "InternalIP" && !a.address.is_empty())
        .map(|a| a.address.as_str())
        .collect();
    let ip = internal
        .iter()
        .find_map(|a| a.parse::<IpAddr>().ok())
        .ok_or_else(|| match internal.first() {
            None => fail("no InternalIP in status.addresses".into()),
            Some(a) => fail(format!(
                "InternalIP {:?} is not an IP address",
                a.chars().take(64).collect::<String>()
            )),
        })?;
    let port = match node.status.daemon_endpoints.kubelet_endpoint.port {
        0 => DEFAULT_PORT,
        port => port,
    };
    // SocketAddr writes the IPv6 brackets, and a canonical form of the address.
    Ok(format!("https://{}", SocketAddr::new(ip, port)))
}

/// The kubelet endpoint: its URL (given, or `url_from_node`), trust and token. `cluster` is
/// the API server's connection settings when known: its CA and credentials are the defaults.
pub fn endpoint(
    settings: &KubeletSettings,
    url: String,
    cluster: Option<&EndpointConfig>,
) -> Result<Endpoint, Error> {
    let trust = match &settings.trust {
        KubeletTrust::Insecure => Trust::Insecure,
        KubeletTrust::CaFile(path) => Trust::CaPem(std::fs::read(path).map_err(|e| {
            Error::Config(format!(
                "kube.podInformer.kubeletCAFile {}: {e}",
                path.display()
            ))
        })?),
        KubeletTrust::ClusterCa => match cluster.map(|c| &c.trust) {
            Some(trust) => trust.clone(),
            None => {
                return Err(Error::Config(
                    "no CA to check the kubelet with: set kube.podInformer.kubeletCAFile \
                     (or kubeletInsecure)"
                        .into(),
                ))
            }
        },
    };
    let credentials = match (&settings.token_file, cluster) {
        (Some(file), _) => Credentials::TokenFile(file.clone()),
        (None, Some(cluster)) => cluster.credentials.clone(),
        (None, None) => {
            Credentials::TokenFile(std::path::Path::new(crate::SERVICE_ACCOUNT_DIR).join("token"))
        }
    };
    Endpoint::new(&EndpointConfig {
        base_url: url,
        trust,
        credentials,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(json: &str) -> Node {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn internal_ip_and_port_from_the_node() {
        let n = node(
            r#"{"status":{"addresses":[{"type":"Hostname","address":"n1"},
               {"type":"InternalIP","address":"10.0.0.7"}],
               "daemonEndpoints":{"kubeletEndpoint":{"Port":10255}}}}"#,
        );
        assert_eq!(kubelet_url("n1", &n).unwrap(), "https://10.0.0.7:10255");
        let n = node(r#"{"status":{"addresses":[{"type":"InternalIP","address":"fd00::7"}]}}"#);
        assert_eq!(kubelet_url("n1", &n).unwrap(), "https://[fd00::7]:10250");
        let err = kubelet_url("n1", &node("{}")).unwrap_err().to_string();
        assert!(err.contains("n1") && err.contains("InternalIP"), "{err}");
    }

    /// Found while writing the Node fuzz target: an address that is not an IP made a URL that
    /// points elsewhere (`10.0.0.7@evil:1` has host `evil`).
    #[test]
    fn an_internal_ip_that_is_not_an_ip_is_refused() {
        for bad in ["10.0.0.7@evil", "evil/x?", "node-1", "10.0.0.7:99"] {
            let n = node(&format!(
                r#"{{"status":{{"addresses":[{{"type":"InternalIP","address":"{bad}"}}]}}}}"#
            ));
            let err = kubelet_url("n1", &n).unwrap_err().to_string();
            assert!(err.contains("not an IP address"), "{bad}: {err}");
        }
        // A later usable InternalIP is taken.
        let n = node(
            r#"{"status":{"addresses":[{"type":"InternalIP","address":"x"},
               {"type":"InternalIP","address":"10.0.0.8"}]}}"#,
        );
        assert_eq!(kubelet_url("n1", &n).unwrap(), "https://10.0.0.8:10250");
    }
}

//! The BMC file of upstream's Redfish support (`experimental.platform.redfish.configFile`):
//! `nodes: {<node>: <bmc>}` and `bmcs: {<bmc>: {endpoint, username, password, insecure}}`.
//! The password is a [`Secret`]: no `Debug`, `Display` or error message of this module ever
//! shows it.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use serde::Deserialize;

/// A password. Printing it in any way shows `***`.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret itself, for the one place that sends it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl<'de> Deserialize<'de> for Secret {
    /// Any YAML scalar is a password (`password: 1234` is a number to YAML): accepting them
    /// all means serde never reports a type error that would quote the value.
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V;
        impl serde::de::Visitor<'_> for V {
            type Value = Secret;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a password")
            }
            fn visit_str<E>(self, v: &str) -> Result<Secret, E> {
                Ok(Secret::new(v))
            }
            fn visit_i64<E>(self, v: i64) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_u64<E>(self, v: u64) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_f64<E>(self, v: f64) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_bool<E>(self, v: bool) -> Result<Secret, E> {
                Ok(Secret::new(v.to_string()))
            }
            fn visit_unit<E>(self) -> Result<Secret, E> {
                Ok(Secret::default())
            }
        }
        d.deserialize_any(V)
    }
}

/// One BMC of the file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
pub struct Bmc {
    /// `https://host[:port]`; no path, no credentials in the URL.
    pub endpoint: String,
    #[serde(default)]
    pub username: String,
    #[serde(default)]
    pub password: Secret,
    /// Skip TLS certificate verification (self-signed BMC certificates).
    #[serde(default)]
    pub insecure: bool,
}

#[derive(Debug, Default, Deserialize)]
struct BmcFile {
    #[serde(default)]
    nodes: BTreeMap<String, String>,
    #[serde(default)]
    bmcs: BTreeMap<String, Bmc>,
}

/// Why the BMC of this node cannot be known. Messages name files, nodes and BMCs, never a
/// password.
#[derive(Debug, thiserror::Error)]
pub enum BmcFileError {
    #[error("reading {path}: {source}")]
    Read {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {message}")]
    Parse { path: String, message: String },
    #[error("{path}: node {node:?} is not listed under nodes")]
    NoNode { path: String, node: String },
    #[error("{path}: node {node:?} names BMC {bmc:?}, which is not listed under bmcs")]
    NoBmc {
        path: String,
        node: String,
        bmc: String,
    },
    #[error("{path}: BMC {bmc:?}: endpoint {reason}")]
    Endpoint {
        path: String,
        bmc: String,
        reason: &'static str,
    },
}

/// The file holds secrets, so its parse errors keep only the kind, the schema's words and the
/// place (see [`kepler_core::redact`]).
fn parse_message(e: &serde_yaml::Error) -> String {
    let place = e.location().map(|l| (l.line(), l.column()));
    kepler_core::redact::yaml_error_without_values(&e.to_string(), place)
}

/// The BMC that serves `node`, with its name in the file.
pub fn load(path: &Path, node: &str) -> Result<(String, Bmc), BmcFileError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|source| BmcFileError::Read {
        path: shown.clone(),
        source,
    })?;
    parse(&text, &shown, node)
}

pub(crate) fn parse(text: &str, path: &str, node: &str) -> Result<(String, Bmc), BmcFileError> {
    let file: BmcFile = serde_yaml::from_str(text).map_err(|e| BmcFileError::Parse {
        path: path.to_string(),
        message: parse_message(&e),
    })?;
    let bmc_id = file
        .nodes
        .get(node)
        .ok_or_else(|| BmcFileError::NoNode {
            path: path.to_string(),
            node: node.to_string(),
        })?
        .clone();
    let bmc = file
        .bmcs
        .get(&bmc_id)
        .ok_or_else(|| BmcFileError::NoBmc {
            path: path.to_string(),
            node: node.to_string(),
            bmc: bmc_id.clone(),
        })?
        .clone();
    let bad = |reason| BmcFileError::Endpoint {
        path: path.to_string(),
        bmc: bmc_id.clone(),
        reason,
    };
    let endpoint = bmc.endpoint.trim().trim_end_matches('/');
    let rest = endpoint
        .strip_prefix("https://")
        .or_else(|| endpoint.strip_prefix("http://"))
        .ok_or_else(|| bad("must start with https:// or http://"))?;
    // Credentials in the URL would end up in error messages; they belong in username/password.
    if rest.contains('@') {
        return Err(bad("must not carry credentials; use username and password"));
    }
    if rest.is_empty() || rest.contains(['/', '?', '#']) {
        return Err(bad("must be scheme://host[:port] without a path"));
    }
    Ok((
        bmc_id,
        Bmc {
            endpoint: endpoint.to_string(),
            ..bmc
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: &str = "nodes:\n  worker-1: bmc-1\n  worker-2: missing\nbmcs:\n  bmc-1:\n    endpoint: https://10.0.0.1:8443/\n    username: admin\n    password: 12345\n    insecure: true\n";

    #[test]
    fn finds_the_node_s_bmc_and_hides_its_password() {
        let (id, bmc) = parse(FILE, "f", "worker-1").unwrap();
        assert_eq!(id, "bmc-1");
        assert_eq!(bmc.endpoint, "https://10.0.0.1:8443");
        assert_eq!(bmc.password.expose(), "12345");
        assert!(bmc.insecure);
        let shown = format!("{bmc:?}");
        assert!(!shown.contains("12345"), "{shown}");
    }

    #[test]
    fn missing_node_bmc_and_bad_endpoints_are_named() {
        let e = parse(FILE, "f", "worker-9").unwrap_err().to_string();
        assert!(e.contains("\"worker-9\" is not listed"), "{e}");
        let e = parse(FILE, "f", "worker-2").unwrap_err().to_string();
        assert!(e.contains("BMC \"missing\""), "{e}");
        for endpoint in ["ftp://x", "https://u:secret@x", "https://x/redfish/v1"] {
            let text = format!("nodes: {{n: b}}\nbmcs: {{b: {{endpoint: \"{endpoint}\"}}}}\n");
            let e = parse(&text, "f", "n").unwrap_err().to_string();
            assert!(e.contains("endpoint"), "{e}");
            assert!(!e.contains("secret"), "{e}");
        }
        assert!(parse("nodes: [", "f", "n").is_err());
    }

    /// Found by the fuzz target (src/fuzz.rs): a password one level off was quoted.
    #[test]
    fn a_misplaced_password_is_not_quoted() {
        for text in [
            "nodes: {n: b}\nbmcs: {b: 'pw-123'}\n",
            "nodes: {n: b}\nbmcs: {b: {endpoint: [\"pw-123\"]}}\n",
            "nodes: 'pw-123'\n",
            "nodes: {n: b}\nbmcs: {b: {endpoint: 'https://h', insecure: 7654321}}\n",
            // Found by the 1M-case fuzz run: the password turned into a key of the path.
            "nodes:\n  pw-123 bmcs: {}\n  n: [b]\n",
            "nodes: {n: b}\nbmcs:\n  b:\n    endpoint: https://h\n    password:pw-123\n",
        ] {
            let e = parse(text, "f", "n").unwrap_err().to_string();
            assert!(!e.contains("pw-123") && !e.contains("7654321"), "{e}");
            assert!(e.contains("line "), "{e}");
        }
    }
}

//! `web.configFile`: the Prometheus exporter-toolkit web configuration (TLS, basic auth, extra
//! response headers), so that existing files written for upstream Kepler and other exporters
//! keep working.
//!
//! Fields are checked strictly, as exporter-toolkit does: an unknown field is an error, and so is
//! a known toolkit field or value we cannot honour with rustls (silently ignoring, say,
//! `client_allowed_sans` would accept clients the operator meant to reject). `cipher_suites` and
//! `curve_preferences` are honoured for the suites and groups rustls has.
//!
//! Turning the checked TLS section into a rustls configuration is
//! [`WebConfig::rustls_config`], in the `tls` module.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use axum::http::{HeaderName, HeaderValue};

use rustls::pki_types::ServerName;

use crate::allowed_sans::parse_sans;
use crate::files::{read_limited, PEM_LIMIT, WEB_CONFIG_LIMIT};
pub use crate::rate_limit::RateLimit;
use crate::tls_choice::{curves, tls12_suites, Curve};
use serde::Deserialize;

/// A rejected web config. Every variant names the file and, where it applies, the field.
#[derive(Debug, thiserror::Error)]
pub enum WebConfigError {
    #[error("reading web config {file}: {source}")]
    Read {
        file: String,
        #[source]
        source: std::io::Error,
    },
    #[error("parsing web config {file}: {message}")]
    Parse { file: String, message: String },
    #[error("web config {file}: {field}: {message}")]
    Field {
        file: String,
        field: String,
        message: String,
    },
}

/// A PEM document given as a path or inline (the toolkit's `cert_file` vs `cert`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Pem {
    File(PathBuf),
    Inline(String),
}

impl Pem {
    pub(crate) fn read(&self, file: &str, field: &str) -> Result<Vec<u8>, WebConfigError> {
        match self {
            Pem::File(path) => read_limited(path, PEM_LIMIT).map_err(|e| WebConfigError::Field {
                file: file.to_string(),
                field: field.to_string(),
                message: format!("reading {}: {e}", path.display()),
            }),
            Pem::Inline(text) => Ok(text.as_bytes().to_vec()),
        }
    }
}

/// TLS protocol versions as the toolkit names them (`TLS10` ... `TLS13`).
#[derive(Copy, Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum TlsVersion {
    Tls10,
    Tls11,
    Tls12,
    Tls13,
}

impl TlsVersion {
    fn parse(s: &str) -> Option<TlsVersion> {
        match s {
            "TLS10" => Some(TlsVersion::Tls10),
            "TLS11" => Some(TlsVersion::Tls11),
            "TLS12" => Some(TlsVersion::Tls12),
            "TLS13" => Some(TlsVersion::Tls13),
            _ => None,
        }
    }
}

/// Client certificate policy (`client_auth_type`). Only the verifying policies exist: rustls
/// has no "accept any certificate unverified" mode, and we do not add one.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum ClientAuth {
    /// `NoClientCert` (default).
    None,
    /// `VerifyClientCertIfGiven`.
    VerifyIfGiven,
    /// `RequireAndVerifyClientCert`.
    RequireAndVerify,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsConfig {
    pub cert: Pem,
    pub key: Pem,
    pub min_version: TlsVersion,
    pub max_version: Option<TlsVersion>,
    pub client_auth: ClientAuth,
    pub client_ca: Option<Pem>,
    /// `cipher_suites`: the TLS 1.2 suites offered (IANA names), in order; `None`: rustls'.
    pub cipher_suites: Option<Vec<&'static str>>,
    /// `curve_preferences`: the key exchange groups offered, in order; `None`: rustls'.
    pub curves: Option<Vec<Curve>>,
    /// `client_allowed_sans`: a verified client certificate must name one of these.
    pub client_allowed_sans: Option<Vec<ServerName<'static>>>,
}

/// The dearest bcrypt cost accepted in `basic_auth_users`. bcrypt doubles its work with each
/// step: cost 10 (htpasswd's and the toolkit's usual choice) takes tens of milliseconds, 14
/// about a second, and the format's maximum, 31, days; a hash that dear would hang start-up
/// (the server prepares a decoy hash of the same cost) and every login.
pub const MAX_BCRYPT_COST: u32 = 14;

/// Roughly how long one check at `cost` takes, for the error message (cost 10 ≈ 60 ms).
fn bcrypt_time(cost: u32) -> String {
    let seconds = 0.06 * 2f64.powi(cost as i32 - 10);
    humantime::format_duration(std::time::Duration::from_secs_f64(seconds.round().max(1.0)))
        .to_string()
}

/// A bcrypt hash from `basic_auth_users`, checked when the config was parsed.
#[derive(Clone, PartialEq, Eq)]
pub struct BcryptHash {
    hash: String,
    cost: u32,
}

impl BcryptHash {
    /// Parses the modular-crypt form (`$2y$10$...`); `None` if it is not a bcrypt hash.
    pub fn parse(hash: &str) -> Option<BcryptHash> {
        let parts = hash.parse::<bcrypt::HashParts>().ok()?;
        Some(BcryptHash {
            hash: hash.to_string(),
            cost: parts.get_cost(),
        })
    }

    /// The hash as written in the config, for `bcrypt::verify`.
    pub fn as_str(&self) -> &str {
        &self.hash
    }

    /// The bcrypt cost (log2 of the rounds).
    pub fn cost(&self) -> u32 {
        self.cost
    }
}

impl std::fmt::Debug for BcryptHash {
    // The digest of a secret stays out of logs and panic messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "BcryptHash(cost {}, redacted)", self.cost)
    }
}

/// A parsed web config. Everything in it has been checked: the server uses the values as they
/// are, without checking them again.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct WebConfig {
    /// Where it was read from (for error messages), or `<inline>`.
    pub file: String,
    /// `None`: plain HTTP (also when `tls_server_config` sets none of certificate, key, client
    /// CA and client auth type, as the toolkit).
    pub tls: Option<TlsConfig>,
    /// User name → bcrypt hash.
    pub basic_auth_users: BTreeMap<String, BcryptHash>,
    /// Extra response headers (`http_server_config.headers`).
    pub headers: Vec<(HeaderName, HeaderValue)>,
    /// `http_server_config.http2: false`: serve HTTP/1 only. By default a client that opens
    /// with the HTTP/2 preface (prior knowledge) is served HTTP/2.
    pub http1_only: bool,
    /// `rate_limit` with a positive burst.
    pub rate_limit: Option<RateLimit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebConfig {
    tls_server_config: Option<RawTls>,
    http_server_config: Option<RawHttp>,
    basic_auth_users: Option<BTreeMap<String, String>>,
    rate_limit: Option<RawRateLimit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRateLimit {
    interval: Option<String>,
    burst: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawTls {
    cert_file: Option<String>,
    key_file: Option<String>,
    cert: Option<String>,
    key: Option<String>,
    client_auth_type: Option<String>,
    client_ca_file: Option<String>,
    client_ca: Option<String>,
    min_version: Option<String>,
    max_version: Option<String>,
    cipher_suites: Option<Vec<String>>,
    curve_preferences: Option<Vec<String>>,
    prefer_server_cipher_suites: Option<bool>,
    client_allowed_sans: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHttp {
    http2: Option<bool>,
    headers: Option<BTreeMap<String, String>>,
}

/// The file holds secrets, so its parse errors keep only the kind, the schema's words and the
/// place (see [`kepler_core::redact`]).
fn parse_message(e: &serde_yaml::Error) -> String {
    let place = e.location().map(|l| (l.line(), l.column()));
    kepler_core::redact::yaml_error_without_values(&e.to_string(), place)
}

fn non_empty(s: Option<String>) -> Option<String> {
    s.filter(|s| !s.trim().is_empty())
}

impl WebConfig {
    /// Reads and checks a web config file. Relative certificate paths are relative to the
    /// file's directory, as in exporter-toolkit.
    pub fn load(path: &Path) -> Result<WebConfig, WebConfigError> {
        let file = path.display().to_string();
        let bytes =
            read_limited(path, WEB_CONFIG_LIMIT).map_err(|source| WebConfigError::Read {
                file: file.clone(),
                source,
            })?;
        let text = String::from_utf8(bytes).map_err(|_| WebConfigError::Parse {
            file: file.clone(),
            message: "not UTF-8 text".to_string(),
        })?;
        let base = path.parent().unwrap_or(Path::new("."));
        WebConfig::parse(&text, base, &file)
    }

    /// Parses a web config from text; `base` resolves relative paths, `file` names the origin
    /// in errors.
    pub fn parse(text: &str, base: &Path, file: &str) -> Result<WebConfig, WebConfigError> {
        let field_err = |field: &str, message: String| WebConfigError::Field {
            file: file.to_string(),
            field: field.to_string(),
            message,
        };
        let mut config = WebConfig {
            file: file.to_string(),
            ..WebConfig::default()
        };
        // An empty file means "no TLS, no auth" rather than a parse error.
        if text.trim().is_empty() {
            return Ok(config);
        }
        let raw: RawWebConfig = serde_yaml::from_str(text).map_err(|e| WebConfigError::Parse {
            file: file.to_string(),
            message: parse_message(&e),
        })?;
        if let Some(limit) = raw.rate_limit {
            config.rate_limit = Self::rate_limit(limit, &field_err)?;
        }

        if let Some(tls) = raw.tls_server_config {
            config.tls = Self::tls(tls, base, &field_err)?;
        }

        for (user, hash) in raw.basic_auth_users.unwrap_or_default() {
            let field = format!("basic_auth_users.{user}");
            if user.is_empty() || user.contains(':') {
                return Err(field_err(
                    &field,
                    "a user name must be non-empty and contain no ':'".to_string(),
                ));
            }
            // Checked now so that a typo fails at start-up, not as a 401 at every scrape. The
            // hash itself is not echoed: it is a secret's digest.
            let Some(hash) = BcryptHash::parse(&hash) else {
                return Err(field_err(
                    &field,
                    "not a bcrypt hash (expected the $2y$/$2b$ form, e.g. from `htpasswd -nBC 10`)"
                        .to_string(),
                ));
            };
            if hash.cost() > MAX_BCRYPT_COST {
                return Err(field_err(
                    &field,
                    format!(
                        "bcrypt cost {} is above the {MAX_BCRYPT_COST} allowed: every login \
                         would take {} (re-hash the password, e.g. `htpasswd -nBC 10 {user}`)",
                        hash.cost(),
                        bcrypt_time(hash.cost())
                    ),
                ));
            }
            config.basic_auth_users.insert(user, hash);
        }

        if let Some(http) = raw.http_server_config {
            // As the toolkit: HTTP/2 is on unless `http2: false`. Here "on" means that a client
            // opening with the HTTP/2 preface is served HTTP/2 (TLS offers only http/1.1 in
            // ALPN, see `rustls_config`); `false` makes every connection HTTP/1.
            config.http1_only = http.http2 == Some(false);
            for (name, value) in http.headers.unwrap_or_default() {
                let field = format!("http_server_config.headers.{name}");
                let lower = name.to_ascii_lowercase();
                if matches!(
                    lower.as_str(),
                    "content-type"
                        | "content-length"
                        | "content-encoding"
                        | "www-authenticate"
                        | "authorization"
                        | "transfer-encoding"
                        | "connection"
                ) {
                    return Err(field_err(
                        &field,
                        "this header is set by the server".to_string(),
                    ));
                }
                let (Ok(name), Ok(value)) = (
                    HeaderName::from_bytes(name.as_bytes()),
                    HeaderValue::from_str(&value),
                ) else {
                    return Err(field_err(&field, "not a valid HTTP header".to_string()));
                };
                config.headers.push((name, value));
            }
        }
        Ok(config)
    }

    /// As the toolkit: limiting is on only with a positive `burst`, and then needs a positive
    /// `interval`.
    fn rate_limit(
        raw: RawRateLimit,
        field_err: &dyn Fn(&str, String) -> WebConfigError,
    ) -> Result<Option<RateLimit>, WebConfigError> {
        let burst = raw.burst.unwrap_or(0);
        if burst == 0 {
            return Ok(None);
        }
        let text = non_empty(raw.interval).unwrap_or_default();
        let interval = humantime::parse_duration(text.trim())
            .ok()
            .filter(|d| !d.is_zero())
            .ok_or_else(|| {
                field_err(
                    "rate_limit.interval",
                    format!("{text:?} is not a positive duration (like 1s or 100ms)"),
                )
            })?;
        Ok(Some(RateLimit { interval, burst }))
    }

    fn tls(
        raw: RawTls,
        base: &Path,
        field_err: &dyn Fn(&str, String) -> WebConfigError,
    ) -> Result<Option<TlsConfig>, WebConfigError> {
        let cipher_suites = match &raw.cipher_suites {
            None => None,
            Some(names) => Some(
                tls12_suites(names).map_err(|m| field_err("tls_server_config.cipher_suites", m))?,
            ),
        };
        let curves = match &raw.curve_preferences {
            None => None,
            Some(names) if names.is_empty() => None,
            Some(names) => Some(
                curves(names).map_err(|m| field_err("tls_server_config.curve_preferences", m))?,
            ),
        };
        let client_allowed_sans = match &raw.client_allowed_sans {
            None => None,
            Some(names) if names.is_empty() => None,
            Some(names) => Some(
                parse_sans(names)
                    .map_err(|m| field_err("tls_server_config.client_allowed_sans", m))?,
            ),
        };
        // Server order is a hint with rustls' small, uniformly strong suite list.
        let _ = raw.prefer_server_cipher_suites;

        let path = |p: String| {
            let p = PathBuf::from(p);
            Pem::File(if p.is_relative() { base.join(p) } else { p })
        };
        let one_of = |file: Option<String>, inline: Option<String>, name: &str| match (
            non_empty(file),
            non_empty(inline),
        ) {
            (Some(_), Some(_)) => Err(field_err(
                &format!("tls_server_config.{name}_file"),
                format!("give {name}_file or {name}, not both"),
            )),
            (Some(f), None) => Ok(Some(path(f))),
            (None, Some(i)) => Ok(Some(Pem::Inline(i))),
            (None, None) => Ok(None),
        };
        let cert = one_of(raw.cert_file, raw.cert, "cert")?;
        let key = one_of(raw.key_file, raw.key, "key")?;
        let client_ca = one_of(raw.client_ca_file, raw.client_ca, "client_ca")?;
        let client_auth_type = non_empty(raw.client_auth_type);
        // As the toolkit: the section means plain HTTP only when it sets none of certificate,
        // key, client CA and client auth type. Any one of them shows that TLS was intended, so
        // a missing certificate or key must stop start-up rather than quietly serve plain HTTP
        // (with client certificates, say, never checked).
        let set: Vec<&str> = [
            (cert.is_some(), "cert"),
            (key.is_some(), "key"),
            (client_ca.is_some(), "client_ca"),
            (client_auth_type.is_some(), "client_auth_type"),
        ]
        .into_iter()
        .filter_map(|(present, name)| present.then_some(name))
        .collect();
        if set.is_empty() {
            return Ok(None);
        }
        let missing = |name: &str| {
            field_err(
                &format!("tls_server_config.{name}_file"),
                format!(
                    "missing: give {name}_file or {name} (the TLS section sets {})",
                    set.join(", ")
                ),
            )
        };
        let cert = cert.ok_or_else(|| missing("cert"))?;
        let key = key.ok_or_else(|| missing("key"))?;

        let version = |field: &str, v: Option<String>| -> Result<Option<TlsVersion>, _> {
            match non_empty(v) {
                None => Ok(None),
                Some(v) => TlsVersion::parse(v.trim()).map(Some).ok_or_else(|| {
                    field_err(
                        &format!("tls_server_config.{field}"),
                        format!(
                            "unknown TLS version {v:?} (expected TLS10, TLS11, TLS12 or TLS13)"
                        ),
                    )
                }),
            }
        };
        let min_version = version("min_version", raw.min_version)?.unwrap_or(TlsVersion::Tls12);
        let max_version = version("max_version", raw.max_version)?;
        if let Some(max) = max_version {
            if max < TlsVersion::Tls12 {
                return Err(field_err(
                    "tls_server_config.max_version",
                    "TLS 1.0 and 1.1 are not supported (rustls offers TLS 1.2 and 1.3)".to_string(),
                ));
            }
            if max < min_version {
                return Err(field_err(
                    "tls_server_config.max_version",
                    "lower than min_version".to_string(),
                ));
            }
        }
        if min_version < TlsVersion::Tls12 {
            tracing::warn!(
                "web config: tls_server_config.min_version below TLS12 requested; rustls offers TLS 1.2 and 1.3 only"
            );
        }

        let client_auth = match client_auth_type.as_deref().map(str::trim) {
            None | Some("NoClientCert") => ClientAuth::None,
            Some("VerifyClientCertIfGiven") => ClientAuth::VerifyIfGiven,
            Some("RequireAndVerifyClientCert") => ClientAuth::RequireAndVerify,
            Some(other @ ("RequestClientCert" | "RequireAnyClientCert")) => {
                return Err(field_err(
                    "tls_server_config.client_auth_type",
                    format!("{other} (accepting unverified client certificates) is not supported"),
                ))
            }
            Some(other) => {
                return Err(field_err(
                    "tls_server_config.client_auth_type",
                    format!("unknown value {other:?} (expected NoClientCert, VerifyClientCertIfGiven or RequireAndVerifyClientCert)"),
                ))
            }
        };
        match (client_auth, &client_ca) {
            (ClientAuth::None, Some(_)) => {
                return Err(field_err(
                    "tls_server_config.client_ca_file",
                    "set, but client_auth_type does not verify client certificates".to_string(),
                ))
            }
            (ClientAuth::None, None) if client_allowed_sans.is_some() => {
                return Err(field_err(
                    "tls_server_config.client_allowed_sans",
                    "set, but client_auth_type does not verify client certificates".to_string(),
                ))
            }
            (ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify, None) => {
                return Err(field_err(
                    "tls_server_config.client_ca_file",
                    "required by client_auth_type".to_string(),
                ))
            }
            _ => {}
        }
        Ok(Some(TlsConfig {
            cert,
            key,
            min_version,
            max_version,
            client_auth,
            client_ca,
            cipher_suites,
            curves,
            client_allowed_sans,
        }))
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    pub(crate) fn parse(text: &str) -> Result<WebConfig, WebConfigError> {
        WebConfig::parse(text, Path::new("/etc/kepler"), "web.yml")
    }

    pub(crate) fn field_of(e: WebConfigError) -> String {
        match e {
            WebConfigError::Field { field, .. } => field,
            other => panic!("not a field error: {other}"),
        }
    }

    /// Found by the fuzz target (src/fuzz.rs): a hash one level off was quoted in the error.
    #[test]
    fn misplaced_secrets_are_not_quoted_in_errors() {
        let hash = "$2b$04$IyIyQ0zogom6QOu8xa4Uo.5WUumBTLK4dNrSeTFbPpoq2ovzM3WYC";
        for text in [
            format!("basic_auth_users: '{hash}'\n"),
            format!("tls_server_config:\n  cipher_suites: '{hash}'\n"),
            format!("rate_limit: \"a \\\" {hash}\"\n"),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(!e.contains("$2b$04$"), "{e}");
            assert!(e.contains("invalid type: string, expected"), "{e}");
        }
        // Found by the 1M-case fuzz run: glued to its key (no space after the colon), the
        // hash became part of an unknown key, which serde quotes whole.
        for text in [
            format!("client_allowed_sans:'{hash}'\n"),
            format!("basic_auth_users:\n  alice:'{hash}'\n"),
            format!("tls_server_config:\n  key_file:{hash}\n"),
        ] {
            let e = parse(&text).unwrap_err().to_string();
            assert!(!e.contains("IyIyQ0zogom6QOu8xa4Uo"), "{e}");
            assert!(e.contains("line "), "{e}");
        }
    }

    /// A misspelt key is still named, so that the mistake is easy to find.
    #[test]
    fn a_misspelt_key_is_named() {
        let e = parse("tls_server_config:\n  cert_fil: a\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field `cert_fil`, expected one of"),
            "{e}"
        );
        assert!(
            e.contains("`cert_file`") && e.contains("line 2 column 3"),
            "{e}"
        );
    }

    #[test]
    fn full_config_parses() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        let c = parse(&format!(
            "tls_server_config:\n  cert_file: tls.crt\n  key_file: /abs/tls.key\n  min_version: TLS13\n\
             basic_auth_users:\n  alice: '{hash}'\n\
             http_server_config:\n  http2: true\n  headers:\n    X-Frame-Options: deny\n"
        ))
        .unwrap();
        let tls = c.tls.clone().unwrap();
        assert_eq!(tls.cert, Pem::File("/etc/kepler/tls.crt".into()));
        assert_eq!(tls.key, Pem::File("/abs/tls.key".into()));
        assert_eq!(tls.min_version, TlsVersion::Tls13);
        assert_eq!(c.basic_auth_users["alice"].as_str(), hash);
        assert_eq!(c.basic_auth_users["alice"].cost(), 4);
        assert!(
            !format!("{c:?}").contains(&hash),
            "hashes stay out of Debug"
        );
        assert_eq!(
            c.headers,
            vec![(
                HeaderName::from_static("x-frame-options"),
                HeaderValue::from_static("deny")
            )]
        );
        assert!(!c.http1_only);
        assert!(
            parse("http_server_config:\n  http2: false\n")
                .unwrap()
                .http1_only
        );
    }

    #[test]
    fn empty_and_certless_configs_mean_plain_http() {
        let hash = bcrypt::hash("secret", 4).unwrap();
        assert_eq!(parse("").unwrap().tls, None);
        assert_eq!(
            parse(&format!(
                "tls_server_config: {{}}\nbasic_auth_users: {{bob: '{hash}'}}\n"
            ))
            .unwrap()
            .tls,
            None
        );
    }

    #[test]
    fn client_auth_without_certificate_is_an_error_not_plain_http() {
        // Any of the TLS-intent fields without a certificate and key must fail, naming the
        // missing field, rather than fall back to plain HTTP.
        for (section, missing) in [
            (
                "client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: ca.crt",
                "tls_server_config.cert_file",
            ),
            (
                "client_auth_type: NoClientCert",
                "tls_server_config.cert_file",
            ),
            ("client_ca_file: ca.crt", "tls_server_config.cert_file"),
            ("client_ca: inline-pem", "tls_server_config.cert_file"),
            (
                "cert_file: tls.crt\n  client_auth_type: VerifyClientCertIfGiven",
                "tls_server_config.key_file",
            ),
            ("key: inline-key", "tls_server_config.cert_file"),
        ] {
            let err = parse(&format!("tls_server_config:\n  {section}\n")).unwrap_err();
            let text = err.to_string();
            assert_eq!(field_of(err), missing, "{section}: {text}");
        }
        // Fields that do not by themselves ask for TLS still leave the section empty.
        assert_eq!(
            parse("tls_server_config:\n  min_version: TLS13\n  client_auth_type: ''\n")
                .unwrap()
                .tls,
            None
        );
    }

    #[test]
    fn errors_name_the_field() {
        assert_eq!(
            field_of(parse("tls_server_config:\n  cert_file: a\n").unwrap_err()),
            "tls_server_config.key_file"
        );
        assert_eq!(
            field_of(
                parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  min_version: SSL3\n")
                    .unwrap_err()
            ),
            "tls_server_config.min_version"
        );
        assert_eq!(
            field_of(parse("basic_auth_users:\n  alice: plaintext\n").unwrap_err()),
            "basic_auth_users.alice"
        );
        assert_eq!(
            field_of(
                parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  cipher_suites: [TLS_RSA_WITH_RC4_128_SHA]\n")
                    .unwrap_err()
            ),
            "tls_server_config.cipher_suites"
        );
        assert_eq!(
            field_of(
                parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_auth_type: RequireAndVerifyClientCert\n")
                    .unwrap_err()
            ),
            "tls_server_config.client_ca_file"
        );
        assert_eq!(
            field_of(
                parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  client_allowed_sans: [scraper]\n")
                    .unwrap_err()
            ),
            "tls_server_config.client_allowed_sans"
        );
        assert_eq!(
            field_of(
                parse("tls_server_config:\n  cert_file: a\n  key_file: b\n  curve_preferences: [CurveP521]\n")
                    .unwrap_err()
            ),
            "tls_server_config.curve_preferences"
        );
        assert_eq!(
            field_of(parse("rate_limit:\n  burst: 5\n").unwrap_err()),
            "rate_limit.interval"
        );
        let limited = parse("rate_limit:\n  interval: 100ms\n  burst: 5\n").unwrap();
        assert_eq!(
            limited.rate_limit,
            Some(RateLimit {
                interval: std::time::Duration::from_millis(100),
                burst: 5
            })
        );
        assert_eq!(
            parse("rate_limit:\n  interval: 1s\n").unwrap().rate_limit,
            None
        );
        let unknown = parse("tls_server_config:\n  cert_fil: a\n").unwrap_err();
        assert!(
            matches!(&unknown, WebConfigError::Parse { .. })
                && unknown.to_string().contains("cert_fil"),
            "{unknown}"
        );
        // A cost-31 hash (bcrypt's maximum) would take days per check: refused, naming the user.
        let dear = bcrypt::hash("secret", 4)
            .unwrap()
            .replacen("$04$", "$31$", 1);
        let err = parse(&format!("basic_auth_users:\n  carol: '{dear}'\n")).unwrap_err();
        let text = err.to_string();
        assert!(text.contains("cost 31") && text.contains("carol"), "{text}");
        assert_eq!(field_of(err), "basic_auth_users.carol");
        let err = parse("basic_auth_users: [1, 2]\n").unwrap_err();
        assert!(err.to_string().contains("basic_auth_users"), "{err}");
    }
}

//! exporter-toolkit's `cipher_suites` and `curve_preferences` (Go's names) mapped onto what
//! rustls with ring offers. A name rustls cannot negotiate is an error naming the field and
//! the value, never dropped quietly.

/// A TLS 1.2 cipher suite rustls offers: Go's name(s) and the IANA name rustls reports.
const TLS12_SUITES: &[(&[&str], &str)] = &[
    (
        &["TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256"],
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        &["TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384"],
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        &[
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
        ],
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
    (
        &["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"],
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
    ),
    (
        &["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384"],
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384",
    ),
    (
        &[
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
            "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
        ],
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
    ),
];

/// Go accepts the TLS 1.3 names in the list but ignores them (TLS 1.3 suites are not
/// configurable there); so do we.
const TLS13_NAMES: &[&str] = &[
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// The IANA names of the TLS 1.2 suites `names` (Go's spellings) select, in the given order.
pub fn tls12_suites(names: &[String]) -> Result<Vec<&'static str>, String> {
    let mut chosen = Vec::new();
    for name in names {
        let name = name.trim();
        if TLS13_NAMES.contains(&name) {
            continue;
        }
        let Some((_, iana)) = TLS12_SUITES.iter().find(|(go, _)| go.contains(&name)) else {
            return Err(format!(
                "{name:?} is not a cipher suite rustls offers (TLS 1.2: ECDHE with AES-GCM or \
                 ChaCha20-Poly1305)"
            ));
        };
        if !chosen.contains(iana) {
            chosen.push(*iana);
        }
    }
    Ok(chosen)
}

/// A key exchange group rustls with ring offers.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Curve {
    X25519,
    P256,
    P384,
}

/// Go's curve names, in preference order.
pub fn curves(names: &[String]) -> Result<Vec<Curve>, String> {
    let mut chosen = Vec::new();
    for name in names {
        let curve = match name.trim() {
            "X25519" => Curve::X25519,
            "CurveP256" => Curve::P256,
            "CurveP384" => Curve::P384,
            "CurveP521" => {
                return Err("CurveP521 is not offered by rustls (ring); use CurveP384".into())
            }
            other => {
                return Err(format!(
                    "unknown curve {other:?} (expected X25519, CurveP256 or CurveP384)"
                ))
            }
        };
        if !chosen.contains(&curve) {
            chosen.push(curve);
        }
    }
    Ok(chosen)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn go_names_map_to_rustls_suites_and_groups() {
        assert_eq!(
            tls12_suites(&names(&[
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305",
                "TLS_AES_128_GCM_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256",
            ]))
            .unwrap(),
            [
                "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256",
                "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256"
            ]
        );
        let err = tls12_suites(&names(&["TLS_RSA_WITH_AES_128_CBC_SHA"])).unwrap_err();
        assert!(err.contains("TLS_RSA_WITH_AES_128_CBC_SHA"), "{err}");
        assert_eq!(
            curves(&names(&["CurveP256", "X25519"])).unwrap(),
            [Curve::P256, Curve::X25519]
        );
        assert!(curves(&names(&["CurveP521"])).is_err());
        assert!(curves(&names(&["P-256"])).is_err());
    }
}

//! Endpoint security as a user meets it: certificates renewed on disk are served without a
//! restart, plain HTTP on the TLS port gets an answer that says what is wrong, and client
//! certificates are checked, with `curl` as the client.

mod support;

use std::io::{Read, Write};
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use kepler_testkit::tools::{have, skip};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use reqwest::StatusCode;
use support::{start, web_config};

/// A self-signed server certificate for 127.0.0.1: (cert PEM, key PEM).
fn server_cert() -> (String, String) {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    (c.cert.pem(), c.signing_key.serialize_pem())
}

/// Writes `content` to `path` atomically, as secret volumes and cert-manager do.
fn replace(path: &Path, content: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, content).unwrap();
    std::fs::rename(&tmp, path).unwrap();
}

fn trusting(cert_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .use_rustls_tls()
        .timeout(Duration::from_secs(10))
        .tls_built_in_root_certs(false)
        .add_root_certificate(reqwest::Certificate::from_pem(cert_pem.as_bytes()).unwrap())
        .build()
        .unwrap()
}

async fn ok_with(client: &reqwest::Client, url: &str) -> bool {
    matches!(client.get(url).send().await, Ok(r) if r.status() == StatusCode::OK)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_are_reloaded_when_their_files_change() {
    let dir = tempfile::tempdir().unwrap();
    let (cert_a, key_a) = server_cert();
    std::fs::write(dir.path().join("tls.crt"), &cert_a).unwrap();
    std::fs::write(dir.path().join("tls.key"), &key_a).unwrap();
    let web = web_config(
        dir.path(),
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    );
    let srv = start(Some(web)).await;
    let url = format!("https://127.0.0.1:{}/healthz", srv.addr.port());
    assert!(ok_with(&trusting(&cert_a), &url).await);

    // A broken renewal (garbage certificate) leaves the old certificate served.
    replace(&dir.path().join("tls.crt"), "not a certificate");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(
        ok_with(&trusting(&cert_a), &url).await,
        "a bad file replaced the served certificate"
    );

    let (cert_b, key_b) = server_cert();
    replace(&dir.path().join("tls.key"), &key_b);
    replace(&dir.path().join("tls.crt"), &cert_b);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !ok_with(&trusting(&cert_b), &url).await {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not served within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    assert!(
        !ok_with(&trusting(&cert_a), &url).await,
        "the old certificate is still served"
    );
    srv.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_http_on_the_tls_port_is_refused_with_a_400() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = server_cert();
    std::fs::write(dir.path().join("tls.crt"), &cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &key).unwrap();
    let web = web_config(
        dir.path(),
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n",
    );
    let srv = start(Some(web)).await;
    let addr = srv.addr;
    let answer = tokio::task::spawn_blocking(move || {
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            .unwrap();
        let mut answer = Vec::new();
        let _ = s.read_to_end(&mut answer);
        String::from_utf8_lossy(&answer).into_owned()
    })
    .await
    .unwrap();
    assert!(answer.starts_with("HTTP/1.0 400 "), "{answer:?}");
    assert!(answer.contains("HTTPS"), "{answer:?}");
    assert!(
        !answer.contains("ok"),
        "the route was served over plain HTTP"
    );
    // TLS still works on the same port.
    assert!(
        ok_with(
            &trusting(&cert),
            &format!("https://127.0.0.1:{}/healthz", addr.port())
        )
        .await
    );
    srv.stop().await;
}

/// A CA and a client certificate it signed, written as files for curl.
fn client_pki(dir: &Path, name: &str) {
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().unwrap();
    let ca_cert = ca_params.self_signed(&ca_key).unwrap();
    std::fs::write(dir.join(format!("{name}-ca.crt")), ca_cert.pem()).unwrap();
    let issuer = Issuer::new(ca_params, ca_key);
    let mut params = CertificateParams::new(vec!["scraper".to_string()]).unwrap();
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().unwrap();
    let cert = params.signed_by(&key, &issuer).unwrap();
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).unwrap();
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).unwrap();
}

/// `curl` against `url`, trusting the server certificate in `dir`, with the client identity
/// `identity` (files `<identity>.crt` and `.key` in `dir`) if given: the HTTP status, or
/// `None` if the connection failed (a refused handshake).
fn curl(dir: &Path, url: &str, identity: Option<&str>) -> Option<u16> {
    let mut cmd = Command::new("curl");
    cmd.args([
        "-sS",
        "--max-time",
        "20",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
    ])
    .arg("--cacert")
    .arg(dir.join("tls.crt"));
    if let Some(name) = identity {
        cmd.arg("--cert")
            .arg(dir.join(format!("{name}.crt")))
            .arg("--key")
            .arg(dir.join(format!("{name}.key")));
    }
    let out = cmd.arg(url).output().expect("run curl");
    if !out.status.success() {
        return None;
    }
    String::from_utf8_lossy(&out.stdout).trim().parse().ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_certificates_checked_with_curl() {
    if !have("curl") {
        skip("SKIP: curl not installed (bash scripts/setup.sh installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = server_cert();
    std::fs::write(dir.path().join("tls.crt"), &cert).unwrap();
    std::fs::write(dir.path().join("tls.key"), &key).unwrap();
    client_pki(dir.path(), "good");
    client_pki(dir.path(), "other");

    for (policy, without) in [
        ("RequireAndVerifyClientCert", None),
        ("VerifyClientCertIfGiven", Some(200)),
    ] {
        let web = web_config(
            dir.path(),
            &format!(
                "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  \
                 client_auth_type: {policy}\n  client_ca_file: good-ca.crt\n"
            ),
        );
        let srv = start(Some(web)).await;
        let url = format!("https://127.0.0.1:{}/healthz", srv.addr.port());
        let d = dir.path().to_path_buf();
        let (with_good, with_other, with_none) = tokio::task::spawn_blocking(move || {
            (
                curl(&d, &url, Some("good")),
                curl(&d, &url, Some("other")),
                curl(&d, &url, None),
            )
        })
        .await
        .unwrap();
        assert_eq!(with_good, Some(200), "{policy}: a certificate from the CA");
        assert_eq!(with_other, None, "{policy}: a certificate from another CA");
        assert_eq!(with_none, without, "{policy}: no certificate");
        srv.stop().await;
    }
}

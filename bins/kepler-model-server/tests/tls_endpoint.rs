//! Endpoint security of `kepler-model-server serve`, which serves through kepler-http as the
//! agent does: client certificates checked (with `curl` as the client), plain HTTP on the TLS
//! port answered with a 400, certificates reloaded when their files change, and web configs
//! that would hang or exhaust start-up refused with a message.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use kepler_testkit::tools::{have, skip};
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use support::{model_db, serve};

fn write_server_cert(dir: &Path, name: &str) {
    let c = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).expect("cert");
    std::fs::write(dir.join(format!("{name}.crt")), c.cert.pem()).expect("write");
    std::fs::write(
        dir.join(format!("{name}.key")),
        c.signing_key.serialize_pem(),
    )
    .expect("write");
}

/// A CA (`<name>-ca.crt`) and a client certificate it signed (`<name>.crt`, `<name>.key`).
fn write_client_pki(dir: &Path, name: &str) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_key = KeyPair::generate().expect("key");
    std::fs::write(
        dir.join(format!("{name}-ca.crt")),
        ca.self_signed(&ca_key).expect("ca").pem(),
    )
    .expect("write");
    let issuer = Issuer::new(ca, ca_key);
    let mut params = CertificateParams::new(vec!["agent".to_string()]).expect("params");
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
    let key = KeyPair::generate().expect("key");
    let cert = params.signed_by(&key, &issuer).expect("sign");
    std::fs::write(dir.join(format!("{name}.crt")), cert.pem()).expect("write");
    std::fs::write(dir.join(format!("{name}.key")), key.serialize_pem()).expect("write");
}

/// `curl` to `url` trusting `cacert`, with the client identity `<identity>.crt/.key` in `dir`
/// if given: the HTTP status, or `None` if no HTTP answer came (a refused handshake).
fn curl(dir: &Path, cacert: &str, url: &str, identity: Option<&str>) -> Option<u16> {
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
    .arg(dir.join(cacert));
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

#[test]
fn client_certificates_plain_http_and_certificate_reload() {
    if !have("curl") {
        skip("SKIP: curl not installed (bash scripts/setup.sh installs it)");
        return;
    }
    let db = model_db();
    let conf = tempfile::tempdir().expect("tempdir");
    let dir = conf.path();
    write_server_cert(dir, "tls");
    write_client_pki(dir, "agent");
    write_client_pki(dir, "stranger");
    let web = dir.join("web.yml");
    std::fs::write(
        &web,
        "tls_server_config:\n  cert_file: tls.crt\n  key_file: tls.key\n  \
         client_auth_type: RequireAndVerifyClientCert\n  client_ca_file: agent-ca.crt\n",
    )
    .expect("write");
    let server = serve(
        db.path(),
        &["--web.config-file", web.to_str().expect("path")],
    );
    let url = server.url("/models");

    assert_eq!(curl(dir, "tls.crt", &url, Some("agent")), Some(200));
    assert_eq!(
        curl(dir, "tls.crt", &url, None),
        None,
        "no client certificate"
    );
    assert_eq!(
        curl(dir, "tls.crt", &url, Some("stranger")),
        None,
        "a certificate from another CA"
    );

    // Plain HTTP on the TLS port: a 400 that says why, and no route served.
    let plain = url.replacen("https://", "http://", 1);
    let out = Command::new("curl")
        .args(["-sS", "--max-time", "20", "-i"])
        .arg(&plain)
        .output()
        .expect("run curl");
    let answer = String::from_utf8_lossy(&out.stdout);
    assert!(answer.starts_with("HTTP/1.0 400"), "{answer:?}");
    assert!(answer.contains("HTTPS server"), "{answer:?}");

    // A renewed certificate, written as secret volumes do (a new file renamed into place), is
    // served to new connections without a restart.
    write_server_cert(dir, "renewed");
    std::fs::copy(dir.join("renewed.key"), dir.join("tls.key.new")).expect("copy");
    std::fs::rename(dir.join("tls.key.new"), dir.join("tls.key")).expect("rename");
    std::fs::copy(dir.join("renewed.crt"), dir.join("tls.crt.new")).expect("copy");
    std::fs::rename(dir.join("tls.crt.new"), dir.join("tls.crt")).expect("rename");
    let deadline = Instant::now() + Duration::from_secs(60);
    while curl(dir, "renewed.crt", &url, Some("agent")) != Some(200) {
        assert!(
            Instant::now() < deadline,
            "the renewed certificate was not served within 60 s"
        );
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// Runs `serve` with `web`, expecting it to exit with an error within a minute; its stderr.
fn refused(web_yaml: &str) -> String {
    let db = model_db();
    let conf = tempfile::tempdir().expect("tempdir");
    let web = conf.path().join("web.yml");
    std::fs::write(&web, web_yaml).expect("write");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .arg("serve")
        .arg("--model-dir")
        .arg(db.path())
        .args(["--listen", "127.0.0.1:0", "--web.config-file"])
        .arg(&web)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start");
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.try_wait().expect("wait") {
            assert!(!status.success(), "started with {web_yaml:?}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("still starting after 60 s with {web_yaml:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut err = String::new();
    use std::io::Read;
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    err
}

#[test]
fn endless_files_and_absurd_bcrypt_costs_stop_start_up_with_a_message() {
    let err = refused("tls_server_config:\n  cert_file: /dev/zero\n  key_file: /dev/zero\n");
    assert!(
        err.contains("cert_file") && err.contains("larger than"),
        "{err}"
    );
    // bcrypt's maximum cost would take days per check (and to prepare the decoy hash).
    let dear = bcrypt::hash("s3cret", 4)
        .expect("bcrypt")
        .replacen("$04$", "$31$", 1);
    let err = refused(&format!("basic_auth_users:\n  kepler: '{dear}'\n"));
    assert!(err.contains("kepler") && err.contains("cost 31"), "{err}");
}

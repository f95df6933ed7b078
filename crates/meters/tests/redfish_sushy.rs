//! The Redfish meter against sushy-tools, OpenStack's Redfish emulators (PyPI `sushy-tools`),
//! started on loopback by the test:
//! - `sushy-static` serving a mockup of a server with power supplies and power controls, over
//!   HTTPS with a self-signed certificate: refused while TLS verification is on, read with
//!   `insecure: true`;
//! - `sushy-emulator --fake`, a dynamic BMC whose chassis have no power resources: the meter
//!   walks them and says so.
//!
//! The emulators come from `$KEPLER_SUSHY_BIN`, else `<workspace>/.venv-sushy/bin` (made by
//! scripts/setup.sh); without them the tests say they did not run.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kepler_meters::{MeterName, MeterSettings, OpenContext, RedfishSettings};
use serde_json::json;

fn sushy(program: &str) -> Option<PathBuf> {
    let dir = std::env::var_os("KEPLER_SUSHY_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.venv-sushy/bin"));
    let path = dir.join(program);
    if path.is_file() {
        Some(path)
    } else {
        eprintln!(
            "SKIPPED: {} not found (set KEPLER_SUSHY_BIN or run scripts/setup.sh)",
            path.display()
        );
        None
    }
}

/// An emulator process, killed when the test ends.
struct Emulator(Child);

impl Drop for Emulator {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn free_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// Starts `program args` and waits (about 30 s at most) until it accepts connections.
fn start(program: &Path, args: &[&str], port: u16) -> Emulator {
    let child = Command::new(program)
        .args(args)
        // sushy-static prints every request's headers, basic auth included: not to our logs.
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let emulator = Emulator(child);
    for _ in 0..300 {
        if TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return emulator;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("{} did not start listening", program.display());
}

/// What `kepler probe` would say about the node's BMC at `endpoint`.
fn probe(dir: &Path, endpoint: &str, insecure: bool) -> String {
    let file = dir.join("bmc.yaml");
    std::fs::write(
        &file,
        format!("nodes:\n  n: sushy\nbmcs:\n  sushy:\n    endpoint: {endpoint}\n    username: admin\n    password: pw-not-shown\n    insecure: {insecure}\n"),
    )
    .unwrap();
    let settings = MeterSettings {
        node_name: "n".into(),
        redfish: RedfishSettings {
            enabled: true,
            config_file: Some(file),
            http_timeout: Duration::from_secs(10),
            ..RedfishSettings::default()
        },
        ..MeterSettings::default()
    };
    let meter = "redfish"
        .parse::<MeterName>()
        .unwrap()
        .open(&OpenContext::new(&settings))
        .unwrap();
    let detail = meter.detail().unwrap();
    assert!(!detail.contains("pw-not-shown"), "{detail}");
    detail
}

/// A mockup tree as sushy-static reads it: `<dir>/<path below /redfish/v1>/index.json`.
fn mockup(dir: &Path) {
    let resources = [
        ("", json!({"Chassis": {"@odata.id": "/redfish/v1/Chassis"}})),
        (
            "Chassis",
            json!({"Members": [{"@odata.id": "/redfish/v1/Chassis/1U"},
                                        {"@odata.id": "/redfish/v1/Chassis/Blade"}]}),
        ),
        (
            "Chassis/1U",
            json!({"Id": "1U",
            "PowerSubsystem": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem"}}),
        ),
        (
            "Chassis/1U/PowerSubsystem",
            json!({
            "PowerSupplies": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies"}}),
        ),
        (
            "Chassis/1U/PowerSubsystem/PowerSupplies",
            json!({"Members": [
            {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1"},
            {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2"}]}),
        ),
        (
            "Chassis/1U/PowerSubsystem/PowerSupplies/Bay1",
            json!({"Id": "Bay1", "Name": "Power Supply Bay 1", "PowerOutputWatts": 120.5}),
        ),
        (
            "Chassis/1U/PowerSubsystem/PowerSupplies/Bay2",
            json!({"Id": "Bay2",
            "Metrics": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2/Metrics"}}),
        ),
        (
            "Chassis/1U/PowerSubsystem/PowerSupplies/Bay2/Metrics",
            json!({"OutputPowerWatts": {"Reading": 110.0}}),
        ),
        (
            "Chassis/Blade",
            json!({"Id": "Blade",
            "Power": {"@odata.id": "/redfish/v1/Chassis/Blade/Power"}}),
        ),
        (
            "Chassis/Blade/Power",
            json!({"PowerControl": [
            {"@odata.id": "/redfish/v1/Chassis/Blade/Power#/PowerControl/0", "MemberId": "0",
             "Name": "Blade Power Control", "PowerConsumedWatts": 44.0},
            {"MemberId": "1", "Name": "CPU", "PhysicalContext": "CPU", "PowerConsumedWatts": 20}]}),
        ),
    ];
    for (path, body) in resources {
        let at = dir.join(path);
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("index.json"), body.to_string()).unwrap();
    }
}

#[test]
fn sushy_static_over_https_is_read_only_with_verification_off() {
    let Some(program) = sushy("sushy-static") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let tree = dir.path().join("mockup");
    mockup(&tree);
    let cert = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_string()]).unwrap();
    std::fs::write(dir.path().join("tls.crt"), cert.cert.pem()).unwrap();
    std::fs::write(dir.path().join("tls.key"), cert.signing_key.serialize_pem()).unwrap();
    let port = free_port();
    let port_text = port.to_string();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let _emulator = start(
        &program,
        &[
            "-i",
            "127.0.0.1",
            "-p",
            &port_text,
            "-m",
            tree.to_str().unwrap(),
            "-c",
            crt.to_str().unwrap(),
            "-k",
            key.to_str().unwrap(),
        ],
        port,
    );
    let endpoint = format!("https://127.0.0.1:{port}");
    // A self-signed certificate: verification (the default) refuses it.
    let detail = probe(dir.path(), &endpoint, false);
    assert!(
        detail.contains("did not answer:") && detail.contains("invalid peer certificate"),
        "{detail}"
    );
    // With verification off the readings come through: 120.5 + 110 W of supplies and the
    // blade's 44 W (its CPU control is a part of that, not added).
    let detail = probe(dir.path(), &endpoint, true);
    assert!(detail.contains("(TLS verification off)"), "{detail}");
    assert!(
        detail.ends_with("answered: 274.5 W from 3 reading(s)"),
        "{detail}"
    );
}

#[test]
fn sushy_emulator_chassis_without_power_are_reported() {
    let Some(program) = sushy("sushy-emulator") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let port = free_port();
    let port_text = port.to_string();
    let _emulator = start(
        &program,
        &["--fake", "-i", "127.0.0.1", "-p", &port_text],
        port,
    );
    let detail = probe(dir.path(), &format!("http://127.0.0.1:{port}"), false);
    assert!(
        detail.ends_with("did not answer: no chassis reports power (neither PowerSubsystem power supplies nor Power/PowerControl)"),
        "{detail}"
    );
}

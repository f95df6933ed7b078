//! A fake BMC for tests: a small HTTP/1.1 server on 127.0.0.1 that serves Redfish JSON, with
//! session login (`POST /redfish/v1/SessionService/Sessions` → `X-Auth-Token`) or basic
//! auth, and can be switched to errors, slow answers and malformed JSON while it runs.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine;
use serde_json::json;

pub const USER: &str = "admin";
pub const PASSWORD: &str = "s3cr3t-Pa55";

/// How the BMC answers every GET of a resource.
#[derive(Clone, Debug, PartialEq)]
pub enum Mode {
    Normal,
    /// Every GET answers this status.
    Status(u16),
    /// Every GET waits this long before answering.
    Slow(Duration),
    /// Every GET answers 200 with a body that is not JSON.
    Garbage,
    /// Every GET waits until the mode changes (at most 10 s), then answers normally.
    Hold,
}

#[derive(Default)]
pub struct State {
    pub resources: HashMap<String, String>,
    pub mode: Option<Mode>,
    /// Whether the session service exists (else 404 and basic auth).
    pub sessions: bool,
    pub tokens: Vec<String>,
    pub logins: usize,
    /// Requests refused for missing or wrong credentials.
    pub refused: usize,
    pub gets: usize,
    /// Sessions closed with DELETE and a valid token.
    pub logouts: usize,
}

pub struct FakeBmc {
    pub endpoint: String,
    pub state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
}

impl Drop for FakeBmc {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        // Wake the accept loop so it sees the flag.
        let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
    }
}

impl FakeBmc {
    /// A BMC with one chassis, `1U`, whose two power supplies give `psu_watts`, and a second
    /// chassis with only the deprecated Power resource.
    pub fn start(sessions: bool) -> FakeBmc {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let state = Arc::new(Mutex::new(State {
            resources: resources(),
            sessions,
            ..State::default()
        }));
        let stop = Arc::new(AtomicBool::new(false));
        {
            let state = state.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                // Bounded: a test makes far fewer connections than this.
                for stream in listener.incoming().take(100_000) {
                    if stop.load(Ordering::Relaxed) {
                        return;
                    }
                    let Ok(stream) = stream else { continue };
                    let state = state.clone();
                    std::thread::spawn(move || serve(stream, &state));
                }
            });
        }
        FakeBmc {
            endpoint,
            state,
            stop,
        }
    }

    pub fn set_mode(&self, mode: Mode) {
        self.state.lock().unwrap().mode = Some(mode);
    }

    /// Forgets every session token, as a BMC that restarted would.
    pub fn expire_sessions(&self) {
        self.state.lock().unwrap().tokens.clear();
    }

    /// The BMC file of upstream's format, naming this BMC for node `node`.
    pub fn bmc_file(&self, node: &str) -> String {
        format!(
            "nodes:\n  {node}: test-bmc\nbmcs:\n  test-bmc:\n    endpoint: {}\n    username: {USER}\n    password: {PASSWORD}\n    insecure: false\n",
            self.endpoint
        )
    }
}

fn resources() -> HashMap<String, String> {
    let r = [
        (
            "/redfish/v1/Chassis",
            json!({"Members": [{"@odata.id": "/redfish/v1/Chassis/1U"},
                               {"@odata.id": "/redfish/v1/Chassis/Blade"}]}),
        ),
        (
            "/redfish/v1/Chassis/1U",
            json!({"Id": "1U", "Name": "Computer System Chassis",
                   "PowerSubsystem": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem"}}),
        ),
        (
            "/redfish/v1/Chassis/1U/PowerSubsystem",
            json!({"PowerSupplies": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies"}}),
        ),
        (
            "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies",
            json!({"Members": [
                {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1"},
                {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2"}]}),
        ),
        (
            "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay1",
            json!({"Id": "Bay1", "Name": "Power Supply Bay 1", "PowerOutputWatts": 120.5}),
        ),
        (
            "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2",
            json!({"Id": "Bay2", "Name": "Power Supply Bay 2",
                   "Metrics": {"@odata.id": "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2/Metrics"}}),
        ),
        (
            "/redfish/v1/Chassis/1U/PowerSubsystem/PowerSupplies/Bay2/Metrics",
            json!({"OutputPowerWatts": {"Reading": 110.0}}),
        ),
        (
            "/redfish/v1/Chassis/Blade",
            json!({"Id": "Blade", "Power": {"@odata.id": "/redfish/v1/Chassis/Blade/Power"}}),
        ),
        (
            "/redfish/v1/Chassis/Blade/Power",
            json!({"PowerControl": [
                {"@odata.id": "/redfish/v1/Chassis/Blade/Power#/PowerControl/0", "MemberId": "0",
                 "Name": "Blade Power Control", "PowerConsumedWatts": 44.0},
                {"MemberId": "1", "Name": "CPU Subsystem", "PhysicalContext": "CPU",
                 "PowerConsumedWatts": 20.0}]}),
        ),
    ];
    r.into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn serve(stream: TcpStream, state: &Mutex<State>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream);
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).is_err() {
        return;
    }
    let mut headers = HashMap::new();
    for _ in 0..100 {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let length: usize = headers
        .get("content-length")
        .and_then(|l| l.parse().ok())
        .unwrap_or(0);
    let mut body = vec![0; length.min(1 << 16)];
    let _ = reader.read_exact(&mut body);
    let mut parts = request_line.split_whitespace();
    let method = parts.next().unwrap_or("").to_string();
    let path = parts.next().unwrap_or("").to_string();
    for _ in 0..1000 {
        if state.lock().unwrap().mode != Some(Mode::Hold) || method != "GET" {
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let (status, extra, payload, delay) = answer(state, &method, &path, &headers, &body);
    if let Some(delay) = delay {
        std::thread::sleep(delay);
    }
    let mut stream = reader.into_inner();
    let _ = write!(
        stream,
        "HTTP/1.1 {status} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n{extra}\r\n{payload}",
        payload.len()
    );
}

type Answer = (u16, String, String, Option<Duration>);

fn answer(
    state: &Mutex<State>,
    method: &str,
    path: &str,
    headers: &HashMap<String, String>,
    body: &[u8],
) -> Answer {
    let mut s = state.lock().unwrap();
    let plain = |status: u16, body: &str| (status, String::new(), body.to_string(), None);
    if method == "POST" && path == "/redfish/v1/SessionService/Sessions" {
        if !s.sessions {
            return plain(404, "{}");
        }
        let login: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        if login["UserName"] != USER || login["Password"] != PASSWORD {
            s.refused += 1;
            return plain(401, "{}");
        }
        s.logins += 1;
        let token = format!("token-{}", s.logins);
        s.tokens.push(token.clone());
        return (
            201,
            format!(
                "X-Auth-Token: {token}\r\nLocation: /redfish/v1/SessionService/Sessions/{}\r\n",
                s.logins
            ),
            "{}".into(),
            None,
        );
    }
    if method == "DELETE" && path.starts_with("/redfish/v1/SessionService/Sessions/") {
        let token = headers.get("x-auth-token").cloned().unwrap_or_default();
        if let Some(i) = s.tokens.iter().position(|t| *t == token) {
            s.tokens.remove(i);
            s.logouts += 1;
            return plain(204, "");
        }
        return plain(401, "{}");
    }
    if method != "GET" {
        return plain(405, "{}");
    }
    let authorised = if s.sessions {
        headers
            .get("x-auth-token")
            .is_some_and(|t| s.tokens.contains(t))
    } else {
        let expected = format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{USER}:{PASSWORD}"))
        );
        headers.get("authorization") == Some(&expected)
    };
    if !authorised {
        s.refused += 1;
        return plain(401, "{}");
    }
    s.gets += 1;
    match s.mode.clone().unwrap_or(Mode::Normal) {
        Mode::Normal | Mode::Hold => match s.resources.get(path) {
            Some(body) => plain(200, body),
            None => plain(404, "{}"),
        },
        Mode::Status(code) => plain(code, "{\"error\": \"internal\"}"),
        Mode::Slow(delay) => (200, String::new(), "{}".into(), Some(delay)),
        Mode::Garbage => plain(200, "{\"Members\": [ <html>"),
    }
}

//! Platform power from IPMI DCMI "Get Power Reading" (`ipmi` meter, platform domain), in-band
//! through the kernel's IPMI device or over the LAN (RMCP+) to a BMC.
//!
//! It runs `ipmitool dcmi power reading` (Debian `ipmitool`) with a timeout and parses its
//! output ([`parse`]). Why not a crate: the Rust IPMI crates each cover one side of what is
//! needed (`ipmi-rs` documents the unix device file and RMCP; `rust-ipmi` and `ipmi` are
//! RMCP+ clients without the in-band device) and none has the DCMI group-extension commands,
//! so we would encode DCMI ourselves and could test it against no simulator (OpenIPMI's
//! `ipmi_sim` answers RMCP+ but not DCMI). ipmitool covers both transports and DCMI, is
//! packaged everywhere and used by BMC vendors' own docs, and a hung BMC costs a child process
//! we kill rather than a thread we cannot. The password reaches ipmitool through
//! `IPMI_PASSWORD` (`-E`), never its command line, which any user may read in `/proc`.
//!
//! The zone takes the instantaneous reading: the BMC's average covers a sampling period the
//! BMC chooses, which need not match our interval.
//!
//! Like Redfish, the meter is a [`PolledMeter`]: the poller asks every interval (backing off
//! while it fails) and the tick takes the cached answer until it is older than the staleness
//! limit.

pub mod parse;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use kepler_core::{
    PlatformLabels, PlatformPower, PowerDomain, Provenance, ReadError, Unavailable, Watts,
    ZoneReading,
};

use crate::polled::{PollTiming, Polled, PolledMeter, SlowDevice};
use crate::registry::OpenContext;

/// The registry name of this meter.
pub const NAME: &str = "ipmi";

/// The kernel's IPMI device nodes, as ipmitool's `open` interface looks for them.
const DEVICES: [&str; 3] = ["/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0"];

/// `ipmi.interface`: how ipmitool reaches the BMC.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub enum IpmiInterface {
    /// In-band, through the kernel's IPMI driver (`/dev/ipmi0`).
    #[default]
    Open,
    /// Over the LAN with RMCP+ (IPMI 2.0) to `ipmi.address`.
    Lanplus,
}

impl IpmiInterface {
    pub fn as_str(self) -> &'static str {
        match self {
            IpmiInterface::Open => "open",
            IpmiInterface::Lanplus => "lanplus",
        }
    }
}

impl<'de> serde::Deserialize<'de> for IpmiInterface {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        match text.trim().to_ascii_lowercase().as_str() {
            "open" => Ok(IpmiInterface::Open),
            "lanplus" => Ok(IpmiInterface::Lanplus),
            _ => Err(serde::de::Error::custom(format!(
                "unknown interface {text:?} (known: open, lanplus)"
            ))),
        }
    }
}

/// The `ipmi` section (keys of kepler-rs).
#[derive(Clone, Debug, PartialEq)]
pub struct IpmiSettings {
    pub enabled: bool,
    pub interface: IpmiInterface,
    /// `address`: the BMC's host name or address, for `lanplus`; `host:port` (or
    /// `[v6]:port`) when the BMC does not listen on 623.
    pub address: Option<String>,
    pub username: Option<String>,
    /// `passwordFile`: the file holding the BMC password (read at each poll, so a rotated
    /// secret is picked up; trailing newlines ignored).
    pub password_file: Option<PathBuf>,
    /// `ipmitool`: the program to run; a bare name is looked up on `PATH`.
    pub ipmitool: PathBuf,
    /// `timeout`: how long one ipmitool run may take before it is killed.
    pub timeout: Duration,
    /// `staleness`: how old a cached answer may be when the tick takes it.
    pub staleness: Duration,
}

impl Default for IpmiSettings {
    fn default() -> Self {
        IpmiSettings {
            enabled: false,
            interface: IpmiInterface::Open,
            address: None,
            username: None,
            password_file: None,
            ipmitool: PathBuf::from("ipmitool"),
            timeout: Duration::from_secs(5),
            staleness: Duration::from_secs(30),
        }
    }
}

/// What went wrong running ipmitool. Never holds the password.
#[derive(Debug, thiserror::Error)]
pub enum IpmiError {
    #[error("starting {program}: {source}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("ipmitool did not finish within {0:?}; killed")]
    Timeout(Duration),
    #[error("ipmitool failed ({status}): {stderr}")]
    Failed { status: String, stderr: String },
    #[error("reading the password file {path}: {source}")]
    Password {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Parse(#[from] parse::ParseError),
    #[error("waiting for ipmitool: {0}")]
    Wait(#[source] std::io::Error),
}

struct IpmiDevice {
    settings: IpmiSettings,
    program: PathBuf,
    labels: Arc<PlatformLabels>,
    path: Arc<str>,
}

impl IpmiDevice {
    fn command(&self) -> Result<Command, IpmiError> {
        let mut cmd = Command::new(&self.program);
        let s = &self.settings;
        match s.interface {
            IpmiInterface::Open => {
                cmd.args(["-I", "open"]);
            }
            IpmiInterface::Lanplus => {
                // One retry with ipmitool's own timeout inside ours, so a silent BMC ends in
                // ipmitool's message rather than our kill.
                let secs = (s.timeout.as_secs() / 2).max(1).to_string();
                let (host, port) = split_port(s.address.as_deref().unwrap_or_default());
                cmd.args(["-I", "lanplus", "-H", host]);
                if let Some(port) = port {
                    cmd.args(["-p", port]);
                }
                cmd.args(["-N", &secs, "-R", "1"]);
                if let Some(user) = &s.username {
                    cmd.arg("-U").arg(user);
                }
                if let Some(file) = &s.password_file {
                    let password =
                        std::fs::read_to_string(file).map_err(|source| IpmiError::Password {
                            path: file.display().to_string(),
                            source,
                        })?;
                    cmd.arg("-E")
                        .env("IPMI_PASSWORD", password.trim_end_matches(['\n', '\r']));
                }
            }
        }
        cmd.args(["dcmi", "power", "reading"])
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        Ok(cmd)
    }

    fn run(&self) -> Result<String, IpmiError> {
        let mut child = self.command()?.spawn().map_err(|source| IpmiError::Spawn {
            program: self.program.display().to_string(),
            source,
        })?;
        let started = Instant::now();
        let status = loop {
            if let Some(status) = child.try_wait().map_err(IpmiError::Wait)? {
                break status;
            }
            if started.elapsed() >= self.settings.timeout {
                // Kill and reap, so no zombie is left whatever ipmitool was stuck on.
                let _ = child.kill();
                let _ = child.wait();
                return Err(IpmiError::Timeout(self.settings.timeout));
            }
            std::thread::sleep(Duration::from_millis(20));
        };
        // ipmitool's answer is a few hundred bytes; more is not an answer (and a child that
        // fills the pipe blocks and is killed by the timeout above).
        let mut stdout = String::new();
        let mut stderr = String::new();
        if let Some(out) = child.stdout.take() {
            let _ = out.take(64 * 1024).read_to_string(&mut stdout);
        }
        if let Some(err) = child.stderr.take() {
            let _ = err.take(4 * 1024).read_to_string(&mut stderr);
        }
        if !status.success() {
            return Err(IpmiError::Failed {
                status: status.to_string(),
                stderr: stderr.trim().chars().take(300).collect(),
            });
        }
        Ok(stdout)
    }
}

impl SlowDevice for IpmiDevice {
    fn poll(&mut self) -> Result<Polled, ReadError> {
        let output = self.run().map_err(|e| ReadError::Other(e.to_string()))?;
        let reading =
            parse::parse(&output).map_err(|e| ReadError::Other(IpmiError::from(e).to_string()))?;
        let watts = Watts(reading.current);
        Ok(Polled {
            readings: vec![ZoneReading::power(
                "platform".into(),
                self.path.clone(),
                watts,
            )],
            platform: vec![PlatformPower {
                labels: self.labels.clone(),
                watts,
            }],
        })
    }
}

/// Opens the meter when `ipmi.enabled` is set and its transport can work here.
pub fn open(cx: &OpenContext<'_>) -> Result<PolledMeter, Unavailable> {
    let s = &cx.settings.ipmi;
    if !s.enabled {
        return Err(Unavailable::new("ipmi.enabled is false"));
    }
    let program = find_program(&s.ipmitool).ok_or_else(|| {
        Unavailable::new(format!(
            "{} not found (install Debian's ipmitool, or set ipmi.ipmitool)",
            s.ipmitool.display()
        ))
    })?;
    let (bmc_id, detail) = match s.interface {
        IpmiInterface::Open => {
            let device = DEVICES
                .iter()
                .map(Path::new)
                .find(|d| d.exists())
                .ok_or_else(|| {
                    Unavailable::new(
                        "no IPMI device (/dev/ipmi0); load ipmi_devintf and ipmi_si, or use ipmi.interface: lanplus",
                    )
                })?;
            // ipmitool would fail on every poll; say so once, here.
            std::fs::OpenOptions::new()
                .read(true)
                .write(true)
                .open(device)
                .map_err(|e| Unavailable::new(format!("{}: {e}", device.display())))?;
            (
                "local".to_string(),
                format!("in-band through {}", device.display()),
            )
        }
        IpmiInterface::Lanplus => {
            let address = s
                .address
                .as_deref()
                .map(str::trim)
                .filter(|a| !a.is_empty())
                .ok_or_else(|| {
                    Unavailable::new("ipmi.interface is lanplus but ipmi.address is not set")
                })?;
            if let Some(file) = &s.password_file {
                // Present and readable now; its content is read at each poll, never logged.
                std::fs::metadata(file).map_err(|e| {
                    Unavailable::new(format!("ipmi.passwordFile {}: {e}", file.display()))
                })?;
            }
            (address.to_string(), format!("RMCP+ to {address}"))
        }
    };
    let device = IpmiDevice {
        settings: s.clone(),
        program,
        path: Arc::from(format!("ipmi:{bmc_id}/dcmi")),
        labels: Arc::new(PlatformLabels {
            source: "ipmi".into(),
            bmc_id,
            chassis_id: String::new(),
            source_id: "dcmi".into(),
            source_name: "Instantaneous power reading".into(),
            source_type: "DCMI".into(),
        }),
    };
    let timing = PollTiming {
        every: cx.settings.poll_interval,
        staleness: s.staleness.max(cx.settings.poll_interval),
        max_backoff: crate::redfish::backoff_limit(cx.settings.poll_interval),
    };
    crate::polled::start(
        cx,
        NAME,
        PowerDomain::Platform,
        Provenance::Measured,
        Box::new(device),
        timing,
        format!("ipmitool dcmi power reading, {detail}"),
    )
}

/// `host:port` → (`host`, `port`); a bare host, a bare IPv6 address or `[v6]:port` as such.
fn split_port(address: &str) -> (&str, Option<&str>) {
    if let Some(rest) = address.strip_prefix('[') {
        if let Some((host, port)) = rest.split_once("]:") {
            return (host, Some(port));
        }
        return (rest.trim_end_matches(']'), None);
    }
    match address.split_once(':') {
        Some((host, port)) if !port.contains(':') => (host, Some(port)),
        _ => (address, None),
    }
}

/// `program` itself when it names a path, else the first match on `PATH`.
fn find_program(program: &Path) -> Option<PathBuf> {
    if program.components().count() > 1 {
        return program.is_file().then(|| program.to_path_buf());
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| candidate.is_file())
}

#[cfg(test)]
mod tests {
    use super::split_port;

    #[test]
    fn addresses_with_and_without_ports() {
        assert_eq!(split_port("bmc"), ("bmc", None));
        assert_eq!(split_port("10.0.0.1:1623"), ("10.0.0.1", Some("1623")));
        assert_eq!(split_port("fe80::1"), ("fe80::1", None));
        assert_eq!(split_port("[fe80::1]:623"), ("fe80::1", Some("623")));
        assert_eq!(split_port("[fe80::1]"), ("fe80::1", None));
    }
}

//! Loading in a short-lived child process. aya parses the kernel's BTF and relocates the
//! programs on the heap of whoever loads them, which set the agent's start-up peak; a freshly
//! executed copy of the agent does that work instead, then hands over, through a unix socket
//! pair, every descriptor that keeps the programs attached (links, programs, perf events)
//! and the maps, and exits. The agent rebuilds its maps from the descriptors and never parses
//! BTF.
//!
//! Re-execution rather than a bare fork: the agent already runs threads (the async runtime,
//! logging) when it loads, and a forked child of a threaded process may only make
//! async-signal-safe calls, whereas loading allocates freely. A new image has no such limit,
//! and its memory is its own from the first page.
//!
//! The child reads a [`Request`] and answers with the descriptors, in chunks, followed by a
//! [`Reply`]. Any failure there (no BTF, no privilege, a crash, a hang) comes back as the
//! `Unavailable` the agent shows for eBPF, within the command's timeout, and the child is
//! always reaped.

use std::collections::HashMap;
use std::ffi::OsString;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use aya::maps::{Map, MapData};
use kepler_core::Unavailable;
use serde::{Deserialize, Serialize};

use crate::fdpass::{self, MAX_FDS};
use crate::loader::{self, Attached, Loaded};
use crate::probes::{self, Labels, OptionalProbe, Part, Probes};
use crate::EbpfSettings;

/// The hidden first argument that makes the agent's binary a loader child (see
/// [`run_loader_child`]).
pub const LOADER_SUBCOMMAND: &str = "__ebpf-loader";

/// The descriptor number the child finds its end of the socket at.
const CHILD_FD: RawFd = 3;

/// Largest message: a reply carries a few verifier-log excerpts of at most 2,000 bytes each.
const MAX_MESSAGE: usize = 256 << 10;

/// How to start a loader child: a program that calls [`run_loader_child`] with its end of
/// the socket at descriptor 3.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoaderCommand {
    pub program: PathBuf,
    pub args: Vec<OsString>,
    pub env: Vec<(OsString, OsString)>,
    /// How long the child may take to answer, after which it is killed and eBPF is
    /// unavailable. Loading runs the verifier, which takes seconds on a busy host.
    pub timeout: Duration,
}

impl LoaderCommand {
    /// This process's own executable with [`LOADER_SUBCOMMAND`]. `/proc/self/exe` names the
    /// running image even if its file has been replaced or deleted since (an upgrade).
    pub fn this_executable() -> Self {
        LoaderCommand {
            program: PathBuf::from("/proc/self/exe"),
            args: vec![LOADER_SUBCOMMAND.into()],
            env: Vec::new(),
            timeout: Duration::from_secs(60),
        }
    }
}

/// The settings the child loads with.
#[derive(Serialize, Deserialize)]
struct Request {
    max_processes: u32,
    exit_buffer_bytes: u32,
    page_cache: bool,
    softirq: bool,
    hw_counters: bool,
}

#[derive(Serialize, Deserialize)]
enum Reply {
    /// Sent after the descriptors: `maps[i]` is the name of the map at descriptor `i`;
    /// `probe_fds` says which of the others (by position, all past the maps) each optional
    /// probe attached through, so that the agent can detach it, which are `sched_switch`'s
    /// and which the task iterator's link and final-switch program; the rest are kept as
    /// they are.
    Loaded {
        maps: Vec<String>,
        fds: usize,
        probes: Probes,
        notes: Vec<String>,
        probe_fds: Vec<(Part, Vec<usize>)>,
    },
    Unavailable {
        reason: String,
        denied: bool,
    },
}

/// Runs a loader child and takes over what it loaded.
pub(crate) fn load(
    command: &LoaderCommand,
    settings: &EbpfSettings,
) -> Result<Loaded, Unavailable> {
    let (ours, theirs) = fdpass::socketpair()
        .map_err(|e| Unavailable::new(format!("eBPF: socket for the loader process: {e}")))?;
    let mut child = spawn(command, theirs)?;
    let pid = child.id();
    let answer = converse(ours.as_fd(), settings, command.timeout);
    drop(ours);
    let status = reap(&mut child, answer.is_err());
    let (reply, mut fds) = answer.map_err(|e| {
        Unavailable::new(match e {
            Failure::TimedOut => format!(
                "eBPF: the loader process (pid {pid}) did not answer within {:?}; killed",
                command.timeout
            ),
            Failure::Closed => {
                format!("eBPF: the loader process (pid {pid}) exited without an answer ({status})")
            }
            Failure::Other(why) => format!("eBPF: loader process (pid {pid}): {why}"),
        })
    })?;
    let (names, probes, notes, labels) = match reply {
        Reply::Unavailable { reason, denied } => {
            return Err(Unavailable { reason, denied });
        }
        Reply::Loaded {
            maps,
            fds: count,
            probes,
            notes,
            probe_fds,
        } => {
            if count != fds.len() || maps.len() > fds.len() {
                return Err(Unavailable::new(format!(
                    "eBPF: the loader process sent {} descriptors for {count}, {} of them maps",
                    fds.len(),
                    maps.len()
                )));
            }
            (maps, probes, notes, probe_fds)
        }
    };
    let rest = fds.split_off(names.len());
    let (rest, probe_fds) = take_labelled(rest, names.len(), labels).map_err(|why| {
        Unavailable::new(format!(
            "eBPF: the loader process labelled its descriptors badly: {why}"
        ))
    })?;
    let mut maps = HashMap::new();
    for (name, fd) in names.into_iter().zip(fds) {
        let map = MapData::from_fd(fd)
            .and_then(Map::from_map_data)
            .map_err(|e| loader::unavailable(&format!("received map {name}"), &e))?;
        maps.insert(name, map);
    }
    let mut ebpf = Attached::from_fds(maps, rest, probe_fds);
    let exits = loader::exits_ring(&mut ebpf)?;
    Ok(Loaded {
        ebpf,
        exits,
        probes,
        counters: None,
        notes,
        probe_fds: Vec::new(),
    })
}

/// Splits the descriptors received after the maps (`rest`, the first at position `first`)
/// into those of each labelled probe and the others. A position out of range, among the
/// maps, or given twice is an error.
#[allow(clippy::type_complexity)]
fn take_labelled(
    rest: Vec<OwnedFd>,
    first: usize,
    labels: Vec<(Part, Vec<usize>)>,
) -> Result<(Vec<OwnedFd>, Vec<(Part, Vec<OwnedFd>)>), String> {
    let mut slots: Vec<Option<OwnedFd>> = rest.into_iter().map(Some).collect();
    let mut probes = Vec::with_capacity(labels.len());
    for (probe, positions) in labels {
        let mut fds = Vec::with_capacity(positions.len());
        for pos in positions {
            let fd = pos
                .checked_sub(first)
                .and_then(|i| slots.get_mut(i))
                .and_then(Option::take)
                .ok_or_else(|| format!("{probe:?} at descriptor {pos}"))?;
            fds.push(fd);
        }
        probes.push((probe, fds));
    }
    Ok((slots.into_iter().flatten().collect(), probes))
}

fn spawn(command: &LoaderCommand, theirs: OwnedFd) -> Result<Child, Unavailable> {
    let fd = theirs.as_raw_fd();
    let mut cmd = Command::new(&command.program);
    cmd.args(&command.args)
        .envs(command.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    // SAFETY: between fork and exec this only calls dup2 and fcntl, which are
    // async-signal-safe, on descriptors that exist in the child.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would leave close-on-exec set.
            let rc = if fd == CHILD_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, CHILD_FD)
            };
            if rc < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = cmd.spawn().map_err(|e| {
        Unavailable::new(format!(
            "eBPF: starting the loader process ({}): {e}",
            command.program.display()
        ))
    });
    // Our copy of the child's end goes now: the child's exit must read as end of file.
    drop(theirs);
    child
}

enum Failure {
    TimedOut,
    Closed,
    Other(String),
}

/// Sends the request and collects the descriptors and the reply.
fn converse(
    sock: BorrowedFd<'_>,
    settings: &EbpfSettings,
    timeout: Duration,
) -> Result<(Reply, Vec<OwnedFd>), Failure> {
    let deadline = Instant::now() + timeout;
    let request = Request {
        max_processes: settings.max_processes,
        exit_buffer_bytes: settings.exit_buffer_bytes,
        page_cache: settings.page_cache,
        softirq: settings.softirq,
        hw_counters: settings.hw_counters,
    };
    let bytes = serde_json::to_vec(&request).map_err(|e| Failure::Other(e.to_string()))?;
    fdpass::send(sock, &bytes, &[]).map_err(|e| match e.raw_os_error() {
        Some(libc::EPIPE) | Some(libc::ECONNRESET) => Failure::Closed,
        _ => Failure::Other(format!("sending the request: {e}")),
    })?;
    let mut fds = Vec::new();
    loop {
        let msg = fdpass::recv(sock, MAX_MESSAGE, deadline).map_err(|e| match e.kind() {
            std::io::ErrorKind::TimedOut => Failure::TimedOut,
            _ if e.raw_os_error() == Some(libc::ECONNRESET) => Failure::Closed,
            _ => Failure::Other(format!("receiving: {e}")),
        })?;
        if msg.data.is_empty() {
            return Err(Failure::Closed);
        }
        if !msg.fds.is_empty() {
            fds.extend(msg.fds);
            continue;
        }
        let reply = serde_json::from_slice(&msg.data)
            .map_err(|e| Failure::Other(format!("unreadable reply: {e}")))?;
        return Ok((reply, fds));
    }
}

/// Waits for the child, killing it first if it is not done or has failed to answer; the
/// wait itself is bounded either way. Returns how it ended, for messages.
fn reap(child: &mut Child, kill: bool) -> String {
    if !kill {
        // It exits right after its reply; a child that lingers is killed.
        let until = Instant::now() + Duration::from_secs(5);
        while Instant::now() < until {
            match child.try_wait() {
                Ok(Some(status)) => return status.to_string(),
                Ok(None) => std::thread::sleep(Duration::from_millis(5)),
                Err(_) => break,
            }
        }
    }
    // An answer may have come before its exit: a child that is still running is killed, one
    // that has exited keeps its own status.
    if let Ok(Some(status)) = child.try_wait() {
        return status.to_string();
    }
    let _ = child.kill();
    match child.wait() {
        Ok(status) => status.to_string(),
        Err(e) => format!("not reaped: {e}"),
    }
}

/// The loader child's whole life: reads the request from descriptor 3, loads, sends what it
/// loaded (or why it could not), and returns the exit code. The loaded object is leaked on
/// purpose: its destructors would detach what the agent now holds (a tracefs kprobe event is
/// removed on drop).
pub fn run_loader_child() -> i32 {
    if !is_socket(CHILD_FD) {
        eprintln!("{LOADER_SUBCOMMAND} is internal: the agent runs it to load its eBPF programs");
        return 2;
    }
    // SAFETY: descriptor 3 was checked to be open (a socket); this process owns it from here.
    let sock = unsafe { OwnedFd::from_raw_fd(CHILD_FD) };
    let deadline = Instant::now() + Duration::from_secs(60);
    let request: Request = match fdpass::recv(sock.as_fd(), MAX_MESSAGE, deadline)
        .map_err(|e| e.to_string())
        .and_then(|m| serde_json::from_slice(&m.data).map_err(|e| e.to_string()))
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("eBPF loader: no request from the agent: {e}");
            return 1;
        }
    };
    let settings = EbpfSettings {
        max_processes: request.max_processes,
        exit_buffer_bytes: request.exit_buffer_bytes,
        page_cache: request.page_cache,
        softirq: request.softirq,
        hw_counters: request.hw_counters,
        ..EbpfSettings::default()
    };
    let sent = match loader::load_here(&settings, Labels::Fds) {
        Ok(loaded) => {
            let sent = hand_over(sock.as_fd(), &loaded);
            std::mem::forget(loaded);
            sent
        }
        Err(u) => send_reply(
            sock.as_fd(),
            &Reply::Unavailable {
                reason: u.reason,
                denied: u.denied,
            },
        ),
    };
    match sent {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("eBPF loader: answering the agent: {e}");
            1
        }
    }
}

fn is_socket(fd: RawFd) -> bool {
    // SAFETY: fstat writes only into `st`; a closed descriptor gives an error.
    unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        libc::fstat(fd, &mut st) == 0 && st.st_mode & libc::S_IFMT == libc::S_IFSOCK
    }
}

/// Sends the maps' descriptors first, then every other open descriptor but the standard
/// ones and the socket: whatever aya attached through (raw tracepoint and link descriptors,
/// perf events for kprobes and counters) stays open in the agent that way.
fn hand_over(sock: BorrowedFd<'_>, loaded: &Loaded) -> std::io::Result<()> {
    let mut names = Vec::new();
    let mut fds: Vec<RawFd> = Vec::new();
    for (name, map) in loaded.ebpf.maps() {
        names.push(name.to_string());
        fds.push(map_fd(map));
    }
    // The ring buffer was taken out of the maps; it travels too.
    names.push(crate::abi::names::EXITS.to_string());
    fds.push(loaded.exits.as_fd().as_raw_fd());
    for fd in probes::open_fds()? {
        let standard = fd <= 2 || fd == sock.as_raw_fd();
        if !standard && !fds.contains(&fd) {
            fds.push(fd);
        }
    }
    for chunk in fds.chunks(MAX_FDS) {
        // SAFETY: every descriptor in the list is open (checked above or owned by `loaded`)
        // and stays open while this borrow lives.
        let borrowed: Vec<BorrowedFd<'_>> = chunk
            .iter()
            .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
            .collect();
        fdpass::send(sock, b"fds", &borrowed)?;
    }
    let counters: Vec<RawFd> = loaded
        .counters
        .iter()
        .flatten()
        .flatten()
        .map(|(_, fd)| fd.as_raw_fd())
        .collect();
    let one = |fd: Option<BorrowedFd<'_>>| -> Vec<RawFd> {
        fd.map(|fd| fd.as_raw_fd()).into_iter().collect()
    };
    let iter_link = one(loaded.ebpf.iter_link());
    let exit_prog = one(loaded.ebpf.exit_prog());
    let labelled = loaded.probe_fds.iter().map(|(p, fds)| (*p, fds.as_slice()));
    let probe_fds = labelled
        .chain(
            (!counters.is_empty())
                .then_some((Part::Probe(OptionalProbe::HwCounters), counters.as_slice())),
        )
        .chain((!iter_link.is_empty()).then_some((Part::IterLink, iter_link.as_slice())))
        .chain((!exit_prog.is_empty()).then_some((Part::ExitProg, exit_prog.as_slice())))
        .map(|(probe, theirs)| {
            let positions = theirs
                .iter()
                .filter_map(|fd| fds.iter().position(|sent| sent == fd))
                .collect();
            (probe, positions)
        })
        .collect();
    send_reply(
        sock,
        &Reply::Loaded {
            maps: names,
            fds: fds.len(),
            probes: loaded.probes.clone(),
            notes: loaded.notes.clone(),
            probe_fds,
        },
    )
}

/// Every kind of map holds its descriptor the same way; the match is exhaustive so that a
/// kind aya adds is not silently left behind.
fn map_fd(map: &Map) -> RawFd {
    let data: &MapData = match map {
        Map::Array(d)
        | Map::ArrayOfMaps(d)
        | Map::BloomFilter(d)
        | Map::CgroupArray(d)
        | Map::CgroupStorage(d)
        | Map::CgrpStorage(d)
        | Map::CpuMap(d)
        | Map::DevMap(d)
        | Map::DevMapHash(d)
        | Map::HashMap(d)
        | Map::HashOfMaps(d)
        | Map::InodeStorage(d)
        | Map::LpmTrie(d)
        | Map::LruHashMap(d)
        | Map::PerCpuArray(d)
        | Map::PerCpuCgroupStorage(d)
        | Map::PerCpuHashMap(d)
        | Map::PerCpuLruHashMap(d)
        | Map::PerfEventArray(d)
        | Map::ProgramArray(d)
        | Map::Queue(d)
        | Map::ReusePortSockArray(d)
        | Map::RingBuf(d)
        | Map::SockHash(d)
        | Map::SockMap(d)
        | Map::SkStorage(d)
        | Map::Stack(d)
        | Map::StackTraceMap(d)
        | Map::Unsupported(d)
        | Map::XskMap(d) => d,
    };
    data.fd().as_fd().as_raw_fd()
}

fn send_reply(sock: BorrowedFd<'_>, reply: &Reply) -> std::io::Result<()> {
    let bytes = serde_json::to_vec(reply).map_err(std::io::Error::other)?;
    fdpass::send(sock, &bytes, &[])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fds(n: usize) -> Vec<OwnedFd> {
        (0..n)
            .map(|_| OwnedFd::from(std::fs::File::open("/dev/null").unwrap()))
            .collect()
    }

    fn raw(fds: &[OwnedFd]) -> Vec<RawFd> {
        fds.iter().map(AsRawFd::as_raw_fd).collect()
    }

    #[test]
    fn labelled_descriptors_are_split_off_by_position() {
        // Positions 0 and 1 were maps; the rest start at 2.
        let rest = fds(4);
        let all = raw(&rest);
        let labels = vec![(Part::Probe(OptionalProbe::Softirq), vec![3, 5])];
        let (kept, probes) = take_labelled(rest, 2, labels).unwrap();
        assert_eq!(raw(&kept), vec![all[0], all[2]]);
        assert_eq!(probes.len(), 1);
        assert_eq!(probes[0].0, Part::Probe(OptionalProbe::Softirq));
        assert_eq!(raw(&probes[0].1), vec![all[1], all[3]]);
    }

    #[test]
    fn a_bad_label_is_an_error() {
        for (positions, why) in [
            (vec![1], "a map's position"),
            (vec![6], "past the end"),
            (vec![3, 3], "twice"),
        ] {
            let labels = vec![(Part::Probe(OptionalProbe::PageCache), positions)];
            assert!(take_labelled(fds(4), 2, labels).is_err(), "{why}");
        }
    }
}

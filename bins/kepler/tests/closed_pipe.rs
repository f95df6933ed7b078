//! `kepler --exporter.stdout | head -1`: once the reader is gone the agent stops cleanly (exit
//! status 0, no panic) instead of writing every tick to a pipe nobody reads. `kepler probe |
//! true` is covered by `hostile_meters::probe_into_a_closed_pipe_exits_cleanly`.

mod common;

use std::io::{BufRead, BufReader, Read};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{free_port, sysfs_dir};

#[test]
fn the_stdout_exporter_into_a_closed_pipe_stops_the_agent() {
    let sysfs = sysfs_dir();
    let (reader, writer) = std::io::pipe().unwrap();
    let mut command = Command::new(env!("CARGO_BIN_EXE_kepler"));
    command
        .arg("--exporter.stdout")
        .arg(format!("--web.listen-address=127.0.0.1:{}", free_port()))
        .args(["--host.sysfs", sysfs.path().to_str().unwrap()])
        .args(["--monitor.interval", "200ms"])
        .env("RUST_LOG", "info")
        .stdout(Stdio::from(writer))
        .stderr(Stdio::piped());
    let mut child = command.spawn().expect("start kepler");
    // Our copy of the write end goes with the command, so the agent's is the last one.
    drop(command);

    // What `head -1` does: read a line, then exit.
    let mut reader = BufReader::new(reader);
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    assert!(first.starts_with("tick "), "{first:?}");
    drop(reader);

    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the agent still runs 60 s after its reader went away");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status:?}: {stderr}");
    assert!(
        stderr.contains("stopping the agent") && stderr.contains("the reader went away"),
        "{stderr}"
    );
}

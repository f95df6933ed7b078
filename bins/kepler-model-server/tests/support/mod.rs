//! Helpers for the `serve` tests: the public data, a writable copy of the published model
//! DB, and the real binary serving it on a loopback port.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

/// The public data: `$KEPLER_DATA_DIR` when set, else the repository's `data/` when it holds
/// the model DB, else `../shared/data` beside the repository.
pub fn data_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("KEPLER_DATA_DIR") {
        return PathBuf::from(dir);
    }
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let in_repo = repo.join("data");
    if in_repo.join("kepler-model-db").is_dir() {
        in_repo
    } else {
        repo.join("../shared/data")
    }
}

/// A published pipeline directory (`ec2-0.7.11`, `specpower-0.7.11`).
pub fn pipeline(name: &str) -> PathBuf {
    data_root().join("kepler-model-db/models/v0.7").join(name)
}

/// Copies `from` into `to` recursively, leaving the copies writable (the shared data is
/// read-only, and tests change their copy).
pub fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("create directory");
    for entry in std::fs::read_dir(from).expect("read data directory") {
        let entry = entry.expect("directory entry");
        let target = to.join(entry.file_name());
        if entry.file_type().expect("file type").is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).expect("copy file");
            let mut perms = std::fs::metadata(&target).expect("metadata").permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&target, perms).expect("make writable");
        }
    }
}

/// A temporary model directory holding both published pipelines.
pub fn model_db() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for p in ["ec2-0.7.11", "specpower-0.7.11"] {
        copy_tree(&pipeline(p), &dir.path().join(p));
    }
    dir
}

/// The running server, killed when dropped.
pub struct Serving {
    child: Child,
    /// `http://127.0.0.1:<port>` or `https://...`.
    pub base: String,
}

impl Drop for Serving {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Serving {
    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

/// Starts `kepler-model-server serve` on `127.0.0.1:0` and waits for the address it prints.
pub fn serve(model_dir: &Path, extra: &[&str]) -> Serving {
    let mut child = Command::new(env!("CARGO_BIN_EXE_kepler-model-server"))
        .arg("serve")
        .arg("--model-dir")
        .arg(model_dir)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("RUST_LOG", "error")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start kepler-model-server serve");
    let stdout = child.stdout.take().expect("stdout");
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut line = String::new();
        let _ = BufReader::new(stdout).read_line(&mut line);
        let _ = tx.send(line);
    });
    // Indexing the copy takes well under a second; the limit only stops a hung test.
    let line = rx
        .recv_timeout(Duration::from_secs(120))
        .expect("the server prints its address");
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {line:?}"))
        .to_string();
    Serving { child, base }
}

pub fn client() -> reqwest::blocking::Client {
    reqwest::blocking::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .expect("client")
}

pub mod powercap;
pub mod prometheus;

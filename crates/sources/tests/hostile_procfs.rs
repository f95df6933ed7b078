//! A procfs tree planted by someone hostile: a FIFO where `stat` should be (a blocking open
//! would hang the sampler forever), endless `cmdline` and `stat` files. The scan finishes
//! within a deadline, skips or truncates what it cannot trust, and keeps the other processes.

mod common;

use std::ffi::CString;
use std::os::unix::fs::symlink;
use std::path::Path;
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use common::{write_node, write_process, FakeProcess};
use kepler_core::{NoWorkloads, UsageSnapshot, UsageSource};
use kepler_sources::bounded::limits;
use kepler_sources::ProcfsSource;

fn mkfifo(path: &Path) {
    let c = CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path only.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

/// One scan on another thread; the test fails (rather than hangs) past the deadline.
fn scan_within(root: &Path, deadline: Duration) -> UsageSnapshot {
    let root = root.to_path_buf();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut source = ProcfsSource::new(root, Arc::new(NoWorkloads)).unwrap();
        let _ = tx.send(source.snapshot().unwrap());
    });
    rx.recv_timeout(deadline)
        .expect("the scan blocked on a hostile file")
}

#[test]
fn fifos_and_endless_files_neither_block_nor_grow() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    write_node(root, [100, 10, 50, 1000, 20, 3, 4, 5, 60, 6], "4321.50");
    for pid in [10, 11, 12, 13] {
        write_process(
            root,
            &FakeProcess {
                pid,
                utime: 5,
                ..FakeProcess::default()
            },
        );
    }
    // 11: stat is a FIFO nobody writes to.
    std::fs::remove_file(root.join("11/stat")).unwrap();
    mkfifo(&root.join("11/stat"));
    // 12: cmdline never ends.
    std::fs::remove_file(root.join("12/cmdline")).unwrap();
    symlink("/dev/zero", root.join("12/cmdline")).unwrap();
    // 13: stat never ends.
    std::fs::remove_file(root.join("13/stat")).unwrap();
    symlink("/dev/zero", root.join("13/stat")).unwrap();

    let snap = scan_within(root, Duration::from_secs(60));
    let pids: Vec<u32> = snap.processes.iter().map(|p| p.key.pid).collect();
    assert!(pids.contains(&10), "{pids:?}");
    assert!(!pids.contains(&11) && !pids.contains(&13), "{pids:?}");
    let endless = snap.processes.iter().find(|p| p.key.pid == 12).unwrap();
    let kept: usize = endless.info.cmdline.iter().map(|a| a.len() + 1).sum();
    assert!(kept <= limits::CMDLINE, "{kept} bytes of cmdline kept");
}

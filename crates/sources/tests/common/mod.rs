//! Builds fake procfs trees in temporary directories (shared by tests and the bench).
#![allow(dead_code)]

use std::fs;
use std::path::Path;

pub struct FakeProcess<'a> {
    pub pid: u32,
    pub comm: &'a str,
    pub flags: u64,
    pub utime: u64,
    pub stime: u64,
    pub start_ticks: u64,
    pub exe: Option<&'a str>,
    pub cmdline: &'a [&'a str],
    pub cgroup: &'a str,
}

impl Default for FakeProcess<'_> {
    fn default() -> Self {
        FakeProcess {
            pid: 1,
            comm: "init",
            flags: 0x0040_0100,
            utime: 0,
            stime: 0,
            start_ticks: 1,
            exe: Some("/sbin/init"),
            cmdline: &["/sbin/init"],
            cgroup: "0::/init.scope\n",
        }
    }
}

pub fn stat_line(p: &FakeProcess<'_>) -> String {
    format!(
        "{} ({}) S 1 {} {} 0 -1 {} 10 0 0 0 {} {} 0 0 20 0 1 0 {} 1000000 100 18446744073709551615 \
         1 1 0 0 0 0 0 0 0 0 0 0 17 0 0 0 0 0 0\n",
        p.pid, p.comm, p.pid, p.pid, p.flags, p.utime, p.stime, p.start_ticks
    )
}

/// Writes `stat` (cpu ticks user..guest_nice) and `uptime` at the root.
pub fn write_node(root: &Path, cpu: [u64; 10], uptime: &str) {
    let fields: Vec<String> = cpu.iter().map(u64::to_string).collect();
    let stat = format!(
        "cpu  {}\ncpu0 {}\nintr 1 2 3\nctxt 99\nbtime 1700000000\n",
        fields.join(" "),
        fields.join(" ")
    );
    fs::write(root.join("stat"), stat).unwrap();
    fs::write(root.join("uptime"), format!("{uptime} 0.00\n")).unwrap();
}

pub fn write_process(root: &Path, p: &FakeProcess<'_>) {
    let dir = root.join(p.pid.to_string());
    fs::create_dir_all(&dir).unwrap();
    fs::write(dir.join("stat"), stat_line(p)).unwrap();
    let mut cmdline = Vec::new();
    for arg in p.cmdline {
        cmdline.extend_from_slice(arg.as_bytes());
        cmdline.push(0);
    }
    fs::write(dir.join("cmdline"), cmdline).unwrap();
    fs::write(dir.join("cgroup"), p.cgroup).unwrap();
    let exe = dir.join("exe");
    let _ = fs::remove_file(&exe);
    if let Some(target) = p.exe {
        std::os::unix::fs::symlink(target, exe).unwrap();
    }
}

/// A tree with `count` ordinary processes in containers, pids 1000.., and a busy node.
pub fn write_many(root: &Path, count: u32) {
    write_node(root, [5000, 0, 2000, 90000, 100, 0, 50, 0, 0, 0], "1000.00");
    for i in 0..count {
        let cgroup = format!(
            "0::/kubepods.slice/kubepods-burstable.slice/kubepods-burstable-pod{:08x}_1111_2222_3333_444455556666.slice/cri-containerd-{:064x}.scope\n",
            i / 4,
            i
        );
        write_process(
            root,
            &FakeProcess {
                pid: 1000 + i,
                comm: "worker",
                utime: u64::from(i),
                stime: 1,
                start_ticks: 100 + u64::from(i),
                exe: Some("/usr/bin/worker"),
                cmdline: &["/usr/bin/worker", "--serve"],
                cgroup: &cgroup,
                ..FakeProcess::default()
            },
        );
    }
}

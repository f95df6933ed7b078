//! Container names without Kubernetes, as upstream Kepler finds them: the process environment
//! (`HOSTNAME` or `CONTAINER_NAME`, whichever comes first), else `--name` on the command line
//! (or a containerd shim's fourth argument). Kubernetes names outrank these in the catalogue.

use std::io::Read;
use std::path::Path;

/// At most this much of `/proc/<pid>/environ` is read: the variables sit near the start and a
/// process may carry megabytes of environment.
pub const ENVIRON_LIMIT: u64 = 64 * 1024;

/// The name the environment (`KEY=value\0…`) gives, if any.
pub fn container_name_from_environ(environ: &[u8]) -> Option<String> {
    environ
        .split(|&b| b == 0)
        .filter_map(|var| {
            let text = std::str::from_utf8(var).ok()?;
            let (key, value) = text.split_once('=')?;
            matches!(key, "HOSTNAME" | "CONTAINER_NAME").then_some(value)
        })
        .next()
        .filter(|v| !v.is_empty())
        .map(str::to_string)
}

/// The name a container runtime's command line gives (`--name x`, `--name=x`).
pub fn container_name_from_cmdline(cmdline: &[String]) -> Option<String> {
    if cmdline.len() < 2 {
        return None;
    }
    let exe = cmdline[0].rsplit('/').next().unwrap_or("");
    for (i, arg) in cmdline.iter().enumerate().skip(1) {
        if let Some(name) = arg.strip_prefix("--name=") {
            return Some(name.to_string()).filter(|n| !n.is_empty());
        }
        if arg == "--name" {
            return cmdline.get(i + 1).filter(|n| !n.is_empty()).cloned();
        }
        // Old shims were given the container name as a positional argument.
        if i == 3 && matches!(exe, "docker-containerd-shim" | "containerd-shim") {
            return Some(arg.clone()).filter(|n| !n.is_empty());
        }
    }
    None
}

/// Reads the first [`ENVIRON_LIMIT`] bytes of `<procfs>/<pid>/environ`; `None` when the process
/// is gone or not readable (another user's, without CAP_SYS_PTRACE).
pub fn read_environ(procfs: &Path, pid: u32) -> Option<Vec<u8>> {
    let file = std::fs::File::open(procfs.join(pid.to_string()).join("environ")).ok()?;
    let mut bytes = Vec::new();
    file.take(ENVIRON_LIMIT).read_to_end(&mut bytes).ok()?;
    Some(bytes)
}

/// The parent pid `<procfs>/<pid>/stat` names; `None` when the process is gone or the line
/// is not a stat line.
pub fn read_ppid(procfs: &Path, pid: u32) -> Option<u32> {
    let mut stat = String::new();
    std::fs::File::open(procfs.join(pid.to_string()).join("stat"))
        .ok()?
        // One stat line; the comm before the ppid is at most 64 bytes.
        .take(4096)
        .read_to_string(&mut stat)
        .ok()?;
    // The comm may hold spaces and parentheses: the fields resume after the last ')'.
    let rest = stat.get(stat.rfind(')')? + 1..)?;
    rest.split_ascii_whitespace().nth(1)?.parse().ok()
}

/// Whether `<procfs>/<pid>/cgroup` places the process in a cgroup whose path holds `id`.
pub fn in_container(procfs: &Path, pid: u32, id: &str) -> bool {
    let mut cgroups = String::new();
    std::fs::File::open(procfs.join(pid.to_string()).join("cgroup"))
        .and_then(|f| f.take(64 * 1024).read_to_string(&mut cgroups))
        .is_ok()
        && cgroups.contains(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Vec<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn environment_names_come_first_found() {
        assert_eq!(
            container_name_from_environ(b"PATH=/bin\0HOSTNAME=web-1\0CONTAINER_NAME=x\0"),
            Some("web-1".into())
        );
        assert_eq!(
            container_name_from_environ(b"CONTAINER_NAME=db\0HOSTNAME=h\0"),
            Some("db".into())
        );
        assert_eq!(
            container_name_from_environ(b"PATH=/bin\0MYHOSTNAME=x\0"),
            None
        );
        assert_eq!(container_name_from_environ(b"HOSTNAME=\0"), None);
        assert_eq!(
            container_name_from_environ(b"\xff\xfe=1\0HOSTNAME=ok"),
            Some("ok".into())
        );
    }

    #[test]
    fn command_line_names() {
        assert_eq!(
            container_name_from_cmdline(&args(&["podman", "run", "--name", "api", "img"])),
            Some("api".into())
        );
        assert_eq!(
            container_name_from_cmdline(&args(&["docker", "run", "--name=api"])),
            Some("api".into())
        );
        assert_eq!(
            container_name_from_cmdline(&args(&["/usr/bin/containerd-shim", "a", "b", "c1"])),
            Some("c1".into())
        );
        assert_eq!(
            container_name_from_cmdline(&args(&["nginx", "-g", "daemon off;"])),
            None
        );
        assert_eq!(container_name_from_cmdline(&args(&["x", "--name"])), None);
        assert_eq!(container_name_from_cmdline(&args(&["--name=x"])), None);
    }

    #[test]
    fn environ_reads_are_bounded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("42")).unwrap();
        let mut big = b"HOSTNAME=h\0".to_vec();
        big.resize(ENVIRON_LIMIT as usize * 3, b'x');
        std::fs::write(dir.path().join("42/environ"), &big).unwrap();
        let read = read_environ(dir.path(), 42).unwrap();
        assert_eq!(read.len() as u64, ENVIRON_LIMIT);
        assert_eq!(container_name_from_environ(&read), Some("h".into()));
        assert!(read_environ(dir.path(), 43).is_none());
    }
}

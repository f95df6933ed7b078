//! Where the cgroup hierarchies are mounted, from a `mountinfo` file.

use std::path::PathBuf;

/// The first cgroup2 mount point listed in a `mountinfo` file.
pub fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        if right.split_ascii_whitespace().next()? != "cgroup2" {
            return None;
        }
        left.split_ascii_whitespace()
            .nth(4)
            .map(unescape_octal)
            .map(PathBuf::from)
    })
}

/// The mount point of the cgroup-v1 hierarchy that carries `controller` (hybrid hosts).
pub fn cgroup_v1_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
    mountinfo.lines().find_map(|line| {
        let (left, right) = line.split_once(" - ")?;
        let mut right = right.split_ascii_whitespace();
        if right.next()? != "cgroup" {
            return None;
        }
        let options = right.nth(1)?;
        if !options.split(',').any(|o| o == controller) {
            return None;
        }
        left.split_ascii_whitespace()
            .nth(4)
            .map(unescape_octal)
            .map(PathBuf::from)
    })
}

/// mountinfo escapes space, tab, newline and backslash as `\ooo`.
fn unescape_octal(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let octal = bytes.get(i + 1..i + 4).and_then(|d| {
            let d = std::str::from_utf8(d).ok()?;
            u8::from_str_radix(d, 8).ok()
        });
        match (bytes.get(i), octal) {
            (Some(b'\\'), Some(c)) => {
                out.push(c);
                i += 4;
            }
            (Some(&b), _) => {
                out.push(b);
                i += 1;
            }
            (None, _) => break,
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_the_cgroup2_mount() {
        let mi = "24 30 0:21 / /sys/fs/cgroup rw - tmpfs tmpfs rw\n\
                  35 24 0:30 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw\n";
        assert_eq!(
            cgroup2_mount(mi),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        let escaped = "35 24 0:30 / /mnt/a\\040b rw - cgroup2 none rw\n";
        assert_eq!(cgroup2_mount(escaped), Some(PathBuf::from("/mnt/a b")));
        assert_eq!(cgroup2_mount("1 2 0:1 / / rw - ext4 /dev/x rw\n"), None);
        let v1 = "36 24 0:31 / /sys/fs/cgroup/cpuacct rw - cgroup cgroup rw,cpuacct\n\
                  37 24 0:32 / /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n";
        assert_eq!(
            cgroup_v1_mount(v1, "cpu"),
            Some(PathBuf::from("/sys/fs/cgroup/cpu"))
        );
        assert_eq!(cgroup_v1_mount(v1, "memory"), None);
        assert_eq!(cgroup_v1_mount(mi, "cpu"), None);
    }
}

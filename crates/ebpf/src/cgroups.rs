//! Maps a cgroup id (what BPF records) to the cgroup's path, so that a process that exited
//! before /proc could be read still reaches its container. The id of a cgroup-v2 cgroup is the
//! inode number of its directory in the cgroup2 mount, so the resolver walks that mount and
//! remembers what it saw; it walks again at most once per snapshot, when an id is unknown.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Deeper trees than this are not walked (Kubernetes uses about 5 levels).
const MAX_DEPTH: usize = 32;
/// Paths kept for removed cgroups too (exit records arrive after a container is gone); the
/// cache is dropped and rebuilt when it grows past this.
const MAX_CACHED: usize = 1 << 16;

/// The first cgroup2 mount point listed in a `mountinfo` file.
pub(crate) fn cgroup2_mount(mountinfo: &str) -> Option<PathBuf> {
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
pub(crate) fn cgroup_v1_mount(mountinfo: &str, controller: &str) -> Option<PathBuf> {
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

pub(crate) struct CgroupResolver {
    root: Option<PathBuf>,
    paths: HashMap<u64, Arc<str>>,
    walked_this_snapshot: bool,
}

impl CgroupResolver {
    /// `root` is the cgroup2 mount; `None` disables resolution (every id stays unknown).
    pub(crate) fn new(root: Option<PathBuf>) -> Self {
        CgroupResolver {
            root,
            paths: HashMap::new(),
            walked_this_snapshot: false,
        }
    }

    /// Allows one more walk: call at the start of each snapshot.
    pub(crate) fn begin_snapshot(&mut self) {
        self.walked_this_snapshot = false;
    }

    /// The path of cgroup `id` relative to the mount (`/a/b`, `/` for the root).
    pub(crate) fn resolve(&mut self, id: u64) -> Option<Arc<str>> {
        if let Some(p) = self.paths.get(&id) {
            return Some(p.clone());
        }
        if self.walked_this_snapshot {
            return None;
        }
        self.walked_this_snapshot = true;
        let root = self.root.clone()?;
        if self.paths.len() > MAX_CACHED {
            self.paths.clear();
        }
        let before = self.paths.len();
        walk(&root, &root, 0, &mut self.paths);
        tracing::debug!(
            root = %root.display(),
            new = self.paths.len().saturating_sub(before),
            "walked the cgroup2 tree"
        );
        self.paths.get(&id).cloned()
    }
}

fn walk(root: &Path, dir: &Path, depth: usize, out: &mut HashMap<u64, Arc<str>>) {
    let Ok(meta) = std::fs::metadata(dir) else {
        return;
    };
    let rel = dir.strip_prefix(root).unwrap_or(dir);
    let path = format!("/{}", rel.to_string_lossy());
    out.insert(meta.ino(), Arc::from(path.as_str()));
    if depth >= MAX_DEPTH {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        // Only directories are cgroups; file_type does not follow links, so no cycles.
        if entry.file_type().is_ok_and(|t| t.is_dir()) {
            walk(root, &entry.path(), depth + 1, out);
        }
    }
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

    #[test]
    fn resolves_directory_inodes_to_paths_once_per_snapshot() {
        let tmp = tempfile::tempdir().unwrap();
        let deep = tmp.path().join("kubepods").join("abc");
        std::fs::create_dir_all(&deep).unwrap();
        let ino = std::fs::metadata(&deep).unwrap().ino();
        let mut r = CgroupResolver::new(Some(tmp.path().to_path_buf()));
        assert_eq!(r.resolve(ino).as_deref(), Some("/kubepods/abc"));
        let root_ino = std::fs::metadata(tmp.path()).unwrap().ino();
        assert_eq!(r.resolve(root_ino).as_deref(), Some("/"));

        // A cgroup created later is found only after the next snapshot allows a new walk.
        let late = tmp.path().join("late");
        std::fs::create_dir(&late).unwrap();
        let late_ino = std::fs::metadata(&late).unwrap().ino();
        assert_eq!(r.resolve(late_ino), None);
        r.begin_snapshot();
        assert_eq!(r.resolve(late_ino).as_deref(), Some("/late"));

        // Removed directories stay resolvable.
        std::fs::remove_dir(&late).unwrap();
        r.begin_snapshot();
        assert_eq!(r.resolve(late_ino).as_deref(), Some("/late"));
        assert_eq!(CgroupResolver::new(None).resolve(1), None);
    }
}

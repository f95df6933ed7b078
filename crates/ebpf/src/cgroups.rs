//! Maps a cgroup id (what BPF records) to the cgroup's path, so that a process that exited
//! before /proc could be read still reaches its container. The id of a cgroup-v2 cgroup is the
//! inode number of its directory in the cgroup2 mount, so the resolver walks that mount and
//! remembers what it saw; it walks again at most once per snapshot, when an id is unknown.

use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

pub(crate) use kepler_sources::cgroups::{cgroup2_mount, cgroup_v1_mount};

/// Deeper trees than this are not walked (Kubernetes uses about 5 levels).
const MAX_DEPTH: usize = 32;
/// Paths kept for removed cgroups too (exit records arrive after a container is gone); the
/// cache is dropped and rebuilt when it grows past this.
const MAX_CACHED: usize = 1 << 16;

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

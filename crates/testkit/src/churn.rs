//! A cgroup2 cgroup with a spawner in it that, when told, starts short-lived CPU-burning
//! children one after another: the processes a scan between snapshots never sees. The
//! cgroup's own `cpu.stat` is the truth of what they all used (root only). Also [`Reaped`],
//! the guard of the other processes such tests start.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::time::Duration;

/// The spawner's script: on each line read, `$1` children each counting to `$2` in the shell
/// (a few ms of CPU each), one after another; then it says `done` and waits for the next line.
const SPAWNER: &str = r#"
while read -r n count; do
  i=0
  while [ "$i" -lt "$n" ]; do
    sh -c 'j=0; while [ "$j" -lt "$1" ]; do j=$((j+1)); done' burner "$count"
    i=$((i+1))
  done
  echo done
done
"#;

/// A cgroup of its own in the cgroup2 hierarchy, named `<name>` at its root, holding a
/// spawner; removed (its processes killed) when dropped.
pub struct ChurnCgroup {
    pub dir: PathBuf,
    /// Its path within the hierarchy (`/<name>`).
    pub path: String,
    spawner: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl ChurnCgroup {
    /// The cgroup2 mount point, where the host has one.
    pub fn unified_root() -> Option<PathBuf> {
        ["/sys/fs/cgroup/unified", "/sys/fs/cgroup"]
            .into_iter()
            .map(PathBuf::from)
            // Only a cgroup2 root has `cgroup.controllers`.
            .find(|base| base.join("cgroup.controllers").exists())
    }

    /// Makes the cgroup and moves a new spawner into it; `None` where that cannot be done
    /// (no cgroup2 mount, not root).
    pub fn create(name: &str) -> Option<ChurnCgroup> {
        let dir = Self::unified_root()?.join(name);
        std::fs::create_dir_all(&dir).ok()?;
        let mut spawner = Command::new("sh")
            .args(["-c", SPAWNER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .ok()?;
        let moved = std::fs::write(dir.join("cgroup.procs"), spawner.id().to_string());
        let (Some(input), Some(output)) = (spawner.stdin.take(), spawner.stdout.take()) else {
            let _ = spawner.kill();
            return None;
        };
        let cgroup = ChurnCgroup {
            path: format!("/{name}"),
            dir,
            spawner,
            input,
            output: BufReader::new(output),
        };
        moved.ok()?;
        Some(cgroup)
    }

    /// A cgroup named after `test` and this process, where the host lets one be made (root,
    /// cgroup2); else `None`, the test skipped with the reason (see [`crate::tools::skip`]).
    pub fn for_test(test: &str) -> Option<ChurnCgroup> {
        // SAFETY: geteuid has no preconditions and cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            crate::tools::skip(&format!("SKIP {test}: needs root"));
            return None;
        }
        let cgroup = Self::create(&format!("kepler-{test}-{}", std::process::id()));
        if cgroup.is_none() {
            crate::tools::skip(&format!("SKIP {test}: no cgroup2 cgroup could be made"));
        }
        cgroup
    }

    /// Moves process `pid` into the cgroup.
    pub fn adopt(&self, pid: u32) {
        std::fs::write(self.dir.join("cgroup.procs"), pid.to_string())
            .unwrap_or_else(|e| panic!("moving {pid} into {}: {e}", self.dir.display()));
    }

    /// The spawner's pid.
    pub fn spawner(&self) -> u32 {
        self.spawner.id()
    }

    /// Runs `children` burners of `count` shell iterations each, one after another, and
    /// returns once the last has ended.
    pub fn churn(&mut self, children: u32, count: u32) {
        writeln!(self.input, "{children} {count}").unwrap_or_else(|e| panic!("spawner: {e}"));
        let mut line = String::new();
        self.output
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("spawner: {e}"));
        assert_eq!(line.trim(), "done", "spawner ended");
    }

    /// CPU time used by everything that ran in the cgroup so far (`usage_usec`).
    pub fn usage(&self) -> Duration {
        usage_of(&self.dir).unwrap_or_else(|| panic!("no cpu.stat in {}", self.dir.display()))
    }
}

/// `usage_usec` of a cgroup2 cgroup directory.
pub fn usage_of(dir: &Path) -> Option<Duration> {
    let stat = std::fs::read_to_string(dir.join("cpu.stat")).ok()?;
    stat.lines()
        .find_map(|l| l.strip_prefix("usage_usec "))
        .and_then(|v| v.trim().parse().ok())
        .map(Duration::from_micros)
}

/// A child process killed and reaped when dropped, even when an assertion fails.
pub struct Reaped(pub Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl Drop for ChurnCgroup {
    fn drop(&mut self) {
        let _ = self.spawner.kill();
        let _ = self.spawner.wait();
        let _ = std::fs::write(self.dir.join("cgroup.kill"), "1");
        remove_cgroup(&self.dir);
    }
}

/// Removes cgroup directory `dir` once its last task is gone, trying for up to 5 s (a killed
/// task leaves its cgroup a moment after it is reaped); left behind after that.
pub fn remove_cgroup(dir: &Path) {
    for _ in 0..50 {
        if std::fs::remove_dir(dir).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

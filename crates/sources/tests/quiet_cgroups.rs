//! The procfs source against this host (root): the processes of a cgroup in which nothing ran
//! since the scan before are taken as they were, unread, and read again as soon as anything in
//! it runs, ends included.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, ChildStdout, Command, Stdio};
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{NoWorkloads, UsageSnapshot, UsageSource};
use kepler_sources::ProcfsSource;
use kepler_testkit::churn::{ChurnCgroup, Reaped};

/// A process that burns CPU in itself on each line it reads, and sleeps on its input between.
struct Burner {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
}

impl Burner {
    fn start() -> Burner {
        let mut child = Command::new("sh")
            .args([
                "-c",
                r#"while read -r n; do
                     j=0; while [ "$j" -lt "$n" ]; do j=$((j+1)); done; echo done
                   done"#,
            ])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        let (input, output) = (child.stdin.take().unwrap(), child.stdout.take().unwrap());
        Burner {
            child,
            input,
            output: BufReader::new(output),
        }
    }

    /// Counts to `count` in the shell, and returns once it has and is asleep on its input
    /// again (its runtime stood still for 20 ms).
    fn burn(&mut self, count: u32) {
        writeln!(self.input, "{count}").unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "done");
        settle(self.child.id());
    }
}

impl Drop for Burner {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `pid`'s CPU time in the snapshot.
fn seen(s: &UsageSnapshot, pid: u32) -> Option<Duration> {
    s.processes
        .iter()
        .find(|p| p.key.pid == pid)
        .map(|p| p.cpu_time)
}

/// `pid`'s main thread's runtime (its whole runtime, single-threaded).
fn runtime(pid: u32) -> Duration {
    let schedstat = std::fs::read_to_string(format!("/proc/{pid}/schedstat")).unwrap();
    Duration::from_nanos(
        schedstat
            .split_whitespace()
            .next()
            .unwrap()
            .parse()
            .unwrap(),
    )
}

/// Waits until `pid` is asleep: its runtime stood still for 20 ms.
fn settle(pid: u32) {
    let mut last = runtime(pid);
    for _ in 0..500 {
        std::thread::sleep(Duration::from_millis(20));
        let now = runtime(pid);
        if now == last {
            return;
        }
        last = now;
    }
    panic!("{pid} did not go to sleep");
}

/// Snapshots until one takes at least `count` processes unread (a busy machine may wake the
/// cgroup's processes, or delay their sleep); that snapshot.
fn until_quiet(source: &mut ProcfsSource, count: usize) -> UsageSnapshot {
    for _ in 0..20 {
        let snapshot = source.snapshot().unwrap();
        if source.taken_unread() >= count {
            return snapshot;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    panic!(
        "never {count} processes taken unread: {}",
        source.taken_unread()
    );
}

#[test]
fn a_quiet_cgroup_s_processes_are_taken_unread_until_one_of_them_runs_or_ends() {
    let Some(cgroup) = ChurnCgroup::for_test("procfs-quiet") else {
        return;
    };
    // Beside the spawner (asleep on its input), enough processes for the cgroup to be checked
    // at each scan even when no task ended.
    let mut sleepers: Vec<Reaped> = (0..3)
        .map(|_| Reaped(Command::new("sleep").arg("600").spawn().unwrap()))
        .collect();
    sleepers.iter().for_each(|s| cgroup.adopt(s.0.id()));
    let mut burner = Burner::start();
    cgroup.adopt(burner.child.id());
    let mut ours: Vec<u32> = sleepers.iter().map(|s| s.0.id()).collect();
    ours.extend([cgroup.spawner(), burner.child.id()]);
    // Each asleep before the first scan reads its state.
    ours.iter().for_each(|&pid| settle(pid));

    let mut source = ProcfsSource::new("/proc".into(), Arc::new(NoWorkloads)).unwrap();
    // Listed (the cgroup's baseline after), checked once, then found quiet.
    source.snapshot().unwrap();
    source.snapshot().unwrap();
    let quiet = until_quiet(&mut source, ours.len());
    for &pid in &ours {
        assert!(seen(&quiet, pid).is_some(), "{pid} missing");
    }
    let before = seen(&quiet, burner.child.id()).unwrap();

    // The burner runs: the cgroup's counter moves, and its processes are read again.
    burner.burn(200_000);
    let moved = source.snapshot().unwrap();
    let ran = runtime(burner.child.id());
    let cpu = seen(&moved, burner.child.id()).unwrap();
    eprintln!("burner credited {cpu:?} (from {before:?}); runtime {ran:?}");
    // What the source credits trails the runtime by less than a `stat` rounding.
    assert!(
        cpu <= ran && ran - cpu < Duration::from_millis(10),
        "credited {cpu:?}, runtime {ran:?}"
    );
    assert!(
        cpu > before + Duration::from_millis(20),
        "the burn was not read"
    );

    // Quiet again from the scan after, which reads the burner's `stat` (it ran since the last
    // one: is it asleep?), a credit brought up to that `stat`'s rounding at most; then the
    // burner as last read.
    let settled = seen(&source.snapshot().unwrap(), burner.child.id()).unwrap();
    assert!(settled >= cpu && settled <= ran, "{settled:?}");
    let again = until_quiet(&mut source, ours.len());
    assert_eq!(seen(&again, burner.child.id()), Some(settled));

    // A sleeper killed runs its exit in the cgroup: the next scan reads its processes and finds
    // it gone.
    let killed = sleepers.remove(0);
    let killed_pid = killed.0.id();
    drop(killed);
    let after = source.snapshot().unwrap();
    assert_eq!(
        seen(&after, killed_pid),
        None,
        "an ended sleeper still listed"
    );
    for &pid in ours.iter().filter(|&&p| p != killed_pid) {
        assert!(seen(&after, pid).is_some(), "{pid} missing");
    }
}

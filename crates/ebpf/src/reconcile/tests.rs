//! The reconciliation rules, driven through a fake host: no root, no BPF.

use std::collections::{HashMap, HashSet};

use super::gc::{gc_every, round_robin, GC_BATCH, GC_EVERY, GC_PERIOD};
use super::*;

/// The fake's clock tick (USER_HZ 100), to which start times are floored.
const TICK_NS: u64 = 10_000_000;
const SEC: u64 = 1_000_000_000;

/// A host whose answers each test sets, and which records what it was asked.
#[derive(Default)]
struct Fake {
    /// Processes /proc shows.
    procs: HashSet<ProcessKey>,
    /// The process map as the kernel holds it when re-read just before a delete.
    map: HashMap<u32, TaskTotals>,
    /// tgids whose entry the kernel hands to the exits ring between the re-read and the
    /// delete, so the delete fails.
    kernel_wins: HashSet<u32>,
    /// tgids checked against /proc, in order.
    checked: Vec<u32>,
    /// tgids whose delete was attempted.
    deletes: Vec<u32>,
    /// Every description asked for, with the exit record's part when there was one.
    described: Vec<(ProcessKey, Option<ExitInfo>)>,
    /// tgids gone from /proc before their live description was read.
    reaped: HashSet<u32>,
    /// tgids whose whole group /proc shows in its exit, where that hides its cgroup.
    ending: HashSet<u32>,
}

impl Keys for Fake {
    fn key(&self, tgid: u32, start_ns: u64) -> ProcessKey {
        ProcessKey {
            pid: tgid,
            start_time: Duration::from_nanos(start_ns / TICK_NS * TICK_NS),
        }
    }
}

impl Host for Fake {
    fn is_alive(&mut self, key: ProcessKey) -> bool {
        self.checked.push(key.pid);
        self.procs.contains(&key)
    }

    fn entry(&mut self, tgid: u32) -> Option<TaskTotals> {
        self.map.get(&tgid).copied()
    }

    fn delete(&mut self, tgid: u32) -> bool {
        self.deletes.push(tgid);
        let removed = self.map.remove(&tgid).is_some();
        removed && !self.kernel_wins.contains(&tgid)
    }

    /// Named after the exit record's comm, or nothing without one, as BPF knows no more.
    fn describe(
        &mut self,
        key: ProcessKey,
        totals: &TaskTotals,
        exit: Option<&ExitInfo>,
    ) -> Arc<ProcessInfo> {
        self.described.push((key, exit.cloned()));
        described(exit.map(ExitInfo::comm).unwrap_or_default(), totals)
    }

    /// A live process is named `p<pid>`, unless reaped or ending.
    fn describe_live(&mut self, key: ProcessKey, totals: &TaskTotals) -> Sighting {
        self.described.push((key, None));
        if self.reaped.contains(&key.pid) {
            Sighting::Gone
        } else if self.ending.contains(&key.pid) {
            Sighting::Ending
        } else {
            Sighting::Described(described(format!("p{}", key.pid), totals))
        }
    }
}

/// The cgroup path names the id, so a test can tell which reading a description came from.
fn described(comm: String, totals: &TaskTotals) -> Arc<ProcessInfo> {
    Arc::new(ProcessInfo {
        comm,
        cgroup_path: format!("/cg/{}", totals.cgroup_id),
        cgroup_id: (totals.cgroup_id != 0).then_some(totals.cgroup_id),
        ..Default::default()
    })
}

impl Fake {
    /// How many descriptions of `key` were asked for.
    fn descriptions(&self, key: ProcessKey) -> usize {
        self.described.iter().filter(|(k, _)| *k == key).count()
    }
}

fn totals(start_ns: u64, cpu_ns: u64) -> TaskTotals {
    TaskTotals {
        start_ns,
        cpu_ns,
        switches: 1,
        ..Default::default()
    }
}

fn record(tgid: u32, start_ns: u64, cpu_ns: u64, comm: &str) -> ExitRecord {
    let mut r = ExitRecord {
        tgid,
        totals: totals(start_ns, cpu_ns),
        ..Default::default()
    };
    let n = comm.len().min(r.comm.len() - 1);
    r.comm[..n].copy_from_slice(&comm.as_bytes()[..n]);
    r
}

fn live(entries: &[(u32, TaskTotals)]) -> Observed {
    Observed {
        live: entries.iter().copied().collect(),
        ..Default::default()
    }
}

fn key(tgid: u32, start_ns: u64) -> ProcessKey {
    Fake::default().key(tgid, start_ns)
}

/// What the step reported for `key`: (cpu ns, exited, comm), one per report.
fn reports(step: &Step, key: ProcessKey) -> Vec<(u64, bool, String)> {
    let mine = step.processes.iter().filter(|p| p.key == key);
    let as_tuple = |p: &ProcessUsage| {
        let ns = u64::try_from(p.cpu_time.as_nanos()).unwrap();
        (ns, p.exited, p.info.comm.clone())
    };
    mine.map(as_tuple).collect()
}

fn exit_info(comm: &str, cpu_cgroup_id: u64) -> ExitInfo {
    let mut info = ExitInfo {
        cpu_cgroup_id,
        ..Default::default()
    };
    let n = comm.len().min(info.comm.len());
    info.comm[..n].copy_from_slice(&comm.as_bytes()[..n]);
    info
}

fn reconciler() -> Reconciler {
    Reconciler::new(Measured::default())
}

#[test]
fn reported_cpu_time_never_decreases() {
    // Readings of one process, each map value plus the running stretch seen by the second
    // read: the third leaves its CPU between the two reads, so its reading misses the
    // stretch that the second one counted while it ran.
    let readings = [100, 250, 200, 240, 300];
    let mut r = Reported::default();
    let reported: Vec<u64> = readings.iter().map(|&ns| r.update(ns)).collect();
    assert_eq!(reported, [100, 250, 250, 250, 300]);
    // The exact total (an exit record) is reported as it is once past the readings.
    assert_eq!(r.update(310), 310);
}

#[test]
fn first_sighting_is_described_once_and_counts_its_running_stretch() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let a = key(7, SEC);
    let mut seen = live(&[(7, totals(SEC, 100))]);
    seen.running.insert((7, SEC), 20);
    // On its CPU since before the program's first switch: no entry yet, the stretch alone.
    seen.running.insert((8, 2 * SEC), 30);
    let step = rec.step(&mut host, &mut seen);
    assert_eq!(reports(&step, a), [(120, false, "p7".into())]);
    assert_eq!(reports(&step, key(8, 2 * SEC)), [(30, false, "p8".into())]);
    assert_eq!(step.processes.len(), 2);

    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 150))]));
    assert_eq!(reports(&step, a), [(150, false, "p7".into())]);
    assert_eq!(host.descriptions(a), 1, "described at first sight only");
    assert_eq!(host.described[0].1, None, "a live process has no exit part");
}

#[test]
fn a_process_moved_to_another_cgroup_is_described_again() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let a = key(7, SEC);
    let in_cgroup = |cgroup_id, cpu_ns| TaskTotals {
        cgroup_id,
        ..totals(SEC, cpu_ns)
    };
    let mut seen = live(&[(7, in_cgroup(5, 100))]);
    seen.running.insert((7, SEC), 50);
    rec.step(&mut host, &mut seen);
    // Cgroup not read this time (0): not a move.
    rec.step(&mut host, &mut live(&[(7, in_cgroup(0, 110))]));
    assert_eq!(host.descriptions(a), 1);
    let step = rec.step(&mut host, &mut live(&[(7, in_cgroup(6, 120))]));
    assert_eq!(host.descriptions(a), 2);
    let p = step.processes.iter().find(|p| p.key == a).unwrap();
    assert_eq!(p.info.cgroup_path, "/cg/6");
    // The new description keeps what was reported (150 with the earlier running stretch).
    assert_eq!(p.cpu_time, Duration::from_nanos(150));
    rec.step(&mut host, &mut live(&[(7, in_cgroup(6, 130))]));
    assert_eq!(host.descriptions(a), 2, "same cgroup: not described again");
}

#[test]
fn a_missed_running_stretch_does_not_take_cpu_time_back() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let a = key(7, SEC);
    let mut first = live(&[(7, totals(SEC, 100))]);
    first.running.insert((7, SEC), 50);
    // The second reading left its CPU after the map read and before the stretch read.
    let readings = [
        first,
        live(&[(7, totals(SEC, 120))]),
        live(&[(7, totals(SEC, 200))]),
    ];
    let mut got = Vec::new();
    for mut seen in readings {
        got.extend(reports(&rec.step(&mut host, &mut seen), a));
    }
    rec.queue_exits(&host, [record(7, SEC, 210, "p7")]);
    got.extend(reports(&rec.step(&mut host, &mut Observed::default()), a));
    let ns: Vec<(u64, bool)> = got.iter().map(|r| (r.0, r.1)).collect();
    assert_eq!(ns, [(150, false), (150, false), (200, false), (210, true)]);
}

#[test]
fn exit_record_and_live_entry_of_one_key_in_one_snapshot_report_once() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let a = key(7, SEC);
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 100))]));
    // The group ended, and a thread still leaving left an entry (and a running stretch)
    // under the same key: its time comes in a later piece, not as a live process.
    rec.queue_exits(&host, [record(7, SEC, 300, "worker")]);
    let mut seen = live(&[(7, totals(SEC, 250))]);
    seen.running.insert((7, SEC), 40);
    let step = rec.step(&mut host, &mut seen);
    assert_eq!(
        reports(&step, a),
        [(300, true, "p7".into())],
        "once, exited, with the description it had while alive"
    );
    assert_eq!(host.descriptions(a), 1);
    // The next snapshot: the leftover entry is still not live, and the late piece's exit
    // record adds to the group's totals.
    rec.queue_exits(&host, [record(7, SEC, 10, "worker")]);
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 10))]));
    assert_eq!(reports(&step, a), [(310, true, "p7".into())]);
}

#[test]
fn exits_are_kept_across_failed_map_reads() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    // Drained before a map read that failed: no step for these.
    assert_eq!(rec.queue_exits(&host, [record(7, SEC, 100, "a")]), 0);
    // The next attempt drains more, among them another piece of the same group.
    let more = [record(8, SEC, 40, "b"), record(7, SEC, 5, "a")];
    assert_eq!(rec.queue_exits(&host, more), 0);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(105, true, "a".into())]);
    assert_eq!(reports(&step, key(8, SEC)), [(40, true, "b".into())]);
    assert_eq!(step.processes.len(), 2);
    let step = rec.step(&mut host, &mut Observed::default());
    assert!(step.processes.is_empty(), "reported once");
}

#[test]
fn pending_exits_are_bounded_and_the_excess_is_counted() {
    let host = Fake::default();
    let mut rec = reconciler();
    let pid = |i: usize| u32::try_from(i).unwrap() + 1;
    let many = (0..MAX_PENDING).map(|i| record(pid(i), SEC, 1, "x"));
    assert_eq!(rec.queue_exits(&host, many), 0);
    // Full: new groups are dropped and counted; a piece of a held group still merges.
    let over = [
        record(pid(MAX_PENDING), SEC, 1, "x"),
        record(pid(0), SEC, 9, "x"),
        record(pid(MAX_PENDING + 1), SEC, 1, "x"),
    ];
    assert_eq!(rec.queue_exits(&host, over), 2);
    assert_eq!(rec.queue_exits(&host, [record(1, 2 * SEC, 1, "y")]), 1);
    assert_eq!(rec.pending_lost(), 3);

    let mut host = host;
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(step.processes.len(), MAX_PENDING);
    assert_eq!(reports(&step, key(pid(0), SEC)), [(10, true, "x".into())]);
    assert!(reports(&step, key(pid(MAX_PENDING), SEC)).is_empty());
    // Room again once a snapshot took them.
    assert_eq!(rec.queue_exits(&host, [record(1, 2 * SEC, 1, "y")]), 0);
    assert_eq!(rec.pending_lost(), 3);
}

/// A reconciler that knows tgid 7 (start 1 s, 100 ns) from one snapshot while it ran, and a
/// host where it is gone from /proc but still in the map: the next snapshot suspects it.
fn idle_and_gone() -> (Reconciler, Fake, TaskTotals) {
    let mut rec = reconciler();
    // A round of one snapshot: the one idle entry is checked at the next.
    rec.set_interval(GC_PERIOD);
    let mut host = Fake::default();
    let t = totals(SEC, 100);
    host.procs.insert(key(7, SEC));
    rec.step(&mut host, &mut live(&[(7, t)]));
    host.procs.clear();
    host.map.insert(7, t);
    host.checked.clear();
    (rec, host, t)
}

#[test]
fn a_gone_entry_is_reported_when_the_delete_wins() {
    let (mut rec, mut host, t) = idle_and_gone();
    // The re-read sees more than the snapshot's read (a last stretch was charged meanwhile):
    // the re-read totals are the ones reported.
    let later = TaskTotals { cpu_ns: 130, ..t };
    host.map.insert(7, later);
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert_eq!(host.checked, [7]);
    assert_eq!(host.deletes, [7]);
    assert_eq!(step.gc_removed, 1);
    assert_eq!(reports(&step, key(7, SEC)), [(130, true, "p7".into())]);
    assert!(host.map.is_empty());
    let step = rec.step(&mut host, &mut Observed::default());
    assert!(step.processes.is_empty(), "reported once");
}

#[test]
fn a_gone_entry_the_kernel_hands_over_first_is_left_to_its_exit_record() {
    // Between the re-read and the delete the kernel moves the entry to the ring.
    let (mut rec, mut host, t) = idle_and_gone();
    host.kernel_wins.insert(7);
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert_eq!(host.deletes, [7]);
    assert_eq!(step.gc_removed, 0);
    assert_eq!(reports(&step, key(7, SEC)), [(100, false, "p7".into())]);
    rec.queue_exits(&host, [record(7, SEC, 120, "p7")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(120, true, "p7".into())]);

    // The kernel moved it before the re-read: no entry, no delete.
    let (mut rec, mut host, t) = idle_and_gone();
    host.map.clear();
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert_eq!(host.checked, [7]);
    assert!(host.deletes.is_empty());
    assert_eq!(reports(&step, key(7, SEC)), [(100, false, "p7".into())]);
}

#[test]
fn a_gone_entry_is_not_collected_when_its_tgid_was_reused_or_it_lives() {
    // The tgid now belongs to a new process (another start time): its entry stays.
    let (mut rec, mut host, t) = idle_and_gone();
    host.map.insert(7, totals(2 * SEC, 1));
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert!(host.deletes.is_empty());
    assert_eq!(step.gc_removed, 0);
    assert_eq!(host.map.get(&7), Some(&totals(2 * SEC, 1)));

    // Still in /proc: idle, not gone.
    let (mut rec, mut host, t) = idle_and_gone();
    host.procs.insert(key(7, SEC));
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert_eq!(host.checked, [7]);
    assert!(host.deletes.is_empty());
    assert_eq!(reports(&step, key(7, SEC)), [(100, false, "p7".into())]);

    // It moved since the previous snapshot: not even a suspect.
    let (mut rec, mut host, _) = idle_and_gone();
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 101))]));
    assert!(host.checked.is_empty());
}

/// A reconciler whose last snapshot reported group 7 ended, with 100 ns and comm "w".
fn just_ended() -> (Reconciler, Fake, ProcessKey) {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let a = key(7, SEC);
    rec.queue_exits(&host, [record(7, SEC, 100, "w")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(100, true, "w".into())]);
    (rec, host, a)
}

#[test]
fn ended_entries_take_late_pieces_until_their_ttl_runs_out() {
    let (mut rec, mut host, a) = just_ended();
    // Within the hold: a leftover live entry of the ended group is not reported as live, and
    // a late piece adds to the totals, which restarts the hold.
    rec.queue_exits(&host, [record(7, SEC, 5, "w")]);
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 3))]));
    assert_eq!(reports(&step, a), [(105, true, "w".into())]);
    assert_eq!(host.descriptions(a), 1);
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 3))]));
    assert!(reports(&step, a).is_empty());
    // The leftover gone, the hold runs out one snapshot later.
    rec.step(&mut host, &mut Observed::default());
    // Expired: a piece now stands alone, as a process not seen before.
    rec.queue_exits(&host, [record(7, SEC, 5, "w")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(5, true, "w".into())]);
    assert_eq!(host.descriptions(a), 2);
}

#[test]
fn a_late_piece_adds_its_counts_to_what_an_ended_group_kept() {
    let mut host = Fake::default();
    let mut rec = Reconciler::new(Measured {
        page_cache: true,
        softirq: true,
        hw_counters: true,
    });
    let a = key(7, SEC);
    let counted = |cpu_ns, cycles| {
        let mut r = record(7, SEC, cpu_ns, "w");
        r.totals.switches = 2;
        r.totals.cycles = cycles;
        r.totals.irq_block = cycles / 10;
        r
    };
    let counts = |step: &Step| {
        let p = step.processes.iter().find(|p| p.key == a).unwrap();
        let c = p.counters.as_deref().unwrap();
        (c.context_switches, c.cpu_cycles, c.irq_block)
    };
    // Kept with its counts, then without any (a piece with only CPU time and switches).
    rec.queue_exits(&host, [counted(100, 1_000)]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(counts(&step), (Some(2), Some(1_000), Some(100)));
    rec.queue_exits(&host, [counted(5, 0)]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(105, true, "w".into())]);
    assert_eq!(counts(&step), (Some(4), Some(1_000), Some(100)));
    rec.queue_exits(&host, [counted(5, 50)]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(110, true, "w".into())]);
    assert_eq!(counts(&step), (Some(6), Some(1_050), Some(105)));
}

#[test]
fn what_an_exit_is_kept_in_is_small() {
    // Thousands of each are held under churn: the exits of an interval, and the ended groups
    // of the last snapshot.
    let pending = std::mem::size_of::<(ProcessKey, (Kept, ExitInfo))>();
    assert!(pending <= 96, "{pending}");
    let ended = std::mem::size_of::<(ProcessKey, Ended)>();
    assert!(ended <= 88, "{ended}");
}

#[test]
fn a_piece_later_than_the_attributions_hold_is_reported_on_its_own() {
    let (mut rec, mut host, a) = just_ended();
    // The next snapshot: still merged.
    rec.queue_exits(&host, [record(7, SEC, 5, "w")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(105, true, "w".into())]);
    // One snapshot without news, then another piece: on its own.
    rec.step(&mut host, &mut Observed::default());
    rec.queue_exits(&host, [record(7, SEC, 3, "w")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(3, true, "w".into())]);
}

/// Back-to-back snapshots (microseconds apart) can outlast the hold while a thread of an
/// ended group is still leaving: its leftover entry is never reported as live (its own small
/// total would read as the group's time going back), and its piece still merges.
#[test]
fn a_lingering_leftover_entry_keeps_its_group_held() {
    let (mut rec, mut host, a) = just_ended();
    for _ in 0..=ENDED_TTL + 3 {
        let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 3))]));
        assert!(reports(&step, a).is_empty());
    }
    rec.queue_exits(&host, [record(7, SEC, 3, "w")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, a), [(103, true, "w".into())]);
}

#[test]
fn a_reused_tgid_is_another_process() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let (old, new) = (key(7, SEC), key(7, 2 * SEC));
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 500))]));
    // The old group's exit record and the new one's entry arrive together.
    rec.queue_exits(&host, [record(7, SEC, 600, "old")]);
    let step = rec.step(&mut host, &mut live(&[(7, totals(2 * SEC, 10))]));
    assert_eq!(reports(&step, old), [(600, true, "p7".into())]);
    assert_eq!(
        reports(&step, new),
        [(10, false, "p7".into())],
        "its own time, not the old process's"
    );
    assert_eq!(host.descriptions(new), 1);
    let step = rec.step(&mut host, &mut live(&[(7, totals(2 * SEC, 20))]));
    assert_eq!(reports(&step, new), [(20, false, "p7".into())]);
    assert!(reports(&step, old).is_empty());
}

#[test]
fn known_processes_missing_from_the_map_are_forgotten() {
    let a = key(7, SEC);
    // Missing for fewer than KNOWN_TTL snapshots: still known, not described again, and its
    // reading (with a running stretch the later read misses) does not go back.
    let mut host = Fake::default();
    let mut rec = reconciler();
    let mut seen = live(&[(7, totals(SEC, 100))]);
    seen.running.insert((7, SEC), 50);
    rec.step(&mut host, &mut seen);
    for _ in 1..KNOWN_TTL {
        rec.step(&mut host, &mut Observed::default());
    }
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 120))]));
    assert_eq!(reports(&step, a), [(150, false, "p7".into())]);
    assert_eq!(host.descriptions(a), 1);

    // Missing for KNOWN_TTL snapshots: forgotten, then met as a new process.
    let mut host = Fake::default();
    let mut rec = reconciler();
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 100))]));
    for _ in 0..KNOWN_TTL {
        rec.step(&mut host, &mut Observed::default());
    }
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 120))]));
    assert_eq!(host.descriptions(a), 2);
}

#[test]
fn round_robin_covers_every_id_in_turn() {
    let ids: Vec<u32> = (1..=10).collect();
    let mut cursor = 0;
    let mut rounds = Vec::new();
    for _ in 0..4 {
        rounds.push(round_robin(&mut ids.clone(), &mut cursor, 3));
    }
    assert_eq!(
        rounds,
        [vec![1, 2, 3], vec![4, 5, 6], vec![7, 8, 9], vec![10, 1, 2]]
    );
    // The set changes between rounds: the walk carries on after the last id checked.
    let mut cursor = 5;
    assert_eq!(round_robin(&mut [9, 2, 5, 7], &mut cursor, 2), [7, 9]);
    assert_eq!(round_robin(&mut [9, 2, 5, 7], &mut cursor, 2), [2, 5]);
    assert_eq!(cursor, 5);
    assert!(round_robin(&mut [], &mut cursor, 3).is_empty());
    assert!(round_robin(&mut [1, 2], &mut cursor, 0).is_empty());
    assert_eq!(cursor, 5);
}

/// Steps with `n` processes (tgids 1..=n) that all live in /proc and never move.
fn idle_alive(n: u32) -> (Reconciler, Fake, Observed) {
    let mut rec = reconciler();
    let mut host = Fake::default();
    let entries: Vec<(u32, TaskTotals)> = (1..=n).map(|tgid| (tgid, totals(SEC, 1))).collect();
    host.procs = entries.iter().map(|(tgid, _)| key(*tgid, SEC)).collect();
    let seen = live(&entries);
    rec.step(&mut host, &mut seen.clone());
    assert!(host.checked.is_empty(), "nothing is idle at first sight");
    (rec, host, seen)
}

#[test]
fn collection_checks_every_idle_entry_once_per_round() {
    const N: u32 = 30;
    let (mut rec, mut host, seen) = idle_alive(N);
    // 30 over 12 snapshots: 2 or 3 a snapshot, 30 in all.
    for _ in 0..GC_EVERY {
        let before = host.checked.len();
        rec.step(&mut host, &mut seen.clone());
        assert!((2..=3).contains(&(host.checked.len() - before)));
    }
    assert_eq!(
        host.checked,
        (1..=N).collect::<Vec<_>>(),
        "each once, in turn"
    );
    assert!(host.deletes.is_empty(), "alive: nothing deleted");
}

/// Fewer idle entries than snapshots in a round: each is still checked once a round, not
/// once every few snapshots.
#[test]
fn a_few_idle_entries_are_checked_once_a_round() {
    const N: u32 = 3;
    let (mut rec, mut host, seen) = idle_alive(N);
    rec.set_interval(Duration::from_secs(1));
    for _ in 0..2 * 60 {
        rec.step(&mut host, &mut seen.clone());
    }
    assert_eq!(
        host.checked,
        [1, 2, 3, 1, 2, 3],
        "each twice in two minutes"
    );
}

/// The round spans about a minute whatever the interval: at 1 s each idle entry is checked
/// once in 60 snapshots, not once in 12.
#[test]
fn collection_round_follows_the_interval() {
    assert_eq!(gc_every(Duration::from_secs(5)), GC_EVERY);
    assert_eq!(gc_every(Duration::from_secs(1)), 60);
    assert_eq!(gc_every(Duration::from_secs(120)), 1);
    assert_eq!(gc_every(Duration::ZERO), 600);
    const N: u32 = 120;
    let (mut rec, mut host, seen) = idle_alive(N);
    rec.set_interval(Duration::from_secs(1));
    for _ in 0..60 {
        let before = host.checked.len();
        rec.step(&mut host, &mut seen.clone());
        assert_eq!(host.checked.len() - before, 2);
    }
    let mut round = host.checked.clone();
    round.sort_unstable();
    assert_eq!(
        round,
        (1..=N).collect::<Vec<_>>(),
        "each once in the minute"
    );
}

#[test]
fn collection_checks_at_most_a_batch_per_snapshot() {
    let n = u32::try_from(GC_BATCH * GC_EVERY * 2).unwrap();
    let (mut rec, mut host, mut seen) = idle_alive(n);
    rec.step(&mut host, &mut seen);
    assert_eq!(host.checked.len(), GC_BATCH);
}

#[test]
fn an_exited_process_keeps_its_live_description_else_takes_its_record() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    // 9 was described alive but without a name (gone from /proc meanwhile).
    host.reaped.insert(9);
    rec.step(
        &mut host,
        &mut live(&[(7, totals(SEC, 1)), (9, totals(SEC, 1))]),
    );
    let ended = [
        // Known from /proc: that description stays (it has the exe and command line).
        record(7, SEC, 2, "bash"),
        // Never seen alive: described with what its exit record adds.
        record(8, SEC, 3, "sleep"),
        // Known without a name: the record's name is better.
        record(9, SEC, 4, "cron"),
    ];
    rec.queue_exits(&host, ended);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(2, true, "p7".into())]);
    assert_eq!(reports(&step, key(8, SEC)), [(3, true, "sleep".into())]);
    assert_eq!(reports(&step, key(9, SEC)), [(4, true, "cron".into())]);
    assert_eq!(host.descriptions(key(7, SEC)), 1);
    let exit = |comm: &str| Some(exit_info(comm, 0));
    assert!(host.described.contains(&(key(8, SEC), exit("sleep"))));
    assert!(host.described.contains(&(key(9, SEC), exit("cron"))));
}

#[test]
fn what_follows_a_command_name_is_not_part_of_it() {
    let host = Fake::default();
    let mut rec = reconciler();
    // The same name over what earlier, longer records left in the ring.
    let mut a = record(7, SEC, 1, "true");
    a.comm[5..].copy_from_slice(b"left-behind");
    let b = record(8, SEC, 1, "true");
    rec.queue_exits(&host, [a, b]);
    let infos: Vec<ExitInfo> = rec.pending.values().map(|(_, e)| e.clone()).collect();
    assert_eq!(infos.len(), 2);
    assert_eq!(infos[0], infos[1]);
    assert_eq!(infos[0].comm(), "true");
    let full = *b"sixteen-bytes-!!";
    assert_eq!(ExitInfo::comm_bytes(full), full);
}

#[test]
fn exit_pieces_add_up() {
    let key = key(7, SEC);
    let piece = |cpu_ns| TaskTotals {
        cpu_ns,
        switches: 1,
        ..Default::default()
    };
    let named = exit_info("worker", 3);
    let mut exits = Exits::default();
    merge_exit(&mut exits, key, piece(10), ExitInfo::default());
    merge_exit(&mut exits, key, piece(5), named.clone());
    merge_exit(&mut exits, key, piece(1), ExitInfo::default());
    let (kept, info) = &exits[&key];
    let t = kept.totals();
    assert_eq!((t.cpu_ns, t.switches), (16, 3));
    assert_eq!(info, &named);
}

#[test]
fn counters_are_reported_only_for_the_loaded_probes() {
    let t = TaskTotals {
        switches: 1,
        page_cache_hits: 2,
        irq_net_rx: 3,
        irq_net_tx: 4,
        irq_block: 5,
        cycles: 6,
        instructions: 7,
        cache_misses: 8,
        ..Default::default()
    };
    // Without a probe nothing would read them: no box at all.
    assert_eq!(Measured::default().counters(&t), None);
    let page_cache = Measured {
        page_cache: true,
        ..Measured::default()
    };
    assert_eq!(
        page_cache.counters(&t).as_deref(),
        Some(&TaskCounters {
            page_cache_hits: Some(2),
            context_switches: Some(1),
            ..Default::default()
        })
    );
    let all = Measured {
        page_cache: true,
        softirq: true,
        hw_counters: true,
    };
    let c = all.counters(&t).expect("probes count");
    let got = [
        c.page_cache_hits,
        c.irq_net_rx,
        c.irq_net_tx,
        c.irq_block,
        c.cpu_cycles,
        c.cpu_instructions,
        c.cache_misses,
    ];
    assert_eq!(got, [2, 3, 4, 5, 6, 7, 8].map(Some));
}

#[test]
fn an_entry_marked_exited_is_collected_at_the_next_snapshot() {
    // The kernel found the exit ring full: the group's entry stays in the map, marked. It is
    // collected at once (not after an idle round, and without asking /proc), reported exited
    // with the totals read in this snapshot, and only once.
    let mut rec = reconciler();
    let mut host = Fake::default();
    let marked = TaskTotals {
        flags: TaskTotals::EXITED,
        cgroup_id: 9,
        ..totals(SEC, 500)
    };
    let later = TaskTotals {
        cpu_ns: 520,
        ..marked
    };
    host.map.insert(7, later);
    // An unmarked entry of a live, never-seen process is left alone.
    host.procs.insert(key(8, SEC));
    let step = rec.step(&mut host, &mut live(&[(7, marked), (8, totals(SEC, 40))]));
    assert!(
        host.checked.is_empty(),
        "no /proc check: {:?}",
        host.checked
    );
    assert_eq!(host.deletes, [7]);
    assert_eq!(step.gc_removed, 1);
    // Never described while alive, so described from what BPF kept (no exit record).
    assert_eq!(reports(&step, key(7, SEC)), [(500, true, String::new())]);
    let of_7: Vec<_> = host
        .described
        .iter()
        .filter(|d| d.0 == key(7, SEC))
        .collect();
    assert_eq!(of_7, [&(key(7, SEC), Some(ExitInfo::default()))]);
    assert_eq!(reports(&step, key(8, SEC)), [(40, false, "p8".into())]);
    let step = rec.step(&mut host, &mut live(&[(8, totals(SEC, 40))]));
    assert!(reports(&step, key(7, SEC)).is_empty(), "reported once");

    // If the kernel hands the marked entry over first (its tgid reused, the ring had room),
    // the delete fails: the entry read is reported as live, and the exit record ends it.
    let mut rec = reconciler();
    let mut host = Fake::default();
    host.map.insert(7, marked);
    host.kernel_wins.insert(7);
    let step = rec.step(&mut host, &mut live(&[(7, marked)]));
    assert_eq!(step.gc_removed, 0);
    assert_eq!(reports(&step, key(7, SEC)), [(500, false, "p7".into())]);
    rec.queue_exits(&host, [record(7, SEC, 510, "")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(510, true, "p7".into())]);
}

#[test]
fn drains_stop_at_half_the_pending_bound() {
    let host = Fake::default();
    let mut rec = reconciler();
    let half = MAX_PENDING as u32 / 2;
    rec.queue_exits(&host, (1..half).map(|pid| record(pid, SEC, 1, "b")));
    assert!(rec.room_for_drains());
    rec.queue_exits(&host, [record(half, SEC, 1, "b")]);
    assert!(!rec.room_for_drains());
}

#[test]
fn a_burst_of_exits_leaves_no_large_tables_behind() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let burst: Vec<ExitRecord> = (1..=20_000).map(|pid| record(pid, SEC, 1, "b")).collect();
    rec.queue_exits(&host, burst);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(step.processes.len(), 20_000);
    for _ in 0..=ENDED_TTL + 1 {
        rec.step(&mut host, &mut Observed::default());
    }
    assert!(
        rec.pending.capacity() < 20_000,
        "{}",
        rec.pending.capacity()
    );
    assert!(rec.ended.capacity() < 20_000, "{}", rec.ended.capacity());
}

#[test]
fn with_the_task_iterator_a_gone_entry_waits_for_its_final_switch() {
    let (mut rec, mut host, t) = idle_and_gone();
    rec.use_iterator();
    // Gone from /proc (reaped) but not through its final switches: not collected.
    let step = rec.step(&mut host, &mut live(&[(7, t)]));
    assert!(host.checked.is_empty(), "checked {:?}", host.checked);
    assert!(host.deletes.is_empty());
    assert_eq!(step.gc_removed, 0);
    assert_eq!(reports(&step, key(7, SEC)), [(100, false, "p7".into())]);
    // Its last thread's final switch hands the group over, with all of its time.
    rec.queue_exits(&host, [record(7, SEC, 180, "seven")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(180, true, "p7".into())]);
}

#[test]
fn with_the_task_iterator_a_process_older_than_its_first_snapshot_is_not_met_late() {
    let mut rec = reconciler();
    let mut host = Fake::default();
    rec.use_iterator();
    rec.iterator_snapshot(Duration::from_secs(10));
    // The first snapshot reads every process's baseline and reports none.
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 100))]));
    assert!(step.processes.is_empty());
    rec.iterator_snapshot(Duration::from_secs(15));
    rec.queue_exits(
        &host,
        [
            // Started before the first snapshot and not in it: its time since its start
            // says nothing about the time since that snapshot.
            record(8, 2 * SEC, 5 * SEC, "old"),
            // Started after it: all of its time is new.
            record(9, 12 * SEC, 300, "young"),
            // In the first snapshot: what it used since.
            record(7, SEC, 150, "seven"),
        ],
    );
    let step = rec.step(&mut host, &mut Observed::default());
    assert!(reports(&step, key(8, 2 * SEC)).is_empty());
    assert_eq!(
        reports(&step, key(9, 12 * SEC)),
        [(300, true, "young".into())]
    );
    assert_eq!(reports(&step, key(7, SEC)), [(50, true, "seven".into())]);
    // Nor a live one met only now (the map was full at the first snapshot).
    let step = rec.step(&mut host, &mut live(&[(10, totals(3 * SEC, 400))]));
    assert!(reports(&step, key(10, 3 * SEC)).is_empty());
    // With sched_switch accounting both are reported: its counts start at load.
    let mut rec = reconciler();
    rec.step(&mut host, &mut live(&[(7, totals(SEC, 100))]));
    rec.queue_exits(&host, [record(8, 2 * SEC, 5 * SEC, "old")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(8, 2 * SEC)).len(), 1);
}

/// With the task iterator a reading counts from the first snapshot, as one of `sched_switch`
/// counts from load: a process is reported once it has run since, and not before.
#[test]
fn with_the_task_iterator_readings_count_from_the_first_snapshot() {
    let mut rec = reconciler();
    let mut host = Fake::default();
    rec.use_iterator();
    rec.iterator_snapshot(Duration::from_secs(10));
    let at = |a: u64, b: u64| live(&[(7, totals(SEC, a)), (8, totals(2 * SEC, b))]);
    assert!(rec.step(&mut host, &mut at(100, 200)).processes.is_empty());
    // 8 ran, 7 did not.
    let step = rec.step(&mut host, &mut at(100, 250));
    assert!(reports(&step, key(7, SEC)).is_empty());
    assert_eq!(reports(&step, key(8, 2 * SEC)), [(50, false, "p8".into())]);
    assert_eq!(
        host.descriptions(key(7, SEC)),
        0,
        "a quiet process is not described"
    );
    // 7 runs; 8 stays reported, though it did not run again.
    let step = rec.step(&mut host, &mut at(130, 250));
    assert_eq!(reports(&step, key(7, SEC)), [(30, false, "p7".into())]);
    assert_eq!(reports(&step, key(8, 2 * SEC)), [(50, false, "p8".into())]);
    // A pass that missed a thread of 7 reads less than its baseline: 7 stays at 30.
    let step = rec.step(&mut host, &mut at(90, 250));
    assert_eq!(reports(&step, key(7, SEC)), [(30, false, "p7".into())]);
    // A quiet process that ends is not reported; 8's end is, with what it used since.
    rec.queue_exits(
        &host,
        [
            record(7, SEC, 130, "seven"),
            record(8, 2 * SEC, 260, "eight"),
        ],
    );
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(30, true, "p7".into())]);
    assert_eq!(reports(&step, key(8, 2 * SEC)), [(60, true, "p8".into())]);
    let mut rec = reconciler();
    rec.use_iterator();
    rec.step(&mut host, &mut live(&[(9, totals(SEC, 500))]));
    rec.queue_exits(&host, [record(9, SEC, 500, "nine")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert!(
        reports(&step, key(9, SEC)).is_empty(),
        "quiet until its end"
    );
}

/// A group handed over in pieces has its baseline taken off their sum, once, whichever comes
/// first (a straggler's piece can be smaller than the baseline).
#[test]
fn with_the_task_iterator_an_exit_in_pieces_loses_its_baseline_once() {
    let mut host = Fake::default();
    for same_step in [false, true] {
        let mut rec = reconciler();
        rec.use_iterator();
        rec.step(&mut host, &mut live(&[(9, totals(SEC, 1_000))]));
        rec.queue_exits(&host, [record(9, SEC, 300, "nine")]);
        if !same_step {
            let step = rec.step(&mut host, &mut Observed::default());
            assert!(
                reports(&step, key(9, SEC)).is_empty(),
                "300 of a 1,000 baseline"
            );
        }
        rec.queue_exits(&host, [record(9, SEC, 900, "nine")]);
        let step = rec.step(&mut host, &mut Observed::default());
        assert_eq!(reports(&step, key(9, SEC)), [(200, true, "nine".into())]);
        // A later piece adds all of itself.
        rec.queue_exits(&host, [record(9, SEC, 40, "nine")]);
        let step = rec.step(&mut host, &mut Observed::default());
        assert_eq!(reports(&step, key(9, SEC)), [(240, true, "nine".into())]);
    }
}

/// Both readings of a pass: `dead` on the final-switch basis, `sig` on the kernel's.
fn both(start_ns: u64, dead: u64, sig: u64) -> TaskTotals {
    TaskTotals {
        sig_ns: sig,
        sig_switches: 1,
        ..totals(start_ns, dead)
    }
}

/// A whole pass on the kernel basis.
fn pass(entries: &[(u32, TaskTotals)]) -> Observed {
    Observed {
        whole_pass: true,
        ..live(entries)
    }
}

/// On the kernel basis nothing hands a group's end over: a reported process gone from a whole
/// pass has ended, and is reported so once, on what it reported last.
#[test]
fn on_the_kernel_basis_a_process_gone_from_a_whole_pass_has_ended() {
    let mut rec = reconciler();
    let mut host = Fake::default();
    rec.use_iterator();
    rec.rebase(&host, &LiveTable::default(), Basis::Kernel);
    rec.iterator_snapshot(Duration::from_secs(10));
    rec.step(
        &mut host,
        &mut pass(&[(7, both(SEC, 0, 100)), (8, both(SEC, 0, 500))]),
    );
    let step = rec.step(
        &mut host,
        &mut pass(&[(7, both(SEC, 0, 150)), (8, both(SEC, 0, 500))]),
    );
    assert_eq!(reports(&step, key(7, SEC)), [(50, false, "p7".into())]);
    // A pass cut short says nothing of who ended.
    let step = rec.step(&mut host, &mut live(&[(8, both(SEC, 0, 500))]));
    assert!(reports(&step, key(7, SEC)).is_empty());
    // 7 is gone from a whole pass: ended, at what it reported. 8, quiet, is not reported.
    let step = rec.step(&mut host, &mut pass(&[(8, both(SEC, 0, 500))]));
    assert_eq!(reports(&step, key(7, SEC)), [(50, true, "p7".into())]);
    assert!(reports(&step, key(8, SEC)).is_empty());
    // A record of it that comes later (from kepler_exit, on the other basis) adds nothing, nor
    // does a leftover entry's.
    rec.queue_exits(&host, [record(7, SEC, 400, "seven")]);
    let step = rec.step(&mut host, &mut pass(&[(8, both(SEC, 0, 500))]));
    assert!(
        reports(&step, key(7, SEC)).is_empty(),
        "{:?}",
        step.processes
    );
    let step = rec.step(&mut host, &mut pass(&[]));
    assert!(step.processes.is_empty(), "{:?}", step.processes);
}

/// On the kernel basis a record of a group no pass met (a process that lived between two
/// passes while kepler_exit still ran) is reported as ever; one of a group a pass read is not.
#[test]
fn on_the_kernel_basis_only_records_of_groups_no_pass_met_are_reported() {
    let mut rec = reconciler();
    let mut host = Fake::default();
    rec.use_iterator();
    rec.iterator_snapshot(Duration::from_secs(10));
    rec.step(&mut host, &mut pass(&[(7, both(SEC, 100, 100))]));
    rec.step(&mut host, &mut pass(&[(7, both(SEC, 160, 160))]));
    rec.rebase(&host, &LiveTable::default(), Basis::Kernel);
    rec.queue_exits(
        &host,
        [
            record(7, SEC, 900, "seven"),
            record(20, 30 * SEC, 40, "short"),
        ],
    );
    let step = rec.step(&mut host, &mut pass(&[]));
    assert_eq!(
        reports(&step, key(20, 30 * SEC)),
        [(40, true, "short".into())]
    );
    assert_eq!(reports(&step, key(7, SEC)), [(60, true, "p7".into())]);
}

/// Turning from one basis to the other while processes run: each goes on from what it
/// reported, by what the new reading adds, in both directions; a baseline may go below zero.
#[test]
fn a_turn_between_bases_goes_on_from_what_was_reported() {
    let mut rec = reconciler();
    let mut host = Fake::default();
    rec.use_iterator();
    rec.iterator_snapshot(Duration::from_secs(10));
    // 7 had threads end before the agent started: the kernel's basis counts them, the
    // final-switch one does not. 8 starts after the first snapshot.
    rec.step(&mut host, &mut pass(&[(7, both(SEC, 1_000, 5_000))]));
    let first = pass(&[(7, both(SEC, 1_100, 5_100)), (8, both(60 * SEC, 30, 30))]);
    let step = rec.step(&mut host, &mut first.clone());
    assert_eq!(reports(&step, key(7, SEC)), [(100, false, "p7".into())]);
    assert_eq!(reports(&step, key(8, 60 * SEC)), [(30, false, "p8".into())]);
    // A thread of 8 ended while kepler_exit ran: its final-switch reading holds it, the
    // kernel's too once it is released. The turn is made on the last pass's two readings.
    rec.rebase(&host, &first.live, Basis::Kernel);
    let step = rec.step(
        &mut host,
        &mut pass(&[(7, both(SEC, 0, 5_300)), (8, both(60 * SEC, 0, 80))]),
    );
    assert_eq!(reports(&step, key(7, SEC)), [(300, false, "p7".into())]);
    assert_eq!(reports(&step, key(8, 60 * SEC)), [(80, false, "p8".into())]);
    // Back: kepler_exit kept no ended part meanwhile, so the final-switch reading falls short
    // of the kernel's (8's baseline goes below zero).
    let turn = pass(&[(7, both(SEC, 1_150, 5_400)), (8, both(60 * SEC, 10, 90))]);
    let step = rec.step(&mut host, &mut turn.clone());
    assert_eq!(reports(&step, key(7, SEC)), [(400, false, "p7".into())]);
    rec.rebase(&host, &turn.live, Basis::FinalSwitch);
    let step = rec.step(
        &mut host,
        &mut pass(&[(7, both(SEC, 1_170, 0)), (8, both(60 * SEC, 15, 0))]),
    );
    assert_eq!(reports(&step, key(7, SEC)), [(420, false, "p7".into())]);
    assert_eq!(reports(&step, key(8, 60 * SEC)), [(95, false, "p8".into())]);
    // 8's end comes as a record on the final-switch basis: on from there too.
    rec.queue_exits(&host, [record(8, 60 * SEC, 25, "eight")]);
    let step = rec.step(&mut host, &mut pass(&[(7, both(SEC, 1_170, 0))]));
    assert_eq!(reports(&step, key(8, 60 * SEC)), [(105, true, "p8".into())]);
}

/// A process first met with its whole group in its exit, where /proc then shows it in the root
/// of the v1 hierarchies: held back, and reported at its end, whole. On the final-switch basis
/// its record describes it; on the kernel basis its cgroup's counter holds its time, so it is
/// not reported at all (reported, it would be credited to the root's workload, and its
/// cgroup's counter would credit it again).
#[test]
fn a_process_first_met_ending_is_reported_at_its_end_only() {
    let mut host = Fake::default();
    host.ending.insert(7);
    let mut rec = reconciler();
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 30))]));
    assert!(step.processes.is_empty(), "{:?}", step.processes);
    // Its entry is read again until its record comes: still held back.
    let step = rec.step(&mut host, &mut live(&[(7, totals(SEC, 35))]));
    assert!(step.processes.is_empty(), "{:?}", step.processes);
    rec.queue_exits(&host, [record(7, SEC, 40, "seven")]);
    let step = rec.step(&mut host, &mut Observed::default());
    assert_eq!(reports(&step, key(7, SEC)), [(40, true, "seven".into())]);
    assert!(host
        .described
        .contains(&(key(7, SEC), Some(exit_info("seven", 0)))));

    let mut host = Fake::default();
    host.ending.insert(8);
    assert_8_left_to_its_counter(&mut host);
}

/// Runs process 8, started after the first snapshot, through a whole pass on the kernel basis
/// and out of the next, and asserts that neither step reports anything of it.
fn assert_8_left_to_its_counter(host: &mut Fake) {
    let mut rec = reconciler();
    rec.use_iterator();
    rec.rebase(host, &LiveTable::default(), Basis::Kernel);
    rec.iterator_snapshot(Duration::from_secs(10));
    rec.step(host, &mut pass(&[]));
    for mut seen in [pass(&[(8, both(60 * SEC, 0, 30))]), pass(&[])] {
        let step = rec.step(host, &mut seen);
        assert!(step.processes.is_empty(), "{:?}", step.processes);
    }
}

/// A process reaped between the pass that read it and its description: on the kernel basis
/// held back (a description from BPF names no usage counter, so its cgroup's counter would
/// credit its time again), on the final-switch basis described from what BPF knows.
#[test]
fn a_process_reaped_before_its_description_is_left_to_its_counter_on_the_kernel_basis() {
    let mut host = Fake::default();
    host.reaped.insert(8);
    assert_8_left_to_its_counter(&mut host);
    // Only the live description was asked for, not one from BPF.
    assert_eq!(host.descriptions(key(8, 60 * SEC)), 1);

    let mut host = Fake::default();
    host.reaped.insert(8);
    let mut rec = reconciler();
    let step = rec.step(&mut host, &mut live(&[(8, totals(60 * SEC, 30))]));
    assert_eq!(
        reports(&step, key(8, 60 * SEC)),
        [(30, false, String::new())]
    );
}

/// A process that moves to another cgroup while it ends keeps the description it had: /proc
/// can no longer say where it runs.
#[test]
fn a_process_moved_while_ending_keeps_its_description() {
    let mut host = Fake::default();
    let mut rec = reconciler();
    let in_cgroup = |cgroup_id, cpu_ns| TaskTotals {
        cgroup_id,
        ..totals(SEC, cpu_ns)
    };
    rec.step(&mut host, &mut live(&[(7, in_cgroup(5, 100))]));
    host.ending.insert(7);
    let step = rec.step(&mut host, &mut live(&[(7, in_cgroup(6, 120))]));
    assert_eq!(reports(&step, key(7, SEC)), [(120, false, "p7".into())]);
    let p = step
        .processes
        .iter()
        .find(|p| p.key == key(7, SEC))
        .unwrap();
    assert_eq!(p.info.cgroup_path, "/cg/5");
}

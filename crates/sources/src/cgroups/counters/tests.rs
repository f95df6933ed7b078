use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use kepler_core::{CgroupUsage, ProcessInfo, ProcessKey, ProcessUsage, WorkloadIdentity};

use super::*;

/// A cpuacct tree of fixture files.
struct Tree {
    dir: tempfile::TempDir,
}

impl Tree {
    fn new() -> Tree {
        Tree {
            dir: tempfile::tempdir().unwrap(),
        }
    }

    /// Sets cgroup `name`'s counter (`cpuacct:/path` in ns, `unified:/path` in µs).
    fn set(&self, name: &str, value: &str) {
        let (hierarchy, cgroup) = CountingHierarchy::split(name).unwrap();
        let (root, file, content) = match hierarchy {
            CountingHierarchy::Cpuacct => ("cpuacct", "cpuacct.usage", value.to_string()),
            CountingHierarchy::Unified => (
                "unified",
                "cpu.stat",
                format!("usage_usec {value}\nuser_usec 0\n"),
            ),
        };
        let dir = self
            .dir
            .path()
            .join(root)
            .join(cgroup.trim_start_matches('/'));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join(file), content).unwrap();
    }

    fn counters(&self) -> UsageCounters {
        UsageCounters::new(Counting {
            cpuacct: Some(self.dir.path().join("cpuacct")),
            unified: Some(self.dir.path().join("unified")),
        })
    }

    fn root(&self) -> &Path {
        self.dir.path()
    }
}

fn process(pid: u32, cgroup: &Arc<str>) -> ProcessUsage {
    ProcessUsage {
        key: ProcessKey {
            pid,
            start_time: Duration::from_secs(1),
        },
        cpu_time: Duration::ZERO,
        info: Arc::new(ProcessInfo {
            usage_cgroup: Some(cgroup.clone()),
            ..ProcessInfo::default()
        }),
        exited: false,
        counters: None,
    }
}

/// One process counted in each cgroup of `names`, pids from 1.
fn listing(names: &[&str]) -> Vec<ProcessUsage> {
    names
        .iter()
        .enumerate()
        .map(|(i, n)| process(i as u32 + 1, &Arc::from(*n)))
        .collect()
}

/// One snapshot, as a source takes it: the counters read, `processes` listed, and the
/// baselines of the cgroups new to that listing read. Each reading's cgroup and movement (ns).
fn read(
    c: &mut UsageCounters,
    processes: &[ProcessUsage],
    may_have_ended: bool,
) -> Vec<(String, Option<u64>)> {
    snapshot(c, processes, may_have_ended)
        .into_iter()
        .map(|(cgroup, since_last, _)| (cgroup, since_last))
        .collect()
}

/// [`read`], with the cgroup each baseline names as counted in.
fn snapshot(
    c: &mut UsageCounters,
    processes: &[ProcessUsage],
    may_have_ended: bool,
) -> Vec<(String, Option<u64>, Option<String>)> {
    let mut out = Vec::new();
    c.read(may_have_ended, &mut out);
    c.note_listed(processes);
    c.read_new(&mut out);
    let mut got: Vec<_> = out
        .into_iter()
        .map(
            |CgroupUsage {
                 cgroup,
                 since_last,
                 counted_in,
                 ..
             }| {
                (
                    cgroup.to_string(),
                    since_last.map(|d| d.as_nanos() as u64),
                    counted_in.map(|c| c.to_string()),
                )
            },
        )
        .collect();
    got.sort();
    got
}

#[test]
fn a_first_reading_is_a_baseline_then_movements_follow() {
    let tree = Tree::new();
    tree.set("cpuacct:/a", "1000\n");
    let a: Arc<str> = "cpuacct:/a".into();
    let listed = [process(1, &a), process(2, &a)];
    let mut c = tree.counters();
    // New: read right after the listing, even when nothing may have ended.
    assert_eq!(
        read(&mut c, &listed, false),
        [("cpuacct:/a".to_string(), None)]
    );
    tree.set("cpuacct:/a", "1500\n");
    // Nothing may have ended and nothing is new: not read, the next reading covers both.
    assert_eq!(read(&mut c, &listed, false), []);
    tree.set("cpuacct:/a", "1700\n");
    assert_eq!(
        read(&mut c, &listed, true),
        [("cpuacct:/a".to_string(), Some(700))]
    );
    assert_eq!(c.tracked(), 1);
}

#[test]
fn read_children_are_taken_out_of_their_ancestors() {
    let tree = Tree::new();
    for (cg, ns) in [
        ("cpuacct:/", "100"),
        ("cpuacct:/k", "50"),
        ("cpuacct:/k/p/c1", "10"),
        ("cpuacct:/other", "5"),
    ] {
        tree.set(cg, ns);
    }
    let listed = listing(&["cpuacct:/", "cpuacct:/k", "cpuacct:/k/p/c1"]);
    let mut c = tree.counters();
    read(&mut c, &listed, true);
    // Root +1000 (of which /k +300, of which /k/p/c1 +100; /other, not read, +20).
    for (cg, ns) in [
        ("cpuacct:/", "1100"),
        ("cpuacct:/k", "350"),
        ("cpuacct:/k/p/c1", "110"),
        ("cpuacct:/other", "25"),
    ] {
        tree.set(cg, ns);
    }
    assert_eq!(
        read(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(700)),
            ("cpuacct:/k".to_string(), Some(200)),
            ("cpuacct:/k/p/c1".to_string(), Some(100)),
        ]
    );
}

#[test]
fn a_child_read_after_its_parent_moved_more_is_paid_back_later() {
    let tree = Tree::new();
    tree.set("cpuacct:/", "100");
    tree.set("cpuacct:/a", "10");
    let listed = listing(&["cpuacct:/", "cpuacct:/a"]);
    let mut c = tree.counters();
    read(&mut c, &listed, true);
    // The child's counter ran on between the two reads: it moved more than its parent did.
    tree.set("cpuacct:/", "150");
    tree.set("cpuacct:/a", "80");
    assert_eq!(
        read(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(0)),
            ("cpuacct:/a".to_string(), Some(70))
        ]
    );
    tree.set("cpuacct:/", "300");
    tree.set("cpuacct:/a", "100");
    // 150 - 20 = 130, less the 20 the child ran ahead.
    assert_eq!(
        read(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(110)),
            ("cpuacct:/a".to_string(), Some(20))
        ]
    );
}

#[test]
fn a_cgroup_without_processes_is_read_once_more_then_dropped() {
    let tree = Tree::new();
    tree.set("cpuacct:/a", "1000");
    tree.set("cpuacct:/b", "1000");
    let (a, b): (Arc<str>, Arc<str>) = ("cpuacct:/a".into(), "cpuacct:/b".into());
    let mut c = tree.counters();
    read(&mut c, &[process(1, &a), process(2, &b)], true);
    tree.set("cpuacct:/b", "1400");
    // /b's process ended: this listing has none in it.
    assert_eq!(
        read(&mut c, &[process(1, &a)], true),
        [
            ("cpuacct:/a".to_string(), Some(0)),
            ("cpuacct:/b".to_string(), Some(400))
        ]
    );
    assert_eq!(c.tracked(), 2);
    // Its last moments (since the read before that listing) are read, then it is dropped.
    tree.set("cpuacct:/b", "1450");
    assert_eq!(
        read(&mut c, &[process(1, &a)], true),
        [
            ("cpuacct:/a".to_string(), Some(0)),
            ("cpuacct:/b".to_string(), Some(50))
        ]
    );
    assert_eq!(c.tracked(), 1);
    tree.set("cpuacct:/b", "1500");
    // Listed again: a new baseline, right after the listing.
    assert_eq!(
        read(&mut c, &[process(1, &a), process(3, &b)], false),
        [("cpuacct:/b".to_string(), None)]
    );
}

#[test]
fn gone_and_odd_counters_are_dropped_and_odd_ones_counted() {
    let tree = Tree::new();
    tree.set("cpuacct:/gone", "1000");
    tree.set("cpuacct:/odd", "1000");
    tree.set("cpuacct:/ok", "1000");
    let listed = listing(&["cpuacct:/gone", "cpuacct:/odd", "cpuacct:/ok"]);
    let mut c = tree.counters();
    // By path, as beyond the held files: a removed cgroup's counter is then gone.
    c.reader.held_cap = 0;
    read(&mut c, &listed, true);
    std::fs::remove_dir_all(tree.root().join("cpuacct/gone")).unwrap();
    tree.set("cpuacct:/odd", "12 34 garbage\n");
    tree.set("cpuacct:/ok", "1010");
    // Their processes went with them.
    assert_eq!(
        read(&mut c, &listed[2..], true),
        [("cpuacct:/ok".to_string(), Some(10))]
    );
    assert_eq!(c.unreadable(), 1, "the odd one, not the gone one");
    assert_eq!(c.tracked(), 1);
    // A counter that went back (a cgroup removed and made again under the same name) starts a
    // new baseline.
    tree.set("cpuacct:/ok", "5");
    assert_eq!(
        read(&mut c, &listed[2..], true),
        [("cpuacct:/ok".to_string(), None)]
    );
}

#[test]
fn held_counter_files_are_read_again() {
    let tree = Tree::new();
    tree.set("cpuacct:/a", "1");
    let a: Arc<str> = "cpuacct:/a".into();
    let mut c = tree.counters();
    assert!(c.reader.held_cap > 0);
    read(&mut c, &[process(1, &a)], true);
    assert!(c.tracked.get(&a).unwrap().file.is_some());
    // Rewritten in place, as the kernel's counter moves: the held file reads the new value.
    std::fs::write(tree.root().join("cpuacct/a/cpuacct.usage"), "99\n").unwrap();
    assert_eq!(
        read(&mut c, &[process(1, &a)], true),
        [("cpuacct:/a".to_string(), Some(98))]
    );
}

#[test]
fn counters_parse_in_both_hierarchies() {
    assert_eq!(
        parse_counter(CountingHierarchy::Cpuacct, b"63772374199\n"),
        Some(63772374199)
    );
    assert_eq!(
        parse_counter(
            CountingHierarchy::Unified,
            b"usage_usec 62108631\nuser_usec 1\n"
        ),
        Some(62108631000)
    );
    assert_eq!(
        parse_counter(CountingHierarchy::Unified, b"user_usec 1\n"),
        None
    );
    assert_eq!(parse_counter(CountingHierarchy::Cpuacct, b"-1\n"), None);
    assert_eq!(parse_counter(CountingHierarchy::Cpuacct, b""), None);
    assert_eq!(
        parse_counter(
            CountingHierarchy::Unified,
            b"usage_usec 99999999999999999999\n"
        ),
        None
    );
    assert_eq!(
        parse_counter(CountingHierarchy::Cpuacct, &[0xff, 0xfe]),
        None
    );
}

#[test]
fn the_workload_of_a_listed_process_goes_with_its_cgroup() {
    let tree = Tree::new();
    tree.set("cpuacct:/a", "1");
    let a: Arc<str> = "cpuacct:/a".into();
    let mut p = process(1, &a);
    let workload = WorkloadIdentity {
        process_type: kepler_core::ProcessType::Container,
        ..WorkloadIdentity::default()
    };
    Arc::make_mut(&mut p.info).workload = workload.clone();
    let mut c = tree.counters();
    let mut out = Vec::new();
    c.note_listed(&[process(2, &"cpuacct:/none".into()), p]);
    c.read_new(&mut out);
    assert_eq!(out.len(), 1, "new cgroups are read, those that exist");
    assert!(
        !c.read(false, &mut out),
        "then only when a task may have ended"
    );
    let a = out.iter().find(|u| &*u.cgroup == "cpuacct:/a").unwrap();
    assert_eq!(a.workload, workload);
}

#[test]
fn cgroup2_cgroups_are_taken_out_of_the_node_and_their_own_ancestors() {
    let tree = Tree::new();
    // The node (cpuacct root, ns), a cgroup2 cgroup and its child (µs).
    for (cg, v) in [
        ("cpuacct:/", "10000000"),
        ("unified:/bench", "1000"),
        ("unified:/bench/a", "100"),
    ] {
        tree.set(cg, v);
    }
    let listed = listing(&["cpuacct:/", "unified:/bench", "unified:/bench/a"]);
    let mut c = tree.counters();
    read(&mut c, &listed, true);
    // The node +5 ms, of which /bench +2 ms, of which /bench/a +0.5 ms.
    for (cg, v) in [
        ("cpuacct:/", "15000000"),
        ("unified:/bench", "3000"),
        ("unified:/bench/a", "600"),
    ] {
        tree.set(cg, v);
    }
    assert_eq!(
        read(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(3_000_000)),
            ("unified:/bench".to_string(), Some(1_500_000)),
            ("unified:/bench/a".to_string(), Some(500_000)),
        ]
    );
    assert_eq!(
        nearest_ancestor("unified:/x/y", &c.tracked).as_deref(),
        Some("cpuacct:/")
    );
    assert_eq!(nearest_ancestor("cpuacct:/", &c.tracked), None);
    assert_eq!(nearest_ancestor("odd", &c.tracked), None);
}

#[test]
fn a_cgroup_whose_processes_disagree_belongs_to_the_node() {
    let tree = Tree::new();
    tree.set("cpuacct:/", "1");
    let root: Arc<str> = "cpuacct:/".into();
    let mut container = process(1, &root);
    Arc::make_mut(&mut container.info).workload.process_type = kepler_core::ProcessType::Container;
    let mut c = tree.counters();
    let mut out = Vec::new();
    c.note_listed(&[process(2, &root), container.clone()]);
    c.read(true, &mut out);
    assert_eq!(out[0].workload, WorkloadIdentity::default());
    // Alone, the container's process gives the cgroup its workload.
    out.clear();
    c.note_listed(&[container.clone()]);
    c.read(true, &mut out);
    assert_eq!(out[0].workload, container.info.workload);
}

#[test]
fn a_new_cgroup_names_the_read_one_that_counted_it_until_its_baseline() {
    let tree = Tree::new();
    tree.set("cpuacct:/", "1000");
    tree.set("cpuacct:/k/c1", "0");
    let (root, c1): (Arc<str>, Arc<str>) = ("cpuacct:/".into(), "cpuacct:/k/c1".into());
    let mut c = tree.counters();
    assert_eq!(
        snapshot(&mut c, &[process(1, &root)], true),
        [("cpuacct:/".to_string(), None, None)]
    );
    // A container starts: the root's counter, read before the listing, holds its first 300 ns;
    // its baseline is read after the listing, when it has used 320.
    tree.set("cpuacct:/", "1400");
    tree.set("cpuacct:/k/c1", "320");
    let listed = [process(1, &root), process(2, &c1)];
    assert_eq!(
        snapshot(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(400), None),
            (
                "cpuacct:/k/c1".to_string(),
                None,
                Some("cpuacct:/".to_string())
            ),
        ]
    );
    // From here on the container's movement is taken out of the root's.
    tree.set("cpuacct:/", "2000");
    tree.set("cpuacct:/k/c1", "700");
    assert_eq!(
        read(&mut c, &listed, true),
        [
            ("cpuacct:/".to_string(), Some(220)),
            ("cpuacct:/k/c1".to_string(), Some(380)),
        ]
    );
}

#[test]
fn counters_are_read_again_only_when_a_task_may_have_ended() {
    let tree = Tree::new();
    tree.set("cpuacct:/a", "100");
    let a: Arc<str> = "cpuacct:/a".into();
    let mut c = tree.counters();
    let mut out = Vec::new();
    c.note_listed(&[process(1, &a)]);
    c.read_new(&mut out);
    c.counted_at(Some(7));
    let reads = |c: &mut UsageCounters, forks| {
        let mut out = Vec::new();
        c.read_if_ended(forks, &mut out);
        out.len()
    };
    assert_eq!(reads(&mut c, Some(7)), 0, "no fork since the baselines");
    c.note_gone();
    assert_eq!(reads(&mut c, Some(7)), 1, "a listed process went");
    assert_eq!(reads(&mut c, Some(7)), 0);
    assert_eq!(reads(&mut c, Some(8)), 1, "a task was created");
    assert_eq!(reads(&mut c, None), 1, "not known");
    assert_eq!(reads(&mut c, None), 1);
}

/// Notes `processes`, then checks before the next listing as a source does (the counters read
/// first when `may_have_ended`); the names of the quiet cgroups.
fn check(
    c: &mut UsageCounters,
    processes: &[ProcessUsage],
    may_have_ended: bool,
) -> Vec<&'static str> {
    let mut out = Vec::new();
    if may_have_ended {
        c.read_if_ended(None, &mut out);
    } else {
        // Read at this fork count, nothing gone since: not read again.
        c.counted_at(Some(0));
        c.read_if_ended(Some(0), &mut out);
    }
    c.check_quiet();
    let quiet = [
        "cpuacct:/",
        "cpuacct:/big",
        "cpuacct:/small",
        "unified:/big",
    ]
    .into_iter()
    .filter(|n| c.quiet(n))
    .collect();
    c.note_listed(processes);
    c.read_new(&mut out);
    quiet
}

#[test]
fn a_cgroup_is_quiet_when_its_counter_stood_still_since_the_check_before() {
    let tree = Tree::new();
    for (cg, v) in [
        ("cpuacct:/", "100"),
        ("cpuacct:/big", "10"),
        ("cpuacct:/small", "10"),
        ("unified:/big", "7"),
    ] {
        tree.set(cg, v);
    }
    let (root, big, small, ubig): (Arc<str>, Arc<str>, Arc<str>, Arc<str>) = (
        "cpuacct:/".into(),
        "cpuacct:/big".into(),
        "cpuacct:/small".into(),
        "unified:/big".into(),
    );
    let mut listed: Vec<ProcessUsage> = (1..=4).map(|pid| process(pid, &root)).collect();
    listed.extend((5..=8).map(|pid| process(pid, &big)));
    listed.extend((9..=11).map(|pid| process(pid, &small)));
    listed.extend((12..=15).map(|pid| process(pid, &ubig)));
    let mut c = tree.counters();
    // Listed first: baselines, taken after the listing, so no check yet.
    assert!(check(&mut c, &listed, false).is_empty());
    // Nothing may have ended: the cgroups counting four processes or more are read for the
    // check, but the node's root; their first check.
    assert!(check(&mut c, &listed, false).is_empty());
    tree.set("unified:/big", "8");
    assert_eq!(check(&mut c, &listed, false), ["cpuacct:/big"]);
    assert_eq!(
        check(&mut c, &listed, false),
        ["cpuacct:/big", "unified:/big"]
    );
    // Read because a task may have ended: every counter is checked as read, the small one's and
    // the root's too (first checks for them).
    tree.set("cpuacct:/", "150");
    assert_eq!(
        check(&mut c, &listed, true),
        ["cpuacct:/big", "unified:/big"]
    );
    tree.set("cpuacct:/big", "11");
    assert_eq!(
        check(&mut c, &listed, true),
        ["cpuacct:/", "cpuacct:/small", "unified:/big"]
    );
    // A check left out (the small one is not read when nothing may have ended) starts afresh.
    assert_eq!(
        check(&mut c, &listed, false),
        ["cpuacct:/big", "unified:/big"]
    );
    assert_eq!(
        check(&mut c, &listed, true),
        ["cpuacct:/big", "unified:/big"]
    );
    // An unreadable counter is never quiet.
    tree.set("cpuacct:/big", "garbage");
    assert_eq!(
        check(&mut c, &listed, true),
        ["cpuacct:/", "cpuacct:/small", "unified:/big"]
    );
    // Counted at the read, and at the baseline read after the listing noted the cgroup again.
    assert_eq!(c.unreadable(), 2);
}

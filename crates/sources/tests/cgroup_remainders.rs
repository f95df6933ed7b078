//! The procfs source with cgroup usage counters, against this host (root): processes that
//! start and end between two scans, which no scan sees, are credited to their cgroup's
//! workload, as much as the kernel counted in that cgroup.

use std::sync::Arc;
use std::time::Duration;

use kepler_core::{
    AttributionConfig, Attributor, Classifier, ContainerId, PowerSnapshot, ProcessInfo,
    ProcessType, Runtime, Tick, UsageSource, WorkloadIdentity,
};
use kepler_sources::ProcfsSource;
use kepler_testkit::churn::ChurnCgroup;

/// Classifies the processes counted in one cgroup as one container.
struct OneContainer {
    usage_cgroup: String,
    identity: WorkloadIdentity,
}

impl Classifier for OneContainer {
    fn classify(&self, info: &ProcessInfo) -> WorkloadIdentity {
        match &info.usage_cgroup {
            Some(c) if **c == *self.usage_cgroup => self.identity.clone(),
            _ => WorkloadIdentity::default(),
        }
    }
}

fn container_cpu(s: &PowerSnapshot, id: &str) -> Duration {
    s.containers
        .iter()
        .find(|c| c.container.id == id)
        .map_or(Duration::ZERO, |c| c.cpu_time)
}

#[test]
fn processes_no_scan_sees_are_credited_to_their_cgroup() {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        kepler_testkit::tools::skip(
            "SKIP processes_no_scan_sees_are_credited_to_their_cgroup: needs root",
        );
        return;
    }
    let name = format!("kepler-procfs-remainders-{}", std::process::id());
    let Some(mut cgroup) = ChurnCgroup::create(&name) else {
        kepler_testkit::tools::skip("SKIP: no cgroup2 cgroup could be made");
        return;
    };
    let id = "remainders".to_string();
    let classifier = Arc::new(OneContainer {
        usage_cgroup: format!("unified:{}", cgroup.path),
        identity: WorkloadIdentity {
            process_type: ProcessType::Container,
            container: Some(Arc::new(ContainerId {
                id: id.clone(),
                runtime: Runtime::Unknown,
                pod_id: None,
            })),
            vm: None,
        },
    });
    let mut source = ProcfsSource::new("/proc".into(), classifier).unwrap();
    let mut attributor = Attributor::new(AttributionConfig::default());
    let mut tick = || {
        let usage = source.snapshot().unwrap();
        attributor.tick(Tick {
            usage: &usage,
            energy: None,
            interval: Duration::from_secs(1),
        })
    };
    // The first snapshot lists the spawner; the second reads its cgroup's counter first (a
    // baseline), while the spawner waits.
    tick();
    tick();
    let before = cgroup.usage();
    let mut last = None;
    for _ in 0..3 {
        cgroup.churn(60, 3_000);
        last = Some(tick());
    }
    // Read before its scan, the last snapshot's counter holds the last round.
    let truth = cgroup.usage() - before;
    let credited = container_cpu(&last.unwrap(), &id);
    eprintln!("credited {credited:?} of the {truth:?} the cgroup used");
    // The spawner is read through `stat`, in clock ticks: its credit may trail by one.
    let slack = Duration::from_millis(20) + truth / 100;
    assert!(
        credited + slack >= truth && credited <= truth + slack,
        "credited {credited:?}, the cgroup used {truth:?}"
    );
    // Almost all of it was the burners', which no scan listed.
    assert!(
        truth > Duration::from_millis(100),
        "the burners used {truth:?}"
    );
}

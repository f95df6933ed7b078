//! The source's side of how ended processes are learnt with the task iterator (see
//! [`crate::exits`]): the cgroups' usage counters, the entries of groups gone from a pass, and
//! the turns between exact and counted exits while processes run.

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use kepler_core::{CgroupUsage, ProcessInfo, ProcessUsage};
use kepler_sources::NodeStat;

use super::EbpfSource;
use crate::abi::names;
use crate::exits::Rates;
use crate::reconcile::Basis;

/// How long `auto` keeps exits exact after a process was found whose workload's cgroup no
/// counter read here holds apart: counting would lose its ended children's time.
const UNCOUNTED_HOLD: Duration = Duration::from_secs(600);

/// The node's fork and switch counts, when `/proc/stat` gives both.
pub(super) fn counts(stat: &NodeStat) -> Option<(u64, u64)> {
    Some((stat.forks?, stat.switches?))
}

impl EbpfSource {
    /// Whether ended processes can be counted through the cgroups: the host mounts a
    /// counting hierarchy, and a pass's readings are told apart from leftover entries (the
    /// pass output is mapped, with the pass's number).
    pub(super) fn can_count_exits(&self) -> bool {
        self.cgroup_counters.is_some() && self.pass_reads.is_some()
    }

    /// The basis the task iterator starts on, from the node's rates since load.
    pub(super) fn initial_basis(&mut self, rates: Option<Rates>) -> Basis {
        let now = Instant::now();
        let wanted = self.exit_policy.next(Basis::FinalSwitch, rates, now);
        if wanted == Basis::Kernel && !self.can_count_exits() {
            tracing::warn!(
                "eBPF exits: exact (counting them needs a cgroup hierarchy with usage counters \
                 and the task iterator's mapped output)"
            );
            return Basis::FinalSwitch;
        }
        if wanted == Basis::Kernel && self.exit_policy.weighs() && self.any_uncounted() {
            tracing::info!(
                "eBPF exits: exact (a process's workload is in a cgroup without a usage \
                 counter here: counting would lose its ended children's time)"
            );
            self.uncounted_until = Some(now + UNCOUNTED_HOLD);
            return Basis::FinalSwitch;
        }
        wanted
    }

    /// Whether a process of the host sits in a cgroup whose time no counter read here holds
    /// apart (see [`kepler_sources::cgroups::Uncounted`]).
    fn any_uncounted(&mut self) -> bool {
        let pids = crate::unseen::pids(self.procfs.root());
        pids.into_iter()
            .any(|pid| self.procfs.usage_cgroup(pid).is_err())
    }

    /// Before a pass on the kernel basis: the counters of the cgroups the last snapshot listed,
    /// when a task may have ended since their last read (see
    /// [`kepler_sources::cgroups::UsageCounters::read_if_ended`]).
    pub(super) fn read_counters(&mut self, forks: Option<u64>, out: &mut Vec<CgroupUsage>) {
        if self.reconciler.basis() != Basis::Kernel {
            return;
        }
        if let Some(counters) = &mut self.cgroup_counters {
            counters.read_if_ended(forks, out);
        }
    }

    /// After a pass on the kernel basis: keeps the groups it read (a whole read of the process
    /// map also holds entries of groups gone since; the processes it does not visit are read
    /// from /proc), and deletes the entries of the groups the last whole pass read and this one
    /// did not, which nothing else removes without `kepler_exit`.
    pub(super) fn keep_this_pass(&mut self, whole: bool) {
        if self.reconciler.basis() != Basis::Kernel {
            return;
        }
        let pass = self.pass_reads.as_ref().and_then(|r| r.pass_id());
        let unseen: Vec<u32> = self.unseen.iter().map(|u| u.pid).collect();
        if let Some(pass) = pass {
            self.observed
                .live
                .retain(|tgid, t| t.pass == pass || unseen.contains(tgid));
        }
        self.observed.whole_pass = whole && pass.is_some();
        if !self.observed.whole_pass {
            return;
        }
        let gone = self.pass_groups.gone(&self.observed.live);
        if !gone.is_empty() {
            if let Some(counters) = &mut self.cgroup_counters {
                counters.note_gone();
            }
            if let Some(map) = self.ebpf.map_mut(names::TASKS) {
                // A group whose tgid another took since has no entry of its own left here.
                super::delete_entries(map, &gone, &mut Vec::new());
            }
        }
    }

    /// After a snapshot's step: notes the cgroups its processes are counted in and reads the
    /// baselines of those new to it into `out`, finishes a turn to exact exits begun at the
    /// snapshot before, and weighs the rates of the interval just ended for the next one. A
    /// turn to counted exits reads every counter's baseline into `out`, so that the next
    /// snapshot's readings count from this one.
    pub(super) fn follow_exits(
        &mut self,
        stat: &NodeStat,
        processes: &[ProcessUsage],
        out: &mut Vec<CgroupUsage>,
    ) {
        let now = Instant::now();
        let counts = counts(stat);
        let rates = match (self.last_counts, counts) {
            (Some((before, at)), Some(after)) => Rates::between(before, after, now - at),
            _ => None,
        };
        self.last_counts = counts.map(|c| (c, now));
        let basis = self.reconciler.basis();
        let mut uncounted = processes.iter().any(|p| p.info.usage_uncounted);
        if basis == Basis::Kernel && self.observed.whole_pass {
            uncounted |= self.note_pass_cgroups(processes);
            if let Some(counters) = &mut self.cgroup_counters {
                counters.read_new(out);
            }
        }
        if uncounted {
            self.uncounted_until = Some(now + UNCOUNTED_HOLD);
        }
        let uncounted = self.uncounted_until.is_some_and(|until| now < until);
        if self.turning_exact {
            // kepler_exit has run since the last snapshot: every exit from here on comes as a
            // record, on the final-switch basis this pass also read.
            self.turning_exact = false;
            self.reconciler
                .rebase(&self.procfs, &self.observed.live, Basis::FinalSwitch);
            self.stop_counting();
            self.note_turn(Basis::FinalSwitch, rates);
            return;
        }
        let mut next = self.exit_policy.next(basis, rates, now);
        if uncounted && next == Basis::Kernel && self.exit_policy.weighs() {
            if basis == Basis::Kernel {
                tracing::info!(
                    "eBPF exits: exact again (a process's workload is in a cgroup without a \
                     usage counter here: counting would lose its ended children's time)"
                );
            }
            next = Basis::FinalSwitch;
        }
        match (basis, next) {
            (Basis::FinalSwitch, Basis::Kernel) if self.can_count_exits() => {
                // Every group's cgroup is read first: one without a counter keeps exits exact.
                if self.note_pass_cgroups(processes) && self.exit_policy.weighs() {
                    self.uncounted_until = Some(now + UNCOUNTED_HOLD);
                    self.stop_counting();
                    tracing::info!(
                        "eBPF exits: stay exact (a process's workload is in a cgroup without a \
                         usage counter here: counting would lose its ended children's time)"
                    );
                    return;
                }
                self.ebpf.detach_exit();
                self.reconciler
                    .rebase(&self.procfs, &self.observed.live, Basis::Kernel);
                if let Some(counters) = &mut self.cgroup_counters {
                    counters.read_new(out);
                    counters.counted_at(stat.forks);
                }
                self.note_turn(Basis::Kernel, rates);
            }
            // The turn completes after the next step, which still reads on the kernel basis
            // (groups that end before the next pass are found gone from it).
            (Basis::Kernel, Basis::FinalSwitch) => match self.ebpf.attach_exit() {
                Ok(()) => self.turning_exact = true,
                Err(why) => tracing::warn!(%why, "eBPF exits stay counted"),
            },
            _ => {}
        }
    }

    /// Notes the cgroups that count the groups of the last pass, for the counters' next read:
    /// each with the workload of the processes reported in it and the one its path names.
    /// Returns whether a group's workload is in a cgroup without a counter here.
    fn note_pass_cgroups(&mut self, reported: &[ProcessUsage]) -> bool {
        let EbpfSource {
            cgroup_counters: Some(counters),
            observed,
            pass_groups,
            procfs,
            classifier,
            ..
        } = self
        else {
            return false;
        };
        pass_groups.update(
            &observed.live,
            |tgid| procfs.usage_cgroup(tgid),
            |path| {
                classifier.classify(&ProcessInfo {
                    cgroup_path: path.to_string(),
                    ..ProcessInfo::default()
                })
            },
        );
        counters.begin_listing();
        for (name, workload) in pass_groups.cgroups() {
            counters.note(name, workload);
        }
        for p in reported {
            if let Some(name) = &p.info.usage_cgroup {
                counters.note(name, &p.info.workload);
            }
        }
        pass_groups.any_uncounted()
    }

    /// Forgets the cgroups read: a later turn to counted exits starts them from baselines.
    fn stop_counting(&mut self) {
        if let Some(counters) = &mut self.cgroup_counters {
            counters.forget();
        }
        self.pass_groups.clear();
    }

    fn note_turn(&self, to: Basis, rates: Option<Rates>) {
        let counted = to == Basis::Kernel;
        self.stats.exits_counted.store(counted, Ordering::Relaxed);
        self.stats.exit_turns.fetch_add(1, Ordering::Relaxed);
        let (forks_per_s, switches_per_s) = rates.map_or((None, None), |r| {
            (Some(r.forks_per_s.round()), Some(r.switches_per_s.round()))
        });
        if counted {
            tracing::info!(
                ?forks_per_s,
                ?switches_per_s,
                "eBPF exits: counted through cgroup usage counters (exact ones would cost more \
                 than their budget)"
            );
        } else {
            tracing::info!(?forks_per_s, ?switches_per_s, "eBPF exits: exact again");
        }
    }
}

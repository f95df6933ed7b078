//! Collection of entries left in the process map by processes gone without an exit record (a
//! race the kernel side cannot close), so the map cannot fill with them.

use std::time::Duration;

use kepler_core::ProcessKey;

use super::{Host, Reconciler};
use crate::abi::TaskTotals;
use crate::live_table::LiveTable;

/// Each live entry that did not move since the previous snapshot is checked against /proc
/// about once in this long, to collect those whose process is gone. A period rather than a
/// count of snapshots: at a 1 s interval twelve snapshots made the checks (an open, a read and
/// a close of `/proc/<pid>/stat` each, ~7 µs) about a twentieth of the sampler's work at idle,
/// for a race (a group gone without its exit record) that costs nothing while it waits.
pub(super) const GC_PERIOD: Duration = Duration::from_secs(60);
/// The snapshots in [`GC_PERIOD`] at the default 5 s interval.
pub(super) const GC_EVERY: usize = 12;

/// About how many snapshots at `interval` make up [`GC_PERIOD`]: at least one, and at most
/// one per 100 ms (the interval is validated elsewhere; this only keeps a zero from dividing).
pub(super) fn gc_every(interval: Duration) -> usize {
    let per = GC_PERIOD.as_millis() / interval.as_millis().max(100);
    usize::try_from(per).unwrap_or(usize::MAX).max(1)
}

/// At most this many such checks (one /proc read each) per snapshot: on a host with thousands
/// of idle processes the round takes longer instead of reading thousands of files at once.
pub(super) const GC_BATCH: usize = 256;

/// Up to `n` of `ids`, in order after `cursor` and wrapping around, so that successive calls
/// cover every id in turn even as the set changes; `cursor` moves to the last one taken.
pub(super) fn round_robin(ids: &mut [u32], cursor: &mut u32, n: usize) -> Vec<u32> {
    ids.sort_unstable();
    let split = ids.partition_point(|&id| id <= *cursor);
    let (before, after) = ids.split_at(split);
    let picked: Vec<u32> = after.iter().chain(before).take(n).copied().collect();
    if let Some(&last) = picked.last() {
        *cursor = last;
    }
    picked
}

impl Reconciler {
    /// Removes live entries whose process is gone and returns them, to be reported as exited:
    /// every entry the kernel marked exited (its exit ring was full), and, unless the task
    /// iterator reads the entries, of those that did not move since the previous snapshot, a
    /// bounded batch found gone in /proc.
    pub(super) fn collect_gone(
        &mut self,
        host: &mut impl Host,
        live: &LiveTable,
    ) -> Vec<(ProcessKey, TaskTotals)> {
        let mut gone = std::mem::take(&mut self.gone);
        gone.clear();
        let mut idle = std::mem::take(&mut self.idle);
        idle.clear();
        let mut marked = std::mem::take(&mut self.marked);
        marked.clear();
        for (tgid, t) in live {
            if t.flags & TaskTotals::EXITED != 0 {
                marked.push(*tgid);
            } else if self
                .known
                .get(&host.key(*tgid, t.start_ns))
                .is_some_and(|k| k.last_cpu_ns == t.cpu_ns)
            {
                idle.push(*tgid);
            }
        }
        // Under heavy churn thousands of entries a snapshot, so deleted together rather than
        // re-read and deleted one by one as below. The delete still decides who owns each
        // entry (one the kernel handed over since the read fails to delete, and its ring
        // record reports it); what the group's threads may still add between this snapshot's
        // read and the delete, within microseconds of the exit, is not re-read.
        let mut removed = std::mem::take(&mut self.removed);
        removed.clear();
        if !marked.is_empty() {
            host.delete_each(&marked, &mut removed);
        }
        for tgid in &removed {
            if let Some(t) = live.get(tgid) {
                gone.push((host.key(*tgid, t.start_ns), *t));
            }
        }
        let used = marked.len();
        super::trim_vec(&mut marked, used);
        let used = removed.len();
        super::trim_vec(&mut removed, used);
        self.marked = marked;
        self.removed = removed;
        if self.iterator {
            idle.clear();
        }
        // One check per `gc_every` idle entries counted over snapshots, so each is checked about
        // once a round even when there are fewer of them than snapshots in it: rounded up per
        // snapshot, a few idle entries at 1 s were each checked every few seconds. What a
        // capped batch leaves is not carried over: the round takes longer instead.
        let owed = self.gc_owed + idle.len();
        let every = self.gc_every.max(1);
        let budget = (owed / every).min(GC_BATCH);
        self.gc_owed = owed % every;
        let picked = round_robin(&mut idle, &mut self.gc_cursor, budget);
        let used = idle.len();
        super::trim_vec(&mut idle, used);
        self.idle = idle;
        for tgid in picked {
            let Some(t) = live.get(&tgid) else {
                continue;
            };
            if !host.is_alive(host.key(tgid, t.start_ns)) {
                gone.extend(take(host, tgid, t));
            }
        }
        gone
    }
}

/// Removes the entry read as `t` from the map and returns its latest totals, unless the kernel
/// handed it over in the meantime.
fn take(host: &mut impl Host, tgid: u32, t: &TaskTotals) -> Option<(ProcessKey, TaskTotals)> {
    // Re-read just before removing. No entry: the kernel handed it to the exits ring since
    // the map was read, and the ring reports it. Another start time: the tgid now belongs to a
    // new process, which is alive.
    let cur = host.entry(tgid)?;
    if cur.start_ns != t.start_ns {
        return None;
    }
    // The delete decides who owns the entry: if the kernel moved it to the ring since the
    // re-read, this delete fails and the ring record reports the process; reporting it here as
    // well would count its whole lifetime twice. (The window left, a move and a reuse of the
    // same tgid between these two calls, takes a pid wrap-around within microseconds.)
    host.delete(tgid)
        .then(|| (host.key(tgid, cur.start_ns), cur))
}

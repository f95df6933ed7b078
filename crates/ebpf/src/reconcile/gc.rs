//! Collection of entries left in the process map by processes gone without an exit record (a
//! race the kernel side cannot close), so the map cannot fill with them.

use std::collections::HashMap;

use kepler_core::ProcessKey;

use super::{Host, Reconciler};
use crate::abi::TaskTotals;

/// Each live entry that did not move since the previous snapshot is checked against /proc
/// about once every this many snapshots, to collect those whose process is gone.
pub(super) const GC_EVERY: usize = 12;
/// At most this many such checks (one /proc read each) per snapshot: on a host with thousands
/// of idle processes the round takes longer instead of reading thousands of files at once.
pub(super) const GC_BATCH: usize = 256;

/// Up to `n` of `ids`, in order after `cursor` and wrapping around, so that successive calls
/// cover every id in turn even as the set changes; `cursor` moves to the last one taken.
pub(super) fn round_robin(mut ids: Vec<u32>, cursor: &mut u32, n: usize) -> Vec<u32> {
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
    /// Removes live entries whose process is gone and returns them, to be reported as exited.
    /// Only entries that did not move since the previous snapshot are suspects, and only a
    /// bounded batch of them is checked against /proc per snapshot.
    pub(super) fn collect_gone(
        &mut self,
        host: &mut impl Host,
        live: &HashMap<u32, TaskTotals>,
    ) -> Vec<(ProcessKey, TaskTotals)> {
        let idle: Vec<u32> = live
            .iter()
            .filter(|(tgid, t)| {
                self.known
                    .get(&host.key(**tgid, t.start_ns))
                    .is_some_and(|k| k.last_cpu_ns == t.cpu_ns)
            })
            .map(|(tgid, _)| *tgid)
            .collect();
        let budget = idle.len().div_ceil(GC_EVERY).min(GC_BATCH);
        let mut gone = Vec::new();
        for tgid in round_robin(idle, &mut self.gc_cursor, budget) {
            let Some(t) = live.get(&tgid) else {
                continue;
            };
            let key = host.key(tgid, t.start_ns);
            if host.is_alive(key) {
                continue;
            }
            // Re-read just before removing. No entry: the kernel handed it to the exits ring
            // since the map was read, and the ring reports it. Another start time: the tgid now
            // belongs to a new process, which is alive.
            let Some(cur) = host.entry(tgid) else {
                continue;
            };
            if cur.start_ns != t.start_ns {
                continue;
            }
            // The delete decides who owns the entry: if the kernel moved it to the ring since
            // the re-read, this delete fails and the ring record reports the process; reporting
            // it here as well would count its whole lifetime twice. (The window left, a move
            // and a reuse of the same tgid between these two calls, takes a pid wrap-around
            // within microseconds.)
            if host.delete(tgid) {
                gone.push((key, cur));
            }
        }
        gone
    }
}

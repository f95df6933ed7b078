//! Reading the whole process map each snapshot: in batches where the kernel allows it, else
//! entry by entry, into a [`LiveTable`] kept from one snapshot to the next (a map of thousands
//! of entries would otherwise cost blocks above glibc's mmap threshold, mapped afresh per
//! tick). Batches are written straight into the table's room, not copied from a buffer.

use aya::maps::{HashMap as BpfHashMap, Map, MapData};

use crate::abi::TaskTotals;
use crate::live_table::LiveTable;
use crate::map_batch::{BatchError, BatchMap, Checked, Chunk, Cursor};

/// Entries per batch call at first. A bucket larger than that makes later calls ask for more.
const FIRST_BATCH: usize = 512;
/// Calls never ask for more than this many entries (a bucket this large does not happen with
/// the kernel's hash; the bound only keeps a misbehaving answer from growing the room without
/// end).
const MAX_BATCH: usize = 1 << 16;

/// The two ways of reading the process map; a seam so that tests can refuse batches.
pub(crate) trait TaskMap {
    /// One `BPF_MAP_LOOKUP_BATCH` call.
    fn lookup_batch(
        &self,
        from: Option<Cursor>,
        keys: &mut [u32],
        values: &mut [TaskTotals],
    ) -> Result<Chunk, BatchError>;
    /// Every entry, one get-next-key and one lookup each; `f` gets each entry or each error.
    fn for_each_entry(&self, f: &mut dyn FnMut(Result<(u32, TaskTotals), String>));
}

/// The process map as loaded.
pub(crate) struct LoadedTasks<'a> {
    map: &'a Map,
    batch: Result<BatchMap<'a, u32, TaskTotals>, String>,
}

impl<'a> LoadedTasks<'a> {
    /// The map, its layout checked with the kernel unless `checked` says it was (and then
    /// set, so the next snapshot need not ask).
    pub(crate) fn new(map: &'a Map, checked: &mut Option<Checked>) -> Self {
        let batch = match map {
            Map::HashMap(data) => match checked.and_then(|c| BatchMap::again(data, c)) {
                Some(b) => Ok(b),
                None => BatchMap::new(data)
                    .inspect(|b| *checked = Some(b.checked()))
                    .map_err(|e| e.to_string()),
            },
            _ => Err("not a hash map".to_owned()),
        };
        LoadedTasks { map, batch }
    }
}

impl TaskMap for LoadedTasks<'_> {
    fn lookup_batch(
        &self,
        from: Option<Cursor>,
        keys: &mut [u32],
        values: &mut [TaskTotals],
    ) -> Result<Chunk, BatchError> {
        match &self.batch {
            Ok(b) => b.lookup(from, keys, values),
            Err(why) => Err(BatchError::Unsupported(std::io::Error::other(why.clone()))),
        }
    }

    fn for_each_entry(&self, f: &mut dyn FnMut(Result<(u32, TaskTotals), String>)) {
        let tasks: BpfHashMap<&MapData, u32, TaskTotals> = match BpfHashMap::try_from(self.map) {
            Ok(t) => t,
            Err(e) => return f(Err(e.to_string())),
        };
        for item in tasks.iter() {
            f(item.map_err(|e| e.to_string()));
        }
    }
}

/// How the last read went.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct ReadReport {
    /// Entries missed (a failed lookup skips its entry, a failed listing ends the read); the
    /// next snapshot reports their cumulative totals, so nothing is lost.
    pub errors: u64,
    pub first_error: Option<String>,
    /// Whether the entries came from batch lookups.
    pub batched: bool,
}

/// Reads the process map, remembering whether the kernel takes batch lookups.
pub(crate) struct TaskReader {
    /// `false` once the kernel refused a batch: it will not take one later either.
    batch_ok: bool,
    /// Entries a batch call asks for.
    batch: usize,
}

impl Default for TaskReader {
    fn default() -> Self {
        TaskReader::with_first_batch(FIRST_BATCH)
    }
}

impl TaskReader {
    /// A reader whose batch calls ask for `entries` (at least one) at first.
    pub(crate) fn with_first_batch(entries: usize) -> Self {
        TaskReader {
            batch_ok: true,
            batch: entries.max(1),
        }
    }

    /// Whether reads still try batches (the kernel has not refused one).
    #[cfg(test)]
    pub(crate) fn batching(&self) -> bool {
        self.batch_ok
    }

    /// Fills `out` (cleared first, its room kept) with the map's entries by tgid.
    pub(crate) fn read(&mut self, map: &impl TaskMap, out: &mut LiveTable) -> ReadReport {
        out.clear();
        if self.batch_ok {
            match self.read_batched(map, out) {
                Ok(()) => {
                    return ReadReport {
                        batched: true,
                        ..Default::default()
                    }
                }
                Err(BatchError::Unsupported(e)) => {
                    tracing::debug!(error = %e, "process map read entry by entry");
                    self.batch_ok = false;
                }
                // A failure after part of the map was read: read it all again the old way.
                Err(e) => tracing::warn!(error = %e, "batch read of the process map"),
            }
            out.clear();
        }
        let mut report = ReadReport::default();
        // When the entry the listing stands on is deleted, the kernel starts the listing over,
        // so an entry can come twice: keyed by tgid, the later (larger) reading wins.
        map.for_each_entry(&mut |item| match item {
            Ok((tgid, t)) => {
                out.insert(tgid, t);
            }
            Err(e) => {
                report.errors += 1;
                report.first_error.get_or_insert(e);
            }
        });
        report
    }

    /// Entries a batch call asks for now: the room a read takes beyond what the map holds.
    pub(crate) fn batch_room(&self) -> usize {
        self.batch
    }

    fn read_batched(&mut self, map: &impl TaskMap, out: &mut LiveTable) -> Result<(), BatchError> {
        let mut from = None;
        loop {
            let (keys, values) = out.spare(self.batch);
            match map.lookup_batch(from, keys, values) {
                Ok(chunk) => {
                    out.commit(chunk.count);
                    match chunk.next {
                        // An answer that moves nothing would repeat for ever.
                        Some(next) if chunk.count == 0 && from == Some(next) => {
                            let stuck = std::io::Error::other("the batch cursor did not move");
                            return Err(BatchError::Syscall(stuck));
                        }
                        Some(next) => from = Some(next),
                        None => return Ok(()),
                    }
                }
                // The same batch again, with room for the bucket.
                Err(BatchError::NoSpace) if self.batch < MAX_BATCH => {
                    self.batch = (self.batch * 2).min(MAX_BATCH);
                }
                Err(e) => return Err(e),
            }
        }
    }
}

#[cfg(test)]
mod tests;

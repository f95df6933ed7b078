//! The reader's choice between batches and entry-by-entry reads, against fake maps that
//! behave as the kernel's hash map does (whole buckets per batch, ENOSPC for a bucket larger
//! than the buffers, ENOENT at the end) or refuse batches.

use std::cell::Cell;
use std::io;

use super::*;

/// Entries in buckets by `tgid % buckets`, read in bucket order.
struct FakeMap {
    buckets: Vec<Vec<(u32, TaskTotals)>>,
    /// How a batch call is answered instead of reading: `None` reads.
    refuse: Option<fn() -> BatchError>,
    /// After this many successful batch calls, the next fails with an I/O error.
    fail_after: Option<usize>,
    batch_calls: Cell<usize>,
    entry_reads: Cell<usize>,
}

impl FakeMap {
    fn new(entries: &[(u32, TaskTotals)], buckets: usize) -> Self {
        let mut b = vec![Vec::new(); buckets];
        for &(tgid, t) in entries {
            b[tgid as usize % buckets].push((tgid, t));
        }
        FakeMap {
            buckets: b,
            refuse: None,
            fail_after: None,
            batch_calls: Cell::new(0),
            entry_reads: Cell::new(0),
        }
    }
}

impl TaskMap for FakeMap {
    fn lookup_batch(
        &self,
        from: Option<Cursor>,
        keys: &mut [u32],
        values: &mut [TaskTotals],
    ) -> Result<Chunk, BatchError> {
        let calls = self.batch_calls.get();
        self.batch_calls.set(calls + 1);
        if let Some(refuse) = self.refuse {
            return Err(refuse());
        }
        if self.fail_after == Some(calls) {
            return Err(BatchError::Syscall(io::Error::from_raw_os_error(
                libc::EFAULT,
            )));
        }
        let room = keys.len().min(values.len());
        let mut bucket = from.map_or(0, |c| c.0 as usize);
        let mut n = 0;
        while let Some(b) = self.buckets.get(bucket) {
            if b.len() > room - n {
                if n == 0 {
                    return Err(BatchError::NoSpace);
                }
                break;
            }
            for (i, (tgid, t)) in b.iter().enumerate() {
                keys[n + i] = *tgid;
                values[n + i] = *t;
            }
            n += b.len();
            bucket += 1;
        }
        let next = (bucket < self.buckets.len()).then_some(Cursor(bucket as u64));
        Ok(Chunk { count: n, next })
    }

    fn for_each_entry(&self, f: &mut dyn FnMut(Result<(u32, TaskTotals), String>)) {
        self.entry_reads.set(self.entry_reads.get() + 1);
        for (tgid, t) in self.buckets.iter().flatten() {
            f(Ok((*tgid, *t)));
        }
    }
}

fn entries(n: u32) -> Vec<(u32, TaskTotals)> {
    (1..=n)
        .map(|tgid| {
            let t = TaskTotals {
                start_ns: u64::from(tgid) * 1_000,
                cpu_ns: u64::from(tgid) * 7,
                ..Default::default()
            };
            (tgid, t)
        })
        .collect()
}

fn as_map(e: &[(u32, TaskTotals)]) -> LiveTable {
    e.iter().copied().collect()
}

#[test]
fn batches_return_every_entry_across_many_calls() {
    let e = entries(3_000);
    let map = FakeMap::new(&e, 1_024);
    let mut reader = TaskReader::with_first_batch(64);
    let mut out = LiveTable::default();
    let report = reader.read(&map, &mut out);
    assert!(report.batched);
    assert_eq!(report.errors, 0);
    assert_eq!(out, as_map(&e));
    assert!(
        map.batch_calls.get() > 40,
        "{} calls",
        map.batch_calls.get()
    );
    assert_eq!(map.entry_reads.get(), 0);
}

#[test]
fn a_bucket_larger_than_the_buffers_grows_them() {
    // 3,000 entries in 4 buckets: each bucket is larger than a first buffer of 8.
    let e = entries(3_000);
    let map = FakeMap::new(&e, 4);
    let mut reader = TaskReader::with_first_batch(8);
    let mut out = LiveTable::default();
    assert!(reader.read(&map, &mut out).batched);
    assert_eq!(out, as_map(&e));
    assert!(reader.batch_room() >= 750, "{}", reader.batch_room());
}

#[test]
fn reads_write_into_the_same_room_every_snapshot() {
    let e = entries(3_000);
    let map = FakeMap::new(&e, 1_024);
    let mut reader = TaskReader::with_first_batch(64);
    let mut out = LiveTable::default();
    reader.read(&map, &mut out);
    let slots = out.slots();
    for _ in 0..3 {
        reader.read(&map, &mut out);
        assert_eq!(out, as_map(&e));
    }
    assert_eq!(out.slots(), slots, "no more room taken");
    assert!(slots < 3_000 + 2 * 64, "{slots} slots for 3,000 entries");
}

#[test]
fn a_tgid_answered_twice_is_held_once_with_the_later_reading() {
    // The kernel starts a listing over when the entry it stands on is deleted; a batch answer
    // may then repeat a tgid, as this bucket does.
    let mut e = entries(100);
    let later = TaskTotals {
        cpu_ns: 1_000_000,
        ..e[6].1
    };
    e.push((7, later));
    let map = FakeMap::new(&e, 16);
    let mut reader = TaskReader::default();
    let mut out = LiveTable::default();
    assert!(reader.read(&map, &mut out).batched);
    assert_eq!(out.len(), 100);
    assert_eq!(out.get(&7), Some(&later));
    assert_eq!(out, as_map(&e));
}

#[test]
fn refused_batches_fall_back_for_good() {
    let e = entries(300);
    for refusal in [
        (|| BatchError::Unsupported(io::Error::from_raw_os_error(libc::EINVAL))) as fn() -> _,
        || BatchError::Unsupported(io::Error::from_raw_os_error(524)),
    ] {
        let mut map = FakeMap::new(&e, 64);
        map.refuse = Some(refusal);
        let mut reader = TaskReader::default();
        let mut out = LiveTable::default();
        let report = reader.read(&map, &mut out);
        assert!(!report.batched);
        assert_eq!(out, as_map(&e));
        assert!(!reader.batching());
        // The next read goes straight to the entries.
        reader.read(&map, &mut out);
        assert_eq!(map.batch_calls.get(), 1);
        assert_eq!(map.entry_reads.get(), 2);
        assert_eq!(out, as_map(&e));
    }
}

#[test]
fn a_failure_midway_reads_entry_by_entry_this_time_only() {
    let e = entries(3_000);
    let mut map = FakeMap::new(&e, 1_024);
    map.fail_after = Some(3);
    let mut reader = TaskReader::with_first_batch(64);
    let mut out = LiveTable::default();
    let report = reader.read(&map, &mut out);
    assert!(!report.batched);
    assert_eq!(
        out,
        as_map(&e),
        "nothing from the partial batches is doubled or lost"
    );
    assert_eq!(map.entry_reads.get(), 1);
    assert!(reader.batching());
    map.fail_after = None;
    assert!(reader.read(&map, &mut out).batched);
    assert_eq!(out, as_map(&e));
}

#[test]
fn the_output_is_replaced_not_added_to() {
    let mut reader = TaskReader::default();
    let mut out = as_map(&[(99_999, TaskTotals::default())]);
    let e = entries(10);
    reader.read(&FakeMap::new(&e, 16), &mut out);
    assert_eq!(out, as_map(&e));
}

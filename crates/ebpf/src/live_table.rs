//! The live entries of one snapshot (the process map's, or a task iterator pass's), by tgid.
//!
//! Held in two arrays in the order they were read, with an index by tgid, rather than in a
//! hash map of entries: a batch read of the process map writes straight into the arrays, and a
//! snapshot then walks them in order. Copied from the read buffers into a hash map, each
//! 136-byte entry went to its own slot of a table of ~290 KB (2,048 slots of 144 bytes for
//! ~1,060 entries) that nothing had touched for a whole interval: with 1,000 processes waking every second at a 1 s interval that copy was
//! ~9 % of the sampler thread's time (`perf record --call-graph dwarf` of the thread).

use std::collections::hash_map::Entry;

use kepler_core::scratch::{oversized, trim_map, trim_vec, FastMap};

use crate::abi::TaskTotals;

/// Entries by tgid, in the order they were added. A tgid is held once: adding it again
/// replaces its reading.
#[derive(Clone, Debug, Default)]
pub(crate) struct LiveTable {
    /// Slots `..len` hold the entries; the slots after them are room kept initialised for the
    /// next read to write into (`spare`), so that a read does not fill them with zeros first.
    tgids: Vec<u32>,
    totals: Vec<TaskTotals>,
    len: usize,
    /// The end of the room the last [`Self::spare`] gave: a commit takes no slot beyond it,
    /// whatever count it is told (the arrays may hold more room, with older readings).
    room_end: usize,
    /// The slot of each tgid held.
    index: FastMap<u32, u32>,
}

impl LiveTable {
    pub(crate) fn clear(&mut self) {
        self.len = 0;
        self.room_end = 0;
        self.index.clear();
    }

    pub(crate) fn len(&self) -> usize {
        self.len
    }

    pub(crate) fn get(&self, tgid: &u32) -> Option<&TaskTotals> {
        let slot = *self.index.get(tgid)?;
        self.totals.get(usize::try_from(slot).ok()?)
    }

    pub(crate) fn contains_key(&self, tgid: &u32) -> bool {
        self.index.contains_key(tgid)
    }

    /// Adds an entry, or replaces the reading of a tgid already held: a read of one entry.
    pub(crate) fn insert(&mut self, tgid: u32, totals: TaskTotals) {
        let (tgids, readings) = self.spare(1);
        if let (Some(k), Some(t)) = (tgids.first_mut(), readings.first_mut()) {
            *k = tgid;
            *t = totals;
            self.commit(1);
        }
    }

    pub(crate) fn iter(&self) -> Iter<'_> {
        let tgids = self.tgids.get(..self.len).unwrap_or_default();
        let totals = self.totals.get(..self.len).unwrap_or_default();
        tgids.iter().zip(totals)
    }

    /// Calls `f` with each entry, its reading open to change.
    pub(crate) fn for_each_mut(&mut self, mut f: impl FnMut(u32, &mut TaskTotals)) {
        let tgids = self.tgids.get(..self.len).unwrap_or_default();
        let totals = self.totals.get_mut(..self.len).unwrap_or_default();
        for (tgid, t) in tgids.iter().zip(totals) {
            f(*tgid, t);
        }
    }

    pub(crate) fn keys(&self) -> impl Iterator<Item = &u32> {
        self.iter().map(|(tgid, _)| tgid)
    }

    /// Keeps the entries `keep` says to, in their order.
    pub(crate) fn retain(&mut self, mut keep: impl FnMut(&u32, &TaskTotals) -> bool) {
        let held = self.len;
        self.clear();
        for from in 0..held {
            let kept = match (self.tgids.get(from), self.totals.get(from)) {
                (Some(tgid), Some(totals)) => keep(tgid, totals),
                _ => false,
            };
            if kept {
                self.take(from);
            }
        }
    }

    /// Room for `n` entries after the last one, for a read to write into; [`Self::commit`]
    /// then takes as many of them as it wrote.
    pub(crate) fn spare(&mut self, n: usize) -> (&mut [u32], &mut [TaskTotals]) {
        let end = self.len.saturating_add(n);
        if self.tgids.len() < end {
            self.tgids.resize(end, 0);
            self.totals.resize(end, TaskTotals::default());
        }
        self.room_end = end;
        let tgids = self.tgids.get_mut(self.len..end).unwrap_or_default();
        let totals = self.totals.get_mut(self.len..end).unwrap_or_default();
        (tgids, totals)
    }

    /// Takes the first `count` slots of the room [`Self::spare`] gave as entries (fewer if
    /// `count` is more than the room). A tgid already held keeps the later reading, in its
    /// first slot. The room is then closed: a second commit takes nothing.
    pub(crate) fn commit(&mut self, count: usize) {
        let end = self
            .len
            .saturating_add(count)
            .min(self.room_end)
            .min(self.tgids.len())
            .min(self.totals.len());
        for from in self.len..end {
            self.take(from);
        }
        self.room_end = self.len;
    }

    /// Takes the entry in slot `from` (at or after the next free slot) into the table: into
    /// the next free slot, or over the reading of its tgid if held already. Most often it is
    /// in the next free slot already: then only the index is written, and its reading is not
    /// read or copied at all.
    fn take(&mut self, from: usize) {
        let (Some(&tgid), Ok(next)) = (self.tgids.get(from), u32::try_from(self.len)) else {
            return;
        };
        let to = match self.index.entry(tgid) {
            Entry::Occupied(held) => usize::try_from(*held.get()).ok(),
            Entry::Vacant(free) => {
                free.insert(next);
                self.len += 1;
                if let Some(k) = self.tgids.get_mut(self.len - 1) {
                    *k = tgid;
                }
                Some(self.len - 1)
            }
        };
        if let Some(to) = to.filter(|&to| to != from) {
            if let Some(&totals) = self.totals.get(from) {
                if let Some(t) = self.totals.get_mut(to) {
                    *t = totals;
                }
            }
        }
    }

    /// Cuts the arrays and the index back after a burst (see [`kepler_core::scratch`]),
    /// keeping `room` slots beyond the entries for the next read to write into: a batch read
    /// asks for that much room whatever the map holds, so cutting it away on a quiet host
    /// would only have it allocated and zeroed again at the next read. Under a steady load
    /// nothing changes.
    pub(crate) fn trim(&mut self, room: usize) {
        trim_map(&mut self.index, self.len);
        let used = self.len.saturating_add(room);
        let entry_bytes = std::mem::size_of::<TaskTotals>() + std::mem::size_of::<u32>();
        if oversized(self.totals.len(), used, entry_bytes) {
            self.tgids.truncate(used);
            self.totals.truncate(used);
            trim_vec(&mut self.tgids, used);
            trim_vec(&mut self.totals, used);
        }
    }

    /// Slots the arrays hold, entries and room together.
    #[cfg(test)]
    pub(crate) fn slots(&self) -> usize {
        self.totals.len()
    }
}

pub(crate) type Iter<'a> =
    std::iter::Zip<std::slice::Iter<'a, u32>, std::slice::Iter<'a, TaskTotals>>;

impl<'a> IntoIterator for &'a LiveTable {
    type Item = (&'a u32, &'a TaskTotals);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Iter<'a> {
        self.iter()
    }
}

impl Extend<(u32, TaskTotals)> for LiveTable {
    fn extend<I: IntoIterator<Item = (u32, TaskTotals)>>(&mut self, entries: I) {
        for (tgid, totals) in entries {
            self.insert(tgid, totals);
        }
    }
}

impl FromIterator<(u32, TaskTotals)> for LiveTable {
    fn from_iter<I: IntoIterator<Item = (u32, TaskTotals)>>(entries: I) -> Self {
        let mut table = LiveTable::default();
        table.extend(entries);
        table
    }
}

/// The same entries, in whatever order.
impl PartialEq for LiveTable {
    fn eq(&self, other: &Self) -> bool {
        self.len == other.len && self.iter().all(|(tgid, t)| other.get(tgid) == Some(t))
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn reading(cpu_ns: u64) -> TaskTotals {
        TaskTotals {
            cpu_ns,
            ..Default::default()
        }
    }

    fn cpu(table: &LiveTable, tgid: u32) -> Option<u64> {
        table.get(&tgid).map(|t| t.cpu_ns)
    }

    #[test]
    fn a_tgid_added_again_keeps_its_later_reading_once() {
        let mut table: LiveTable = [(7, reading(1)), (9, reading(2)), (7, reading(3))]
            .into_iter()
            .collect();
        assert_eq!(table.len(), 2);
        assert_eq!(cpu(&table, 7), Some(3));
        assert_eq!(cpu(&table, 9), Some(2));
        let order: Vec<u32> = table.keys().copied().collect();
        assert_eq!(order, [7, 9], "in the order first added");
        table.insert(9, reading(4));
        assert_eq!((table.len(), cpu(&table, 9)), (2, Some(4)));
        assert!(!table.contains_key(&8) && cpu(&table, 8).is_none());
    }

    #[test]
    fn a_read_written_into_the_room_is_taken_as_far_as_it_wrote() {
        let mut table = LiveTable::default();
        table.insert(1, reading(10));
        let (tgids, totals) = table.spare(4);
        assert_eq!((tgids.len(), totals.len()), (4, 4));
        // A read wrote three entries, the last a tgid already held: one slot, later reading.
        for (i, (tgid, cpu_ns)) in [(2, 20), (3, 30), (1, 11)].into_iter().enumerate() {
            tgids[i] = tgid;
            totals[i] = reading(cpu_ns);
        }
        tgids[3] = 99;
        table.commit(3);
        assert_eq!(table.len(), 3);
        let held: Vec<(u32, u64)> = table.iter().map(|(k, t)| (*k, t.cpu_ns)).collect();
        assert_eq!(held, [(1, 11), (2, 20), (3, 30)]);
        assert!(!table.contains_key(&99), "beyond the count: not taken");
        // A count larger than the room (a misbehaving answer) takes the room only.
        let (tgids, _) = table.spare(2);
        tgids.copy_from_slice(&[4, 5]);
        table.commit(1_000);
        assert_eq!(table.len(), 5);
        assert_eq!(cpu(&table, 5), Some(0));
        // Nor beyond a smaller room than the arrays hold from earlier reads: their old
        // readings are not entries.
        table.clear();
        let (tgids, _) = table.spare(1);
        tgids[0] = 8;
        table.commit(4);
        let held: Vec<u32> = table.keys().copied().collect();
        assert_eq!(held, [8]);
        table.commit(4);
        assert_eq!(table.len(), 1, "a room is taken once");
    }

    #[test]
    fn cleared_then_refilled_keeps_its_room_and_forgets_its_entries() {
        let mut table: LiveTable = (1..=100).map(|t| (t, reading(u64::from(t)))).collect();
        let slots = table.slots();
        table.clear();
        assert!(table.len() == 0 && table.iter().next().is_none());
        assert!(!table.contains_key(&5));
        table.insert(5, reading(1));
        assert_eq!((table.len(), cpu(&table, 5)), (1, Some(1)));
        assert_eq!(table.slots(), slots, "the room stays");
    }

    #[test]
    fn retain_keeps_the_chosen_entries_in_order_and_finds_them() {
        let mut table: LiveTable = (1..=10).map(|t| (t, reading(u64::from(t)))).collect();
        table.retain(|tgid, _| tgid % 3 == 0);
        let kept: Vec<u32> = table.keys().copied().collect();
        assert_eq!(kept, [3, 6, 9]);
        assert_eq!(cpu(&table, 9), Some(9));
        assert!(!table.contains_key(&1));
        // Found in its new slot after a move, and replaced there.
        table.insert(9, reading(90));
        assert_eq!((table.len(), cpu(&table, 9)), (3, Some(90)));
    }

    #[test]
    fn room_kept_after_a_burst_is_cut_back_and_steady_room_is_not() {
        let mut table: LiveTable = (1..=20_000).map(|t| (t, reading(0))).collect();
        table.trim(512);
        assert!(table.slots() >= 20_000, "steady: kept");
        table.retain(|tgid, _| *tgid <= 100);
        table.trim(512);
        assert!(table.slots() < 20_000, "{}", table.slots());
        assert!(
            table.slots() >= 100 + 512,
            "a read's room stays: {}",
            table.slots()
        );
        assert_eq!(table.len(), 100);
        assert_eq!(cpu(&table, 100), Some(0));
        table.insert(20_000, reading(1));
        assert_eq!(cpu(&table, 20_000), Some(1));
    }

    #[test]
    fn a_quiet_table_keeps_a_reads_room() {
        // ~20 processes and a batch's room of 512 slots (~70 KB, above the floor under which
        // nothing is cut back): cut to its entries, the next read would allocate it again.
        let mut table = LiveTable::default();
        let (tgids, _) = table.spare(512);
        for (tgid, slot) in (1..=20).zip(tgids.iter_mut()) {
            *slot = tgid;
        }
        table.commit(20);
        let slots = table.slots();
        assert_eq!(slots, 512);
        for _ in 0..3 {
            table.trim(512);
            assert_eq!(table.slots(), slots);
            table.clear();
            table.spare(512);
            table.commit(20);
            assert_eq!(table.len(), 20);
        }
    }

    /// What a test does to a table, and to the plain map it is checked against.
    #[derive(Clone, Debug)]
    enum Op {
        Insert(u32, u64),
        /// A read that writes these entries into the room of `room` slots and reports `count`
        /// of them (more than it wrote, or than the room, as a misbehaving answer may).
        Read {
            room: usize,
            entries: Vec<(u32, u64)>,
            count: usize,
        },
        Retain(u32),
        Clear,
        Trim(usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        // Few distinct tgids, so that repeats within a read and across reads are common.
        let tgid = 0u32..40;
        prop_oneof![
            (tgid.clone(), any::<u64>()).prop_map(|(t, c)| Op::Insert(t, c)),
            (
                0usize..64,
                prop::collection::vec((tgid, any::<u64>()), 0..64),
                0usize..80
            )
                .prop_map(|(room, entries, count)| Op::Read {
                    room,
                    entries,
                    count
                }),
            (1u32..5).prop_map(Op::Retain),
            Just(Op::Clear),
            (0usize..600).prop_map(Op::Trim),
        ]
    }

    proptest! {
        #[test]
        fn the_table_holds_what_a_plain_map_holds(ops in prop::collection::vec(op(), 1..60)) {
            let mut table = LiveTable::default();
            let mut model: std::collections::HashMap<u32, u64> = Default::default();
            for op in ops {
                match op {
                    Op::Insert(tgid, cpu_ns) => {
                        table.insert(tgid, reading(cpu_ns));
                        model.insert(tgid, cpu_ns);
                    }
                    Op::Read { room, entries, count } => {
                        let (tgids, totals) = table.spare(room);
                        prop_assert_eq!(tgids.len(), room);
                        let written = entries.len().min(room);
                        for (i, (tgid, cpu_ns)) in entries.iter().take(written).enumerate() {
                            tgids[i] = *tgid;
                            totals[i] = reading(*cpu_ns);
                        }
                        // What the room held beyond the written slots is taken as it is.
                        let taken = count.min(room);
                        let (tgids, totals) = (tgids.to_vec(), totals.to_vec());
                        table.commit(count);
                        for i in 0..taken {
                            model.insert(tgids[i], totals[i].cpu_ns);
                        }
                    }
                    Op::Retain(k) => {
                        table.retain(|tgid, _| tgid % k == 0);
                        model.retain(|tgid, _| tgid % k == 0);
                    }
                    Op::Clear => {
                        table.clear();
                        model.clear();
                    }
                    Op::Trim(room) => table.trim(room),
                }
                prop_assert_eq!(table.len(), model.len());
                let mut seen = std::collections::HashSet::new();
                for (tgid, t) in table.iter() {
                    prop_assert!(seen.insert(*tgid), "tgid {} held twice", tgid);
                    prop_assert_eq!(Some(&t.cpu_ns), model.get(tgid));
                }
                for (tgid, cpu_ns) in &model {
                    prop_assert!(table.contains_key(tgid));
                    prop_assert_eq!(cpu(&table, *tgid), Some(*cpu_ns));
                }
            }
        }
    }

    #[test]
    fn equal_tables_hold_the_same_entries_in_any_order() {
        let a: LiveTable = [(1, reading(1)), (2, reading(2))].into_iter().collect();
        let b: LiveTable = [(2, reading(2)), (1, reading(1))].into_iter().collect();
        let c: LiveTable = [(2, reading(3)), (1, reading(1))].into_iter().collect();
        assert_eq!(a, b);
        assert_ne!(a, c);
        assert_ne!(a, LiveTable::default());
    }
}

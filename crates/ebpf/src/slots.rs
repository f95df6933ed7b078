//! Per-switch accounting charges a switch to the leaving group's slot of the `slots` array
//! once the group holds one (tgid modulo the array's size), and to its process-map entry
//! otherwise: an array element found by arithmetic costs a switch one cold line where the
//! hash map's lookup costs two (`bench/ebpf_floor.sh`, `array` against `hash`). A group's
//! reading is therefore its entry plus its slot, which this adds after the map read.
//!
//! The kernel side marks a slot busy before it empties or retakes it, and never gives it back
//! to the same group, so a slot read twice that names the group both times was the group's
//! throughout the first read. It empties a group's slot before it adds the slot to the entry
//! (or to the exit record), and the map read comes before this: a reading can then miss the
//! slot's part for one snapshot, never count it twice, which is what the reconciler's
//! largest-reading rule needs.
//!
//! A switch charged to a slot does not look at the group's entry, so a group whose entry user
//! space deletes while it lives (the entries a trial pass of the task iterator left, or a
//! process /proc wrongly said was gone) would charge its slot unseen from then on. User space
//! therefore frees the slot of every entry it deletes, after the delete: the group's next
//! switch finds no slot, makes its entry again and takes a slot anew, counting from then, as a
//! deleted entry always did.

use std::cell::OnceCell;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use aya::maps::{Array, Map};

use crate::abi::{names, Slot, TaskTotals};
use crate::live_table::LiveTable;
use crate::loader::Attached;
use crate::mapped::Mapping;

/// Where slots are read from; a seam so that tests can change a slot between two reads.
pub(crate) trait SlotArray {
    /// Slots in the array (a power of two).
    fn len(&self) -> usize;
    /// Slot `i`, `None` past the end.
    fn read(&self, i: usize) -> Option<Slot>;
}

/// The `slots` array mapped a page at a time, the first time a slot of the page is read: the
/// kernel maps all of a mapping's pages at once, so the whole array (1 MiB by default) mapped
/// in one piece stayed resident in the agent, whatever the number of processes.
pub(crate) struct PagedSlots {
    map: OwnedFd,
    len: usize,
    per_page: usize,
    /// Each page's mapping once made; `None` inside when it could not be.
    pages: Vec<OnceCell<Option<Mapping<Slot>>>>,
}

impl PagedSlots {
    /// The `slots` array of `ebpf`.
    pub(crate) fn of(ebpf: &Attached) -> io::Result<PagedSlots> {
        let (fd, len) = crate::mapped::array(ebpf, names::SLOTS)?;
        PagedSlots::new(fd, len)
    }

    /// The array behind `map`, of `len` slots.
    fn new(map: BorrowedFd<'_>, len: usize) -> io::Result<PagedSlots> {
        // SAFETY: sysconf has no preconditions.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096);
        let per_page = (page / std::mem::size_of::<Slot>()).max(1);
        Ok(PagedSlots {
            map: map.try_clone_to_owned()?,
            len,
            per_page,
            pages: (0..len.div_ceil(per_page))
                .map(|_| OnceCell::new())
                .collect(),
        })
    }

    /// Pages mapped so far.
    #[cfg(test)]
    pub(crate) fn mapped_pages(&self) -> usize {
        self.pages.iter().filter(|p| p.get().is_some()).count()
    }
}

impl SlotArray for PagedSlots {
    fn len(&self) -> usize {
        self.len
    }

    fn read(&self, i: usize) -> Option<Slot> {
        let page = self.pages.get(i / self.per_page)?;
        let first = i - i % self.per_page;
        let mapping = page.get_or_init(|| {
            let slots = self.per_page.min(self.len - first);
            Mapping::new_at(self.map.as_fd(), first, slots)
                .inspect_err(|error| tracing::debug!(%error, first, "mapping a page of slots"))
                .ok()
        });
        mapping.as_ref()?.get(i % self.per_page)
    }
}

/// Frees the slot of each group of `tgids` whose entry user space deleted (the slot holding
/// that tgid, whatever the start: the tgid's entry was that group's). Returns how many.
pub(crate) fn free_slots_of(map: &mut Map, slots: &impl SlotArray, tgids: &[u32]) -> usize {
    let len = slots.len();
    if tgids.is_empty() || !len.is_power_of_two() {
        return 0;
    }
    let held = tgids.iter().filter_map(|&tgid| {
        let i = usize::try_from(tgid).unwrap_or(usize::MAX) & (len - 1);
        slots
            .read(i)
            .is_some_and(|s| s.owner == u64::from(tgid))
            .then_some(i)
    });
    free(map, held)
}

fn free(map: &mut Map, slots: impl Iterator<Item = usize>) -> usize {
    let Ok(mut array) = Array::<&mut aya::maps::MapData, Slot>::try_from(map) else {
        return 0;
    };
    slots
        .filter(|&i| u32::try_from(i).is_ok_and(|i| array.set(i, Slot::default(), 0).is_ok()))
        .count()
}

/// Adds to each entry of `table` what its group's slot charged; returns how many entries had
/// one. Nothing is added when the array's size is not a power of two (not the loader's).
pub(crate) fn add_slots(table: &mut LiveTable, slots: &impl SlotArray) -> usize {
    let mut added = 0;
    table.for_each_mut(|tgid, totals| {
        if add_slot(tgid, totals, slots) {
            added += 1;
        }
    });
    added
}

/// Adds to `totals`, group `tgid`'s process-map entry, what the group's slot charged; false
/// when it holds none.
pub(crate) fn add_slot(tgid: u32, totals: &mut TaskTotals, slots: &impl SlotArray) -> bool {
    let len = slots.len();
    if !len.is_power_of_two() {
        return false;
    }
    let i = usize::try_from(tgid).unwrap_or(usize::MAX) & (len - 1);
    let Some(slot) = slots.read(i) else {
        return false;
    };
    if !slot.holds(tgid, totals.start_ns) {
        return false;
    }
    // The second read must not be done before the first one's loads.
    fence(Ordering::Acquire);
    if !slots
        .read(i)
        .is_some_and(|again| again.holds(tgid, totals.start_ns))
    {
        return false;
    }
    totals.cpu_ns = totals.cpu_ns.saturating_add(slot.cpu_ns);
    totals.switches = totals.switches.saturating_add(slot.switches);
    totals.cycles = totals.cycles.saturating_add(slot.cycles);
    totals.instructions = totals.instructions.saturating_add(slot.instructions);
    totals.cache_misses = totals.cache_misses.saturating_add(slot.cache_misses);
    true
}

#[cfg(test)]
mod tests {
    use std::cell::{Cell, RefCell};

    use super::*;

    /// Slots as plain memory; `retake` replaces one slot after the read numbered `after`, as a
    /// CPU emptying or retaking it between two reads would.
    struct Fake {
        slots: RefCell<Vec<Slot>>,
        reads: Cell<usize>,
        retake: Option<(usize, usize, Slot)>,
    }

    impl Fake {
        fn new(len: usize) -> Fake {
            Fake {
                slots: RefCell::new(vec![Slot::default(); len]),
                reads: Cell::new(0),
                retake: None,
            }
        }

        fn set(&self, i: usize, slot: Slot) {
            self.slots.borrow_mut()[i] = slot;
        }
    }

    impl SlotArray for Fake {
        fn len(&self) -> usize {
            self.slots.borrow().len()
        }

        fn read(&self, i: usize) -> Option<Slot> {
            let n = self.reads.get() + 1;
            self.reads.set(n);
            let slot = self.slots.borrow().get(i).copied();
            if let Some((after, at, with)) = self.retake {
                if n == after {
                    self.set(at, with);
                }
            }
            slot
        }
    }

    fn held(tgid: u32, start_ns: u64, cpu_ns: u64) -> Slot {
        Slot {
            owner: u64::from(tgid),
            start_ns,
            cpu_ns,
            switches: 3,
            cycles: 7,
            ..Slot::default()
        }
    }

    fn entry(start_ns: u64, cpu_ns: u64) -> TaskTotals {
        TaskTotals {
            start_ns,
            cpu_ns,
            switches: 1,
            ..TaskTotals::default()
        }
    }

    fn cpu(table: &LiveTable, tgid: u32) -> u64 {
        table.get(&tgid).map_or(0, |t| t.cpu_ns)
    }

    #[test]
    fn a_group_reads_as_its_entry_plus_its_slot() {
        let slots = Fake::new(8);
        // tgid 11 maps to slot 3 of 8; 12 to 4, held by another group of tgid 12.
        slots.set(3, held(11, 500, 2_000));
        slots.set(4, held(12, 999, 4_000));
        let mut table: LiveTable = [(11, entry(500, 100)), (12, entry(600, 100))]
            .into_iter()
            .collect();
        assert_eq!(add_slots(&mut table, &slots), 1);
        assert_eq!(cpu(&table, 11), 2_100);
        let t = table.get(&11).copied().unwrap_or_default();
        assert_eq!((t.switches, t.cycles), (4, 7));
        // Same tgid, another group (a reused tgid): its slot is not this one's.
        assert_eq!(cpu(&table, 12), 100);
    }

    #[test]
    fn tgids_that_meet_in_a_slot_take_only_their_own() {
        let slots = Fake::new(4);
        // 5 and 9 both map to slot 1 of 4; 9 holds it.
        slots.set(1, held(9, 90, 1_000));
        let mut table: LiveTable = [(5, entry(50, 10)), (9, entry(90, 20))]
            .into_iter()
            .collect();
        assert_eq!(add_slots(&mut table, &slots), 1);
        assert_eq!((cpu(&table, 5), cpu(&table, 9)), (10, 1_020));
    }

    #[test]
    fn free_and_busy_slots_add_nothing() {
        for owner in [Slot::FREE, Slot::BUSY] {
            let slots = Fake::new(4);
            slots.set(
                2,
                Slot {
                    owner,
                    ..held(2, 20, 1_000)
                },
            );
            let mut table: LiveTable = [(2, entry(20, 10))].into_iter().collect();
            assert_eq!(add_slots(&mut table, &slots), 0);
            assert_eq!(cpu(&table, 2), 10);
        }
    }

    #[test]
    fn a_slot_emptied_or_retaken_while_read_adds_nothing() {
        // The kernel empties the slot (busy, then free, then taken by another group) after
        // the first read: what that read saw may be half the new holder's, so none of it counts.
        for after in [Slot::BUSY, Slot::FREE, 13] {
            let mut slots = Fake::new(4);
            slots.set(1, held(5, 50, 1_000));
            slots.retake = Some((
                1,
                1,
                Slot {
                    owner: after,
                    ..held(5, 130, 0)
                },
            ));
            let mut table: LiveTable = [(5, entry(50, 10))].into_iter().collect();
            assert_eq!(add_slots(&mut table, &slots), 0, "{after}");
            assert_eq!(cpu(&table, 5), 10);
        }
    }

    #[test]
    fn an_array_not_of_a_power_of_two_is_not_read() {
        let slots = Fake::new(6);
        slots.set(5, held(5, 50, 1_000));
        let mut table: LiveTable = [(5, entry(50, 10))].into_iter().collect();
        assert_eq!(add_slots(&mut table, &slots), 0);
        assert_eq!(slots.reads.get(), 0);
    }
}

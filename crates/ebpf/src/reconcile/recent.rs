//! Exited processes kept for a few snapshots after their report, to merge late pieces.

use kepler_core::ProcessKey;

use super::FastMap;

/// Entries by key, each kept from the snapshot that inserts it through the next `ttl`, in one
/// table per snapshot. Expiry clears a whole table: removing expired entries one by one leaves
/// tombstones, and under churn (thousands of exits a snapshot) those made the one shared table
/// rehash in place or grow, megabytes at a time, every few snapshots.
pub(super) struct Recent<V> {
    /// Tables by the snapshot that inserted their entries, round robin.
    tables: Vec<FastMap<ProcessKey, V>>,
    /// The table this snapshot inserts into.
    current: usize,
}

impl<V> Recent<V> {
    pub(super) fn new(ttl: u32) -> Self {
        let tables = (0..=ttl).map(|_| FastMap::default()).collect();
        Recent { tables, current: 0 }
    }

    pub(super) fn contains_key(&self, key: &ProcessKey) -> bool {
        self.tables.iter().any(|t| t.contains_key(key))
    }

    pub(super) fn remove(&mut self, key: &ProcessKey) -> Option<V> {
        self.tables.iter_mut().find_map(|t| t.remove(key))
    }

    /// Whether `key` is held; if so, it is held through the next `ttl` snapshots again.
    pub(super) fn refresh(&mut self, key: &ProcessKey) -> bool {
        match self.remove(key) {
            Some(value) => {
                self.insert(*key, value);
                true
            }
            None => false,
        }
    }

    /// Keeps `value` through the next `ttl` snapshots.
    pub(super) fn insert(&mut self, key: ProcessKey, value: V) {
        if let Some(t) = self.tables.get_mut(self.current) {
            t.insert(key, value);
        }
    }

    /// Makes room for `additional` more entries in the table this snapshot inserts into, at
    /// once rather than in steps.
    pub(super) fn reserve(&mut self, additional: usize) {
        if let Some(t) = self.tables.get_mut(self.current) {
            t.reserve(additional);
        }
    }

    /// Ends this snapshot: what was inserted `ttl` snapshots ago expires. The expired table's
    /// allocation goes too, unless it is small: it stays empty until the next snapshot's
    /// inserts (made room for with [`Recent::reserve`]), and under churn it was half a
    /// megabyte held between snapshots for nothing.
    pub(super) fn advance(&mut self) {
        self.current = (self.current + 1) % self.tables.len().max(1);
        if let Some(t) = self.tables.get_mut(self.current) {
            t.clear();
            super::trim_map(t, 0);
        }
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.tables.iter().map(FastMap::capacity).sum()
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.tables.iter().map(FastMap::len).sum()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn key(pid: u32) -> ProcessKey {
        ProcessKey {
            pid,
            start_time: Duration::from_secs(1),
        }
    }

    #[test]
    fn an_entry_lives_through_ttl_more_snapshots() {
        let mut r = Recent::new(3);
        r.insert(key(1), "a");
        r.advance();
        for _ in 0..3 {
            assert!(r.contains_key(&key(1)));
            r.advance();
        }
        assert!(!r.contains_key(&key(1)));
        assert_eq!(r.len(), 0);
    }

    #[test]
    fn an_expired_burst_does_not_stay_allocated() {
        let mut r = Recent::new(1);
        r.reserve(10_000);
        let made = r.capacity();
        assert!(made >= 10_000);
        for pid in 0..10_000 {
            r.insert(key(pid), [0u64; 8]);
        }
        r.advance();
        // Still held through this snapshot; the table now inserted into is small.
        assert!(r.contains_key(&key(9_999)));
        assert!(r.capacity() < made + 1_024, "{}", r.capacity());
        r.advance();
        assert_eq!(r.len(), 0);
        assert!(r.capacity() < 1_024, "{}", r.capacity());
    }

    #[test]
    fn reinserting_renews_and_removing_takes_out() {
        let mut r = Recent::new(2);
        r.insert(key(1), 1);
        r.insert(key(2), 2);
        r.advance();
        r.advance();
        let v = r.remove(&key(1)).unwrap();
        r.insert(key(1), v + 10);
        r.advance();
        assert!(!r.contains_key(&key(2)), "expired");
        assert_eq!(r.remove(&key(1)), Some(11));
        assert_eq!(r.remove(&key(1)), None);
    }
}

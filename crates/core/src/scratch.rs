//! Tables that live from one tick to the next: the hash map they use, and the rule by which
//! a table kept allocated is cut back after a burst (the attribution here, the eBPF source's
//! reconciliation in kepler-ebpf).

/// Maps looked up once or twice per process per tick. Keys are pids and start times, and ids
/// from cgroup paths or command lines: nothing an outsider can choose freely enough to flood a
/// bucket, so rustc's fast non-keyed hash is used instead of SipHash.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// Below this many entries a kept table is never cut back.
const KEEP_ENTRIES: usize = 1024;

/// Whether a table of `capacity` that held `used` entries this tick should be cut back to
/// twice that: tables keep their allocation from one tick to the next, but not one sized for a
/// burst long gone (under a steady load nothing is ever cut back).
pub fn oversized(capacity: usize, used: usize) -> bool {
    capacity > 4 * used.max(KEEP_ENTRIES)
}

/// Cuts an oversized kept vector back (see [`oversized`]).
pub fn trim_vec<T>(v: &mut Vec<T>, used: usize) {
    if oversized(v.capacity(), used) {
        v.shrink_to(2 * used.max(KEEP_ENTRIES));
    }
}

/// Cuts an oversized kept map back (see [`oversized`]).
pub fn trim_map<K: Eq + std::hash::Hash, V>(m: &mut FastMap<K, V>, used: usize) {
    if oversized(m.capacity(), used) {
        m.shrink_to(2 * used.max(KEEP_ENTRIES));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kept_tables_are_cut_back_after_a_burst_only() {
        let mut v: Vec<u64> = Vec::with_capacity(100_000);
        // Steady use near the capacity, or anything below the floor: kept.
        trim_vec(&mut v, 30_000);
        assert!(v.capacity() >= 100_000);
        let mut small: Vec<u64> = Vec::with_capacity(4_000);
        trim_vec(&mut small, 0);
        assert!(small.capacity() >= 4_000);
        // The burst is over: cut to twice what was used.
        trim_vec(&mut v, 5_000);
        assert!(
            (10_000..100_000).contains(&v.capacity()),
            "{}",
            v.capacity()
        );

        let mut m: FastMap<u32, u64> = FastMap::default();
        m.extend((0..50_000).map(|i| (i, 0)));
        m.clear();
        trim_map(&mut m, 100);
        assert!(
            m.capacity() < 50_000 && m.capacity() >= 2_048,
            "{}",
            m.capacity()
        );
    }
}

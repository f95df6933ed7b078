//! Tables that live from one tick to the next: the hash map they use, and the rule by which
//! a table kept allocated is cut back after a burst (the attribution here, the eBPF source's
//! reconciliation in kepler-ebpf).

/// Maps looked up once or twice per process per tick. Keys are pids and start times, and ids
/// from cgroup paths or command lines: nothing an outsider can choose freely enough to flood a
/// bucket, so rustc's fast non-keyed hash is used instead of SipHash.
pub type FastMap<K, V> = rustc_hash::FxHashMap<K, V>;

/// A kept table this small (its capacity in bytes) is never cut back: under this, the faults
/// of growing it again would cost more than the memory.
const KEEP_BYTES: usize = 64 << 10;

/// Whether a table of `capacity` entries of `entry_bytes` each that held `used` entries this
/// tick should be cut back to twice that: tables keep their allocation from one tick to the
/// next, but not one sized for a burst long gone (under a steady load nothing is ever cut
/// back). The floor is in bytes, not entries: a few thousand entries of a hundred bytes and
/// more, kept after a burst by each of several tables, were megabytes of resident memory.
pub fn oversized(capacity: usize, used: usize, entry_bytes: usize) -> bool {
    capacity > used.saturating_mul(4) && capacity.saturating_mul(entry_bytes.max(1)) > KEEP_BYTES
}

/// What an oversized table is cut back to: twice what it held, and no less than the floor.
fn cut_to(used: usize, entry_bytes: usize) -> usize {
    used.saturating_mul(2)
        .max(KEEP_BYTES / 4 / entry_bytes.max(1))
}

/// Cuts an oversized kept vector back (see [`oversized`]).
pub fn trim_vec<T>(v: &mut Vec<T>, used: usize) {
    let bytes = std::mem::size_of::<T>();
    if oversized(v.capacity(), used, bytes) {
        v.shrink_to(cut_to(used, bytes));
    }
}

/// Cuts an oversized kept map back (see [`oversized`]).
pub fn trim_map<K: Eq + std::hash::Hash, V>(m: &mut FastMap<K, V>, used: usize) {
    let bytes = std::mem::size_of::<(K, V)>();
    if oversized(m.capacity(), used, bytes) {
        m.shrink_to(cut_to(used, bytes));
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
        assert!(m.capacity() < 50_000, "{}", m.capacity());
        assert!(m.capacity() >= 200, "{}", m.capacity());
    }

    #[test]
    fn the_floor_is_in_bytes() {
        // 4,000 entries of 144 bytes: 576 KB kept for 10 entries is cut back...
        let mut wide: Vec<[u8; 144]> = Vec::with_capacity(4_000);
        trim_vec(&mut wide, 10);
        assert!(wide.capacity() < 4_000, "{}", wide.capacity());
        assert!(wide.capacity() * 144 <= 64 << 10, "{}", wide.capacity());
        // ...while 4,000 of 8 bytes (32 KB) stay, as does a wide table in steady use.
        let mut narrow: Vec<u64> = Vec::with_capacity(4_000);
        trim_vec(&mut narrow, 10);
        assert!(narrow.capacity() >= 4_000);
        let mut busy: Vec<[u8; 144]> = Vec::with_capacity(4_000);
        trim_vec(&mut busy, 1_500);
        assert!(busy.capacity() >= 4_000);
        assert!(!oversized(usize::MAX, usize::MAX, usize::MAX));
        assert!(oversized(usize::MAX, 0, 1));
    }
}

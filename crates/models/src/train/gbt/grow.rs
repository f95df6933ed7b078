//! One tree, grown level by level from gradient histograms.
//!
//! Each node owns a contiguous range of a row-index array (a split partitions its range in
//! place, keeping row order), so a node's histogram is one pass over its own rows. Of two
//! siblings only the smaller is summed; the other is its parent's histogram minus it. All
//! buffers live in a [`Workspace`] that every tree of a fit reuses.
//!
//! Once the root is split, every node's rows are in order of their bins of the root's split
//! feature (the root takes that order from [`Binned::by_bin`], and partitions are stable):
//! a split on that feature needs no partition, its left rows come first. About half the
//! rows partitioned on Full, all of them on a one-feature group (−40 % fit time there).
//!
//! Gradients are summed as fixed-point integers ([`quantize`]): integer sums are exact, so
//! a bin's sum is the same whether it was added up row by row, got by subtraction, or
//! accumulated over bins in the split scan, and the split chosen is the one a direct sum
//! over the node's rows gives. It also takes the floating-point add, whose latency bounded
//! the scan, out of the loops. A bin's gradient sum and row count share one integer
//! ([`Pack`]), so a histogram sum, subtraction or scan moves one number per bin.

use super::bins::Binned;
use super::quant::quantize;
use super::scan::{avx2_available, scan, Node as ScanNode, Scratch};
use super::{GbtParams, Tree};

/// Gradient sum and row count of one bin, packed as `q * 2^bits + n` (see [`Pack`]).
pub(super) type Bin = i64;

/// How a row's gradient `q` and its count 1 share one integer: `q * 2^bits + 1`. Sums of
/// packed values are the packed sums, exactly, while the count fits in `bits` (`2^bits`
/// exceeds the fit's rows) and the gradient sum in the rest ([`quantize`] sees to it).
#[derive(Debug, Clone, Copy)]
pub(super) struct Pack {
    pub(super) bits: u32,
}

impl Pack {
    /// Room for counts up to `rows`.
    pub(super) fn for_rows(rows: usize) -> Pack {
        Pack {
            bits: usize::BITS - rows.leading_zeros(),
        }
    }

    /// The row count (the hessian sum: squared error's hessian is 1 per row).
    fn n(self, v: Bin) -> i64 {
        v & ((1i64 << self.bits) - 1)
    }

    /// The gradient sum, in `q` units (the shift floors: the count below is not negative).
    pub(super) fn q(self, v: Bin) -> i64 {
        v >> self.bits
    }
}

/// A node that may still be split: its tree id, its rows `rows[start..end]`, its sums, and
/// the histogram slot of its parent (children come in pairs, left then right).
#[derive(Debug, Clone, Copy)]
struct Open {
    id: usize,
    start: usize,
    end: usize,
    q: i64,
    n: i64,
    parent_slot: usize,
}

/// Buffers shared by all trees of one fit.
#[derive(Debug, Default)]
pub(super) struct Workspace {
    rows: Vec<u32>,
    /// The rows of the next level: each split node's range, partitioned.
    next_rows: Vec<u32>,
    /// This tree's gradients in fixed point.
    q: Vec<i64>,
    hist: Vec<Bin>,
    next_hist: Vec<Bin>,
    open: Vec<Open>,
    next_open: Vec<Open>,
    /// Per open node and feature, the bins `[lo, hi)` (within the feature) that can hold
    /// its rows: its parent's occupied bins, cut at the split for the split feature. The
    /// split search reads only these and narrows them to the occupied ones.
    ranges: Vec<[u32; 2]>,
    next_ranges: Vec<[u32; 2]>,
    scratch: Scratch,
}

/// This tree's fixed point: the gradient a unit of `q` stands for, and the packing.
#[derive(Debug, Clone, Copy)]
struct Fixed {
    unit: f64,
    pack: Pack,
    /// Whether the split scan may use AVX2.
    avx2: bool,
}

struct Split {
    /// Loss reduction, in gradient units.
    gain: f64,
    feature: usize,
    /// First bin of the right child.
    bin: usize,
    ql: i64,
    nl: i64,
}

/// Adds the node's rows to its histogram (zeroed first within `ranges`).
///
/// Kept out of line, as [`best_split`], [`partition`] and [`leaf`] are: inlined into
/// [`grow`]'s level loop they made a fit 3–11 % slower (nx12 release harness; part of it
/// may be code layout).
#[inline(never)]
fn build_hist(hist: &mut [Bin], ranges: &[[u32; 2]], rows: &[u32], data: &Binned, q: &[i64]) {
    // Only the bins the node's rows can fall in are read later (`ranges`): zeroing the
    // rest of a 1 000-bin histogram for a 30-row node was most of a deep node's cost.
    for (range, off) in ranges.iter().zip(&data.offset) {
        let [lo, hi] = *range;
        if let Some(bins) = hist.get_mut(off + lo as usize..off + hi as usize) {
            bins.fill(0);
        }
    }
    // The feature count as a constant for the usual groups: each row's adds are then
    // straight-line code. With a loop of unknown length per row this function took 1.9×
    // the time on Full (nx12 release harness: 842 vs 454 profile samples, the fit 8 %).
    match data.n_features {
        1 => add_rows::<1>(hist, rows, data, q),
        2 => add_rows::<2>(hist, rows, data, q),
        3 => add_rows::<3>(hist, rows, data, q),
        4 => add_rows::<4>(hist, rows, data, q),
        nf => {
            for &r in rows {
                let r = r as usize;
                let qr = q.get(r).copied().unwrap_or(0);
                for &b in data.hist_index.get(r * nf..(r + 1) * nf).unwrap_or(&[]) {
                    if let Some(e) = hist.get_mut(b as usize) {
                        *e += qr;
                    }
                }
            }
        }
    }
}

/// [`build_hist`]'s adds for `NF` features.
#[inline(always)]
fn add_rows<const NF: usize>(hist: &mut [Bin], rows: &[u32], data: &Binned, q: &[i64]) {
    for &r in rows {
        let r = r as usize;
        let qr = q.get(r).copied().unwrap_or(0);
        let index = data.hist_index.get(r * NF..(r + 1) * NF);
        let Some(index) = index.and_then(|s| <&[u32; NF]>::try_from(s).ok()) else {
            continue;
        };
        for &b in index {
            if let Some(e) = hist.get_mut(b as usize) {
                *e += qr;
            }
        }
    }
}

/// `q` squared, as the gain computes it.
fn sq(q: i64) -> f64 {
    let v = q as f64;
    v * v
}

/// The best split of a node from its histogram. Candidates sit between consecutive bins
/// that hold rows of this node, with the right bin's lower bound as threshold: XGBoost's
/// exact greedy search over these values. Narrows `ranges` (the node's, per feature) to
/// the bins that hold its rows.
///
/// Gains are compared as `ql^2/(nl+lambda) + qr^2/(nr+lambda)` in `q` units; the parent's
/// score, the same for every candidate, is subtracted once from the winner. The scan
/// scores the split before every bin, empty or not, without a branch on emptiness (deep
/// nodes leave most bins empty in no predictable pattern): an empty bin's split is the
/// same row split as the next occupied bin's, so the winner moves on to that bin, and the
/// tree is the one a scan of occupied bins alone picks, ties included (the first of equal
/// gains wins, in feature then bin order).
#[inline(never)]
fn best_split(
    hist: &[Bin],
    node: &Open,
    ranges: &mut [[u32; 2]],
    data: &Binned,
    p: &GbtParams,
    fixed: Fixed,
    scratch: &mut Scratch,
) -> Option<Split> {
    let Fixed { unit, pack, .. } = fixed;
    // Children need at least this many rows (unit hessians: the count is the weight); a
    // NaN minimum admits no split, as comparisons with it fail.
    let mcw = p.min_child_weight;
    if mcw.is_nan() {
        return None;
    }
    let min_n = mcw.ceil().clamp(1.0, f64::from(u32::MAX)) as i64;
    let n = node.n;
    let scan_node = ScanNode {
        n,
        q: node.q,
        min_n,
        bits: pack.bits,
        lambda: p.lambda,
    };
    let mut best: Option<Split> = None;
    for (f, range) in ranges.iter_mut().enumerate() {
        let first = data.offset.get(f).copied().unwrap_or(0);
        let [lo, hi] = *range;
        let bins = hist
            .get(first + lo as usize..first + hi as usize)
            .unwrap_or(&[]);
        let found = scan(bins, scan_node, fixed.avx2, scratch);
        if found.start >= bins.len() {
            *range = [lo, lo];
            continue;
        }
        *range = [lo + found.start as u32, lo + found.end as u32];
        if found.gain == f64::NEG_INFINITY || best.as_ref().is_some_and(|b| found.gain <= b.gain) {
            continue;
        }
        best = Some(Split {
            gain: found.gain,
            feature: f,
            bin: lo as usize + found.at,
            ql: pack.q(found.left),
            nl: pack.n(found.left),
        });
    }
    let best = best?;
    // The parent's score is `q² · 1/(n + λ)` (squared error's hessian is 1 per row, so the
    // hessian sum is the row count). Scaling by a power of two is exact: the sign and order
    // of gains are those of the q-unit ones.
    let parent = sq(node.q) * (1.0 / (n as f64 + p.lambda));
    Some(Split {
        gain: (best.gain - parent) * unit * unit,
        ..best
    })
}

/// Stable partition of `src` into `dst` (as long): first the `n_left` rows whose bin in
/// `col` is below `bin`, then the others. The split's left count is known from the
/// histogram (exact), so each row has its slot without a second pass, and the slot is
/// picked by a select: which side a row goes to is a coin flip to the branch predictor.
#[inline(never)]
fn partition(src: &[u32], dst: &mut [u32], col: &[u16], bin: usize, n_left: usize) {
    let (mut left, mut right) = (0, n_left);
    for &r in src {
        let goes_left = col.get(r as usize).is_some_and(|b| usize::from(*b) < bin);
        let at = if goes_left { left } else { right };
        if let Some(slot) = dst.get_mut(at) {
            *slot = r;
        }
        left += usize::from(goes_left);
        right += usize::from(!goes_left);
    }
}

impl Workspace {
    fn hist_room(buf: &mut Vec<Bin>, len: usize) {
        if buf.len() < len {
            buf.resize(len, 0);
        }
    }
}

/// Grows one tree on `grad` and adds its (shrunken, `f32`) leaf weights to `pred`.
pub(super) fn grow(
    data: &Binned,
    grad: &[f64],
    p: &GbtParams,
    ws: &mut Workspace,
    pred: &mut [f64],
) -> Tree {
    let n = data.n_rows;
    let tb = data.total_bins();
    let nf = data.n_features;
    let pack = Pack::for_rows(n);
    let avx2 = avx2_available();
    let unit = quantize(grad, pack, &mut ws.q, avx2);
    let mut t = Tree::with_capacity((2usize << p.max_depth.min(12)) - 1);
    ws.rows.clear();
    ws.rows.extend(0..n as u32);
    ws.next_rows.resize(n, 0);
    // The workspace may come from a fit with other settings.
    ws.ranges.clear();
    ws.ranges
        .extend((0..nf).map(|f| [0, (data.offset[f + 1] - data.offset[f]) as u32]));
    let q = pack.q(ws.q.iter().sum());
    t.push(i64::from(i32::MAX), q as f64 * unit, n as f64, p.lambda);
    ws.open.clear();
    ws.open.push(Open {
        id: 0,
        start: 0,
        end: n,
        q,
        n: n as i64,
        parent_slot: 0,
    });
    // Zero gradients everywhere (a target the model already fits, such as a component
    // that reads 0 W) give every split zero gain: the tree is its root.
    let depth_limit = if ws.q.iter().any(|q| pack.q(*q) != 0) {
        p.max_depth
    } else {
        0
    };
    if depth_limit > 0 {
        Workspace::hist_room(&mut ws.hist, tb);
        build_hist(&mut ws.hist[..tb], &ws.ranges, &ws.rows, data, &ws.q);
    }
    // The feature whose bins the rows of every node are in order of, once the root is split.
    let mut sorted_by = None;
    for depth in 0..depth_limit {
        if ws.open.is_empty() {
            break;
        }
        ws.next_open.clear();
        ws.next_ranges.clear();
        for (slot, node) in ws.open.iter().enumerate() {
            let hist = &ws.hist[slot * tb..(slot + 1) * tb];
            let ranges = &mut ws.ranges[slot * nf..(slot + 1) * nf];
            let fixed = Fixed { unit, pack, avx2 };
            let found = best_split(hist, node, ranges, data, p, fixed, &mut ws.scratch);
            let Some(s) = found.filter(|s| s.gain > 1e-6) else {
                leaf(&mut t, node, &ws.rows, p, unit, pred);
                continue;
            };
            let (l, r) = (t.len(), t.len() + 1);
            t.left[node.id] = l as i64;
            t.right[node.id] = r as i64;
            t.feature[node.id] = s.feature;
            t.cond[node.id] = data.lower[s.feature][s.bin];
            t.loss_change[node.id] = s.gain as f32;
            let (qr, nr) = (node.q - s.ql, node.n - s.nl);
            t.push(node.id as i64, s.ql as f64 * unit, s.nl as f64, p.lambda);
            t.push(node.id as i64, qr as f64 * unit, nr as f64, p.lambda);
            let seg = &ws.rows[node.start..node.end];
            let col = &data.cols[s.feature];
            if depth + 1 == depth_limit {
                // Both children are leaves: their rows' predictions move without a partition.
                let w = [weight(s.ql, s.nl, p, unit), weight(qr, nr, p, unit)];
                for (id, w) in [l, r].into_iter().zip(w) {
                    t.cond[id] = w;
                    t.base_weight[id] = w;
                }
                let w = w.map(f64::from);
                if sorted_by == Some(s.feature) {
                    // The left rows come first.
                    let nl = usize::try_from(s.nl).map_or(0, |nl| nl.min(seg.len()));
                    let (left, right) = seg.split_at(nl);
                    for (rows, w) in [(left, w[0]), (right, w[1])] {
                        for &r in rows {
                            if let Some(v) = pred.get_mut(r as usize) {
                                *v += w;
                            }
                        }
                    }
                    continue;
                }
                for &r in seg.iter() {
                    let goes_left = col.get(r as usize).is_some_and(|b| usize::from(*b) < s.bin);
                    if let Some(v) = pred.get_mut(r as usize) {
                        *v += w[usize::from(!goes_left)];
                    }
                }
                continue;
            }
            let nl = usize::try_from(s.nl).unwrap_or(0);
            let next = &mut ws.next_rows[node.start..node.end];
            // Rows sorted by the split feature's bins need no partition: the left ones
            // come first. The root's rows take that order (partitions keep it).
            let by_bin = data.by_bin.get(s.feature).filter(|o| o.len() == next.len());
            match by_bin {
                Some(order) if depth == 0 => {
                    next.copy_from_slice(order);
                    sorted_by = Some(s.feature);
                }
                _ if sorted_by == Some(s.feature) => next.copy_from_slice(seg),
                _ => partition(seg, next, col, s.bin, nl),
            }
            let mid = node.start + nl;
            let child = |id, start, end, q, n| Open {
                id,
                start,
                end,
                q,
                n,
                parent_slot: slot,
            };
            ws.next_open.push(child(l, node.start, mid, s.ql, s.nl));
            ws.next_open.push(child(r, mid, node.end, qr, nr));
            let ranges = &ws.ranges[slot * nf..(slot + 1) * nf];
            let cut = s.bin as u32;
            let at = ws.next_ranges.len() + s.feature;
            ws.next_ranges.extend_from_slice(ranges);
            ws.next_ranges.extend_from_slice(ranges);
            ws.next_ranges[at][1] = cut;
            ws.next_ranges[at + nf][0] = cut;
        }
        // Children at the depth limit become leaves and need no histogram.
        if depth + 1 < depth_limit {
            Workspace::hist_room(&mut ws.next_hist, ws.next_open.len() * tb);
            for (k, pair) in ws.next_open.chunks_exact(2).enumerate() {
                let (a, b) = (&pair[0], &pair[1]);
                let (small, large) = if a.end - a.start <= b.end - b.start {
                    (2 * k, 2 * k + 1)
                } else {
                    (2 * k + 1, 2 * k)
                };
                let s = &ws.next_open[small];
                build_hist(
                    &mut ws.next_hist[small * tb..(small + 1) * tb],
                    &ws.next_ranges[small * nf..(small + 1) * nf],
                    &ws.next_rows[s.start..s.end],
                    data,
                    &ws.q,
                );
                let parent = &ws.hist[a.parent_slot * tb..(a.parent_slot + 1) * tb];
                let (lo, hi) = ws.next_hist.split_at_mut(small.max(large) * tb);
                let (sm, lg) = if small < large {
                    (&lo[small * tb..(small + 1) * tb], &mut hi[..tb])
                } else {
                    (&hi[..tb], &mut lo[large * tb..(large + 1) * tb])
                };
                // On the split feature the siblings' bins are disjoint: there the larger
                // one's histogram is its parent's (the smaller one's is not zeroed there).
                let split = usize::try_from(t.parent[a.id]).map_or(usize::MAX, |p| t.feature[p]);
                let large_ranges = &ws.next_ranges[large * nf..(large + 1) * nf];
                for (f, (range, off)) in large_ranges.iter().zip(&data.offset).enumerate() {
                    let at = off + range[0] as usize..off + range[1] as usize;
                    let (o, s, p) = (&mut lg[at.clone()], &sm[at.clone()], &parent[at]);
                    if f == split {
                        o.copy_from_slice(p);
                        continue;
                    }
                    for ((o, s), p) in o.iter_mut().zip(s).zip(p) {
                        *o = p - s;
                    }
                }
            }
        }
        std::mem::swap(&mut ws.rows, &mut ws.next_rows);
        std::mem::swap(&mut ws.open, &mut ws.next_open);
        std::mem::swap(&mut ws.hist, &mut ws.next_hist);
        std::mem::swap(&mut ws.ranges, &mut ws.next_ranges);
    }
    for node in &ws.open {
        leaf(&mut t, node, &ws.rows, p, unit, pred);
    }
    t
}

/// Makes `node` a leaf: its shrunken weight is its `split_conditions` value, and its rows'
/// predictions move by it as the `f32` model will predict.
#[inline(never)]
fn leaf(t: &mut Tree, node: &Open, rows: &[u32], p: &GbtParams, unit: f64, pred: &mut [f64]) {
    let w = weight(node.q, node.n, p, unit);
    t.cond[node.id] = w;
    t.base_weight[node.id] = w;
    for &r in rows.get(node.start..node.end).unwrap_or(&[]) {
        if let Some(v) = pred.get_mut(r as usize) {
            *v += f64::from(w);
        }
    }
}

/// The shrunken weight of a leaf with gradient sum `q * unit` over `n` rows.
fn weight(q: i64, n: i64, p: &GbtParams, unit: f64) -> f32 {
    (-(q as f64 * unit) / (n as f64 + p.lambda) * p.learning_rate) as f32
}

//! One tree, grown level by level from gradient histograms.
//!
//! Each node owns a contiguous range of a row-index array (a split partitions its range in
//! place), so a node's histogram is one pass over its own rows. Of two siblings only the
//! smaller is summed; the other is its parent's histogram minus it. All buffers live in a
//! [`Workspace`] that every tree of a fit reuses.

use super::bins::Binned;
use super::{GbtParams, Tree};

/// Gradient sum and row count of one bin (the hessian of squared error is 1 per row, so
/// the count is the hessian sum, and an integer indexes [`Workspace::inv`] directly).
#[derive(Debug, Clone, Copy, Default)]
struct Gh {
    g: f64,
    n: u32,
}

/// A node that may still be split: its tree id, its rows `rows[start..end]`, its sums, and
/// the histogram slot of its parent (children come in pairs, left then right).
#[derive(Debug, Clone, Copy)]
struct Open {
    id: usize,
    start: usize,
    end: usize,
    g: f64,
    h: f64,
    parent_slot: usize,
}

/// Buffers shared by all trees of one fit.
#[derive(Debug, Default)]
pub(super) struct Workspace {
    rows: Vec<u32>,
    scratch: Vec<u32>,
    hist: Vec<Gh>,
    next_hist: Vec<Gh>,
    open: Vec<Open>,
    next_open: Vec<Open>,
    /// Per open node and feature, the bins `[lo, hi)` (within the feature) that can hold
    /// its rows: its parent's occupied bins, cut at the split for the split feature. The
    /// split search reads only these and narrows them to the occupied ones.
    ranges: Vec<[u32; 2]>,
    next_ranges: Vec<[u32; 2]>,
    /// `1 / (h + lambda)` for every row count h: squared error's hessian is 1 per row, so
    /// a node's hessian sum is its row count and the gain needs no division.
    inv: Vec<f64>,
}

struct Split {
    gain: f64,
    feature: usize,
    /// First bin of the right child.
    bin: usize,
    gl: f64,
    hl: f64,
}

fn build_hist(hist: &mut [Gh], ranges: &[[u32; 2]], rows: &[u32], data: &Binned, grad: &[f64]) {
    // Only the bins the node's rows can fall in are read later (`ranges`): zeroing the
    // rest of a 1 000-bin histogram for a 30-row node was most of a deep node's cost.
    for (range, off) in ranges.iter().zip(&data.offset) {
        let [lo, hi] = *range;
        if let Some(bins) = hist.get_mut(off + lo as usize..off + hi as usize) {
            bins.fill(Gh::default());
        }
    }
    let nf = data.n_features;
    for &r in rows {
        let r = r as usize;
        let g = grad[r];
        let row_bins = &data.bins[r * nf..(r + 1) * nf];
        for (b, off) in row_bins.iter().zip(&data.offset) {
            let e = &mut hist[off + usize::from(*b)];
            e.g += g;
            e.n += 1;
        }
    }
}

/// The best split of a node from its histogram. Candidates sit between consecutive bins
/// that hold rows of this node, with the right bin's lower bound as threshold: XGBoost's
/// exact greedy search over these values. Narrows `ranges` (the node's, per feature) to
/// the bins that hold its rows.
///
/// The scan scores the split before every bin, empty or not, without a branch on
/// emptiness (deep nodes leave most bins empty in no predictable pattern, and that branch
/// mispredicted on half of them): an empty bin's split is the same row split as the next
/// occupied bin's, so the winner moves on to that bin, and the tree is the one a scan of
/// occupied bins alone picks, ties included (the first of equal gains wins). The only
/// branches left in the scan change direction once per feature.
fn best_split(
    hist: &[Gh],
    node: &Open,
    ranges: &mut [[u32; 2]],
    data: &Binned,
    p: &GbtParams,
    inv: &[f64],
) -> Option<Split> {
    // Children need at least this many rows (unit hessians: the count is the weight); a
    // NaN minimum admits no split, as comparisons with it fail.
    let mcw = p.min_child_weight;
    if mcw.is_nan() {
        return None;
    }
    let min_n = mcw.ceil().clamp(1.0, f64::from(u32::MAX)) as u32;
    let n = node.h as u32;
    // Counts index `inv`, which covers every row count of the fit; a node past it cannot
    // occur, and is not split. Both sides' counts are at most `n`, inside `inv`.
    let inv = inv.get(..=n as usize)?;
    let score = |g: f64, h: u32| g * g * inv.get(h as usize).copied().unwrap_or(0.0);
    let parent = score(node.g, n);
    let mut best: Option<Split> = None;
    for (f, range) in ranges.iter_mut().enumerate() {
        let first = data.offset.get(f).copied().unwrap_or(0);
        let [lo, hi] = *range;
        let bins = hist
            .get(first + lo as usize..first + hi as usize)
            .unwrap_or(&[]);
        // Narrow to the occupied bins: the children's bins lie within.
        let Some(skip) = bins.iter().position(|e| e.n > 0) else {
            *range = [lo, lo];
            continue;
        };
        let last = bins.iter().rposition(|e| e.n > 0).unwrap_or(skip);
        let lo = lo + skip as u32;
        *range = [lo, lo + (last - skip) as u32 + 1];
        let bins = bins.get(skip..=last).unwrap_or(&[]);
        let (mut gl, mut nl) = (0.0, 0u32);
        // (gain, bin offset in `bins`, gl, nl) of the feature's best candidate.
        let mut top = (f64::NEG_INFINITY, 0usize, 0.0, 0u32);
        for (i, e) in bins.iter().enumerate() {
            // Left counts only grow: the first bins are skipped until the left side is
            // heavy enough, and the scan ends once the right side is too light.
            if nl >= min_n {
                let Some(nr) = n.checked_sub(nl).filter(|nr| *nr >= min_n) else {
                    break;
                };
                let gain = score(gl, nl) + score(node.g - gl, nr) - parent;
                if gain > top.0 {
                    top = (gain, i, gl, nl);
                }
            }
            gl += e.g;
            nl += e.n;
        }
        if top.0 == f64::NEG_INFINITY || best.as_ref().is_some_and(|b| top.0 <= b.gain) {
            continue;
        }
        // The first occupied bin at or after the winner: it has rows to the right.
        let Some(step) = bins.iter().skip(top.1).position(|e| e.n > 0) else {
            continue;
        };
        best = Some(Split {
            gain: top.0,
            feature: f,
            bin: lo as usize + top.1 + step,
            gl: top.2,
            hl: f64::from(top.3),
        });
    }
    best
}

/// Stable in-place partition of `seg`: rows whose `feature` bin is below `bin` first.
/// Returns the number of those. Every row is written to both sides and only the cursor of
/// its side moves: which side a row goes to is a coin flip to the branch predictor.
fn partition(
    seg: &mut [u32],
    scratch: &mut Vec<u32>,
    data: &Binned,
    feature: usize,
    bin: usize,
) -> usize {
    scratch.clear();
    scratch.resize(seg.len(), 0);
    let nf = data.n_features;
    let (mut left, mut right) = (0, 0);
    for i in 0..seg.len() {
        let r = seg[i];
        let b = data.bins.get(r as usize * nf + feature).copied();
        let goes_left = b.is_some_and(|b| usize::from(b) < bin);
        // left <= i: this overwrites a row already read.
        seg[left] = r;
        scratch[right] = r;
        left += usize::from(goes_left);
        right += usize::from(!goes_left);
    }
    seg[left..].copy_from_slice(&scratch[..right]);
    left
}

impl Workspace {
    fn hist_room(buf: &mut Vec<Gh>, len: usize) {
        if buf.len() < len {
            buf.resize(len, Gh::default());
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
    let mut t = Tree::default();
    ws.rows.clear();
    ws.rows.extend(0..n as u32);
    let nf = data.n_features;
    if ws.inv.len() != n + 1 {
        ws.inv = (0..=n).map(|h| 1.0 / (h as f64 + p.lambda)).collect();
    }
    ws.ranges.clear();
    ws.ranges
        .extend((0..nf).map(|f| [0, (data.offset[f + 1] - data.offset[f]) as u32]));
    let g: f64 = grad.iter().sum();
    t.push(i64::from(i32::MAX), g, n as f64, p.lambda);
    ws.open.clear();
    ws.open.push(Open {
        id: 0,
        start: 0,
        end: n,
        g,
        h: n as f64,
        parent_slot: 0,
    });
    Workspace::hist_room(&mut ws.hist, tb);
    build_hist(&mut ws.hist[..tb], &ws.ranges, &ws.rows, data, grad);
    for depth in 0..p.max_depth {
        if ws.open.is_empty() {
            break;
        }
        ws.next_open.clear();
        ws.next_ranges.clear();
        for (slot, node) in ws.open.iter().enumerate() {
            let hist = &ws.hist[slot * tb..(slot + 1) * tb];
            let ranges = &mut ws.ranges[slot * nf..(slot + 1) * nf];
            let found = best_split(hist, node, ranges, data, p, &ws.inv);
            let Some(s) = found.filter(|s| s.gain > 1e-6) else {
                leaf(&mut t, node, &ws.rows, p, pred);
                continue;
            };
            let (l, r) = (t.len(), t.len() + 1);
            t.left[node.id] = l as i64;
            t.right[node.id] = r as i64;
            t.feature[node.id] = s.feature;
            t.cond[node.id] = data.lower[s.feature][s.bin];
            t.loss_change[node.id] = s.gain as f32;
            let (gr, hr) = (node.g - s.gl, node.h - s.hl);
            t.push(node.id as i64, s.gl, s.hl, p.lambda);
            t.push(node.id as i64, gr, hr, p.lambda);
            let seg = &mut ws.rows[node.start..node.end];
            let mid = node.start + partition(seg, &mut ws.scratch, data, s.feature, s.bin);
            let child = |id, start, end, g, h| Open {
                id,
                start,
                end,
                g,
                h,
                parent_slot: slot,
            };
            ws.next_open.push(child(l, node.start, mid, s.gl, s.hl));
            ws.next_open.push(child(r, mid, node.end, gr, hr));
            let ranges = &ws.ranges[slot * nf..(slot + 1) * nf];
            let cut = s.bin as u32;
            let at = ws.next_ranges.len() + s.feature;
            ws.next_ranges.extend_from_slice(ranges);
            ws.next_ranges.extend_from_slice(ranges);
            ws.next_ranges[at][1] = cut;
            ws.next_ranges[at + nf][0] = cut;
        }
        // Children at the depth limit become leaves and need no histogram.
        if depth + 1 < p.max_depth {
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
                    &ws.rows[s.start..s.end],
                    data,
                    grad,
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
                        o.g = p.g - s.g;
                        o.n = p.n.wrapping_sub(s.n);
                    }
                }
            }
        }
        std::mem::swap(&mut ws.open, &mut ws.next_open);
        std::mem::swap(&mut ws.hist, &mut ws.next_hist);
        std::mem::swap(&mut ws.ranges, &mut ws.next_ranges);
    }
    for node in &ws.open {
        leaf(&mut t, node, &ws.rows, p, pred);
    }
    t
}

/// Makes `node` a leaf: its shrunken weight is its `split_conditions` value, and its rows'
/// predictions move by it as the `f32` model will predict.
fn leaf(t: &mut Tree, node: &Open, rows: &[u32], p: &GbtParams, pred: &mut [f64]) {
    let w = (-node.g / (node.h + p.lambda) * p.learning_rate) as f32;
    t.cond[node.id] = w;
    t.base_weight[node.id] = w;
    for &r in &rows[node.start..node.end] {
        pred[r as usize] += f64::from(w);
    }
}

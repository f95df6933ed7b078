//! One tree, grown level by level from gradient histograms.
//!
//! Each node owns a contiguous range of a row-index array (a split partitions its range in
//! place), so a node's histogram is one pass over its own rows. Of two siblings only the
//! smaller is summed; the other is its parent's histogram minus it. All buffers live in a
//! [`Workspace`] that every tree of a fit reuses.

use super::bins::Binned;
use super::{GbtParams, Tree};

/// Gradient and hessian sums of one bin (the hessian of squared error is 1 per row).
#[derive(Debug, Clone, Copy, Default)]
struct Gh {
    g: f64,
    h: f64,
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

fn build_hist(hist: &mut [Gh], rows: &[u32], data: &Binned, grad: &[f64]) {
    hist.fill(Gh::default());
    let nf = data.n_features;
    for &r in rows {
        let r = r as usize;
        let g = grad[r];
        let row_bins = &data.bins[r * nf..(r + 1) * nf];
        for (b, off) in row_bins.iter().zip(&data.offset) {
            let e = &mut hist[off + usize::from(*b)];
            e.g += g;
            e.h += 1.0;
        }
    }
}

/// The best split of a node from its histogram. Candidates sit between consecutive bins
/// that hold rows of this node, with the right bin's lower bound as threshold: XGBoost's
/// exact greedy search over these values. Narrows `ranges` (the node's, per feature) to
/// the bins that hold its rows.
fn best_split(
    hist: &[Gh],
    node: &Open,
    ranges: &mut [[u32; 2]],
    data: &Binned,
    p: &GbtParams,
    inv: &[f64],
) -> Option<Split> {
    // Row counts index `inv`; a count past it (never: it covers every row) divides.
    let score =
        |g: f64, h: f64| g * g * inv.get(h as usize).copied().unwrap_or(1.0 / (h + p.lambda));
    let parent = score(node.g, node.h);
    let mut best: Option<Split> = None;
    for (f, range) in ranges.iter_mut().enumerate() {
        let (mut gl, mut hl) = (0.0, 0.0);
        let first = data.offset[f];
        let [lo, hi] = *range;
        let (mut seen_lo, mut seen_hi) = (hi, lo);
        for k in lo as usize..hi as usize {
            let e = hist[first + k];
            if e.h == 0.0 {
                continue;
            }
            seen_lo = seen_lo.min(k as u32);
            seen_hi = k as u32 + 1;
            let hr = node.h - hl;
            if hl > 0.0 && hl >= p.min_child_weight && hr >= p.min_child_weight {
                let gain = score(gl, hl) + score(node.g - gl, hr) - parent;
                if best.as_ref().is_none_or(|b| gain > b.gain) {
                    best = Some(Split {
                        gain,
                        feature: f,
                        bin: k,
                        gl,
                        hl,
                    });
                }
            }
            gl += e.g;
            hl += e.h;
        }
        *range = [seen_lo, seen_hi.max(seen_lo)];
    }
    best
}

/// Stable in-place partition of `seg`: rows whose `feature` bin is below `bin` first.
/// Returns the number of those.
fn partition(
    seg: &mut [u32],
    scratch: &mut Vec<u32>,
    data: &Binned,
    feature: usize,
    bin: usize,
) -> usize {
    scratch.clear();
    let nf = data.n_features;
    let mut left = 0;
    for i in 0..seg.len() {
        let r = seg[i];
        if usize::from(data.bins[r as usize * nf + feature]) < bin {
            seg[left] = r;
            left += 1;
        } else {
            scratch.push(r);
        }
    }
    seg[left..].copy_from_slice(scratch);
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
    build_hist(&mut ws.hist[..tb], &ws.rows, data, grad);
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
                for ((o, s), p) in lg.iter_mut().zip(sm).zip(parent) {
                    o.g = p.g - s.g;
                    o.h = p.h - s.h;
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

//! Quantile bins per feature: the histogram tree builder sums gradients per bin instead of
//! per distinct value.
//!
//! A bin's lower bound is a value seen in training, and a row is in bin `b` when
//! `lo[b] <= x < lo[b + 1]` compared as `f32`, so a split "bins < b go left" is the
//! predictor's `x < lo[b]` and routes every training row at inference as it was routed while
//! the tree was grown. A feature with at most `max_bin` distinct values gets one bin per
//! value, which makes the split search exact for it.

/// Bin indices of every row, in the two layouts the tree builder reads, and each feature's
/// bin bounds.
#[derive(Debug)]
pub(super) struct Binned {
    pub n_rows: usize,
    pub n_features: usize,
    /// `hist_index[row * n_features + f]`: the row's bin of feature `f` as an index into a
    /// node histogram (`offset[f]` added), so a histogram sum reads one row's bins in a
    /// run and adds no offsets.
    pub hist_index: Vec<u32>,
    /// `cols[f][row]`: the bin within feature `f`; the row partition reads one feature.
    pub cols: Vec<Vec<u16>>,
    /// `by_bin[f]`: the rows in order of their bin of feature `f` (rows in order within a
    /// bin): split on `f`, the rows of its left side come first.
    pub by_bin: Vec<Vec<u32>>,
    /// Lower bound of each bin, per feature.
    pub lower: Vec<Vec<f32>>,
    /// Where each feature's bins start in a node histogram; the last entry is its length.
    pub offset: Vec<usize>,
}

/// Lower bounds of at most `max_bin` bins over `col`: every distinct value when there are
/// few enough, else values at evenly spaced ranks (each row weighs the same: squared error
/// has unit hessians).
fn lower_bounds(col: &[f32], max_bin: usize) -> Vec<f32> {
    let mut sorted: Vec<f32> = col.iter().copied().filter(|v| !v.is_nan()).collect();
    sorted.sort_unstable_by(f32::total_cmp);
    let mut distinct = sorted.clone();
    distinct.dedup();
    if distinct.len() <= max_bin {
        return distinct;
    }
    let n = sorted.len();
    let mut lo: Vec<f32> = (0..max_bin)
        .filter_map(|b| sorted.get(b * n / max_bin).copied())
        .collect();
    lo.dedup();
    lo
}

fn bin_of(lower: &[f32], v: f32) -> usize {
    // NaN reads as "not less than" every threshold at inference, so it goes right: the last bin.
    if v.is_nan() {
        return lower.len().saturating_sub(1);
    }
    lower.partition_point(|l| *l <= v).saturating_sub(1)
}

/// Row indices in order of their bin in `col` (a counting sort: stable).
fn rows_by_bin(col: &[u16], bins: usize) -> Vec<u32> {
    let mut start = vec![0usize; bins + 1];
    for b in col {
        if let Some(c) = start.get_mut(usize::from(*b) + 1) {
            *c += 1;
        }
    }
    for i in 1..start.len() {
        start[i] += start[i - 1];
    }
    let mut out = vec![0u32; col.len()];
    for (r, b) in col.iter().enumerate() {
        if let Some(at) = start.get_mut(usize::from(*b)) {
            if let Some(slot) = out.get_mut(*at) {
                // Fits: rows are indexed by u32 throughout.
                *slot = r as u32;
            }
            *at += 1;
        }
    }
    out
}

impl Binned {
    /// Bins `cols` (features, each `n_rows` long); `max_bin` is clamped to 2..=65536.
    pub fn new(cols: &[Vec<f32>], n_rows: usize, max_bin: usize) -> Binned {
        let max_bin = max_bin.clamp(2, usize::from(u16::MAX) + 1);
        let n_features = cols.len();
        let lower: Vec<Vec<f32>> = cols.iter().map(|c| lower_bounds(c, max_bin)).collect();
        let mut offset = Vec::with_capacity(n_features + 1);
        let mut at = 0;
        for lo in &lower {
            offset.push(at);
            at += lo.len().max(1);
        }
        offset.push(at);
        let binned: Vec<Vec<u16>> = cols
            .iter()
            .zip(&lower)
            // Fits: a feature has at most 65536 bins.
            .map(|(col, lo)| {
                col.iter()
                    .take(n_rows)
                    .map(|v| bin_of(lo, *v) as u16)
                    .collect()
            })
            .collect();
        let mut hist_index = vec![0u32; n_rows * n_features];
        for (f, (col, off)) in binned.iter().zip(&offset).enumerate() {
            for (i, b) in col.iter().enumerate() {
                // Fits: u32 covers 65536 bins for each of up to 65536 features.
                hist_index[i * n_features + f] = (off + usize::from(*b)) as u32;
            }
        }
        let by_bin = binned
            .iter()
            .zip(&lower)
            .map(|(col, lo)| rows_by_bin(col, lo.len()))
            .collect();
        Binned {
            n_rows,
            n_features,
            hist_index,
            by_bin,
            cols: binned,
            lower,
            offset,
        }
    }

    /// Histogram length: all features' bins.
    pub fn total_bins(&self) -> usize {
        self.offset.last().copied().unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bins_are_exact_when_few_values_and_quantiles_otherwise() {
        let few: Vec<f32> = [3.0, 1.0, 2.0, 1.0, 3.0].to_vec();
        let many: Vec<f32> = (0..1000).map(|i| i as f32).collect();
        let b = Binned::new(&[few.clone(), many[..5].to_vec()], 5, 4);
        assert_eq!(b.lower[0], vec![1.0, 2.0, 3.0]);
        assert_eq!(&b.cols[0][..2], &[2, 0]);
        // Feature 1's bins follow feature 0's three in a histogram.
        assert_eq!(&b.hist_index[..4], &[2, 3, 0, 3 + 1]);
        let q = Binned::new(std::slice::from_ref(&many), 1000, 10);
        assert_eq!(q.lower[0].len(), 10);
        // Every row's bin holds it: lo[b] <= x < lo[b + 1].
        for (i, v) in many.iter().enumerate() {
            let b = usize::from(q.cols[0][i]);
            assert!(q.lower[0][b] <= *v);
            assert!(q.lower[0].get(b + 1).is_none_or(|hi| v < hi));
        }
        assert_eq!(q.total_bins(), 10);
    }
}

//! The split scan over one feature's bins of one node: the running left sums, the gain of
//! the split before every bin, the first best, and where the node's rows end.
//!
//! A portable version and an AVX2 one (picked at run time) that agree exactly. The AVX2
//! version first packs the occupied bins together (an empty bin's split is the same row
//! split as the next occupied bin's, and deep nodes leave about half the bins of their
//! range empty), then scores four candidates at a time with the same `f64` operations in
//! the same order as the portable loop ([`score`]: one division per candidate over a common
//! denominator; a lookup of `1 / (h + lambda)` needs gathers, slow on the AMD machines this
//! runs on), converting counts and gradient sums to `f64` exactly (they are below 2^51, see
//! [`super::quant::quantize`]), and keeps the first of equal gains. It also returns the
//! winner's left sums and the first occupied bin, which the grower used to find with two
//! more passes over the bins.

/// The node a feature's bins are scanned for.
#[derive(Debug, Clone, Copy)]
pub(super) struct Node {
    /// Rows of the node.
    pub n: i64,
    /// Gradient sum of the node, in `q` units (`|q| <= 2^51`).
    pub q: i64,
    /// Fewest rows a child may have (at least 1).
    pub min_n: i64,
    /// Low bits of a packed bin that hold its count (see `grow::Pack`).
    pub bits: u32,
    /// L2 penalty on leaf weights.
    pub lambda: f64,
}

/// What a scan finds.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(super) struct Found {
    /// Best gain, `ql^2/(nl+lambda) + qr^2/(nr+lambda)` in `q` units; −∞ when no split
    /// leaves both children `min_n` rows.
    pub gain: f64,
    /// The best split is before this bin, an occupied one (the first of equal gains).
    pub at: usize,
    /// The packed sums of the bins before `at`: the best split's left side.
    pub left: i64,
    /// The first occupied bin (the length when there is none).
    pub start: usize,
    /// One past the bin where the node's count is reached: its last occupied bin.
    pub end: usize,
}

fn count(v: i64, bits: u32) -> i64 {
    v & ((1i64 << bits) - 1)
}

fn grad(v: i64, bits: u32) -> i64 {
    v >> bits
}

/// A candidate's score `ql²/(nl+λ) + qr²/(nr+λ)` (gradient sums, counts, λ), over one
/// common denominator: one division instead of two (the divisions bounded the scan).
/// Every scan and the reference grower score with this, in this order of operations.
#[inline(always)]
pub(super) fn score(ql: f64, qr: f64, nl: f64, nr: f64, lambda: f64) -> f64 {
    let (a, b) = (nl + lambda, nr + lambda);
    (ql * ql * b + qr * qr * a) / (a * b)
}

/// Fewer bins than this are scanned by the portable loop: the AVX2 one's setup and final
/// merge cost more than it saves on them.
const SHORT: usize = 16;

/// Room the AVX2 scan needs for `bins` bins of one feature.
#[derive(Debug, Default)]
pub(super) struct Scratch {
    sums: Vec<i64>,
    at: Vec<i64>,
}

/// Scans `bins` (packed sums; an empty bin is 0) of a node, which hold its rows.
pub(super) fn scan(bins: &[i64], node: Node, avx2: bool, scratch: &mut Scratch) -> Found {
    #[cfg(target_arch = "x86_64")]
    if avx2 && node.min_n >= 1 && bins.len() >= SHORT {
        // Whole lanes are stored past the last packed bin.
        let room = bins.len() + 8;
        scratch.sums.resize(room.max(scratch.sums.len()), 0);
        scratch.at.resize(room.max(scratch.at.len()), 0);
        // SAFETY: `avx2` is true only where `is_x86_feature_detected!("avx2")` said so
        // (see `avx2_available`), and the scratch has the room the function needs.
        return unsafe { x86::scan_avx2(bins, node, &mut scratch.sums, &mut scratch.at) };
    }
    let _ = (avx2, scratch);
    scan_portable(bins, node)
}

/// Whether [`scan`] may take its AVX2 path on this CPU.
pub(super) fn avx2_available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// The portable scan: left counts only grow, so the first bins are summed until the left
/// side is heavy enough, and scoring ends once the right side is too light.
pub(super) fn scan_portable(bins: &[i64], node: Node) -> Found {
    let Node {
        n, q, min_n, bits, ..
    } = node;
    let len = bins.len();
    let (mut left, mut i) = (0i64, 0usize);
    // A node lighter than two children stops where its count is reached.
    while i < len && count(left, bits) < min_n.min(n) {
        left += bins[i];
        i += 1;
    }
    let mut top = (f64::NEG_INFINITY, 0usize, 0i64);
    while i < len {
        let (ql, nl) = (grad(left, bits), count(left, bits));
        let nr = n - nl;
        if nr < min_n {
            break;
        }
        let gain = score(
            ql as f64,
            (q - ql) as f64,
            nl as f64,
            nr as f64,
            node.lambda,
        );
        // Selects, not a branch: while gains still rise the branch mispredicted often.
        let better = gain > top.0;
        top.0 = if better { gain } else { top.0 };
        top.1 = if better { i } else { top.1 };
        top.2 = if better { left } else { top.2 };
        left += bins[i];
        i += 1;
    }
    while i < len && count(left, bits) < n {
        left += bins[i];
        i += 1;
    }
    // Empty bins' candidates repeat the next occupied bin's: that bin is the split.
    let step = bins.iter().skip(top.1).position(|e| *e != 0).unwrap_or(0);
    Found {
        gain: top.0,
        at: top.1 + step,
        left: top.2,
        start: bins.iter().position(|e| *e != 0).unwrap_or(len),
        end: i,
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{count, Found, Node};
    use std::arch::x86_64::*;

    /// 1.5 * 2^52: an integer `v` with `|v| <= 2^51` added to its bit pattern reads as
    /// `1.5 * 2^52 + v` exactly, so subtracting it converts `v` to `f64` exactly.
    const MAGIC: f64 = 6_755_399_441_055_744.0;
    /// 2^52: the same for integers in `0..2^52`, set as the low bits.
    const TWO52: f64 = 4_503_599_627_370_496.0;

    /// For each 4-bit mask of occupied lanes, the 32-bit elements that move them to the
    /// front (`_mm256_permutevar8x32_epi32`).
    const PACK: [[i32; 8]; 16] = {
        let mut t = [[0i32; 8]; 16];
        let mut m = 0;
        while m < 16 {
            let mut k = 0;
            let mut lane = 0;
            while lane < 4 {
                if m & (1 << lane) != 0 {
                    t[m][2 * k] = 2 * lane;
                    t[m][2 * k + 1] = 2 * lane + 1;
                    k += 1;
                }
                lane += 1;
            }
            m += 1;
        }
        t
    };

    /// # Safety
    /// The CPU must support AVX2; `sums` and `at` hold at least `bins.len() + 8` values.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn scan_avx2(
        bins: &[i64],
        node: Node,
        sums: &mut [i64],
        at: &mut [i64],
    ) -> Found {
        // SAFETY: one block for the whole body (the intrinsics were all `unsafe` before Rust
        // 1.87, older than the workspace's MSRV). Memory is touched by unaligned loads of
        // four `i64` within `bins` (whole chunks), and stores of four within `sums` and
        // `at` at offsets at most the number of occupied bins so far, < `bins.len()`, with
        // room for four more (the caller's contract), and loads of the packed values in
        // whole chunks below that room.
        unsafe {
            let Node {
                n,
                q,
                min_n,
                bits,
                lambda,
            } = node;
            // Pack the occupied bins and their indices to the front.
            let zero = _mm256_setzero_si256();
            let mut k = 0usize;
            let mut idx = _mm256_setr_epi64x(0, 1, 2, 3);
            let four = _mm256_set1_epi64x(4);
            let chunks = bins.chunks_exact(4);
            let tail = chunks.remainder();
            let mut sum = zero;
            for c in chunks {
                let x = _mm256_loadu_si256(c.as_ptr().cast());
                sum = _mm256_add_epi64(sum, x);
                let empty = _mm256_movemask_pd(_mm256_castsi256_pd(_mm256_cmpeq_epi64(x, zero)));
                let m = (!empty & 0xF) as usize;
                let perm = _mm256_loadu_si256(PACK[m].as_ptr().cast());
                let out = sums.as_mut_ptr().add(k).cast();
                _mm256_storeu_si256(out, _mm256_permutevar8x32_epi32(x, perm));
                let out = at.as_mut_ptr().add(k).cast();
                _mm256_storeu_si256(out, _mm256_permutevar8x32_epi32(idx, perm));
                idx = _mm256_add_epi64(idx, four);
                k += m.count_ones() as usize;
            }
            let done = bins.len() - tail.len();
            let mut total = tail.iter().sum::<i64>();
            for (j, b) in tail.iter().enumerate() {
                *sums.get_unchecked_mut(k) = *b;
                *at.get_unchecked_mut(k) = (done + j) as i64;
                k += usize::from(*b != 0);
            }
            let mut lanes = [0i64; 4];
            _mm256_storeu_si256(lanes.as_mut_ptr().cast(), sum);
            total += lanes.iter().sum::<i64>();
            // Bins holding other than the node's rows are not what the grower passes; the
            // loop below relies on it (lanes past the last occupied bin then hold a split
            // with no rows on the right, which no child minimum admits).
            if count(total, bits) != n {
                return super::scan_portable(bins, node);
            }
            // Whole chunks: the lanes past `k` read 0.
            _mm256_storeu_si256(sums.as_mut_ptr().add(k).cast(), zero);
            let chunks = k.div_ceil(4);

            let mask = _mm256_set1_epi64x((1i64 << bits) - 1);
            let sign = _mm256_set1_epi64x(i64::MIN);
            let shift = _mm_cvtsi32_si128(bits as i32);
            // After the sign flip and the logical shift, a gradient sum reads `ql + 2^(63 -
            // bits)`: this constant turns that into the bit pattern of `MAGIC + ql`.
            let magic_bits = (MAGIC.to_bits() as i64).wrapping_sub(1i64 << (63 - bits));
            let bias = _mm256_set1_epi64x(magic_bits);
            let magic = _mm256_set1_pd(MAGIC);
            let two52 = _mm256_set1_pd(TWO52);
            let two52_bits = _mm256_castpd_si256(two52);
            let lam = _mm256_set1_pd(lambda);
            let qf = _mm256_set1_pd(q as f64);
            // Exact: counts are far below 2^52.
            let nf = _mm256_set1_pd(n as f64);
            let below = _mm256_set1_epi64x(min_n - 1);
            // `nl < n - min_n + 1`: the right child has at least `min_n` rows.
            let above = _mm256_set1_epi64x(n - min_n + 1);
            let mut carry = zero;
            let mut best = _mm256_set1_pd(f64::NEG_INFINITY);
            let mut best_at = zero;
            let mut best_left = zero;
            let mut pos = _mm256_setr_epi64x(0, 1, 2, 3);
            for j in 0..chunks {
                let x = _mm256_loadu_si256(sums.as_ptr().add(4 * j).cast());
                // Inclusive prefix sums within the four, then the sums before them.
                let t = _mm256_permute4x64_epi64::<0x90>(x);
                let s = _mm256_add_epi64(x, _mm256_blend_epi32::<0b0000_0011>(t, zero));
                let t = _mm256_permute4x64_epi64::<0x40>(s);
                let s = _mm256_add_epi64(s, _mm256_blend_epi32::<0b0000_1111>(t, zero));
                let incl = _mm256_add_epi64(s, carry);
                let left = _mm256_sub_epi64(incl, x);
                carry = _mm256_permute4x64_epi64::<0xFF>(incl);
                let nl = _mm256_and_si256(left, mask);
                let ql = _mm256_srl_epi64(_mm256_xor_si256(left, sign), shift);
                let qlf = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_add_epi64(ql, bias)), magic);
                // Exact: both are integers of at most 2^51, as is their difference.
                let qrf = _mm256_sub_pd(qf, qlf);
                let nlf =
                    _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(nl, two52_bits)), two52);
                // `score`, four at a time (`n - nl` is exact in `f64`).
                let a = _mm256_add_pd(nlf, lam);
                let b = _mm256_add_pd(_mm256_sub_pd(nf, nlf), lam);
                let gain = _mm256_div_pd(
                    _mm256_add_pd(
                        _mm256_mul_pd(_mm256_mul_pd(qlf, qlf), b),
                        _mm256_mul_pd(_mm256_mul_pd(qrf, qrf), a),
                    ),
                    _mm256_mul_pd(a, b),
                );
                let ok =
                    _mm256_and_si256(_mm256_cmpgt_epi64(nl, below), _mm256_cmpgt_epi64(above, nl));
                let better = _mm256_and_pd(
                    _mm256_castsi256_pd(ok),
                    _mm256_cmp_pd::<_CMP_GT_OQ>(gain, best),
                );
                best = _mm256_blendv_pd(best, gain, better);
                best_at = _mm256_castpd_si256(_mm256_blendv_pd(
                    _mm256_castsi256_pd(best_at),
                    _mm256_castsi256_pd(pos),
                    better,
                ));
                best_left = _mm256_castpd_si256(_mm256_blendv_pd(
                    _mm256_castsi256_pd(best_left),
                    _mm256_castsi256_pd(left),
                    better,
                ));
                pos = _mm256_add_epi64(pos, four);
            }
            let mut gains = [0.0f64; 4];
            let mut ats = [0i64; 4];
            let mut lefts = [0i64; 4];
            _mm256_storeu_pd(gains.as_mut_ptr(), best);
            _mm256_storeu_si256(ats.as_mut_ptr().cast(), best_at);
            _mm256_storeu_si256(lefts.as_mut_ptr().cast(), best_left);
            // Each lane kept its first best; of lanes with equal gains the lowest wins.
            let mut top = (f64::NEG_INFINITY, 0usize, 0i64);
            for ((g, a), l) in gains.into_iter().zip(ats).zip(lefts) {
                let a = a as usize;
                if g > top.0 || (g == top.0 && a < top.1) {
                    top = (g, a, l);
                }
            }
            // The portable scan's end: one past the last occupied bin, where the node's
            // count is reached.
            let end = k
                .checked_sub(1)
                .map_or(0, |j| *at.get_unchecked(j) as usize + 1);
            Found {
                gain: top.0,
                at: if k == 0 {
                    0
                } else {
                    *at.get_unchecked(top.1.min(k - 1)) as usize
                },
                left: top.2,
                start: if k == 0 {
                    bins.len()
                } else {
                    *at.get_unchecked(0) as usize
                },
                end,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::train::gbt::reference::Rng;

    /// Every candidate scored on its own, no shortcuts.
    fn naive(bins: &[i64], node: Node) -> Found {
        let Node {
            n, q, min_n, bits, ..
        } = node;
        let mut top = (f64::NEG_INFINITY, 0);
        let mut end = bins.len();
        for i in 0..bins.len() {
            let left: i64 = bins[..i].iter().sum();
            let (ql, nl) = (grad(left, bits), count(left, bits));
            if nl >= n {
                end = end.min(i);
            }
            if nl < min_n || n - nl < min_n {
                continue;
            }
            let gain = score(
                ql as f64,
                (q - ql) as f64,
                nl as f64,
                (n - nl) as f64,
                node.lambda,
            );
            if gain > top.0 {
                top = (gain, i);
            }
        }
        let step = bins[top.1..].iter().position(|e| *e != 0).unwrap_or(0);
        Found {
            gain: top.0,
            at: top.1 + step,
            left: bins[..top.1].iter().sum(),
            start: bins.iter().position(|e| *e != 0).unwrap_or(bins.len()),
            end,
        }
    }

    #[test]
    fn both_scans_agree_with_scoring_every_candidate() {
        let mut rng = Rng(0x5eed);
        let mut scored = 0;
        let mut scratch = Scratch::default();
        for case in 0..3000u64 {
            let bits = 1 + rng.below(14) as u32;
            let n_max = (1i64 << bits) - 1;
            let n = 1 + rng.below(n_max as u64) as i64;
            let len = 1 + rng.below(70) as usize;
            // Rows spread over the bins: many empty bins, some runs, sometimes few rows
            // left for the last bins (the node's count is reached early).
            let mut left = n;
            let mut bins = vec![0i64; len];
            let q_max = 1i64 << (62 - bits).min(51);
            let per_row = q_max / n.max(1);
            let mut q = 0;
            for (i, b) in bins.iter_mut().enumerate() {
                let take = if i + 1 == len && case % 3 != 0 {
                    left
                } else if rng.below(3) == 0 {
                    0
                } else {
                    (rng.below(left as u64 + 1) as i64).min(left)
                };
                left -= take;
                // Gradient sums of either sign up to the bound; ties are common when
                // sums repeat (case % 5 == 0: every row's gradient is equal).
                let g: i64 = (0..take)
                    .map(|_| match case % 5 {
                        0 => 3,
                        _ => rng.below(2 * per_row as u64 + 1) as i64 - per_row,
                    })
                    .sum();
                q += g;
                *b = (g << bits) + take;
            }
            let n = n - left;
            if n == 0 {
                continue;
            }
            // Now and then a node with rows outside these bins (the grower never passes
            // one; the AVX2 scan hands it to the portable one).
            let n = if case % 13 == 0 {
                n + 1 + rng.below(3) as i64
            } else {
                n
            };
            let lambda = [1.0, 0.0, 5.0, 0.25][case as usize % 4];
            let min_n = [1, 1, 2, 3, 10][case as usize % 5];
            let node = Node {
                n,
                q,
                min_n,
                bits,
                lambda,
            };
            let want = naive(&bins, node);
            assert_eq!(scan_portable(&bins, node), want, "case {case}");
            // The path the grower takes on this CPU (AVX2 where present).
            let got = scan(&bins, node, avx2_available(), &mut scratch);
            assert_eq!(got, want, "case {case}");
            scored += usize::from(want.gain > f64::NEG_INFINITY);
        }
        assert!(scored > 1000, "{scored}");
    }
}

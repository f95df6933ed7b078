//! Gradients as fixed-point integers, packed with a row count of 1 each (see `grow`).

use super::grow::{Bin, Pack};

/// Writes `grad` as integers `q = grad * 2^k` (truncated), packed with a count of 1 each
/// (`pack`), into `q`, and returns `2^-k`, the gradient a unit of `q` stands for. `k` is
/// the largest that keeps the packed sum of any subset of rows within `i64` (|g| * rows
/// <= 2^(62 - pack.bits)) and every gradient sum at most 2^51 (so that the split scan
/// converts sums to `f64` exactly, see [`super::scan`]), so the sums lose nothing and the
/// values keep about min(62 - 2 log2(rows), 51 - log2(rows)) significant bits (40 for
/// 2 000 rows; XGBoost keeps 24, as `f32`). A non-finite gradient (none occurs: targets are
/// finite) counts as 0.
pub(super) fn quantize(grad: &[f64], pack: Pack, q: &mut Vec<Bin>, avx2: bool) -> f64 {
    let max = max_abs(grad);
    let bound = max * grad.len() as f64;
    // Tiny gradients stop at 2^400 so that gains (scaled by 2^-2k) stay normal numbers.
    let k = if bound > 0.0 && bound.is_finite() {
        ((62 - pack.bits as i32).min(51) - bound.log2().ceil() as i32).min(400)
    } else {
        0
    };
    let scale = 2f64.powi(k);
    // Every value is written below: a buffer of the right length is kept as it is.
    q.resize(grad.len(), 0);
    #[cfg(target_arch = "x86_64")]
    if avx2 && max * scale <= 2f64.powi(51) {
        // SAFETY: `avx2` is true only where `is_x86_feature_detected!("avx2")` said so, and
        // `q` is as long as `grad`.
        unsafe { x86::pack_avx2(grad, scale, pack.bits, q) };
        return 2f64.powi(-k);
    }
    let _ = avx2;
    pack_portable(grad, scale, pack.bits, q);
    2f64.powi(-k)
}

/// The largest `|g|` of the finite gradients (0 if none), over four running maxima: one
/// maximum chained through every row was most of this function's time.
fn max_abs(grad: &[f64]) -> f64 {
    let mut m = [0.0f64; 4];
    let chunks = grad.chunks_exact(4);
    let tail = chunks.remainder();
    for c in chunks {
        for (m, g) in m.iter_mut().zip(c) {
            let a = g.abs();
            // NaN and infinities fail the first test.
            *m = if a <= f64::MAX && a > *m { a } else { *m };
        }
    }
    for g in tail {
        let a = g.abs();
        m[0] = if a <= f64::MAX && a > m[0] { a } else { m[0] };
    }
    m.into_iter().fold(0.0, f64::max)
}

/// `(trunc(g * scale) << bits) + 1` for every gradient (0 for a non-finite one).
fn pack_portable(grad: &[f64], scale: f64, bits: u32, q: &mut [Bin]) {
    for (q, g) in q.iter_mut().zip(grad) {
        let v = if g.is_finite() { (g * scale) as i64 } else { 0 };
        *q = (v << bits) + 1;
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::Bin;
    use std::arch::x86_64::*;

    /// 1.5 * 2^52 (see `scan`): converts integers of at most 2^51 exactly.
    const MAGIC: f64 = 6_755_399_441_055_744.0;

    /// [`super::pack_portable`], four rows at a time: `g * scale` is at most 2^51 in
    /// magnitude (the scale is picked so), truncated exactly and read as an integer through
    /// `MAGIC`.
    ///
    /// # Safety
    /// The CPU must support AVX2, and `q` must be as long as `grad`.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn pack_avx2(grad: &[f64], scale: f64, bits: u32, q: &mut [Bin]) {
        // SAFETY: one block for the whole body (the intrinsics were all `unsafe` before Rust
        // 1.87, older than the workspace's MSRV); memory is touched by unaligned loads of
        // four `f64` within `grad` and stores of four `i64` at the same offsets in `q`, as
        // long (the caller's contract).
        unsafe {
            let sv = _mm256_set1_pd(scale);
            let max = _mm256_set1_pd(f64::MAX);
            let abs = _mm256_castsi256_pd(_mm256_set1_epi64x(i64::MAX));
            let magic = _mm256_set1_pd(MAGIC);
            let magic_bits = _mm256_castpd_si256(magic);
            let one = _mm256_set1_epi64x(1);
            let shift = _mm_cvtsi32_si128(bits as i32);
            let chunks = grad.len() / 4;
            for j in 0..chunks {
                let g = _mm256_loadu_pd(grad.as_ptr().add(4 * j));
                let finite = _mm256_cmp_pd::<_CMP_LE_OQ>(_mm256_and_pd(g, abs), max);
                let v = _mm256_round_pd::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(
                    _mm256_mul_pd(g, sv),
                );
                let v = _mm256_and_pd(v, finite);
                let i = _mm256_sub_epi64(_mm256_castpd_si256(_mm256_add_pd(v, magic)), magic_bits);
                let p = _mm256_add_epi64(_mm256_sll_epi64(i, shift), one);
                _mm256_storeu_si256(q.as_mut_ptr().add(4 * j).cast(), p);
            }
            let done = 4 * chunks;
            super::pack_portable(&grad[done..], scale, bits, &mut q[done..]);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_packings_agree() {
        let mut rng = crate::train::gbt::reference::Rng(0x1234_5678_9abc_def1u64);
        let mut next = || rng.unit();
        let avx2 = super::super::scan::avx2_available();
        for case in 0..200 {
            let n = case % 37 + 1;
            let mut grad: Vec<f64> = (0..n)
                .map(|_| (next() - 0.5) * 10f64.powi((next() * 40.0) as i32 - 20))
                .collect();
            match case % 7 {
                0 => grad[0] = f64::NAN,
                1 => grad[n / 2] = f64::INFINITY,
                2 => grad[n - 1] = -0.0,
                3 => grad[0] = -f64::INFINITY,
                _ => {}
            }
            let pack = Pack::for_rows(n);
            let (mut a, mut b) = (Vec::new(), Vec::new());
            let ua = quantize(&grad, pack, &mut a, false);
            let ub = quantize(&grad, pack, &mut b, avx2);
            assert_eq!((ua, &a), (ub, &b), "case {case}: {grad:?}");
            // Not all zero: the scale is in use.
            let some = grad.iter().any(|g| g.is_finite() && *g != 0.0);
            assert_eq!(a.iter().any(|q| pack.q(*q) != 0), some, "case {case}");
        }
    }
}

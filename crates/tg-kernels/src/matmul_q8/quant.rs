//! Activation quantizers (Q8_0 with ggml's x86 rounding, Q8_K as ggml's reference), portable
//! and AVX2. Both give bit-identical results; see the module docs of [`super`].

use tg_quant::{f16_to_f32, f32_to_f16, GgmlType};

use crate::Isa;

/// Quantizes one row: `x` (`k` elements) into `q` (`k` quants), `d` (one scale per block),
/// `s` (sums of each 32 quants for Q8_0, of each 16 for Q8_K) and, for Q8_0, `g` (negated sums
/// of each 4 quants).
pub(super) fn quantize_row(
    isa: Isa,
    act: GgmlType,
    x: &[f32],
    q: &mut [i8],
    d: &mut [f32],
    s: &mut [i16],
    g: &mut [i16],
) {
    #[cfg(target_arch = "x86_64")]
    if isa != Isa::Scalar {
        // SAFETY: `isa` was checked to be available and every x86 SIMD ISA includes AVX2.
        unsafe {
            if act == GgmlType::Q8_0 {
                avx2::q8_0_row(x, q, d, s, g)
            } else {
                avx2::q8_k_row(x, q, d, s)
            }
        }
        return;
    }
    let _ = isa;
    if act == GgmlType::Q8_0 {
        for (((x, q), d), s) in x.chunks_exact(32).zip(q.chunks_exact_mut(32)).zip(d.iter_mut()).zip(s.iter_mut()) {
            let (bd, bs) = q8_0_block(x, q);
            *d = bd;
            *s = bs;
        }
        for (g, q) in g.iter_mut().zip(q.chunks_exact(4)) {
            *g = -q.iter().map(|&v| i16::from(v)).sum::<i16>();
        }
    } else {
        for (((x, q), d), s) in
            x.chunks_exact(256).zip(q.chunks_exact_mut(256)).zip(d.iter_mut()).zip(s.chunks_exact_mut(16))
        {
            *d = q8_k_block(x, q, s);
        }
    }
}

/// The stored Q8_0 scale for a block with `amax = max|x|` (finite): `f16(amax / 127)` as f32,
/// and the multiplier `127 / amax` (0 when the scale is 0, in which case all quants are 0).
#[inline]
fn q8_0_scale(amax: f32) -> (f32, f32) {
    let d = f16_to_f32(f32_to_f16(amax / 127.0));
    if d == 0.0 {
        (d, 0.0)
    } else {
        (d, 127.0 / amax)
    }
}

/// One Q8_0 block, portable: returns `(d, Σq)`.
fn q8_0_block(x: &[f32], q: &mut [i8]) -> (f32, i16) {
    let mut amax = 0.0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite {
        q.fill(0);
        return (f32::NAN, 0);
    }
    let (d, id) = q8_0_scale(amax);
    let mut sum = 0i16;
    for (q, &v) in q.iter_mut().zip(x) {
        let r = (v * id).round_ties_even().clamp(-128.0, 127.0) as i8;
        *q = r;
        sum += i16::from(r);
    }
    (d, sum)
}

/// The Q8_K multiplier `iscale = −127 / max` for the signed element `max` of largest magnitude
/// (first one on ties).
#[inline]
fn q8_k_iscale(x: &[f32], amax: f32) -> f32 {
    let max = x.iter().copied().find(|v| v.abs() == amax).unwrap_or(amax);
    -127.0 / max
}

/// One Q8_K block, portable: fills `q` and the 16 sums `s`, returns `d`.
fn q8_k_block(x: &[f32], q: &mut [i8], s: &mut [i16]) -> f32 {
    let mut amax = 0.0f32;
    let mut finite = true;
    for &v in x {
        finite &= v.is_finite();
        amax = amax.max(v.abs());
    }
    if !finite || amax == 0.0 {
        q.fill(0);
        s.fill(0);
        return if finite { 0.0 } else { f32::NAN };
    }
    let iscale = q8_k_iscale(x, amax);
    for (q, &v) in q.iter_mut().zip(x) {
        *q = (iscale * v).round_ties_even().clamp(-128.0, 127.0) as i8;
    }
    for (s, g) in s.iter_mut().zip(q.chunks_exact(16)) {
        *s = g.iter().map(|&v| i16::from(v)).sum();
    }
    1.0 / iscale
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use std::arch::x86_64::*;

    use super::{q8_0_scale, q8_k_iscale};

    /// Horizontal max of the 8 lanes of `a`.
    #[inline(always)]
    unsafe fn hmax(a: __m256) -> f32 {
        let m = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps::<1>(a));
        let m = _mm_max_ps(m, _mm_movehl_ps(m, m));
        let m = _mm_max_ss(m, _mm_movehdup_ps(m));
        _mm_cvtss_f32(m)
    }

    /// Max of `|v|` over `n` vectors at `x`, and whether any element is NaN or infinite.
    #[inline(always)]
    unsafe fn amax_finite(x: *const f32, n: usize) -> (f32, bool) {
        let abs_mask = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFF_FFFF));
        let inf = _mm256_set1_ps(f32::INFINITY);
        let mut m = _mm256_setzero_ps();
        let mut bad = _mm256_setzero_ps();
        for i in 0..n {
            let a = _mm256_and_ps(_mm256_loadu_ps(x.add(8 * i)), abs_mask);
            // |v| ≥ ∞ or unordered (NaN): not finite.
            bad = _mm256_or_ps(bad, _mm256_cmp_ps::<_CMP_NLT_UQ>(a, inf));
            m = _mm256_max_ps(m, a);
        }
        (hmax(m), _mm256_movemask_ps(bad) == 0)
    }

    /// Rounds `x[0..32] · mul` half to even and packs to 32 saturated i8, in order.
    #[inline(always)]
    unsafe fn round_pack32(x: *const f32, mul: __m256) -> __m256i {
        const RN: i32 = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
        let r = |i: usize| _mm256_cvtps_epi32(_mm256_round_ps::<RN>(_mm256_mul_ps(_mm256_loadu_ps(x.add(8 * i)), mul)));
        let a = _mm256_packs_epi32(r(0), r(1));
        let b = _mm256_packs_epi32(r(2), r(3));
        // packs works per 128-bit lane: restore element order.
        _mm256_permutevar8x32_epi32(_mm256_packs_epi16(a, b), _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7))
    }

    /// The eight sums of each 4 of 32 quants (i32 lanes).
    #[inline(always)]
    unsafe fn sums4(q: __m256i) -> __m256i {
        _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_set1_epi8(1), q), _mm256_set1_epi16(1))
    }

    /// Per-16 sums of 32 quants: `[Σ q[0..16], Σ q[16..32]]`.
    #[inline(always)]
    unsafe fn sums16(q: __m256i) -> (i16, i16) {
        let p = sums4(q);
        let lo = _mm256_castsi256_si128(p);
        let hi = _mm256_extracti128_si256::<1>(p);
        let h = |v: __m128i| {
            let v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
            let v = _mm_add_epi32(v, _mm_shuffle_epi32::<0b01>(v));
            _mm_cvtsi128_si32(v) as i16
        };
        (h(lo), h(hi))
    }

    /// AVX2 twin of the portable Q8_0 row quantizer.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_0_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i16], g: &mut [i16]) {
        for b in 0..d.len() {
            let xb = x.as_ptr().add(32 * b);
            let qb = q.as_mut_ptr().add(32 * b);
            let (amax, finite) = amax_finite(xb, 4);
            let (bd, id) = if finite { q8_0_scale(amax) } else { (f32::NAN, 0.0) };
            // A non-finite block gets zero quants (`x · 0` would be NaN for infinite `x`).
            let v = if finite { round_pack32(xb, _mm256_set1_ps(id)) } else { _mm256_setzero_si256() };
            _mm256_storeu_si256(qb.cast(), v);
            let (s0, s1) = sums16(v);
            d[b] = bd;
            s[b] = s0 + s1;
            // Negated sums of each 4, as i16.
            let n4 = _mm256_sub_epi32(_mm256_setzero_si256(), sums4(v));
            let n4 = _mm_packs_epi32(_mm256_castsi256_si128(n4), _mm256_extracti128_si256::<1>(n4));
            _mm_storeu_si128(g.as_mut_ptr().add(8 * b).cast(), n4);
        }
    }

    /// AVX2 twin of the portable Q8_K row quantizer.
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn q8_k_row(x: &[f32], q: &mut [i8], d: &mut [f32], s: &mut [i16]) {
        for b in 0..d.len() {
            let xs = &x[256 * b..256 * (b + 1)];
            let qb = q.as_mut_ptr().add(256 * b);
            let sb = &mut s[16 * b..16 * (b + 1)];
            let (amax, finite) = amax_finite(xs.as_ptr(), 32);
            let iscale = if finite && amax != 0.0 { q8_k_iscale(xs, amax) } else { 0.0 };
            let mul = _mm256_set1_ps(iscale);
            for c in 0..8 {
                let v = if finite { round_pack32(xs.as_ptr().add(32 * c), mul) } else { _mm256_setzero_si256() };
                _mm256_storeu_si256(qb.add(32 * c).cast(), v);
                let (s0, s1) = sums16(v);
                sb[2 * c] = s0;
                sb[2 * c + 1] = s1;
            }
            d[b] = if !finite {
                f32::NAN
            } else if amax == 0.0 {
                0.0
            } else {
                1.0 / iscale
            };
        }
    }
}

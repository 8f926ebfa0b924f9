//! AVX-512 (F/BW/VL/DQ) implementation: 16 lanes, mask registers for tails.

use std::arch::x86_64::*;

use super::Simd;

/// The AVX-512 path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx512;

#[inline(always)]
fn tail_mask(n: usize) -> __mmask16 {
    ((1u32 << n) - 1) as __mmask16
}

impl Simd for Avx512 {
    type V = __m512;
    const LANES: usize = 16;

    #[inline(always)]
    unsafe fn zero() -> __m512 {
        _mm512_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m512 {
        _mm512_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m512 {
        _mm512_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_tail(p: *const f32, n: usize) -> __m512 {
        _mm512_maskz_loadu_ps(tail_mask(n), p)
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m512) {
        _mm512_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_tail(p: *mut f32, n: usize, v: __m512) {
        _mm512_mask_storeu_ps(p, tail_mask(n), v)
    }
    #[inline(always)]
    unsafe fn add(a: __m512, b: __m512) -> __m512 {
        _mm512_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m512, b: __m512) -> __m512 {
        _mm512_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m512, b: __m512) -> __m512 {
        _mm512_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: __m512, b: __m512) -> __m512 {
        _mm512_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m512, b: __m512) -> __m512 {
        _mm512_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m512, b: __m512) -> __m512 {
        _mm512_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: __m512, b: __m512, c: __m512) -> __m512 {
        _mm512_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn abs(a: __m512) -> __m512 {
        _mm512_abs_ps(a)
    }
    #[inline(always)]
    unsafe fn neg(a: __m512) -> __m512 {
        _mm512_xor_ps(a, _mm512_set1_ps(-0.0))
    }
    #[inline(always)]
    unsafe fn sqrt(a: __m512) -> __m512 {
        _mm512_sqrt_ps(a)
    }
    #[inline(always)]
    unsafe fn round(a: __m512) -> __m512 {
        _mm512_roundscale_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
    }
    #[inline(always)]
    unsafe fn pow2i(n: __m512) -> __m512 {
        let e = _mm512_add_epi32(_mm512_cvtps_epi32(n), _mm512_set1_epi32(127));
        _mm512_castsi512_ps(_mm512_slli_epi32::<23>(e))
    }
    #[inline(always)]
    unsafe fn scalef(a: __m512, n: __m512) -> __m512 {
        _mm512_scalef_ps(a, n)
    }
    #[inline(always)]
    unsafe fn select_lt(a: __m512, b: __m512, t: __m512, f: __m512) -> __m512 {
        _mm512_mask_blend_ps(_mm512_cmp_ps_mask::<_CMP_LT_OQ>(a, b), f, t)
    }
    #[inline(always)]
    unsafe fn copysign(mag: __m512, sign: __m512) -> __m512 {
        let s = _mm512_set1_ps(-0.0);
        _mm512_or_ps(_mm512_andnot_ps(s, mag), _mm512_and_ps(s, sign))
    }
    #[inline(always)]
    unsafe fn interleave(a: __m512, b: __m512) -> (__m512, __m512) {
        // Index i < 16 picks a[i], 16 + i picks b[i].
        let lo = _mm512_setr_epi32(0, 16, 1, 17, 2, 18, 3, 19, 4, 20, 5, 21, 6, 22, 7, 23);
        let hi = _mm512_setr_epi32(8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31);
        (_mm512_permutex2var_ps(a, lo, b), _mm512_permutex2var_ps(a, hi, b))
    }
    #[inline(always)]
    unsafe fn deinterleave(lo: __m512, hi: __m512) -> (__m512, __m512) {
        let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
        (_mm512_permutex2var_ps(lo, even, hi), _mm512_permutex2var_ps(lo, odd, hi))
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m512) -> f32 {
        let h = _mm256_add_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
        let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let d = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)))
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m512) -> f32 {
        let h = _mm256_max_ps(_mm512_castps512_ps256(v), _mm512_extractf32x8_ps::<1>(v));
        let q = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let d = _mm_max_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_max_ss(d, _mm_movehdup_ps(d)))
    }
    #[inline(always)]
    unsafe fn hsum4(a: __m512, b: __m512, c: __m512, d: __m512) -> [f32; 4] {
        // Per 128-bit lane: ab = [a0+a2, b0+b2, a1+a3, b1+b3], cd likewise.
        let ab = _mm512_add_ps(_mm512_unpacklo_ps(a, b), _mm512_unpackhi_ps(a, b));
        let cd = _mm512_add_ps(_mm512_unpacklo_ps(c, d), _mm512_unpackhi_ps(c, d));
        // Per 128-bit lane: [Σa, Σb, Σc, Σd] over that lane's four elements.
        let s = _mm512_add_ps(_mm512_shuffle_ps::<0b01_00_01_00>(ab, cd), _mm512_shuffle_ps::<0b11_10_11_10>(ab, cd));
        let h = _mm256_add_ps(_mm512_castps512_ps256(s), _mm512_extractf32x8_ps::<1>(s));
        let q = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps::<1>(h));
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), q);
        out
    }
    #[inline(always)]
    unsafe fn splat_f16(h: u16) -> __m512 {
        // Convert a broadcast so every lane is used. Converting one lane and broadcasting the
        // f32 lets LLVM load the half with a `vpinsrw` merging into an arbitrary register: a
        // false dependency that can chain each block's scale onto an accumulator.
        _mm512_cvtph_ps(_mm256_set1_epi16(h as i16))
    }
}

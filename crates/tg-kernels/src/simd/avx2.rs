//! AVX2 + FMA + F16C implementation: 8 lanes, `maskload`/`maskstore` for tails.

use std::arch::x86_64::*;

use super::Simd;

/// The AVX2 path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Avx2;

#[inline(always)]
unsafe fn tail_mask(n: usize) -> __m256i {
    _mm256_cmpgt_epi32(_mm256_set1_epi32(n as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7))
}

impl Simd for Avx2 {
    type V = __m256;
    const LANES: usize = 8;

    #[inline(always)]
    unsafe fn zero() -> __m256 {
        _mm256_setzero_ps()
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> __m256 {
        _mm256_set1_ps(x)
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> __m256 {
        _mm256_loadu_ps(p)
    }
    #[inline(always)]
    unsafe fn load_tail(p: *const f32, n: usize) -> __m256 {
        _mm256_maskload_ps(p, tail_mask(n))
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: __m256) {
        _mm256_storeu_ps(p, v)
    }
    #[inline(always)]
    unsafe fn store_tail(p: *mut f32, n: usize, v: __m256) {
        _mm256_maskstore_ps(p, tail_mask(n), v)
    }
    #[inline(always)]
    unsafe fn add(a: __m256, b: __m256) -> __m256 {
        _mm256_add_ps(a, b)
    }
    #[inline(always)]
    unsafe fn sub(a: __m256, b: __m256) -> __m256 {
        _mm256_sub_ps(a, b)
    }
    #[inline(always)]
    unsafe fn mul(a: __m256, b: __m256) -> __m256 {
        _mm256_mul_ps(a, b)
    }
    #[inline(always)]
    unsafe fn div(a: __m256, b: __m256) -> __m256 {
        _mm256_div_ps(a, b)
    }
    #[inline(always)]
    unsafe fn max(a: __m256, b: __m256) -> __m256 {
        _mm256_max_ps(a, b)
    }
    #[inline(always)]
    unsafe fn min(a: __m256, b: __m256) -> __m256 {
        _mm256_min_ps(a, b)
    }
    #[inline(always)]
    unsafe fn fma(a: __m256, b: __m256, c: __m256) -> __m256 {
        _mm256_fmadd_ps(a, b, c)
    }
    #[inline(always)]
    unsafe fn abs(a: __m256) -> __m256 {
        _mm256_andnot_ps(_mm256_set1_ps(-0.0), a)
    }
    #[inline(always)]
    unsafe fn neg(a: __m256) -> __m256 {
        _mm256_xor_ps(a, _mm256_set1_ps(-0.0))
    }
    #[inline(always)]
    unsafe fn sqrt(a: __m256) -> __m256 {
        _mm256_sqrt_ps(a)
    }
    #[inline(always)]
    unsafe fn round(a: __m256) -> __m256 {
        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(a)
    }
    #[inline(always)]
    unsafe fn pow2i(n: __m256) -> __m256 {
        let e = _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127));
        _mm256_castsi256_ps(_mm256_slli_epi32::<23>(e))
    }
    #[inline(always)]
    unsafe fn select_lt(a: __m256, b: __m256, t: __m256, f: __m256) -> __m256 {
        _mm256_blendv_ps(f, t, _mm256_cmp_ps::<_CMP_LT_OQ>(a, b))
    }
    #[inline(always)]
    unsafe fn copysign(mag: __m256, sign: __m256) -> __m256 {
        let s = _mm256_set1_ps(-0.0);
        _mm256_or_ps(_mm256_andnot_ps(s, mag), _mm256_and_ps(s, sign))
    }
    #[inline(always)]
    unsafe fn interleave(a: __m256, b: __m256) -> (__m256, __m256) {
        // unpack works within 128-bit halves: [a0 b0 a1 b1 | a4 b4 a5 b5], [a2 b2 a3 b3 | a6 b6 a7 b7].
        let (l, h) = (_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        (_mm256_permute2f128_ps::<0x20>(l, h), _mm256_permute2f128_ps::<0x31>(l, h))
    }
    #[inline(always)]
    unsafe fn deinterleave(lo: __m256, hi: __m256) -> (__m256, __m256) {
        // shuffle works within halves: [lo0 lo2 hi0 hi2 | lo4 lo6 hi4 hi6]; then the 64-bit
        // pairs in order 0, 2, 1, 3.
        let e = _mm256_shuffle_ps::<0b10_00_10_00>(lo, hi);
        let o = _mm256_shuffle_ps::<0b11_01_11_01>(lo, hi);
        let fix = |v: __m256| _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(v)));
        (fix(e), fix(o))
    }
    #[inline(always)]
    unsafe fn reduce_add(v: __m256) -> f32 {
        let q = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let d = _mm_add_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_add_ss(d, _mm_movehdup_ps(d)))
    }
    #[inline(always)]
    unsafe fn reduce_max(v: __m256) -> f32 {
        let q = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let d = _mm_max_ps(q, _mm_movehl_ps(q, q));
        _mm_cvtss_f32(_mm_max_ss(d, _mm_movehdup_ps(d)))
    }
    #[inline(always)]
    unsafe fn hsum4(a: __m256, b: __m256, c: __m256, d: __m256) -> [f32; 4] {
        let ab = _mm256_add_ps(_mm256_unpacklo_ps(a, b), _mm256_unpackhi_ps(a, b));
        let cd = _mm256_add_ps(_mm256_unpacklo_ps(c, d), _mm256_unpackhi_ps(c, d));
        let s = _mm256_add_ps(_mm256_shuffle_ps::<0b01_00_01_00>(ab, cd), _mm256_shuffle_ps::<0b11_10_11_10>(ab, cd));
        let q = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps::<1>(s));
        let mut out = [0.0f32; 4];
        _mm_storeu_ps(out.as_mut_ptr(), q);
        out
    }
    #[inline(always)]
    unsafe fn splat_f16(h: u16) -> __m256 {
        // Convert a broadcast so every lane is used. Converting one lane and broadcasting the
        // f32 lets LLVM load the half with a `vpinsrw` merging into an arbitrary register: a
        // false dependency that can chain each block's scale onto an accumulator.
        _mm256_cvtph_ps(_mm_set1_epi16(h as i16))
    }
}

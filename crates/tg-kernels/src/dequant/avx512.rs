//! AVX-512 block decoders: bytes are unpacked with 128/256-bit integer ops (AVX-512BW/VL mask
//! forms for the 5th bit), widened to 16 × i32 and converted. Scales are applied with the same
//! f32 operations as the reference; where a product is exact (see `tg_quant::dequant`) a fused
//! multiply-add gives the same bits.

use std::arch::x86_64::*;

use super::scalar::k4_scale_min;
use super::{SimdDecode, Sink};
use crate::simd::{rd_u32, Avx512, Simd};

#[inline(always)]
/// The f16 at `p` in every lane.
unsafe fn half(p: *const u8) -> __m512 {
    Avx512::splat_f16(crate::simd::rd_u16(p))
}

/// i8 lanes → f32.
#[inline(always)]
unsafe fn i8x16(v: __m128i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(v))
}

/// u8 lanes → f32.
#[inline(always)]
unsafe fn u8x16(v: __m128i) -> __m512 {
    _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(v))
}

#[inline(always)]
unsafe fn lo128(v: __m256i) -> __m128i {
    _mm256_castsi256_si128(v)
}

#[inline(always)]
unsafe fn hi128(v: __m256i) -> __m128i {
    _mm256_extracti128_si256::<1>(v)
}

#[inline(always)]
unsafe fn nibbles128(p: *const u8) -> (__m128i, __m128i) {
    let q = _mm_loadu_si128(p.cast());
    let m = _mm_set1_epi8(0x0f);
    (_mm_and_si128(q, m), _mm_and_si128(_mm_srli_epi16::<4>(q), m))
}

#[inline(always)]
unsafe fn nibbles256(p: *const u8) -> (__m256i, __m256i) {
    let q = _mm256_loadu_si256(p.cast());
    let m = _mm256_set1_epi8(0x0f);
    (_mm256_and_si256(q, m), _mm256_and_si256(_mm256_srli_epi16::<4>(q), m))
}

impl SimdDecode for Avx512 {
    #[inline(always)]
    fn has_dot1(ty: tg_quant::GgmlType) -> bool {
        use tg_quant::GgmlType as T;
        matches!(ty, T::Q8_0 | T::Q4_0 | T::Q5_0 | T::Q4_K | T::Q5_K | T::Q6_K)
    }
    #[inline(always)]
    unsafe fn dot1(ty: tg_quant::GgmlType, x: *const f32, xs: *const f32, w: *const u8, k: usize) -> f32 {
        use crate::matmul_q::avx512 as d;
        use tg_quant::GgmlType as T;
        match ty {
            T::Q8_0 => d::dot_q8_0(x, w, k),
            T::Q4_0 => d::dot_q4_0(x, w, k),
            T::Q5_0 => d::dot_q5_0(x, w, k),
            T::Q4_K => d::dot_q4_k(x, xs, w, k),
            T::Q5_K => d::dot_q5_k(x, xs, w, k),
            T::Q6_K => d::dot_q6_k(x, w, k),
            _ => unreachable!("has_dot1"),
        }
    }
    #[inline(always)]
    unsafe fn dec_f32<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        f.put(0, _mm512_loadu_ps(p.cast()))
    }
    #[inline(always)]
    unsafe fn dec_f16<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        f.put(0, _mm512_cvtph_ps(_mm256_loadu_si256(p.cast())))
    }
    #[inline(always)]
    unsafe fn dec_bf16<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let w = _mm512_cvtepu16_epi32(_mm256_loadu_si256(p.cast()));
        f.put(0, _mm512_castsi512_ps(_mm512_slli_epi32::<16>(w)))
    }
    #[inline(always)]
    unsafe fn dec_q4_0<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let (lo, hi) = nibbles128(p.add(2));
        let eight = _mm_set1_epi8(8);
        f.put(0, _mm512_mul_ps(d, i8x16(_mm_sub_epi8(lo, eight))));
        f.put(1, _mm512_mul_ps(d, i8x16(_mm_sub_epi8(hi, eight))));
    }
    #[inline(always)]
    unsafe fn dec_q4_1<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let m = half(p.add(2));
        let (lo, hi) = nibbles128(p.add(4));
        f.put(0, _mm512_fmadd_ps(d, u8x16(lo), m));
        f.put(1, _mm512_fmadd_ps(d, u8x16(hi), m));
    }
    #[inline(always)]
    unsafe fn dec_q5_0<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let qh = rd_u32(p.add(2));
        let (lo, hi) = nibbles128(p.add(6));
        // q - 16 = nibble if the 5th bit is set, else nibble - 16.
        let s = _mm_set1_epi8(16);
        let lo = _mm_mask_sub_epi8(lo, !(qh as u16), lo, s);
        let hi = _mm_mask_sub_epi8(hi, !((qh >> 16) as u16), hi, s);
        f.put(0, _mm512_mul_ps(d, i8x16(lo)));
        f.put(1, _mm512_mul_ps(d, i8x16(hi)));
    }
    #[inline(always)]
    unsafe fn dec_q5_1<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let m = half(p.add(2));
        let qh = rd_u32(p.add(4));
        let (lo, hi) = nibbles128(p.add(8));
        let s = _mm_set1_epi8(16);
        let lo = _mm_mask_add_epi8(lo, qh as u16, lo, s);
        let hi = _mm_mask_add_epi8(hi, (qh >> 16) as u16, hi, s);
        f.put(0, _mm512_fmadd_ps(d, u8x16(lo), m));
        f.put(1, _mm512_fmadd_ps(d, u8x16(hi), m));
    }
    #[inline(always)]
    unsafe fn dec_q8_0<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p);
        f.put(0, _mm512_mul_ps(d, i8x16(_mm_loadu_si128(p.add(2).cast()))));
        f.put(1, _mm512_mul_ps(d, i8x16(_mm_loadu_si128(p.add(18).cast()))));
    }
    // The K-quant decoders are unrolled with macros (not loops) so that every `put` index is a
    // literal: sinks keep per-index accumulators in registers only if indices are constants.
    #[inline(always)]
    unsafe fn dec_q4_k<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&p.add(4).cast::<[u8; 12]>().read_unaligned());
        macro_rules! sub {
            ($s:expr, $q:expr) => {{
                let dl = _mm512_mul_ps(d, _mm512_set1_ps(sc[$s] as f32));
                let ml = _mm512_mul_ps(dmin, _mm512_set1_ps(mn[$s] as f32));
                f.put(2 * $s, _mm512_fmsub_ps(dl, u8x16(lo128($q)), ml));
                f.put(2 * $s + 1, _mm512_fmsub_ps(dl, u8x16(hi128($q)), ml));
            }};
        }
        macro_rules! chunk {
            ($c:expr) => {{
                let (lo, hi) = nibbles256(p.add(16 + 32 * $c));
                sub!(2 * $c, lo);
                sub!(2 * $c + 1, hi);
            }};
        }
        chunk!(0);
        chunk!(1);
        chunk!(2);
        chunk!(3);
    }
    #[inline(always)]
    unsafe fn dec_q5_k<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&p.add(4).cast::<[u8; 12]>().read_unaligned());
        let qh = _mm256_loadu_si256(p.add(16).cast());
        let sixteen = _mm256_set1_epi8(16);
        macro_rules! sub {
            ($s:expr, $q:expr) => {{
                let bit = _mm256_test_epi8_mask(qh, _mm256_set1_epi8(1 << $s));
                let q = _mm256_mask_add_epi8($q, bit, $q, sixteen);
                let dl = _mm512_mul_ps(d, _mm512_set1_ps(sc[$s] as f32));
                let ml = _mm512_mul_ps(dmin, _mm512_set1_ps(mn[$s] as f32));
                f.put(2 * $s, _mm512_fmsub_ps(dl, u8x16(lo128(q)), ml));
                f.put(2 * $s + 1, _mm512_fmsub_ps(dl, u8x16(hi128(q)), ml));
            }};
        }
        macro_rules! chunk {
            ($c:expr) => {{
                let (lo, hi) = nibbles256(p.add(48 + 32 * $c));
                sub!(2 * $c, lo);
                sub!(2 * $c + 1, hi);
            }};
        }
        chunk!(0);
        chunk!(1);
        chunk!(2);
        chunk!(3);
    }
    #[inline(always)]
    unsafe fn dec_q6_k<K: Sink<__m512>>(p: *const u8, f: &mut K) {
        let d = half(p.add(208));
        let scales = p.add(192).cast::<[i8; 16]>().read_unaligned();
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let m3 = _mm256_set1_epi8(0x03);
        let off = _mm256_set1_epi8(32);
        // Group `g` of half `h`: elements 128h + 32g .. +32 = vectors i, i + 1 with i = 8h + 2g,
        // and vector `i` covers exactly scale group `i` (16 elements).
        macro_rules! group {
            ($i:expr, $q:expr) => {{
                let q = _mm256_sub_epi8($q, off);
                let d0 = _mm512_mul_ps(d, _mm512_set1_ps(scales[$i] as f32));
                let d1 = _mm512_mul_ps(d, _mm512_set1_ps(scales[$i + 1] as f32));
                f.put($i, _mm512_mul_ps(d0, i8x16(lo128(q))));
                f.put($i + 1, _mm512_mul_ps(d1, i8x16(hi128(q))));
            }};
        }
        macro_rules! half_block {
            ($h:expr) => {{
                let qa = _mm256_loadu_si256(p.add(64 * $h).cast());
                let qb = _mm256_loadu_si256(p.add(64 * $h + 32).cast());
                let hb = _mm256_loadu_si256(p.add(128 + 32 * $h).cast());
                group!(
                    8 * $h,
                    _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_slli_epi16::<4>(_mm256_and_si256(hb, m3)))
                );
                group!(
                    8 * $h + 2,
                    _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m30))
                );
                group!(
                    8 * $h + 4,
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4), _mm256_and_si256(hb, m30))
                );
                group!(
                    8 * $h + 6,
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16::<4>(qb), m4),
                        _mm256_and_si256(_mm256_srli_epi16::<2>(hb), m30)
                    )
                );
            }};
        }
        half_block!(0);
        half_block!(1);
    }
}

//! AVX2 block decoders: byte unpacking in 128/256-bit registers (the 5th bit of Q5 formats is
//! expanded with a shuffle + compare), widening 8 bytes at a time to 8 × i32.

use std::arch::x86_64::*;

use super::scalar::k4_scale_min;
use super::{SimdDecode, Sink};
use crate::simd::{rd_u32, Avx2, Simd};

#[inline(always)]
/// The f16 at `p` in every lane.
unsafe fn half(p: *const u8) -> __m256 {
    Avx2::splat_f16(crate::simd::rd_u16(p))
}

/// Low 8 i8 lanes → f32.
#[inline(always)]
unsafe fn i8x8(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(v))
}

/// Low 8 u8 lanes → f32.
#[inline(always)]
unsafe fn u8x8(v: __m128i) -> __m256 {
    _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v))
}

/// The four 8-byte chunks of a 256-bit vector, each in the low half of an xmm.
#[inline(always)]
unsafe fn chunks8(v: __m256i) -> [__m128i; 4] {
    let lo = _mm256_castsi256_si128(v);
    let hi = _mm256_extracti128_si256::<1>(v);
    [lo, _mm_unpackhi_epi64(lo, lo), hi, _mm_unpackhi_epi64(hi, hi)]
}

/// Emits the four 8-byte chunks of `$q` (i8 if `$signed`, else u8) as vectors `$base + 0..4`,
/// each through `$map` (unrolled so every index is a literal).
macro_rules! put4 {
    ($f:expr, $base:expr, $q:expr, $conv:ident, |$v:ident| $map:expr) => {{
        let [c0, c1, c2, c3] = chunks8($q);
        let $v = $conv(c0);
        $f.put($base, $map);
        let $v = $conv(c1);
        $f.put($base + 1, $map);
        let $v = $conv(c2);
        $f.put($base + 2, $map);
        let $v = $conv(c3);
        $f.put($base + 3, $map);
    }};
}

/// 16 bytes at `p` as 32 nibbles: low nibbles in bytes 0..16, high nibbles in bytes 16..32.
#[inline(always)]
unsafe fn nibbles_split(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p.cast());
    let m = _mm_set1_epi8(0x0f);
    let lo = _mm_and_si128(q, m);
    let hi = _mm_and_si128(_mm_srli_epi16::<4>(q), m);
    _mm256_set_m128i(hi, lo)
}

#[inline(always)]
unsafe fn nibbles256(p: *const u8) -> (__m256i, __m256i) {
    let q = _mm256_loadu_si256(p.cast());
    let m = _mm256_set1_epi8(0x0f);
    (_mm256_and_si256(q, m), _mm256_and_si256(_mm256_srli_epi16::<4>(q), m))
}

/// Byte `i` is 0xff if bit `i` of `bits` is set, else 0.
#[inline(always)]
unsafe fn expand_bits(bits: u32) -> __m256i {
    let v = _mm256_set1_epi32(bits as i32);
    let shuf = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, //
        2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3,
    );
    let bm = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, shuf), bm), bm)
}

impl SimdDecode for Avx2 {
    #[inline(always)]
    unsafe fn dec_f32<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        f.put(0, _mm256_loadu_ps(p.cast()));
        f.put(1, _mm256_loadu_ps(p.add(32).cast()));
    }
    #[inline(always)]
    unsafe fn dec_f16<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        f.put(0, _mm256_cvtph_ps(_mm_loadu_si128(p.cast())));
        f.put(1, _mm256_cvtph_ps(_mm_loadu_si128(p.add(16).cast())));
    }
    #[inline(always)]
    unsafe fn dec_bf16<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        for i in 0..2 {
            let w = _mm256_cvtepu16_epi32(_mm_loadu_si128(p.add(16 * i).cast()));
            f.put(i, _mm256_castsi256_ps(_mm256_slli_epi32::<16>(w)));
        }
    }
    #[inline(always)]
    unsafe fn dec_q4_0<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let q = _mm256_sub_epi8(nibbles_split(p.add(2)), _mm256_set1_epi8(8));
        put4!(f, 0, q, i8x8, |v| _mm256_mul_ps(d, v));
    }
    #[inline(always)]
    unsafe fn dec_q4_1<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let m = half(p.add(2));
        let q = nibbles_split(p.add(4));
        put4!(f, 0, q, u8x8, |v| _mm256_fmadd_ps(d, v, m));
    }
    #[inline(always)]
    unsafe fn dec_q5_0<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let set = expand_bits(rd_u32(p.add(2)));
        let nib = nibbles_split(p.add(6));
        // q - 16 = nibble if the 5th bit is set, else nibble - 16.
        let q = _mm256_sub_epi8(nib, _mm256_andnot_si256(set, _mm256_set1_epi8(16)));
        put4!(f, 0, q, i8x8, |v| _mm256_mul_ps(d, v));
    }
    #[inline(always)]
    unsafe fn dec_q5_1<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let m = half(p.add(2));
        let set = expand_bits(rd_u32(p.add(4)));
        let q = _mm256_or_si256(nibbles_split(p.add(8)), _mm256_and_si256(set, _mm256_set1_epi8(16)));
        put4!(f, 0, q, u8x8, |v| _mm256_fmadd_ps(d, v, m));
    }
    #[inline(always)]
    unsafe fn dec_q8_0<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let ld = |o: usize| i8x8(_mm_loadl_epi64(p.add(2 + 8 * o).cast()));
        f.put(0, _mm256_mul_ps(d, ld(0)));
        f.put(1, _mm256_mul_ps(d, ld(1)));
        f.put(2, _mm256_mul_ps(d, ld(2)));
        f.put(3, _mm256_mul_ps(d, ld(3)));
    }
    // K-quants: unrolled with macros so every `put` index is a literal.
    #[inline(always)]
    unsafe fn dec_q4_k<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&p.add(4).cast::<[u8; 12]>().read_unaligned());
        macro_rules! sub {
            ($s:expr, $q:expr) => {{
                let dl = _mm256_mul_ps(d, _mm256_set1_ps(sc[$s] as f32));
                let ml = _mm256_mul_ps(dmin, _mm256_set1_ps(mn[$s] as f32));
                put4!(f, 4 * $s, $q, u8x8, |v| _mm256_fmsub_ps(dl, v, ml));
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
    unsafe fn dec_q5_k<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&p.add(4).cast::<[u8; 12]>().read_unaligned());
        let qh = _mm256_loadu_si256(p.add(16).cast());
        let sixteen = _mm256_set1_epi8(16);
        macro_rules! sub {
            ($s:expr, $q:expr) => {{
                let b = _mm256_set1_epi8(1 << $s);
                let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, b), b);
                let q = _mm256_or_si256($q, _mm256_and_si256(set, sixteen));
                let dl = _mm256_mul_ps(d, _mm256_set1_ps(sc[$s] as f32));
                let ml = _mm256_mul_ps(dmin, _mm256_set1_ps(mn[$s] as f32));
                put4!(f, 4 * $s, q, u8x8, |v| _mm256_fmsub_ps(dl, v, ml));
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
    unsafe fn dec_q6_k<K: Sink<__m256>>(p: *const u8, f: &mut K) {
        let d = half(p.add(208));
        let scales = p.add(192).cast::<[i8; 16]>().read_unaligned();
        let m4 = _mm256_set1_epi8(0x0f);
        let m30 = _mm256_set1_epi8(0x30);
        let m3 = _mm256_set1_epi8(0x03);
        let off = _mm256_set1_epi8(32);
        // Group `g` of half `h` (elements 128h + 32g ..) is vectors 16h + 4g .. +4; vector `v`
        // uses scale `v / 2`.
        macro_rules! group {
            ($v:expr, $q:expr) => {{
                let q = _mm256_sub_epi8($q, off);
                let d0 = _mm256_mul_ps(d, _mm256_set1_ps(scales[$v / 2] as f32));
                let d1 = _mm256_mul_ps(d, _mm256_set1_ps(scales[$v / 2 + 1] as f32));
                let [c0, c1, c2, c3] = chunks8(q);
                f.put($v, _mm256_mul_ps(d0, i8x8(c0)));
                f.put($v + 1, _mm256_mul_ps(d0, i8x8(c1)));
                f.put($v + 2, _mm256_mul_ps(d1, i8x8(c2)));
                f.put($v + 3, _mm256_mul_ps(d1, i8x8(c3)));
            }};
        }
        macro_rules! half_block {
            ($h:expr) => {{
                let qa = _mm256_loadu_si256(p.add(64 * $h).cast());
                let qb = _mm256_loadu_si256(p.add(64 * $h + 32).cast());
                let hb = _mm256_loadu_si256(p.add(128 + 32 * $h).cast());
                group!(
                    16 * $h,
                    _mm256_or_si256(_mm256_and_si256(qa, m4), _mm256_slli_epi16::<4>(_mm256_and_si256(hb, m3)))
                );
                group!(
                    16 * $h + 4,
                    _mm256_or_si256(_mm256_and_si256(qb, m4), _mm256_and_si256(_mm256_slli_epi16::<2>(hb), m30))
                );
                group!(
                    16 * $h + 8,
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16::<4>(qa), m4), _mm256_and_si256(hb, m30))
                );
                group!(
                    16 * $h + 12,
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

//! x86 kernels: 256-bit integer dot products, generic over [`Ops`] (AVX2 `vpmaddubsw` /
//! `vpmaddwd`, or AVX-512 VNNI `vpdpbusd` / `vpdpwssd` with AVX-512BW mask tricks).
//!
//! Weight quants are decoded to unsigned bytes (`q + offset` ≥ 0, at most 63) so that one
//! `u8 × i8` multiply-add instruction covers them; offsets are corrected exactly with sums of
//! the activation quants (Q4_0/Q5_0: per group of 4 in the one-row tiles, so that every i32
//! lane equals ggml's; per block in the panels; Q6_K: per 16-sub-block via the Q8_K `bsums`).
//! Q8_0 weights use the sign trick instead (`|w| × sign(x, w)`), as ggml does. Sub-block scales
//! of the K-quants are applied in 16-bit lanes after `vpmaddubsw` (`|pair sum| ≤ 2·63·128`, no
//! saturation), again as in ggml.
//!
//! This file holds the one-row tiles (few activation rows): a tile computes `R` activation rows
//! × `P` weight rows over the whole row; every decoded weight vector is reused `R` times and
//! every activation vector `P` times. Per 32-block the eight i32 lanes are converted to f32 and
//! accumulated with `fma(d_w·d_x, ·, acc)`; K-quants first accumulate a super-block in i32
//! lanes. Each output takes exactly the float steps of ggml's x86 `vec_dot` for its type, so
//! results are bit-identical to it. [`panel`] holds the many-row kernels.

// Register tiles index several arrays with the same counters.
#![allow(clippy::needless_range_loop)]

mod panel;

use std::arch::x86_64::*;

use super::{Q8Order, Task};
use crate::Isa;
use tg_quant::GgmlType;

/// Whether the AVX-512 path can use VNNI (else it runs the AVX2 kernels).
pub(super) fn has_vnni() -> bool {
    Isa::Avx512.is_available() && is_x86_feature_detected!("avx512vnni")
}

/// Runs `t` with the AVX2 kernels.
///
/// # Safety
/// AVX2, FMA and F16C must be available; `t` describes validated buffers.
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn run_avx2(t: &Task<'_>) {
    run_generic::<Avx2Ops>(t)
}

/// Runs `t` with the AVX-512 VNNI kernels.
///
/// # Safety
/// [`has_vnni`] must be true; `t` describes validated buffers.
#[target_feature(enable = "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")]
pub(super) unsafe fn run_vnni(t: &Task<'_>) {
    run_generic::<VnniOps>(t)
}

// ---------------------------------------------------------------------------------------------
// Integer primitives.

/// The ISA-specific integer operations.
trait Ops: Copy {
    /// Activation rows per tile for the K-quants (register budget).
    const R_K: usize;
    /// `acc + Σ_{4 adjacent bytes} a·b` with `a` unsigned, `b` signed (i32 lanes).
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
    /// `acc + Σ_{2 adjacent i16} (a·b pair sums) · s`: `a` unsigned bytes ≤ 63, `b` signed bytes,
    /// `s` i16 scales (i32 lanes).
    unsafe fn dp_scaled(acc: __m256i, a: __m256i, b: __m256i, s: __m256i) -> __m256i;
    /// `acc + Σ_{2 adjacent i16} a·b` (i32 lanes).
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i;
    /// Byte `j` of `v` plus 16 where bit `j` of `bits` is set.
    unsafe fn add_bits16(v: __m256i, bits: u32) -> __m256i;
    /// Byte `j` of `v` plus 16 where bit `s` of byte `j` of `qh` is set.
    unsafe fn add_plane16(v: __m256i, qh: __m256i, s: u32) -> __m256i;
}

#[derive(Clone, Copy)]
struct Avx2Ops;

impl Ops for Avx2Ops {
    const R_K: usize = 2;
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        // |pair| ≤ 2·63·128 < 2¹⁵ for the unsigned weight quants used here: no saturation.
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), _mm256_set1_epi16(1)))
    }
    #[inline(always)]
    unsafe fn dp_scaled(acc: __m256i, a: __m256i, b: __m256i, s: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(a, b), s))
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_add_epi32(acc, _mm256_madd_epi16(a, b))
    }
    #[inline(always)]
    unsafe fn add_bits16(v: __m256i, bits: u32) -> __m256i {
        // Byte j gets byte j/8 of `bits`, then tests bit j%8.
        let spread = _mm256_shuffle_epi8(
            _mm256_set1_epi32(bits as i32),
            _mm256_setr_epi64x(0, 0x0101_0101_0101_0101, 0x0202_0202_0202_0202, 0x0303_0303_0303_0303),
        );
        let sel = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(spread, sel), sel);
        _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(16)))
    }
    #[inline(always)]
    unsafe fn add_plane16(v: __m256i, qh: __m256i, s: u32) -> __m256i {
        let bit = _mm256_set1_epi8((1u8 << s) as i8);
        let set = _mm256_cmpeq_epi8(_mm256_and_si256(qh, bit), bit);
        _mm256_or_si256(v, _mm256_and_si256(set, _mm256_set1_epi8(16)))
    }
}

#[derive(Clone, Copy)]
struct VnniOps;

impl Ops for VnniOps {
    const R_K: usize = 4;
    #[inline(always)]
    unsafe fn dpbusd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpbusd_epi32(acc, a, b)
    }
    #[inline(always)]
    unsafe fn dp_scaled(acc: __m256i, a: __m256i, b: __m256i, s: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, _mm256_maddubs_epi16(a, b), s)
    }
    #[inline(always)]
    unsafe fn dpwssd(acc: __m256i, a: __m256i, b: __m256i) -> __m256i {
        _mm256_dpwssd_epi32(acc, a, b)
    }
    #[inline(always)]
    unsafe fn add_bits16(v: __m256i, bits: u32) -> __m256i {
        _mm256_mask_add_epi8(v, bits, v, _mm256_set1_epi8(16))
    }
    #[inline(always)]
    unsafe fn add_plane16(v: __m256i, qh: __m256i, s: u32) -> __m256i {
        let k = _mm256_test_epi8_mask(qh, _mm256_set1_epi8((1u8 << s) as i8));
        _mm256_mask_add_epi8(v, k, v, _mm256_set1_epi8(16))
    }
}

/// Prefetch distance beyond the end of the current tile's weight rows, in bytes.
const PREFETCH_PAST: usize = 1024;

/// Prefetches the cache lines of `bytes` bytes at `p` into L1 (never faults; the address may
/// lie past the weights).
#[inline(always)]
unsafe fn prefetch(p: *const u8, bytes: usize) {
    let mut off = 0;
    while off < bytes {
        _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(off).cast());
        off += 64;
    }
}

/// The f16 at `p`, converted exactly, in every lane. (Scales are kept as vectors: reduced to a
/// scalar, LLVM converts them with an insert into an arbitrary register, and when that is an
/// accumulator the false dependency chains the loop iterations.)
#[inline(always)]
unsafe fn f16_splat(p: *const u8) -> __m256 {
    _mm256_cvtph_ps(_mm_set1_epi16(p.cast::<i16>().read_unaligned()))
}

/// The f16 bits at `p`.
#[inline(always)]
unsafe fn f16_bits(p: *const u8) -> u16 {
    p.cast::<u16>().read_unaligned()
}

#[inline(always)]
unsafe fn hsum(v: __m256) -> f32 {
    let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_movehdup_ps(s));
    _mm_cvtss_f32(s)
}

/// Lane sums of every accumulator (plain loops: closures would not inherit the target features).
#[inline(always)]
unsafe fn hsum_all<const R: usize, const P: usize>(acc: &[[__m256; P]; R]) -> [[f32; P]; R] {
    let mut out = [[0.0f32; P]; R];
    for r in 0..R {
        for p in 0..P {
            out[r][p] = hsum(acc[r][p]);
        }
    }
    out
}

#[inline(always)]
unsafe fn nibbles_lo(v: __m256i) -> __m256i {
    _mm256_and_si256(v, _mm256_set1_epi8(0x0F))
}

#[inline(always)]
unsafe fn nibbles_hi(v: __m256i) -> __m256i {
    _mm256_and_si256(_mm256_srli_epi16::<4>(v), _mm256_set1_epi8(0x0F))
}

/// 16 packed nibbles → 32 bytes in element order (low nibbles, then high nibbles).
#[inline(always)]
unsafe fn nibbles32(p: *const u8) -> __m256i {
    let q = _mm_loadu_si128(p.cast());
    _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16::<4>(q), q), _mm256_set1_epi8(0x0F))
}

// ---------------------------------------------------------------------------------------------
// 32-element block formats (Q8_0 activations).

/// A weight format with 32-element blocks and one f16 scale.
trait Legacy {
    /// Bytes per block.
    const BYTES: usize;
    /// `w = d · (u − OFFSET)` for the decoded bytes `u` (0 for Q8_0, which is signed; else a
    /// power of two).
    const OFFSET: i32;
    /// The block's f16 scale bits.
    #[inline(always)]
    unsafe fn scale_bits(blk: *const u8) -> u16 {
        f16_bits(blk)
    }
    /// The 32 quants (unsigned `u`, or signed for Q8_0).
    unsafe fn decode<O: Ops>(blk: *const u8) -> __m256i;
    /// `init +` lane sums of `u·x` (offset not applied).
    #[inline(always)]
    unsafe fn dot<O: Ops>(init: __m256i, w: __m256i, x: __m256i) -> __m256i {
        O::dpbusd(init, w, x)
    }
}

struct Q4_0;
impl Legacy for Q4_0 {
    const BYTES: usize = 18;
    const OFFSET: i32 = 8;
    #[inline(always)]
    unsafe fn decode<O: Ops>(blk: *const u8) -> __m256i {
        nibbles32(blk.add(2))
    }
}

struct Q5_0;
impl Legacy for Q5_0 {
    const BYTES: usize = 22;
    const OFFSET: i32 = 16;
    #[inline(always)]
    unsafe fn decode<O: Ops>(blk: *const u8) -> __m256i {
        let qh = blk.add(2).cast::<u32>().read_unaligned();
        O::add_bits16(nibbles32(blk.add(6)), qh)
    }
}

struct Q8_0;
impl Legacy for Q8_0 {
    const BYTES: usize = 34;
    const OFFSET: i32 = 0;
    #[inline(always)]
    unsafe fn decode<O: Ops>(blk: *const u8) -> __m256i {
        _mm256_loadu_si256(blk.add(2).cast())
    }
    #[inline(always)]
    unsafe fn dot<O: Ops>(init: __m256i, w: __m256i, x: __m256i) -> __m256i {
        // |w| ≤ 128 as u8, x ≥ −127: no saturation in the AVX2 pair sums either.
        O::dpbusd(init, _mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w))
    }
}

/// Activation rows of one tile: quants, per-block scales and per-block sums.
#[derive(Clone, Copy)]
struct XRows<const R: usize> {
    q: [*const i8; R],
    d: [*const f32; R],
    s: [*const i16; R],
    /// Q8_0: negated sums of each 4 quants.
    g: [*const i16; R],
}

/// `R × P` dot products of whole rows for a 32-block format. Lane `l` of a block's integer
/// result is `Σ_{e ∈ 4l..4l+4} (u_e − OFFSET)·x_e`, and the lanes go through
/// `fma(d_w·d_x, ·, acc)`, exactly as in ggml's x86 `vec_dot` for these formats, so a tile
/// reproduces ggml's result bit for bit.
#[inline(always)]
unsafe fn legacy_tile<O: Ops, F: Legacy, const R: usize, const P: usize>(
    w: [*const u8; P],
    x: XRows<R>,
    nb: usize,
    pf: Option<*const u8>,
) -> [[f32; P]; R] {
    let mut acc = [[_mm256_setzero_ps(); P]; R];
    for b in 0..nb {
        let mut wv = [_mm256_setzero_si256(); P];
        let mut dw = [_mm256_setzero_ps(); P];
        for p in 0..P {
            let blk = w[p].add(b * F::BYTES);
            if let (Some(pf), 0) = (pf, p) {
                prefetch(pf.wrapping_add(b * P * F::BYTES), P * F::BYTES);
            }
            wv[p] = F::decode::<O>(blk);
            dw[p] = f16_splat(blk);
        }
        for r in 0..R {
            let xv = _mm256_loadu_si256(x.q[r].add(32 * b).cast());
            let dx = _mm256_set1_ps(*x.d[r].add(b));
            // −OFFSET·(sum of each 4 activations), so that the lanes hold (u − OFFSET)·x sums.
            let init = if F::OFFSET != 0 {
                let g = _mm256_cvtepi16_epi32(_mm_loadu_si128(x.g[r].add(8 * b).cast()));
                _mm256_sllv_epi32(g, _mm256_set1_epi32(F::OFFSET.trailing_zeros() as i32))
            } else {
                _mm256_setzero_si256()
            };
            for p in 0..P {
                let lanes = F::dot::<O>(init, wv[p], xv);
                acc[r][p] = _mm256_fmadd_ps(_mm256_mul_ps(dw[p], dx), _mm256_cvtepi32_ps(lanes), acc[r][p]);
            }
        }
    }
    hsum_all(&acc)
}

// ---------------------------------------------------------------------------------------------
// K-quants (Q8_K activations).

/// Per-super-block data of a K-quant weight row, decoded once and shared by all activation rows.
#[derive(Clone, Copy)]
struct KHeader {
    /// Super-block scale (and Q4_K/Q5_K min scale) in every lane.
    d: __m256,
    dmin: __m256,
    /// Q4_K/Q5_K: the eight sub-block scales as i16 in both 128-bit lanes.
    /// Q6_K: the sixteen sub-block scales as i16.
    scales: __m256i,
    /// Q4_K/Q5_K: the eight mins as i16 (low 128 bits).
    mins: __m256i,
    /// Q5_K: the high-bit bytes.
    qh: __m256i,
}

impl KHeader {
    const ZERO: KHeader = KHeader {
        // SAFETY: all-zero bits are valid vectors.
        d: unsafe { std::mem::transmute::<[u8; 32], __m256>([0; 32]) },
        dmin: unsafe { std::mem::transmute::<[u8; 32], __m256>([0; 32]) },
        // SAFETY: all-zero bits are a valid __m256i.
        scales: unsafe { std::mem::transmute::<[u8; 32], __m256i>([0; 32]) },
        mins: unsafe { std::mem::transmute::<[u8; 32], __m256i>([0; 32]) },
        qh: unsafe { std::mem::transmute::<[u8; 32], __m256i>([0; 32]) },
    };
}

/// The scalar header of a K-quant super-block (for packing panels).
#[derive(Clone, Copy, Default)]
struct KMeta {
    /// f16 bits of the super-block scale and min scale.
    d: u16,
    dmin: u16,
    /// Sub-block scales (8 for Q4_K/Q5_K, 16 for Q6_K).
    sc: [i16; 16],
    /// Q4_K/Q5_K: sub-block mins.
    mins: [i16; 8],
}

/// A 256-element super-block format.
trait KQuant {
    /// Bytes per super-block.
    const BYTES: usize;
    /// True for 16-element sub-blocks (Q6_K), false for 32 (Q4_K/Q5_K, which also have mins).
    const SUB16: bool;
    /// The scales of a super-block, as plain numbers.
    unsafe fn meta(blk: *const u8) -> KMeta;
    unsafe fn header(blk: *const u8) -> KHeader;
    /// The 32 unsigned quants of chunk `c` (elements `32c..32c+32`) and their i16 scales
    /// (per 16-bit lane: each lane covers two elements).
    unsafe fn chunk<O: Ops>(blk: *const u8, h: &KHeader, c: usize) -> (__m256i, __m256i);
    /// Adds the super-block's contribution to `acc` (and, for the mins, to `accm`), given the
    /// integer sums `isum` (lanes), the activation's 16 block sums `bsums` and scale `dx`.
    /// Mirrors the float steps of ggml's x86 `vec_dot` for the format.
    unsafe fn finish(acc: &mut __m256, accm: &mut __m128, isum: __m256i, bsums: __m256i, h: &KHeader, dx: f32);
    /// The dot product from the final accumulators.
    #[inline(always)]
    unsafe fn total(acc: __m256, accm: __m128) -> f32 {
        let _ = accm;
        hsum(acc)
    }
}

/// The 8 scales and 8 mins of a Q4_K/Q5_K super-block (6 bits each, packed in 12 bytes) as
/// bytes `[sc0..sc7, m0..m7]`.
#[inline(always)]
unsafe fn scales_mins_k4(p: *const u8) -> __m128i {
    let w0 = p.cast::<u32>().read_unaligned();
    let w1 = p.add(4).cast::<u32>().read_unaligned();
    let w2 = p.add(8).cast::<u32>().read_unaligned();
    const LOW6: u32 = 0x3F3F_3F3F;
    const LOW4: u32 = 0x0F0F_0F0F;
    const TOP2: u32 = 0x0303_0303;
    let sc_lo = w0 & LOW6;
    let m_lo = w1 & LOW6;
    let sc_hi = (w2 & LOW4) | (((w0 >> 6) & TOP2) << 4);
    let m_hi = ((w2 >> 4) & LOW4) | (((w1 >> 6) & TOP2) << 4);
    _mm_setr_epi32(sc_lo as i32, sc_hi as i32, m_lo as i32, m_hi as i32)
}

#[inline(always)]
unsafe fn k4_meta(blk: *const u8) -> KMeta {
    let mut b = [0u8; 16];
    _mm_storeu_si128(b.as_mut_ptr().cast(), scales_mins_k4(blk.add(4)));
    let mut m = KMeta { d: f16_bits(blk), dmin: f16_bits(blk.add(2)), ..KMeta::default() };
    for s in 0..8 {
        m.sc[s] = i16::from(b[s]);
        m.mins[s] = i16::from(b[8 + s]);
    }
    m
}

#[inline(always)]
unsafe fn k4_header(blk: *const u8) -> KHeader {
    let sm = scales_mins_k4(blk.add(4));
    KHeader {
        d: f16_splat(blk),
        dmin: f16_splat(blk.add(2)),
        scales: _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm)),
        mins: _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_unpackhi_epi64(sm, sm))),
        qh: _mm256_setzero_si256(),
    }
}

/// Scale `c` of a Q4_K/Q5_K header, in every i16 lane.
#[inline(always)]
unsafe fn k4_scale(h: &KHeader, c: usize) -> __m256i {
    let idx = (2 * c as i16) | ((2 * c as i16 + 1) << 8);
    _mm256_shuffle_epi8(h.scales, _mm256_set1_epi16(idx))
}

/// `Σ_s m_s·Σ_{32 elements of s} x` of a Q4_K/Q5_K super-block as ggml forms it: four i32
/// lanes, lane `l` covering sub-blocks `2l` and `2l+1`.
#[inline(always)]
unsafe fn k4_min_products(bsums: __m256i, h: &KHeader) -> __m128i {
    let s32 = _mm_hadd_epi16(_mm256_castsi256_si128(bsums), _mm256_extracti128_si256::<1>(bsums));
    _mm_madd_epi16(_mm256_castsi256_si128(h.mins), s32)
}

struct Q4K;
impl KQuant for Q4K {
    const BYTES: usize = 144;
    const SUB16: bool = false;
    #[inline(always)]
    unsafe fn meta(blk: *const u8) -> KMeta {
        k4_meta(blk)
    }
    #[inline(always)]
    unsafe fn header(blk: *const u8) -> KHeader {
        k4_header(blk)
    }
    #[inline(always)]
    unsafe fn chunk<O: Ops>(blk: *const u8, h: &KHeader, c: usize) -> (__m256i, __m256i) {
        let q = _mm256_loadu_si256(blk.add(16 + 32 * (c / 2)).cast());
        let v = if c.is_multiple_of(2) { nibbles_lo(q) } else { nibbles_hi(q) };
        (v, k4_scale(h, c))
    }
    #[inline(always)]
    unsafe fn finish(acc: &mut __m256, accm: &mut __m128, isum: __m256i, bsums: __m256i, h: &KHeader, dx: f32) {
        // ggml: four float lanes for the mins, summed at the end.
        let prod = k4_min_products(bsums, h);
        let dmin = _mm_mul_ps(_mm_set1_ps(-dx), _mm256_castps256_ps128(h.dmin));
        *accm = _mm_fmadd_ps(dmin, _mm_cvtepi32_ps(prod), *accm);
        *acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dx), h.d), _mm256_cvtepi32_ps(isum), *acc);
    }
    #[inline(always)]
    unsafe fn total(acc: __m256, accm: __m128) -> f32 {
        let m = _mm_add_ps(accm, _mm_movehl_ps(accm, accm));
        let m = _mm_add_ss(m, _mm_movehdup_ps(m));
        hsum(acc) + _mm_cvtss_f32(m)
    }
}

struct Q5K;
impl KQuant for Q5K {
    const BYTES: usize = 176;
    const SUB16: bool = false;
    #[inline(always)]
    unsafe fn meta(blk: *const u8) -> KMeta {
        k4_meta(blk)
    }
    #[inline(always)]
    unsafe fn header(blk: *const u8) -> KHeader {
        KHeader { qh: _mm256_loadu_si256(blk.add(16).cast()), ..k4_header(blk) }
    }
    #[inline(always)]
    unsafe fn chunk<O: Ops>(blk: *const u8, h: &KHeader, c: usize) -> (__m256i, __m256i) {
        let q = _mm256_loadu_si256(blk.add(48 + 32 * (c / 2)).cast());
        let v = if c.is_multiple_of(2) { nibbles_lo(q) } else { nibbles_hi(q) };
        (O::add_plane16(v, h.qh, c as u32), k4_scale(h, c))
    }
    #[inline(always)]
    unsafe fn finish(acc: &mut __m256, accm: &mut __m128, isum: __m256i, bsums: __m256i, h: &KHeader, dx: f32) {
        // ggml: one scalar sum for the mins (the integer total, scaled and fused-added).
        let prod = k4_min_products(bsums, h);
        let t = _mm_hadd_epi32(_mm_hadd_epi32(prod, prod), prod);
        let dmin = _mm_mul_ps(_mm_set1_ps(-dx), _mm256_castps256_ps128(h.dmin));
        *accm = _mm_fmadd_ss(dmin, _mm_cvtepi32_ps(t), *accm);
        *acc = _mm256_fmadd_ps(_mm256_mul_ps(_mm256_set1_ps(dx), h.d), _mm256_cvtepi32_ps(isum), *acc);
    }
    #[inline(always)]
    unsafe fn total(acc: __m256, accm: __m128) -> f32 {
        hsum(acc) + _mm_cvtss_f32(accm)
    }
}

struct Q6K;
impl KQuant for Q6K {
    const BYTES: usize = 210;
    const SUB16: bool = true;
    #[inline(always)]
    unsafe fn meta(blk: *const u8) -> KMeta {
        let mut m = KMeta { d: f16_bits(blk.add(208)), ..KMeta::default() };
        for t in 0..16 {
            m.sc[t] = i16::from(*blk.add(192 + t) as i8);
        }
        m
    }
    #[inline(always)]
    unsafe fn header(blk: *const u8) -> KHeader {
        KHeader {
            d: f16_splat(blk.add(208)),
            dmin: _mm256_setzero_ps(),
            scales: _mm256_cvtepi8_epi16(_mm_loadu_si128(blk.add(192).cast())),
            mins: _mm256_setzero_si256(),
            qh: _mm256_setzero_si256(),
        }
    }
    #[inline(always)]
    unsafe fn chunk<O: Ops>(blk: *const u8, h: &KHeader, c: usize) -> (__m256i, __m256i) {
        // Chunk c = 4·half + s: low nibbles from ql[64·half + 32·(s%2)..] (high nibble when
        // s ≥ 2), two high bits from bits 2s of qh[32·half..].
        let (half, s) = (c / 4, c % 4);
        let ql = _mm256_loadu_si256(blk.add(64 * half + 32 * (s % 2)).cast());
        let qh = _mm256_loadu_si256(blk.add(128 + 32 * half).cast());
        let lo = if s < 2 { nibbles_lo(ql) } else { nibbles_hi(ql) };
        let hi = match s {
            0 => _mm256_slli_epi16::<4>(_mm256_and_si256(qh, _mm256_set1_epi8(0x03))),
            1 => _mm256_slli_epi16::<2>(_mm256_and_si256(qh, _mm256_set1_epi8(0x0C))),
            2 => _mm256_and_si256(qh, _mm256_set1_epi8(0x30)),
            _ => _mm256_and_si256(_mm256_srli_epi16::<2>(qh), _mm256_set1_epi8(0x30)),
        };
        // Scales 2c (low 128-bit lane: elements 0..16) and 2c+1 (high lane).
        let pair = _mm256_permutevar8x32_epi32(h.scales, _mm256_set1_epi32(c as i32));
        let sc = _mm256_shuffle_epi8(
            pair,
            _mm256_setr_epi64x(
                0x0100_0100_0100_0100,
                0x0100_0100_0100_0100,
                0x0302_0302_0302_0302,
                0x0302_0302_0302_0302,
            ),
        );
        (_mm256_or_si256(lo, hi), sc)
    }
    #[inline(always)]
    unsafe fn finish(acc: &mut __m256, _accm: &mut __m128, isum: __m256i, bsums: __m256i, h: &KHeader, dx: f32) {
        // Σ_t sc_t·Σ(u − 32)·x = isum − 32·Σ_t sc_t·bsum_t.
        let corr = _mm256_slli_epi32::<5>(_mm256_madd_epi16(h.scales, bsums));
        *acc = _mm256_fmadd_ps(
            _mm256_mul_ps(h.d, _mm256_set1_ps(dx)),
            _mm256_cvtepi32_ps(_mm256_sub_epi32(isum, corr)),
            *acc,
        );
    }
}

/// `R × P` dot products of whole rows for a K-quant format.
#[inline(always)]
unsafe fn kquant_tile<O: Ops, F: KQuant, const R: usize, const P: usize>(
    w: [*const u8; P],
    x: XRows<R>,
    nb: usize,
    pf: Option<*const u8>,
) -> [[f32; P]; R] {
    let mut acc = [[_mm256_setzero_ps(); P]; R];
    let mut accm = [[_mm_setzero_ps(); P]; R];
    for b in 0..nb {
        let mut blk = [std::ptr::null::<u8>(); P];
        let mut hdr = [KHeader::ZERO; P];
        for p in 0..P {
            blk[p] = w[p].add(b * F::BYTES);
            if let (Some(pf), 0) = (pf, p) {
                prefetch(pf.wrapping_add(b * P * F::BYTES), P * F::BYTES);
            }
            hdr[p] = F::header(blk[p]);
        }
        let mut isum = [[_mm256_setzero_si256(); P]; R];
        for c in 0..8 {
            let mut wv = [_mm256_setzero_si256(); P];
            let mut sc = [_mm256_setzero_si256(); P];
            for p in 0..P {
                (wv[p], sc[p]) = F::chunk::<O>(blk[p], &hdr[p], c);
            }
            for r in 0..R {
                let xv = _mm256_loadu_si256(x.q[r].add(256 * b + 32 * c).cast());
                for p in 0..P {
                    isum[r][p] = O::dp_scaled(isum[r][p], wv[p], xv, sc[p]);
                }
            }
        }
        for r in 0..R {
            let bsums = _mm256_loadu_si256(x.s[r].add(16 * b).cast());
            let dx = *x.d[r].add(b);
            for p in 0..P {
                F::finish(&mut acc[r][p], &mut accm[r][p], isum[r][p], bsums, &hdr[p], dx);
            }
        }
    }
    let mut out = [[0.0f32; P]; R];
    for r in 0..R {
        for p in 0..P {
            out[r][p] = F::total(acc[r][p], accm[r][p]);
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Driver.

/// Computes activation rows `i0..i0+rv` (`rv ≤ R`; missing rows repeat the last one and their
/// results are dropped) against weight rows `cols` (pairs; an odd last row is paired with
/// itself).
#[inline(always)]
unsafe fn tiles<O: Ops, const R: usize, const P: usize>(
    t: &Task<'_>,
    i0: usize,
    rv: usize,
    cols: std::ops::Range<usize>,
) {
    let xq = t.xq;
    let k = xq.k;
    let (bs, sums) = if xq.ty == GgmlType::Q8_0 { (32, 1) } else { (256, 16) };
    let nb = k / bs;
    let rows: [usize; R] = std::array::from_fn(|r| i0 + r.min(rv - 1));
    let x = XRows::<R> {
        q: rows.map(|i| xq.qs.as_ptr().add(i * k)),
        d: rows.map(|i| xq.d.as_ptr().add(i * nb)),
        s: rows.map(|i| xq.sums.as_ptr().add(i * nb * sums)),
        g: rows.map(|i| xq.gsums.as_ptr().wrapping_add(i * k / 4)),
    };
    let mut j = cols.start;
    while j < cols.end {
        let pv = (cols.end - j).min(P);
        let w: [*const u8; P] = std::array::from_fn(|p| t.w.add((j + p.min(pv - 1)) * t.row_bytes));
        // The first pass over a group of weight rows streams them from memory: while a tile
        // runs, fetch the rows that follow it, at the rate the tile consumes its own.
        let pf = (i0 == 0).then(|| t.w.wrapping_add((j + P) * t.row_bytes + PREFETCH_PAST));
        let out = match t.ty {
            GgmlType::Q4_0 => legacy_tile::<O, Q4_0, R, P>(w, x, nb, pf),
            GgmlType::Q5_0 => legacy_tile::<O, Q5_0, R, P>(w, x, nb, pf),
            GgmlType::Q8_0 => legacy_tile::<O, Q8_0, R, P>(w, x, nb, pf),
            GgmlType::Q4_K => kquant_tile::<O, Q4K, R, P>(w, x, nb, pf),
            GgmlType::Q5_K => kquant_tile::<O, Q5K, R, P>(w, x, nb, pf),
            GgmlType::Q6_K => kquant_tile::<O, Q6K, R, P>(w, x, nb, pf),
            _ => unreachable!("validated by the entry point"),
        };
        for (r, o) in out.iter().enumerate().take(rv) {
            for (p, &v) in o.iter().enumerate().take(pv) {
                t.put(i0 + r, j + p, v);
            }
        }
        j += pv;
    }
}

/// From how many activation rows on weight rows are packed into panels ([`panel`]): packing
/// pays off at once for the cheap-to-decode 32-blocks, later for the K-quants (whose one-row
/// kernels share a decoded super-block over several activation rows already) and for Q8_0
/// (whose one-row kernel is bound by memory bandwidth up to a few rows). Measured on Zen 4.
fn panel_min_m(ty: GgmlType) -> usize {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 => 2,
        GgmlType::Q4_K | GgmlType::Q5_K => 4,
        _ => 8,
    }
}

#[inline(always)]
unsafe fn run_generic<O: panel::PanelRows>(t: &Task<'_>) {
    let m = t.xq.m;
    let panels = match t.order {
        Q8Order::Fast => m >= panel_min_m(t.ty),
        // llama.cpp: vec_dot / tinyBLAS (per-block steps as the one-row tiles) for the 32-blocks,
        // repacked 8-row kernels for Q4_K (n a multiple of 8), vec_dot for the K-quants below
        // 8 rows; above, llama.cpp's "tiled" GEMM is not mirrored and the fast choice is taken.
        Q8Order::Ggml => match t.ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => false,
            GgmlType::Q4_K if t.n.is_multiple_of(8) => true,
            _ => m >= 8,
        },
    };
    if panels {
        return panel::run::<O>(t);
    }
    let rmax = if t.xq.ty == GgmlType::Q8_K { O::R_K } else { 4 };
    let group = t.group_rows();
    let mut j0 = t.rows.start;
    while j0 < t.rows.end {
        let cols = j0..(j0 + group).min(t.rows.end);
        let mut i = 0;
        while i < m {
            let left = m - i;
            // Tiles of `rmax` rows; a remainder of 3 uses a padded 4-row tile.
            let r = if left >= rmax {
                rmax
            } else if left == 3 {
                4
            } else {
                left
            };
            let rv = left.min(r);
            match r {
                1 => tiles::<O, 1, 2>(t, i, rv, cols.clone()),
                2 => tiles::<O, 2, 2>(t, i, rv, cols.clone()),
                _ => tiles::<O, 4, 2>(t, i, rv, cols.clone()),
            }
            i += rv;
        }
        j0 = cols.end;
    }
}

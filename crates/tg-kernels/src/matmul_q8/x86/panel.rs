//! The many-row path: weight rows are packed eight at a time into an interleaved panel (every
//! 32-byte vector holds four consecutive quants of each of the eight rows), so that one
//! `u8 × i8` multiply-add with four broadcast activation bytes advances eight dot products at
//! once, with no horizontal sums. Each i32 lane then holds the exact integer dot product of one
//! weight row's block (or sub-block), which is scaled and accumulated exactly as in the
//! one-row kernels; results for eight consecutive outputs are stored with one vector store.
//!
//! Packing (decode + 8×8 dword transpose) costs about as much as one activation row's worth of
//! multiply-adds, so the path is used when there are enough activation rows to amortize it.

// Register tiles index several arrays with the same counters.
#![allow(clippy::needless_range_loop)]

use std::arch::x86_64::*;

use super::{prefetch, Avx2Ops, KQuant, Legacy, Ops, Q4K, Q4_0, Q5K, Q5_0, Q6K, Q8_0};
use crate::matmul_q8::Task;
use tg_quant::GgmlType;

/// Weight rows per panel (i32 lanes of a 256-bit vector).
const W: usize = 8;

/// Packed weights of one panel over the whole row.
struct Panel {
    /// Interleaved quants: vector `8·step + j` holds bytes `4j..4j+4` of step `step` (32
    /// elements) of each row.
    q: Vec<__m256i>,
    /// Per block: `d_w` (32-blocks); `d`, `dmin` (K-quants).
    f: Vec<__m256>,
    /// Per K-quant block: integer scale vectors (see the kernels).
    s: Vec<__m256i>,
}

/// Integer vectors per super-block in [`Panel::s`]: Q4_K/Q5_K: 8 scales + 4 min pairs;
/// Q6_K: 8 low-half scales, 8 high-half scales, 8 scale pairs.
const fn s_per_block(sub16: bool) -> usize {
    if sub16 {
        24
    } else {
        12
    }
}

/// Transposes the 8×8 dwords of `v` (row `i` = vector `i`) and stores vector `j` (dword `j`
/// of every row) at `out[j]`.
#[inline(always)]
unsafe fn transpose_store(v: &[__m256i; W], out: *mut __m256i) {
    let t0 = _mm256_unpacklo_epi32(v[0], v[1]);
    let t1 = _mm256_unpackhi_epi32(v[0], v[1]);
    let t2 = _mm256_unpacklo_epi32(v[2], v[3]);
    let t3 = _mm256_unpackhi_epi32(v[2], v[3]);
    let t4 = _mm256_unpacklo_epi32(v[4], v[5]);
    let t5 = _mm256_unpackhi_epi32(v[4], v[5]);
    let t6 = _mm256_unpacklo_epi32(v[6], v[7]);
    let t7 = _mm256_unpackhi_epi32(v[6], v[7]);
    let u0 = _mm256_unpacklo_epi64(t0, t2);
    let u1 = _mm256_unpackhi_epi64(t0, t2);
    let u2 = _mm256_unpacklo_epi64(t1, t3);
    let u3 = _mm256_unpackhi_epi64(t1, t3);
    let u4 = _mm256_unpacklo_epi64(t4, t6);
    let u5 = _mm256_unpackhi_epi64(t4, t6);
    let u6 = _mm256_unpacklo_epi64(t5, t7);
    let u7 = _mm256_unpackhi_epi64(t5, t7);
    *out.add(0) = _mm256_permute2x128_si256::<0x20>(u0, u4);
    *out.add(1) = _mm256_permute2x128_si256::<0x20>(u1, u5);
    *out.add(2) = _mm256_permute2x128_si256::<0x20>(u2, u6);
    *out.add(3) = _mm256_permute2x128_si256::<0x20>(u3, u7);
    *out.add(4) = _mm256_permute2x128_si256::<0x31>(u0, u4);
    *out.add(5) = _mm256_permute2x128_si256::<0x31>(u1, u5);
    *out.add(6) = _mm256_permute2x128_si256::<0x31>(u2, u6);
    *out.add(7) = _mm256_permute2x128_si256::<0x31>(u3, u7);
}

/// Four activation bytes at `p`, in every i32 lane.
#[inline(always)]
unsafe fn bcast4<T>(p: *const T) -> __m256i {
    _mm256_set1_epi32(p.cast::<i32>().read_unaligned())
}

/// Prefetches the part of the next panel's rows (`next`, `W · row_bytes` bytes) that block `b`
/// of `nb` corresponds to.
#[inline(always)]
unsafe fn prefetch_next(next: *const u8, bytes: usize, b: usize, nb: usize) {
    let (lo, hi) = (bytes * b / nb, bytes * (b + 1) / nb);
    prefetch(next.wrapping_add(lo), hi - lo);
}

// ---------------------------------------------------------------------------------------------
// 32-element blocks.

#[inline(always)]
unsafe fn pack_legacy<O: Ops, F: Legacy>(rows: &[*const u8; W], next: *const u8, nb: usize, pn: &mut Panel) {
    for b in 0..nb {
        prefetch_next(next, W * nb * F::BYTES, b, nb);
        let mut v = [_mm256_setzero_si256(); W];
        let mut d = [0u16; W];
        for i in 0..W {
            let blk = rows[i].add(b * F::BYTES);
            v[i] = F::decode::<O>(blk);
            d[i] = F::scale_bits(blk);
        }
        transpose_store(&v, pn.q.as_mut_ptr().add(b * W));
        pn.f[b] = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
    }
}

/// `R` activation rows against a packed 32-block panel: lane `i` of result `r` is the dot
/// product of activation row `r` with panel row `i`.
#[inline(always)]
unsafe fn legacy_kernel<O: Ops, F: Legacy, const R: usize>(
    pn: &Panel,
    xq: [*const i8; R],
    xd: [*const f32; R],
    xc: [*const i32; R],
    nb: usize,
) -> [__m256; R] {
    let mut acc = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let mut lanes = [_mm256_setzero_si256(); R];
        for r in 0..R {
            if F::OFFSET != 0 {
                lanes[r] = _mm256_set1_epi32(*xc[r].add(b));
            }
        }
        for j in 0..W {
            let pv = *pn.q.as_ptr().add(b * W + j);
            if F::OFFSET == 0 {
                // Signed weights (Q8_0): |w| × sign(x, w).
                let av = _mm256_sign_epi8(pv, pv);
                for r in 0..R {
                    lanes[r] = O::dpbusd(lanes[r], av, _mm256_sign_epi8(bcast4(xq[r].add(32 * b + 4 * j)), pv));
                }
            } else {
                for r in 0..R {
                    lanes[r] = O::dpbusd(lanes[r], pv, bcast4(xq[r].add(32 * b + 4 * j)));
                }
            }
        }
        let dw = pn.f[b];
        for r in 0..R {
            let d = _mm256_mul_ps(dw, _mm256_set1_ps(*xd[r].add(b)));
            acc[r] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(lanes[r]), acc[r]);
        }
    }
    acc
}

// ---------------------------------------------------------------------------------------------
// K-quants.

#[inline(always)]
unsafe fn pack_k<O: Ops, F: KQuant>(rows: &[*const u8; W], next: *const u8, nb: usize, pn: &mut Panel) {
    let sp = s_per_block(F::SUB16);
    for b in 0..nb {
        prefetch_next(next, W * nb * F::BYTES, b, nb);
        let mut blk = [std::ptr::null::<u8>(); W];
        let mut hdr = [super::KHeader::ZERO; W];
        let mut meta = [super::KMeta::default(); W];
        for i in 0..W {
            blk[i] = rows[i].add(b * F::BYTES);
            hdr[i] = F::header(blk[i]);
            meta[i] = F::meta(blk[i]);
        }
        for c in 0..8 {
            let mut v = [_mm256_setzero_si256(); W];
            for i in 0..W {
                v[i] = F::chunk::<O>(blk[i], &hdr[i], c).0;
            }
            transpose_store(&v, pn.q.as_mut_ptr().add((b * 8 + c) * W));
        }
        // Per-row integer scales, one i32 lane per row.
        let pair = |lo: i16, hi: i16| i32::from(lo as u16) | (i32::from(hi) << 16);
        let mut lanes = [[0i32; W]; 24];
        for (i, mt) in meta.iter().enumerate() {
            if F::SUB16 {
                for c in 0..8 {
                    lanes[c][i] = i32::from(mt.sc[2 * c]);
                    lanes[8 + c][i] = i32::from(mt.sc[2 * c + 1]);
                    lanes[16 + c][i] = pair(mt.sc[2 * c], mt.sc[2 * c + 1]);
                }
            } else {
                for c in 0..8 {
                    lanes[c][i] = i32::from(mt.sc[c]);
                }
                for c in 0..4 {
                    lanes[8 + c][i] = pair(mt.mins[2 * c], mt.mins[2 * c + 1]);
                }
            }
        }
        let s = pn.s.as_mut_ptr().add(b * sp);
        for (v, l) in lanes.iter().enumerate().take(sp) {
            *s.add(v) = _mm256_loadu_si256(l.as_ptr().cast());
        }
        let mut d = [0u16; W];
        let mut dmin = [0u16; W];
        for (i, mt) in meta.iter().enumerate() {
            d[i] = mt.d;
            dmin[i] = mt.dmin;
        }
        pn.f[2 * b] = _mm256_cvtph_ps(_mm_loadu_si128(d.as_ptr().cast()));
        pn.f[2 * b + 1] = _mm256_cvtph_ps(_mm_loadu_si128(dmin.as_ptr().cast()));
    }
}

/// `R` activation rows against a packed K-quant panel. `xs[r]` points at the row's pairs of
/// block sums: 32-element sums (Q4_K/Q5_K, prepared by the driver) or the Q8_K `bsums` (Q6_K).
#[inline(always)]
unsafe fn k_kernel<O: Ops, F: KQuant, const R: usize>(
    pn: &Panel,
    xq: [*const i8; R],
    xd: [*const f32; R],
    xs: [*const i16; R],
    nb: usize,
) -> [__m256; R] {
    let sp = s_per_block(F::SUB16);
    let mut acc = [_mm256_setzero_ps(); R];
    // Q4_K/Q5_K: the mins accumulate separately and are subtracted at the end (as in ggml's
    // repacked Q4_K kernels).
    let mut accm = [_mm256_setzero_ps(); R];
    for b in 0..nb {
        let s = pn.s.as_ptr().add(b * sp);
        let mut isum = [_mm256_setzero_si256(); R];
        for c in 0..8 {
            let q = pn.q.as_ptr().add((b * 8 + c) * W);
            let x_at = |r: usize, j: usize| xq[r].add(256 * b + 32 * c + 4 * j);
            if F::SUB16 {
                // Two 16-element sub-blocks with their own scales: lanes 0..4 and 4..8.
                let mut lo = [_mm256_setzero_si256(); R];
                let mut hi = [_mm256_setzero_si256(); R];
                for j in 0..4 {
                    let (pl, ph) = (*q.add(j), *q.add(4 + j));
                    for r in 0..R {
                        lo[r] = O::dpbusd(lo[r], pl, bcast4(x_at(r, j)));
                        hi[r] = O::dpbusd(hi[r], ph, bcast4(x_at(r, 4 + j)));
                    }
                }
                let (sl, sh) = (*s.add(c), *s.add(8 + c));
                for r in 0..R {
                    let t = _mm256_add_epi32(_mm256_mullo_epi32(sl, lo[r]), _mm256_mullo_epi32(sh, hi[r]));
                    isum[r] = _mm256_add_epi32(isum[r], t);
                }
            } else {
                let mut lanes = [_mm256_setzero_si256(); R];
                for j in 0..W {
                    let pv = *q.add(j);
                    for r in 0..R {
                        lanes[r] = O::dpbusd(lanes[r], pv, bcast4(x_at(r, j)));
                    }
                }
                let sc = *s.add(c);
                for r in 0..R {
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_mullo_epi32(sc, lanes[r]));
                }
            }
        }
        let (d, dmin) = (pn.f[2 * b], pn.f[2 * b + 1]);
        for r in 0..R {
            let dx = _mm256_set1_ps(*xd[r].add(b));
            if F::SUB16 {
                // Σ_t sc_t·Σ(u − 32)·x = isum − 32·Σ_t sc_t·bsum_t.
                let mut corr = _mm256_setzero_si256();
                for c in 0..8 {
                    corr = O::dpwssd(corr, *s.add(16 + c), bcast4(xs[r].add(16 * b + 2 * c)));
                }
                let isum = _mm256_sub_epi32(isum[r], _mm256_slli_epi32::<5>(corr));
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum), acc[r]);
            } else {
                let mut msum = _mm256_setzero_si256();
                for c in 0..4 {
                    msum = O::dpwssd(msum, *s.add(8 + c), bcast4(xs[r].add(8 * b + 2 * c)));
                }
                acc[r] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(isum[r]), acc[r]);
                accm[r] = _mm256_fmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(msum), accm[r]);
            }
        }
    }
    if !F::SUB16 {
        for r in 0..R {
            acc[r] = _mm256_sub_ps(acc[r], accm[r]);
        }
    }
    acc
}

// ---------------------------------------------------------------------------------------------
// Driver.

/// Per-row activation data the kernels read, for `R` rows starting at `i0` (rows past `m`
/// repeat the last one).
struct XPtrs<'a> {
    q: &'a [i8],
    d: &'a [f32],
    aux: *const u8,
    k: usize,
    nb: usize,
    /// Elements of `aux` per row, and their size in bytes.
    aux_row: usize,
    aux_size: usize,
}

impl XPtrs<'_> {
    #[inline(always)]
    unsafe fn rows<const R: usize, T>(&self, i0: usize, rv: usize) -> ([*const i8; R], [*const f32; R], [*const T; R]) {
        let mut q = [std::ptr::null(); R];
        let mut d = [std::ptr::null(); R];
        let mut a = [std::ptr::null(); R];
        for r in 0..R {
            let i = i0 + r.min(rv - 1);
            q[r] = self.q.as_ptr().add(i * self.k);
            d[r] = self.d.as_ptr().add(i * self.nb);
            a[r] = self.aux.add(i * self.aux_row * self.aux_size).cast();
        }
        (q, d, a)
    }
}

/// Stores the first `valid` lanes of `v` at `p`.
#[inline(always)]
unsafe fn store_lanes(p: *mut f32, v: __m256, valid: usize) {
    if valid == W {
        _mm256_storeu_ps(p, v);
    } else {
        let mut tmp = [0.0f32; W];
        _mm256_storeu_ps(tmp.as_mut_ptr(), v);
        std::ptr::copy_nonoverlapping(tmp.as_ptr(), p, valid);
    }
}

/// Activation rows per kernel call (register budget).
pub(super) trait PanelRows: Ops {
    const R: usize;
}
impl PanelRows for Avx2Ops {
    const R: usize = 2;
}
impl PanelRows for super::VnniOps {
    const R: usize = 4;
}

/// A weight format's packing and kernel, bound to one task's activations.
trait Job {
    unsafe fn pack(&self, rows: &[*const u8; W], next: *const u8, pn: &mut Panel);
    unsafe fn kernel<const R: usize>(&self, pn: &Panel, i0: usize, rv: usize) -> [__m256; R];
}

struct LegacyJob<'a, O, F> {
    x: XPtrs<'a>,
    _f: std::marker::PhantomData<(O, F)>,
}

impl<O: Ops, F: Legacy> Job for LegacyJob<'_, O, F> {
    #[inline(always)]
    unsafe fn pack(&self, rows: &[*const u8; W], next: *const u8, pn: &mut Panel) {
        pack_legacy::<O, F>(rows, next, self.x.nb, pn)
    }
    #[inline(always)]
    unsafe fn kernel<const R: usize>(&self, pn: &Panel, i0: usize, rv: usize) -> [__m256; R] {
        let (q, d, c) = self.x.rows::<R, i32>(i0, rv);
        legacy_kernel::<O, F, R>(pn, q, d, c, self.x.nb)
    }
}

struct KJob<'a, O, F> {
    x: XPtrs<'a>,
    _f: std::marker::PhantomData<(O, F)>,
}

impl<O: Ops, F: KQuant> Job for KJob<'_, O, F> {
    #[inline(always)]
    unsafe fn pack(&self, rows: &[*const u8; W], next: *const u8, pn: &mut Panel) {
        pack_k::<O, F>(rows, next, self.x.nb, pn)
    }
    #[inline(always)]
    unsafe fn kernel<const R: usize>(&self, pn: &Panel, i0: usize, rv: usize) -> [__m256; R] {
        let (q, d, s) = self.x.rows::<R, i16>(i0, rv);
        k_kernel::<O, F, R>(pn, q, d, s, self.x.nb)
    }
}

/// Runs every panel of the task's weight rows over all activation rows.
#[inline(always)]
unsafe fn drive<O: PanelRows, J: Job>(t: &Task<'_>, job: &J, pn: &mut Panel) {
    let m = t.xq.m;
    let mut j0 = t.rows.start;
    while j0 < t.rows.end {
        let valid = (t.rows.end - j0).min(W);
        let mut rows = [std::ptr::null::<u8>(); W];
        for (i, r) in rows.iter_mut().enumerate() {
            *r = t.w.add((j0 + i.min(valid - 1)) * t.row_bytes);
        }
        job.pack(&rows, t.w.wrapping_add((j0 + W) * t.row_bytes), pn);
        let mut i = 0;
        while i < m {
            let left = m - i;
            // Full tiles of O::R rows; a remainder uses the next smaller power of two ≥ it
            // (padded), single rows their own kernel.
            let r = if left == 1 { 1 } else { O::R.min(left.next_power_of_two()) };
            let rv = left.min(r);
            let y = t.y.add(i * t.n + j0);
            match r {
                1 => store_rows(y, t.n, &job.kernel::<1>(pn, i, rv), rv, valid),
                2 => store_rows(y, t.n, &job.kernel::<2>(pn, i, rv), rv, valid),
                _ => store_rows(y, t.n, &job.kernel::<4>(pn, i, rv), rv, valid),
            }
            i += rv;
        }
        j0 += valid;
    }
}

/// Stores `rv` rows (stride `n`) of `valid` lanes each.
#[inline(always)]
unsafe fn store_rows<const R: usize>(y: *mut f32, n: usize, out: &[__m256; R], rv: usize, valid: usize) {
    for (r, &o) in out.iter().enumerate().take(rv) {
        store_lanes(y.add(r * n), o, valid);
    }
}

#[inline(always)]
unsafe fn run_legacy<O: PanelRows, F: Legacy>(t: &Task<'_>) {
    let xq = t.xq;
    let nb = xq.k / 32;
    // −OFFSET · Σx per activation block.
    let corr: Vec<i32> = xq.sums.iter().map(|&s| -F::OFFSET * i32::from(s)).collect();
    let x = XPtrs { q: &xq.qs, d: &xq.d, aux: corr.as_ptr().cast(), k: xq.k, nb, aux_row: nb, aux_size: 4 };
    let mut pn = Panel { q: vec![_mm256_setzero_si256(); nb * W], f: vec![_mm256_setzero_ps(); nb], s: Vec::new() };
    drive::<O, _>(t, &LegacyJob::<O, F> { x, _f: std::marker::PhantomData }, &mut pn);
}

#[inline(always)]
unsafe fn run_k<O: PanelRows, F: KQuant>(t: &Task<'_>) {
    let xq = t.xq;
    let nb = xq.k / 256;
    // Q4_K/Q5_K: sums of 32 activation quants (pairs of bsums); Q6_K reads the bsums directly.
    let b32: Vec<i16> = if F::SUB16 { Vec::new() } else { xq.sums.chunks_exact(2).map(|p| p[0] + p[1]).collect() };
    let (aux, aux_row) = if F::SUB16 { (xq.sums.as_ptr(), nb * 16) } else { (b32.as_ptr(), nb * 8) };
    let x = XPtrs { q: &xq.qs, d: &xq.d, aux: aux.cast(), k: xq.k, nb, aux_row, aux_size: 2 };
    let mut pn = Panel {
        q: vec![_mm256_setzero_si256(); nb * 8 * W],
        f: vec![_mm256_setzero_ps(); 2 * nb],
        s: vec![_mm256_setzero_si256(); nb * s_per_block(F::SUB16)],
    };
    drive::<O, _>(t, &KJob::<O, F> { x, _f: std::marker::PhantomData }, &mut pn);
}

/// Runs the task with packed panels.
#[inline(always)]
pub(super) unsafe fn run<O: PanelRows>(t: &Task<'_>) {
    match t.ty {
        GgmlType::Q4_0 => run_legacy::<O, Q4_0>(t),
        GgmlType::Q5_0 => run_legacy::<O, Q5_0>(t),
        GgmlType::Q8_0 => run_legacy::<O, Q8_0>(t),
        GgmlType::Q4_K => run_k::<O, Q4K>(t),
        GgmlType::Q5_K => run_k::<O, Q5K>(t),
        GgmlType::Q6_K => run_k::<O, Q6K>(t),
        _ => unreachable!("validated by the entry point"),
    }
}

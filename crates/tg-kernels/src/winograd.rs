//! 3×3 convolution of stride 1 by Winograd's minimal filtering F(m×m, 3×3) (Lavin & Gray,
//! "Fast Algorithms for Convolutional Neural Networks", 2016), for output tiles of m = 2 and
//! m = 4: each m×m block of outputs of each channel pair is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for
//! the α×α input tile `d` under it (α = m + 2) and the 3×3 filter `g`, so the products over
//! input channels become α² matrix products `U_ξ [M, C] · V_ξ [C, tiles]`: 16 products per
//! 4 outputs (F(2×2): the inner products' work divided by 2.25) or 36 per 16 (F(4×4): by 4).
//!
//! Transforms of F(2×2, 3×3), every coefficient 0, ±1 or ±1/2:
//!
//! ```text
//! Bᵀ = [1  0 −1  0]    G = [1    0    0  ]    Aᵀ = [1 1  1  0]
//!      [0  1  1  0]        [1/2  1/2  1/2]         [0 1 −1 −1]
//!      [0 −1  1  0]        [1/2 −1/2  1/2]
//!      [0  1  0 −1]        [0    0    1  ]
//! ```
//!
//! and of F(4×4, 3×3) (interpolation points 0, ±1, ±2, ∞), whose larger coefficients (up to
//! 8 in `Aᵀ`, 5 in `Bᵀ`) cost some accuracy: the tests bound both against the direct f64 sum.
//!
//! ```text
//! Bᵀ = [4  0 −5  0 1 0]    G = [ 1/4     0     0 ]    Aᵀ = [1 1  1 1  1 0]
//!      [0 −4 −4  1 1 0]        [−1/6  −1/6  −1/6 ]         [0 1 −1 2 −2 0]
//!      [0  4 −4 −1 1 0]        [−1/6   1/6  −1/6 ]         [0 1  1 4  4 0]
//!      [0 −2 −1  2 1 0]        [1/24  1/12   1/6 ]         [0 1 −1 8 −8 1]
//!      [0  2 −1 −2 1 0]        [1/24 −1/12   1/6 ]
//!      [0  4  0 −5 0 1]        [ 0     0     1   ]
//! ```
//!
//! The image is worked in blocks of whole tile rows (about 128 tiles): the block's input
//! rows are split into m phases of columns (so the tiles of a vector read consecutive
//! values), transformed into `V [α²][C][T]`, multiplied by the transformed filters with the
//! f32 matmul's register tiles into `[α²][M][T]`, transformed back into the output rows and
//! given the bias and activation while in cache. Blocks are split across threads.

use crate::dequant::SimdDecode;
use crate::isa::{run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::{Isa, Window2d};

/// Tiles per block: enough columns for the matmul's widest register tile several times over,
/// small enough that the block's `V` and products stay in L2 for typical channel counts.
const BLOCK_TILES: usize = 128;

/// Tiles per image from which Winograd by `tile` is taken, by ISA: the transforms, and the
/// filters' transform (per call), cost more than the products save on smaller planes.
/// * 16 lanes (AVX-512 Xeon, `examples/bench_conv`, 2026-12-06): F(2×2) beats the implicit
///   GEMM on 16×16 planes (64 tiles; 96→96 channels 0.28–0.38 against 0.52–0.72 ms, 192→96
///   0.65–0.75 against 1.30) and loses on 8×8 ones (128→128 0.29–0.30 against 0.26–0.28);
///   F(4×4) ties with F(2×2) on 32×32 planes (64 tiles; 64→64 0.41–0.51 against 0.40–0.53)
///   and wins from 64×64: 64 for F(2×2), 128 for F(4×4). (The first measurement, before the
///   transforms were vectorised, had F(2×2) slower on 16×16 planes too.)
/// * 8 lanes (AVX2, AMD EPYC): F(2×2) beat the implicit GEMM on 16×16 planes (64 tiles;
///   96→96 channels 0.42 against 0.86 ms, F(4×4) 0.58) and tied on 8×8 ones; F(4×4) beat
///   F(2×2) from 32×32 planes (64 tiles; 64→64 channels 0.52 against 0.67 ms): 64 for both.
fn min_tiles(isa: Isa, tile: usize) -> usize {
    match (isa, tile) {
        (Isa::Avx512, 4) => 128,
        _ => 64,
    }
}

/// Whether Winograd can compute this convolution (`groups` groups, `m` outputs) at all: a 3×3
/// window of stride 1 and dilation 1, one group, padding of at most 1 on each side, at least 16
/// input and output channels (for the matrix products to outweigh the transforms) and an
/// output of at least 4×4.
pub(crate) fn fits(g: &Window2d, groups: usize, m: usize, [oh, ow]: [usize; 2]) -> bool {
    let shape = g.size == [3, 3] && g.stride == [1, 1] && g.dilation == [1, 1] && groups == 1 && g.pad_begin.iter().chain(&g.pad_end).all(|&p| p <= 1);
    shape && g.c >= 16 && m >= 16 && oh >= 4 && ow >= 4
}

/// The output tile of Winograd for this convolution on `isa`: 4 (F(4×4, 3×3)) where the plane
/// has [`min_tiles`] 4×4 tiles, else 2 where it has as many 2×2 tiles, else `None` (also where
/// it does not [`fits`]).
pub(crate) fn tile(isa: Isa, g: &Window2d, groups: usize, m: usize, o: [usize; 2]) -> Option<usize> {
    if !fits(g, groups, m, o) {
        return None;
    }
    [4, 2].into_iter().find(|&t| o[0].div_ceil(t) * o[1].div_ceil(t) >= min_tiles(isa, t))
}

/// The transforms of one tile size: `α = m + 2` rows, tables padded to the largest (6).
/// The kernels read them as constants of their instantiation (`F2`, `F4`).
struct Transforms {
    bt: [[f32; 6]; 6],
    g: [[f32; 3]; 6],
    at: [[f32; 6]; 4],
}

const F2: Transforms = Transforms {
    bt: [[1.0, 0.0, -1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, -1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0, 0.0, -1.0, 0.0, 0.0], [0.0; 6], [0.0; 6]],
    g: [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0], [0.0; 3], [0.0; 3]],
    at: [[1.0, 1.0, 1.0, 0.0, 0.0, 0.0], [0.0, 1.0, -1.0, -1.0, 0.0, 0.0], [0.0; 6], [0.0; 6]],
};

const F4: Transforms = Transforms {
    bt: [
        [4.0, 0.0, -5.0, 0.0, 1.0, 0.0],
        [0.0, -4.0, -4.0, 1.0, 1.0, 0.0],
        [0.0, 4.0, -4.0, -1.0, 1.0, 0.0],
        [0.0, -2.0, -1.0, 2.0, 1.0, 0.0],
        [0.0, 2.0, -1.0, -2.0, 1.0, 0.0],
        [0.0, 4.0, 0.0, -5.0, 0.0, 1.0],
    ],
    g: [
        [0.25, 0.0, 0.0],
        [-1.0 / 6.0, -1.0 / 6.0, -1.0 / 6.0],
        [-1.0 / 6.0, 1.0 / 6.0, -1.0 / 6.0],
        [1.0 / 24.0, 1.0 / 12.0, 1.0 / 6.0],
        [1.0 / 24.0, -1.0 / 12.0, 1.0 / 6.0],
        [0.0, 0.0, 1.0],
    ],
    at: [[1.0, 1.0, 1.0, 1.0, 1.0, 0.0], [0.0, 1.0, -1.0, 2.0, -2.0, 0.0], [0.0, 1.0, 1.0, 4.0, 4.0, 0.0], [0.0, 1.0, -1.0, 8.0, -8.0, 1.0]],
};

/// `U [α²][M][C]`: the transformed filters `G g Gᵀ` of `w [M, C, 3, 3]`, in f32 vectors
/// over 16 or 8 input channels at a time (the taps of those channels transposed first).
fn filters(isa: Isa, tile: usize, w: &[f32], m: usize, c: usize) -> Vec<f32> {
    let a = tile + 2;
    let mut u = vec![0f32; a * a * m * c];
    run_on(isa, Filters { tile, w: w.as_ptr(), u: u.as_mut_ptr(), m, c });
    u
}

struct Filters {
    tile: usize,
    w: *const f32,
    u: *mut f32,
    m: usize,
    c: usize,
}

impl IsaTask for Filters {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        if self.tile == 4 {
            self.run_tile::<S, 6>()
        } else {
            self.run_tile::<S, 4>()
        }
    }
}

impl Filters {
    #[inline(always)]
    unsafe fn run_tile<S: SimdDecode, const TA: usize>(self) {
        let Filters { w, u, m, c, .. } = self;
        let f: &Transforms = if TA == 6 { &F4 } else { &F2 };
        let l = S::LANES;
        // taps[k][i]: tap k of input channel c0 + i.
        let mut taps = vec![0f32; 9 * l];
        for mi in 0..m {
            let mut c0 = 0;
            while c0 < c {
                let n = (c - c0).min(l);
                for i in 0..n {
                    for k in 0..9 {
                        taps[k * l + i] = *w.add((mi * c + c0 + i) * 9 + k);
                    }
                }
                let mut g = [S::zero(); 9];
                for (k, gk) in g.iter_mut().enumerate() {
                    *gk = S::load(taps.as_ptr().add(k * l));
                }
                // t = G g (α×3), then U = t Gᵀ (α×α).
                let mut t = [[S::zero(); 3]; 6];
                for (p, tp) in t.iter_mut().enumerate().take(TA) {
                    for (j, tpj) in tp.iter_mut().enumerate() {
                        let col = [g[j], g[3 + j], g[6 + j], S::zero(), S::zero(), S::zero()];
                        let coef = [f.g[p][0], f.g[p][1], f.g[p][2], 0.0, 0.0, 0.0];
                        *tpj = lin::<S>(&coef, &col, 3);
                    }
                }
                for (p, tp) in t.iter().enumerate().take(TA) {
                    let row = [tp[0], tp[1], tp[2], S::zero(), S::zero(), S::zero()];
                    for q in 0..TA {
                        let coef = [f.g[q][0], f.g[q][1], f.g[q][2], 0.0, 0.0, 0.0];
                        let v = lin::<S>(&coef, &row, 3);
                        let dst = u.add((TA * p + q) * m * c + mi * c + c0);
                        if n == l {
                            S::store(dst, v);
                        } else {
                            S::store_tail(dst, n, v);
                        }
                    }
                }
                c0 += n;
            }
        }
    }
}

/// Per-thread scratch: the split input rows, `V` and the products.
#[derive(Default)]
struct Scratch {
    split: Vec<f32>,
    v: Vec<f32>,
    prod: Vec<f32>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Scratch> = std::cell::Cell::new(Scratch::default());
}

/// The convolution of `x [n, c, h, w]` with `weights [m, c, 3, 3]` into `out [n, m, oh, ow]`
/// by output tiles of `tile` (2 or 4), with the optional `act(· + bias[m] + residual)` epilogue. The
/// caller has checked the lengths, the geometry ([`tile`]) and that `isa` is available.
#[allow(clippy::too_many_arguments)]
pub(crate) fn conv3x3_winograd(isa: Isa, tile: usize, g: &Window2d, m: usize, x: &[f32], weights: &[f32], epilogue: Option<crate::ConvEpilogue<'_>>, out: &mut [f32]) {
    let Ok([oh, ow]) = g.out_hw() else { return };
    let c = g.c;
    let (th, tw) = (oh.div_ceil(tile), ow.div_ceil(tile));
    let rb = (BLOCK_TILES / tw).clamp(1, th);
    let blocks = th.div_ceil(rb);
    let u = filters(isa, tile, weights, m, c);
    let (xp, up, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(u.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let bias = epilogue.map(|e| (SyncPtr(e.bias.as_ptr() as *mut f32), SyncPtr(e.residual.map_or(std::ptr::null_mut(), |r| r.as_ptr() as *mut f32)), e.act));
    let g = *g;
    for_ranges(g.n * blocks, 1, 1, |r| {
        let mut s = SCRATCH.with(|c| c.take());
        for unit in r {
            let (b, blk) = (unit / blocks, unit % blocks);
            let ty0 = blk * rb;
            let rows = rb.min(th - ty0);
            // SAFETY: reads stay in `x` and `u`; this unit alone writes output rows
            // m·ty0 .. m·(ty0 + rows) of image b.
            unsafe {
                run_on(
                    isa,
                    Block {
                        tile,
                        g,
                        m,
                        ohw: [oh, ow],
                        tw,
                        ty0,
                        rows,
                        x: xp.get().add(b * c * g.in_hw[0] * g.in_hw[1]),
                        u: up.get(),
                        out: op.get().add(b * m * oh * ow),
                        s: &mut s,
                    },
                );
                if let Some((bp, rp, act)) = bias {
                    let (oy0, oy1) = (tile * ty0, (tile * (ty0 + rows)).min(oh));
                    let at = b * m * oh * ow + oy0 * ow;
                    let res = if rp.get().is_null() { std::ptr::null() } else { rp.get().add(at) as *const f32 };
                    crate::fused::epilogue::bias_act_block(isa, op.get().add(at), oh * ow, m, (oy1 - oy0) * ow, bp.get(), res, act);
                }
            }
        }
        SCRATCH.with(|c| c.replace(s));
    });
}

/// One block of tile rows `ty0 .. ty0 + rows` of one image.
struct Block<'a> {
    /// Output tile: 2 or 4.
    tile: usize,
    g: Window2d,
    m: usize,
    ohw: [usize; 2],
    tw: usize,
    ty0: usize,
    rows: usize,
    x: *const f32,
    u: *const f32,
    out: *mut f32,
    s: &'a mut Scratch,
}

/// `Σ_k coef[k]·x[k]` over `k < n` (zero coefficients skipped, ±1 as additions).
#[inline(always)]
unsafe fn lin<S: SimdDecode>(coef: &[f32; 6], x: &[S::V; 6], n: usize) -> S::V {
    let mut acc = S::zero();
    for k in 0..n {
        let c = coef[k];
        if c == 1.0 {
            acc = S::add(acc, x[k]);
        } else if c == -1.0 {
            acc = S::sub(acc, x[k]);
        } else if c != 0.0 {
            acc = S::fma(S::splat(c), x[k], acc);
        }
    }
    acc
}

/// `p[0..n] = 0` by vector stores.
#[inline(always)]
unsafe fn zero<S: SimdDecode>(p: *mut f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    while i + l <= n {
        S::store(p.add(i), S::zero());
        i += l;
    }
    if i < n {
        S::store_tail(p.add(i), n - i, S::zero());
    }
}

/// Stores the first `n` of the `4·LANES` values `v` at `p`.
#[inline(always)]
unsafe fn store_n<S: SimdDecode>(p: *mut f32, v: &[S::V; 4], n: usize) {
    let l = S::LANES;
    for (k, x) in v.iter().enumerate() {
        let lo = k * l;
        if n >= lo + l {
            S::store(p.add(lo), *x);
        } else {
            if n > lo {
                S::store_tail(p.add(lo), n - lo, *x);
            }
            break;
        }
    }
}

impl IsaTask for Block<'_> {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        if self.tile == 4 {
            self.run_tile::<S, 4, 6>()
        } else {
            self.run_tile::<S, 2, 4>()
        }
    }
}

// No closures below: a closure is compiled without the trampoline's target features, and
// the intrinsics it calls are then not inlined.
impl Block<'_> {
    #[inline(always)]
    unsafe fn run_tile<S: SimdDecode, const TM: usize, const TA: usize>(self) {
        let Block { g, m, ohw: [oh, ow], tw, ty0, rows, x, u, out, s, .. } = self;
        // The tables as constants of this instantiation, so that the linear combinations
        // below unroll with their zero and ±1 coefficients folded away.
        let f: &Transforms = if TM == 4 { &F4 } else { &F2 };
        let (c, [ih, iw], [pt, pl]) = (g.c, g.in_hw, g.pad_begin);
        let l = S::LANES;
        let t = rows * tw;
        // Split input rows: per channel, TM·rows + 2 rows of TM phases of `phase` columns
        // each; column t of phase q is input column TM·t + q − pl (zero outside the image).
        // `phase` leaves room for a vector read past the last tile.
        let nrows = TM * rows + 2;
        let phase = tw + 1 + l;
        let stride = TM * phase;
        // Only the padding is zeroed (rows outside the image, each phase's ends): zeroing the
        // whole buffer first was a pass as large as the block's input (4 % of the terrain run).
        crate::grow(&mut s.split, c * nrows * stride);
        for ci in 0..c {
            let plane = x.add(ci * ih * iw);
            for r in 0..nrows {
                let dst = s.split.as_mut_ptr().add((ci * nrows + r) * stride);
                let Some(iy) = (TM * ty0 + r).checked_sub(pt).filter(|&y| y < ih) else {
                    zero::<S>(dst, stride);
                    continue;
                };
                // Columns ≡ q (mod TM) fill indices off .. off + count of phase (q + pl) mod TM.
                // (Inline stores: a `memset` call per short run cost more than the zeros.)
                for q in 0..TM {
                    let (off, count) = ((q + pl) / TM, iw.saturating_sub(q).div_ceil(TM));
                    let ph = dst.add(((q + pl) % TM) * phase);
                    zero::<S>(ph, off);
                    zero::<S>(ph.add(off + count), phase - off - count);
                }
                let src = plane.add(iy * iw);
                // Input column ix goes to phase (ix + pl) mod TM at index (ix + pl) / TM;
                // `to[q]` is where the input columns ≡ q (mod TM) start.
                let to: [*mut f32; TM] = std::array::from_fn(|q| dst.add(((q + pl) % TM) * phase + (q + pl) / TM));
                let mut ix = 0;
                while ix + TM * l <= iw {
                    let mut v = [S::zero(); TM];
                    for (k, vk) in v.iter_mut().enumerate() {
                        *vk = S::load(src.add(ix + k * l));
                    }
                    if TM == 2 {
                        let (e, o) = S::deinterleave(v[0], v[1]);
                        S::store(to[0].add(ix / 2), e);
                        S::store(to[1].add(ix / 2), o);
                    } else {
                        let (e01, o01) = S::deinterleave(v[0], v[1]);
                        let (e23, o23) = S::deinterleave(v[2], v[3]);
                        let (p0, p2) = S::deinterleave(e01, e23);
                        let (p1, p3) = S::deinterleave(o01, o23);
                        for (q, pv) in [p0, p1, p2, p3].into_iter().enumerate() {
                            S::store(to[q].add(ix / 4), pv);
                        }
                    }
                    ix += TM * l;
                }
                while ix < iw {
                    *to[ix % TM].add(ix / TM) = *src.add(ix);
                    ix += 1;
                }
            }
        }
        // V[ξ][ci][tile] = (Bᵀ d B)[ξ] for the tile's α×α input d. The α² planes are a
        // cache line more than their size apart: planes a multiple of 4 KiB apart would put
        // the stores of a tile in one L1 set.
        let vs = c * t + 16;
        crate::grow(&mut s.v, TA * TA * vs);
        let v = s.v.as_mut_ptr();
        for ci in 0..c {
            for r in 0..rows {
                let mut tx = 0;
                while tx < tw {
                    let n = (tw - tx).min(l);
                    // Each input row i as d·B along columns: q[i][a] = Σ_j Bᵀ[a][j]·d[i][j],
                    // with d[i][j] = phase j mod TM at tx + j / TM.
                    let mut q = [[S::zero(); 6]; 6];
                    for (i, qi) in q.iter_mut().enumerate().take(TA) {
                        let row = s.split.as_ptr().add((ci * nrows + TM * r + i) * stride);
                        let mut d = [S::zero(); 6];
                        for (j, dj) in d.iter_mut().enumerate().take(TA) {
                            *dj = S::load(row.add((j % TM) * phase + tx + j / TM));
                        }
                        for (a, qa) in qi.iter_mut().enumerate().take(TA) {
                            *qa = lin::<S>(&f.bt[a], &d, TA);
                        }
                    }
                    // Then Bᵀ along rows, and store the α² values of each lane's tile.
                    let dst = v.add(ci * t + r * tw + tx);
                    #[allow(clippy::needless_range_loop)] // column b of the α×α q
                    for b in 0..TA {
                        let mut col = [S::zero(); 6];
                        for (i, cv) in col.iter_mut().enumerate().take(TA) {
                            *cv = q[i][b];
                        }
                        for a in 0..TA {
                            let val = lin::<S>(&f.bt[a], &col, TA);
                            let p = dst.add((TA * a + b) * vs);
                            if n == l {
                                S::store(p, val);
                            } else {
                                S::store_tail(p, n, val);
                            }
                        }
                    }
                    tx += n;
                }
            }
        }
        // prod[ξ] = U[ξ] · V[ξ]: [m, c] · [c, t].
        let ps = m * t + 16;
        crate::grow(&mut s.prod, TA * TA * ps);
        let prod = s.prod.as_mut_ptr();
        for xi in 0..TA * TA {
            crate::matmul_f32::gemm_panel_on::<S>(u.add(xi * m * c), c, m, v.add(xi * vs), t, c, prod.add(xi * ps), t);
        }
        // Y = Aᵀ P A per tile, written to the output rows.
        for mi in 0..m {
            let plane = out.add(mi * oh * ow);
            for r in 0..rows {
                let oy = TM * (ty0 + r);
                let mut tx = 0;
                while tx < tw {
                    let n = (tw - tx).min(l);
                    // sm[i][b] = Σ_a Aᵀ[i][a]·P[a][b] along rows, per column b.
                    let mut sm = [[S::zero(); 6]; 4];
                    for b in 0..TA {
                        let mut col = [S::zero(); 6];
                        for (a, ca) in col.iter_mut().enumerate().take(TA) {
                            let p = prod.add((TA * a + b) * ps + mi * t + r * tw + tx);
                            *ca = if n == l { S::load(p) } else { S::load_tail(p, n) };
                        }
                        for (i, si) in sm.iter_mut().enumerate().take(TM) {
                            si[b] = lin::<S>(&f.at[i], &col, TA);
                        }
                    }
                    // Output columns TM·tx .. TM·(tx + n) of rows oy .. oy + TM: the TM
                    // columns of each tile interleaved (what falls outside the plane is
                    // dropped).
                    let cols = (TM * n).min(ow - TM * tx);
                    for (i, si) in sm.iter().enumerate().take(TM) {
                        if oy + i >= oh {
                            break;
                        }
                        let mut y = [S::zero(); 4];
                        for (j, yj) in y.iter_mut().enumerate().take(TM) {
                            *yj = lin::<S>(&f.at[j], si, TA);
                        }
                        let o = plane.add((oy + i) * ow + TM * tx);
                        if TM == 2 {
                            let (lo, hi) = S::interleave(y[0], y[1]);
                            store_n::<S>(o, &[lo, hi, lo, hi], cols);
                        } else {
                            let (a_lo, a_hi) = S::interleave(y[0], y[2]);
                            let (b_lo, b_hi) = S::interleave(y[1], y[3]);
                            let (w0, w1) = S::interleave(a_lo, b_lo);
                            let (w2, w3) = S::interleave(a_hi, b_hi);
                            store_n::<S>(o, &[w0, w1, w2, w3], cols);
                        }
                    }
                    tx += n;
                }
            }
        }
    }
}

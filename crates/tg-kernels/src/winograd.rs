//! 3×3 convolution of stride 1 by Winograd's minimal filtering F(2×2, 3×3) (Lavin & Gray,
//! "Fast Algorithms for Convolutional Neural Networks", 2016): each 2×2 block of outputs of
//! each channel pair is `Aᵀ [(G g Gᵀ) ⊙ (Bᵀ d B)] A` for the 4×4 input tile `d` under it and
//! the 3×3 filter `g`, so the products over input channels become 16 matrix products
//! `U_ξ [M, C] · V_ξ [C, tiles]` — 16 multiplications per 4 outputs instead of 36, the work
//! of the convolution's inner products divided by 2.25.
//!
//! Transforms (rows `ξ = 4a + b` of the 4×4 tiles):
//!
//! ```text
//! Bᵀ = [1  0 −1  0]    G = [1    0    0  ]    Aᵀ = [1 1  1  0]
//!      [0  1  1  0]        [1/2  1/2  1/2]         [0 1 −1 −1]
//!      [0 −1  1  0]        [1/2 −1/2  1/2]
//!      [0  1  0 −1]        [0    0    1  ]
//! ```
//!
//! Every coefficient is 0, ±1 or ±1/2: the transforms add and subtract, and the sums differ
//! from the direct convolution's only by the rounding of a few more additions (the tests
//! hold it to the same f64 bound as the direct kernel, with a factor for the transforms).
//!
//! The image is worked in blocks of whole tile rows (about 128 tiles): the block's input
//! rows are split into even and odd columns (so the 16 tiles of a vector read consecutive
//! values), transformed into `V [16][C][T]`, multiplied by the transformed filters with the
//! f32 matmul's register tiles into `[16][M][T]`, transformed back into the output rows and
//! given the bias and activation while in cache. Blocks are split across threads.

use crate::dequant::SimdDecode;
use crate::isa::{run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::{Act, Isa, Window2d};

/// Tiles per block: enough columns for the matmul's widest register tile several times over,
/// small enough that the block's `V` and products stay in L2 for typical channel counts.
const BLOCK_TILES: usize = 128;

/// Whether [`conv3x3_winograd`] computes this convolution, and is worth it: a 3×3 window of
/// stride 1 and dilation 1, one group, padding of at most 1 on each side, enough input and
/// output channels for the matrix products to dominate the transforms, and an output plane
/// of at least [`MIN_TILES`] 2×2 tiles.
pub(crate) fn applies(g: &Window2d, groups: usize, m: usize, [oh, ow]: [usize; 2]) -> bool {
    g.size == [3, 3]
        && g.stride == [1, 1]
        && g.dilation == [1, 1]
        && groups == 1
        && g.pad_begin.iter().chain(&g.pad_end).all(|&p| p <= 1)
        && g.c >= 16
        && m >= 16
        && oh >= 4
        && ow >= 4
        && oh.div_ceil(2) * ow.div_ceil(2) >= MIN_TILES
}

/// Tiles per image below which the transforms and the filters' transform (per call) cost
/// more than the products save: measured on the terrain UNet, whose 8×8 and 16×16 planes
/// (16 and 64 tiles) ran slower than the implicit GEMM and 32×32 planes (256 tiles) faster.
const MIN_TILES: usize = 128;

/// `U [16][M][C]`: the transformed filters `G g Gᵀ` of `w [M, C, 3, 3]`.
fn filters(w: &[f32], m: usize, c: usize) -> Vec<f32> {
    const G: [[f32; 3]; 4] = [[1.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0.0, 0.0, 1.0]];
    let mut u = vec![0f32; 16 * m * c];
    for (mc, g) in w.chunks_exact(9).enumerate() {
        // t = G g (4×3), then t Gᵀ (4×4).
        let mut t = [[0f32; 3]; 4];
        for (a, row) in t.iter_mut().enumerate() {
            for (j, v) in row.iter_mut().enumerate() {
                *v = G[a][0] * g[j] + G[a][1] * g[3 + j] + G[a][2] * g[6 + j];
            }
        }
        for (a, row) in t.iter().enumerate() {
            for (b, gb) in G.iter().enumerate() {
                u[(4 * a + b) * m * c + mc] = row[0] * gb[0] + row[1] * gb[1] + row[2] * gb[2];
            }
        }
    }
    u
}

/// Makes `v` at least `n` long without rewriting what it holds (every element used is
/// written before it is read).
fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
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

/// The convolution of `x [n, c, h, w]` with `weights [m, c, 3, 3]` into `out [n, m, oh, ow]`,
/// with the optional `act(· + bias[m])` epilogue. The caller has checked the lengths, that
/// [`applies`] holds and that `isa` is available.
pub(crate) fn conv3x3_winograd(isa: Isa, g: &Window2d, m: usize, x: &[f32], weights: &[f32], epilogue: Option<(&[f32], Act)>, out: &mut [f32]) {
    let Ok([oh, ow]) = g.out_hw() else { return };
    let c = g.c;
    let (th, tw) = (oh.div_ceil(2), ow.div_ceil(2));
    let rb = (BLOCK_TILES / tw).clamp(1, th);
    let blocks = th.div_ceil(rb);
    let u = filters(weights, m, c);
    let (xp, up, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(u.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let bias = epilogue.map(|(b, a)| (SyncPtr(b.as_ptr() as *mut f32), a));
    let g = *g;
    for_ranges(g.n * blocks, 1, 1, |r| {
        let mut s = SCRATCH.with(|c| c.take());
        for unit in r {
            let (b, blk) = (unit / blocks, unit % blocks);
            let ty0 = blk * rb;
            let rows = rb.min(th - ty0);
            // SAFETY: reads stay in `x` and `u`; this unit alone writes output rows
            // 2·ty0 .. 2·(ty0 + rows) of image b.
            unsafe {
                run_on(
                    isa,
                    Block { g, m, th: [oh, ow], tw, ty0, rows, x: xp.get().add(b * c * g.in_hw[0] * g.in_hw[1]), u: up.get(), out: op.get().add(b * m * oh * ow), s: &mut s },
                );
                if let Some((bp, act)) = bias {
                    let (oy0, oy1) = (2 * ty0, (2 * (ty0 + rows)).min(oh));
                    crate::fused::epilogue::bias_act_block(isa, op.get().add(b * m * oh * ow + oy0 * ow), oh * ow, m, (oy1 - oy0) * ow, bp.get(), act);
                }
            }
        }
        SCRATCH.with(|c| c.replace(s));
    });
}

/// One block of tile rows `ty0 .. ty0 + rows` of one image.
struct Block<'a> {
    g: Window2d,
    m: usize,
    th: [usize; 2],
    tw: usize,
    ty0: usize,
    rows: usize,
    x: *const f32,
    u: *const f32,
    out: *mut f32,
    s: &'a mut Scratch,
}

impl IsaTask for Block<'_> {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let Block { g, m, th: [oh, ow], tw, ty0, rows, x, u, out, s } = self;
        let (c, [ih, iw], [pt, pl]) = (g.c, g.in_hw, g.pad_begin);
        let l = S::LANES;
        let t = rows * tw;
        // Split input rows: per channel, 2·rows + 2 rows of [even | odd] halves of `half`
        // columns each; column t of the even half is input column 2t − pl, of the odd half
        // 2t + 1 − pl (zero outside the image). `half` leaves room for a vector read past
        // the last tile.
        let nrows = 2 * rows + 2;
        let half = tw + 1 + l;
        s.split.clear();
        s.split.resize(c * nrows * 2 * half, 0.0);
        for ci in 0..c {
            let plane = x.add(ci * ih * iw);
            for r in 0..nrows {
                let Some(iy) = (2 * ty0 + r).checked_sub(pt).filter(|&y| y < ih) else { continue };
                let src = plane.add(iy * iw);
                let dst = s.split.as_mut_ptr().add((ci * nrows + r) * 2 * half);
                // Input column ix goes to half (ix + pl) mod 2, index (ix + pl) / 2: the
                // row's even columns to the even half (pl = 0) or the odd one (pl = 1), its
                // odd columns to the other, one further along when pl = 1.
                let (ev, od) = if pl == 0 { (dst, dst.add(half)) } else { (dst.add(half), dst.add(1)) };
                let mut ix = 0;
                while ix + 2 * l <= iw {
                    let (e, o) = S::deinterleave(S::load(src.add(ix)), S::load(src.add(ix + l)));
                    S::store(ev.add(ix / 2), e);
                    S::store(od.add(ix / 2), o);
                    ix += 2 * l;
                }
                while ix < iw {
                    *(if ix % 2 == 0 { ev } else { od }).add(ix / 2) = *src.add(ix);
                    ix += 1;
                }
            }
        }
        // V[ξ][ci][tile] = (Bᵀ d B)[ξ] for the tile's 4×4 input d.
        // The 16 planes are a cache line more than their size apart: planes a multiple of
        // 4 KiB apart would put the 16 stores of a tile in one L1 set.
        let vs = c * t + 16;
        grow(&mut s.v, 16 * vs);
        let v = s.v.as_mut_ptr();
        for ci in 0..c {
            for r in 0..rows {
                let mut tx = 0;
                while tx < tw {
                    let n = (tw - tx).min(l);
                    // Rows 2r .. 2r + 4 of the split input, each as d·B along columns:
                    // [d0 − d2, d1 + d2, d2 − d1, d1 − d3] with d0 = E[tx], d1 = O[tx],
                    // d2 = E[tx + 1], d3 = O[tx + 1].
                    let mut q = [[S::zero(); 4]; 4];
                    for (i, qi) in q.iter_mut().enumerate() {
                        let row = s.split.as_ptr().add((ci * nrows + 2 * r + i) * 2 * half);
                        let (e0, o0) = (S::load(row.add(tx)), S::load(row.add(half + tx)));
                        let (e1, o1) = (S::load(row.add(tx + 1)), S::load(row.add(half + tx + 1)));
                        *qi = [S::sub(e0, e1), S::add(o0, e1), S::sub(e1, o0), S::sub(o0, o1)];
                    }
                    // Then Bᵀ along rows, and store the 16 values of each lane's tile.
                    let dst = v.add(ci * t + r * tw + tx);
                    #[allow(clippy::needless_range_loop)] // column j of the 4×4 q
                    for j in 0..4 {
                        let col = [S::sub(q[0][j], q[2][j]), S::add(q[1][j], q[2][j]), S::sub(q[2][j], q[1][j]), S::sub(q[1][j], q[3][j])];
                        for (a, val) in col.into_iter().enumerate() {
                            let p = dst.add((4 * a + j) * vs);
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
        grow(&mut s.prod, 16 * ps);
        let prod = s.prod.as_mut_ptr();
        for xi in 0..16 {
            crate::matmul_f32::gemm_panel_on::<S>(u.add(xi * m * c), c, m, v.add(xi * vs), t, c, prod.add(xi * ps), t);
        }
        // Y = Aᵀ P A per tile, written to the output rows.
        for mi in 0..m {
            let plane = out.add(mi * oh * ow);
            for r in 0..rows {
                let oy = 2 * (ty0 + r);
                let mut tx = 0;
                while tx < tw {
                    let n = (tw - tx).min(l);
                    let p = |xi: usize| prod.add(xi * ps + mi * t + r * tw + tx);
                    let ld = |xi: usize| if n == l { S::load(p(xi)) } else { S::load_tail(p(xi), n) };
                    // s0 = P0 + P1 + P2, s1 = P1 − P2 − P3 along rows, per column j.
                    let mut s0 = [S::zero(); 4];
                    let mut s1 = [S::zero(); 4];
                    for j in 0..4 {
                        let (p0, p1, p2, p3) = (ld(j), ld(4 + j), ld(8 + j), ld(12 + j));
                        s0[j] = S::add(S::add(p0, p1), p2);
                        s1[j] = S::sub(S::sub(p1, p2), p3);
                    }
                    // Output columns 2tx .. 2tx + 2n of rows oy, oy + 1: the two columns of
                    // each tile interleaved (what falls outside the plane is dropped).
                    let cols = (2 * n).min(ow - 2 * tx);
                    for (i, si) in [s0, s1].iter().enumerate() {
                        if oy + i >= oh {
                            break;
                        }
                        let left = S::add(S::add(si[0], si[1]), si[2]);
                        let right = S::sub(S::sub(si[1], si[2]), si[3]);
                        let (lo, hi) = S::interleave(left, right);
                        let o = plane.add((oy + i) * ow + 2 * tx);
                        if cols == 2 * l {
                            S::store(o, lo);
                            S::store(o.add(l), hi);
                        } else if cols > l {
                            S::store(o, lo);
                            S::store_tail(o.add(l), cols - l, hi);
                        } else if cols == l {
                            S::store(o, lo);
                        } else {
                            S::store_tail(o, cols, lo);
                        }
                    }
                    tx += n;
                }
            }
        }
    }
}

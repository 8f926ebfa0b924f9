//! Grouped-query attention, flash style: `out = softmax(scale·q·kᵀ + mask)·v` without the
//! score matrix.
//!
//! The query rows of one kv head — `(i, g)` pairs of query position and group member, ordered
//! position-major so that the `group` heads sharing a key/value head and a mask row sit in
//! one tile — are cut into tiles of up to [`RB`] rows. A tile walks the keys in blocks of
//! [`KB`]: scores for the block (register-tiled dot products along `head_dim`, the `Q·Kᵀ`
//! micro-kernel of `matmul_f32`), `scale · s + mask`, an online-softmax update of each row's
//! running maximum `m` and sum `l`, and `O ← O·e^{m_old − m} + P·V` accumulated directly in the
//! output rows; at the end each row is divided by `l`. Masked keys are skipped, not computed:
//! for each register tile of 4 rows, only the span of the block between the first and last key
//! that its mask rows do not set to −∞ is multiplied, and a block with no such key for the
//! whole tile is not touched at all (causal and sliding-window masks make most of the work
//! skippable on long sequences: 2× at 512 causal, 4× with a 128 window). Tiles of all kv heads
//! are the parallel work items; they shrink (down to 4 rows) when there are fewer than two per
//! thread. Decoding one token with at most 4 query heads per kv head therefore runs on one
//! thread per kv head (splitting the keys across threads is not implemented).

// Register-blocked kernels index small fixed-size arrays in loops and pass many scalars.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use std::ops::Range;

use rayon::prelude::*;

use super::exp_lanes;
use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::matmul_f32::micro_dot;
use crate::par::{threads, SyncPtr};
use crate::simd::Simd;
use crate::{check_len, mul, Isa, KernelError};

/// Keys per block (a multiple of every ISA's lane count).
const KB: usize = 64;
/// Most query rows per tile.
const RB: usize = 32;
/// Multiply-adds below which the kernel stays on the calling thread.
const MIN_PARALLEL_FMAS: usize = 1 << 18;

/// Problem geometry (see [`attention`]).
#[derive(Clone, Copy)]
struct Geo {
    /// Query and output rows are position-major (`[sq, n_kv, group, hd]`).
    seq_major: bool,
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    hd: usize,
    scale: f32,
}

/// One tile: rows `rows` (position-major `(i, g)` indices, `i·group + g`) of kv head `head`.
struct TileTask {
    q: *const f32,
    k: *const f32,
    v: *const f32,
    mask: *const f32,
    out: *mut f32,
    geo: Geo,
    head: usize,
    rows: Range<usize>,
}

/// Binds the constant `$M` to `$m` (1..=4 rows) and evaluates `$body`.
macro_rules! with_rows {
    ($m:expr, |$M:ident| $body:expr) => {
        match $m {
            1 => {
                const $M: usize = 1;
                $body
            }
            2 => {
                const $M: usize = 2;
                $body
            }
            3 => {
                const $M: usize = 3;
                $body
            }
            _ => {
                const $M: usize = 4;
                $body
            }
        }
    };
}

/// Raw dot products `s[r·KB + c] = q[r] · k[c]` for `M` query rows and `kb ≤ KB` keys of
/// `hd` elements (`k` rows contiguous, `hd` apart).
#[inline(always)]
unsafe fn scores<S: Simd, const M: usize, const NR: usize>(q: [*const f32; M], k: *const f32, hd: usize, kb: usize, s: *mut f32) {
    let mut c = 0;
    while c + NR <= kb {
        let kp: [*const f32; NR] = std::array::from_fn(|x| k.add((c + x) * hd));
        let t = micro_dot::<S, M, NR>(q, kp, hd);
        for (r, row) in t.iter().enumerate() {
            for (x, &d) in row.iter().enumerate() {
                *s.add(r * KB + c + x) = d;
            }
        }
        c += NR;
    }
    // Remaining keys one at a time (no padded work).
    while c < kb {
        let t = micro_dot::<S, M, 1>(q, [k.add(c * hd)], hd);
        for (r, row) in t.iter().enumerate() {
            *s.add(r * KB + c) = row[0];
        }
        c += 1;
    }
}

/// `s[j] = s[j]·scale + mask[j]` for `j < kb`, `−∞` for `kb ≤ j < kbv` (`kbv` = `kb` rounded up
/// to whole vectors, `≤ KB`); returns the maximum.
#[inline(always)]
unsafe fn scale_mask_max<S: Simd>(s: *mut f32, mask: *const f32, scale: f32, kb: usize, kbv: usize) -> f32 {
    let l = S::LANES;
    let sc = S::splat(scale);
    let mut mx = S::splat(f32::NEG_INFINITY);
    let mut j = 0;
    while j + l <= kb {
        let v = S::fma(S::load(s.add(j)), sc, S::load(mask.add(j)));
        S::store(s.add(j), v);
        mx = S::max(v, mx);
        j += l;
    }
    if j < kb {
        let t = kb - j;
        S::store_tail(s.add(j), t, S::fma(S::load_tail(s.add(j), t), sc, S::load_tail(mask.add(j), t)));
        for x in kb..kbv {
            *s.add(x) = f32::NEG_INFINITY;
        }
        mx = S::max(S::load(s.add(j)), mx);
    }
    S::reduce_max(mx)
}

/// `s[j] = exp(s[j] − m)` for `j < kbv`; returns the sum.
#[inline(always)]
unsafe fn exp_sum<S: Simd>(s: *mut f32, m: f32, kbv: usize) -> f32 {
    let l = S::LANES;
    let mv = S::splat(m);
    let mut acc = [S::zero(); 2];
    let mut j = 0;
    while j < kbv {
        let e = exp_lanes::<S>(S::sub(S::load(s.add(j)), mv));
        S::store(s.add(j), e);
        acc[(j / l) & 1] = S::add(acc[(j / l) & 1], e);
        j += l;
    }
    S::reduce_add(S::add(acc[0], acc[1]))
}

/// `o[r][0..w] = o[r][0..w]·alpha[r] + Σ_{j<kb} p[r][j] · v[j·v_rs + 0..w]` for `M` rows, with
/// `w == NV·LANES`, or `w < LANES` and `NV == 1`.
#[inline(always)]
unsafe fn pv_cols<S: Simd, const M: usize, const NV: usize>(p: [*const f32; M], alpha: &[f32; M], v: *const f32, v_rs: usize, kb: usize, o: [*mut f32; M], w: usize) {
    let l = S::LANES;
    let mut acc = [[S::zero(); NV]; M];
    if w == NV * l {
        for r in 0..M {
            let a = S::splat(alpha[r]);
            for x in 0..NV {
                acc[r][x] = S::mul(S::load(o[r].add(x * l)), a);
            }
        }
        for j in 0..kb {
            let vp = v.add(j * v_rs);
            let mut bv = [S::zero(); NV];
            for x in 0..NV {
                bv[x] = S::load(vp.add(x * l));
            }
            for r in 0..M {
                let a = S::splat(*p[r].add(j));
                for x in 0..NV {
                    acc[r][x] = S::fma(a, bv[x], acc[r][x]);
                }
            }
        }
        for r in 0..M {
            for x in 0..NV {
                S::store(o[r].add(x * l), acc[r][x]);
            }
        }
    } else {
        debug_assert!(NV == 1 && w < l);
        for r in 0..M {
            acc[r][0] = S::mul(S::load_tail(o[r], w), S::splat(alpha[r]));
        }
        for j in 0..kb {
            let bv = S::load_tail(v.add(j * v_rs), w);
            for r in 0..M {
                acc[r][0] = S::fma(S::splat(*p[r].add(j)), bv, acc[r][0]);
            }
        }
        for r in 0..M {
            S::store_tail(o[r], w, acc[r][0]);
        }
    }
}

/// `O ← O·alpha + P·V` over all `hd` columns for `M` rows.
#[inline(always)]
unsafe fn pv<S: Simd, const M: usize, const NV: usize>(p: [*const f32; M], alpha: &[f32; M], v: *const f32, hd: usize, kb: usize, o: [*mut f32; M]) {
    let l = S::LANES;
    let mut c = 0;
    while c + NV * l <= hd {
        let oc: [*mut f32; M] = std::array::from_fn(|r| o[r].add(c));
        pv_cols::<S, M, NV>(p, alpha, v.add(c), hd, kb, oc, NV * l);
        c += NV * l;
    }
    while c < hd {
        let w = (hd - c).min(l);
        let oc: [*mut f32; M] = std::array::from_fn(|r| o[r].add(c));
        pv_cols::<S, M, 1>(p, alpha, v.add(c), hd, kb, oc, w);
        c += w;
    }
}

/// The smallest range `lo..hi` of `0..kb` outside which `mask[i, j0 + j]` is −∞ for every
/// query position `i` in `qi` (`lo >= hi` when the whole block is −∞ for all of them).
#[inline(always)]
unsafe fn visible(mask: *const f32, sk: usize, qi: &[usize], j0: usize, kb: usize) -> (usize, usize) {
    let (mut lo, mut hi) = (kb, 0);
    let mut prev = usize::MAX;
    for &i in qi {
        if i == prev {
            continue;
        }
        prev = i;
        let row = std::slice::from_raw_parts(mask.add(i * sk + j0), kb);
        if let Some(f) = row[..lo].iter().position(|&x| x != f32::NEG_INFINITY) {
            lo = f;
        }
        if let Some(l) = row[hi..].iter().rposition(|&x| x != f32::NEG_INFINITY) {
            hi += l + 1;
        }
    }
    (lo, hi)
}

impl IsaTask for TileTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let TileTask { q, k, v, mask, out, geo, head, rows } = self;
        let Geo { seq_major, n_kv, group, sq, sk, hd, scale } = geo;
        let l = S::LANES;
        let nr = rows.len();
        debug_assert!((1..=RB).contains(&nr));

        // Row pointers and query positions.
        let mut qp = [std::ptr::null::<f32>(); RB];
        let mut op = [std::ptr::null_mut::<f32>(); RB];
        let mut qi = [0usize; RB];
        for (t, r) in rows.clone().enumerate() {
            let (i, g) = (r / group, r % group);
            let off = if seq_major { ((i * n_kv + head) * group + g) * hd } else { ((head * group + g) * sq + i) * hd };
            qp[t] = q.add(off);
            op[t] = out.add(off);
            qi[t] = i;
            std::ptr::write_bytes(op[t], 0, hd);
        }
        let (kh, vh) = (k.add(head * sk * hd), v.add(head * sk * hd));

        let mut m = [f32::NEG_INFINITY; RB];
        let mut lsum = [0.0f32; RB + 16];
        // Padded to whole vectors for the vector pass over rows.
        let mut alpha = [0.0f32; RB + 16];
        let mut bsum = [0.0f32; RB + 16];
        let mut s = [0.0f32; RB * KB];
        let sp = s.as_mut_ptr();

        let mut j0 = 0;
        while j0 < sk {
            let kb = (sk - j0).min(KB);
            let kbv = kb.div_ceil(l) * l;
            // The keys `lo..hi` of the block visible to some row of each group of 4 rows.
            let mut span = [(0usize, 0usize); RB / 4];
            let mut any = false;
            for (gi, g_span) in span.iter_mut().enumerate().take(nr.div_ceil(4)) {
                let t = 4 * gi;
                *g_span = visible(mask, sk, &qi[t..nr.min(t + 4)], j0, kb);
                any |= g_span.0 < g_span.1;
            }
            if !any {
                j0 += kb;
                continue;
            }
            let kp = kh.add(j0 * hd);

            // Raw scores of the visible spans; 0 elsewhere (the mask makes those −∞ below).
            let mut t = 0;
            while t < nr {
                let mr = (nr - t).min(4);
                let (lo, hi) = span[t / 4];
                for x in t..t + mr {
                    let row = sp.add(x * KB);
                    std::ptr::write_bytes(row, 0, lo.min(kb));
                    std::ptr::write_bytes(row.add(hi.max(lo)), 0, kb - hi.max(lo));
                }
                if lo < hi {
                    with_rows!(mr, |M| {
                        let qa: [*const f32; M] = std::array::from_fn(|x| qp[t + x]);
                        let (k0, s0) = (kp.add(lo * hd), sp.add(t * KB + lo));
                        if S::LANES >= 16 {
                            scores::<S, M, 4>(qa, k0, hd, hi - lo, s0)
                        } else {
                            scores::<S, M, 2>(qa, k0, hd, hi - lo, s0)
                        }
                    });
                }
                t += mr;
            }

            // Online softmax: scores → probabilities relative to the new running maximum.
            // `alpha` holds `m_old − m_new` until the vector pass below.
            for t in 0..nr {
                let row = sp.add(t * KB);
                let bm = scale_mask_max::<S>(row, mask.add(qi[t] * sk + j0), scale, kb, kbv);
                let m_new = if bm > m[t] { bm } else { m[t] };
                if m_new == f32::NEG_INFINITY {
                    // Nothing visible yet: this block adds nothing to the row.
                    std::ptr::write_bytes(row, 0, kb);
                    (alpha[t], bsum[t]) = (0.0, 0.0);
                    continue;
                }
                alpha[t] = m[t] - m_new;
                bsum[t] = exp_sum::<S>(row, m_new, kbv);
                m[t] = m_new;
            }
            // alpha = e^{m_old − m_new} (0 for a first visible block), l ← l·alpha + Σp.
            let mut t = 0;
            while t < nr {
                let a = exp_lanes::<S>(S::load(alpha.as_ptr().add(t)));
                S::store(alpha.as_mut_ptr().add(t), a);
                S::store(lsum.as_mut_ptr().add(t), S::fma(S::load(lsum.as_ptr().add(t)), a, S::load(bsum.as_ptr().add(t))));
                t += l;
            }

            // O ← O·alpha + P·V over the visible spans. A group with no visible key here has
            // m unchanged, so alpha = e^0 = 1 exactly and O needs no update.
            let vp = vh.add(j0 * hd);
            let mut t = 0;
            while t < nr {
                let mr = (nr - t).min(4);
                let (lo, hi) = span[t / 4];
                if lo < hi {
                    with_rows!(mr, |M| {
                        let pa: [*const f32; M] = std::array::from_fn(|x| sp.add((t + x) * KB + lo) as *const f32);
                        let oa: [*mut f32; M] = std::array::from_fn(|x| op[t + x]);
                        let al: [f32; M] = std::array::from_fn(|x| alpha[t + x]);
                        let v0 = vp.add(lo * hd);
                        if S::LANES >= 16 {
                            pv::<S, M, 4>(pa, &al, v0, hd, hi - lo, oa)
                        } else {
                            pv::<S, M, 2>(pa, &al, v0, hd, hi - lo, oa)
                        }
                    });
                }
                t += mr;
            }
            j0 += kb;
        }

        // O / l (a row that saw no visible key has O = 0, l = 0: NaN, as the plain formula).
        for t in 0..nr {
            let inv = S::splat(1.0 / lsum[t]);
            let o = op[t];
            let mut c = 0;
            while c + l <= hd {
                S::store(o.add(c), S::mul(S::load(o.add(c)), inv));
                c += l;
            }
            if c < hd {
                S::store_tail(o.add(c), hd - c, S::mul(S::load_tail(o.add(c), hd - c), inv));
            }
        }
    }
}

/// Grouped-query attention `out = softmax(scale·q·kᵀ + mask)·v`, flash style.
///
/// * `q`: `[n_kv, group, sq, head_dim]` (query head `kv·group + g` uses kv head `kv`);
/// * `k`, `v`: `[n_kv, sk, head_dim]`;
/// * `mask`: additive `[sq, sk]`, shared by all heads (typically 0 / −∞; any values allowed);
/// * `out`: `[n_kv, group, sq, head_dim]`.
///
/// The softmax runs over the `sk` keys of each query row. A row whose mask is −∞ everywhere
/// (and every row when `sk = 0`) gives NaN, as the plain formula does. Key blocks masked to −∞
/// for a whole tile of query rows are skipped, so such masks cost only the visible part.
#[allow(clippy::too_many_arguments)]
pub fn attention(
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &[f32],
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    attention_with(isa(), q, k, v, mask, n_kv, group, sq, sk, head_dim, scale, out)
}

/// [`attention`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn attention_with(
    isa: Isa,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &[f32],
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    attention_layout_with(isa, AttnLayout::HeadMajor, q, k, v, mask, n_kv, group, sq, sk, head_dim, scale, out)
}

/// Where the query and output rows of [`attention_layout_with`] are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttnLayout {
    /// `q` and `out` are `[n_kv, group, sq, head_dim]` (as [`attention`]).
    HeadMajor,
    /// `q` and `out` are `[sq, n_kv, group, head_dim]`: the layout the q projection produces
    /// and the output projection reads, so neither needs a transposing copy.
    SeqMajor,
}

/// [`attention`] with the query and output rows in `layout` (`k`, `v` and `mask` as there).
#[allow(clippy::too_many_arguments)]
pub fn attention_layout_with(
    isa: Isa,
    layout: AttnLayout,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &[f32],
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    const W: &str = "attention";
    let isa = checked(isa)?;
    let heads = mul(W, n_kv, group)?;
    let rows_per_head = mul(W, group, sq)?;
    let q_len = mul(W, mul(W, heads, sq)?, head_dim)?;
    let kv_len = mul(W, mul(W, n_kv, sk)?, head_dim)?;
    check_len("attention: q", q_len, q.len())?;
    check_len("attention: k", kv_len, k.len())?;
    check_len("attention: v", kv_len, v.len())?;
    check_len("attention: mask", mul(W, sq, sk)?, mask.len())?;
    check_len("attention: out", q_len, out.len())?;
    if out.is_empty() {
        return Ok(());
    }

    let geo = Geo { seq_major: layout == AttnLayout::SeqMajor, n_kv, group, sq, sk, hd: head_dim, scale };
    let fmas = (n_kv * rows_per_head).saturating_mul(sk).saturating_mul(2 * head_dim);
    let parallel = threads() > 1 && fmas >= MIN_PARALLEL_FMAS;
    let mut tile = RB.min(rows_per_head);
    if parallel {
        // Smaller tiles for more work items, but not below one 4-row register tile: narrower
        // tiles re-read every key and value per row and cost more in total than they gain
        // (decoding 4 heads × 512 keys as 4 one-row tiles took 2.6× the CPU time of one tile).
        while tile > 4 && n_kv * rows_per_head.div_ceil(tile) < 2 * threads() {
            tile = tile.div_ceil(2).max(4);
        }
    }
    let tiles = rows_per_head.div_ceil(tile);
    let (qp, kp, vp) = (SyncPtr(q.as_ptr() as *mut f32), SyncPtr(k.as_ptr() as *mut f32), SyncPtr(v.as_ptr() as *mut f32));
    let (mp, op) = (SyncPtr(mask.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let work = |u: usize| {
        let (head, t) = (u / tiles, u % tiles);
        let rows = t * tile..((t + 1) * tile).min(rows_per_head);
        run_on(isa, TileTask { q: qp.get(), k: kp.get(), v: vp.get(), mask: mp.get(), out: op.get(), geo, head, rows });
    };
    if parallel {
        (0..n_kv * tiles).into_par_iter().for_each(work);
    } else {
        (0..n_kv * tiles).for_each(work);
    }
    Ok(())
}

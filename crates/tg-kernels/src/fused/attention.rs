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
//! skippable on long sequences: 2× at 512 causal, 4× with a 128 window).
//!
//! A key whose mask is −∞ for a row never reaches that row, whatever its `k` and `v` rows
//! hold (a KV cache's unused rows may be NaN or ∞): its score is set to −∞ from the mask alone
//! (never `NaN·scale − ∞`), so its probability is exactly 0, and `P·V` never multiplies a value
//! row by a zero probability (keys that no row of a register tile weighs are skipped; keys that
//! only some rows weigh are added to those rows alone).
//!
//! Parallelism: tiles of all kv heads are the work items; they shrink (down to 4 rows) when
//! there are fewer than two per thread. When even 4-row tiles give fewer than two items per
//! thread — decoding one token with at most 4 query heads per kv head — and the keys the mask
//! leaves visible carry enough work, the key blocks of each tile are also split into chunks
//! of about equal visible work ("flash decoding"): each chunk produces its rows' partial
//! `(m, l, O)` in a per-call scratch buffer, and a final pass combines them exactly,
//! `O = Σ_c O_c·e^{m_c − m} / Σ_c l_c·e^{m_c − m}` with `m = max_c m_c`. Chunks are cut over
//! the visible keys only, so a long cache with few visible keys costs what those keys cost.
//!
//! When no mask entry is −∞ (nothing to skip) and the keys fit in cache, a dense path runs
//! instead (`dense.rs`): whole score rows per register tile, one exact softmax per row, no
//! online rescaling.

// Register-blocked kernels index small fixed-size arrays in loops and pass many scalars.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

mod dense;

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
/// Multiply-adds below which the kernel stays on the calling thread; also the fewest (of the
/// visible keys) per key chunk when a tile's keys are split. (Decoding 4 heads of 256 on 2
/// threads, a split of 256 visible keys about breaks even; 512 keys ran 1.7× faster.)
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
    /// Elements between the mask rows of consecutive query positions: `sk`, or 0 for one
    /// row shared by every position.
    mask_rs: usize,
}

impl Geo {
    /// Offset in `q` and `out` of row `r` (position-major `i·group + g`) of kv head `head`.
    #[inline(always)]
    fn row_offset(&self, head: usize, r: usize) -> usize {
        let (i, g) = (r / self.group, r % self.group);
        if self.seq_major {
            ((i * self.n_kv + head) * self.group + g) * self.hd
        } else {
            ((head * self.group + g) * self.sq + i) * self.hd
        }
    }
}

/// Where a key chunk of a split tile leaves its partial result: the unnormalized `O` rows
/// (`hd` apart) and, per row, `[m, l]`.
#[derive(Clone, Copy)]
struct Partial {
    o: *mut f32,
    ml: *mut f32,
}

/// One tile: rows `rows` (position-major `(i, g)` indices, `i·group + g`) of kv head `head`,
/// over the key blocks `blocks` (of [`KB`] keys). Without `part` the blocks are all of them and
/// the tile's normalized result goes to `out`.
struct TileTask {
    q: *const f32,
    k: *const f32,
    v: *const f32,
    mask: *const f32,
    out: *mut f32,
    geo: Geo,
    head: usize,
    rows: Range<usize>,
    blocks: Range<usize>,
    part: Option<Partial>,
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

/// `s[j] = s[j]·scale + mask[j]` for `j < kb` (exactly −∞ where `mask[j]` is, whatever `s[j]`
/// holds: NaN, ∞, stale), `−∞` for `kb ≤ j < kbv` (`kbv` = `kb` rounded up to whole vectors,
/// `≤ KB`); returns the maximum.
#[inline(always)]
unsafe fn scale_mask_max<S: Simd>(s: *mut f32, mask: *const f32, scale: f32, kb: usize, kbv: usize) -> f32 {
    let l = S::LANES;
    let sc = S::splat(scale);
    let (ninf, lowest) = (S::splat(f32::NEG_INFINITY), S::splat(f32::MIN));
    // (No closures in SIMD code: they need not be inlined into the target-feature trampoline.)
    #[inline(always)]
    unsafe fn masked<S: Simd>(s: S::V, m: S::V, sc: S::V, ninf: S::V, lowest: S::V) -> S::V {
        S::select_lt(m, lowest, ninf, S::fma(s, sc, m))
    }
    let mut mx = ninf;
    let mut j = 0;
    while j + l <= kb {
        let v = masked::<S>(S::load(s.add(j)), S::load(mask.add(j)), sc, ninf, lowest);
        S::store(s.add(j), v);
        mx = S::max(v, mx);
        j += l;
    }
    if j < kb {
        let t = kb - j;
        S::store_tail(s.add(j), t, masked::<S>(S::load_tail(s.add(j), t), S::load_tail(mask.add(j), t), sc, ninf, lowest));
        for x in kb..kbv {
            *s.add(x) = f32::NEG_INFINITY;
        }
        mx = S::max(S::load(s.add(j)), mx);
    }
    S::reduce_max(mx)
}

/// `s[j] = exp(s[j] − m)` for `j < kbv`, exactly 0 where `s[j] = −∞` (a masked key, by
/// construction rather than through `exp`'s underflow); returns the sum.
#[inline(always)]
unsafe fn exp_sum<S: Simd>(s: *mut f32, m: f32, kbv: usize) -> f32 {
    let l = S::LANES;
    let mv = S::splat(m);
    let lowest = S::splat(f32::MIN);
    let mut acc = [S::zero(); 2];
    let mut j = 0;
    while j < kbv {
        let x = S::load(s.add(j));
        let e = S::select_lt(x, lowest, S::zero(), exp_lanes::<S>(S::sub(x, mv)));
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

/// `O ← O·alpha + P·V` over the keys `lo..hi` of a block for `M ≤ 4` rows (`p[r]` the start of
/// row `r`'s probabilities, `v` of the block's value rows), never multiplying a value row by a
/// zero probability of a masked key: unless the span is `dense` (no key in it masked for any of
/// the rows), a key is added only to the rows that give it a nonzero weight, so a key masked
/// for a row (or whose weight underflowed to 0) contributes nothing there even when its value
/// row holds NaN or ∞.
#[inline(always)]
unsafe fn pv_visible<S: Simd, const M: usize>(p: [*const f32; M], alpha: &[f32; M], v: *const f32, hd: usize, lo: usize, hi: usize, dense: bool, o: [*mut f32; M]) {
    // `O ← O·al + P·V` over the `n` keys from `j` (no closure: see `scale_mask_max`).
    #[inline(always)]
    unsafe fn pv_m<S: Simd, const M: usize>(p: [*const f32; M], al: &[f32; M], v: *const f32, hd: usize, j: usize, n: usize, o: [*mut f32; M]) {
        let pj: [*const f32; M] = std::array::from_fn(|r| p[r].add(j));
        if S::LANES >= 16 {
            pv::<S, M, 4>(pj, al, v.add(j * hd), hd, n, o)
        } else {
            pv::<S, M, 2>(pj, al, v.add(j * hd), hd, n, o)
        }
    }
    if dense {
        pv_m::<S, M>(p, alpha, v, hd, lo, hi - lo, o);
        return;
    }
    // Bit r of `who[j]`: row r weighs key j.
    let full = (1u8 << M) - 1;
    let mut who = [0u8; KB];
    let mut all = true;
    for j in lo..hi {
        let mut b = 0u8;
        for r in 0..M {
            b |= ((*p[r].add(j) != 0.0) as u8) << r;
        }
        who[j] = b;
        all &= b == full;
    }
    if all {
        pv_m::<S, M>(p, alpha, v, hd, lo, hi - lo, o);
        return;
    }
    // Rescale once, then add runs of keys with the same rows.
    if alpha.iter().any(|&a| a != 1.0) {
        pv_m::<S, M>(p, alpha, v, hd, lo, 0, o);
    }
    let one = [1.0f32; M];
    let mut j = lo;
    while j < hi {
        let b = who[j];
        let mut e = j + 1;
        while e < hi && who[e] == b {
            e += 1;
        }
        if b == full {
            pv_m::<S, M>(p, &one, v, hd, j, e - j, o);
        } else {
            for r in 0..M {
                if b >> r & 1 != 0 {
                    pv_m::<S, 1>([p[r]], &[1.0], v, hd, j, e - j, [o[r]]);
                }
            }
        }
        j = e;
    }
}

/// The smallest range `lo..hi` of `0..kb` outside which `mask[i·sk + j0 + j]` is −∞ for every
/// query position `i` in `qi` (`lo >= hi` when the whole block is −∞ for all of them), and
/// whether it is dense: no key inside it is −∞ for any of them.
#[inline(always)]
fn visible(mask: &[f32], sk: usize, qi: &[usize], j0: usize, kb: usize) -> (usize, usize, bool) {
    let row = |i: usize| &mask[i * sk + j0..i * sk + j0 + kb];
    let (mut lo, mut hi) = (kb, 0);
    let mut prev = usize::MAX;
    for &i in qi {
        if i == prev {
            continue;
        }
        prev = i;
        let row = row(i);
        // Most blocks of a long cache are masked for the row: a vectorized test first.
        if !any_visible(row) {
            continue;
        }
        if let Some(f) = row[..lo].iter().position(|&x| x != f32::NEG_INFINITY) {
            lo = f;
        }
        if let Some(l) = row[hi..].iter().rposition(|&x| x != f32::NEG_INFINITY) {
            hi += l + 1;
        }
    }
    if lo >= hi {
        return (lo, hi, false);
    }
    let mut dense = true;
    prev = usize::MAX;
    for &i in qi {
        if i != prev {
            prev = i;
            dense &= all_visible(&row(i)[lo..hi]);
        }
    }
    (lo, hi, dense)
}

/// Whether some element of `x` is not −∞ (a fold without early exit, so that it vectorizes).
#[inline(always)]
fn any_visible(x: &[f32]) -> bool {
    x.iter().fold(0u32, |a, &v| a | (v != f32::NEG_INFINITY) as u32) != 0
}

/// Whether no element of `x` is −∞ (as [`any_visible`]).
#[inline(always)]
fn all_visible(x: &[f32]) -> bool {
    x.iter().fold(0u32, |a, &v| a | (v == f32::NEG_INFINITY) as u32) == 0
}

impl IsaTask for TileTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let TileTask { q, k, v, mask, out, geo, head, rows, blocks, part } = self;
        let Geo { sq, sk, hd, scale, mask_rs, .. } = geo;
        let mask = std::slice::from_raw_parts(mask, if mask_rs == 0 { sk } else { sq * sk });
        let l = S::LANES;
        let nr = rows.len();
        debug_assert!((1..=RB).contains(&nr));

        // Row pointers and query positions.
        let mut qp = [std::ptr::null::<f32>(); RB];
        let mut op = [std::ptr::null_mut::<f32>(); RB];
        let mut qi = [0usize; RB];
        for (t, r) in rows.clone().enumerate() {
            let off = geo.row_offset(head, r);
            qp[t] = q.add(off);
            op[t] = match part {
                Some(p) => p.o.add(t * hd),
                None => out.add(off),
            };
            qi[t] = r / geo.group;
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

        let mut j0 = blocks.start * KB;
        let end = (blocks.end * KB).min(sk);
        while j0 < end {
            let kb = (end - j0).min(KB);
            let kbv = kb.div_ceil(l) * l;
            // The keys `lo..hi` of the block visible to some row of each group of 4 rows.
            let mut span = [(0usize, 0usize, false); RB / 4];
            let mut any = false;
            for (gi, g_span) in span.iter_mut().enumerate().take(nr.div_ceil(4)) {
                let t = 4 * gi;
                *g_span = visible(mask, mask_rs, &qi[t..nr.min(t + 4)], j0, kb);
                any |= g_span.0 < g_span.1;
            }
            if !any {
                j0 += kb;
                continue;
            }
            let kp = kh.add(j0 * hd);

            // Raw scores of the visible spans. Scores outside them are left as they are: the
            // mask, −∞ there, overrides them below.
            let mut t = 0;
            while t < nr {
                let mr = (nr - t).min(4);
                let (lo, hi, _) = span[t / 4];
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
                let bm = scale_mask_max::<S>(row, mask.as_ptr().add(qi[t] * mask_rs + j0), scale, kb, kbv);
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
                let (lo, hi, dense) = span[t / 4];
                if lo < hi {
                    with_rows!(mr, |M| {
                        let pa: [*const f32; M] = std::array::from_fn(|x| sp.add((t + x) * KB) as *const f32);
                        let oa: [*mut f32; M] = std::array::from_fn(|x| op[t + x]);
                        let al: [f32; M] = std::array::from_fn(|x| alpha[t + x]);
                        pv_visible::<S, M>(pa, &al, vp, hd, lo, hi, dense, oa)
                    });
                }
                t += mr;
            }
            j0 += kb;
        }

        if let Some(p) = part {
            // A chunk's partial result: unnormalized O (already in place), m and l.
            for t in 0..nr {
                *p.ml.add(2 * t) = m[t];
                *p.ml.add(2 * t + 1) = lsum[t];
            }
            return;
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
/// (and every row when `sk = 0`) gives NaN, as the plain formula does. A key whose mask is −∞
/// for a row contributes nothing to it whatever its `k` and `v` rows hold (NaN and ∞ included),
/// so the unused rows of a preallocated KV cache need no clearing. Key blocks masked to −∞ for
/// a whole tile of query rows are skipped, so such masks cost only the visible part. Runs on
/// the current rayon pool; with fewer query tiles than threads (decoding) the visible keys are
/// split across threads.
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
    check_len("attention: mask", mul("attention", sq, sk)?, mask.len())?;
    attention_rows(isa, layout, q, k, v, mask, sk, n_kv, group, sq, sk, head_dim, scale, out)
}

/// [`attention_layout_with`] with one mask row `[sk]` shared by every query position (a
/// mask broadcast over positions, or a single value broadcast to a row): the same result
/// as that row repeated `sq` times, without reading `sq·sk` mask values.
#[allow(clippy::too_many_arguments)]
pub fn attention_row_mask_with(
    isa: Isa,
    layout: AttnLayout,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask_row: &[f32],
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    head_dim: usize,
    scale: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    check_len("attention: mask row", sk, mask_row.len())?;
    attention_rows(isa, layout, q, k, v, mask_row, 0, n_kv, group, sq, sk, head_dim, scale, out)
}

/// Whether [`attention_layout_with`] (`row_mask` false: `mask` is `[sq, sk]`) or
/// [`attention_row_mask_with`] (`row_mask` true: `mask` is one row) takes the dense path for
/// this problem: whole score rows per register tile instead of the flash loop, when no mask
/// entry is −∞ and the keys fit in cache. The two paths agree to rounding; this is for tests
/// that must exercise both.
#[doc(hidden)]
pub fn attention_is_dense(mask: &[f32], row_mask: bool, group: usize, sq: usize, sk: usize) -> bool {
    let n = if row_mask { sk } else { sq.saturating_mul(sk) };
    mask.len() >= n && dense::applies(mask, if row_mask { 0 } else { sk }, group.saturating_mul(sq), sq, sk)
}

/// The attention of [`attention_layout_with`] with mask rows `mask_rs` apart (`sk`, or 0:
/// one row for all positions; `mask` checked to hold them).
#[allow(clippy::too_many_arguments)]
fn attention_rows(
    isa: Isa,
    layout: AttnLayout,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    mask: &[f32],
    mask_rs: usize,
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
    check_len("attention: out", q_len, out.len())?;
    if out.is_empty() {
        return Ok(());
    }

    let geo = Geo { seq_major: layout == AttnLayout::SeqMajor, n_kv, group, sq, sk, hd: head_dim, scale, mask_rs };
    let threads = threads();
    let fmas = (n_kv * rows_per_head).saturating_mul(sk).saturating_mul(2 * head_dim);
    let parallel = threads > 1 && fmas >= MIN_PARALLEL_FMAS;
    if dense::applies(mask, mask_rs, rows_per_head, sq, sk) {
        dense::run(isa, &geo, q, k, v, mask, out, parallel, threads);
        return Ok(());
    }
    let mut tile = RB.min(rows_per_head);
    if parallel {
        // Smaller tiles for more work items, but not below one 4-row register tile: narrower
        // tiles re-read every key and value per row and cost more in total than they gain
        // (decoding 4 heads × 512 keys as 4 one-row tiles took 2.6× the CPU time of one tile).
        while tile > 4 && n_kv * rows_per_head.div_ceil(tile) < 2 * threads {
            tile = tile.div_ceil(2).max(4);
        }
    }
    let tiles = rows_per_head.div_ceil(tile);
    let items = n_kv * tiles;
    let nb = sk.div_ceil(KB);
    let (qp, kp, vp) = (SyncPtr(q.as_ptr() as *mut f32), SyncPtr(k.as_ptr() as *mut f32), SyncPtr(v.as_ptr() as *mut f32));
    let (mp, op) = (SyncPtr(mask.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let task = |u: usize, blocks: Range<usize>, part: Option<Partial>| {
        let (head, t) = (u / tiles, u % tiles);
        let rows = t * tile..((t + 1) * tile).min(rows_per_head);
        TileTask { q: qp.get(), k: kp.get(), v: vp.get(), mask: mp.get(), out: op.get(), geo, head, rows, blocks, part }
    };

    // Split keys when the tiles leave threads idle and (before the scan for visible keys, on
    // all keys) there is work for two chunks per tile.
    let splittable = parallel && items < 2 * threads && fmas >= 2 * MIN_PARALLEL_FMAS * items;
    let split = if splittable { split_keys(mask, &geo, tile, tiles, (2 * threads).div_ceil(items)) } else { None };
    let Some(split) = split else {
        let work = |u: usize| run_on(isa, task(u, 0..nb, None));
        if parallel && items > 1 {
            (0..items).into_par_iter().for_each(work);
        } else {
            (0..items).for_each(work);
        }
        return Ok(());
    };

    // Flash decoding: every (tile, key chunk) pair is a work item with its own partial result.
    let chunks = split.chunks;
    let o_len = tile * head_dim;
    let mut part_o = vec![0.0f32; items * chunks * o_len];
    let mut part_ml = vec![0.0f32; items * chunks * tile * 2];
    let (po, pml) = (SyncPtr(part_o.as_mut_ptr()), SyncPtr(part_ml.as_mut_ptr()));
    (0..items * chunks).into_par_iter().for_each(|u| {
        let (it, c) = (u / chunks, u % chunks);
        let bounds = &split.bounds[(it % tiles) * (chunks + 1)..];
        // SAFETY: item `u` owns `o_len` floats of `part_o` and `2·tile` of `part_ml` at `u`.
        let part = unsafe { Partial { o: po.get().add(u * o_len), ml: pml.get().add(u * tile * 2) } };
        run_on(isa, task(it, bounds[c]..bounds[c + 1], Some(part)));
    });
    combine(&geo, tile, tiles, rows_per_head, chunks, &part_o, &part_ml, out);
    Ok(())
}

/// How the key blocks of each tile are split: `chunks` chunks per tile, tile `t`'s chunk `c`
/// being blocks `bounds[t·(chunks+1) + c] .. bounds[t·(chunks+1) + c + 1]`.
struct KeySplit {
    chunks: usize,
    bounds: Vec<usize>,
}

/// Splits each tile's key blocks into at most `max_chunks` chunks of about equal visible work
/// (keys not masked to −∞ for some row of the tile) and at least [`MIN_PARALLEL_FMAS`] each;
/// `None` when there is not enough visible work for two chunks.
fn split_keys(mask: &[f32], geo: &Geo, tile: usize, tiles: usize, max_chunks: usize) -> Option<KeySplit> {
    let Geo { n_kv, group, sq, sk, hd, .. } = *geo;
    let rows_per_head = group * sq;
    let nb = sk.div_ceil(KB);
    // Visible keys of each block, per tile.
    let mut weight = vec![0usize; tiles * nb];
    let mut fmas = 0usize;
    for t in 0..tiles {
        let rows = t * tile..((t + 1) * tile).min(rows_per_head);
        let pos: Vec<usize> = (rows.start / group..=(rows.end - 1) / group).collect();
        let w = &mut weight[t * nb..(t + 1) * nb];
        for (b, wb) in w.iter_mut().enumerate() {
            let j0 = b * KB;
            let (lo, hi, _) = visible(mask, geo.mask_rs, &pos, j0, (sk - j0).min(KB));
            *wb = hi.saturating_sub(lo);
        }
        fmas = fmas.saturating_add(w.iter().sum::<usize>().saturating_mul(rows.len() * 2 * hd));
    }
    let chunks = (fmas.saturating_mul(n_kv) / MIN_PARALLEL_FMAS / (n_kv * tiles)).min(max_chunks);
    if chunks < 2 {
        return None;
    }
    // Chunk c of a tile ends at the first block where the tile's visible keys so far reach
    // c/chunks of its total (the last chunk takes the rest).
    let mut bounds = Vec::with_capacity(tiles * (chunks + 1));
    for w in weight.chunks(nb) {
        let total: usize = w.iter().sum();
        bounds.push(0);
        let (mut b, mut seen) = (0, 0);
        for c in 1..chunks {
            let target = total * c / chunks;
            while b < nb && (seen < target || seen == 0) {
                seen += w[b];
                b += 1;
            }
            bounds.push(b);
        }
        bounds.push(nb);
    }
    Some(KeySplit { chunks, bounds })
}

/// Combines the chunks' partial results into `out`: per row, with `m = max_c m_c`,
/// `O = Σ_c O_c·e^{m_c − m} / Σ_c l_c·e^{m_c − m}` (a row no chunk saw a visible key for is NaN,
/// as the plain formula gives).
#[allow(clippy::too_many_arguments)]
fn combine(geo: &Geo, tile: usize, tiles: usize, rows_per_head: usize, chunks: usize, part_o: &[f32], part_ml: &[f32], out: &mut [f32]) {
    let hd = geo.hd;
    let mut w = vec![0.0f32; chunks];
    for it in 0..geo.n_kv * tiles {
        let (head, t) = (it / tiles, it % tiles);
        for (x, r) in (t * tile..((t + 1) * tile).min(rows_per_head)).enumerate() {
            let ml = |c: usize| {
                let i = ((it * chunks + c) * tile + x) * 2;
                (part_ml[i], part_ml[i + 1])
            };
            let o = &mut out[geo.row_offset(head, r)..][..hd];
            let m = (0..chunks).map(|c| ml(c).0).fold(f32::NEG_INFINITY, f32::max);
            if m == f32::NEG_INFINITY {
                o.fill(f32::NAN);
                continue;
            }
            let mut l = 0.0f32;
            for (c, wc) in w.iter_mut().enumerate() {
                let (mc, lc) = ml(c);
                // e^{−∞} = 0: a chunk that saw no visible key for this row adds nothing.
                *wc = (mc - m).exp();
                l += lc * *wc;
            }
            let part = |c: usize| &part_o[((it * chunks + c) * tile + x) * hd..][..hd];
            let w0 = w[0];
            o.iter_mut().zip(part(0)).for_each(|(y, &p)| *y = p * w0);
            for (c, &wc) in w.iter().enumerate().skip(1) {
                if wc != 0.0 {
                    o.iter_mut().zip(part(c)).for_each(|(y, &p)| *y += p * wc);
                }
            }
            let inv = 1.0 / l;
            o.iter_mut().for_each(|y| *y *= inv);
        }
    }
}

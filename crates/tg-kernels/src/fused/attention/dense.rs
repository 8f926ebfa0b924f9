//! The dense path of attention: taken when no mask entry is −∞ (an exporter's "no mask", a
//! bidirectional encoder without padding), so no key can be skipped, and the keys fit in
//! cache. Each register tile of up to [`MR`] query rows then computes its whole score rows in
//! one pass, as a small GEMM against the keys packed transposed (panels of `2·LANES` keys,
//! `[panel][hd][2·LANES]`), with `scale·s + mask` and the row maximum in the tile's epilogue;
//! one pass of `exp(s − m)` and its sum; `O = P·V` in one pass over the values; and `O / l`.
//! There is no online-softmax rescaling and no horizontal reduction per score, which is what
//! the flash path spends most of its time on when the head dimension is small (the terrain
//! UNet's 32).
//!
//! The result is the flash path's to rounding: the same f32 dot products in another order, and
//! the exact row maximum instead of a running one.

use std::ops::Range;

use rayon::prelude::*;

use super::{exp_lanes, pv, Geo};
use crate::dequant::SimdDecode;
use crate::isa::{run_on, Isa, IsaTask};
use crate::par::SyncPtr;
use crate::simd::Simd;

/// Most query rows per register tile.
const MR: usize = 6;
/// Most query rows per work item (whole register tiles).
const ITEM_ROWS: usize = 4 * MR;
/// Key counts are padded to a multiple of this (every ISA's panel width, `2·LANES`, divides it).
const PAD: usize = 32;
/// Most keys for the dense path: `MR` score rows of this many keys stay in L2 beside the keys
/// and values of one head.
const MAX_KEYS: usize = 8192;

/// Whether the dense path runs a problem: no −∞ in the mask (`mask_rs` 0: one row for all
/// positions), at most [`MAX_KEYS`] keys, and at least one whole register tile of query rows
/// per head (fewer rows would spend more on packing the keys than on using them).
/// `TG_ATTENTION=flash` switches the dense path off (for comparisons).
pub(super) fn applies(mask: &[f32], mask_rs: usize, rows_per_head: usize, sq: usize, sk: usize) -> bool {
    static OFF: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    if *OFF.get_or_init(|| std::env::var("TG_ATTENTION").as_deref() == Ok("flash")) || sk == 0 || sk > MAX_KEYS || rows_per_head < MR {
        return false;
    }
    let n = if mask_rs == 0 { sk } else { sq * sk };
    !mask[..n].contains(&f32::NEG_INFINITY)
}

/// Runs the dense path (see [`applies`]) on the current rayon pool.
pub(super) fn run(isa: Isa, geo: &Geo, q: &[f32], k: &[f32], v: &[f32], mask: &[f32], out: &mut [f32], parallel: bool, threads: usize) {
    let Geo { n_kv, group, sq, sk, hd, .. } = *geo;
    let skp = sk.div_ceil(PAD) * PAD;
    // Keys of each head packed transposed, zero-padded to `skp`.
    let mut kt = vec![0.0f32; n_kv * skp * hd];
    let ktp = SyncPtr(kt.as_mut_ptr());
    // SAFETY (the `add`): head `h`'s panels are `skp·hd` floats at `h·skp·hd`, inside `kt`.
    let pack = |h: usize| run_on(isa, PackTask { k: k[h * sk * hd..].as_ptr(), kt: unsafe { ktp.get().add(h * skp * hd) }, sk, skp, hd });
    if parallel && n_kv > 1 {
        (0..n_kv).into_par_iter().for_each(pack);
    } else {
        (0..n_kv).for_each(pack);
    }

    let rows_per_head = group * sq;
    // Work items of whole register tiles, smaller when there are too few for the threads.
    let mut item = ITEM_ROWS.min(rows_per_head.div_ceil(MR) * MR);
    if parallel {
        while item > MR && n_kv * rows_per_head.div_ceil(item) < 2 * threads {
            item -= MR;
        }
    }
    let per_head = rows_per_head.div_ceil(item);
    let (qp, vp, mp, op) = (SyncPtr(q.as_ptr() as *mut f32), SyncPtr(v.as_ptr() as *mut f32), SyncPtr(mask.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let work = |u: usize| {
        let (head, t) = (u / per_head, u % per_head);
        let rows = t * item..((t + 1) * item).min(rows_per_head);
        run_on(isa, DenseTask { q: qp.get(), kt: ktp.get(), v: vp.get(), mask: mp.get(), out: op.get(), geo: *geo, skp, head, rows });
    };
    if parallel && n_kv * per_head > 1 {
        (0..n_kv * per_head).into_par_iter().for_each(work);
    } else {
        (0..n_kv * per_head).for_each(work);
    }
}

/// Packs the `sk` keys of one head (`[sk, hd]`) as panels of `2·LANES` keys, transposed:
/// key `j`, dimension `d` at `(j / nr)·hd·nr + d·nr + j % nr`. The padding keys stay 0.
struct PackTask {
    k: *const f32,
    kt: *mut f32,
    sk: usize,
    skp: usize,
    hd: usize,
}

impl IsaTask for PackTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let PackTask { k, kt, sk, skp, hd } = self;
        let nr = 2 * S::LANES;
        debug_assert!(skp.is_multiple_of(nr));
        for j in 0..sk {
            let (p, c) = (j / nr, j % nr);
            let dst = kt.add(p * hd * nr + c);
            let src = k.add(j * hd);
            for d in 0..hd {
                *dst.add(d * nr) = *src.add(d);
            }
        }
    }
}

/// Query rows `rows` (position-major `i·group + g`) of kv head `head`, all keys.
struct DenseTask {
    q: *const f32,
    kt: *const f32,
    v: *const f32,
    mask: *const f32,
    out: *mut f32,
    geo: Geo,
    skp: usize,
    head: usize,
    rows: Range<usize>,
}

/// Binds the constant `$M` to `$m` (1..=[`MR`] rows) and evaluates `$body`.
macro_rules! with_tile_rows {
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
            4 => {
                const $M: usize = 4;
                $body
            }
            5 => {
                const $M: usize = 5;
                $body
            }
            _ => {
                const $M: usize = MR;
                $body
            }
        }
    };
}

/// Score rows `s[r·skp + j] = scale·(q_r · k_j) + mask_r[j]` for `M` rows and all `sk` keys
/// (`−∞` for the padding keys `sk ≤ j < skp`); returns each row's maximum.
#[inline(always)]
unsafe fn score_rows<S: Simd, const M: usize>(q: [*const f32; M], mask: [*const f32; M], kt: *const f32, hd: usize, sk: usize, skp: usize, scale: f32, s: *mut f32) -> [f32; M] {
    let l = S::LANES;
    let nr = 2 * l;
    let sc = S::splat(scale);
    let mut mx = [S::splat(f32::NEG_INFINITY); M];
    let mut c = 0;
    while c < skp {
        let kp = kt.add(c * hd);
        let mut acc = [[S::zero(); 2]; M];
        for d in 0..hd {
            let b0 = S::load(kp.add(d * nr));
            let b1 = S::load(kp.add(d * nr + l));
            for r in 0..M {
                let a = S::splat(*q[r].add(d));
                acc[r][0] = S::fma(a, b0, acc[r][0]);
                acc[r][1] = S::fma(a, b1, acc[r][1]);
            }
        }
        if c + nr <= sk {
            for r in 0..M {
                for x in 0..2 {
                    let y = S::fma(acc[r][x], sc, S::load(mask[r].add(c + x * l)));
                    S::store(s.add(r * skp + c + x * l), y);
                    mx[r] = S::max(y, mx[r]);
                }
            }
        } else {
            // The last panel: keys past `sk` are padding (no mask entry): −∞, out of the max.
            for r in 0..M {
                for x in 0..2 {
                    let at = c + x * l;
                    let n = sk.saturating_sub(at).min(l);
                    let y = S::fma(acc[r][x], sc, S::load_tail(mask[r].add(at.min(sk)), n));
                    let p = s.add(r * skp + at);
                    S::store(p, y);
                    for e in n..l {
                        *p.add(e) = f32::NEG_INFINITY;
                    }
                    mx[r] = S::max(S::load(p), mx[r]);
                }
            }
        }
        c += nr;
    }
    let mut m = [0.0f32; M];
    for r in 0..M {
        m[r] = S::reduce_max(mx[r]);
    }
    m
}

/// `s[j] = exp(s[j] − m)` for `j < n` (a multiple of the lanes; exactly 0 where `s[j] = −∞`);
/// returns the sum.
#[inline(always)]
unsafe fn exp_row<S: Simd>(s: *mut f32, m: f32, n: usize) -> f32 {
    let l = S::LANES;
    let (mv, lowest) = (S::splat(m), S::splat(f32::MIN));
    let mut acc = [S::zero(); 2];
    let mut j = 0;
    while j + 2 * l <= n {
        for x in 0..2 {
            let v = S::load(s.add(j + x * l));
            let e = S::select_lt(v, lowest, S::zero(), exp_lanes::<S>(S::sub(v, mv)));
            S::store(s.add(j + x * l), e);
            acc[x] = S::add(acc[x], e);
        }
        j += 2 * l;
    }
    while j < n {
        let v = S::load(s.add(j));
        let e = S::select_lt(v, lowest, S::zero(), exp_lanes::<S>(S::sub(v, mv)));
        S::store(s.add(j), e);
        acc[0] = S::add(acc[0], e);
        j += l;
    }
    S::reduce_add(S::add(acc[0], acc[1]))
}

/// `o[r] = P[r]·V` for `M` rows (`p[r]` the row's `sk` probabilities, `v` the head's `[sk, hd]`
/// values; `o` overwritten).
#[inline(always)]
unsafe fn pv_rows<S: Simd, const M: usize>(p: [*const f32; M], v: *const f32, hd: usize, sk: usize, o: [*mut f32; M]) {
    for r in 0..M {
        // Zero first: `pv` scales what is there, and the output may hold NaN.
        std::ptr::write_bytes(o[r], 0, hd);
    }
    let zero = [0.0f32; M];
    if S::LANES >= 16 && hd.is_multiple_of(4 * S::LANES) && M <= 4 {
        pv::<S, M, 4>(p, &zero, v, hd, sk, o)
    } else {
        pv::<S, M, 2>(p, &zero, v, hd, sk, o)
    }
}

impl IsaTask for DenseTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let DenseTask { q, kt, v, mask, out, geo, skp, head, rows } = self;
        let Geo { sk, hd, scale, mask_rs, group, .. } = geo;
        let l = S::LANES;
        let (kh, vh) = (kt.add(head * skp * hd), v.add(head * sk * hd));
        // Score rows, every element written before it is read. (The thread-local is taken and
        // put back outside any closure: a closure would not inherit the target features.)
        let mut s = SCORES.with(|c| c.take());
        crate::grow(&mut s, MR * skp);
        let sp = s.as_mut_ptr();
        let mut t = rows.start;
        while t < rows.end {
            let mr = (rows.end - t).min(MR);
            with_tile_rows!(mr, |M| {
                let qa: [*const f32; M] = std::array::from_fn(|x| q.add(geo.row_offset(head, t + x)));
                let oa: [*mut f32; M] = std::array::from_fn(|x| out.add(geo.row_offset(head, t + x)));
                let ma: [*const f32; M] = std::array::from_fn(|x| mask.add((t + x) / group * mask_rs));
                let m = score_rows::<S, M>(qa, ma, kh, hd, sk, skp, scale, sp);
                let mut inv = [0.0f32; M];
                for r in 0..M {
                    inv[r] = 1.0 / exp_row::<S>(sp.add(r * skp), m[r], skp);
                }
                let pa: [*const f32; M] = std::array::from_fn(|x| sp.add(x * skp) as *const f32);
                pv_rows::<S, M>(pa, vh, hd, sk, oa);
                for r in 0..M {
                    let (o, iv) = (oa[r], S::splat(inv[r]));
                    let mut c = 0;
                    while c + l <= hd {
                        S::store(o.add(c), S::mul(S::load(o.add(c)), iv));
                        c += l;
                    }
                    if c < hd {
                        S::store_tail(o.add(c), hd - c, S::mul(S::load_tail(o.add(c), hd - c), iv));
                    }
                }
            });
            t += mr;
        }
        SCORES.with(|c| c.replace(s));
    }
}

thread_local! {
    /// [`DenseTask`]'s `MR` score rows, kept per thread between calls.
    static SCORES: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

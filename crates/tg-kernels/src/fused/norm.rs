//! RMSNorm, residual add + RMSNorm, NeoX RoPE, and per-head RMSNorm + RoPE.

use std::ops::Range;

use super::{inv_rms, sum_sq};
use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::simd::Simd;
use crate::{check_len, mul, Isa, KernelError};

/// Elements per task below which a kernel stays on one thread.
const MIN_PER_TASK: usize = 1 << 14;

/// Rows per task for rows of `n` elements.
fn min_rows(n: usize) -> usize {
    (MIN_PER_TASK / n.max(1)).max(1)
}

/// `out[i] = x[i] · inv · w[i]` for `i < n`.
#[inline(always)]
unsafe fn scale_row<S: Simd>(x: *const f32, w: *const f32, inv: S::V, out: *mut f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    while i + l <= n {
        S::store(out.add(i), S::mul(S::mul(S::load(x.add(i)), inv), S::load(w.add(i))));
        i += l;
    }
    if i < n {
        let t = n - i;
        S::store_tail(out.add(i), t, S::mul(S::mul(S::load_tail(x.add(i), t), inv), S::load_tail(w.add(i), t)));
    }
}

/// `s[i] = a[i] + b[i]` for `i < n`; returns `Σ s[i]²` (accumulated like [`sum_sq`]).
#[inline(always)]
unsafe fn add_sum_sq<S: Simd>(a: *const f32, b: *const f32, s: *mut f32, n: usize) -> f32 {
    let l = S::LANES;
    let mut acc = [S::zero(); 4];
    let mut i = 0;
    while i + 4 * l <= n {
        for (j, acc) in acc.iter_mut().enumerate() {
            let o = i + j * l;
            let v = S::add(S::load(a.add(o)), S::load(b.add(o)));
            S::store(s.add(o), v);
            *acc = S::fma(v, v, *acc);
        }
        i += 4 * l;
    }
    while i + l <= n {
        let v = S::add(S::load(a.add(i)), S::load(b.add(i)));
        S::store(s.add(i), v);
        acc[0] = S::fma(v, v, acc[0]);
        i += l;
    }
    if i < n {
        let t = n - i;
        let v = S::add(S::load_tail(a.add(i), t), S::load_tail(b.add(i), t));
        S::store_tail(s.add(i), t, v);
        acc[1] = S::fma(v, v, acc[1]);
    }
    S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])))
}

/// NeoX rotation of one head of `2h` elements, optionally RMS-normalized first:
/// `y = x · inv · w` (when `w` is given), then `out[i] = y[i]·c[i] − y[i+h]·s[i]`,
/// `out[i+h] = y[i+h]·c[i] + y[i]·s[i]`.
#[inline(always)]
unsafe fn rope_row<S: Simd>(
    x: *const f32,
    norm: Option<(*const f32, S::V)>,
    c: *const f32,
    s: *const f32,
    out: *mut f32,
    h: usize,
) {
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    unsafe fn step<S: Simd>(
        x: *const f32,
        norm: Option<(*const f32, S::V)>,
        c: *const f32,
        s: *const f32,
        out: *mut f32,
        h: usize,
        i: usize,
        t: usize,
    ) {
        let (mut x0, mut x1) = (ld::<S>(x.add(i), t), ld::<S>(x.add(i + h), t));
        if let Some((w, inv)) = norm {
            x0 = S::mul(S::mul(x0, inv), ld::<S>(w.add(i), t));
            x1 = S::mul(S::mul(x1, inv), ld::<S>(w.add(i + h), t));
        }
        let (cv, sv) = (ld::<S>(c.add(i), t), ld::<S>(s.add(i), t));
        let o0 = S::fma(x0, cv, S::neg(S::mul(x1, sv)));
        let o1 = S::fma(x1, cv, S::mul(x0, sv));
        if t == S::LANES {
            S::store(out.add(i), o0);
            S::store(out.add(i + h), o1);
        } else {
            S::store_tail(out.add(i), t, o0);
            S::store_tail(out.add(i + h), t, o1);
        }
    }
    let l = S::LANES;
    let mut i = 0;
    while i + l <= h {
        step::<S>(x, norm, c, s, out, h, i, l);
        i += l;
    }
    if i < h {
        step::<S>(x, norm, c, s, out, h, i, h - i);
    }
}

/// Loads `t ≤ LANES` elements (a full vector when `t == LANES`).
#[inline(always)]
unsafe fn ld<S: Simd>(p: *const f32, t: usize) -> S::V {
    if t == S::LANES {
        S::load(p)
    } else {
        S::load_tail(p, t)
    }
}

// ---------------------------------------------------------------------------------------------
// Tasks.

struct RmsTask {
    x: *const f32,
    w: *const f32,
    out: *mut f32,
    n: usize,
    eps: f32,
    rows: Range<usize>,
}

impl IsaTask for RmsTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let RmsTask { x, w, out, n, eps, rows } = self;
        for r in rows {
            let (xr, or) = (x.add(r * n), out.add(r * n));
            let inv = S::splat(inv_rms(sum_sq::<S>(xr, n), n, eps));
            scale_row::<S>(xr, w, inv, or, n);
        }
    }
}

struct AddRmsTask {
    a: *const f32,
    b: *const f32,
    w: *const f32,
    sum: *mut f32,
    out: *mut f32,
    n: usize,
    eps: f32,
    rows: Range<usize>,
}

impl IsaTask for AddRmsTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let AddRmsTask { a, b, w, sum, out, n, eps, rows } = self;
        for r in rows {
            let o = r * n;
            let ss = add_sum_sq::<S>(a.add(o), b.add(o), sum.add(o), n);
            let inv = S::splat(inv_rms(ss, n, eps));
            scale_row::<S>(sum.add(o), w, inv, out.add(o), n);
        }
    }
}

/// Rows are `(position, head)` pairs of `[seq, heads, head_dim]`.
struct RopeTask {
    x: *const f32,
    /// Per-head RMSNorm weight and epsilon, for the fused q/k-norm form.
    norm: Option<(*const f32, f32)>,
    cos: *const f32,
    sin: *const f32,
    out: *mut f32,
    heads: usize,
    head_dim: usize,
    rows: Range<usize>,
}

impl IsaTask for RopeTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let RopeTask { x, norm, cos, sin, out, heads, head_dim, rows } = self;
        let h = head_dim / 2;
        for r in rows {
            let pos = r / heads;
            let (xr, or) = (x.add(r * head_dim), out.add(r * head_dim));
            let (c, s) = (cos.add(pos * h), sin.add(pos * h));
            match norm {
                Some((w, eps)) => {
                    let inv = S::splat(inv_rms(sum_sq::<S>(xr, head_dim), head_dim, eps));
                    rope_row::<S>(xr, Some((w, inv)), c, s, or, h)
                }
                None => rope_row::<S>(xr, None, c, s, or, h),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points.

/// `out[r, i] = x[r, i] / sqrt(mean_j(x[r, j]²) + eps) · w[i]` for a row-major `x` of `rows`
/// rows of `n` elements; `w` has `n` elements. (The `(1 + w)` form of Gemma is this kernel with
/// `1 + w` precomputed.)
pub fn rms_norm(x: &[f32], w: &[f32], rows: usize, n: usize, eps: f32, out: &mut [f32]) -> Result<(), KernelError> {
    rms_norm_with(isa(), x, w, rows, n, eps, out)
}

/// [`rms_norm`] on an explicit ISA.
pub fn rms_norm_with(
    isa: Isa,
    x: &[f32],
    w: &[f32],
    rows: usize,
    n: usize,
    eps: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let len = mul("rms_norm", rows, n)?;
    check_len("rms_norm: x", len, x.len())?;
    check_len("rms_norm: w", n, w.len())?;
    check_len("rms_norm: out", len, out.len())?;
    if len == 0 {
        return Ok(());
    }
    let (xp, wp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(w.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    for_ranges(rows, min_rows(n), 1, |rows| {
        run_on(isa, RmsTask { x: xp.get(), w: wp.get(), out: op.get(), n, eps, rows })
    });
    Ok(())
}

/// Residual add fused with RMSNorm: `sum_out = a + b`, `out = rms_norm(sum_out, w)` (see
/// [`rms_norm`]); `a`, `b`, `sum_out` and `out` are `rows × n`, `w` is `n`.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm(
    a: &[f32],
    b: &[f32],
    w: &[f32],
    rows: usize,
    n: usize,
    eps: f32,
    sum_out: &mut [f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    add_rms_norm_with(isa(), a, b, w, rows, n, eps, sum_out, out)
}

/// [`add_rms_norm`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn add_rms_norm_with(
    isa: Isa,
    a: &[f32],
    b: &[f32],
    w: &[f32],
    rows: usize,
    n: usize,
    eps: f32,
    sum_out: &mut [f32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let len = mul("add_rms_norm", rows, n)?;
    check_len("add_rms_norm: a", len, a.len())?;
    check_len("add_rms_norm: b", len, b.len())?;
    check_len("add_rms_norm: w", n, w.len())?;
    check_len("add_rms_norm: sum_out", len, sum_out.len())?;
    check_len("add_rms_norm: out", len, out.len())?;
    if len == 0 {
        return Ok(());
    }
    let (ap, bp, wp) =
        (SyncPtr(a.as_ptr() as *mut f32), SyncPtr(b.as_ptr() as *mut f32), SyncPtr(w.as_ptr() as *mut f32));
    let (sp, op) = (SyncPtr(sum_out.as_mut_ptr()), SyncPtr(out.as_mut_ptr()));
    for_ranges(rows, min_rows(n), 1, |rows| {
        run_on(isa, AddRmsTask { a: ap.get(), b: bp.get(), w: wp.get(), sum: sp.get(), out: op.get(), n, eps, rows })
    });
    Ok(())
}

/// Checks the shared arguments of the RoPE kernels; returns `seq · heads · head_dim`.
#[allow(clippy::too_many_arguments)]
fn check_rope(
    what: &'static str,
    x: usize,
    cos: usize,
    sin: usize,
    out: usize,
    seq: usize,
    heads: usize,
    head_dim: usize,
) -> Result<usize, KernelError> {
    if !head_dim.is_multiple_of(2) {
        return Err(KernelError::Shape(format!("{what}: head_dim {head_dim} is odd")));
    }
    let len = mul(what, mul(what, seq, heads)?, head_dim)?;
    let table = mul(what, seq, head_dim / 2)?;
    check_len("rope: x", len, x)?;
    check_len("rope: cos", table, cos)?;
    check_len("rope: sin", table, sin)?;
    check_len("rope: out", len, out)?;
    Ok(len)
}

/// NeoX-style rotary embedding of `x: [seq, heads, head_dim]` with tables
/// `cos, sin: [seq, head_dim / 2]` (shared by all heads). With `h = head_dim / 2`, for `i < h`:
/// `out[.., i] = x[.., i]·cos[s, i] − x[.., i+h]·sin[s, i]` and
/// `out[.., i+h] = x[.., i+h]·cos[s, i] + x[.., i]·sin[s, i]`. `head_dim` must be even.
pub fn rope_neox(
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    rope_neox_with(isa(), x, cos, sin, seq, heads, head_dim, out)
}

/// [`rope_neox`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn rope_neox_with(
    isa: Isa,
    x: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    rope_impl(isa, x, None, cos, sin, seq, heads, head_dim, out)
}

/// Per-head RMSNorm over `head_dim` (weight `w: [head_dim]`, see [`rms_norm`]) followed by
/// [`rope_neox`]: the q/k-norm + RoPE of Gemma 3 and Qwen 3. `x` and `out` are
/// `[seq, heads, head_dim]`, `cos` and `sin` are `[seq, head_dim / 2]`.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_rope_neox(
    x: &[f32],
    w: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    eps: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    rms_norm_rope_neox_with(isa(), x, w, cos, sin, seq, heads, head_dim, eps, out)
}

/// [`rms_norm_rope_neox`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn rms_norm_rope_neox_with(
    isa: Isa,
    x: &[f32],
    w: &[f32],
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    eps: f32,
    out: &mut [f32],
) -> Result<(), KernelError> {
    check_len("rms_norm_rope_neox: w", head_dim, w.len())?;
    rope_impl(isa, x, Some((w, eps)), cos, sin, seq, heads, head_dim, out)
}

#[allow(clippy::too_many_arguments)]
fn rope_impl(
    isa: Isa,
    x: &[f32],
    norm: Option<(&[f32], f32)>,
    cos: &[f32],
    sin: &[f32],
    seq: usize,
    heads: usize,
    head_dim: usize,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let len = check_rope("rope", x.len(), cos.len(), sin.len(), out.len(), seq, heads, head_dim)?;
    if len == 0 {
        return Ok(());
    }
    let (xp, cp, sp) =
        (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(cos.as_ptr() as *mut f32), SyncPtr(sin.as_ptr() as *mut f32));
    let op = SyncPtr(out.as_mut_ptr());
    let norm = norm.map(|(w, eps)| (SyncPtr(w.as_ptr() as *mut f32), eps));
    for_ranges(seq * heads, min_rows(head_dim), 1, |rows| {
        let norm = norm.map(|(w, eps)| (w.get() as *const f32, eps));
        run_on(isa, RopeTask { x: xp.get(), norm, cos: cp.get(), sin: sp.get(), out: op.get(), heads, head_dim, rows })
    });
    Ok(())
}

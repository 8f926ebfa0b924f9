//! GELU-tanh, gated GELU-tanh (`gelu(gate) · up`) and row softmax.

use std::ops::Range;

use super::exp_lanes;
use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::reduce::row_max;
use crate::simd::Simd;
use crate::{check_len, mul, Isa, KernelError};

/// Elements per task below which an `exp`-bound kernel stays on one thread.
const MIN_PER_TASK: usize = 1 << 12;

/// `−2·√(2/π)`.
const M2_SQRT_2_PI: f32 = (-2.0 * std::f64::consts::FRAC_2_SQRT_PI * std::f64::consts::FRAC_1_SQRT_2) as f32;
/// The cubic coefficient of GELU-tanh.
const GELU_C: f32 = 0.044_715;

/// `0.5·x·(1 + tanh(t))`, `t = √(2/π)·(x + 0.044715·x³)`, evaluated as the identical
/// `x / (1 + e^{−2t})`: one `exp`, no cancellation for negative `x`. `x = −∞` gives NaN (as
/// the tanh formula does: `−∞ · 0`).
#[inline(always)]
unsafe fn gelu_v<S: Simd>(x: S::V) -> S::V {
    let poly = S::fma(S::mul(x, x), S::splat(GELU_C), S::splat(1.0));
    let m2t = S::mul(S::mul(x, S::splat(M2_SQRT_2_PI)), poly);
    S::div(x, S::add(S::splat(1.0), exp_lanes::<S>(m2t)))
}

/// `gelu(g[i]) · u[i]` (or `gelu(g[i])` when `u` is null) for `i < n`.
#[inline(always)]
unsafe fn gelu_map<S: Simd>(g: *const f32, u: *const f32, out: *mut f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    while i < n {
        let t = (n - i).min(l);
        let full = t == l;
        let x = if full { S::load(g.add(i)) } else { S::load_tail(g.add(i), t) };
        let mut y = gelu_v::<S>(x);
        if !u.is_null() {
            y = S::mul(y, if full { S::load(u.add(i)) } else { S::load_tail(u.add(i), t) });
        }
        if full {
            S::store(out.add(i), y);
        } else {
            S::store_tail(out.add(i), t, y);
        }
        i += t;
    }
}

struct GeluTask {
    g: *const f32,
    /// Null for plain GELU.
    u: *const f32,
    out: *mut f32,
    range: Range<usize>,
}

impl IsaTask for GeluTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let GeluTask { g, u, out, range } = self;
        let u = if u.is_null() { u } else { u.add(range.start) };
        gelu_map::<S>(g.add(range.start), u, out.add(range.start), range.len());
    }
}

fn gelu_impl(isa: Isa, g: &[f32], u: Option<&[f32]>, out: &mut [f32]) {
    let gp = SyncPtr(g.as_ptr() as *mut f32);
    let up = SyncPtr(u.map_or(std::ptr::null_mut(), |u| u.as_ptr() as *mut f32));
    let op = SyncPtr(out.as_mut_ptr());
    for_ranges(out.len(), MIN_PER_TASK, 64, |range| {
        run_on(isa, GeluTask { g: gp.get(), u: up.get(), out: op.get(), range })
    });
}

/// `out[i] = 0.5·x[i]·(1 + tanh(√(2/π)·(x[i] + 0.044715·x[i]³)))`; `x` and `out` have the same
/// length.
pub fn gelu_tanh(x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    gelu_tanh_with(isa(), x, out)
}

/// [`gelu_tanh`] on an explicit ISA.
pub fn gelu_tanh_with(isa: Isa, x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    check_len("gelu_tanh: out", x.len(), out.len())?;
    gelu_impl(isa, x, None, out);
    Ok(())
}

/// The gated FFN activation `out[i] = gelu_tanh(gate[i]) · up[i]` (see [`gelu_tanh`]); all three
/// slices have the same length.
pub fn gated_gelu_tanh(gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    gated_gelu_tanh_with(isa(), gate, up, out)
}

/// [`gated_gelu_tanh`] on an explicit ISA.
pub fn gated_gelu_tanh_with(isa: Isa, gate: &[f32], up: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    check_len("gated_gelu_tanh: up", gate.len(), up.len())?;
    check_len("gated_gelu_tanh: out", gate.len(), out.len())?;
    gelu_impl(isa, gate, Some(up), out);
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Softmax.

/// `out = exp(x − max) / Σ exp(x − max)` over one row of `n ≥ 1` elements.
#[inline(always)]
unsafe fn softmax_row<S: Simd>(x: *const f32, out: *mut f32, n: usize) {
    let l = S::LANES;
    let mv = S::splat(row_max::<S>(x, n));
    let mut acc = [S::zero(); 2];
    let mut i = 0;
    while i + 2 * l <= n {
        for (j, acc) in acc.iter_mut().enumerate() {
            let e = exp_lanes::<S>(S::sub(S::load(x.add(i + j * l)), mv));
            S::store(out.add(i + j * l), e);
            *acc = S::add(*acc, e);
        }
        i += 2 * l;
    }
    while i < n {
        let t = (n - i).min(l);
        if t == l {
            let e = exp_lanes::<S>(S::sub(S::load(x.add(i)), mv));
            S::store(out.add(i), e);
            acc[0] = S::add(acc[0], e);
        } else {
            let e = exp_lanes::<S>(S::sub(S::load_tail(x.add(i), t), mv));
            S::store_tail(out.add(i), t, e);
            // Lanes past the row end hold exp(0 − max): re-read only the row's lanes.
            acc[1] = S::add(acc[1], S::load_tail(out.add(i), t));
        }
        i += t;
    }
    let inv = S::splat(1.0 / S::reduce_add(S::add(acc[0], acc[1])));
    let mut i = 0;
    while i + l <= n {
        S::store(out.add(i), S::mul(S::load(out.add(i)), inv));
        i += l;
    }
    if i < n {
        S::store_tail(out.add(i), n - i, S::mul(S::load_tail(out.add(i), n - i), inv));
    }
}

struct SoftmaxTask {
    x: *const f32,
    out: *mut f32,
    n: usize,
    rows: Range<usize>,
}

impl IsaTask for SoftmaxTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let SoftmaxTask { x, out, n, rows } = self;
        for r in rows {
            softmax_row::<S>(x.add(r * n), out.add(r * n), n);
        }
    }
}

/// Softmax over the last axis of a row-major `x` of `rows × n`:
/// `out[r, i] = exp(x[r, i] − m_r) / Σ_j exp(x[r, j] − m_r)`, `m_r = max_j x[r, j]`. A row of
/// all −∞ (or containing +∞) gives NaN, as that formula does.
pub fn softmax_rows(x: &[f32], rows: usize, n: usize, out: &mut [f32]) -> Result<(), KernelError> {
    softmax_rows_with(isa(), x, rows, n, out)
}

/// [`softmax_rows`] on an explicit ISA.
pub fn softmax_rows_with(isa: Isa, x: &[f32], rows: usize, n: usize, out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let len = mul("softmax_rows", rows, n)?;
    check_len("softmax_rows: x", len, x.len())?;
    check_len("softmax_rows: out", len, out.len())?;
    if len == 0 {
        return Ok(());
    }
    let (xp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    for_ranges(rows, (MIN_PER_TASK / n).max(1), 1, |rows| {
        run_on(isa, SoftmaxTask { x: xp.get(), out: op.get(), n, rows })
    });
    Ok(())
}

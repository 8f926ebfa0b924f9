//! Epilogues of the CNN kernels: a per-channel bias with an activation (after a
//! convolution), and group normalisation with its affine map and an activation.

use std::ops::Range;

use super::exp_lanes;
use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::simd::Simd;
use crate::{check_len, mul, Isa, KernelError};

/// An activation applied to a fused kernel's result.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Act {
    /// The value itself.
    None,
    /// `max(x, 0)` (NaN stays NaN).
    Relu,
    /// `x` for `x ≥ 0`, `α·x` below.
    LeakyRelu(f32),
    /// `x · σ(x)`, with `σ` computed as the unary kernel's sigmoid (`e^−|x|`, no overflow).
    Silu,
    /// `max(leaky_relu_α(x), floor)`: `LeakyReluFloor(α, floor)` (NaN gives the floor, as
    /// the `max` kernel does).
    LeakyReluFloor(f32, f32),
}

impl Act {
    /// The activation on one value (the portable path's definition).
    pub fn apply(self, x: f32) -> f32 {
        match self {
            Act::None => x,
            Act::Relu => {
                if x < 0.0 {
                    0.0
                } else {
                    x
                }
            }
            Act::LeakyRelu(a) => {
                if x < 0.0 {
                    a * x
                } else {
                    x
                }
            }
            Act::Silu => crate::UnaryOp::Silu.apply(x),
            Act::LeakyReluFloor(a, f) => {
                let y = Act::LeakyRelu(a).apply(x);
                if f < y {
                    y
                } else {
                    f
                }
            }
        }
    }
}

/// `act` on all lanes.
#[inline(always)]
unsafe fn act_v<S: Simd>(act: Act, y: S::V) -> S::V {
    let zero = S::splat(0.0);
    match act {
        Act::None => y,
        Act::Relu => S::select_lt(y, zero, zero, y),
        Act::LeakyRelu(a) => S::select_lt(y, zero, S::mul(y, S::splat(a)), y),
        Act::LeakyReluFloor(a, f) => {
            let l = S::select_lt(y, zero, S::mul(y, S::splat(a)), y);
            let fv = S::splat(f);
            S::select_lt(fv, l, l, fv)
        }
        Act::Silu => {
            let e = exp_lanes::<S>(S::neg(S::abs(y)));
            let r = S::div(S::splat(1.0), S::add(S::splat(1.0), e));
            S::mul(y, S::select_lt(y, zero, S::mul(e, r), r))
        }
    }
}

/// `out[i] = act((x[i] − centre) · scale + shift)` for `i < n` (in place when `x == out`).
#[inline(always)]
unsafe fn affine_act<S: Simd>(x: *const f32, out: *mut f32, n: usize, centre: f32, scale: f32, shift: f32, act: Act) {
    let (l, cv, sv, tv) = (S::LANES, S::splat(centre), S::splat(scale), S::splat(shift));
    let mut i = 0;
    while i < n {
        let t = (n - i).min(l);
        let v = if t == l { S::load(x.add(i)) } else { S::load_tail(x.add(i), t) };
        let y = act_v::<S>(act, S::fma(S::sub(v, cv), sv, tv));
        if t == l {
            S::store(out.add(i), y);
        } else {
            S::store_tail(out.add(i), t, y);
        }
        i += t;
    }
}

// ---------------------------------------------------------------------------------------------
// Bias and activation, in place.

struct BiasTask {
    out: *mut f32,
    bias: *const f32,
    /// Rows (channels) of the output, each of `p` elements.
    rows: Range<usize>,
    channels: usize,
    p: usize,
    act: Act,
}

impl IsaTask for BiasTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let BiasTask { out, bias, rows, channels, p, act } = self;
        for r in rows {
            let o = out.add(r * p);
            affine_act::<S>(o, o, p, 0.0, 1.0, *bias.add(r % channels), act);
        }
    }
}

/// `c[r, 0..w] = act(c[r, 0..w] + bias[r] + res[r, 0..w])` in place for `r < rows`, rows of
/// `c` and `res` `ldc` apart (a block of a convolution's output, while it is in cache; `res`
/// null: no residual).
///
/// # Safety
/// `c` (and `res` unless null) hold `rows` rows of `w` at stride `ldc`, `bias` `rows`
/// values; `isa` is available.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn bias_act_block(isa: Isa, c: *mut f32, ldc: usize, rows: usize, w: usize, bias: *const f32, res: *const f32, act: Act) {
    struct BlockTask {
        c: *mut f32,
        ldc: usize,
        rows: usize,
        w: usize,
        bias: *const f32,
        res: *const f32,
        act: Act,
    }
    impl IsaTask for BlockTask {
        type Output = ();
        #[inline(always)]
        unsafe fn run<S: SimdDecode>(self) {
            let BlockTask { c, ldc, rows, w, bias, res, act } = self;
            for r in 0..rows {
                let o = c.add(r * ldc);
                if !res.is_null() {
                    add_in::<S>(o, res.add(r * ldc), w);
                }
                affine_act::<S>(o, o, w, 0.0, 1.0, *bias.add(r), act);
            }
        }
    }
    run_on(isa, BlockTask { c, ldc, rows, w, bias, res, act })
}

/// `o[i] += r[i]` for `i < n`.
#[inline(always)]
unsafe fn add_in<S: Simd>(o: *mut f32, r: *const f32, n: usize) {
    let l = S::LANES;
    let mut i = 0;
    while i + l <= n {
        S::store(o.add(i), S::add(S::load(o.add(i)), S::load(r.add(i))));
        i += l;
    }
    if i < n {
        S::store_tail(o.add(i), n - i, S::add(S::load_tail(o.add(i), n - i), S::load_tail(r.add(i), n - i)));
    }
}

/// `out[n, m, i] = act(out[n, m, i] + bias[m])` in place, for `out` `[N, M, P]` with
/// `M = bias.len()` (the epilogue of a convolution).
pub fn bias_act_rows(out: &mut [f32], bias: &[f32], p: usize, act: Act) -> Result<(), KernelError> {
    bias_act_rows_with(isa(), out, bias, p, act)
}

/// [`bias_act_rows`] on an explicit ISA.
pub fn bias_act_rows_with(isa: Isa, out: &mut [f32], bias: &[f32], p: usize, act: Act) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let channels = bias.len();
    if out.is_empty() {
        return Ok(());
    }
    if channels == 0 || p == 0 || !out.len().is_multiple_of(mul("bias_act: rows", channels, p)?) {
        return Err(KernelError::Shape(format!("bias_act: {} outputs are not [N, {channels}, {p}]", out.len())));
    }
    let rows = out.len() / p;
    let (o, b) = (SyncPtr(out.as_mut_ptr()), SyncPtr(bias.as_ptr() as *mut f32));
    for_ranges(rows, (1 << 14) / p.max(1), 1, |r| run_on(isa, BiasTask { out: o.get(), bias: b.get(), rows: r, channels, p, act }));
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Group normalisation.

/// The shape of a group normalisation: `x [n, c, plane]` in `groups` groups of channels.
#[derive(Debug, Clone, Copy)]
pub struct GroupNormShape {
    /// Batch.
    pub n: usize,
    /// Channels.
    pub c: usize,
    /// Elements per channel (the product of the spatial dims).
    pub plane: usize,
    /// Groups (divides `c`).
    pub groups: usize,
}

struct GroupNormTask<'a> {
    x: *const f32,
    out: *mut f32,
    gamma: &'a [f32],
    beta: &'a [f32],
    s: GroupNormShape,
    eps: f32,
    act: Act,
    blocks: Range<usize>,
}

impl IsaTask for GroupNormTask<'_> {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let GroupNormTask { x, out, gamma, beta, s, eps, act, blocks } = self;
        let cg = s.c / s.groups;
        let len = cg * s.plane;
        for blk in blocks {
            let xb = x.add(blk * len);
            // The statistics in one pass over deviations from a pilot mean (see `moments`).
            let (mean, var) = moments::<S>(xb, len);
            let mean = mean as f32;
            let inv = 1.0 / (var + eps as f64).sqrt();
            // γ and β of this image: one value per channel, or per image and channel.
            let g0 = (blk % s.groups) * cg + if gamma.len() == s.c { 0 } else { blk / s.groups * s.c };
            for ch in 0..cg {
                let scale = (inv * gamma[g0 + ch] as f64) as f32;
                let o = ch * s.plane;
                affine_act::<S>(xb.add(o), out.add(blk * len + o), s.plane, mean, scale, beta[g0 + ch], act);
            }
        }
    }
}

/// The mean and (biased) variance of `n > 0` elements in one pass: the sums of `d = x − k`
/// and `d²` in four vector accumulators each, returned in f64, for a pilot mean `k` of the
/// first 64 elements, then `mean = k + Σd/n` and `var = Σd²/n − (Σd/n)²`. With `k` near the
/// mean the subtraction loses nothing (the textbook `E[x²] − E[x]²` cancels when the mean is
/// large against the spread); the one pass reads the group once where the two-pass form
/// (the mean, then the squared deviations) read it twice. (Explicit loops: a closure would
/// not inherit the target features, see `elementwise`.)
#[inline(always)]
unsafe fn moments<S: Simd>(x: *const f32, n: usize) -> (f64, f64) {
    let pilot = n.min(64);
    let k = ((0..pilot).map(|j| *x.add(j) as f64).sum::<f64>() / pilot as f64) as f32;
    let (l, kv) = (S::LANES, S::splat(k));
    let mut s1 = [S::splat(0.0); 4];
    let mut s2 = [S::splat(0.0); 4];
    let mut i = 0;
    while i + 4 * l <= n {
        for a in 0..4 {
            let d = S::sub(S::load(x.add(i + a * l)), kv);
            s1[a] = S::add(s1[a], d);
            s2[a] = S::fma(d, d, s2[a]);
        }
        i += 4 * l;
    }
    let (mut t1, mut t2) = (0f64, 0f64);
    for a in 0..4 {
        t1 += S::reduce_add(s1[a]) as f64;
        t2 += S::reduce_add(s2[a]) as f64;
    }
    for j in i..n {
        let d = (*x.add(j) - k) as f64;
        t1 += d;
        t2 += d * d;
    }
    let m1 = t1 / n as f64;
    (k as f64 + m1, (t2 / n as f64 - m1 * m1).max(0.0))
}

/// Group normalisation with affine map and activation: for each sample and group of
/// `c / groups` channels, `y = act((x − μ) / √(σ² + ε) · γ[ch] + β[ch])` with `μ`, `σ²` the
/// mean and (biased) variance over the group's channels and positions. `x` and `out` are
/// `[n, c, plane]`; `gamma` and `beta` have `c` elements (one per channel) or `n·c` (one per
/// image and channel, `[n, c]`), both the same.
pub fn group_norm(x: &[f32], gamma: &[f32], beta: &[f32], s: GroupNormShape, eps: f32, act: Act, out: &mut [f32]) -> Result<(), KernelError> {
    group_norm_with(isa(), x, gamma, beta, s, eps, act, out)
}

/// [`group_norm`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn group_norm_with(isa: Isa, x: &[f32], gamma: &[f32], beta: &[f32], s: GroupNormShape, eps: f32, act: Act, out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    if s.groups == 0 || !s.c.is_multiple_of(s.groups) {
        return Err(KernelError::Shape(format!("group_norm: {} channels are not a multiple of {} groups", s.c, s.groups)));
    }
    let total = mul("group_norm: x", mul("group_norm: x", s.n, s.c)?, s.plane)?;
    check_len("group_norm: x", total, x.len())?;
    check_len("group_norm: out", total, out.len())?;
    let affine = if gamma.len() == s.c || s.n <= 1 { s.c } else { mul("group_norm: gamma", s.n, s.c)? };
    check_len("group_norm: gamma", affine, gamma.len())?;
    check_len("group_norm: beta", affine, beta.len())?;
    if total == 0 {
        return Ok(());
    }
    let blocks = s.n * s.groups;
    let len = total / blocks;
    let (xp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    for_ranges(blocks, (1 << 14) / len.max(1), 1, |r| run_on(isa, GroupNormTask { x: xp.get(), out: op.get(), gamma, beta, s, eps, act, blocks: r }));
    Ok(())
}

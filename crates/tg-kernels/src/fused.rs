//! Fused kernels: the targets of the e-graph fusion rules. Each one computes, in one pass over
//! its rows, what a chain of primitive ops computes with several passes and intermediate
//! buffers.
//!
//! | kernel | replaces |
//! |---|---|
//! | [`rms_norm`] | `mul(x, x)`, `reduce_mean`, `add eps`, `rsqrt`, `mul`, `mul w` |
//! | [`add_rms_norm`] | residual `add` followed by the above (both results are written) |
//! | [`rope_neox`] | two half slices, four `mul`, `sub`, `add`, `concat` |
//! | [`rms_norm_rope_neox`] | per-head RMSNorm (q/k-norm) followed by RoPE |
//! | [`gelu_tanh`], [`gated_gelu_tanh`] | the ten-op GELU-tanh chain (and the `· up` of a gated FFN) |
//! | [`softmax_rows`] | `reduce_max`, `sub`, `exp`, `reduce_sum`, `div` |
//! | [`attention`] | `matmul(q, kᵀ)`, `scale`, `add mask`, softmax, `matmul(p, v)` |
//! | [`bias_act_rows`] | a convolution's per-channel bias `add` and its activation |
//! | [`group_norm`] | reshape, `reduce_mean`, `sub`, `mul`, `reduce_mean`, `add eps`, `rsqrt`, `mul`, reshape, `mul γ`, `add β` (and an activation) |
//!
//! All buffers are contiguous row-major f32. Every kernel has a `*_with(isa, ..)` twin (see
//! the crate docs on instruction sets) and splits independent rows (heads, query blocks)
//! over the current rayon pool; small problems run on the calling thread.
//!
//! # Numerics
//! * Norms: the sum of squares is accumulated in f32 vector lanes, four vector accumulators
//!   (each lane adds about `n / (4·LANES)` terms, then a tree); all terms are non-negative, so
//!   its relative error is at most `(n / (4·LANES) + log2(4·LANES) + 3)·u`, `u = 2^-24`
//!   (≈ 19 u for `n = 640` on AVX-512). `1 / sqrt(ss / n + eps)` is then evaluated in f64 and
//!   rounded once, and `x · inv · w` adds two roundings: each output is within about
//!   `(n / (8·LANES) + 6)·u` relative of the exact value.
//! * RoPE: `x0·c − x1·s` with one product rounded and one fused multiply-add: within
//!   `2u·(|x0·c| + |x1·s|)`.
//! * GELU-tanh is evaluated as the identical `x / (1 + e^{−2t})`,
//!   `t = √(2/π)·(x + 0.044715·x³)`: one `exp` instead of `tanh`, and no cancellation in
//!   `1 + tanh(t)` for negative `x` (relative error ≈ `(8|t| + 6)·u`; the `|t|` term is the
//!   conditioning of `e^{−2t}` itself).
//! * Softmax and attention subtract the running row maximum before `exp` (the crate's SIMD
//!   polynomial, ≈ 1.3 ulp; `std` on the portable path) and accumulate sums in f32 lanes.
//!   A row whose inputs are all −∞ (attention: whose mask row is all −∞, or `sk = 0`) gives
//!   NaN, as the plain formula `exp(x − max) / Σ` does.

mod act;
mod attention;
pub(crate) mod epilogue;
mod norm;

pub use act::{gated_gelu_tanh, gated_gelu_tanh_with, gelu_tanh, gelu_tanh_with, softmax_rows, softmax_rows_with};
pub use attention::{attention, attention_is_dense, attention_layout_with, attention_row_mask_with, attention_with, AttnLayout};
pub use epilogue::{bias_act_rows, bias_act_rows_with, group_norm, group_norm_with, Act, GroupNormShape};
pub use norm::{add_rms_norm, add_rms_norm_with, rms_norm, rms_norm_rope_neox, rms_norm_rope_neox_with, rms_norm_with, rope_neox, rope_neox_with};

use crate::elementwise::exp_v;
use crate::simd::Simd;

/// `e^x` on all lanes: the crate's SIMD polynomial, or `std` on the portable path (as
/// `unary_f32` does).
#[inline(always)]
unsafe fn exp_lanes<S: Simd>(x: S::V) -> S::V {
    if S::PORTABLE {
        let mut b = [0.0f32; 16];
        debug_assert!(S::LANES <= b.len());
        S::store(b.as_mut_ptr(), x);
        for v in &mut b[..S::LANES] {
            *v = v.exp();
        }
        S::load(b.as_ptr())
    } else {
        exp_v::<S>(x)
    }
}

/// `Σ x[i]²` over `n` elements, four vector accumulators.
#[inline(always)]
unsafe fn sum_sq<S: Simd>(x: *const f32, n: usize) -> f32 {
    let l = S::LANES;
    let mut acc = [S::zero(); 4];
    let mut i = 0;
    while i + 4 * l <= n {
        for (j, a) in acc.iter_mut().enumerate() {
            let v = S::load(x.add(i + j * l));
            *a = S::fma(v, v, *a);
        }
        i += 4 * l;
    }
    while i + l <= n {
        let v = S::load(x.add(i));
        acc[0] = S::fma(v, v, acc[0]);
        i += l;
    }
    if i < n {
        let v = S::load_tail(x.add(i), n - i);
        acc[1] = S::fma(v, v, acc[1]);
    }
    S::reduce_add(S::add(S::add(acc[0], acc[1]), S::add(acc[2], acc[3])))
}

/// `1 / sqrt(ss / n + eps)`, evaluated in f64 and rounded once.
#[inline(always)]
fn inv_rms(ss: f32, n: usize, eps: f32) -> f32 {
    (1.0 / (ss as f64 / n as f64 + eps as f64).sqrt()) as f32
}

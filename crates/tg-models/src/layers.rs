//! Layer builders shared by every model: norms, activations, RoPE, attention masks,
//! scaled-dot-product attention, gated feed-forward blocks, convolution blocks.
//!
//! Each builder is a free function over a [`GraphBuilder`] that writes the layer out in IR
//! primitives (no fused op): fusion is the e-graph's job, and its rules
//! (`tg-egraph/src/rules/fusion.rs`) match exactly these compositions — [`rms_norm`] becomes
//! `rms_norm` (or `add_rms_norm` after a residual add), [`rope_neox`] after [`rms_norm`]
//! becomes `rms_norm_rope_neox`, [`gelu_tanh`] times the up projection in [`gated_ffn`]
//! becomes `gated_gelu`, [`softmax`] becomes `softmax` and [`attention`] becomes the fused
//! attention op. Changing the order or the form of the primitives here changes what fuses
//! (and the plans of every model), so the unit tests below check both the values (against
//! formulas computed independently, in f64 through the reference interpreter) and, for the
//! builders a fusion rule targets, that the rule still fires.
//!
//! Conventions: activations are row-major with the feature axis last; a linear weight is
//! `[out, in]` (multiplied with `transpose_rhs`, as checkpoints store it); per-channel
//! tensors of convolution layers are `[C]` and broadcast over `[N, C, *spatial]`.
//!
//! The convolution builders are written as the ONNX importer writes exported CNNs, so the
//! `fusion.conv` and `fusion.group-norm` rules (`tg-egraph/src/rules/cnn.rs`) turn [`conv`]
//! with a bias into `conv_bias` and [`group_norm`] (with scale and shift) followed by
//! [`silu`] into one group norm with a SiLU epilogue.

use tg_ir::{BinaryOp, CmpOp, DType, GraphBuilder, IrError, ReduceOp, Tensor, UnaryOp, Window};

fn shape_err(op: &str, detail: String) -> IrError {
    IrError::Shape { op: op.into(), detail }
}

fn numel(b: &GraphBuilder, x: Tensor) -> usize {
    b.shape(x).iter().product()
}

/// The weight an RMSNorm multiplies by: `w + offset`, or `w` itself when `offset` is 0.
///
/// Gemma's Hugging Face checkpoints store `w₀` and normalise with `1 + w₀` (`offset = 1`);
/// GGUF conversion has already folded the 1 in (`offset = 0`). The fusion rule takes the
/// sum as the norm's weight, so both forms fuse.
pub fn norm_weight(b: &mut GraphBuilder, w: Tensor, offset: f64) -> Result<Tensor, IrError> {
    if offset == 0.0 {
        return Ok(w);
    }
    let one = b.scalar(offset)?;
    b.add(w, one)
}

/// RMSNorm over the last axis: `x · rsqrt(mean(x²) + eps) · w` (without `w` when `None`).
///
/// Fuses to `rms_norm` (with a weight), or `add_rms_norm` when `x` is a residual sum.
pub fn rms_norm(b: &mut GraphBuilder, x: Tensor, w: Option<Tensor>, eps: f64) -> Result<Tensor, IrError> {
    let sq = b.mul(x, x)?;
    let ms = b.reduce_last(ReduceOp::Mean, sq)?;
    let eps = b.scalar(eps)?;
    let ms = b.add(ms, eps)?;
    let r = b.unary(UnaryOp::Rsqrt, ms)?;
    let y = b.mul(x, r)?;
    match w {
        Some(w) => b.mul(y, w),
        None => Ok(y),
    }
}

/// `(x − mean(x)) · rsqrt(var(x) + eps)` over the last axis (the biased variance, as every
/// framework's layer and group norms compute it).
pub fn standardize_last(b: &mut GraphBuilder, x: Tensor, eps: f64) -> Result<Tensor, IrError> {
    let mean = b.reduce_last(ReduceOp::Mean, x)?;
    let d = b.sub(x, mean)?;
    let sq = b.mul(d, d)?;
    let var = b.reduce_last(ReduceOp::Mean, sq)?;
    let e = b.scalar(eps)?;
    let ve = b.add(var, e)?;
    let inv = b.unary(UnaryOp::Rsqrt, ve)?;
    b.mul(d, inv)
}

/// Layer norm over the last axis: `standardize(x) · scale + bias` (each optional, shaped
/// like the last axis). The same composition the ONNX importer writes for
/// `LayerNormalization`.
pub fn layer_norm(b: &mut GraphBuilder, x: Tensor, scale: Option<Tensor>, bias: Option<Tensor>, eps: f64) -> Result<Tensor, IrError> {
    let mut y = standardize_last(b, x, eps)?;
    if let Some(s) = scale {
        y = b.mul(y, s)?;
    }
    if let Some(c) = bias {
        y = b.add(y, c)?;
    }
    Ok(y)
}

/// A per-channel vector `[C]` shaped `[C, 1, …]` to broadcast over `[N, C, *spatial]` of
/// rank `rank`.
pub fn per_channel(b: &mut GraphBuilder, v: Tensor, rank: usize) -> Result<Tensor, IrError> {
    let c = numel(b, v);
    let mut s = vec![c];
    s.extend(std::iter::repeat_n(1, rank.saturating_sub(2)));
    b.reshape(v, &s)
}

/// Group norm of `x: [N, C, *spatial]`: each sample's `groups` groups of `C / groups`
/// channels are standardised over their channels and positions, then scaled and shifted
/// per channel (`scale`, `bias`: `[C]`, each optional). `groups = C` is instance norm. The
/// composition (reshape to `[N, groups, …]`, [`standardize_last`], reshape back) is the
/// one the ONNX importer writes for `GroupNormalization` and `InstanceNormalization`.
pub fn group_norm(b: &mut GraphBuilder, x: Tensor, groups: usize, scale: Option<Tensor>, bias: Option<Tensor>, eps: f64) -> Result<Tensor, IrError> {
    let xs = b.shape(x).to_vec();
    if xs.len() < 2 {
        return Err(shape_err("group_norm", format!("input {xs:?}: expected [N, C, ...]")));
    }
    let (n, c) = (xs[0], xs[1]);
    if groups == 0 || !c.is_multiple_of(groups) {
        return Err(shape_err("group_norm", format!("{groups} groups do not divide {c} channels")));
    }
    let per = xs[1..].iter().product::<usize>() / groups;
    let flat = b.reshape(x, &[n, groups, per])?;
    let normed = standardize_last(b, flat, eps)?;
    let mut y = b.reshape(normed, &xs)?;
    for (t, op) in [(scale, BinaryOp::Mul), (bias, BinaryOp::Add)] {
        if let Some(t) = t {
            if numel(b, t) != c {
                return Err(shape_err("group_norm", format!("a per-channel tensor of shape {:?} for {c} channels", b.shape(t))));
            }
            let t = per_channel(b, t, xs.len())?;
            y = b.binary(op, y, t)?;
        }
    }
    Ok(y)
}

/// GELU, tanh approximation: `0.5 · x · (1 + tanh(√(2/π) · (x + 0.044715 · x³)))`
/// (PyTorch's `gelu(approximate="tanh")`). Fuses to `gelu_tanh`.
pub fn gelu_tanh(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let x2 = b.mul(x, x)?;
    let x3 = b.mul(x2, x)?;
    let c3 = b.scale(x3, 0.044715)?;
    let inner = b.add(x, c3)?;
    let inner = b.scale(inner, (2.0 / std::f64::consts::PI).sqrt())?;
    let t = b.unary(UnaryOp::Tanh, inner)?;
    let one = b.scalar(1.0)?;
    let t1 = b.add(t, one)?;
    let hx = b.scale(x, 0.5)?;
    b.mul(hx, t1)
}

/// The logistic sigmoid `1 / (1 + e^−x)` (the IR's `sigmoid`, as the ONNX importer maps
/// `Sigmoid`).
pub fn sigmoid(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    b.unary(UnaryOp::Sigmoid, x)
}

/// SiLU (swish): `x · sigmoid(x)`. Fuses to `silu` (`fuse-silu`), and into a convolution's
/// or a group norm's epilogue after one.
pub fn silu(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let s = sigmoid(b, x)?;
    b.mul(x, s)
}

/// Softmax over the last axis, max-subtracted: `exp(x − max) / Σ exp(x − max)`. Fuses to
/// `softmax`.
pub fn softmax(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let m = b.reduce_last(ReduceOp::Max, x)?;
    let d = b.sub(x, m)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let s = b.reduce_last(ReduceOp::Sum, e)?;
    b.div(e, s)
}

/// `x / max(‖x‖₂, 1e-12)` over the last axis (as `torch.nn.functional.normalize`).
pub fn l2_normalize(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let sq = b.mul(x, x)?;
    let ss = b.reduce_last(ReduceOp::Sum, sq)?;
    let n = b.unary(UnaryOp::Sqrt, ss)?;
    let eps = b.scalar(1e-12)?;
    let n = b.binary(BinaryOp::Max, n, eps)?;
    b.div(x, n)
}

/// A linear layer `x · wᵀ (+ bias)`, `w: [out, in]`, `bias: [out]`.
pub fn linear(b: &mut GraphBuilder, x: Tensor, w: Tensor, bias: Option<Tensor>) -> Result<Tensor, IrError> {
    let y = b.matmul(x, w, true)?;
    match bias {
        Some(c) => b.add(y, c),
        None => Ok(y),
    }
}

/// RoPE cos and sin tables `[seq, 1, head_dim/2]` for positions `0..seq` (see
/// [`rope_tables_at`]).
pub fn rope_tables(b: &mut GraphBuilder, seq: usize, head_dim: usize, base: f64) -> Result<(Tensor, Tensor), IrError> {
    let pos = b.iota(&[seq, 1, 1], 0, DType::F32)?;
    rope_tables_at(b, pos, head_dim, base)
}

/// RoPE cos and sin tables `[seq, 1, head_dim/2]` at the f32 positions `pos: [seq, 1, 1]`:
/// the angle of pair `i` at position `p` is `p · base^(−2i/head_dim)`.
pub fn rope_tables_at(b: &mut GraphBuilder, pos: Tensor, head_dim: usize, base: f64) -> Result<(Tensor, Tensor), IrError> {
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(shape_err("rope", format!("head dim {head_dim} is not a positive even number")));
    }
    let half = head_dim / 2;
    let i = b.iota(&[half], 0, DType::F32)?;
    // inv_freq[i] = base^(-2i/d) = exp(i · (-2 ln(base) / d))
    let e = b.scale(i, -2.0 * base.ln() / head_dim as f64)?;
    let inv_freq = b.unary(UnaryOp::Exp, e)?;
    let ang = b.mul(pos, inv_freq)?; // [seq, 1, half]
    Ok((b.unary(UnaryOp::Cos, ang)?, b.unary(UnaryOp::Sin, ang)?))
}

/// `a · x + c`.
fn affine(b: &mut GraphBuilder, x: Tensor, a: f64, c: f64) -> Result<Tensor, IrError> {
    let y = b.scale(x, a)?;
    let c = b.scalar(c)?;
    b.add(y, c)
}

/// How a model stretches RoPE to contexts longer than it was trained on (what a GGUF file
/// declares in `rope.scaling.*`, or the `rope_freqs` tensor of Llama 3.1+).
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum RopeScaling {
    /// Angles as trained.
    None,
    /// Position interpolation: every angle divided by `factor`.
    Linear {
        /// The context multiple.
        factor: f64,
    },
    /// YaRN: low frequencies interpolated by `factor`, high ones kept, a linear ramp between
    /// the dimensions whose wavelengths fit `beta_fast` and `beta_slow` turns of the original
    /// context; cos and sin scaled by `attn_factor · (1 + 0.1 ln factor)`.
    Yarn {
        /// The context multiple.
        factor: f64,
        /// The context length trained on.
        original_context: f64,
        /// Weight of the ramp (1: full YaRN; 0: plain interpolation).
        ext_factor: f64,
        /// Extra magnitude scale.
        attn_factor: f64,
        /// Turns of the original context below which a dimension is kept.
        beta_fast: f64,
        /// Turns above which it is interpolated.
        beta_slow: f64,
    },
}

/// RoPE cos and sin tables `[seq, 1, head_dim/2]` for positions `0..seq` with `scaling`;
/// `freq_factors` (`[head_dim/2]`, Llama 3's `rope_freqs`) divides each pair's frequency.
/// Without either it is [`rope_tables`].
pub fn rope_tables_scaled(b: &mut GraphBuilder, seq: usize, head_dim: usize, base: f64, scaling: RopeScaling, freq_factors: Option<Tensor>) -> Result<(Tensor, Tensor), IrError> {
    if scaling == RopeScaling::None && freq_factors.is_none() {
        return rope_tables(b, seq, head_dim, base);
    }
    if head_dim == 0 || !head_dim.is_multiple_of(2) {
        return Err(shape_err("rope", format!("head dim {head_dim} is not a positive even number")));
    }
    let pos = b.iota(&[seq, 1, 1], 0, DType::F32)?;
    let half = head_dim / 2;
    let i = b.iota(&[half], 0, DType::F32)?;
    let e = b.scale(i, -2.0 * base.ln() / head_dim as f64)?;
    let mut inv_freq = b.unary(UnaryOp::Exp, e)?;
    if let Some(f) = freq_factors {
        inv_freq = b.div(inv_freq, f)?;
    }
    let mut mscale = 1.0;
    match scaling {
        RopeScaling::None => {}
        RopeScaling::Linear { factor } => inv_freq = b.scale(inv_freq, 1.0 / factor)?,
        RopeScaling::Yarn { factor, original_context, ext_factor, attn_factor, beta_fast, beta_slow } => {
            // The dimension whose wavelength makes `turns` turns over the original context.
            let corr = |turns: f64| head_dim as f64 * (original_context / (turns * 2.0 * std::f64::consts::PI)).ln() / (2.0 * base.ln());
            let low = corr(beta_fast).floor().max(0.0);
            let high = corr(beta_slow).ceil().min(head_dim as f64 - 1.0);
            // ramp[i] = 1 − clamp((i − low) / (high − low), 0, 1), times ext_factor: the share
            // of the unscaled (extrapolated) frequency in the mix.
            let r = b.iota(&[half], 0, DType::F32)?;
            let r = affine(b, r, 1.0 / (high - low).max(0.001), -low / (high - low).max(0.001))?;
            let zero = b.scalar(0.0)?;
            let one = b.scalar(1.0)?;
            let r = b.binary(BinaryOp::Max, r, zero)?;
            let r = b.binary(BinaryOp::Min, r, one)?;
            let mix = affine(b, r, -ext_factor, ext_factor)?;
            // frequency × (1/factor · (1 − mix) + mix)
            let k = affine(b, mix, 1.0 - 1.0 / factor, 1.0 / factor)?;
            inv_freq = b.mul(inv_freq, k)?;
            mscale = attn_factor * if ext_factor != 0.0 { 1.0 + 0.1 * factor.ln() } else { 1.0 };
        }
    }
    let ang = b.mul(pos, inv_freq)?;
    let (mut cos, mut sin) = (b.unary(UnaryOp::Cos, ang)?, b.unary(UnaryOp::Sin, ang)?);
    if mscale != 1.0 {
        cos = b.scale(cos, mscale)?;
        sin = b.scale(sin, mscale)?;
    }
    Ok((cos, sin))
}

/// Reorders each head of `x: [seq, heads, head_dim]` from interleaved pairs
/// `(x₀, x₁), (x₂, x₃), …` (the original RoPE layout, llama.cpp's `NORM` rope) to halves
/// `x₀, x₂, … | x₁, x₃, …`, so [`rope_neox`] rotates the same pairs. Queries and keys
/// reordered alike give the same attention scores, so the result needs no reordering back.
pub fn deinterleave_pairs(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let shape = b.shape(x).to_vec();
    let Some((&hd, outer)) = shape.split_last() else {
        return Err(shape_err("rope", "a scalar has no head axis".into()));
    };
    if !hd.is_multiple_of(2) {
        return Err(shape_err("rope", format!("head dim {hd} is odd")));
    }
    let mut split = outer.to_vec();
    split.extend([hd / 2, 2]);
    let y = b.reshape(x, &split)?;
    let r = split.len();
    let mut perm: Vec<usize> = (0..r).collect();
    perm.swap(r - 1, r - 2);
    let y = b.permute(y, &perm)?;
    b.reshape(y, &shape)
}

/// NeoX-style RoPE of `x: [seq, heads, head_dim]` (any rank, head dim last): the first and
/// second halves of each head are the two coordinates of each rotated pair,
/// `(x₁ cos − x₂ sin, x₂ cos + x₁ sin)`. Fuses to `rope_neox` (`rms_norm_rope_neox` after an
/// [`rms_norm`]).
pub fn rope_neox(b: &mut GraphBuilder, x: Tensor, cos: Tensor, sin: Tensor) -> Result<Tensor, IrError> {
    let shape = b.shape(x).to_vec();
    let (Some(&hd), axis) = (shape.last(), shape.len().saturating_sub(1)) else {
        return Err(shape_err("rope", "a scalar has no head axis".into()));
    };
    let x1 = b.slice(x, axis, 0, hd / 2)?;
    let x2 = b.slice(x, axis, hd / 2, hd)?;
    let a = b.mul(x1, cos)?;
    let c = b.mul(x2, sin)?;
    let o1 = b.sub(a, c)?;
    let a = b.mul(x2, cos)?;
    let c = b.mul(x1, sin)?;
    let o2 = b.add(a, c)?;
    b.concat(&[o1, o2], axis)
}

/// `0` where `allowed`, `−∞` elsewhere: an additive attention mask.
fn additive(b: &mut GraphBuilder, allowed: Tensor) -> Result<Tensor, IrError> {
    let zero = b.scalar(0.0)?;
    let ninf = b.scalar(f64::NEG_INFINITY)?;
    b.select(allowed, zero, ninf)
}

/// Causal additive mask `[seq, seq]`: 0 where key `j` is visible from query `i` (`j ≤ i`,
/// and `i − j < window` when `window` is set: a sliding window), −∞ elsewhere.
pub fn causal_mask(b: &mut GraphBuilder, seq: usize, window: Option<usize>) -> Result<Tensor, IrError> {
    let i = b.iota(&[seq, seq], 0, DType::I32)?;
    let j = b.iota(&[seq, seq], 1, DType::I32)?;
    let mut allowed = b.compare(CmpOp::Le, j, i)?;
    if let Some(w) = window {
        let d = b.sub(i, j)?;
        let wc = b.constant(w as f64, DType::I32)?;
        let near = b.compare(CmpOp::Lt, d, wc)?;
        allowed = b.binary(BinaryOp::And, allowed, near)?;
    }
    additive(b, allowed)
}

/// Additive mask `[seq, seq]` for bidirectional attention over packed sequences: key `j`
/// is visible from query `i` when both belong to the same sequence (`segments`, i32
/// `[seq]`) and, when `window` is set, `|pos_i − pos_j| < window` (`positions`, i32
/// `[seq]`). Everything else is −∞.
pub fn segment_mask(b: &mut GraphBuilder, segments: Tensor, positions: Tensor, seq: usize, window: Option<usize>) -> Result<Tensor, IrError> {
    let si = b.reshape(segments, &[seq, 1])?;
    let sj = b.reshape(segments, &[1, seq])?;
    let mut allowed = b.compare(CmpOp::Eq, si, sj)?;
    if let Some(w) = window {
        let pi = b.reshape(positions, &[seq, 1])?;
        let pj = b.reshape(positions, &[1, seq])?;
        let d = b.sub(pi, pj)?;
        let hi = b.constant(w as f64, DType::I32)?;
        let lo = b.constant(-(w as f64), DType::I32)?;
        let below = b.compare(CmpOp::Lt, d, hi)?;
        let above = b.compare(CmpOp::Gt, d, lo)?;
        let near = b.binary(BinaryOp::And, below, above)?;
        allowed = b.binary(BinaryOp::And, allowed, near)?;
    }
    additive(b, allowed)
}

/// The head layout of an attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Heads {
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads; each is shared by `n_head / n_head_kv` query heads (grouped-query
    /// attention; `n_head_kv = n_head` is multi-head attention, 1 is multi-query).
    pub n_head_kv: usize,
    /// Width of each head.
    pub head_dim: usize,
}

/// Scaled-dot-product attention with grouped-query heads:
/// `softmax(scale · q·kᵀ + mask) · v`, per head.
///
/// `q` holds `seq_q · n_head · head_dim` values position-major (`[seq_q, n_head, head_dim]`
/// or `[seq_q, n_head · head_dim]`), `k` and `v` `seq_kv · n_head_kv · head_dim`; query head
/// `h = kv · g + i` (`g = n_head / n_head_kv`) reads kv head `kv`. `mask` is additive and
/// broadcasts over `[n_head_kv, g, seq_q, seq_kv]` (a `[seq_q, seq_kv]` mask from
/// [`causal_mask`] or [`segment_mask`]). Returns `[seq_q, n_head · head_dim]`.
///
/// Written as Gemma writes it (scale on the queries; heads grouped as
/// `[n_head_kv, g, seq, head_dim]`), which the `fuse-attention` rules turn into one
/// position-major fused attention op with no transposing copies.
pub fn attention(b: &mut GraphBuilder, q: Tensor, k: Tensor, v: Tensor, mask: Option<Tensor>, heads: Heads, scale: f64) -> Result<Tensor, IrError> {
    let Heads { n_head: nh, n_head_kv: nkv, head_dim: hd } = heads;
    if nh == 0 || nkv == 0 || hd == 0 || !nh.is_multiple_of(nkv) {
        return Err(shape_err("attention", format!("{nh} query heads, {nkv} kv heads, head dim {hd}")));
    }
    let g = nh / nkv;
    let (nq, nk, nv) = (numel(b, q), numel(b, k), numel(b, v));
    if !nq.is_multiple_of(nh * hd) || !nk.is_multiple_of(nkv * hd) || nk != nv {
        return Err(shape_err("attention", format!("q {:?}, k {:?}, v {:?} for {nh}/{nkv} heads of {hd}", b.shape(q), b.shape(k), b.shape(v))));
    }
    let (sq, skv) = (nq / (nh * hd), nk / (nkv * hd));
    let q = b.scale(q, scale)?;
    let q = b.reshape(q, &[sq, nkv, g, hd])?;
    let q = b.permute(q, &[1, 2, 0, 3])?; // [nkv, g, seq_q, hd]
    let k = b.reshape(k, &[skv, nkv, 1, hd])?;
    let k = b.permute(k, &[1, 2, 0, 3])?; // [nkv, 1, seq_kv, hd]
    let v = b.reshape(v, &[skv, nkv, 1, hd])?;
    let v = b.permute(v, &[1, 2, 0, 3])?; // [nkv, 1, seq_kv, hd]
    let mut s = b.matmul(q, k, true)?; // [nkv, g, seq_q, seq_kv]
    if let Some(m) = mask {
        s = b.add(s, m)?;
    }
    let pr = softmax(b, s)?;
    let o = b.matmul(pr, v, false)?; // [nkv, g, seq_q, hd]
    let o = b.permute(o, &[2, 0, 1, 3])?; // [seq_q, nkv, g, hd]
    b.reshape(o, &[sq, nh * hd])
}

/// The gate activation of a [`gated_ffn`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Gate {
    /// [`gelu_tanh`] (Gemma's GeGLU); the block fuses to `gated_gelu`.
    GeluTanh,
    /// [`silu`] (Llama's SwiGLU).
    Silu,
}

/// Gated feed-forward block: `down(act(x · gateᵀ) · (x · upᵀ))` with `gate`, `up`:
/// `[ff, d]` and `down`: `[d, ff]`.
pub fn gated_ffn(b: &mut GraphBuilder, x: Tensor, gate: Tensor, up: Tensor, down: Tensor, act: Gate) -> Result<Tensor, IrError> {
    let g = b.matmul(x, gate, true)?;
    let u = b.matmul(x, up, true)?;
    let a = match act {
        Gate::GeluTanh => gelu_tanh(b, g)?,
        Gate::Silu => silu(b, g)?,
    };
    let m = b.mul(a, u)?;
    b.matmul(m, down, true)
}

/// Convolution of `x: [N, C, *spatial]` with `w: [M, C / groups, *window.size]`, plus a
/// per-channel `bias: [M]` (as the ONNX importer writes `Conv` with a bias).
pub fn conv(b: &mut GraphBuilder, x: Tensor, w: Tensor, bias: Option<Tensor>, window: Window, groups: usize) -> Result<Tensor, IrError> {
    let y = b.conv(x, w, window, groups)?;
    match bias {
        Some(c) => {
            let r = b.shape(y).len();
            let c = per_channel(b, c, r)?;
            b.add(y, c)
        }
        None => Ok(y),
    }
}

/// The weights of a [`conv_block`].
#[derive(Debug, Clone, Copy)]
pub struct ConvBlockWeights {
    /// Convolution kernel `[M, C / groups, *window]`.
    pub w: Tensor,
    /// Convolution bias `[M]`.
    pub bias: Option<Tensor>,
    /// Group-norm scale `[M]`.
    pub norm_scale: Option<Tensor>,
    /// Group-norm shift `[M]`.
    pub norm_bias: Option<Tensor>,
}

/// The convolution block of UNets and audio encoders: [`conv`] (with bias), [`group_norm`]
/// over `norm_groups` groups, then [`silu`].
pub fn conv_block(b: &mut GraphBuilder, x: Tensor, p: ConvBlockWeights, window: Window, groups: usize, norm_groups: usize, eps: f64) -> Result<Tensor, IrError> {
    let y = conv(b, x, p.w, p.bias, window, groups)?;
    let y = group_norm(b, y, norm_groups, p.norm_scale, p.norm_bias, eps)?;
    silu(b, y)
}

#[cfg(test)]
mod tests {
    //! Every builder against a formula written independently here (f64), through the
    //! reference interpreter, on seeded random inputs; and the builders a fusion rule
    //! targets, compiled, with the fused op in the plan.
    use super::*;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;
    use std::collections::HashMap;
    use tg_ir::HostTensor;

    const SEED: u64 = 20250;

    /// A graph with f32 inputs of the given shapes (random values, seeded), its output `y`
    /// built by `f`; returns the interpreter's output and the inputs.
    fn eval(shapes: &[(&str, Vec<usize>)], seed: u64, f: impl FnOnce(&mut GraphBuilder, &[Tensor]) -> Result<Tensor, IrError>) -> (tg_ir::interp::Array, Vec<Vec<f64>>) {
        eprintln!("layers test: seed {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut b = GraphBuilder::new();
        let mut ts = Vec::new();
        let mut feed = HashMap::new();
        let mut vals = Vec::new();
        for (name, s) in shapes {
            ts.push(b.input(name, s, DType::F32).unwrap());
            let v: Vec<f32> = (0..s.iter().product::<usize>()).map(|_| rng.gen_range(-2.0f32..2.0)).collect();
            vals.push(v.iter().map(|&x| x as f64).collect());
            feed.insert(name.to_string(), HostTensor::f32(s, v).unwrap());
        }
        let y = f(&mut b, &ts).unwrap();
        b.output("y", y).unwrap();
        let g = b.finish().unwrap();
        let weights: HashMap<String, Vec<u8>> = HashMap::new();
        let mut out = tg_ir::interp::eval(&g, &feed, &weights).unwrap();
        (out.remove("y").unwrap(), vals)
    }

    fn close(got: &[f64], want: &[f64], tol: f64, what: &str) {
        assert_eq!(got.len(), want.len(), "{what}: length");
        for (i, (g, w)) in got.iter().zip(want).enumerate() {
            assert!((g - w).abs() <= tol * (1.0 + w.abs()), "{what}[{i}]: got {g}, want {w} (seed {SEED})");
        }
    }

    /// Rows of the last axis.
    fn rows(v: &[f64], width: usize) -> impl Iterator<Item = &[f64]> {
        v.chunks(width)
    }

    #[test]
    fn rms_norm_and_gemma_offset() {
        let (y, v) = eval(&[("x", vec![3, 8]), ("w", vec![8])], SEED, |b, t| {
            let w = norm_weight(b, t[1], 1.0)?;
            rms_norm(b, t[0], Some(w), 1e-6)
        });
        let mut want = Vec::new();
        for r in rows(&v[0], 8) {
            let ms = r.iter().map(|x| x * x).sum::<f64>() / 8.0;
            want.extend(r.iter().zip(&v[1]).map(|(x, w)| x / (ms + 1e-6).sqrt() * (1.0 + w)));
        }
        close(&y.data, &want, 1e-6, "rms_norm");
        let (y, v) = eval(&[("x", vec![2, 5])], SEED + 1, |b, t| rms_norm(b, t[0], None, 1e-5));
        let want: Vec<f64> = rows(&v[0], 5)
            .flat_map(|r| {
                let ms = r.iter().map(|x| x * x).sum::<f64>() / 5.0;
                r.iter().map(move |x| x / (ms + 1e-5).sqrt()).collect::<Vec<_>>()
            })
            .collect();
        close(&y.data, &want, 1e-6, "rms_norm without weight");
    }

    fn standardized(r: &[f64], eps: f64) -> Vec<f64> {
        let n = r.len() as f64;
        let m = r.iter().sum::<f64>() / n;
        let var = r.iter().map(|x| (x - m) * (x - m)).sum::<f64>() / n;
        r.iter().map(|x| (x - m) / (var + eps).sqrt()).collect()
    }

    #[test]
    fn layer_norm_matches_the_formula() {
        let (y, v) = eval(&[("x", vec![4, 6]), ("s", vec![6]), ("c", vec![6])], SEED + 2, |b, t| layer_norm(b, t[0], Some(t[1]), Some(t[2]), 1e-5));
        let want: Vec<f64> = rows(&v[0], 6).flat_map(|r| standardized(r, 1e-5).into_iter().enumerate().map(|(i, z)| z * v[1][i] + v[2][i]).collect::<Vec<_>>()).collect();
        close(&y.data, &want, 1e-6, "layer_norm");
    }

    #[test]
    fn group_norm_matches_the_formula() {
        // [N=2, C=6, 3, 2], 3 groups of 2 channels.
        let (n, c, s, groups) = (2, 6, 6, 3);
        let (y, v) = eval(&[("x", vec![n, c, 3, 2]), ("s", vec![c]), ("c", vec![c])], SEED + 3, |b, t| group_norm(b, t[0], groups, Some(t[1]), Some(t[2]), 1e-5));
        let mut want = vec![0.0; n * c * s];
        let per = c / groups * s;
        for (gi, chunk) in v[0].chunks(per).enumerate() {
            for (j, z) in standardized(chunk, 1e-5).into_iter().enumerate() {
                let flat = gi * per + j;
                let ch = (flat / s) % c;
                want[flat] = z * v[1][ch] + v[2][ch];
            }
        }
        close(&y.data, &want, 1e-6, "group_norm");
        let mut b = GraphBuilder::new();
        let x = b.input("x", &[1, 6, 2], DType::F32).unwrap();
        assert!(group_norm(&mut b, x, 4, None, None, 1e-5).is_err(), "4 groups of 6 channels");
    }

    #[test]
    fn activations_match_their_formulas() {
        let (y, v) = eval(&[("x", vec![40])], SEED + 4, |b, t| gelu_tanh(b, t[0]));
        let want: Vec<f64> = v[0].iter().map(|&x| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())).collect();
        close(&y.data, &want, 1e-9, "gelu_tanh");
        let (y, v) = eval(&[("x", vec![40])], SEED + 5, |b, t| silu(b, t[0]));
        let want: Vec<f64> = v[0].iter().map(|&x| x / (1.0 + (-x).exp())).collect();
        close(&y.data, &want, 1e-9, "silu");
        let (y, v) = eval(&[("x", vec![40])], SEED + 6, |b, t| sigmoid(b, t[0]));
        let want: Vec<f64> = v[0].iter().map(|&x| 1.0 / (1.0 + (-x).exp())).collect();
        close(&y.data, &want, 1e-9, "sigmoid");
    }

    #[test]
    fn softmax_l2_and_linear_match_their_formulas() {
        let (y, v) = eval(&[("x", vec![3, 7])], SEED + 7, |b, t| softmax(b, t[0]));
        let want: Vec<f64> = rows(&v[0], 7)
            .flat_map(|r| {
                let z: f64 = r.iter().map(|x| x.exp()).sum();
                r.iter().map(move |x| x.exp() / z).collect::<Vec<_>>()
            })
            .collect();
        close(&y.data, &want, 1e-9, "softmax");
        let (y, v) = eval(&[("x", vec![3, 5])], SEED + 8, |b, t| l2_normalize(b, t[0]));
        let want: Vec<f64> = rows(&v[0], 5)
            .flat_map(|r| {
                let n = r.iter().map(|x| x * x).sum::<f64>().sqrt();
                r.iter().map(move |x| x / n).collect::<Vec<_>>()
            })
            .collect();
        close(&y.data, &want, 1e-9, "l2_normalize");
        let (y, v) = eval(&[("x", vec![2, 3]), ("w", vec![4, 3]), ("c", vec![4])], SEED + 9, |b, t| linear(b, t[0], t[1], Some(t[2])));
        let mut want = Vec::new();
        for r in rows(&v[0], 3) {
            for o in 0..4 {
                want.push((0..3).map(|i| r[i] * v[1][o * 3 + i]).sum::<f64>() + v[2][o]);
            }
        }
        close(&y.data, &want, 1e-9, "linear");
    }

    #[test]
    fn rope_rotates_pairs_by_position() {
        let (seq, heads, hd, base) = (5, 2, 8, 10_000.0);
        let (y, v) = eval(&[("x", vec![seq, heads, hd])], SEED + 10, |b, t| {
            let (cos, sin) = rope_tables(b, seq, hd, base)?;
            rope_neox(b, t[0], cos, sin)
        });
        let mut want = vec![0.0; seq * heads * hd];
        for p in 0..seq {
            for h in 0..heads {
                let o = (p * heads + h) * hd;
                for i in 0..hd / 2 {
                    let ang = p as f64 * base.powf(-2.0 * i as f64 / hd as f64);
                    let (x1, x2) = (v[0][o + i], v[0][o + i + hd / 2]);
                    want[o + i] = x1 * ang.cos() - x2 * ang.sin();
                    want[o + i + hd / 2] = x2 * ang.cos() + x1 * ang.sin();
                }
            }
        }
        close(&y.data, &want, 1e-5, "rope_neox");
    }

    fn mask_values(f: impl FnOnce(&mut GraphBuilder) -> Result<Tensor, IrError>) -> Vec<f64> {
        let mut b = GraphBuilder::new();
        let m = f(&mut b).unwrap();
        b.output("m", m).unwrap();
        let g = b.finish().unwrap();
        let seg = HostTensor::i32(&[5], vec![0, 0, 0, 1, 1]).unwrap();
        let pos = HostTensor::i32(&[5], vec![0, 1, 2, 0, 1]).unwrap();
        let mut feed = HashMap::new();
        if g.inputs().iter().any(|(n, _)| n == "seg") {
            feed.insert("seg".to_string(), seg);
            feed.insert("pos".to_string(), pos);
        }
        let w: HashMap<String, Vec<u8>> = HashMap::new();
        tg_ir::interp::eval(&g, &feed, &w).unwrap().remove("m").unwrap().data
    }

    #[test]
    fn masks_allow_what_they_say() {
        let open = |v: &[f64], i: usize, j: usize| v[i * 5 + j] == 0.0;
        let causal = mask_values(|b| causal_mask(b, 5, None));
        let window = mask_values(|b| causal_mask(b, 5, Some(2)));
        let segments = mask_values(|b| {
            let s = b.input("seg", &[5], DType::I32)?;
            let p = b.input("pos", &[5], DType::I32)?;
            segment_mask(b, s, p, 5, None)
        });
        let seg_window = mask_values(|b| {
            let s = b.input("seg", &[5], DType::I32)?;
            let p = b.input("pos", &[5], DType::I32)?;
            segment_mask(b, s, p, 5, Some(2))
        });
        let (segs, pos) = ([0, 0, 0, 1, 1], [0i32, 1, 2, 0, 1]);
        for i in 0..5 {
            for j in 0..5 {
                assert_eq!(open(&causal, i, j), j <= i, "causal ({i}, {j})");
                assert_eq!(open(&window, i, j), j <= i && i - j < 2, "window ({i}, {j})");
                assert_eq!(open(&segments, i, j), segs[i] == segs[j], "segments ({i}, {j})");
                assert_eq!(open(&seg_window, i, j), segs[i] == segs[j] && (pos[i] - pos[j]).abs() < 2, "segment window ({i}, {j})");
            }
        }
        assert!(causal.iter().all(|&x| x == 0.0 || x == f64::NEG_INFINITY));
    }

    #[test]
    fn grouped_query_attention_matches_the_formula() {
        let heads = Heads { n_head: 4, n_head_kv: 2, head_dim: 3 };
        let (sq, scale) = (4, 0.7);
        let (y, v) = eval(&[("q", vec![sq, 4, 3]), ("k", vec![sq, 2, 3]), ("v", vec![sq, 6])], SEED + 11, |b, t| {
            let m = causal_mask(b, sq, None)?;
            attention(b, t[0], t[1], t[2], Some(m), heads, scale)
        });
        let (q, k, vv) = (&v[0], &v[1], &v[2]);
        let mut want = vec![0.0; sq * 4 * 3];
        for h in 0..4 {
            let kv = h / 2;
            for i in 0..sq {
                let s: Vec<f64> = (0..=i).map(|j| scale * (0..3).map(|d| q[(i * 4 + h) * 3 + d] * k[(j * 2 + kv) * 3 + d]).sum::<f64>()).collect();
                let mx = s.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let z: f64 = s.iter().map(|x| (x - mx).exp()).sum();
                for d in 0..3 {
                    want[(i * 4 + h) * 3 + d] = (0..=i).map(|j| (s[j] - mx).exp() / z * vv[j * 6 + kv * 3 + d]).sum();
                }
            }
        }
        assert_eq!(y.shape, vec![sq, 12]);
        close(&y.data, &want, 1e-9, "attention");
        let mut b = GraphBuilder::new();
        let q = b.input("q", &[2, 3, 4], DType::F32).unwrap();
        assert!(attention(&mut b, q, q, q, None, Heads { n_head: 3, n_head_kv: 2, head_dim: 4 }, 1.0).is_err(), "3 query heads over 2 kv heads");
    }

    #[test]
    fn gated_ffn_matches_the_formula() {
        for (act, seed) in [(Gate::GeluTanh, SEED + 12), (Gate::Silu, SEED + 13)] {
            let (d, ff) = (4, 6);
            let (y, v) = eval(&[("x", vec![2, d]), ("g", vec![ff, d]), ("u", vec![ff, d]), ("w", vec![d, ff])], seed, |b, t| gated_ffn(b, t[0], t[1], t[2], t[3], act));
            let f = |x: f64| match act {
                Gate::GeluTanh => 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh()),
                Gate::Silu => x / (1.0 + (-x).exp()),
            };
            let mut want = Vec::new();
            for r in rows(&v[0], d) {
                let h: Vec<f64> = (0..ff).map(|o| f((0..d).map(|i| r[i] * v[1][o * d + i]).sum()) * (0..d).map(|i| r[i] * v[2][o * d + i]).sum::<f64>()).collect();
                want.extend((0..d).map(|o| (0..ff).map(|i| h[i] * v[3][o * ff + i]).sum::<f64>()));
            }
            close(&y.data, &want, 1e-9, &format!("gated_ffn {act:?}"));
        }
    }

    #[test]
    fn conv_block_matches_the_formula() {
        // x [1, 2, 4, 4], w [4, 2, 3, 3], padding 1: output [1, 4, 4, 4]; 2 norm groups.
        let mut window = Window::new(vec![3, 3]);
        window.pad_begin = vec![1, 1];
        window.pad_end = vec![1, 1];
        let win = window.clone();
        let (y, v) = eval(&[("x", vec![1, 2, 4, 4]), ("w", vec![4, 2, 3, 3]), ("c", vec![4]), ("s", vec![4]), ("t", vec![4])], SEED + 14, |b, t| {
            conv_block(b, t[0], ConvBlockWeights { w: t[1], bias: Some(t[2]), norm_scale: Some(t[3]), norm_bias: Some(t[4]) }, win, 1, 2, 1e-5)
        });
        let (x, w) = (&v[0], &v[1]);
        let mut conv = vec![0.0; 4 * 16];
        for m in 0..4 {
            for oy in 0..4i64 {
                for ox in 0..4i64 {
                    let mut acc = v[2][m];
                    for c in 0..2 {
                        for ky in 0..3i64 {
                            for kx in 0..3i64 {
                                let (iy, ix) = (oy + ky - 1, ox + kx - 1);
                                if (0..4).contains(&iy) && (0..4).contains(&ix) {
                                    acc += x[c * 16 + (iy * 4 + ix) as usize] * w[((m * 2 + c) * 3 + ky as usize) * 3 + kx as usize];
                                }
                            }
                        }
                    }
                    conv[m * 16 + (oy * 4 + ox) as usize] = acc;
                }
            }
        }
        let mut want = Vec::new();
        for (gi, chunk) in conv.chunks(32).enumerate() {
            for (j, z) in standardized(chunk, 1e-5).into_iter().enumerate() {
                let ch = gi * 2 + j / 16;
                let u = z * v[3][ch] + v[4][ch];
                want.push(u / (1.0 + (-u).exp()));
            }
        }
        assert_eq!(y.shape, vec![1, 4, 4, 4]);
        close(&y.data, &want, 1e-9, "conv_block");
    }

    type Counts = std::collections::BTreeMap<String, usize>;

    /// What the rewrite did to a small graph built by `f`: its fused ops and the rules
    /// applied (by name).
    fn rewrite(shapes: &[(&str, Vec<usize>)], f: impl FnOnce(&mut GraphBuilder, &[Tensor]) -> Result<Tensor, IrError>) -> (Counts, Counts) {
        let mut b = GraphBuilder::new();
        let ts: Vec<Tensor> = shapes.iter().map(|(n, s)| b.input(n, s, DType::F32).unwrap()).collect();
        let y = f(&mut b, &ts).unwrap();
        b.output("y", y).unwrap();
        let g = b.finish().unwrap();
        let dev: std::sync::Arc<dyn tg_runtime::Device> = std::sync::Arc::new(tg_runtime::CpuDevice::new(1).unwrap());
        let c = tg_compiler::compile(&g, &[dev], &tg_compiler::CompileOptions::default()).unwrap();
        let r = c.report.rewrite.expect("the rewrite stage ran");
        (r.fused, r.saturation.applications)
    }

    fn fused(shapes: &[(&str, Vec<usize>)], f: impl FnOnce(&mut GraphBuilder, &[Tensor]) -> Result<Tensor, IrError>) -> Counts {
        rewrite(shapes, f).0
    }

    #[test]
    fn the_fusion_rules_still_match_the_builders() {
        let f = fused(&[("x", vec![4, 64]), ("w", vec![64])], |b, t| rms_norm(b, t[0], Some(t[1]), 1e-6));
        assert_eq!(f.get("rms_norm"), Some(&1), "{f:?}");
        let f = fused(&[("x", vec![4, 64]), ("g", vec![128, 64]), ("u", vec![128, 64]), ("d", vec![64, 128])], |b, t| gated_ffn(b, t[0], t[1], t[2], t[3], Gate::GeluTanh));
        assert_eq!(f.get("gated_gelu"), Some(&1), "{f:?}");
        let f = fused(&[("x", vec![4, 2, 64]), ("w", vec![64])], |b, t| {
            let y = rms_norm(b, t[0], Some(t[1]), 1e-6)?;
            let (cos, sin) = rope_tables(b, 4, 64, 10_000.0)?;
            rope_neox(b, y, cos, sin)
        });
        assert_eq!(f.get("rms_norm_rope_neox"), Some(&1), "{f:?}");
        let heads = Heads { n_head: 4, n_head_kv: 2, head_dim: 64 };
        let f = fused(&[("q", vec![8, 4, 64]), ("k", vec![8, 2, 64]), ("v", vec![8, 128])], |b, t| {
            let m = causal_mask(b, 8, None)?;
            attention(b, t[0], t[1], t[2], Some(m), heads, 0.125)
        });
        assert!(f.keys().any(|k| k.starts_with("attention")), "{f:?}");
        let f = fused(&[("x", vec![1, 8, 6, 6]), ("s", vec![8]), ("c", vec![8])], |b, t| {
            let y = group_norm(b, t[0], 4, Some(t[1]), Some(t[2]), 1e-5)?;
            silu(b, y)
        });
        assert!(f.keys().any(|k| k.starts_with("group_norm") && k.contains("silu")), "{f:?}");
        let mut window = Window::new(vec![3, 3]);
        window.pad_begin = vec![1, 1];
        window.pad_end = vec![1, 1];
        let f = fused(&[("x", vec![1, 4, 8, 8]), ("w", vec![8, 4, 3, 3]), ("c", vec![8]), ("s", vec![8]), ("t", vec![8])], |b, t| {
            conv_block(b, t[0], ConvBlockWeights { w: t[1], bias: Some(t[2]), norm_scale: Some(t[3]), norm_bias: Some(t[4]) }, window, 1, 4, 1e-5)
        });
        assert!(f.keys().any(|k| k.starts_with("conv_bias")), "{f:?}");
        assert!(f.keys().any(|k| k.starts_with("group_norm") && k.contains("silu")), "{f:?}");
        let (_, applied) = rewrite(&[("x", vec![4, 16])], |b, t| silu(b, t[0]));
        assert!(applied.get("fuse-silu").is_some_and(|&n| n > 0), "{applied:?}");
    }
}

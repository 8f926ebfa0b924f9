//! Fusion of what exported CNNs repeat: the sigmoid and SiLU activations, a convolution's
//! bias and activation, and group normalisation (as exporters write it: reshape → instance
//! normalisation → reshape → scale and shift) with the activation after it. Each rule
//! matches the composition its target is defined as (`tg_ir::Op::ConvBias`,
//! `tg_ir::Op::GroupNorm`, `tg_ir::UnaryOp::{Sigmoid, Silu}`), and the fused ops are only
//! added where a device's registry accepts them ([`kernel_accepts`]).

use super::{add, add_op, approx, binary, data, has_binary, nodes_where, rule, same, scalar_f32, shape, unary, Rule};
use crate::{ENode, TEGraph};
use egg::Id;
use tg_ir::{Act, BinaryOp, CmpOp, DType, Op, ReduceOp, UnaryOp};

use super::fusion::{kernel_accepts, reduce_last};

pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule("fuse-sigmoid", "fusion.activation", "1 / (1 + exp(−x)) = sigmoid(x)", fuse_sigmoid, |eg, _, &x| add_op(eg, Op::Unary(UnaryOp::Sigmoid), &[x])),
        rule("fuse-silu", "fusion.activation", "x · sigmoid(x) = silu(x)", fuse_silu, |eg, _, &x| add_op(eg, Op::Unary(UnaryOp::Silu), &[x])),
        rule("fuse-conv-bias", "fusion.conv", "conv(x, w) + b = conv_bias(x, w, b) for b one value per output channel ([M, 1, ..])", fuse_conv_bias, |eg, _, m: &ConvMatch| {
            add_op(eg, Op::ConvBias { window: m.window.clone(), groups: m.groups, act: Act::None }, &m.operands())
        }),
        rule(
            "fuse-conv-act",
            "fusion.conv",
            "act(conv_bias(x, w, b [, r])) = conv_bias_act(x, w, b [, r]) for act = relu (max(y, 0)), leaky relu (where(y < 0, α·y, y)) or silu",
            fuse_conv_act,
            |eg, _, m: &ConvMatch| add_op(eg, Op::ConvBias { window: m.window.clone(), groups: m.groups, act: m.act }, &m.operands()),
        ),
        rule(
            "fuse-conv-residual",
            "fusion.conv",
            "conv_bias(x, w, b) + r = conv_bias(x, w, b, r) for r of the output's shape (a residual connection, added while the output is in cache)",
            fuse_conv_residual,
            |eg, _, m: &ConvMatch| add_op(eg, Op::ConvBias { window: m.window.clone(), groups: m.groups, act: Act::None }, &m.operands()),
        ),
        rule(
            "fuse-group-norm",
            "fusion.group-norm",
            "reshape(normalise_ε(reshape(x, [N, G, C/G·S])), shape(x)) · γ + β = group_norm_ε(x, γ, β) with normalise_ε(y) = (y − mean(y))·rsqrt(mean((y − mean(y))²) + ε)",
            fuse_group_norm,
            |eg, _, m: &NormMatch| add_op(eg, Op::GroupNorm { groups: m.groups, eps_bits: m.eps.to_bits(), act: Act::None }, &[m.x, m.gamma, m.beta]),
        ),
        rule(
            "fuse-group-norm-act",
            "fusion.group-norm",
            "act(group_norm_ε(x, γ, β)) = group_norm_act_ε(x, γ, β) for act = relu, leaky relu or silu",
            fuse_group_norm_act,
            |eg, _, m: &NormMatch| add_op(eg, Op::GroupNorm { groups: m.groups, eps_bits: m.eps.to_bits(), act: m.act }, &[m.x, m.gamma, m.beta]),
        ),
        rule(
            "fold-affine-into-group-norm",
            "fusion.group-norm",
            "group_norm_ε(x, γ, β) · a + b = group_norm_ε(x, γ·a, β·a + b) for a, b one value per channel ([C, 1, ..]) or per image and channel ([N, C, 1, ..])",
            fold_affine_into_group_norm,
            apply_fold_affine,
        ),
        rule(
            "conv-im2col",
            "conv-algorithm",
            "conv(x, w) = reshape(matmul(reshape(w, [1, g, M/g, K]), im2col(x)), [N, M, *O]) with K = (C/g)·taps: the convolution as a GEMM over the unfolded windows",
            conv_im2col,
            apply_conv_im2col,
        ),
        rule(
            "im2col-pointwise",
            "conv-algorithm",
            "im2col(x) = reshape(x, [N, g, C/g, P]) for a 1-tap window of stride 1 and no padding: a pointwise convolution unfolds nothing",
            im2col_pointwise,
            |eg, _, &(x, ref shape)| add(eg, ENode::typed(Op::Reshape, shape.clone(), DType::F32, &[x])),
        ),
    ]
}

fn f32_class(eg: &TEGraph, c: Id) -> bool {
    data(eg, c).dtype == DType::F32
}

// ---- Activations

/// `x` with class `c` holding `1 / (1 + exp(−x))` (as `recip` or as `1 / ..`).
fn fuse_sigmoid(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut dens: Vec<Id> = unary(eg, c, UnaryOp::Recip).to_vec();
    for (one, d) in binary(eg, c, BinaryOp::Div) {
        if scalar_f32(eg, one).is_some_and(|v| approx(v, 1.0)) {
            dens.push(d);
        }
    }
    let mut out = Vec::new();
    for d in dens {
        for (e, one) in binary(eg, d, BinaryOp::Add) {
            if !scalar_f32(eg, one).is_some_and(|v| approx(v, 1.0)) {
                continue;
            }
            for nx in unary(eg, e, UnaryOp::Exp) {
                for x in unary(eg, nx, UnaryOp::Neg) {
                    if shape(eg, x) == shape(eg, c) && f32_class(eg, x) && !out.contains(&x) {
                        out.push(x);
                    }
                }
            }
        }
    }
    out
}

fn fuse_silu(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut out = Vec::new();
    for (x, s) in binary(eg, c, BinaryOp::Mul) {
        if unary(eg, s, UnaryOp::Sigmoid).iter().any(|&y| same(eg, x, y)) && shape(eg, x) == shape(eg, c) && !out.contains(&x) {
            out.push(x);
        }
    }
    out
}

/// `(y, act)` with class `c` holding an activation of `y`: `silu(y)`, `max(y, 0)` (ReLU),
/// `where(y < 0, y·α, y)` (leaky ReLU, as the ONNX importer writes it) or `max` of a leaky
/// ReLU and a scalar (the floor).
fn activations(eg: &TEGraph, c: Id) -> Vec<(Id, Act)> {
    let mut v: Vec<(Id, Act)> = unary(eg, c, UnaryOp::Silu).iter().map(|&y| (y, Act::Silu)).collect();
    for (y, z) in binary(eg, c, BinaryOp::Max) {
        if shape(eg, y) != shape(eg, c) {
            continue;
        }
        match scalar_f32(eg, z) {
            Some(0.0) => v.push((y, Act::Relu)),
            Some(floor) => {
                for (y0, a) in leaky(eg, y) {
                    if let Act::LeakyRelu { alpha_bits } = a {
                        v.push((y0, Act::LeakyReluFloor { alpha_bits, floor_bits: floor.to_bits() }));
                    }
                }
            }
            None => {}
        }
    }
    v.extend(leaky(eg, c));
    v
}

/// `(y, leaky_relu_α)` with class `c` holding `where(y < 0, y·α, y)`.
fn leaky(eg: &TEGraph, c: Id) -> Vec<(Id, Act)> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| *o == Op::Where) {
        let (cond, neg, pos) = (eg.find(n.children[0]), eg.find(n.children[1]), eg.find(n.children[2]));
        for m in nodes_where(eg, cond, |o| *o == Op::Compare(CmpOp::Lt)) {
            let (y, z) = (eg.find(m.children[0]), eg.find(m.children[1]));
            if !same(eg, y, pos) || scalar_f32(eg, z) != Some(0.0) || shape(eg, y) != shape(eg, c) {
                continue;
            }
            for (y2, a) in binary(eg, neg, BinaryOp::Mul) {
                if let (true, Some(alpha)) = (same(eg, y2, y), scalar_f32(eg, a)) {
                    let act = Act::LeakyRelu { alpha_bits: alpha.to_bits() };
                    if !v.contains(&(y, act)) {
                        v.push((y, act));
                    }
                }
            }
        }
    }
    v
}

// ---- Convolution epilogue

/// A convolution with its bias, residual and activation.
pub(super) struct ConvMatch {
    x: Id,
    w: Id,
    b: Id,
    /// The residual added before the activation, if any.
    r: Option<Id>,
    window: tg_ir::Window,
    groups: usize,
    act: Act,
}

impl ConvMatch {
    /// `[x, w, b]` or `[x, w, b, r]`.
    fn operands(&self) -> Vec<Id> {
        let mut v = vec![self.x, self.w, self.b];
        v.extend(self.r);
        v
    }
}

/// True when `b` is one value per channel of `y` (`[C, 1, ..]`, rank one less).
fn per_channel(eg: &TEGraph, b: Id, y: Id) -> bool {
    let (bs, ys) = (shape(eg, b), shape(eg, y));
    ys.len() >= 2 && bs.len() + 1 == ys.len() && bs[0] == ys[1] && bs[1..].iter().all(|&d| d == 1) && f32_class(eg, b)
}

fn fuse_conv_bias(eg: &TEGraph, c: Id) -> Vec<ConvMatch> {
    let mut out = Vec::new();
    for (y, b) in binary(eg, c, BinaryOp::Add) {
        if !per_channel(eg, b, y) || shape(eg, y) != shape(eg, c) {
            continue;
        }
        for n in nodes_where(eg, y, |o| matches!(o, Op::Conv { .. })) {
            let Op::Conv { window, groups } = &n.op else { continue };
            let (x, w) = (eg.find(n.children[0]), eg.find(n.children[1]));
            let op = Op::ConvBias { window: window.clone(), groups: *groups, act: Act::None };
            if kernel_accepts(eg, &op, &[x, w, b]) {
                out.push(ConvMatch { x, w, b, r: None, window: window.clone(), groups: *groups, act: Act::None });
            }
        }
    }
    out
}

fn fuse_conv_act(eg: &TEGraph, c: Id) -> Vec<ConvMatch> {
    let mut out = Vec::new();
    for (y, act) in activations(eg, c) {
        for n in nodes_where(eg, y, |o| matches!(o, Op::ConvBias { act: Act::None, .. })) {
            let Op::ConvBias { window, groups, .. } = &n.op else { continue };
            let ins: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).collect();
            let op = Op::ConvBias { window: window.clone(), groups: *groups, act };
            if kernel_accepts(eg, &op, &ins) {
                // The residual, when the node has one, stays (the activation comes after it).
                out.push(ConvMatch { x: ins[0], w: ins[1], b: ins[2], r: ins.get(3).copied(), window: window.clone(), groups: *groups, act });
            }
        }
    }
    out
}

fn fuse_conv_residual(eg: &TEGraph, c: Id) -> Vec<ConvMatch> {
    let mut out = Vec::new();
    for (y, r) in binary(eg, c, BinaryOp::Add) {
        // The residual has the output's shape (no broadcast), and the sum too.
        if shape(eg, r) != shape(eg, y) || shape(eg, c) != shape(eg, y) || !f32_class(eg, r) {
            continue;
        }
        for n in nodes_where(eg, y, |o| matches!(o, Op::ConvBias { act: Act::None, .. })) {
            let Op::ConvBias { window, groups, .. } = &n.op else { continue };
            if n.children.len() != 3 {
                continue;
            }
            let ins: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).chain([r]).collect();
            let op = Op::ConvBias { window: window.clone(), groups: *groups, act: Act::None };
            if kernel_accepts(eg, &op, &ins) {
                out.push(ConvMatch { x: ins[0], w: ins[1], b: ins[2], r: Some(r), window: window.clone(), groups: *groups, act: Act::None });
            }
        }
    }
    out
}

// ---- Group normalisation

/// A group normalisation with its affine map and activation.
pub(super) struct NormMatch {
    x: Id,
    gamma: Id,
    beta: Id,
    groups: usize,
    eps: f64,
    act: Act,
}

/// `(y, ε)` with class `c` computing `(y − mean(y))·rsqrt(mean((y − mean(y))²) + ε)` over
/// the last axis.
fn normalise(eg: &TEGraph, c: Id) -> Vec<(Id, f64)> {
    let mut v = Vec::new();
    for (d, inv) in binary(eg, c, BinaryOp::Mul) {
        for ve in unary(eg, inv, UnaryOp::Rsqrt) {
            for (var, e) in binary(eg, ve, BinaryOp::Add) {
                let Some(eps) = scalar_f32(eg, e).filter(|e| *e >= 0.0) else { continue };
                for sq in reduce_last(eg, var, ReduceOp::Mean) {
                    if !has_binary(eg, sq, BinaryOp::Mul, d, d) {
                        continue;
                    }
                    for (y, mean) in binary(eg, d, BinaryOp::Sub) {
                        if reduce_last(eg, mean, ReduceOp::Mean).iter().any(|&m| same(eg, m, y)) && shape(eg, y) == shape(eg, d) && !v.contains(&(y, eps)) {
                            v.push((y, eps));
                        }
                    }
                }
            }
        }
    }
    v
}

fn fuse_group_norm(eg: &TEGraph, c: Id) -> Vec<NormMatch> {
    let mut out = Vec::new();
    for (t, beta) in binary(eg, c, BinaryOp::Add) {
        for (r, gamma) in binary(eg, t, BinaryOp::Mul) {
            if !per_channel(eg, gamma, c) || !per_channel(eg, beta, c) || shape(eg, t) != shape(eg, c) {
                continue;
            }
            for rn in nodes_where(eg, r, |o| *o == Op::Reshape) {
                for (y3, eps) in normalise(eg, eg.find(rn.children[0])) {
                    let s3 = shape(eg, y3);
                    for xn in nodes_where(eg, y3, |o| *o == Op::Reshape) {
                        let x = eg.find(xn.children[0]);
                        let xs = shape(eg, x);
                        // x [N, C, *S] grouped as [N, G, C/G·S], and normalised back to x's shape.
                        let ok = xs == shape(eg, c) && s3.len() == 3 && xs.len() >= 2 && s3[0] == xs[0] && s3[1] > 0 && xs[1].is_multiple_of(s3[1]);
                        if !ok || !f32_class(eg, x) {
                            continue;
                        }
                        let m = NormMatch { x, gamma, beta, groups: s3[1], eps, act: Act::None };
                        let op = Op::GroupNorm { groups: m.groups, eps_bits: eps.to_bits(), act: Act::None };
                        if kernel_accepts(eg, &op, &[x, gamma, beta]) {
                            out.push(m);
                        }
                    }
                }
            }
        }
    }
    out
}

fn fuse_group_norm_act(eg: &TEGraph, c: Id) -> Vec<NormMatch> {
    let mut out = Vec::new();
    for (y, act) in activations(eg, c) {
        for n in nodes_where(eg, y, |o| matches!(o, Op::GroupNorm { act: Act::None, .. })) {
            let Op::GroupNorm { groups, eps_bits, .. } = n.op else { continue };
            let ins: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).collect();
            let op = Op::GroupNorm { groups, eps_bits, act };
            if kernel_accepts(eg, &op, &ins) {
                out.push(NormMatch { x: ins[0], gamma: ins[1], beta: ins[2], groups, eps: f64::from_bits(eps_bits), act });
            }
        }
    }
    out
}

/// A group norm without activation scaled and shifted after it: `group_norm(x, γ, β)·a + b`.
pub(super) struct AffineMatch {
    norm: NormMatch,
    a: Id,
    b: Id,
}

/// Whether `v` is one value per channel of `y` ([`per_channel`]) or one per image and channel
/// (`[N, C, 1, ..]`).
fn per_image_channel(eg: &TEGraph, v: Id, y: Id) -> bool {
    let (vs, ys) = (shape(eg, v), shape(eg, y));
    per_channel(eg, v, y) || (ys.len() >= 2 && vs.len() == ys.len() && vs[..2] == ys[..2] && vs[2..].iter().all(|&d| d == 1) && f32_class(eg, v))
}

fn fold_affine_into_group_norm(eg: &TEGraph, c: Id) -> Vec<AffineMatch> {
    let mut out = Vec::new();
    for (t, b) in binary(eg, c, BinaryOp::Add) {
        for (y, a) in binary(eg, t, BinaryOp::Mul) {
            if !per_image_channel(eg, a, y) || !per_image_channel(eg, b, y) || shape(eg, t) != shape(eg, y) || shape(eg, c) != shape(eg, y) {
                continue;
            }
            for n in nodes_where(eg, y, |o| matches!(o, Op::GroupNorm { act: Act::None, .. })) {
                let Op::GroupNorm { groups, eps_bits, .. } = n.op else { continue };
                let ins: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).collect();
                let norm = NormMatch { x: ins[0], gamma: ins[1], beta: ins[2], groups, eps: f64::from_bits(eps_bits), act: Act::None };
                out.push(AffineMatch { norm, a, b });
            }
        }
    }
    out
}

fn apply_fold_affine(eg: &mut TEGraph, _: Id, m: &AffineMatch) -> Option<Id> {
    let NormMatch { x, gamma, beta, groups, eps, .. } = m.norm;
    let g = add_op(eg, Op::Binary(BinaryOp::Mul), &[gamma, m.a])?;
    let ba = add_op(eg, Op::Binary(BinaryOp::Mul), &[beta, m.a])?;
    let b = add_op(eg, Op::Binary(BinaryOp::Add), &[ba, m.b])?;
    let op = Op::GroupNorm { groups, eps_bits: eps.to_bits(), act: Act::None };
    // The folded scale and shift are per image where `a` or `b` is (or per channel).
    if !kernel_accepts(eg, &op, &[x, g, b]) {
        return None;
    }
    add_op(eg, op, &[x, g, b])
}

// ---- Convolution algorithm

/// A convolution to write as a GEMM over its unfolded windows.
pub(super) struct Im2ColMatch {
    x: Id,
    w: Id,
    window: tg_ir::Window,
    groups: usize,
}

fn conv_im2col(eg: &TEGraph, c: Id) -> Vec<Im2ColMatch> {
    let mut out = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Conv { .. })) {
        let Op::Conv { window, groups } = &n.op else { continue };
        let (x, w) = (eg.find(n.children[0]), eg.find(n.children[1]));
        if f32_class(eg, x) && f32_class(eg, w) && kernel_accepts(eg, &Op::Im2Col { window: window.clone(), groups: *groups }, &[x]) {
            out.push(Im2ColMatch { x, w, window: window.clone(), groups: *groups });
        }
    }
    out
}

fn apply_conv_im2col(eg: &mut TEGraph, c: Id, m: &Im2ColMatch) -> Option<Id> {
    let (xs, ws, ys) = (shape(eg, m.x).to_vec(), shape(eg, m.w).to_vec(), shape(eg, c).to_vec());
    let (n, g, mo) = (xs[0], m.groups, ws[0]);
    let k: usize = ws[1..].iter().product();
    let p: usize = ys[2..].iter().product();
    let cols = add_op(eg, Op::Im2Col { window: m.window.clone(), groups: g }, &[m.x])?;
    let wr = add(eg, ENode::typed(Op::Reshape, vec![1, g, mo / g, k], DType::F32, &[m.w]))?;
    let mm = Op::MatMul { transpose_rhs: false };
    if !kernel_accepts(eg, &mm, &[wr, cols]) {
        return None;
    }
    let prod = add_op(eg, mm, &[wr, cols])?;
    debug_assert_eq!(shape(eg, prod), [n, g, mo / g, p]);
    add(eg, ENode::typed(Op::Reshape, ys, DType::F32, &[prod]))
}

fn im2col_pointwise(eg: &TEGraph, c: Id) -> Vec<(Id, Vec<usize>)> {
    let mut out = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Im2Col { .. })) {
        let Op::Im2Col { window, groups } = &n.op else { continue };
        let pointwise = window.taps() == 1 && window.stride.iter().all(|&s| s == 1) && window.pad_begin.iter().chain(&window.pad_end).all(|&p| p == 0);
        let x = eg.find(n.children[0]);
        let xs = shape(eg, x);
        if pointwise && f32_class(eg, x) && xs.len() >= 3 && xs[1].is_multiple_of(*groups) {
            let target = vec![xs[0], *groups, xs[1] / groups, xs[2..].iter().product()];
            if target.as_slice() == shape(eg, c) {
                out.push((x, target));
            }
        }
    }
    out
}

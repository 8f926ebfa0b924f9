//! Fusion: primitive compositions become the fused ops of the IR. Each rule matches the
//! exact composition the fused op is defined as (see `tg_ir::Op`), tries commutative
//! operands in both orders, and fires only when the operands fit the contract of the fused
//! kernels ([`kernel_accepts`]), so every fused node it adds can be compiled.

use super::{add, add_op, approx, binary, data, has_binary, nodes_where, rule, same, scalar_f32, shape, unary, Rule};
use crate::{ENode, TEGraph};
use egg::Id;
use tg_ir::{BinaryOp, DType, Op, ReduceOp, UnaryOp};

pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule("fuse-rmsnorm", "fusion.rmsnorm", "x·rsqrt(mean(x·x, last) + ε)·w = rms_norm_ε(x, w) (w may be 1 + w₀)", fuse_rmsnorm, |eg, _, &(x, w, eps)| {
            add_op(eg, Op::RmsNorm { eps_bits: eps.to_bits() }, &[x, w])
        }),
        rule(
            "fuse-add-rmsnorm",
            "fusion.add-rmsnorm",
            "rms_norm_ε(a + b, w) = add_rms_norm_ε(a, b, w)[1] and a + b = add_rms_norm_ε(a, b, w)[0] (both results of one kernel)",
            fuse_add_rmsnorm,
            apply_add_rmsnorm,
        ),
        rule(
            "fuse-matmul-add",
            "fusion.matmul-epilogue",
            "matmul(x, Wᵀ) + c = matmul_add(x, Wᵀ, c) for a weight W and c a bias row or a residual",
            fuse_matmul_add,
            |eg, _, &(a, b, c, t)| add_op(eg, Op::MatMulAdd { transpose_rhs: t }, &[a, b, c]),
        ),
        rule("fuse-gelu-tanh", "fusion.gelu", "0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))) = gelu_tanh(x)", fuse_gelu, |eg, _, &x| add_op(eg, Op::GeluTanh, &[x])),
        rule("fuse-gated-gelu", "fusion.gelu", "gelu_tanh(g)·u = gated_gelu(g, u)", fuse_gated_gelu, |eg, _, &(g, u)| add_op(eg, Op::GatedGelu, &[g, u])),
        rule("fuse-softmax", "fusion.softmax", "exp(x − max(x, last)) / sum(exp(x − max(x, last)), last) = softmax(x)", fuse_softmax, |eg, _, &x| {
            add_op(eg, Op::Softmax, &[x])
        }),
        rule(
            "fuse-rope-neox",
            "fusion.rope",
            "concat(x₁·cos − x₂·sin, x₂·cos + x₁·sin) with [x₁, x₂] = halves of x = rope_neox(x, cos, sin)",
            fuse_rope,
            |eg, _, &(x, c, s)| add_op(eg, Op::RopeNeox, &[x, c, s]),
        ),
        rule(
            "fuse-rmsnorm-rope",
            "fusion.qknorm-rope",
            "rope_neox(rms_norm_ε(x, w), cos, sin) = rms_norm_rope_neox_ε(x, w, cos, sin)",
            fuse_rmsnorm_rope,
            |eg, _, &(x, w, c, s, eps)| add_op(eg, Op::RmsNormRopeNeox { eps_bits: eps.to_bits() }, &[x, w, c, s]),
        ),
        rule("fuse-attention", "fusion.attention", "softmax(s·(q·kᵀ) + m)·v = attention_s(q, k, v, m) (s = 1 when unscaled)", fuse_attention, |eg, _, &(q, k, v, m, s)| {
            add_op(eg, Op::Attention { scale_bits: s.to_bits() }, &[q, k, v, m])
        }),
        rule(
            "fuse-attention-vt",
            "fusion.attention",
            "matmul(softmax(s·(q·kᵀ)), vtᵀ) = reshape(attention_s(q, k, permute(vt), 0)) for rank-3 q [b, t, d], k [b, sk, d], vt [b, d, sk] (Einsum attention: no mask, v stored transposed)",
            fuse_attention_vt,
            apply_attention_vt,
        ),
        rule(
            "attention-seq-major",
            "fusion.attention",
            "permute(attention_s(permute(q, [1,2,0,3]), k, v, m), [2,0,1,3]) = attention_seq_major_s(q, k, v, m)",
            attention_seq_major,
            |eg, _, &(q, k, v, m, s)| add_op(eg, Op::AttentionSeqMajor { scale_bits: s.to_bits() }, &[q, k, v, m]),
        ),
        rule(
            "attention-absorb-scale",
            "fusion.attention",
            "attention_s(q·c, k, v, m) = attention_{s·c}(q, k, v, m) for a scalar constant c",
            absorb_scale,
            |eg, _, &(q, k, v, m, s)| add_op(eg, Op::Attention { scale_bits: s.to_bits() }, &[q, k, v, m]),
        ),
    ]
}

/// Whether a target device's kernel registry implements fused op `op` on the classes `ins`
/// (as contiguous operands: lowering copies views), with the output type the IR infers. The
/// contract is the registry's (`tg_runtime::KernelRegistry::accepts_op`), not a copy of it,
/// so a fused node is only added where some device can run it.
pub fn kernel_accepts(eg: &TEGraph, op: &Op, ins: &[Id]) -> bool {
    let operands: Vec<tg_runtime::Operand> = ins.iter().map(|&i| tg_runtime::Operand { shape: &data(eg, i).shape, dtype: data(eg, i).dtype, weight: data(eg, i).weight }).collect();
    let typed: Vec<(&[usize], DType)> = operands.iter().map(|o| (o.shape, o.dtype)).collect();
    match tg_ir::infer(op, &typed, None) {
        Ok((shape, dtype)) => eg.analysis.targets.accept(op, &operands, (&shape, dtype)),
        Err(_) => false,
    }
}

fn f32_all(eg: &TEGraph, ids: &[Id]) -> bool {
    ids.iter().all(|&i| data(eg, i).dtype == DType::F32)
}

/// Reductions `op` over the last axis in class `c`: their operands.
pub(super) fn reduce_last(eg: &TEGraph, c: Id, op: ReduceOp) -> Vec<Id> {
    let rank = shape(eg, c).len();
    nodes_where(eg, c, move |o| matches!(o, Op::Reduce { op: r, axis } if *r == op && axis + 1 == rank)).map(|n| eg.find(n.children[0])).collect()
}

// ---- RMSNorm

/// `(x, ε)` with class `a` computing `x·rsqrt(mean(x·x, last) + ε)`.
fn rms_core(eg: &TEGraph, a: Id) -> Vec<(Id, f64)> {
    let mut v = Vec::new();
    for (x, r) in binary(eg, a, BinaryOp::Mul) {
        for m in unary(eg, r, UnaryOp::Rsqrt) {
            for (mm, e) in binary(eg, m, BinaryOp::Add) {
                let Some(eps) = scalar_f32(eg, e) else { continue };
                for sq in reduce_last(eg, mm, ReduceOp::Mean) {
                    if shape(eg, sq).len() == shape(eg, x).len() && has_binary(eg, sq, BinaryOp::Mul, x, x) && eps >= 0.0 {
                        v.push((x, eps));
                    }
                }
            }
        }
    }
    v
}

fn fuse_rmsnorm(eg: &TEGraph, c: Id) -> Vec<(Id, Id, f64)> {
    let mut v = Vec::new();
    for (a, w) in binary(eg, c, BinaryOp::Mul) {
        for (x, eps) in rms_core(eg, a) {
            if shape(eg, x) == shape(eg, c) && f32_all(eg, &[x, w]) && kernel_accepts(eg, &Op::RmsNorm { eps_bits: 0 }, &[x, w]) {
                v.push((x, w, eps));
            }
        }
    }
    v
}

/// `(a, W, c, transpose_rhs)` with class `s` holding `matmul(a, W) + c` where `W` is a
/// weight (a stored `[n, k]` tensor used transposed: the quantized-matmul kernel's right
/// operand) and `c` a bias row or a residual that the epilogue can add.
fn fuse_matmul_add(eg: &TEGraph, s: Id) -> Vec<(Id, Id, Id, bool)> {
    let mut v = Vec::new();
    for (x, c) in binary(eg, s, BinaryOp::Add) {
        for n in nodes_where(eg, x, |o| matches!(o, Op::MatMul { transpose_rhs: true })) {
            let (a, w) = (eg.find(n.children[0]), eg.find(n.children[1]));
            let weight = nodes_where(eg, w, |o| matches!(o, Op::Weight { .. })).next().is_some();
            let m = (a, w, c, true);
            if weight && f32_all(eg, &[a, c]) && shape(eg, x) == shape(eg, s) && kernel_accepts(eg, &Op::MatMulAdd { transpose_rhs: true }, &[a, w, c]) && !v.contains(&m) {
                v.push(m);
            }
        }
    }
    v
}

/// `(sum class, a, b, w, ε)` with class `c` holding `rms_norm_ε(sum, w)` and `sum` holding
/// `a + b` of equal shapes (one operand order: the sum is the same either way).
fn fuse_add_rmsnorm(eg: &TEGraph, c: Id) -> Vec<(Id, Id, Id, Id, f64)> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::RmsNorm { .. })) {
        let Op::RmsNorm { eps_bits } = n.op else { continue };
        let (x, w) = (eg.find(n.children[0]), eg.find(n.children[1]));
        for add in nodes_where(eg, x, |o| *o == Op::Binary(BinaryOp::Add)) {
            let (a, b) = (eg.find(add.children[0]), eg.find(add.children[1]));
            if shape(eg, a) == shape(eg, x) && shape(eg, b) == shape(eg, x) && f32_all(eg, &[a, b, w]) && kernel_accepts(eg, &Op::AddRmsNorm { eps_bits }, &[a, b, w]) {
                let m = (x, a, b, w, f64::from_bits(eps_bits));
                if !v.contains(&m) {
                    v.push(m);
                }
            }
        }
    }
    v
}

/// Adds `t = add_rms_norm(a, b, w)`, merges the sum class with `reshape(t[0..1])` and
/// returns `reshape(t[1..2])` for the norm class.
fn apply_add_rmsnorm(eg: &mut TEGraph, c: Id, &(x, a, b, w, eps): &(Id, Id, Id, Id, f64)) -> Option<Id> {
    let t = add_op(eg, Op::AddRmsNorm { eps_bits: eps.to_bits() }, &[a, b, w])?;
    let part = |eg: &mut TEGraph, i: usize, like: Id| -> Option<Id> {
        let s = add_op(eg, Op::Slice { axis: 0, start: i, end: i + 1 }, &[t])?;
        let (shape, dtype) = (data(eg, like).shape.clone(), data(eg, like).dtype);
        add(eg, ENode::typed(Op::Reshape, shape, dtype, &[s]))
    };
    let sum = part(eg, 0, x)?;
    let x = eg.find(x);
    eg.union(x, sum);
    part(eg, 1, c)
}

// ---- GELU

/// `x` with class `c` computing `0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³)))` in primitives.
fn gelu_primitive(eg: &TEGraph, c: Id) -> Vec<Id> {
    let k = (2.0 / std::f64::consts::PI).sqrt();
    let mut v = Vec::new();
    for (hx, t1) in binary(eg, c, BinaryOp::Mul) {
        for (x, half) in binary(eg, hx, BinaryOp::Mul) {
            if !scalar_f32(eg, half).is_some_and(|h| h == 0.5) {
                continue;
            }
            let ok = binary(eg, t1, BinaryOp::Add).into_iter().any(|(t, one)| {
                scalar_f32(eg, one) == Some(1.0)
                    && unary(eg, t, UnaryOp::Tanh).into_iter().any(|inner| {
                        binary(eg, inner, BinaryOp::Mul).into_iter().any(|(i0, kk)| {
                            scalar_f32(eg, kk).is_some_and(|s| approx(s, k))
                                && binary(eg, i0, BinaryOp::Add).into_iter().any(|(x1, c3)| {
                                    same(eg, x1, x)
                                        && binary(eg, c3, BinaryOp::Mul).into_iter().any(|(x3, k3)| scalar_f32(eg, k3).is_some_and(|s| approx(s, 0.044715)) && is_cube(eg, x3, x))
                                })
                        })
                    })
            });
            if ok && shape(eg, x) == shape(eg, c) && !v.contains(&x) {
                v.push(x);
            }
        }
    }
    v
}

/// Class `x3` holds `(x·x)·x` (any operand order).
fn is_cube(eg: &TEGraph, x3: Id, x: Id) -> bool {
    binary(eg, x3, BinaryOp::Mul).into_iter().any(|(x2, x1)| same(eg, x1, x) && has_binary(eg, x2, BinaryOp::Mul, x, x))
}

/// Operands `g` such that class `c` is `gelu_tanh(g)`, fused or in primitives.
fn gelu_of(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v: Vec<Id> = nodes_where(eg, c, |o| *o == Op::GeluTanh).map(|n| eg.find(n.children[0])).collect();
    for g in gelu_primitive(eg, c) {
        if !v.contains(&g) {
            v.push(g);
        }
    }
    v
}

fn fuse_gelu(eg: &TEGraph, c: Id) -> Vec<Id> {
    gelu_primitive(eg, c).into_iter().filter(|&x| f32_all(eg, &[x])).collect()
}

fn fuse_gated_gelu(eg: &TEGraph, c: Id) -> Vec<(Id, Id)> {
    let mut v = Vec::new();
    for (a, u) in binary(eg, c, BinaryOp::Mul) {
        for g in gelu_of(eg, a) {
            if shape(eg, g) == shape(eg, u) && shape(eg, u) == shape(eg, c) && f32_all(eg, &[g, u]) && !v.contains(&(g, u)) {
                v.push((g, u));
            }
        }
    }
    v
}

// ---- Softmax

/// `x` with class `c` computing `exp(x − max(x)) / sum(exp(x − max(x)))` over the last axis.
fn softmax_primitive(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| *o == Op::Binary(BinaryOp::Div)) {
        let (e, s) = (eg.find(n.children[0]), eg.find(n.children[1]));
        if !reduce_last(eg, s, ReduceOp::Sum).contains(&e) {
            continue;
        }
        for d in unary(eg, e, UnaryOp::Exp) {
            for sub in nodes_where(eg, d, |o| *o == Op::Binary(BinaryOp::Sub)) {
                let (x, m) = (eg.find(sub.children[0]), eg.find(sub.children[1]));
                if reduce_last(eg, m, ReduceOp::Max).contains(&x) && shape(eg, x) == shape(eg, c) && !v.contains(&x) {
                    v.push(x);
                }
            }
        }
    }
    v
}

/// Operands `x` such that class `c` is `softmax(x)`, fused or in primitives.
fn softmax_of(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v: Vec<Id> = nodes_where(eg, c, |o| *o == Op::Softmax).map(|n| eg.find(n.children[0])).collect();
    for x in softmax_primitive(eg, c) {
        if !v.contains(&x) {
            v.push(x);
        }
    }
    v
}

fn fuse_softmax(eg: &TEGraph, c: Id) -> Vec<Id> {
    softmax_primitive(eg, c).into_iter().filter(|&x| f32_all(eg, &[x]) && !shape(eg, x).is_empty()).collect()
}

// ---- RoPE (NeoX layout: the two halves of the last axis are the rotated pairs)

/// Sources `x` of slice nodes in class `c` that take `x[.., start..end]` on the last axis.
fn half_of(eg: &TEGraph, c: Id, start_is_half: bool) -> Vec<Id> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Slice { .. })) {
        let Op::Slice { axis, start, end } = n.op else { continue };
        let x = eg.find(n.children[0]);
        let s = shape(eg, x);
        let Some(&d) = s.last() else { continue };
        let want = if start_is_half { (d / 2, d) } else { (0, d / 2) };
        if axis + 1 == s.len() && d % 2 == 0 && d > 0 && (start, end) == want {
            v.push(x);
        }
    }
    v
}

fn fuse_rope(eg: &TEGraph, c: Id) -> Vec<(Id, Id, Id)> {
    let mut v = Vec::new();
    let rank = shape(eg, c).len();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Concat { .. })) {
        let Op::Concat { axis } = n.op else { continue };
        if n.children.len() != 2 || axis + 1 != rank {
            continue;
        }
        let (o1, o2) = (eg.find(n.children[0]), eg.find(n.children[1]));
        for sub in nodes_where(eg, o1, |o| *o == Op::Binary(BinaryOp::Sub)) {
            let (p, q) = (eg.find(sub.children[0]), eg.find(sub.children[1]));
            for (x1, cos) in binary(eg, p, BinaryOp::Mul) {
                for x in half_of(eg, x1, false) {
                    for (x2, sin) in binary(eg, q, BinaryOp::Mul) {
                        if !half_of(eg, x2, true).contains(&x) {
                            continue;
                        }
                        let second = binary(eg, o2, BinaryOp::Add).into_iter().any(|(a, b)| has_binary(eg, a, BinaryOp::Mul, x2, cos) && has_binary(eg, b, BinaryOp::Mul, x1, sin));
                        if second && shape(eg, x) == shape(eg, c) && f32_all(eg, &[x, cos, sin]) && kernel_accepts(eg, &Op::RopeNeox, &[x, cos, sin]) && !v.contains(&(x, cos, sin))
                        {
                            v.push((x, cos, sin));
                        }
                    }
                }
            }
        }
    }
    v
}

/// `(x, w, cos, sin, ε)` with class `c` computing `rope_neox(rms_norm_ε(x, w), cos, sin)`
/// from the fused nodes the other two rules add.
fn fuse_rmsnorm_rope(eg: &TEGraph, c: Id) -> Vec<(Id, Id, Id, Id, f64)> {
    let mut v = Vec::new();
    for r in nodes_where(eg, c, |o| *o == Op::RopeNeox) {
        let (y, cos, sin) = (eg.find(r.children[0]), eg.find(r.children[1]), eg.find(r.children[2]));
        for n in nodes_where(eg, y, |o| matches!(o, Op::RmsNorm { .. })) {
            let Op::RmsNorm { eps_bits } = n.op else { continue };
            let (x, w) = (eg.find(n.children[0]), eg.find(n.children[1]));
            let m = (x, w, cos, sin, f64::from_bits(eps_bits));
            if f32_all(eg, &[x, w, cos, sin]) && kernel_accepts(eg, &Op::RmsNormRopeNeox { eps_bits }, &[x, w, cos, sin]) && !v.contains(&m) {
                v.push(m);
            }
        }
    }
    v
}

// ---- Attention

type AttnMatch = (Id, Id, Id, Id, f64);

fn attention_ok(eg: &TEGraph, c: Id, (q, k, v, m): (Id, Id, Id, Id)) -> bool {
    f32_all(eg, &[q, k, v, m]) && kernel_accepts(eg, &Op::Attention { scale_bits: 0 }, &[q, k, v, m]) && shape(eg, c) == shape(eg, q)
}

fn fuse_attention(eg: &TEGraph, c: Id) -> Vec<AttnMatch> {
    let mut out = Vec::new();
    for n in nodes_where(eg, c, |o| *o == Op::MatMul { transpose_rhs: false }) {
        let (p, v) = (eg.find(n.children[0]), eg.find(n.children[1]));
        for s in softmax_of(eg, p) {
            for (t, m) in binary(eg, s, BinaryOp::Add) {
                // Scores: q·kᵀ, or (q·kᵀ)·c for a scalar constant c.
                let mut scores: Vec<(Id, f64)> = vec![(t, 1.0)];
                for (t2, factor) in binary(eg, t, BinaryOp::Mul) {
                    if let Some(sc) = scalar_f32(eg, factor) {
                        if shape(eg, t2) == shape(eg, t) {
                            scores.push((t2, sc));
                        }
                    }
                }
                for (t, scale) in scores {
                    for mm in nodes_where(eg, t, |o| *o == Op::MatMul { transpose_rhs: true }) {
                        let (q, k) = (eg.find(mm.children[0]), eg.find(mm.children[1]));
                        if shape(eg, s) == shape(eg, t) && attention_ok(eg, c, (q, k, v, m)) && !out.contains(&(q, k, v, m, scale)) {
                            out.push((q, k, v, m, scale));
                        }
                    }
                }
            }
        }
    }
    out
}

/// `(x, f)` with class `c` equal to `x·f` for a product `f` of up to two scalar constants:
/// the deepest such `x` (or `(c, 1)`).
fn strip_scalars(eg: &TEGraph, c: Id) -> (Id, f64) {
    let (mut x, mut f) = (c, 1.0);
    for _ in 0..2 {
        let next =
            binary(eg, x, BinaryOp::Mul).into_iter().find_map(|(y, k)| scalar_f32(eg, k).filter(|_| shape(eg, y) == shape(eg, x) && scalar_f32(eg, y).is_none()).map(|v| (y, v)));
        match next {
            Some((y, v)) => {
                x = y;
                f *= v;
            }
            None => break,
        }
    }
    (x, f)
}

/// `(q, k, vt, scale)` with class `c` holding `matmul(softmax(s·(q·kᵀ)), vtᵀ)` on rank-3
/// operands of one batch: the attention `Einsum`s (`bct,bcs->bts` then `bts,bcs->bct`)
/// import as exactly this, with the scale on q and k.
fn fuse_attention_vt(eg: &TEGraph, c: Id) -> Vec<AttnMatch> {
    let mut out = Vec::new();
    for n in nodes_where(eg, c, |o| *o == Op::MatMul { transpose_rhs: true }) {
        let (p, vt) = (eg.find(n.children[0]), eg.find(n.children[1]));
        for sc in softmax_of(eg, p) {
            let (t, s1) = strip_scalars(eg, sc);
            for mm in nodes_where(eg, t, |o| *o == Op::MatMul { transpose_rhs: true }) {
                let ((q, s2), (k, s3)) = (strip_scalars(eg, eg.find(mm.children[0])), strip_scalars(eg, eg.find(mm.children[1])));
                let (qs, ks, vs) = (shape(eg, q), shape(eg, k), shape(eg, vt));
                let (b, tq, d, sk) = match (qs, ks) {
                    ([b, tq, d], [bk, sk, dk]) if b == bk && d == dk => (*b, *tq, *d, *sk),
                    _ => continue,
                };
                let scale = s1 * s2 * s3;
                let m = (q, k, vt, c, scale);
                if vs != [b, d, sk]
                    || shape(eg, c) != [b, tq, d]
                    || !f32_all(eg, &[q, k, vt])
                    || !scale.is_finite()
                    || out.iter().any(|o: &AttnMatch| o.0 == q && o.1 == k && o.2 == vt && o.4 == scale)
                {
                    continue;
                }
                let op = Op::Attention { scale_bits: scale.to_bits() };
                let (q4, kv4, m2) = ([b, 1, tq, d], [b, 1, sk, d], [tq, sk]);
                let typed = [(&q4[..], DType::F32), (&kv4[..], DType::F32), (&kv4[..], DType::F32), (&m2[..], DType::F32)];
                let operands: Vec<tg_runtime::Operand> = typed.iter().map(|&(s, d)| tg_runtime::Operand { shape: s, dtype: d, weight: false }).collect();
                if eg.analysis.targets.accept(&op, &operands, (&q4, DType::F32)) {
                    out.push(m);
                }
            }
        }
    }
    out
}

fn apply_attention_vt(eg: &mut TEGraph, _: Id, &(q, k, vt, c, scale): &AttnMatch) -> Option<Id> {
    let (b, tq, d) = match shape(eg, q) {
        [b, t, d] => (*b, *t, *d),
        _ => return None,
    };
    let sk = shape(eg, k)[1];
    let f = DType::F32;
    let q4 = add(eg, ENode::typed(Op::Reshape, vec![b, 1, tq, d], f, &[q]))?;
    let k4 = add(eg, ENode::typed(Op::Reshape, vec![b, 1, sk, d], f, &[k]))?;
    let v = add_op(eg, Op::Permute { perm: vec![0, 2, 1] }, &[vt])?;
    let v4 = add(eg, ENode::typed(Op::Reshape, vec![b, 1, sk, d], f, &[v]))?;
    // No mask: zeros, one [t, sk] matrix (what the kernels read).
    let z = super::add_scalar(eg, 0.0)?;
    let zero = add(eg, ENode::typed(Op::Expand, vec![tq, sk], f, &[z]))?;
    let a = add_op(eg, Op::Attention { scale_bits: scale.to_bits() }, &[q4, k4, v4, zero])?;
    let _ = c;
    add(eg, ENode::typed(Op::Reshape, vec![b, tq, d], f, &[a]))
}

/// Class `c` holding `permute(attention(permute(q, [1, 2, 0, 3]), ..), [2, 0, 1, 3])`: the
/// position-major query's transposes on both sides of attention, which the seq-major kernel
/// does not need.
fn attention_seq_major(eg: &TEGraph, c: Id) -> Vec<AttnMatch> {
    let mut out = Vec::new();
    for p in nodes_where(eg, c, |o| matches!(o, Op::Permute { perm } if perm[..] == [2, 0, 1, 3])) {
        let a = eg.find(p.children[0]);
        for n in nodes_where(eg, a, |o| matches!(o, Op::Attention { .. })) {
            let Op::Attention { scale_bits } = n.op else { continue };
            let ch: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).collect();
            for qp in nodes_where(eg, ch[0], |o| matches!(o, Op::Permute { perm } if perm[..] == [1, 2, 0, 3])) {
                let q = eg.find(qp.children[0]);
                let m = (q, ch[1], ch[2], ch[3], f64::from_bits(scale_bits));
                let op = Op::AttentionSeqMajor { scale_bits };
                if f32_all(eg, &[q, ch[1], ch[2], ch[3]]) && kernel_accepts(eg, &op, &[q, ch[1], ch[2], ch[3]]) && !out.contains(&m) {
                    out.push(m);
                }
            }
        }
    }
    out
}

fn absorb_scale(eg: &TEGraph, c: Id) -> Vec<AttnMatch> {
    let mut out = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Attention { .. })) {
        let Op::Attention { scale_bits } = n.op else { continue };
        let ch: Vec<Id> = n.children.iter().map(|&i| eg.find(i)).collect();
        for (q0, factor) in binary(eg, ch[0], BinaryOp::Mul) {
            let Some(sc) = scalar_f32(eg, factor) else { continue };
            let scale = f64::from_bits(scale_bits) * sc;
            if shape(eg, q0) == shape(eg, ch[0]) && scale.is_finite() && scalar_f32(eg, q0).is_none() && !out.contains(&(q0, ch[1], ch[2], ch[3], scale)) {
                out.push((q0, ch[1], ch[2], ch[3], scale));
            }
        }
    }
    out
}

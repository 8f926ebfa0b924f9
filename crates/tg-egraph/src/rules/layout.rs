//! Layout rules: chains of views collapse, identity views vanish, permutations that move no
//! data become reshapes (which stay contiguous, so no copy is needed before a kernel), a
//! transpose folds into the matmul that reads it, and scalar factors move out of views so
//! a fused kernel can absorb them.

use super::{add, add_op, binary, data, nodes_where, rule, scalar_f32, shape, Rule};
use crate::{ENode, TEGraph};
use egg::Id;
use tg_ir::{BinaryOp, DType, Op};

pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule("reshape-reshape", "layout", "reshape(reshape(x, s1), s2) = reshape(x, s2)", reshape_reshape, apply_reshape),
        rule("reshape-identity", "layout", "reshape(x, shape(x)) = x", reshape_identity, apply_same),
        rule("permute-permute", "layout", "permute(permute(x, q), p) = permute(x, q∘p), i.e. r[i] = q[p[i]]", permute_permute, apply_permute),
        rule("permute-identity", "layout", "permute(x, [0, 1, .., n-1]) = x", permute_identity, apply_same),
        rule(
            "permute-unit-dims",
            "layout",
            "permute(x, p) = reshape(x, shape(permute(x, p))) when p keeps the order of the dims larger than 1",
            permute_unit_dims,
            apply_reshape,
        ),
        rule("expand-expand", "layout", "expand(expand(x, s1), s2) = expand(x, s2)", expand_expand, apply_expand),
        rule("expand-identity", "layout", "expand(x, shape(x)) = x", expand_identity, apply_same),
        rule("slice-full", "layout", "slice(x, a, 0, n_a) = x", slice_full, apply_same),
        rule("slice-slice", "layout", "slice(slice(x, a, s1, e1), a, s2, e2) = slice(x, a, s1 + s2, s1 + e2)", slice_slice, apply_slice),
        rule("concat-slices", "layout", "concat(slice(x, a, 0, c1), slice(x, a, c1, c2), .., slice(x, a, ck, n_a), a) = x", concat_slices, apply_same),
        rule("matmul-transposed-rhs", "layout", "matmul(a, permute(b, swap last two), t) = matmul(a, b, not t)", matmul_transposed_rhs, apply_matmul),
        rule("scalar-mul-out-of-reshape", "layout", "reshape(x·c, s) = reshape(x, s)·c for a scalar constant c", scalar_out_of_reshape, apply_scalar_reshape),
        rule("scalar-mul-out-of-permute", "layout", "permute(x·c, p) = permute(x, p)·c for a scalar constant c", scalar_out_of_permute, apply_scalar_permute),
    ]
}

/// The single operand of the nodes of class `c` with op `want` (exact op equality).
fn operands_of(eg: &TEGraph, c: Id, pred: impl Fn(&Op) -> bool + 'static) -> Vec<(Op, Id)> {
    nodes_where(eg, c, pred).map(|n| (n.op.clone(), eg.find(n.children[0]))).collect()
}

fn apply_same(_: &mut TEGraph, _: Id, x: &Id) -> Option<Id> {
    Some(*x)
}

/// reshape(x) to the root's shape.
fn apply_reshape(eg: &mut TEGraph, root: Id, x: &Id) -> Option<Id> {
    let (s, d) = (data(eg, root).shape.clone(), data(eg, *x).dtype);
    add(eg, ENode::typed(Op::Reshape, s, d, &[*x]))
}

fn apply_expand(eg: &mut TEGraph, root: Id, x: &Id) -> Option<Id> {
    let (s, d) = (data(eg, root).shape.clone(), data(eg, *x).dtype);
    add(eg, ENode::typed(Op::Expand, s, d, &[*x]))
}

fn reshape_reshape(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for (_, a) in operands_of(eg, c, |o| *o == Op::Reshape) {
        v.extend(operands_of(eg, a, |o| *o == Op::Reshape).into_iter().map(|(_, x)| x));
    }
    v
}

fn reshape_identity(eg: &TEGraph, c: Id) -> Vec<Id> {
    operands_of(eg, c, |o| *o == Op::Reshape).into_iter().map(|(_, x)| x).filter(|&x| shape(eg, x) == shape(eg, c) && x != eg.find(c)).collect()
}

fn permute_permute(eg: &TEGraph, c: Id) -> Vec<(Id, Vec<usize>)> {
    let mut v = Vec::new();
    for (op, a) in operands_of(eg, c, |o| matches!(o, Op::Permute { .. })) {
        let Op::Permute { perm: p } = op else { continue };
        for (op2, x) in operands_of(eg, a, |o| matches!(o, Op::Permute { .. })) {
            let Op::Permute { perm: q } = op2 else { continue };
            v.push((x, p.iter().map(|&i| q[i]).collect()));
        }
    }
    v
}

fn apply_permute(eg: &mut TEGraph, _: Id, (x, perm): &(Id, Vec<usize>)) -> Option<Id> {
    add_op(eg, Op::Permute { perm: perm.clone() }, &[*x])
}

fn permute_identity(eg: &TEGraph, c: Id) -> Vec<Id> {
    operands_of(eg, c, |o| matches!(o, Op::Permute { perm } if perm.iter().enumerate().all(|(i, &p)| i == p)))
        .into_iter()
        .map(|(_, x)| x)
        .filter(|&x| x != eg.find(c))
        .collect()
}

fn permute_unit_dims(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for (op, x) in operands_of(eg, c, |o| matches!(o, Op::Permute { .. })) {
        let Op::Permute { perm } = op else { continue };
        let s = shape(eg, x);
        let identity = perm.iter().enumerate().all(|(i, &p)| i == p);
        let moved: Vec<usize> = perm.iter().copied().filter(|&p| s[p] != 1).collect();
        if !identity && moved.windows(2).all(|w| w[0] < w[1]) && !matches!(data(eg, x).dtype, DType::Quant(_)) {
            v.push(x);
        }
    }
    v
}

fn expand_expand(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for (_, a) in operands_of(eg, c, |o| *o == Op::Expand) {
        v.extend(operands_of(eg, a, |o| *o == Op::Expand).into_iter().map(|(_, x)| x));
    }
    v
}

fn expand_identity(eg: &TEGraph, c: Id) -> Vec<Id> {
    operands_of(eg, c, |o| *o == Op::Expand).into_iter().map(|(_, x)| x).filter(|&x| shape(eg, x) == shape(eg, c) && x != eg.find(c)).collect()
}

fn slice_full(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for (op, x) in operands_of(eg, c, |o| matches!(o, Op::Slice { .. })) {
        if let Op::Slice { axis, start: 0, end } = op {
            if shape(eg, x).get(axis) == Some(&end) && x != eg.find(c) {
                v.push(x);
            }
        }
    }
    v
}

fn slice_slice(eg: &TEGraph, c: Id) -> Vec<(Id, usize, usize, usize)> {
    let mut v = Vec::new();
    for (op, y) in operands_of(eg, c, |o| matches!(o, Op::Slice { .. })) {
        let Op::Slice { axis, start: s2, end: e2 } = op else { continue };
        for (op2, x) in operands_of(eg, y, move |o| matches!(o, Op::Slice { axis: a, .. } if *a == axis)) {
            let Op::Slice { start: s1, .. } = op2 else { continue };
            v.push((x, axis, s1 + s2, s1 + e2));
        }
    }
    v
}

fn apply_slice(eg: &mut TEGraph, _: Id, &(x, axis, start, end): &(Id, usize, usize, usize)) -> Option<Id> {
    add_op(eg, Op::Slice { axis, start, end }, &[x])
}

/// Sources `x` such that some slice node of class `c` reads `x[start..end]` along `axis`.
fn slices_of(eg: &TEGraph, c: Id, axis: usize, start: usize) -> Vec<(Id, usize)> {
    operands_of(eg, c, move |o| matches!(o, Op::Slice { axis: a, start: s, .. } if *a == axis && *s == start))
        .into_iter()
        .filter_map(|(op, x)| match op {
            Op::Slice { end, .. } => Some((x, end)),
            _ => None,
        })
        .collect()
}

fn concat_slices(eg: &TEGraph, c: Id) -> Vec<Id> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::Concat { .. })) {
        let Op::Concat { axis } = n.op else { continue };
        'cand: for (x, mut at) in slices_of(eg, n.children[0], axis, 0) {
            for &ch in &n.children[1..] {
                match slices_of(eg, ch, axis, at).into_iter().find(|&(y, _)| y == x) {
                    Some((_, end)) => at = end,
                    None => continue 'cand,
                }
            }
            if shape(eg, x).get(axis) == Some(&at) && shape(eg, x) == shape(eg, c) && !v.contains(&x) {
                v.push(x);
            }
        }
    }
    v
}

fn matmul_transposed_rhs(eg: &TEGraph, c: Id) -> Vec<(Id, Id, bool)> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| matches!(o, Op::MatMul { .. })) {
        let Op::MatMul { transpose_rhs } = n.op else { continue };
        let a = eg.find(n.children[0]);
        for (op, b) in operands_of(eg, n.children[1], |o| matches!(o, Op::Permute { .. })) {
            let Op::Permute { perm } = op else { continue };
            let r = perm.len();
            let swap_last = r >= 2 && perm[r - 2] == r - 1 && perm[r - 1] == r - 2 && perm[..r - 2].iter().enumerate().all(|(i, &p)| i == p);
            if swap_last && data(eg, b).dtype == DType::F32 {
                v.push((a, b, !transpose_rhs));
            }
        }
    }
    v
}

fn apply_matmul(eg: &mut TEGraph, _: Id, &(a, b, t): &(Id, Id, bool)) -> Option<Id> {
    add_op(eg, Op::MatMul { transpose_rhs: t }, &[a, b])
}

/// `(x, c)` with class `y` holding `x·c` for a scalar f32 constant `c` that does not
/// broadcast `x`.
fn scaled(eg: &TEGraph, y: Id) -> Vec<(Id, Id)> {
    binary(eg, y, BinaryOp::Mul)
        .into_iter()
        .filter(|&(x, k)| scalar_f32(eg, k).is_some() && scalar_f32(eg, x).is_none() && shape(eg, x) == shape(eg, y))
        .collect()
}

fn scalar_out_of_reshape(eg: &TEGraph, c: Id) -> Vec<(Id, Id)> {
    let mut v = Vec::new();
    for (_, y) in operands_of(eg, c, |o| *o == Op::Reshape) {
        v.extend(scaled(eg, y));
    }
    v
}

fn apply_scalar_reshape(eg: &mut TEGraph, root: Id, &(x, k): &(Id, Id)) -> Option<Id> {
    let r = apply_reshape(eg, root, &x)?;
    add_op(eg, Op::Binary(BinaryOp::Mul), &[r, k])
}

fn scalar_out_of_permute(eg: &TEGraph, c: Id) -> Vec<(Id, Id, Vec<usize>)> {
    let mut v = Vec::new();
    for (op, y) in operands_of(eg, c, |o| matches!(o, Op::Permute { .. })) {
        let Op::Permute { perm } = op else { continue };
        v.extend(scaled(eg, y).into_iter().map(|(x, k)| (x, k, perm.clone())));
    }
    v
}

fn apply_scalar_permute(eg: &mut TEGraph, _: Id, (x, k, perm): &(Id, Id, Vec<usize>)) -> Option<Id> {
    let p = add_op(eg, Op::Permute { perm: perm.clone() }, &[*x])?;
    add_op(eg, Op::Binary(BinaryOp::Mul), &[p, *k])
}

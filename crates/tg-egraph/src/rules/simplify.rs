//! Simplification: algebraic identities and constant folding of scalars. Bounded: every
//! rule removes an op or replaces scalar arithmetic by a constant; there is no free
//! associativity or commutativity.

use super::{add_op, add_scalar, binary, data, nodes_where, rule, scalar_f32, shape, unary, Rule};
use crate::TEGraph;
use egg::Id;
use tg_ir::{BinaryOp, DType, Op, UnaryOp};

pub(super) fn rules() -> Vec<Rule> {
    vec![
        rule("mul-one", "simplify", "x·1 = 1·x = x (1 a scalar constant)", |eg, c| identity(eg, c, BinaryOp::Mul, 1.0, true), |_, _, x| Some(*x)),
        rule("add-zero", "simplify", "x + 0 = 0 + x = x (0 a scalar constant)", |eg, c| identity(eg, c, BinaryOp::Add, 0.0, true), |_, _, x| Some(*x)),
        rule("sub-zero", "simplify", "x − 0 = x (0 a scalar constant)", |eg, c| identity(eg, c, BinaryOp::Sub, 0.0, false), |_, _, x| Some(*x)),
        rule("div-one", "simplify", "x / 1 = x (1 a scalar constant)", |eg, c| identity(eg, c, BinaryOp::Div, 1.0, false), |_, _, x| Some(*x)),
        rule("neg-neg", "simplify", "−(−x) = x", neg_neg, |_, _, x| Some(*x)),
        rule("cast-same", "simplify", "cast(x, dtype(x)) = x", cast_same, |_, _, x| Some(*x)),
        rule("fold-unary", "simplify", "f(c) = f(c) evaluated, for a scalar f32 constant c", fold_unary, |eg, _, v| add_scalar(eg, *v)),
        rule("fold-binary", "simplify", "c1 ∘ c2 = (c1 ∘ c2) evaluated, for scalar f32 constants and ∘ in + − · / max min", fold_binary, |eg, _, v| add_scalar(eg, *v)),
        rule("fold-scalar-mul", "simplify", "(x·c1)·c2 = x·(c1·c2) for scalar f32 constants c1, c2", fold_scalar_mul, |eg, _, &(x, k)| {
            let k = add_scalar(eg, k)?;
            add_op(eg, Op::Binary(BinaryOp::Mul), &[x, k])
        }),
    ]
}

/// Operands `x` of `x op e` (and `e op x` when `commutative`) in class `c` where `e` is
/// the scalar constant `value` of `x`'s dtype and the result has `x`'s shape.
fn identity(eg: &TEGraph, c: Id, op: BinaryOp, value: f64, commutative: bool) -> Vec<Id> {
    let mut v = Vec::new();
    for n in nodes_where(eg, c, |o| *o == Op::Binary(op)) {
        let (a, b) = (eg.find(n.children[0]), eg.find(n.children[1]));
        let mut try_pair = |x: Id, e: Id| {
            let (dx, de) = (data(eg, x), data(eg, e));
            if de.shape.is_empty() && de.constant == Some(value) && dx.dtype != DType::Bool && dx.shape == data(eg, c).shape && x != eg.find(c) && !v.contains(&x) {
                v.push(x);
            }
        };
        try_pair(a, b);
        if commutative {
            try_pair(b, a);
        }
    }
    v
}

fn neg_neg(eg: &TEGraph, c: Id) -> Vec<Id> {
    unary(eg, c, UnaryOp::Neg).into_iter().flat_map(|y| unary(eg, y, UnaryOp::Neg)).filter(|&x| x != eg.find(c)).collect()
}

fn cast_same(eg: &TEGraph, c: Id) -> Vec<Id> {
    nodes_where(eg, c, |o| matches!(o, Op::Cast { .. }))
        .filter_map(|n| {
            let x = eg.find(n.children[0]);
            (matches!(n.op, Op::Cast { to } if to == data(eg, x).dtype) && x != eg.find(c)).then_some(x)
        })
        .collect()
}

/// Folded values are kept only when finite: an infinity or NaN stays an op, so folding
/// never changes how a non-finite value arises.
fn fold_unary(eg: &TEGraph, c: Id) -> Vec<f64> {
    if data(eg, c).constant.is_some() {
        return vec![];
    }
    nodes_where(eg, c, |o| matches!(o, Op::Unary(_)))
        .filter_map(|n| match n.op {
            Op::Unary(u) => scalar_f32(eg, n.children[0]).map(|x| u.eval_f64(x)).filter(|v| v.is_finite()),
            _ => None,
        })
        .collect()
}

fn fold_binary(eg: &TEGraph, c: Id) -> Vec<f64> {
    if data(eg, c).constant.is_some() || data(eg, c).dtype != DType::F32 {
        return vec![];
    }
    nodes_where(eg, c, |o| matches!(o, Op::Binary(BinaryOp::Add | BinaryOp::Sub | BinaryOp::Mul | BinaryOp::Div | BinaryOp::Max | BinaryOp::Min)))
        .filter_map(|n| {
            let (a, b) = (scalar_f32(eg, n.children[0])?, scalar_f32(eg, n.children[1])?);
            let Op::Binary(op) = n.op else { return None };
            let v = op.eval_f64(a, b);
            v.is_finite().then_some(v)
        })
        .collect()
}

fn fold_scalar_mul(eg: &TEGraph, c: Id) -> Vec<(Id, f64)> {
    let mut v = Vec::new();
    for (y, k2) in binary(eg, c, BinaryOp::Mul) {
        let Some(c2) = scalar_f32(eg, k2) else { continue };
        for (x, k1) in binary(eg, y, BinaryOp::Mul) {
            let Some(c1) = scalar_f32(eg, k1) else { continue };
            let p = c1 * c2;
            if scalar_f32(eg, x).is_none() && shape(eg, x) == shape(eg, c) && p.is_finite() && !v.contains(&(x, p)) {
                v.push((x, p));
            }
        }
    }
    v
}

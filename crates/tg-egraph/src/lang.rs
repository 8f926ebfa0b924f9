//! The IR as an egg language: one e-node per IR node, the op (with its attributes) plus
//! the declared type where the op takes it from the node, children as e-class ids.

use egg::{Id, Language};
use smallvec::SmallVec;
use std::cmp::Ordering;
use std::fmt;
use tg_ir::{DType, Op, Shape};

/// An e-node: an IR [`Op`] applied to e-classes.
///
/// Ops whose result type is not inferred from their operands (sources, `Reshape`,
/// `Expand`) carry it in `ty`, so that e.g. two reshapes of one tensor to different shapes
/// are different nodes. Everything that distinguishes two computations is in the node, so
/// hash-consing merges exactly the structurally identical ones.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ENode {
    /// The op with its attributes (axis, permutation, epsilon, ...).
    pub op: Op,
    /// The declared shape and dtype, for ops that take them from the node.
    pub ty: Option<(Shape, DType)>,
    /// Operand classes, in the op's order.
    pub children: SmallVec<[Id; 4]>,
}

/// True for ops whose shape/dtype come from the node rather than from inference.
pub fn takes_declared_type(op: &Op) -> bool {
    matches!(op, Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::Constant { .. } | Op::Iota { .. } | Op::Reshape | Op::Expand)
}

impl ENode {
    /// A node of an op that infers its type from its operands.
    pub fn new(op: Op, children: &[Id]) -> ENode {
        ENode { op, ty: None, children: children.iter().copied().collect() }
    }

    /// A node with a declared shape and dtype (sources, reshape, expand).
    pub fn typed(op: Op, shape: Shape, dtype: DType, children: &[Id]) -> ENode {
        ENode { op, ty: Some((shape, dtype)), children: children.iter().copied().collect() }
    }
}

impl fmt::Display for ENode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (&self.op, &self.ty) {
            (Op::Reshape | Op::Expand | Op::Iota { .. }, Some((s, _))) => write!(f, "{}{s:?}", self.op.name()),
            _ => f.write_str(&self.op.name()),
        }
    }
}

// ---- A total order on nodes (egg keeps the nodes of a class sorted). Ops compare by
// variant, then attributes; then the declared type; then the children.

fn variant(op: &Op) -> u8 {
    match op {
        Op::Input { .. } => 0,
        Op::Weight { .. } => 1,
        Op::Constant { .. } => 2,
        Op::Iota { .. } => 3,
        Op::Unary(_) => 4,
        Op::Binary(_) => 5,
        Op::Compare(_) => 6,
        Op::Where => 7,
        Op::Cast { .. } => 8,
        Op::Reduce { .. } => 9,
        Op::MatMul { .. } => 10,
        Op::Reshape => 11,
        Op::Permute { .. } => 12,
        Op::Expand => 13,
        Op::Slice { .. } => 14,
        Op::Concat { .. } => 15,
        Op::Gather => 16,
        Op::RmsNorm { .. } => 17,
        Op::RopeNeox => 18,
        Op::GeluTanh => 19,
        Op::GatedGelu => 20,
        Op::Softmax => 21,
        Op::Attention { .. } => 22,
        Op::RmsNormRopeNeox { .. } => 23,
        Op::AddRmsNorm { .. } => 24,
        Op::AttentionSeqMajor { .. } => 25,
        Op::MatMulAdd { .. } => 26,
        Op::State { .. } => 27,
        Op::StoreRows { .. } => 28,
        // Never an e-node (loading unions its ways), but ordered all the same.
        Op::Alternatives => 29,
        Op::Conv { .. } => 30,
        Op::Im2Col { .. } => 31,
        Op::Pool { .. } => 32,
        Op::ConvBias { .. } => 33,
        Op::GroupNorm { .. } => 34,
    }
}

fn dtype_key(d: DType) -> (u8, u32) {
    match d {
        DType::F32 => (0, 0),
        DType::I32 => (1, 0),
        DType::Bool => (2, 0),
        DType::Quant(t) => (3, t as u32),
    }
}

/// Attributes of an op as comparable values (strings for names, integers otherwise).
fn attrs(op: &Op) -> (Option<&str>, SmallVec<[u64; 4]>) {
    let v = |xs: &[u64]| xs.iter().copied().collect::<SmallVec<[u64; 4]>>();
    match op {
        Op::Input { name } | Op::Weight { name } | Op::State { name } => (Some(name.as_str()), SmallVec::new()),
        Op::StoreRows { axis } => (None, v(&[*axis as u64])),
        Op::Constant { bits } => (None, v(&[*bits])),
        Op::Iota { axis } => (None, v(&[*axis as u64])),
        Op::Unary(u) => (None, v(&[*u as u64])),
        Op::Binary(b) => (None, v(&[*b as u64])),
        Op::Compare(c) => (None, v(&[*c as u64])),
        Op::Cast { to } => {
            let (a, b) = dtype_key(*to);
            (None, v(&[a as u64, b as u64]))
        }
        Op::Reduce { op, axis } => (None, v(&[*op as u64, *axis as u64])),
        Op::MatMul { transpose_rhs } | Op::MatMulAdd { transpose_rhs } => (None, v(&[*transpose_rhs as u64])),
        Op::Permute { perm } => (None, perm.iter().map(|&p| p as u64).collect()),
        Op::Slice { axis, start, end } => (None, v(&[*axis as u64, *start as u64, *end as u64])),
        Op::Concat { axis } => (None, v(&[*axis as u64])),
        Op::RmsNorm { eps_bits } | Op::RmsNormRopeNeox { eps_bits } | Op::AddRmsNorm { eps_bits } => (None, v(&[*eps_bits])),
        Op::Attention { scale_bits } | Op::AttentionSeqMajor { scale_bits } => (None, v(&[*scale_bits])),
        Op::Conv { window, groups } | Op::Im2Col { window, groups } => (None, window_key(window, *groups as u64)),
        Op::Pool { kind, window } => (None, window_key(window, *kind as u64)),
        Op::ConvBias { window, groups, act } => {
            let mut k = window_key(window, *groups as u64);
            k.extend(act_key(*act));
            (None, k)
        }
        Op::GroupNorm { groups, eps_bits, act } => {
            let mut k = v(&[*groups as u64, *eps_bits]);
            k.extend(act_key(*act));
            (None, k)
        }
        Op::Where | Op::Alternatives | Op::Reshape | Op::Expand | Op::Gather | Op::RopeNeox | Op::GeluTanh | Op::GatedGelu | Op::Softmax => (None, SmallVec::new()),
    }
}

/// An activation as integers: its variant, then its parameters.
fn act_key(a: tg_ir::Act) -> SmallVec<[u64; 4]> {
    match a {
        tg_ir::Act::None => SmallVec::from_slice(&[0]),
        tg_ir::Act::Relu => SmallVec::from_slice(&[1]),
        tg_ir::Act::LeakyRelu { alpha_bits } => SmallVec::from_slice(&[2, alpha_bits]),
        tg_ir::Act::Silu => SmallVec::from_slice(&[3]),
        tg_ir::Act::LeakyReluFloor { alpha_bits, floor_bits } => SmallVec::from_slice(&[4, alpha_bits, floor_bits]),
    }
}

/// A window's lists (each prefixed by its length, so the key is unambiguous) after `first`.
fn window_key(w: &tg_ir::Window, first: u64) -> SmallVec<[u64; 4]> {
    let mut k: SmallVec<[u64; 4]> = SmallVec::new();
    k.push(first);
    for list in [&w.size, &w.stride, &w.dilation, &w.pad_begin, &w.pad_end] {
        k.push(list.len() as u64);
        k.extend(list.iter().map(|&x| x as u64));
    }
    k
}

fn cmp_op(a: &Op, b: &Op) -> Ordering {
    variant(a).cmp(&variant(b)).then_with(|| attrs(a).cmp(&attrs(b)))
}

fn cmp_ty(a: &Option<(Shape, DType)>, b: &Option<(Shape, DType)>) -> Ordering {
    let key = |t: &Option<(Shape, DType)>| t.as_ref().map(|(s, d)| (s.clone(), dtype_key(*d)));
    match (a, b) {
        (None, None) => Ordering::Equal,
        _ => key(a).cmp(&key(b)),
    }
}

impl PartialOrd for ENode {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for ENode {
    fn cmp(&self, other: &Self) -> Ordering {
        cmp_op(&self.op, &other.op).then_with(|| cmp_ty(&self.ty, &other.ty)).then_with(|| self.children.cmp(&other.children))
    }
}

impl Language for ENode {
    type Discriminant = u8;

    fn discriminant(&self) -> u8 {
        variant(&self.op)
    }

    fn matches(&self, other: &Self) -> bool {
        self.op == other.op && self.ty == other.ty && self.children.len() == other.children.len()
    }

    fn children(&self) -> &[Id] {
        &self.children
    }

    fn children_mut(&mut self) -> &mut [Id] {
        &mut self.children
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tg_ir::{BinaryOp, ReduceOp, UnaryOp};

    #[test]
    fn order_is_consistent_with_equality() {
        let ops = [
            Op::Input { name: "a".into() },
            Op::Input { name: "b".into() },
            Op::Constant { bits: 1.0f64.to_bits() },
            Op::Unary(UnaryOp::Exp),
            Op::Unary(UnaryOp::Neg),
            Op::Binary(BinaryOp::Add),
            Op::Reduce { op: ReduceOp::Sum, axis: 1 },
            Op::Reduce { op: ReduceOp::Sum, axis: 0 },
            Op::Permute { perm: vec![1, 0] },
            Op::Permute { perm: vec![0, 1] },
            Op::Cast { to: DType::I32 },
            Op::Cast { to: DType::F32 },
        ];
        for a in &ops {
            for b in &ops {
                let (na, nb) = (ENode::new(a.clone(), &[]), ENode::new(b.clone(), &[]));
                assert_eq!(na.cmp(&nb) == Ordering::Equal, na == nb, "{a:?} vs {b:?}");
                assert_eq!(na.cmp(&nb), nb.cmp(&na).reverse());
            }
        }
        let r1 = ENode::typed(Op::Reshape, vec![2, 3], DType::F32, &[Id::from(0)]);
        let r2 = ENode::typed(Op::Reshape, vec![3, 2], DType::F32, &[Id::from(0)]);
        assert_ne!(r1.cmp(&r2), Ordering::Equal);
        assert!(!r1.matches(&r2));
    }
}

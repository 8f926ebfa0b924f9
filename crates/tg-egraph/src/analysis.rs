//! Facts about an e-class: shape, dtype, scalar constant value, input independence.

use crate::ENode;
use egg::{Analysis, DidMerge, EGraph, Id};
use tg_ir::{DType, Op, Shape};

/// The e-graph of tensor programs.
pub type TEGraph = EGraph<ENode, TensorAnalysis>;

/// What is known about every value in an e-class.
///
/// All members of a class compute the same tensor, so shape and dtype are the same for all
/// of them: a rule that merges classes of different types is unsound, and the merge is
/// recorded as an internal error (see [`TensorAnalysis::errors`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ClassData {
    /// Shape of the value.
    pub shape: Shape,
    /// Dtype of the value.
    pub dtype: DType,
    /// The value, when the class is a scalar constant.
    pub constant: Option<f64>,
    /// True when the value does not depend on any runtime input (only on weights,
    /// constants and iotas), so it could be computed once per plan.
    pub input_free: bool,
    /// True when the class holds a weight (`Op::Weight`): kernel selection reads weights in
    /// place (`tg_runtime::registry::matmul_reads_weight`).
    pub weight: bool,
}

/// The devices a rewrite targets: a fused op is offered only where one of their kernel
/// registries implements it on the operands' shapes. Empty means the CPU.
#[derive(Clone, Default)]
pub struct Targets(pub Vec<std::sync::Arc<dyn tg_runtime::Device>>);

impl std::fmt::Debug for Targets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.0.iter().map(|d| d.name()).collect();
        write!(f, "Targets({names:?})")
    }
}

impl PartialEq for Targets {
    fn eq(&self, other: &Targets) -> bool {
        self.0.len() == other.0.len() && self.0.iter().zip(&other.0).all(|(a, b)| a.name() == b.name())
    }
}

impl Targets {
    /// Whether some target runs the kernel of `op` on contiguous operands `ins` writing `out`.
    pub fn accept(&self, op: &Op, ins: &[tg_runtime::Operand], out: (&[usize], DType)) -> bool {
        if self.0.is_empty() {
            return tg_runtime::cpu_registry().accepts_op(op, ins, out, false);
        }
        self.0.iter().any(|d| d.registry().accepts_op(op, ins, out, false))
    }
}

/// The analysis: computes [`ClassData`] for new nodes and merges it monotonically.
#[derive(Debug, Default, Clone)]
pub struct TensorAnalysis {
    /// Internal errors seen so far: nodes whose type does not infer, merges of classes
    /// whose types or constant values differ. Non-empty means a rule is unsound or a guard
    /// is missing; [`crate::saturate`] stops and reports them.
    pub errors: Vec<String>,
    /// The devices whose kernel registries guard the fusion rules.
    pub targets: Targets,
}

impl TensorAnalysis {
    /// Infers shape and dtype of `node` over the current e-graph, checking it with the IR's
    /// own type inference.
    pub fn infer(egraph: &TEGraph, node: &ENode) -> Result<(Shape, DType), tg_ir::IrError> {
        let ins: Vec<(&[usize], DType)> = node.children.iter().map(|&c| (egraph[c].data.shape.as_slice(), egraph[c].data.dtype)).collect();
        tg_ir::infer(&node.op, &ins, node.ty.as_ref().map(|(s, d)| (s.as_slice(), *d)))
    }
}

impl Analysis<ENode> for TensorAnalysis {
    type Data = ClassData;

    fn make(egraph: &mut TEGraph, enode: &ENode, _id: Id) -> ClassData {
        let input_free = !matches!(enode.op, Op::Input { .. }) && enode.children.iter().all(|&c| egraph[c].data.input_free);
        let (shape, dtype) = match Self::infer(egraph, enode) {
            Ok(t) => t,
            Err(e) => {
                egraph.analysis.errors.push(format!("ill-typed node {enode}: {e}"));
                enode.ty.clone().unwrap_or((vec![], DType::F32))
            }
        };
        let constant = match enode.op {
            Op::Constant { bits } if shape.is_empty() => Some(f64::from_bits(bits)),
            _ => None,
        };
        ClassData { shape, dtype, constant, input_free, weight: matches!(enode.op, Op::Weight { .. }) }
    }

    fn merge(&mut self, a: &mut ClassData, b: ClassData) -> DidMerge {
        if a.shape != b.shape || a.dtype != b.dtype {
            self.errors.push(format!("merged classes of different types: {:?} {} and {:?} {}", a.shape, a.dtype, b.shape, b.dtype));
            return DidMerge(false, true);
        }
        let mut changed_a = false;
        let mut changed_b = false;
        match (a.constant, b.constant) {
            (Some(x), Some(y)) => {
                // Equal values (0 and -0 compare equal; NaN equals NaN here) are one constant.
                if x != y && !(x.is_nan() && y.is_nan()) {
                    self.errors.push(format!("merged classes holding different constants {x} and {y}"));
                }
            }
            (None, Some(y)) => {
                a.constant = Some(y);
                changed_a = true;
            }
            (Some(_), None) => changed_b = true,
            (None, None) => {}
        }
        if a.weight != b.weight {
            if b.weight {
                a.weight = true;
                changed_a = true;
            } else {
                changed_b = true;
            }
        }
        if a.input_free != b.input_free {
            if b.input_free {
                a.input_free = true;
                changed_a = true;
            } else {
                changed_b = true;
            }
        }
        DidMerge(changed_a, changed_b)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn conflicting_merges_are_recorded_not_panics() {
        let mut eg = TEGraph::new(TensorAnalysis::default());
        let a = eg.add(ENode::typed(Op::Input { name: "a".into() }, vec![2, 3], DType::F32, &[]));
        let b = eg.add(ENode::typed(Op::Input { name: "b".into() }, vec![3, 2], DType::F32, &[]));
        let one = eg.add(ENode::typed(Op::Constant { bits: 1f64.to_bits() }, vec![], DType::F32, &[]));
        let two = eg.add(ENode::typed(Op::Constant { bits: 2f64.to_bits() }, vec![], DType::F32, &[]));
        assert!(eg.analysis.errors.is_empty());
        eg.union(a, b);
        eg.union(one, two);
        eg.rebuild();
        assert_eq!(eg.analysis.errors.len(), 2, "{:?}", eg.analysis.errors);
        // An ill-typed node is recorded too.
        let _ = eg.add(ENode::new(Op::Reduce { op: tg_ir::ReduceOp::Sum, axis: 5 }, &[a]));
        assert!(eg.analysis.errors.iter().any(|e| e.contains("ill-typed")), "{:?}", eg.analysis.errors);
    }

    #[test]
    fn constants_and_input_freedom_merge_monotonically() {
        let mut eg = TEGraph::new(TensorAnalysis::default());
        let x = eg.add(ENode::typed(Op::Input { name: "x".into() }, vec![], DType::F32, &[]));
        let k = eg.add(ENode::typed(Op::Constant { bits: 3f64.to_bits() }, vec![], DType::F32, &[]));
        assert!(!eg[x].data.input_free && eg[k].data.input_free);
        eg.union(x, k);
        eg.rebuild();
        assert_eq!(eg[x].data.constant, Some(3.0));
        assert!(eg[x].data.input_free);
        assert!(eg.analysis.errors.is_empty());
    }
}

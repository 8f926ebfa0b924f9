//! Rule tables by family. Every rule has a unique name, a family and a one-line algebra
//! statement; [`catalog`] lists them all (the soundness test suite checks that each one has
//! a test case).
//!
//! A rule is a searcher (a Rust function that matches its left side in one e-class, with
//! its guards: shapes, axes, constant values, the fused kernels' operand contracts) and an
//! applier (adds the right side and merges it into the class). Commutative operands are
//! tried in both orders inside the searcher; there are no associativity or commutativity
//! rules, so nothing explodes.

mod cnn;
mod fusion;
mod layout;
mod simplify;

pub use fusion::kernel_accepts;

use crate::{ClassData, ENode, TEGraph, TensorAnalysis};
use egg::{Applier, Id, PatternAst, Rewrite, SearchMatches, Searcher, Subst, Symbol, Var};
use smallvec::SmallVec;
use tg_ir::{BinaryOp, DType, Op, UnaryOp};

/// Description of one rule.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct RuleInfo {
    /// Unique name (as in reports and `--no-rules`).
    pub name: &'static str,
    /// Family (`layout`, `simplify`, `fusion.rmsnorm`, ...).
    pub family: &'static str,
    /// The identity the rule applies, in one line.
    pub algebra: &'static str,
}

/// Rule families. Disabling a family disables every family below it (`fusion` disables
/// `fusion.rope`).
pub const FAMILIES: [&str; 15] = [
    "layout",
    "simplify",
    "fusion",
    "fusion.rmsnorm",
    "fusion.add-rmsnorm",
    "fusion.matmul-epilogue",
    "fusion.rope",
    "fusion.qknorm-rope",
    "fusion.gelu",
    "fusion.softmax",
    "fusion.attention",
    "fusion.activation",
    "fusion.conv",
    "fusion.group-norm",
    "conv-algorithm",
];

/// A rule: its description and the egg rewrite that applies it.
pub struct Rule {
    /// What it is.
    pub info: RuleInfo,
    /// The rewrite.
    pub rewrite: Rewrite<ENode, TensorAnalysis>,
}

/// Every rule, family by family.
pub fn all_rules() -> Vec<Rule> {
    let mut v = layout::rules();
    v.extend(simplify::rules());
    v.extend(fusion::rules());
    v.extend(cnn::rules());
    v
}

/// The descriptions of all rules.
pub fn catalog() -> Vec<RuleInfo> {
    all_rules().into_iter().map(|r| r.info).collect()
}

/// True when `family` is `disabled_entry` or below it.
pub fn family_within(family: &str, entry: &str) -> bool {
    family == entry || (family.starts_with(entry) && family.as_bytes().get(entry.len()) == Some(&b'.'))
}

// ---- The adapter between a (search, apply) pair of functions and egg's traits.

type SearchFn<M> = fn(&TEGraph, Id) -> Vec<M>;
type ApplyFn<M> = fn(&mut TEGraph, Id, &M) -> Option<Id>;

/// Searcher and applier of one rule. Matches carry rule-specific payloads (axes,
/// constants, ...) that egg's substitutions cannot hold, so the applier re-runs the search
/// on each matched class and applies every match it finds there.
struct FnRule<M> {
    search: SearchFn<M>,
    apply: ApplyFn<M>,
}

impl<M> Clone for FnRule<M> {
    fn clone(&self) -> Self {
        FnRule { search: self.search, apply: self.apply }
    }
}

impl<M: 'static> Searcher<ENode, TensorAnalysis> for FnRule<M> {
    fn search_eclass_with_limit(&self, egraph: &TEGraph, eclass: Id, limit: usize) -> Option<SearchMatches<'_, ENode>> {
        let n = (self.search)(egraph, eclass).len().min(limit);
        (n > 0).then(|| SearchMatches { eclass, substs: vec![Subst::default(); n], ast: None })
    }

    fn vars(&self) -> Vec<Var> {
        vec![]
    }
}

impl<M: 'static> Applier<ENode, TensorAnalysis> for FnRule<M> {
    fn apply_matches(&self, egraph: &mut TEGraph, matches: &[SearchMatches<ENode>], _rule: Symbol) -> Vec<Id> {
        let mut changed = Vec::new();
        for m in matches {
            changed.extend(self.apply_class(egraph, m.eclass, m.substs.len()));
        }
        changed
    }

    fn apply_one(&self, egraph: &mut TEGraph, eclass: Id, _subst: &Subst, _ast: Option<&PatternAst<ENode>>, _rule: Symbol) -> Vec<Id> {
        self.apply_class(egraph, eclass, 1)
    }
}

impl<M> FnRule<M> {
    fn apply_class(&self, egraph: &mut TEGraph, eclass: Id, limit: usize) -> Vec<Id> {
        let mut changed = Vec::new();
        let root = egraph.find(eclass);
        for m in (self.search)(egraph, root).into_iter().take(limit) {
            if let Some(new) = (self.apply)(egraph, root, &m) {
                let root = egraph.find(root);
                if egraph.union(root, new) {
                    changed.push(root);
                }
            }
        }
        changed
    }
}

/// Builds a rule from its description and functions.
fn rule<M: Send + Sync + 'static>(name: &'static str, family: &'static str, algebra: &'static str, search: SearchFn<M>, apply: ApplyFn<M>) -> Rule {
    let f = FnRule { search, apply };
    let rewrite = Rewrite::new(name, f.clone(), f).unwrap_or_else(|e| unreachable!("rules bind no variables: {e}"));
    Rule { info: RuleInfo { name, family, algebra }, rewrite }
}

// ---- Matching helpers shared by the rule tables.

pub(crate) fn data(eg: &TEGraph, c: Id) -> &ClassData {
    &eg[c].data
}

pub(crate) fn shape(eg: &TEGraph, c: Id) -> &[usize] {
    &eg[c].data.shape
}

pub(crate) fn same(eg: &TEGraph, a: Id, b: Id) -> bool {
    eg.find(a) == eg.find(b)
}

/// Nodes of class `c` whose op satisfies `pred`.
pub(crate) fn nodes_where<'a>(eg: &'a TEGraph, c: Id, pred: impl Fn(&Op) -> bool + 'a) -> impl Iterator<Item = &'a ENode> + 'a {
    eg[c].nodes.iter().filter(move |n| pred(&n.op))
}

/// Operand pairs `(a, b)` of the `op` nodes in class `c`; both orders for commutative ops.
pub(crate) fn binary(eg: &TEGraph, c: Id, op: BinaryOp) -> SmallVec<[(Id, Id); 4]> {
    let commutative = matches!(op, BinaryOp::Add | BinaryOp::Mul | BinaryOp::Max | BinaryOp::Min | BinaryOp::And | BinaryOp::Or);
    let mut v = SmallVec::new();
    for n in nodes_where(eg, c, |o| *o == Op::Binary(op)) {
        let (a, b) = (eg.find(n.children[0]), eg.find(n.children[1]));
        v.push((a, b));
        if commutative && a != b {
            v.push((b, a));
        }
    }
    v
}

/// Operands of the `op` nodes in class `c`.
pub(crate) fn unary(eg: &TEGraph, c: Id, op: UnaryOp) -> SmallVec<[Id; 2]> {
    nodes_where(eg, c, |o| *o == Op::Unary(op)).map(|n| eg.find(n.children[0])).collect()
}

/// True when class `c` holds `a op b` (either order for commutative ops).
pub(crate) fn has_binary(eg: &TEGraph, c: Id, op: BinaryOp, a: Id, b: Id) -> bool {
    let (a, b) = (eg.find(a), eg.find(b));
    binary(eg, c, op).iter().any(|&(x, y)| x == a && y == b)
}

/// The value of class `c` when it is an f32 scalar constant.
pub(crate) fn scalar_f32(eg: &TEGraph, c: Id) -> Option<f64> {
    let d = data(eg, c);
    (d.dtype == DType::F32 && d.shape.is_empty()).then_some(d.constant).flatten()
}

/// True when `v` equals `want` up to f32 rounding of the constant.
pub(crate) fn approx(v: f64, want: f64) -> bool {
    (v - want).abs() <= 1e-6 * want.abs().max(1e-30)
}

/// Adds a node after checking its type with the IR's inference. A node that does not
/// infer means a guard is missing: it is recorded as an internal error (which stops the
/// run) and not added.
pub(crate) fn add(eg: &mut TEGraph, node: ENode) -> Option<Id> {
    match TensorAnalysis::infer(eg, &node) {
        Ok(_) => Some(eg.add(node)),
        Err(e) => {
            eg.analysis.errors.push(format!("a rule built an ill-typed node {node}: {e}"));
            None
        }
    }
}

/// Adds `op(children)` (an op that infers its type).
pub(crate) fn add_op(eg: &mut TEGraph, op: Op, children: &[Id]) -> Option<Id> {
    add(eg, ENode::new(op, children))
}

/// Adds an f32 scalar constant.
pub(crate) fn add_scalar(eg: &mut TEGraph, v: f64) -> Option<Id> {
    add(eg, ENode::typed(Op::Constant { bits: v.to_bits() }, vec![], DType::F32, &[]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashSet;

    #[test]
    fn names_are_unique_and_families_known() {
        let cat = catalog();
        let mut seen = HashSet::new();
        for r in &cat {
            assert!(seen.insert(r.name), "duplicate rule name {}", r.name);
            assert!(FAMILIES.contains(&r.family), "rule {} has unknown family {}", r.name, r.family);
            assert!(!r.algebra.is_empty() && !r.algebra.contains('\n'), "rule {} needs a one-line algebra comment", r.name);
        }
        assert!(family_within("fusion.rope", "fusion"));
        assert!(!family_within("fusionx", "fusion"));
        assert!(!family_within("layout", "fusion"));
    }
}

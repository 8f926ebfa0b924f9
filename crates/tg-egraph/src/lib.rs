//! E-graph rewriting for Tensor Graphs.
//!
//! A [`tg_ir::Graph`] is loaded into an [`egg`] e-graph ([`load`]); named rules
//! ([`rules::catalog`]) add equivalent forms — collapsed views, simplified arithmetic, fused
//! ops — until saturation or a limit ([`saturate`]); an [`Extractor`] then picks one node
//! per class and the result is emitted as a verified graph ([`build_graph`]). [`rewrite`]
//! does all of it and returns a [`RewriteReport`].
//!
//! ```
//! use tg_ir::{DType, GraphBuilder, Op, ReduceOp, UnaryOp};
//! let mut b = GraphBuilder::new();
//! let x = b.input("x", &[4, 8], DType::F32).unwrap();
//! let w = b.weight("w", &[8], DType::F32).unwrap();
//! // RMSNorm in primitives.
//! let sq = b.mul(x, x).unwrap();
//! let ms = b.reduce_last(ReduceOp::Mean, sq).unwrap();
//! let eps = b.scalar(1e-6).unwrap();
//! let ms = b.add(ms, eps).unwrap();
//! let r = b.unary(UnaryOp::Rsqrt, ms).unwrap();
//! let y = b.mul(x, r).unwrap();
//! let y = b.mul(y, w).unwrap();
//! b.output("y", y).unwrap();
//! let g = b.finish().unwrap();
//!
//! let out = tg_egraph::rewrite(&g, &tg_egraph::RewriteOptions::default()).unwrap();
//! assert!(out.graph.nodes.iter().any(|n| matches!(n.op, Op::RmsNorm { .. })));
//! assert_eq!(out.report.saturation.applications["fuse-rmsnorm"], 1);
//! println!("{}", out.report);
//! ```
//!
//! Rule families can be switched off ([`RewriteOptions::disable`]) so that each gain is
//! attributable. Every rule has a soundness test (its two sides evaluated by the reference
//! interpreter on random shapes and values); `tests/soundness.rs` fails for a rule without
//! one.
#![warn(missing_docs)]

mod analysis;
mod budget;
mod convert;
pub mod extract;
mod lang;
mod plan;
pub mod rules;
mod saturate;

pub use analysis::{ClassData, TEGraph, Targets, TensorAnalysis};
pub use tg_runtime::Operand;

/// What kernel selection knows about the children of e-node `n`: shape, dtype, whether a weight.
pub(crate) fn operands<'a>(eg: &'a TEGraph, n: &ENode) -> Vec<Operand<'a>> {
    n.children.iter().map(|&ch| Operand { shape: &eg[ch].data.shape, dtype: eg[ch].data.dtype, weight: eg[ch].data.weight }).collect()
}
pub use budget::{kept_states, BudgetReport, KeptState, StateBudget};
pub use convert::{build_graph, build_graph_classes, canonical_outputs, enode_of, load, Choice, Loaded};
pub use egg::Id;
pub use extract::{graph_cost, CostModel, Extraction, Extractor, GreedyDagExtractor, KernelCost, Proof};
pub use lang::{takes_declared_type, ENode};
pub use plan::{planning_problem, planning_problem_on, Pin, PlaceTarget, Placed, Placement, PlacingExtractor, PlannerExtractor};
pub use rules::{catalog, kernel_accepts, RuleInfo, FAMILIES};
pub use saturate::{rewrite, rewrite_with, saturate, RewriteOptions, RewriteReport, Rewritten, SaturationReport, StopReason};

use thiserror::Error;

/// Errors of the rewriting stage.
#[derive(Debug, Error)]
pub enum EgraphError {
    /// The input graph is not valid IR.
    #[error("input graph: {0}")]
    Ir(#[from] tg_ir::IrError),
    /// Bad options (an unknown rule family, ...).
    #[error("rewrite options: {0}")]
    Options(String),
    /// A rewriter bug: an unsound rule (classes of different types merged), an ill-typed
    /// node built by a rule, an extracted graph that fails verification.
    #[error("internal rewriter error (please report): {0}")]
    Internal(String),
}

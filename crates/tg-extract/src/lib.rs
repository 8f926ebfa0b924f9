//! E-graph extraction with DAG cost.
//!
//! Given an e-graph (classes of equivalent nodes, each node with a cost and child
//! classes) and its root classes, choose one node for every *needed* class (the roots, and
//! every child class of a chosen node) so that the chosen sub-graph is acyclic, minimising
//! the **DAG cost**: the sum of the costs of the chosen nodes, each counted once however
//! many parents share it. This is decision 1 of the Tensor Graphs planner
//! (`docs/planner.md`), and the problem of extraction-gym.
//!
//! - [`EGraph`] / [`EGraphBuilder`]: the format-independent instance; [`read_json_file`]
//!   reads extraction-gym's serialized e-graphs.
//! - [`extract`]: the anytime solver. Preprocessing removes nodes that cannot be in an
//!   optimal extraction; a greedy DAG extraction, the optimal tree extraction and local
//!   search give an incumbent; a Lagrangian relaxation gives a proven lower bound and
//!   fixes nodes by reduced cost; a depth-first branch and bound then improves the
//!   incumbent until it is proven optimal or the time limit passes. The cheap bounds are
//!   tried on the greedy extraction first, so easy instances end in milliseconds, and every
//!   phase respects the time limit ([`Stats::phases`] times them).
//! - [`check`]: an independent checker that recomputes the DAG cost of any choice.
//!
//! ```
//! use tg_extract::{check, extract, EGraphBuilder, Options};
//! // r = f(a, b); a = x or h(b); b = y. Tree cost prefers x (1+3+4 = 8 against
//! // 1+(0.5+4)+4 = 9.5); DAG cost counts b once and prefers h(b): 1+0.5+4 = 5.5.
//! let mut e = EGraphBuilder::new();
//! let (r, a, b) = (e.add_class("r"), e.add_class("a"), e.add_class("b"));
//! e.add_node(b, "y", 4.0, []).unwrap();
//! e.add_node(a, "x", 3.0, []).unwrap();
//! let h = e.add_node(a, "h", 0.5, [b]).unwrap();
//! e.add_node(r, "f", 1.0, [a, b]).unwrap();
//! e.add_root(r).unwrap();
//! let g = e.build().unwrap();
//! let x = extract(&g, &Options::default()).unwrap();
//! assert!(x.optimal);
//! assert_eq!(x.dag_cost, 5.5);
//! assert!(x.choices.contains(&(a, h)));
//! assert_eq!(check(&g, &x.choices).unwrap(), x.dag_cost);
//! ```
#![warn(missing_docs)]

mod bits;
mod check;
mod graph;
mod greedy;
mod json;
mod lagrange;
mod lns;
mod local;
mod prep;
mod problem;
mod search;
mod solve;
#[cfg(test)]
mod tests;

pub use check::{check, CheckError};
pub use graph::{BuildError, ClassId, EGraph, EGraphBuilder, NodeId};
pub use json::{read_json, read_json_file, read_json_str, ReadError};
pub use solve::{extract, ExtractError, Extraction, Options, PhaseTimes, Stats};

//! The Tensor Graphs intermediate representation.
//!
//! A model is a [`Graph`]: a DAG of [`Node`]s, each applying one primitive [`Op`] (a closed,
//! hashable enum) to earlier nodes. Shapes are static and dtypes explicit; the [`GraphBuilder`]
//! infers and checks both as the graph is built, and [`verify`] re-checks a whole graph
//! independently (it is run between compiler stages). The [`interp`] module is the reference
//! interpreter: plain, obviously-correct implementations of every op, accumulating in f64,
//! that kernels, rewrites and plans are tested against.
#![warn(missing_docs)]

mod dtype;
mod graph;
mod host;
pub mod interp;
mod op;
/// Shape helpers: broadcasting, strides, element counts.
pub mod shape;
mod verify;
mod window;

pub use dtype::DType;
pub use graph::{Graph, GraphBuilder, Node, NodeId, Tensor, WeightInfo};
pub use host::{f32_bytes, HostData, HostTensor, WeightStore};
pub use op::{Act, BinaryOp, CmpOp, Op, ReduceOp, UnaryOp};
pub use shape::{broadcast_shapes, Shape};
pub use verify::{infer, verify, MAX_TENSOR_BYTES};
pub use window::{PoolKind, Window};

use thiserror::Error;

/// Errors raised while building or verifying a graph.
#[derive(Debug, Error, Clone, PartialEq)]
pub enum IrError {
    /// An op was applied to operands whose shapes it does not accept.
    #[error("{op}: shape mismatch: {detail}")]
    Shape {
        /// The op, as text.
        op: String,
        /// What is wrong.
        detail: String,
    },
    /// An op was applied to operands whose dtypes it does not accept.
    #[error("{op}: dtype mismatch: {detail}")]
    DType {
        /// The op, as text.
        op: String,
        /// What is wrong.
        detail: String,
    },
    /// An op got the wrong number of inputs.
    #[error("{op}: expected {expected} inputs, got {got}")]
    Arity {
        /// The op, as text.
        op: String,
        /// Expected count.
        expected: usize,
        /// Actual count.
        got: usize,
    },
    /// A node refers to a node that does not precede it.
    #[error("node {node}: input {input} does not precede it (graph must be topologically ordered)")]
    BadReference {
        /// The node.
        node: usize,
        /// The offending input id.
        input: usize,
    },
    /// A node's recorded shape or dtype differs from what its op infers.
    #[error("node {node} ({op}): recorded {recorded}, inferred {inferred}")]
    Inconsistent {
        /// The node.
        node: usize,
        /// The op, as text.
        op: String,
        /// What the node says.
        recorded: String,
        /// What inference says.
        inferred: String,
    },
    /// Two inputs, outputs or weights share a name, or a name is unknown.
    #[error("name error: {0}")]
    Name(String),
    /// Evaluation failed (reference interpreter): missing input, bad index...
    #[error("evaluation: {0}")]
    Eval(String),
}

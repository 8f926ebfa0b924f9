use crate::{BinaryOp, CmpOp, DType, IrError, Op, ReduceOp, Shape, UnaryOp};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// Index of a node in its graph. Nodes are topologically ordered: inputs precede users.
pub type NodeId = usize;

/// One operation applied to earlier nodes, with its inferred shape and dtype.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Node {
    /// The primitive op.
    pub op: Op,
    /// Operand nodes, in the op's order.
    pub inputs: Vec<NodeId>,
    /// Output shape.
    pub shape: Shape,
    /// Output dtype.
    pub dtype: DType,
}

/// Declared shape and dtype of a weight (named constant).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct WeightInfo {
    /// Name in the weight store.
    pub name: String,
    /// Logical shape.
    pub shape: Shape,
    /// Storage dtype.
    pub dtype: DType,
}

/// A tensor program: topologically ordered nodes and named outputs. A model is a pure
/// function from its inputs (and weights) to its outputs.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Graph {
    /// All nodes, inputs before users.
    pub nodes: Vec<Node>,
    /// Named outputs, in order.
    pub outputs: Vec<(String, NodeId)>,
}

impl Graph {
    /// The node with this id.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id]
    }

    /// Input nodes as (name, id), in node order.
    pub fn inputs(&self) -> Vec<(String, NodeId)> {
        self.nodes
            .iter()
            .enumerate()
            .filter_map(|(i, n)| match &n.op {
                Op::Input { name } => Some((name.clone(), i)),
                _ => None,
            })
            .collect()
    }

    /// Weights the graph reads, in node order.
    pub fn weights(&self) -> Vec<WeightInfo> {
        self.nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Weight { name } => Some(WeightInfo { name: name.clone(), shape: n.shape.clone(), dtype: n.dtype }),
                _ => None,
            })
            .collect()
    }

    /// Users of every node (ids of the nodes that read it), plus output references
    /// counted separately by [`Graph::is_output`].
    pub fn users(&self) -> Vec<Vec<NodeId>> {
        let mut u = vec![Vec::new(); self.nodes.len()];
        for (i, n) in self.nodes.iter().enumerate() {
            for &x in &n.inputs {
                if !u[x].contains(&i) {
                    u[x].push(i);
                }
            }
        }
        u
    }

    /// True if the node is one of the named outputs.
    pub fn is_output(&self, id: NodeId) -> bool {
        self.outputs.iter().any(|(_, o)| *o == id)
    }

    /// Nodes that some output or some state update ([`Op::StoreRows`], whose effect is seen
    /// by the next run) depends on (a mask over node ids); state updates as
    /// [`Graph::effect_roots`] says.
    pub fn live_mask(&self) -> Vec<bool> {
        let mut live = self.effect_roots();
        for (_, o) in &self.outputs {
            live[*o] = true;
        }
        for i in (0..self.nodes.len()).rev() {
            if live[i] {
                for &x in &self.nodes[i].inputs {
                    live[x] = true;
                }
            }
        }
        live
    }

    /// The state updates that must run whatever reads them: every [`Op::StoreRows`]; in a
    /// graph with [`Op::Alternatives`], only those nothing reads. There an update that is
    /// read runs where its reader does: an update read only by ways not taken (the rows of
    /// a state that only recomputing another value needs) is not part of the run.
    pub fn effect_roots(&self) -> Vec<bool> {
        let alternatives = self.has_alternatives();
        let mut read = vec![false; self.nodes.len()];
        if alternatives {
            for n in &self.nodes {
                for &x in &n.inputs {
                    read[x] = true;
                }
            }
        }
        self.nodes.iter().zip(&read).map(|(n, &r)| matches!(n.op, Op::StoreRows { .. }) && !r).collect()
    }

    /// True if some node offers [`Op::Alternatives`].
    pub fn has_alternatives(&self) -> bool {
        self.nodes.iter().any(|n| matches!(n.op, Op::Alternatives))
    }

    /// The graph with every [`Op::Alternatives`] replaced by its first way, and what only
    /// the other ways needed dropped (node order kept). What a graph computes when nothing
    /// chooses among its alternatives.
    pub fn resolve_alternatives(&self) -> Graph {
        // Follow first ways to a node that is not an alternatives node.
        let mut rep: Vec<NodeId> = (0..self.nodes.len()).collect();
        for (i, n) in self.nodes.iter().enumerate() {
            if matches!(n.op, Op::Alternatives) {
                if let Some(&first) = n.inputs.first() {
                    rep[i] = rep[first];
                }
            }
        }
        let mut live = self.effect_roots();
        for (_, o) in &self.outputs {
            live[rep[*o]] = true;
        }
        for i in (0..self.nodes.len()).rev() {
            if live[i] {
                for &x in &self.nodes[i].inputs {
                    live[rep[x]] = true;
                }
            }
        }
        let mut map = vec![usize::MAX; self.nodes.len()];
        let mut out = Graph::default();
        for (i, n) in self.nodes.iter().enumerate() {
            if live[i] && !matches!(n.op, Op::Alternatives) {
                let mut n = n.clone();
                n.inputs = n.inputs.iter().map(|&x| map[rep[x]]).collect();
                map[i] = out.nodes.len();
                out.nodes.push(n);
            }
        }
        out.outputs = self.outputs.iter().map(|(name, o)| (name.clone(), map[rep[*o]])).collect();
        out
    }

    /// Count of nodes per op name (for reports).
    pub fn op_histogram(&self) -> Vec<(String, usize)> {
        let mut h: HashMap<String, usize> = HashMap::new();
        for n in &self.nodes {
            let key = match &n.op {
                Op::Input { .. } => "input".to_string(),
                Op::Weight { .. } => "weight".to_string(),
                Op::Constant { .. } => "const".to_string(),
                Op::State { .. } => "state".to_string(),
                Op::Iota { .. } => "iota".to_string(),
                Op::Slice { .. } => "slice".to_string(),
                Op::Concat { .. } => "concat".to_string(),
                Op::Permute { .. } => "permute".to_string(),
                Op::Reduce { op, .. } => format!("reduce_{op:?}").to_lowercase(),
                o => o.name(),
            };
            *h.entry(key).or_default() += 1;
        }
        let mut v: Vec<_> = h.into_iter().collect();
        v.sort();
        v
    }
}

/// Handle to a node being built (a node id; `Copy`).
pub type Tensor = NodeId;

/// Builds a [`Graph`] node by node, inferring and checking shapes and dtypes as it goes.
/// Every method returns an [`IrError`] naming the op and the mismatch on bad operands.
#[derive(Debug, Default)]
pub struct GraphBuilder {
    graph: Graph,
    names: HashMap<String, NodeId>,
    consts: HashMap<(u64, DType), NodeId>,
}

impl GraphBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Shape of a built node.
    pub fn shape(&self, t: Tensor) -> &[usize] {
        &self.graph.nodes[t].shape
    }

    /// Dtype of a built node.
    pub fn dtype(&self, t: Tensor) -> DType {
        self.graph.nodes[t].dtype
    }

    /// Appends a node after inferring and checking its shape and dtype. `declared` gives
    /// the shape/dtype for ops that take them from the node (sources, reshape, expand).
    pub fn push(&mut self, op: Op, inputs: &[Tensor], declared: Option<(Shape, DType)>) -> Result<Tensor, IrError> {
        for &i in inputs {
            if i >= self.graph.nodes.len() {
                return Err(IrError::BadReference { node: self.graph.nodes.len(), input: i });
            }
        }
        let ins: Vec<(&[usize], DType)> = inputs.iter().map(|&i| (self.graph.nodes[i].shape.as_slice(), self.graph.nodes[i].dtype)).collect();
        let (shape, dtype) = crate::verify::infer_at(Some(self.graph.nodes.len()), &op, &ins, declared.as_ref().map(|(s, d)| (s.as_slice(), *d)))?;
        self.graph.nodes.push(Node { op, inputs: inputs.to_vec(), shape, dtype });
        Ok(self.graph.nodes.len() - 1)
    }

    fn claim_name(&mut self, name: &str, id: NodeId) -> Result<(), IrError> {
        if self.names.insert(name.to_string(), id).is_some() {
            return Err(IrError::Name(format!("'{name}' is declared twice")));
        }
        Ok(())
    }

    /// A runtime input.
    pub fn input(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor, IrError> {
        let id = self.push(Op::Input { name: name.into() }, &[], Some((shape.to_vec(), dtype)))?;
        self.claim_name(&format!("input:{name}"), id)?;
        Ok(id)
    }

    /// A named weight; reading the same name twice returns the same node.
    pub fn weight(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor, IrError> {
        if let Some(&id) = self.names.get(&format!("weight:{name}")) {
            let n = &self.graph.nodes[id];
            if n.shape != shape || n.dtype != dtype {
                return Err(IrError::Name(format!("weight '{name}' declared as {:?} {} and {:?} {}", n.shape, n.dtype, shape, dtype)));
            }
            return Ok(id);
        }
        let id = self.push(Op::Weight { name: name.into() }, &[], Some((shape.to_vec(), dtype)))?;
        self.claim_name(&format!("weight:{name}"), id)?;
        Ok(id)
    }

    /// A scalar constant (shape `[]`); equal constants are shared.
    pub fn constant(&mut self, value: f64, dtype: DType) -> Result<Tensor, IrError> {
        let key = (value.to_bits(), dtype);
        if let Some(&id) = self.consts.get(&key) {
            return Ok(id);
        }
        let id = self.push(Op::Constant { bits: value.to_bits() }, &[], Some((vec![], dtype)))?;
        self.consts.insert(key, id);
        Ok(id)
    }

    /// f32 scalar constant.
    pub fn scalar(&mut self, value: f64) -> Result<Tensor, IrError> {
        self.constant(value, DType::F32)
    }

    /// Index along `axis` over `shape`.
    pub fn iota(&mut self, shape: &[usize], axis: usize, dtype: DType) -> Result<Tensor, IrError> {
        self.push(Op::Iota { axis }, &[], Some((shape.to_vec(), dtype)))
    }

    /// Unary elementwise op.
    pub fn unary(&mut self, op: UnaryOp, x: Tensor) -> Result<Tensor, IrError> {
        self.push(Op::Unary(op), &[x], None)
    }

    /// Binary elementwise op with broadcasting.
    pub fn binary(&mut self, op: BinaryOp, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.push(Op::Binary(op), &[a, b], None)
    }

    /// `a + b`
    pub fn add(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.binary(BinaryOp::Add, a, b)
    }

    /// `a - b`
    pub fn sub(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.binary(BinaryOp::Sub, a, b)
    }

    /// `a * b`
    pub fn mul(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.binary(BinaryOp::Mul, a, b)
    }

    /// `a / b`
    pub fn div(&mut self, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.binary(BinaryOp::Div, a, b)
    }

    /// `x * c` for an f32 scalar `c`.
    pub fn scale(&mut self, x: Tensor, c: f64) -> Result<Tensor, IrError> {
        let k = self.scalar(c)?;
        self.mul(x, k)
    }

    /// Comparison with broadcasting.
    pub fn compare(&mut self, op: CmpOp, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.push(Op::Compare(op), &[a, b], None)
    }

    /// `cond ? a : b`
    pub fn select(&mut self, cond: Tensor, a: Tensor, b: Tensor) -> Result<Tensor, IrError> {
        self.push(Op::Where, &[cond, a, b], None)
    }

    /// Dtype conversion.
    pub fn cast(&mut self, x: Tensor, to: DType) -> Result<Tensor, IrError> {
        self.push(Op::Cast { to }, &[x], None)
    }

    /// Reduction along `axis` (kept, size 1).
    pub fn reduce(&mut self, op: ReduceOp, x: Tensor, axis: usize) -> Result<Tensor, IrError> {
        self.push(Op::Reduce { op, axis }, &[x], None)
    }

    /// Reduction along the last axis.
    pub fn reduce_last(&mut self, op: ReduceOp, x: Tensor) -> Result<Tensor, IrError> {
        let r = self.shape(x).len();
        if r == 0 {
            return Err(IrError::Shape { op: format!("reduce_{op:?}").to_lowercase(), detail: "scalar has no axis".into() });
        }
        self.reduce(op, x, r - 1)
    }

    /// Batched matmul `a · b` (or `a · bᵀ` with `transpose_rhs`).
    pub fn matmul(&mut self, a: Tensor, b: Tensor, transpose_rhs: bool) -> Result<Tensor, IrError> {
        self.push(Op::MatMul { transpose_rhs }, &[a, b], None)
    }

    /// New shape, same elements.
    pub fn reshape(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor, IrError> {
        let d = self.dtype(x);
        self.push(Op::Reshape, &[x], Some((shape.to_vec(), d)))
    }

    /// Dimension permutation.
    pub fn permute(&mut self, x: Tensor, perm: &[usize]) -> Result<Tensor, IrError> {
        self.push(Op::Permute { perm: perm.to_vec() }, &[x], None)
    }

    /// Broadcast to `shape`.
    pub fn expand(&mut self, x: Tensor, shape: &[usize]) -> Result<Tensor, IrError> {
        let d = self.dtype(x);
        self.push(Op::Expand, &[x], Some((shape.to_vec(), d)))
    }

    /// `x[.., start..end, ..]` along `axis`.
    pub fn slice(&mut self, x: Tensor, axis: usize, start: usize, end: usize) -> Result<Tensor, IrError> {
        self.push(Op::Slice { axis, start, end }, &[x], None)
    }

    /// Concatenation along `axis`.
    pub fn concat(&mut self, xs: &[Tensor], axis: usize) -> Result<Tensor, IrError> {
        self.push(Op::Concat { axis }, xs, None)
    }

    /// A value kept between runs ([`Op::State`]); read it only through [`Self::store_rows`].
    pub fn state(&mut self, name: &str, shape: &[usize], dtype: DType) -> Result<Tensor, IrError> {
        let id = self.push(Op::State { name: name.into() }, &[], Some((shape.to_vec(), dtype)))?;
        self.claim_name(&format!("state:{name}"), id)?;
        Ok(id)
    }

    /// `state` with `rows` written at the run-time `offset` along `axis`, kept for the next
    /// run ([`Op::StoreRows`]).
    pub fn store_rows(&mut self, state: Tensor, rows: Tensor, offset: Tensor, axis: usize) -> Result<Tensor, IrError> {
        self.push(Op::StoreRows { axis }, &[state, rows, offset], None)
    }

    /// One value offered in several equivalent ways ([`Op::Alternatives`]; the first is
    /// the value).
    pub fn alternatives(&mut self, ways: &[Tensor]) -> Result<Tensor, IrError> {
        self.push(Op::Alternatives, ways, None)
    }

    /// `Op::Conv`: grouped convolution of `x [N, C, *S]` with `w [M, C/groups, *window.size]`.
    pub fn conv(&mut self, x: Tensor, w: Tensor, window: crate::Window, groups: usize) -> Result<Tensor, IrError> {
        self.push(Op::Conv { window, groups }, &[x, w], None)
    }

    /// `Op::Im2Col`: the unfolded windows of `x [N, C, *S]`.
    pub fn im2col(&mut self, x: Tensor, window: crate::Window, groups: usize) -> Result<Tensor, IrError> {
        self.push(Op::Im2Col { window, groups }, &[x], None)
    }

    /// `Op::Pool`: max or average pooling of `x [N, C, *S]`.
    pub fn pool(&mut self, x: Tensor, kind: crate::PoolKind, window: crate::Window) -> Result<Tensor, IrError> {
        self.push(Op::Pool { kind, window }, &[x], None)
    }

    /// Row lookup `table[ids]`.
    pub fn gather(&mut self, table: Tensor, ids: Tensor) -> Result<Tensor, IrError> {
        self.push(Op::Gather, &[table, ids], None)
    }

    /// Marks a node as a named output.
    pub fn output(&mut self, name: &str, x: Tensor) -> Result<(), IrError> {
        if self.graph.outputs.iter().any(|(n, _)| n == name) {
            return Err(IrError::Name(format!("output '{name}' declared twice")));
        }
        if x >= self.graph.nodes.len() {
            return Err(IrError::Name(format!("output '{name}' refers to missing node {x}")));
        }
        self.graph.outputs.push((name.to_string(), x));
        Ok(())
    }

    /// Finishes the graph (verified).
    pub fn finish(self) -> Result<Graph, IrError> {
        crate::verify(&self.graph)?;
        Ok(self.graph)
    }
}

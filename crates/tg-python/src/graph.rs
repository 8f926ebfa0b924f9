//! `GraphCore`: a graph under construction, and the reference interpreter.
//!
//! Nodes are added one at a time; each gets its shape and dtype from `tg_ir::infer`, the
//! function `tg_ir::GraphBuilder` and the verifier use, so a bad operand is rejected with
//! the IR's own message (naming the op and the mismatch) at the line that built it. The
//! core keeps a plain `tg_ir::Graph` (so it can be compiled any number of times and still
//! grow afterwards) and the bytes of the constants made from numpy arrays, which the
//! compiled object reads as its weight store.

use crate::convert::{array_data, dtype_name, input_tensor, parse_dtype, reference_to_numpy};
use crate::errors::{self, err, guard, Kind, Res};
use pyo3::prelude::*;
use pyo3::types::PyDict;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use tg_ir::{BinaryOp, CmpOp, DType, Graph, HostData, HostTensor, Node, NodeId, Op, ReduceOp, Shape, UnaryOp, WeightStore};

/// Constants made from numpy arrays, by weight name; shared (not copied) by every
/// compilation of the graph.
#[derive(Debug, Clone, Default)]
pub(crate) struct ConstStore(pub HashMap<String, Arc<[u8]>>);

impl WeightStore for ConstStore {
    fn bytes(&self, name: &str) -> Option<&[u8]> {
        self.0.get(name).map(|b| &b[..])
    }
}

/// The state behind a `GraphCore`.
#[derive(Debug, Default)]
pub(crate) struct GraphState {
    /// Nodes and named outputs so far.
    pub graph: Graph,
    /// Constant data by weight name.
    pub weights: ConstStore,
    consts: HashMap<(u64, DType), NodeId>,
    next_const: usize,
}

/// A declared input: name, shape, dtype.
pub(crate) type InputSpec = (String, Shape, DType);

impl GraphState {
    fn check_id(&self, id: NodeId) -> Res<()> {
        if id >= self.graph.nodes.len() {
            return Err(err(Kind::Graph, format!("node {id} does not exist in this graph (it has {} nodes)", self.graph.nodes.len())));
        }
        Ok(())
    }

    /// Appends a node after inferring and checking its shape and dtype.
    fn push(&mut self, op: Op, inputs: &[NodeId], declared: Option<(Shape, DType)>) -> Res<NodeId> {
        for &i in inputs {
            self.check_id(i)?;
        }
        let ins: Vec<(&[usize], DType)> = inputs.iter().map(|&i| (self.graph.nodes[i].shape.as_slice(), self.graph.nodes[i].dtype)).collect();
        // `infer` also refuses shapes too large to size as buffers (`tg_ir::MAX_TENSOR_BYTES`).
        let (shape, dtype) = tg_ir::infer(&op, &ins, declared.as_ref().map(|(s, d)| (s.as_slice(), *d))).map_err(errors::ir)?;
        self.graph.nodes.push(Node { op, inputs: inputs.to_vec(), shape, dtype });
        Ok(self.graph.nodes.len() - 1)
    }

    fn has_weight(&self, name: &str) -> bool {
        self.weights.0.contains_key(name)
    }

    /// Declared inputs in node order.
    pub fn inputs(&self) -> Vec<InputSpec> {
        self.graph
            .nodes
            .iter()
            .filter_map(|n| match &n.op {
                Op::Input { name } => Some((name.clone(), n.shape.clone(), n.dtype)),
                _ => None,
            })
            .collect()
    }
}

fn unary_op(s: &str) -> Res<UnaryOp> {
    Ok(match s {
        "neg" => UnaryOp::Neg,
        "exp" => UnaryOp::Exp,
        "log" => UnaryOp::Log,
        "tanh" => UnaryOp::Tanh,
        "sqrt" => UnaryOp::Sqrt,
        "rsqrt" => UnaryOp::Rsqrt,
        "recip" => UnaryOp::Recip,
        "sin" => UnaryOp::Sin,
        "cos" => UnaryOp::Cos,
        "abs" => UnaryOp::Abs,
        "sigmoid" => UnaryOp::Sigmoid,
        "silu" => UnaryOp::Silu,
        "erf" => UnaryOp::Erf,
        _ => return Err(err(Kind::Graph, format!("unknown unary op '{s}'"))),
    })
}

fn binary_op(s: &str) -> Res<BinaryOp> {
    Ok(match s {
        "add" => BinaryOp::Add,
        "sub" => BinaryOp::Sub,
        "mul" => BinaryOp::Mul,
        "div" => BinaryOp::Div,
        "max" => BinaryOp::Max,
        "min" => BinaryOp::Min,
        "and" => BinaryOp::And,
        "or" => BinaryOp::Or,
        _ => return Err(err(Kind::Graph, format!("unknown binary op '{s}'"))),
    })
}

fn cmp_op(s: &str) -> Res<CmpOp> {
    Ok(match s {
        "eq" => CmpOp::Eq,
        "ne" => CmpOp::Ne,
        "lt" => CmpOp::Lt,
        "le" => CmpOp::Le,
        "gt" => CmpOp::Gt,
        "ge" => CmpOp::Ge,
        _ => return Err(err(Kind::Graph, format!("unknown comparison '{s}'"))),
    })
}

fn reduce_op(s: &str) -> Res<ReduceOp> {
    Ok(match s {
        "sum" => ReduceOp::Sum,
        "mean" => ReduceOp::Mean,
        "max" => ReduceOp::Max,
        _ => return Err(err(Kind::Graph, format!("unknown reduction '{s}'"))),
    })
}

fn check_name(name: &str, what: &str) -> Res<()> {
    if name.is_empty() {
        return Err(err(Kind::Graph, format!("{what} names must not be empty")));
    }
    Ok(())
}

/// A graph under construction (the native half of `tensor_graphs.Graph`). Every method
/// that adds a node returns its id; ids are only meaningful within this graph.
#[pyclass(module = "tensor_graphs._native", name = "GraphCore", frozen)]
pub struct GraphCore {
    state: Mutex<GraphState>,
}

impl GraphCore {
    /// Locks the state (a poisoned lock is still usable: every mutation is a single push).
    pub(crate) fn lock(&self) -> MutexGuard<'_, GraphState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn add(&self, op: Op, inputs: &[NodeId], declared: Option<(Shape, DType)>) -> PyResult<NodeId> {
        Ok(self.lock().push(op, inputs, declared)?)
    }
}

#[pymethods]
impl GraphCore {
    /// An empty graph.
    #[new]
    fn new() -> Self {
        GraphCore { state: Mutex::new(GraphState::default()) }
    }

    /// Declares a runtime input `name` of `shape` and `dtype` (`f32`, `i32`, `bool`).
    fn input(&self, name: &str, shape: Vec<usize>, dtype: &str) -> PyResult<NodeId> {
        check_name(name, "input")?;
        let d = parse_dtype(dtype)?;
        let mut s = self.lock();
        if s.graph.nodes.iter().any(|n| matches!(&n.op, Op::Input { name: x } if x == name)) {
            return Err(err(Kind::DuplicateName, format!("input '{name}' is declared twice")).into());
        }
        Ok(s.push(Op::Input { name: name.into() }, &[], Some((shape, d)))?)
    }

    /// A constant tensor holding a copy of `array` (a numpy array of float32, int32 or
    /// bool), stored as weight `name` (a fresh `const<N>` name if `None`).
    #[pyo3(signature = (array, name=None))]
    fn weight(&self, array: &Bound<'_, PyAny>, name: Option<&str>) -> PyResult<NodeId> {
        let dtype = crate::convert::array_dtype(array)
            .ok_or_else(|| err(Kind::DType, "constants must be numpy arrays of float32, int32 or bool (tensor_graphs.Graph.constant converts other dtypes)".to_string()))?;
        let (shape, data) = array_data(array, dtype, "constant")?;
        let bytes: Vec<u8> = match data {
            HostData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            HostData::Bool(v) => v,
        };
        let mut s = self.lock();
        let name = match name {
            Some(n) => {
                check_name(n, "weight")?;
                if s.has_weight(n) {
                    return Err(err(Kind::DuplicateName, format!("weight '{n}' is declared twice")).into());
                }
                n.to_string()
            }
            None => loop {
                let n = format!("const{}", s.next_const);
                s.next_const += 1;
                if !s.has_weight(&n) {
                    break n;
                }
            },
        };
        let id = s.push(Op::Weight { name: name.clone() }, &[], Some((shape, dtype)))?;
        s.weights.0.insert(name, Arc::from(bytes));
        Ok(id)
    }

    /// A scalar constant (shape `()`); equal constants of one dtype share a node.
    fn constant(&self, value: f64, dtype: &str) -> PyResult<NodeId> {
        let d = parse_dtype(dtype)?;
        let mut s = self.lock();
        if let Some(&id) = s.consts.get(&(value.to_bits(), d)) {
            return Ok(id);
        }
        let id = s.push(Op::Constant { bits: value.to_bits() }, &[], Some((vec![], d)))?;
        s.consts.insert((value.to_bits(), d), id);
        Ok(id)
    }

    /// Index along `axis`, broadcast over `shape` (dtype `f32` or `i32`).
    fn iota(&self, shape: Vec<usize>, axis: usize, dtype: &str) -> PyResult<NodeId> {
        let d = parse_dtype(dtype)?;
        self.add(Op::Iota { axis }, &[], Some((shape, d)))
    }

    /// Elementwise unary op: `neg exp log tanh sqrt rsqrt recip sin cos abs`.
    fn unary(&self, op: &str, x: NodeId) -> PyResult<NodeId> {
        self.add(Op::Unary(unary_op(op)?), &[x], None)
    }

    /// Elementwise binary op with broadcasting: `add sub mul div max min and or`.
    fn binary(&self, op: &str, a: NodeId, b: NodeId) -> PyResult<NodeId> {
        self.add(Op::Binary(binary_op(op)?), &[a, b], None)
    }

    /// Elementwise comparison with broadcasting: `eq ne lt le gt ge`.
    fn compare(&self, op: &str, a: NodeId, b: NodeId) -> PyResult<NodeId> {
        self.add(Op::Compare(cmp_op(op)?), &[a, b], None)
    }

    /// `cond ? a : b` with broadcasting.
    #[pyo3(name = "where")]
    fn where_(&self, cond: NodeId, a: NodeId, b: NodeId) -> PyResult<NodeId> {
        self.add(Op::Where, &[cond, a, b], None)
    }

    /// Dtype conversion.
    fn cast(&self, x: NodeId, dtype: &str) -> PyResult<NodeId> {
        self.add(Op::Cast { to: parse_dtype(dtype)? }, &[x], None)
    }

    /// Reduction (`sum mean max`) along `axis`, kept with size 1.
    fn reduce(&self, op: &str, x: NodeId, axis: usize) -> PyResult<NodeId> {
        self.add(Op::Reduce { op: reduce_op(op)?, axis }, &[x], None)
    }

    /// Batched matrix product (`b` stored `[.., n, k]` with `transpose_rhs`).
    #[pyo3(signature = (a, b, transpose_rhs=false))]
    fn matmul(&self, a: NodeId, b: NodeId, transpose_rhs: bool) -> PyResult<NodeId> {
        self.add(Op::MatMul { transpose_rhs }, &[a, b], None)
    }

    /// Same elements, new shape.
    fn reshape(&self, x: NodeId, shape: Vec<usize>) -> PyResult<NodeId> {
        let d = self.lock().graph.nodes.get(x).map(|n| n.dtype).unwrap_or(DType::F32);
        self.add(Op::Reshape, &[x], Some((shape, d)))
    }

    /// Dimension permutation: output dim `i` is input dim `perm[i]`.
    fn permute(&self, x: NodeId, perm: Vec<usize>) -> PyResult<NodeId> {
        self.add(Op::Permute { perm }, &[x], None)
    }

    /// Broadcast to `shape`.
    fn expand(&self, x: NodeId, shape: Vec<usize>) -> PyResult<NodeId> {
        let d = self.lock().graph.nodes.get(x).map(|n| n.dtype).unwrap_or(DType::F32);
        self.add(Op::Expand, &[x], Some((shape, d)))
    }

    /// Elements `start..end` along `axis`.
    fn slice(&self, x: NodeId, axis: usize, start: usize, end: usize) -> PyResult<NodeId> {
        self.add(Op::Slice { axis, start, end }, &[x], None)
    }

    /// Concatenation along `axis` (two or more operands).
    fn concat(&self, xs: Vec<NodeId>, axis: usize) -> PyResult<NodeId> {
        self.add(Op::Concat { axis }, &xs, None)
    }

    /// Rows of a rank-2 table selected by i32 ids.
    fn gather(&self, table: NodeId, ids: NodeId) -> PyResult<NodeId> {
        self.add(Op::Gather, &[table, ids], None)
    }

    /// A fused op, as the compiler's rewrite stage introduces them: `rms_norm` (`attr`:
    /// epsilon; inputs `x, w`), `rope_neox` (`x, cos, sin`), `gelu_tanh` (`x`), `gated_gelu`
    /// (`gate, up`), `softmax` (`x`, last axis), `attention` (`attr`: score scale; inputs
    /// `q, k, v, mask`), `add_rms_norm` (`attr`: epsilon; inputs `a, b, w`; output
    /// `[2, ..a.shape]`: the sum, then its norm), `attention_seq_major` (as `attention` with
    /// `q` and the output `[sq, a, b, d]`). For testing fused kernels against their
    /// definitions.
    #[pyo3(signature = (name, inputs, attr=None))]
    fn fused(&self, name: &str, inputs: Vec<NodeId>, attr: Option<f64>) -> PyResult<NodeId> {
        let need = |what: &str| attr.ok_or_else(|| err(Kind::Graph, format!("{name} needs {what}")));
        let op = match name {
            "rms_norm" => Op::RmsNorm { eps_bits: need("an epsilon")?.to_bits() },
            "rope_neox" => Op::RopeNeox,
            "rms_norm_rope_neox" => Op::RmsNormRopeNeox { eps_bits: need("an epsilon")?.to_bits() },
            "gelu_tanh" => Op::GeluTanh,
            "gated_gelu" => Op::GatedGelu,
            "softmax" => Op::Softmax,
            "attention" => Op::Attention { scale_bits: need("a scale")?.to_bits() },
            "add_rms_norm" => Op::AddRmsNorm { eps_bits: need("an epsilon")?.to_bits() },
            "matmul_add" => Op::MatMulAdd { transpose_rhs: need("transpose_rhs (0 or 1)")? != 0.0 },
            "attention_seq_major" => Op::AttentionSeqMajor { scale_bits: need("a scale")?.to_bits() },
            _ => return Err(err(Kind::Graph, format!("unknown fused op '{name}'")).into()),
        };
        self.add(op, &inputs, None)
    }

    /// Marks node `x` as output `name`.
    fn output(&self, name: &str, x: NodeId) -> PyResult<()> {
        check_name(name, "output")?;
        let mut s = self.lock();
        s.check_id(x)?;
        if s.graph.outputs.iter().any(|(n, _)| n == name) {
            return Err(err(Kind::DuplicateName, format!("output '{name}' is declared twice")).into());
        }
        s.graph.outputs.push((name.to_string(), x));
        Ok(())
    }

    /// Shape of node `x`.
    fn shape(&self, x: NodeId) -> PyResult<Vec<usize>> {
        let s = self.lock();
        s.check_id(x)?;
        Ok(s.graph.nodes[x].shape.clone())
    }

    /// Numpy name of the dtype of node `x`.
    fn dtype(&self, x: NodeId) -> PyResult<String> {
        let s = self.lock();
        s.check_id(x)?;
        Ok(dtype_name(s.graph.nodes[x].dtype))
    }

    /// Short name of the op of node `x` (as in compiler reports).
    fn op(&self, x: NodeId) -> PyResult<String> {
        let s = self.lock();
        s.check_id(x)?;
        Ok(s.graph.nodes[x].op.name())
    }

    /// Number of nodes.
    fn num_nodes(&self) -> usize {
        self.lock().graph.nodes.len()
    }

    /// Declared inputs as `(name, shape, dtype)`, in declaration order.
    fn inputs(&self) -> Vec<(String, Vec<usize>, String)> {
        self.lock().inputs().into_iter().map(|(n, s, d)| (n, s, dtype_name(d))).collect()
    }

    /// Named outputs as `(name, node id)`, in declaration order.
    fn outputs(&self) -> Vec<(String, NodeId)> {
        self.lock().graph.outputs.clone()
    }

    /// Names of the constants stored as weights.
    fn weight_names(&self) -> Vec<String> {
        let mut v: Vec<String> = self.lock().weights.0.keys().cloned().collect();
        v.sort();
        v
    }

    /// Node count per op kind.
    fn op_histogram(&self) -> Vec<(String, usize)> {
        self.lock().graph.op_histogram()
    }

    /// The graph (nodes and outputs, without constant data) as JSON.
    fn to_json(&self) -> PyResult<String> {
        serde_json::to_string(&self.lock().graph).map_err(|e| err(Kind::Graph, e.to_string()).into())
    }

    /// Runs the IR verifier over the whole graph.
    fn verify(&self) -> PyResult<()> {
        tg_ir::verify(&self.lock().graph).map_err(|e| errors::ir(e).into())
    }
}

/// Checks a dict of inputs against the declared inputs and converts them: every declared
/// input must be present (`MissingInputError`), no other name may be (`UnknownNameError`),
/// and each value must have the declared dtype and shape.
pub(crate) fn collect_inputs(py: Python<'_>, specs: &[InputSpec], inputs: Option<&Bound<'_, PyDict>>, kwargs: Option<&Bound<'_, PyDict>>) -> PyResult<HashMap<String, HostTensor>> {
    let mut out = HashMap::with_capacity(specs.len());
    let mut seen = 0usize;
    for (name, shape, dtype) in specs {
        let mut v = None;
        for d in [inputs, kwargs].into_iter().flatten() {
            if let Some(x) = d.get_item(name)? {
                if v.is_some() {
                    return Err(err(Kind::DuplicateName, format!("input '{name}' is given both in the dict and as a keyword")).into());
                }
                v = Some(x);
                seen += 1;
            }
        }
        let Some(v) = v else {
            let names: Vec<&str> = specs.iter().map(|s| s.0.as_str()).collect();
            return Err(err(Kind::MissingInput, format!("missing input '{name}' (the graph's inputs are: {})", names.join(", "))).into());
        };
        out.insert(name.clone(), input_tensor(py, &v, name, shape, *dtype)?);
    }
    let given: usize = [inputs, kwargs].into_iter().flatten().map(|d| d.len()).sum();
    if given != seen {
        let known: Vec<&str> = specs.iter().map(|s| s.0.as_str()).collect();
        for d in [inputs, kwargs].into_iter().flatten() {
            for k in d.keys() {
                let key = k.str()?.to_string();
                if !specs.iter().any(|s| s.0 == key) || k.cast::<pyo3::types::PyString>().is_err() {
                    let list = if known.is_empty() { "it has none".to_string() } else { format!("its inputs are: {}", known.join(", ")) };
                    return Err(err(Kind::UnknownName, format!("unknown input {} ({list})", k.repr()?)).into());
                }
            }
        }
    }
    Ok(out)
}

/// Evaluates the graph's outputs with the f64 reference interpreter (`tg_ir::interp`):
/// returns a dict of numpy arrays (float64 for f32 values, int32, bool).
#[pyfunction]
#[pyo3(signature = (core, inputs=None, /, **kwargs))]
pub(crate) fn reference_eval<'py>(py: Python<'py>, core: &GraphCore, inputs: Option<&Bound<'py, PyDict>>, kwargs: Option<&Bound<'py, PyDict>>) -> PyResult<Bound<'py, PyDict>> {
    let (graph, weights, specs) = {
        let s = core.lock();
        (s.graph.clone(), s.weights.clone(), s.inputs())
    };
    let host = collect_inputs(py, &specs, inputs, kwargs)?;
    let vals = py.detach(|| guard(|| tg_ir::interp::eval(&graph, &host, &weights).map_err(errors::ir)))?;
    let out = PyDict::new(py);
    let mut vals = vals;
    for (name, _) in &graph.outputs {
        let a = vals.remove(name).ok_or_else(|| err(Kind::Execution, format!("the interpreter did not produce output '{name}'")))?;
        out.set_item(name, reference_to_numpy(py, a)?)?;
    }
    Ok(out)
}

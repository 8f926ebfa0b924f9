//! ONNX graph → IR graph, for given input shapes.
//!
//! Every ONNX value is either a tensor of the IR graph or a constant known at import
//! (initializers that shape arithmetic reads, `Constant` nodes, and whatever is computed
//! from constants only): ops whose inputs are all constants are evaluated here
//! ([`fold`]), so `Shape → Gather → Concat → Reshape` chains become a static reshape. A
//! constant that a tensor op reads is materialised (a scalar as `Op::Constant`, anything
//! larger as a weight). `float` initializers read by tensor ops are weights read in place.

mod cnn;

use std::collections::HashMap;

use tg_ir::{BinaryOp, CmpOp, DType, Graph, GraphBuilder, ReduceOp, Tensor, UnaryOp};

use crate::proto::{AttributeProto, NodeProto};
use crate::tensor::{decode_tensor, dt, f32_bytes, type_name, Value, ValueData};
use crate::{OnnxError, OnnxModel, OnnxWeights};

/// An imported graph.
pub struct Imported {
    /// The IR graph: one input per ONNX graph input (same names), one output per ONNX
    /// graph output (same names).
    pub graph: Graph,
    /// Its weights.
    pub weights: OnnxWeights,
    /// Inputs: name, shape, IR dtype, ONNX element type (int64 inputs are fed as i32).
    pub inputs: Vec<(String, Vec<usize>, DType, i32)>,
    /// Outputs: name and ONNX element type (int64 outputs come back as i32).
    pub outputs: Vec<(String, i32)>,
}

/// The ONNX op types the importer maps (each with the variants its code names).
pub fn supported_ops() -> Vec<&'static str> {
    let mut v = BASE_OPS.to_vec();
    v.extend(cnn::OPS);
    v
}

/// The op types mapped in this file (the convolution family is in [`cnn`]).
const BASE_OPS: &[&str] = &[
    "Abs",
    "Add",
    "And",
    "Cast",
    "Clip",
    "Concat",
    "Constant",
    "ConstantOfShape",
    "Cos",
    "Div",
    "Dropout",
    "Equal",
    "Erf",
    "Exp",
    "Expand",
    "Flatten",
    "Gather",
    "Gemm",
    "Greater",
    "GreaterOrEqual",
    "HardSigmoid",
    "Identity",
    "LeakyRelu",
    "Less",
    "LessOrEqual",
    "Log",
    "LogSoftmax",
    "MatMul",
    "Max",
    "Mean",
    "Min",
    "Mul",
    "Neg",
    "Or",
    "Pow",
    "Range",
    "Reciprocal",
    "ReduceMax",
    "ReduceMean",
    "ReduceMin",
    "ReduceSum",
    "Relu",
    "Reshape",
    "Shape",
    "Sigmoid",
    "Sin",
    "Size",
    "Slice",
    "Softmax",
    "Sqrt",
    "Squeeze",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Unsqueeze",
    "Where",
    "CastLike",
    "ReduceSumSquare",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "Softsign",
    "Softplus",
    "Elu",
    "Selu",
    "Celu",
    "ThresholdedRelu",
    "HardSwish",
    "Mish",
    "PRelu",
    "Split",
    "LayerNormalization",
    "Trilu",
    "Pad",
];

#[derive(Clone)]
enum V {
    /// A tensor of the graph, with its ONNX element type.
    T(Tensor, i32),
    /// Known at import.
    C(Value),
}

fn ir_dtype(t: i32) -> Option<DType> {
    match t {
        dt::FLOAT => Some(DType::F32),
        dt::INT32 | dt::INT64 => Some(DType::I32),
        dt::BOOL => Some(DType::Bool),
        _ => None,
    }
}

struct Imp<'a> {
    model: &'a OnnxModel,
    b: GraphBuilder,
    vals: HashMap<String, V>,
    /// `float` initializers not yet read by a tensor op (made weights on first use).
    lazy: HashMap<String, &'a crate::proto::TensorProto>,
    weights: OnnxWeights,
    consts: usize,
    node: String,
    op: String,
}

type R<T> = Result<T, OnnxError>;

fn attr<'n>(n: &'n NodeProto, name: &str) -> Option<&'n AttributeProto> {
    n.attribute.iter().find(|a| a.name.as_deref() == Some(name))
}
fn attr_i(n: &NodeProto, name: &str) -> Option<i64> {
    attr(n, name).and_then(|a| a.i)
}
fn attr_f(n: &NodeProto, name: &str) -> Option<f32> {
    attr(n, name).and_then(|a| a.f)
}
fn attr_ints(n: &NodeProto, name: &str) -> Option<Vec<i64>> {
    attr(n, name).map(|a| a.ints.clone())
}

/// The IR's error for the node being imported.
fn ir<T>(node: &str, op: &str, r: Result<T, tg_ir::IrError>) -> R<T> {
    r.map_err(|source| OnnxError::Ir { node: node.to_string(), op_type: op.to_string(), source: Box::new(source) })
}

fn norm_axis(axis: i64, rank: usize) -> Option<usize> {
    let a = if axis < 0 { axis + rank as i64 } else { axis };
    (0..rank as i64).contains(&a).then_some(a as usize)
}

impl Imp<'_> {
    fn unsupported(&self, detail: impl Into<String>) -> OnnxError {
        OnnxError::Unsupported { op_type: self.op.clone(), node: self.node.clone(), opset: self.model.opset, detail: detail.into() }
    }
    fn invalid(&self, detail: impl std::fmt::Display) -> OnnxError {
        OnnxError::Invalid(format!("{}: node '{}' ({}): {detail}", self.model.path.display(), self.node, self.op))
    }

    /// Input `k` of the node (an error naming it when it has fewer).
    fn arg<'s>(&self, ins: &'s [String], k: usize) -> R<&'s str> {
        ins.get(k).map(String::as_str).ok_or_else(|| self.invalid(format!("{} inputs, the op needs at least {}", ins.len(), k + 1)))
    }

    fn get(&mut self, name: &str) -> R<V> {
        if let Some(v) = self.vals.get(name) {
            return Ok(v.clone());
        }
        Err(self.invalid(format!("input '{name}' is produced by no node, initializer or graph input")))
    }

    /// A constant input (or `None` when the value is a tensor of the graph).
    fn constant(&mut self, name: &str) -> R<Option<Value>> {
        if name.is_empty() {
            return Ok(None);
        }
        if let Some(t) = self.lazy.get(name) {
            return Ok(Some(decode_tensor(Some(self.model), t)?));
        }
        match self.get(name)? {
            V::C(c) => Ok(Some(c)),
            V::T(..) => Ok(None),
        }
    }

    /// A one-element numeric constant input as `f64` (`None`: computed at run time, or not
    /// one element).
    fn const_scalar(&mut self, name: &str) -> R<Option<f64>> {
        Ok(match self.constant(name)? {
            Some(Value { data: ValueData::F32(v), .. }) if v.len() == 1 => Some(v[0] as f64),
            Some(Value { data: ValueData::I64(v), .. }) if v.len() == 1 => Some(v[0] as f64),
            _ => None,
        })
    }

    fn const_ints(&mut self, name: &str, what: &str) -> R<Vec<i64>> {
        match self.constant(name)? {
            Some(Value { data: ValueData::I64(v), .. }) => Ok(v),
            Some(_) => Err(self.invalid(format!("{what} must be integers"))),
            None => Err(self.unsupported(format!("{what} computed at run time (only constants or shapes known at import)"))),
        }
    }

    /// The value as a graph tensor (constants materialised).
    fn tensor(&mut self, name: &str) -> R<(Tensor, i32)> {
        if let Some(t) = self.lazy.remove(name) {
            let (shape, bytes) = f32_bytes(Some(self.model), t, &format!("initializer '{name}'"))?;
            let wname = format!("onnx:{name}");
            self.weights.insert(wname.clone(), bytes);
            let w = ir(&self.node, &self.op, self.b.weight(&wname, &shape, DType::F32))?;
            self.vals.insert(name.to_string(), V::T(w, dt::FLOAT));
            return Ok((w, dt::FLOAT));
        }
        match self.get(name)? {
            V::T(t, ty) => Ok((t, ty)),
            V::C(c) => {
                let t = self.materialise(&c)?;
                self.vals.insert(name.to_string(), V::T(t, c.onnx_type));
                Ok((t, c.onnx_type))
            }
        }
    }

    fn materialise(&mut self, c: &Value) -> R<Tensor> {
        let dtype = ir_dtype(c.onnx_type).ok_or_else(|| self.unsupported(format!("element type {}", type_name(c.onnx_type))))?;
        let ints = |v: &[i64]| -> R<Vec<i32>> { v.iter().map(|&x| i32::try_from(x).map_err(|_| self.invalid(format!("integer {x} does not fit i32")))).collect() };
        if c.data.len() != c.shape.iter().product::<usize>() {
            return Err(self.invalid(format!("a constant of shape {:?} holds {} elements", c.shape, c.data.len())));
        }
        if c.shape.is_empty() {
            let x = match &c.data {
                ValueData::F32(v) => v[0] as f64,
                ValueData::I64(v) => ints(v)?[0] as f64,
                ValueData::Bool(v) => v[0] as u8 as f64,
            };
            return ir(&self.node, &self.op, self.b.constant(x, dtype));
        }
        let bytes: Vec<u8> = match &c.data {
            ValueData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ValueData::I64(v) => ints(v)?.iter().flat_map(|x| x.to_le_bytes()).collect(),
            ValueData::Bool(v) => v.iter().map(|&x| x as u8).collect(),
        };
        self.consts += 1;
        let name = format!("onnx.const{}", self.consts);
        self.weights.insert(name.clone(), bytes::Bytes::from(bytes));
        ir(&self.node, &self.op, self.b.weight(&name, &c.shape, dtype))
    }

    fn shape_of(&mut self, name: &str) -> R<Vec<usize>> {
        if let Some(t) = self.lazy.get(name) {
            return t.dims.iter().map(|&d| usize::try_from(d).map_err(|_| self.invalid("negative dimension"))).collect();
        }
        Ok(match self.get(name)? {
            V::T(t, _) => self.b.shape(t).to_vec(),
            V::C(c) => c.shape,
        })
    }

    fn set(&mut self, name: &str, v: V) {
        if !name.is_empty() {
            self.vals.insert(name.to_string(), v);
        }
    }

    fn unary(&mut self, op: UnaryOp, x: Tensor) -> R<Tensor> {
        ir(&self.node, &self.op, self.b.unary(op, x))
    }
    /// The second operand `name` of an elementwise op with first operand `a`: a one-element
    /// constant whose rank does not exceed `a`'s is an IR scalar (broadcasting it gives the
    /// same result), so the rules see a scalar constant (`max(x, −0.4)`, `x · 0.5`).
    fn operand_against(&mut self, name: &str, a: Tensor) -> R<Tensor> {
        let s = self.shape_of(name)?;
        if s.iter().product::<usize>() == 1 && s.len() <= self.b.shape(a).len() {
            if let Some(v) = self.const_scalar(name)? {
                return self.scalar(v, a);
            }
        }
        Ok(self.tensor(name)?.0)
    }

    fn bin(&mut self, op: BinaryOp, a: Tensor, b: Tensor) -> R<Tensor> {
        ir(&self.node, &self.op, self.b.binary(op, a, b))
    }
    fn scalar(&mut self, v: f64, like: Tensor) -> R<Tensor> {
        let d = self.b.dtype(like);
        ir(&self.node, &self.op, self.b.constant(v, d))
    }

    /// Reduces `x` over `axes` (kept as size 1), then drops them unless `keep`.
    fn reduce(&mut self, op: ReduceOp, x: Tensor, axes: &[usize], keep: bool) -> R<Tensor> {
        let mut y = x;
        for &a in axes {
            y = ir(&self.node, &self.op, self.b.reduce(op, y, a))?;
        }
        if !keep {
            let s: Vec<usize> = self.b.shape(y).iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
            y = ir(&self.node, &self.op, self.b.reshape(y, &s))?;
        }
        Ok(y)
    }

    /// Softmax (or its log) over `axis` of `x`.
    fn softmax(&mut self, x: Tensor, axis: usize, log: bool) -> R<Tensor> {
        let m = ir(&self.node, &self.op, self.b.reduce(ReduceOp::Max, x, axis))?;
        let d = ir(&self.node, &self.op, self.b.sub(x, m))?;
        let e = self.unary(UnaryOp::Exp, d)?;
        let s = ir(&self.node, &self.op, self.b.reduce(ReduceOp::Sum, e, axis))?;
        if log {
            let l = self.unary(UnaryOp::Log, s)?;
            ir(&self.node, &self.op, self.b.sub(d, l))
        } else {
            ir(&self.node, &self.op, self.b.div(e, s))
        }
    }

    fn node(&mut self, n: &NodeProto, index: usize) -> R<()> {
        self.op = n.op_type.clone().unwrap_or_default();
        self.node = n.name.clone().filter(|s| !s.is_empty()).unwrap_or_else(|| format!("#{index}"));
        let domain = n.domain.as_deref().unwrap_or("");
        if !(domain.is_empty() || domain == "ai.onnx") {
            return Err(self.unsupported(format!("domain '{domain}'")));
        }
        let ins: Vec<String> = n.input.clone();
        let outs: Vec<String> = n.output.clone();
        let out0 = outs.first().cloned().unwrap_or_default();
        // A shape is known at import whatever the tensor holds.
        if matches!(self.op.as_str(), "Shape" | "Size") {
            let r = fold(self, n, &[])?.ok_or_else(|| self.invalid("no shape"))?;
            for (o, v) in outs.iter().zip(r) {
                self.set(o, V::C(v));
            }
            return Ok(());
        }
        // Everything known at import: evaluate here.
        let mut all_const = !ins.iter().all(|i| i.is_empty()) || matches!(self.op.as_str(), "Constant" | "Range");
        let mut cins = Vec::new();
        for i in &ins {
            match self.constant(i)? {
                Some(c) => cins.push(Some(c)),
                None if i.is_empty() => cins.push(None),
                None => {
                    all_const = false;
                    cins.push(None);
                }
            }
        }
        if all_const {
            if let Some(r) = fold(self, n, &cins)? {
                for (o, v) in outs.iter().zip(r) {
                    self.set(o, V::C(v));
                }
                return Ok(());
            }
        }
        let opset = self.model.opset;
        let op = self.op.clone();
        match op.as_str() {
            "Identity" | "Dropout" => {
                if op == "Dropout" && outs.len() > 1 && !outs[1].is_empty() {
                    return Err(self.unsupported("the mask output"));
                }
                // Inference: the identity, unless training mode is asked for.
                let training = match ins.get(2).filter(|s| !s.is_empty()) {
                    None => false,
                    Some(t) => match self.constant(t)? {
                        Some(Value { data: ValueData::Bool(v), .. }) => v.first().copied().unwrap_or(false),
                        _ => true,
                    },
                };
                if op == "Dropout" && (training || attr_i(n, "is_test") == Some(0) && opset < 7) {
                    return Err(self.unsupported("training mode"));
                }
                let v = self.get(self.arg(&ins, 0)?)?;
                self.set(&out0, v);
            }
            "Add" | "Sub" | "Mul" | "Div" | "And" | "Or" => {
                let (a, ta) = self.tensor(self.arg(&ins, 0)?)?;
                let b = self.operand_against(&self.arg(&ins, 1)?.to_string(), a)?;
                let bop = match op.as_str() {
                    "Add" => BinaryOp::Add,
                    "Sub" => BinaryOp::Sub,
                    "Mul" => BinaryOp::Mul,
                    "Div" => BinaryOp::Div,
                    "And" => BinaryOp::And,
                    _ => BinaryOp::Or,
                };
                let y = self.bin(bop, a, b)?;
                self.set(&out0, V::T(y, ta));
            }
            "Max" | "Min" | "Sum" | "Mean" => {
                let (mut y, ty) = self.tensor(self.arg(&ins, 0)?)?;
                for i in ins.iter().skip(1) {
                    let x = self.operand_against(i, y)?;
                    let bop = match op.as_str() {
                        "Max" => BinaryOp::Max,
                        "Min" => BinaryOp::Min,
                        _ => BinaryOp::Add,
                    };
                    y = self.bin(bop, y, x)?;
                }
                if op == "Mean" {
                    let k = self.scalar(ins.len() as f64, y)?;
                    y = ir(&self.node, &self.op, self.b.div(y, k))?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "Neg" | "Exp" | "Log" | "Tanh" | "Sqrt" | "Abs" | "Reciprocal" | "Sin" | "Cos" | "Sigmoid" | "Erf" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                if op == "Neg" && self.b.dtype(x) == DType::I32 {
                    // 0 − x (the IR's unary ops are float).
                    let z = self.scalar(0.0, x)?;
                    let y = self.bin(BinaryOp::Sub, z, x)?;
                    self.set(&out0, V::T(y, ty));
                    return Ok(());
                }
                let u = match op.as_str() {
                    "Neg" => UnaryOp::Neg,
                    "Exp" => UnaryOp::Exp,
                    "Log" => UnaryOp::Log,
                    "Tanh" => UnaryOp::Tanh,
                    "Sqrt" => UnaryOp::Sqrt,
                    "Abs" => UnaryOp::Abs,
                    "Reciprocal" => UnaryOp::Recip,
                    "Sin" => UnaryOp::Sin,
                    "Sigmoid" => UnaryOp::Sigmoid,
                    "Erf" => UnaryOp::Erf,
                    _ => UnaryOp::Cos,
                };
                let y = self.unary(u, x)?;
                self.set(&out0, V::T(y, ty));
            }
            "Relu" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let z = self.scalar(0.0, x)?;
                let y = self.bin(BinaryOp::Max, x, z)?;
                self.set(&out0, V::T(y, ty));
            }
            "HardSigmoid" => {
                // max(0, min(1, α·x + β))
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let (alpha, beta) = (attr_f(n, "alpha").unwrap_or(0.2) as f64, attr_f(n, "beta").unwrap_or(0.5) as f64);
                let ax = ir(&self.node, &self.op, self.b.scale(x, alpha))?;
                let bb = self.scalar(beta, x)?;
                let l = ir(&self.node, &self.op, self.b.add(ax, bb))?;
                let one = self.scalar(1.0, x)?;
                let zero = self.scalar(0.0, x)?;
                let m = self.bin(BinaryOp::Min, l, one)?;
                let y = self.bin(BinaryOp::Max, m, zero)?;
                self.set(&out0, V::T(y, ty));
            }
            "LeakyRelu" => {
                // where(x < 0, α·x, x)
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let alpha = attr_f(n, "alpha").unwrap_or(0.01) as f64;
                let zero = self.scalar(0.0, x)?;
                let neg = ir(&self.node, &self.op, self.b.compare(CmpOp::Lt, x, zero))?;
                let ax = ir(&self.node, &self.op, self.b.scale(x, alpha))?;
                let y = ir(&self.node, &self.op, self.b.select(neg, ax, x))?;
                self.set(&out0, V::T(y, ty));
            }
            "Clip" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                // Bounds known at import are IR constants; computed ones are one-element tensors.
                let (lo, hi) = if opset < 11 {
                    let mut c = |v: Option<f32>| -> R<Option<Tensor>> { v.map(|v| self.scalar(v as f64, x)).transpose() };
                    (c(attr_f(n, "min"))?, c(attr_f(n, "max"))?)
                } else {
                    let mut bound = |k: usize| -> R<Option<Tensor>> {
                        let Some(name) = ins.get(k).filter(|s| !s.is_empty()) else { return Ok(None) };
                        if let Some(v) = self.const_scalar(name)? {
                            return Ok(Some(self.scalar(v, x)?));
                        }
                        let (t, _) = self.tensor(name)?;
                        if self.b.shape(t).iter().product::<usize>() != 1 {
                            return Err(self.invalid(format!("bound '{name}' must hold one element")));
                        }
                        Ok(Some(ir(&self.node, &self.op, self.b.reshape(t, &[]))?))
                    };
                    (bound(1)?, bound(2)?)
                };
                // min(max(x, lo), hi): with lo > hi every value is hi.
                let mut y = x;
                if let Some(l) = lo {
                    y = self.bin(BinaryOp::Max, y, l)?;
                }
                if let Some(h) = hi {
                    y = self.bin(BinaryOp::Min, y, h)?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "Pow" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let e = match self.const_scalar(self.arg(&ins, 1)?)? {
                    Some(e) => e,
                    None => return Err(self.unsupported("an exponent other than a constant 0.5, 1, 2 or 3")),
                };
                let y = match e {
                    1.0 => x,
                    2.0 => self.bin(BinaryOp::Mul, x, x)?,
                    3.0 => {
                        let sq = self.bin(BinaryOp::Mul, x, x)?;
                        self.bin(BinaryOp::Mul, sq, x)?
                    }
                    0.5 => self.unary(UnaryOp::Sqrt, x)?,
                    _ => return Err(self.unsupported(format!("exponent {e} (the IR has no pow)"))),
                };
                self.set(&out0, V::T(y, ty));
            }
            "Equal" | "Less" | "Greater" | "LessOrEqual" | "GreaterOrEqual" => {
                let (a, _) = self.tensor(self.arg(&ins, 0)?)?;
                let (b, _) = self.tensor(self.arg(&ins, 1)?)?;
                let c = match op.as_str() {
                    "Equal" => CmpOp::Eq,
                    "Less" => CmpOp::Lt,
                    "Greater" => CmpOp::Gt,
                    "LessOrEqual" => CmpOp::Le,
                    _ => CmpOp::Ge,
                };
                let y = ir(&self.node, &self.op, self.b.compare(c, a, b))?;
                self.set(&out0, V::T(y, dt::BOOL));
            }
            "Where" => {
                let (c, _) = self.tensor(self.arg(&ins, 0)?)?;
                let (a, ty) = self.tensor(self.arg(&ins, 1)?)?;
                let (b, _) = self.tensor(self.arg(&ins, 2)?)?;
                let y = ir(&self.node, &self.op, self.b.select(c, a, b))?;
                self.set(&out0, V::T(y, ty));
            }
            "Cast" => {
                let to = attr_i(n, "to").unwrap_or(0) as i32;
                let (x, _) = self.tensor(self.arg(&ins, 0)?)?;
                let d = ir_dtype(to).ok_or_else(|| self.unsupported(format!("cast to {}", type_name(to))))?;
                let y = if self.b.dtype(x) == d {
                    x
                } else if d == DType::Bool {
                    // x ≠ 0
                    let z = self.scalar(0.0, x)?;
                    ir(&self.node, &self.op, self.b.compare(CmpOp::Ne, x, z))?
                } else {
                    ir(&self.node, &self.op, self.b.cast(x, d))?
                };
                self.set(&out0, V::T(y, to));
            }
            "MatMul" => {
                let (a, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let (b, _) = self.tensor(self.arg(&ins, 1)?)?;
                let (ra, rb) = (self.b.shape(a).len(), self.b.shape(b).len());
                let a2 = if ra == 1 {
                    let k = self.b.shape(a)[0];
                    ir(&self.node, &self.op, self.b.reshape(a, &[1, k]))?
                } else {
                    a
                };
                let b2 = if rb == 1 {
                    let k = self.b.shape(b)[0];
                    ir(&self.node, &self.op, self.b.reshape(b, &[k, 1]))?
                } else {
                    b
                };
                let mut y = ir(&self.node, &self.op, self.b.matmul(a2, b2, false))?;
                if ra == 1 || rb == 1 {
                    let mut s = self.b.shape(y).to_vec();
                    if rb == 1 {
                        s.pop();
                    }
                    if ra == 1 {
                        let l = s.len();
                        s.remove(l - if rb == 1 { 1 } else { 2 });
                    }
                    y = ir(&self.node, &self.op, self.b.reshape(y, &s))?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "Gemm" => {
                let (a, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let (b, _) = self.tensor(self.arg(&ins, 1)?)?;
                let a = if attr_i(n, "transA").unwrap_or(0) != 0 { ir(&self.node, &self.op, self.b.permute(a, &[1, 0]))? } else { a };
                let tb = attr_i(n, "transB").unwrap_or(0) != 0;
                let mut y = ir(&self.node, &self.op, self.b.matmul(a, b, tb))?;
                let alpha = attr_f(n, "alpha").unwrap_or(1.0) as f64;
                if alpha != 1.0 {
                    y = ir(&self.node, &self.op, self.b.scale(y, alpha))?;
                }
                if let Some(c) = ins.get(2).filter(|s| !s.is_empty()) {
                    let (c, _) = self.tensor(c)?;
                    let beta = attr_f(n, "beta").unwrap_or(1.0) as f64;
                    let c = if beta != 1.0 { ir(&self.node, &self.op, self.b.scale(c, beta))? } else { c };
                    y = ir(&self.node, &self.op, self.b.add(y, c))?;
                }
                self.set(&out0, V::T(y, ty));
            }
            "Transpose" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let r = self.b.shape(x).len();
                let perm: Vec<usize> = match attr_ints(n, "perm") {
                    Some(p) => p.iter().map(|&a| norm_axis(a, r).ok_or_else(|| self.invalid(format!("perm {p:?}")))).collect::<R<_>>()?,
                    None => (0..r).rev().collect(),
                };
                let y = ir(&self.node, &self.op, self.b.permute(x, &perm))?;
                self.set(&out0, V::T(y, ty));
            }
            "Reshape" | "Flatten" | "Squeeze" | "Unsqueeze" => {
                let in_shape = self.shape_of(self.arg(&ins, 0)?)?;
                let target = match op.as_str() {
                    "Reshape" => {
                        let spec = self.const_ints(self.arg(&ins, 1)?, "the target shape")?;
                        reshape_target(&in_shape, &spec, attr_i(n, "allowzero").unwrap_or(0) != 0).map_err(|e| self.invalid(e))?
                    }
                    "Flatten" => {
                        let axis = attr_i(n, "axis").unwrap_or(1);
                        let a = if axis < 0 { axis + in_shape.len() as i64 } else { axis };
                        if !(0..=in_shape.len() as i64).contains(&a) {
                            return Err(self.invalid(format!("axis {axis}")));
                        }
                        let a = a as usize;
                        vec![in_shape[..a].iter().product(), in_shape[a..].iter().product()]
                    }
                    _ => {
                        let axes = if opset >= 13 {
                            if ins.len() > 1 && !ins[1].is_empty() {
                                Some(self.const_ints(self.arg(&ins, 1)?, "axes")?)
                            } else {
                                None
                            }
                        } else {
                            attr_ints(n, "axes")
                        };
                        squeeze_target(&in_shape, axes.as_deref(), op == "Unsqueeze").map_err(|e| self.invalid(e))?
                    }
                };
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let y = ir(&self.node, &self.op, self.b.reshape(x, &target))?;
                self.set(&out0, V::T(y, ty));
            }
            "Expand" => {
                let spec = self.const_ints(self.arg(&ins, 1)?, "the shape")?;
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let s = self.b.shape(x).to_vec();
                let spec: Vec<usize> = spec.iter().map(|&d| d.max(0) as usize).collect();
                let out = tg_ir::broadcast_shapes(&s, &spec).ok_or_else(|| self.invalid(format!("{s:?} does not broadcast to {spec:?}")))?;
                let x = if s.len() < out.len() {
                    let mut t = vec![1; out.len() - s.len()];
                    t.extend(&s);
                    ir(&self.node, &self.op, self.b.reshape(x, &t))?
                } else {
                    x
                };
                let y = if self.b.shape(x) == out.as_slice() { x } else { ir(&self.node, &self.op, self.b.expand(x, &out))? };
                self.set(&out0, V::T(y, ty));
            }
            "Concat" => {
                let mut xs = Vec::new();
                let mut ty = dt::FLOAT;
                for i in &ins {
                    let (t, tt) = self.tensor(i)?;
                    ty = tt;
                    if !self.b.shape(t).contains(&0) {
                        xs.push(t);
                    }
                }
                let r = self.shape_of(self.arg(&ins, 0)?)?.len();
                let axis = norm_axis(attr_i(n, "axis").unwrap_or(0), r).ok_or_else(|| self.invalid("axis out of range"))?;
                let y = if xs.len() == 1 { xs[0] } else { ir(&self.node, &self.op, self.b.concat(&xs, axis))? };
                self.set(&out0, V::T(y, ty));
            }
            "Slice" => {
                let shape = self.shape_of(self.arg(&ins, 0)?)?;
                let (starts, ends, axes, steps) = if opset < 10 {
                    (attr_ints(n, "starts").unwrap_or_default(), attr_ints(n, "ends").unwrap_or_default(), attr_ints(n, "axes"), None)
                } else {
                    let s = self.const_ints(self.arg(&ins, 1)?, "starts")?;
                    let e = self.const_ints(self.arg(&ins, 2)?, "ends")?;
                    let a = match ins.get(3).filter(|x| !x.is_empty()) {
                        Some(x) => Some(self.const_ints(x, "axes")?),
                        None => None,
                    };
                    let st = match ins.get(4).filter(|x| !x.is_empty()) {
                        Some(x) => Some(self.const_ints(x, "steps")?),
                        None => None,
                    };
                    (s, e, a, st)
                };
                let ranges = slice_ranges(&shape, &starts, &ends, axes.as_deref(), steps.as_deref()).map_err(|e| match e {
                    SliceErr::Step => self.unsupported("a step other than 1"),
                    SliceErr::Bad(s) => self.invalid(s),
                })?;
                let (mut y, ty) = self.tensor(self.arg(&ins, 0)?)?;
                for (axis, (a, b)) in ranges.into_iter().enumerate() {
                    if (a, b) != (0, shape[axis]) {
                        y = ir(&self.node, &self.op, self.b.slice(y, axis, a, b))?;
                    }
                }
                self.set(&out0, V::T(y, ty));
            }
            "Gather" => {
                let shape = self.shape_of(self.arg(&ins, 0)?)?;
                let axis = norm_axis(attr_i(n, "axis").unwrap_or(0), shape.len()).ok_or_else(|| self.invalid("axis out of range"))?;
                let idx = match self.constant(self.arg(&ins, 1)?)? {
                    Some(Value { data: ValueData::I64(v), shape: s, .. }) => Some((v, s)),
                    Some(_) => return Err(self.invalid("indices must be integers")),
                    None => None,
                };
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let y = match idx {
                    Some((idx, ishape)) => {
                        // Constant indices: one slice each, concatenated.
                        if idx.len() > 256 {
                            return Err(self.unsupported("more than 256 constant indices on a tensor"));
                        }
                        let ext = shape[axis] as i64;
                        let mut parts = Vec::new();
                        for &i in &idx {
                            let j = if i < 0 { i + ext } else { i };
                            if !(0..ext).contains(&j) {
                                return Err(self.invalid(format!("index {i} out of range for {ext}")));
                            }
                            parts.push(ir(&self.node, &self.op, self.b.slice(x, axis, j as usize, j as usize + 1))?);
                        }
                        let c = if parts.len() == 1 { parts[0] } else { ir(&self.node, &self.op, self.b.concat(&parts, axis))? };
                        let mut out: Vec<usize> = shape[..axis].to_vec();
                        out.extend(&ishape);
                        out.extend(&shape[axis + 1..]);
                        ir(&self.node, &self.op, self.b.reshape(c, &out))?
                    }
                    None if axis == 0 && shape.len() == 2 && self.b.dtype(x) == DType::F32 => {
                        let (ids, _) = self.tensor(self.arg(&ins, 1)?)?;
                        ir(&self.node, &self.op, self.b.gather(x, ids))?
                    }
                    None => return Err(self.unsupported("indices computed at run time, other than rows of a rank-2 float table")),
                };
                self.set(&out0, V::T(y, ty));
            }
            "Softmax" | "LogSoftmax" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let shape = self.b.shape(x).to_vec();
                let r = shape.len();
                let axis = norm_axis(attr_i(n, "axis").unwrap_or(if opset >= 13 { -1 } else { 1 }), r).ok_or_else(|| self.invalid("axis out of range"))?;
                let log = op == "LogSoftmax";
                let y = if opset >= 13 || axis == r - 1 {
                    self.softmax(x, axis, log)?
                } else {
                    // Before opset 13: over everything from `axis` on, as one row.
                    let flat = [shape[..axis].iter().product::<usize>(), shape[axis..].iter().product::<usize>()];
                    let f = ir(&self.node, &self.op, self.b.reshape(x, &flat))?;
                    let s = self.softmax(f, 1, log)?;
                    ir(&self.node, &self.op, self.b.reshape(s, &shape))?
                };
                self.set(&out0, V::T(y, ty));
            }
            "ReduceSum" | "ReduceMean" | "ReduceMax" | "ReduceMin" | "ReduceSumSquare" | "ReduceL1" | "ReduceL2" | "ReduceLogSum" | "ReduceLogSumExp" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let r = self.b.shape(x).len();
                let from_input = (op == "ReduceSum" && opset >= 13) || opset >= 18;
                let axes = if from_input {
                    match ins.get(1).filter(|s| !s.is_empty()) {
                        Some(a) => Some(self.const_ints(a, "axes")?),
                        None => None,
                    }
                } else {
                    attr_ints(n, "axes")
                };
                let keep = attr_i(n, "keepdims").unwrap_or(1) != 0;
                let axes: Vec<usize> = match axes {
                    Some(a) if !a.is_empty() => {
                        let mut v: Vec<usize> = a.iter().map(|&x| norm_axis(x, r).ok_or_else(|| self.invalid(format!("axes {a:?}")))).collect::<R<_>>()?;
                        v.sort();
                        v.dedup();
                        v
                    }
                    _ if attr_i(n, "noop_with_empty_axes").unwrap_or(0) != 0 => {
                        self.set(&out0, V::T(x, ty));
                        return Ok(());
                    }
                    _ => (0..r).collect(),
                };
                if self.b.dtype(x) != DType::F32 {
                    return Err(self.unsupported("reductions of integer tensors"));
                }
                let y = match op.as_str() {
                    "ReduceSum" => self.reduce(ReduceOp::Sum, x, &axes, keep)?,
                    "ReduceMean" => self.reduce(ReduceOp::Mean, x, &axes, keep)?,
                    "ReduceMax" => self.reduce(ReduceOp::Max, x, &axes, keep)?,
                    "ReduceSumSquare" => {
                        let sq = self.bin(BinaryOp::Mul, x, x)?;
                        self.reduce(ReduceOp::Sum, sq, &axes, keep)?
                    }
                    "ReduceL1" => {
                        let a = self.unary(UnaryOp::Abs, x)?;
                        self.reduce(ReduceOp::Sum, a, &axes, keep)?
                    }
                    "ReduceL2" => {
                        let sq = self.bin(BinaryOp::Mul, x, x)?;
                        let s = self.reduce(ReduceOp::Sum, sq, &axes, keep)?;
                        self.unary(UnaryOp::Sqrt, s)?
                    }
                    "ReduceLogSum" => {
                        let s = self.reduce(ReduceOp::Sum, x, &axes, keep)?;
                        self.unary(UnaryOp::Log, s)?
                    }
                    "ReduceLogSumExp" => {
                        // m + log(sum(exp(x − m))), m the max (kept for broadcasting).
                        let m = self.reduce(ReduceOp::Max, x, &axes, true)?;
                        let d = ir(&self.node, &self.op, self.b.sub(x, m))?;
                        let e = self.unary(UnaryOp::Exp, d)?;
                        let s = self.reduce(ReduceOp::Sum, e, &axes, true)?;
                        let l = self.unary(UnaryOp::Log, s)?;
                        let y = ir(&self.node, &self.op, self.b.add(m, l))?;
                        if keep {
                            y
                        } else {
                            let sh: Vec<usize> = self.b.shape(y).iter().enumerate().filter(|(i, _)| !axes.contains(i)).map(|(_, &d)| d).collect();
                            ir(&self.node, &self.op, self.b.reshape(y, &sh))?
                        }
                    }
                    _ => {
                        let nx = self.unary(UnaryOp::Neg, x)?;
                        let m = self.reduce(ReduceOp::Max, nx, &axes, keep)?;
                        self.unary(UnaryOp::Neg, m)?
                    }
                };
                self.set(&out0, V::T(y, ty));
            }
            "CastLike" => {
                let (x, _) = self.tensor(self.arg(&ins, 0)?)?;
                let (like, to) = self.tensor(self.arg(&ins, 1)?)?;
                let d = self.b.dtype(like);
                if d == DType::Bool {
                    return Err(self.unsupported("cast to bool"));
                }
                let y = if self.b.dtype(x) == d { x } else { ir(&self.node, &self.op, self.b.cast(x, d))? };
                self.set(&out0, V::T(y, to));
            }
            "Softsign" | "Softplus" | "Elu" | "Selu" | "ThresholdedRelu" | "HardSwish" | "Mish" | "Celu" => {
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let one = self.scalar(1.0, x)?;
                let zero = self.scalar(0.0, x)?;
                let y = match op.as_str() {
                    // x / (1 + |x|)
                    "Softsign" => {
                        let a = self.unary(UnaryOp::Abs, x)?;
                        let d = ir(&self.node, &self.op, self.b.add(a, one))?;
                        ir(&self.node, &self.op, self.b.div(x, d))?
                    }
                    // log(1 + eˣ)
                    "Softplus" => {
                        let e = self.unary(UnaryOp::Exp, x)?;
                        let d = ir(&self.node, &self.op, self.b.add(e, one))?;
                        self.unary(UnaryOp::Log, d)?
                    }
                    // x < 0: α(eˣ − 1), else x (Selu: both times γ; Celu: α(e^(x/α) − 1))
                    "Elu" | "Selu" | "Celu" => {
                        let (alpha, gamma) = match op.as_str() {
                            "Selu" => (attr_f(n, "alpha").unwrap_or(1.673_263_2) as f64, attr_f(n, "gamma").unwrap_or(1.050_701) as f64),
                            _ => (attr_f(n, "alpha").unwrap_or(1.0) as f64, 1.0),
                        };
                        let arg = if op == "Celu" { ir(&self.node, &self.op, self.b.scale(x, 1.0 / alpha))? } else { x };
                        let e = self.unary(UnaryOp::Exp, arg)?;
                        let em1 = ir(&self.node, &self.op, self.b.sub(e, one))?;
                        let neg = ir(&self.node, &self.op, self.b.scale(em1, alpha))?;
                        let lt = ir(&self.node, &self.op, self.b.compare(CmpOp::Lt, x, zero))?;
                        let y = ir(&self.node, &self.op, self.b.select(lt, neg, x))?;
                        if gamma != 1.0 {
                            ir(&self.node, &self.op, self.b.scale(y, gamma))?
                        } else {
                            y
                        }
                    }
                    // x > α: x, else 0
                    "ThresholdedRelu" => {
                        let a = self.scalar(attr_f(n, "alpha").unwrap_or(1.0) as f64, x)?;
                        let gt = ir(&self.node, &self.op, self.b.compare(CmpOp::Gt, x, a))?;
                        ir(&self.node, &self.op, self.b.select(gt, x, zero))?
                    }
                    // x · max(0, min(1, x/6 + ½))
                    "HardSwish" => {
                        let l = ir(&self.node, &self.op, self.b.scale(x, 1.0 / 6.0))?;
                        let h = self.scalar(0.5, x)?;
                        let l = ir(&self.node, &self.op, self.b.add(l, h))?;
                        let m = self.bin(BinaryOp::Min, l, one)?;
                        let m = self.bin(BinaryOp::Max, m, zero)?;
                        self.bin(BinaryOp::Mul, x, m)?
                    }
                    // x · tanh(log(1 + eˣ))
                    _ => {
                        let e = self.unary(UnaryOp::Exp, x)?;
                        let d = ir(&self.node, &self.op, self.b.add(e, one))?;
                        let sp = self.unary(UnaryOp::Log, d)?;
                        let t = self.unary(UnaryOp::Tanh, sp)?;
                        self.bin(BinaryOp::Mul, x, t)?
                    }
                };
                self.set(&out0, V::T(y, ty));
            }
            "PRelu" => {
                // x < 0: slope·x, else x
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let (slope, _) = self.tensor(self.arg(&ins, 1)?)?;
                let zero = self.scalar(0.0, x)?;
                let lt = ir(&self.node, &self.op, self.b.compare(CmpOp::Lt, x, zero))?;
                let sx = self.bin(BinaryOp::Mul, x, slope)?;
                let y = ir(&self.node, &self.op, self.b.select(lt, sx, x))?;
                self.set(&out0, V::T(y, ty));
            }
            "Split" => {
                let shape = self.shape_of(self.arg(&ins, 0)?)?;
                let axis = norm_axis(attr_i(n, "axis").unwrap_or(0), shape.len()).ok_or_else(|| self.invalid("axis out of range"))?;
                let ext = shape[axis];
                let sizes: Vec<usize> = match ins.get(1).filter(|s| !s.is_empty()) {
                    Some(sp) if opset >= 13 => self.const_ints(sp, "split")?.iter().map(|&v| v.max(0) as usize).collect(),
                    _ => match attr_ints(n, "split").filter(|v| !v.is_empty() && opset < 13) {
                        Some(v) => v.iter().map(|&v| v.max(0) as usize).collect(),
                        None => {
                            let k = attr_i(n, "num_outputs").map(|v| v.max(1) as usize).unwrap_or(outs.len().max(1));
                            let each = ext.div_ceil(k);
                            (0..k).map(|i| each.min(ext.saturating_sub(i * each))).collect()
                        }
                    },
                };
                if sizes.iter().sum::<usize>() != ext || sizes.len() != outs.len() {
                    return Err(self.invalid(format!("split {sizes:?} of {ext} into {} outputs", outs.len())));
                }
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let mut at = 0;
                for (o, &k) in outs.iter().zip(&sizes) {
                    let y = ir(&self.node, &self.op, self.b.slice(x, axis, at, at + k))?;
                    at += k;
                    self.set(o, V::T(y, ty));
                }
            }
            "LayerNormalization" => {
                // (x − mean) / √(var + ε) · scale + bias over the axes from `axis` on.
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let r = self.b.shape(x).len();
                let axis = norm_axis(attr_i(n, "axis").unwrap_or(-1), r).ok_or_else(|| self.invalid("axis out of range"))?;
                let eps = attr_f(n, "epsilon").unwrap_or(1e-5) as f64;
                let axes: Vec<usize> = (axis..r).collect();
                let mean = self.reduce(ReduceOp::Mean, x, &axes, true)?;
                let d = ir(&self.node, &self.op, self.b.sub(x, mean))?;
                let sq = self.bin(BinaryOp::Mul, d, d)?;
                let var = self.reduce(ReduceOp::Mean, sq, &axes, true)?;
                let e = self.scalar(eps, x)?;
                let ve = ir(&self.node, &self.op, self.b.add(var, e))?;
                let inv = self.unary(UnaryOp::Rsqrt, ve)?;
                let norm = self.bin(BinaryOp::Mul, d, inv)?;
                let (scale, _) = self.tensor(self.arg(&ins, 1)?)?;
                let mut y = self.bin(BinaryOp::Mul, norm, scale)?;
                if let Some(bias) = ins.get(2).filter(|s| !s.is_empty()) {
                    let (bias, _) = self.tensor(bias)?;
                    y = ir(&self.node, &self.op, self.b.add(y, bias))?;
                }
                self.set(&out0, V::T(y, ty));
                if let Some(o) = outs.get(1) {
                    self.set(o, V::T(mean, ty));
                }
                if let Some(o) = outs.get(2) {
                    self.set(o, V::T(inv, ty));
                }
            }
            "Trilu" => {
                // Keep x[.., i, j] where j − i ≥ k (upper) or j − i ≤ k (lower), else 0.
                let (x, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let k = match ins.get(1).filter(|s| !s.is_empty()) {
                    Some(kname) => match self.constant(kname)? {
                        Some(Value { data: ValueData::I64(v), .. }) if v.len() == 1 => v[0],
                        _ => return Err(self.unsupported("k computed at run time")),
                    },
                    None => 0,
                };
                let shape = self.b.shape(x).to_vec();
                if shape.len() < 2 {
                    return Err(self.invalid("input of rank < 2"));
                }
                let (rows, cols) = (shape[shape.len() - 2], shape[shape.len() - 1]);
                let k = i32::try_from(k).map_err(|_| self.invalid(format!("k = {k}")))?;
                let i = ir(&self.node, &self.op, self.b.iota(&[rows, cols], 0, DType::I32))?;
                let j = ir(&self.node, &self.op, self.b.iota(&[rows, cols], 1, DType::I32))?;
                let diff = ir(&self.node, &self.op, self.b.sub(j, i))?;
                let kc = ir(&self.node, &self.op, self.b.constant(k as f64, DType::I32))?;
                let cmp = if attr_i(n, "upper").unwrap_or(1) != 0 { CmpOp::Ge } else { CmpOp::Le };
                let keep = ir(&self.node, &self.op, self.b.compare(cmp, diff, kc))?;
                let zero = self.scalar(0.0, x)?;
                let y = ir(&self.node, &self.op, self.b.select(keep, x, zero))?;
                self.set(&out0, V::T(y, ty));
            }
            "Pad" => {
                let mode = attr(n, "mode").and_then(|a| a.s.clone()).map(|b| String::from_utf8_lossy(&b).into_owned()).unwrap_or_else(|| "constant".into());
                if mode != "constant" {
                    return Err(self.unsupported(format!("mode '{mode}'")));
                }
                let shape = self.shape_of(self.arg(&ins, 0)?)?;
                let r = shape.len();
                let (pads, value, axes) = if opset < 11 {
                    (attr_ints(n, "pads").unwrap_or_default(), attr_f(n, "value").unwrap_or(0.0) as f64, None)
                } else {
                    let pads = self.const_ints(self.arg(&ins, 1)?, "pads")?;
                    let value = match ins.get(2).filter(|s| !s.is_empty()) {
                        None => 0.0,
                        Some(v) => match self.const_scalar(v)? {
                            Some(v) => v,
                            None => return Err(self.unsupported("constant_value computed at run time")),
                        },
                    };
                    let axes = match ins.get(3).filter(|s| !s.is_empty()) {
                        Some(a) => Some(self.const_ints(a, "axes")?),
                        None => None,
                    };
                    (pads, value, axes)
                };
                let axes: Vec<usize> = match axes {
                    Some(a) => a.iter().map(|&v| norm_axis(v, r).ok_or_else(|| self.invalid(format!("axes {a:?}")))).collect::<R<_>>()?,
                    None => (0..r).collect(),
                };
                if pads.len() != 2 * axes.len() {
                    return Err(self.invalid(format!("{} pads for {} axes", pads.len(), axes.len())));
                }
                let (mut y, ty) = self.tensor(self.arg(&ins, 0)?)?;
                let fill = self.scalar(value, y)?;
                for (k, &axis) in axes.iter().enumerate() {
                    let (before, after) = (pads[k], pads[k + axes.len()]);
                    // Negative pads crop.
                    let cur = self.b.shape(y)[axis] as i64;
                    let (lo, hi) = ((-before).max(0), cur - (-after).max(0));
                    if lo > 0 || hi < cur {
                        if lo > hi {
                            return Err(self.invalid(format!("pads {pads:?} crop more than the axis holds")));
                        }
                        y = ir(&self.node, &self.op, self.b.slice(y, axis, lo as usize, hi as usize))?;
                    }
                    let mut parts = Vec::new();
                    for (count, at_end) in [(before.max(0) as usize, false), (after.max(0) as usize, true)] {
                        if count == 0 {
                            continue;
                        }
                        let mut block = self.b.shape(y).to_vec();
                        block[axis] = count;
                        let ones = vec![1; block.len()];
                        let f = ir(&self.node, &self.op, self.b.reshape(fill, &ones))?;
                        let f = ir(&self.node, &self.op, self.b.expand(f, &block))?;
                        parts.push((at_end, f));
                    }
                    if !parts.is_empty() {
                        let mut xs: Vec<Tensor> = parts.iter().filter(|p| !p.0).map(|p| p.1).collect();
                        xs.push(y);
                        xs.extend(parts.iter().filter(|p| p.0).map(|p| p.1));
                        y = ir(&self.node, &self.op, self.b.concat(&xs, axis))?;
                    }
                }
                self.set(&out0, V::T(y, ty));
            }
            "Range" => return Err(self.unsupported("bounds computed at run time (its length is a shape)")),
            other if cnn::OPS.contains(&other) => self.cnn(n, &ins, &outs)?,
            _ => return Err(self.unsupported("")),
        }
        Ok(())
    }
}

/// The target of `Reshape` from its spec (0 = copy the input's dimension unless `allowzero`,
/// −1 = inferred).
fn reshape_target(input: &[usize], spec: &[i64], allowzero: bool) -> Result<Vec<usize>, String> {
    let total: usize = input.iter().product();
    let mut out = Vec::with_capacity(spec.len());
    let mut infer = None;
    for (i, &d) in spec.iter().enumerate() {
        match d {
            -1 if infer.is_none() => {
                infer = Some(i);
                out.push(1);
            }
            0 if !allowzero => out.push(*input.get(i).ok_or_else(|| format!("shape {spec:?}: 0 at {i} past the input's rank"))?),
            d if d >= 0 => out.push(d as usize),
            _ => return Err(format!("shape {spec:?}: bad dimension {d}")),
        }
    }
    if let Some(i) = infer {
        let rest: usize = out.iter().product();
        if rest == 0 || !total.is_multiple_of(rest) {
            return Err(format!("cannot reshape {input:?} to {spec:?}"));
        }
        out[i] = total / rest;
    }
    if out.iter().product::<usize>() != total {
        return Err(format!("cannot reshape {input:?} ({total} elements) to {out:?}"));
    }
    Ok(out)
}

/// The shape after `Squeeze` / `Unsqueeze` over `axes`.
fn squeeze_target(input: &[usize], axes: Option<&[i64]>, unsqueeze: bool) -> Result<Vec<usize>, String> {
    if unsqueeze {
        let axes = axes.ok_or("Unsqueeze needs axes")?;
        let r = input.len() + axes.len();
        let mut ax: Vec<usize> = axes.iter().map(|&a| norm_axis(a, r).ok_or(format!("axes {axes:?}"))).collect::<Result<_, _>>()?;
        ax.sort();
        ax.dedup();
        if ax.len() != axes.len() {
            return Err(format!("repeated axes {axes:?}"));
        }
        let mut it = input.iter();
        Ok((0..r).map(|i| if ax.contains(&i) { 1 } else { *it.next().unwrap_or(&1) }).collect())
    } else {
        match axes {
            None => Ok(input.iter().copied().filter(|&d| d != 1).collect()),
            Some(axes) => {
                let ax: Vec<usize> = axes.iter().map(|&a| norm_axis(a, input.len()).ok_or(format!("axes {axes:?}"))).collect::<Result<_, _>>()?;
                if let Some(&a) = ax.iter().find(|&&a| input[a] != 1) {
                    return Err(format!("cannot squeeze axis {a} of {input:?}"));
                }
                Ok(input.iter().enumerate().filter(|(i, _)| !ax.contains(i)).map(|(_, &d)| d).collect())
            }
        }
    }
}

enum SliceErr {
    Step,
    Bad(String),
}

/// Per axis, the `[start, end)` a `Slice` keeps (ONNX clamping rules, step 1 only).
fn slice_ranges(shape: &[usize], starts: &[i64], ends: &[i64], axes: Option<&[i64]>, steps: Option<&[i64]>) -> Result<Vec<(usize, usize)>, SliceErr> {
    let mut out: Vec<(usize, usize)> = shape.iter().map(|&d| (0, d)).collect();
    let default: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = axes.unwrap_or(&default);
    if starts.len() != ends.len() || axes.len() != starts.len() {
        return Err(SliceErr::Bad(format!("starts {starts:?}, ends {ends:?}, axes {axes:?} differ in length")));
    }
    for (k, &a) in axes.iter().enumerate() {
        if steps.is_some_and(|s| s.get(k).copied().unwrap_or(1) != 1) {
            return Err(SliceErr::Step);
        }
        let ax = norm_axis(a, shape.len()).ok_or_else(|| SliceErr::Bad(format!("axis {a}")))?;
        let d = shape[ax] as i64;
        let clamp = |v: i64| -> i64 { (if v < 0 { v + d } else { v }).clamp(0, d) };
        let (s, e) = (clamp(starts[k]), clamp(ends[k]));
        out[ax] = (s as usize, (e.max(s)) as usize);
    }
    Ok(out)
}

fn attr_tensor(n: &NodeProto, name: &str) -> Option<crate::proto::TensorProto> {
    attr(n, name).and_then(|a| a.t.clone())
}

fn scalar_i(v: i64) -> Value {
    Value { shape: vec![], data: ValueData::I64(vec![v]), onnx_type: dt::INT64 }
}

/// Evaluates `n` on constant inputs; `None` where the importer has no constant rule for
/// it (the op is then built as tensors).
fn fold(imp: &mut Imp, n: &NodeProto, ins: &[Option<Value>]) -> R<Option<Vec<Value>>> {
    let op = imp.op.clone();
    let opset = imp.model.opset;
    let c = |k: usize| ins.get(k).and_then(|v| v.as_ref());
    let ints = |v: &Value| match &v.data {
        ValueData::I64(x) => Some(x.clone()),
        _ => None,
    };
    Ok(Some(match op.as_str() {
        "Constant" => {
            if let Some(t) = attr_tensor(n, "value") {
                vec![decode_tensor(Some(imp.model), &t)?]
            } else if let Some(f) = attr_f(n, "value_float") {
                vec![Value { shape: vec![], data: ValueData::F32(vec![f]), onnx_type: dt::FLOAT }]
            } else if let Some(i) = attr_i(n, "value_int") {
                vec![scalar_i(i)]
            } else if let Some(a) = attr(n, "value_floats") {
                vec![Value { shape: vec![a.floats.len()], data: ValueData::F32(a.floats.clone()), onnx_type: dt::FLOAT }]
            } else if let Some(a) = attr(n, "value_ints") {
                vec![Value { shape: vec![a.ints.len()], data: ValueData::I64(a.ints.clone()), onnx_type: dt::INT64 }]
            } else {
                return Err(imp.unsupported("a Constant without value, value_float(s) or value_int(s)"));
            }
        }
        "Identity" => vec![c(0).cloned().ok_or_else(|| imp.invalid("no input"))?],
        "ConstantOfShape" => {
            let shape: Vec<usize> =
                ints(c(0).ok_or_else(|| imp.invalid("no shape"))?).ok_or_else(|| imp.invalid("shape must be integers"))?.iter().map(|&d| d.max(0) as usize).collect();
            let count: usize = shape.iter().product();
            if count > 1 << 24 {
                return Ok(None);
            }
            let v = match attr_tensor(n, "value") {
                Some(t) => decode_tensor(Some(imp.model), &t)?,
                None => Value { shape: vec![1], data: ValueData::F32(vec![0.0]), onnx_type: dt::FLOAT },
            };
            if v.data.len() != 1 {
                return Err(imp.invalid("value must hold one element"));
            }
            let data = match v.data {
                ValueData::F32(x) => ValueData::F32(vec![x[0]; count]),
                ValueData::I64(x) => ValueData::I64(vec![x[0]; count]),
                ValueData::Bool(x) => ValueData::Bool(vec![x[0]; count]),
            };
            vec![Value { shape, data, onnx_type: v.onnx_type }]
        }
        "Range" => {
            let (s, l, d) = match (c(0), c(1), c(2)) {
                (Some(a), Some(b), Some(e)) => (a, b, e),
                _ => return Ok(None),
            };
            if s.data.len() != 1 || l.data.len() != 1 || d.data.len() != 1 {
                return Err(imp.invalid("start, limit and delta must be scalars"));
            }
            match (&s.data, &l.data, &d.data) {
                (ValueData::I64(a), ValueData::I64(b), ValueData::I64(e)) if e[0] != 0 => {
                    let (a, b, e) = (a[0], b[0], e[0]);
                    let n = ((b - a) as f64 / e as f64).ceil().max(0.0) as usize;
                    vec![Value { shape: vec![n], data: ValueData::I64((0..n as i64).map(|i| a + i * e).collect()), onnx_type: s.onnx_type }]
                }
                (ValueData::F32(a), ValueData::F32(b), ValueData::F32(e)) if e[0] != 0.0 => {
                    let (a, b, e) = (a[0], b[0], e[0]);
                    let n = ((b - a) / e).ceil().max(0.0) as usize;
                    vec![Value { shape: vec![n], data: ValueData::F32((0..n).map(|i| a + i as f32 * e).collect()), onnx_type: dt::FLOAT }]
                }
                _ => return Ok(None),
            }
        }
        "Shape" | "Size" => {
            let name = n.input.first().cloned().unwrap_or_default();
            let shape = imp.shape_of(&name)?;
            if op == "Size" {
                vec![scalar_i(shape.iter().product::<usize>() as i64)]
            } else {
                let r = shape.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = if opset >= 15 { (clamp(attr_i(n, "start").unwrap_or(0)), clamp(attr_i(n, "end").unwrap_or(r))) } else { (0, r as usize) };
                let dims: Vec<i64> = shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                vec![Value { shape: vec![dims.len()], data: ValueData::I64(dims), onnx_type: dt::INT64 }]
            }
        }
        _ => {
            // Shape arithmetic on small integer constants; anything else is built as tensors.
            let all: Vec<&Value> = ins.iter().flatten().collect();
            if all.is_empty() || all.iter().any(|v| v.data.len() > 4096) {
                return Ok(None);
            }
            match fold_small(&op, n, opset, ins) {
                Some(Ok(v)) => vec![v],
                Some(Err(e)) => return Err(imp.invalid(e)),
                None => return Ok(None),
            }
        }
    }))
}

/// Broadcast index: the flat index in `shape` (right-aligned to `out`) of position `idx` of `out`.
fn bcast_index(out: &[usize], shape: &[usize], mut flat: usize) -> usize {
    let mut idx = 0;
    let mut stride = 1;
    for k in (0..out.len()).rev() {
        let o = flat % out[k];
        flat /= out[k];
        let off = k as isize - (out.len() as isize - shape.len() as isize);
        if off >= 0 {
            let d = shape[off as usize];
            idx += if d == 1 { 0 } else { o } * stride;
            stride *= d;
        }
    }
    idx
}

/// Constant evaluation of the ops shape arithmetic uses (integers mostly), on small inputs.
fn fold_small(op: &str, n: &NodeProto, opset: i64, ins: &[Option<Value>]) -> Option<Result<Value, String>> {
    let c = |k: usize| ins.get(k).and_then(|v| v.as_ref());
    let int_list = |v: &Value| -> Option<Vec<i64>> {
        match &v.data {
            ValueData::I64(x) => Some(x.clone()),
            _ => None,
        }
    };
    match op {
        "Add" | "Sub" | "Mul" | "Div" | "Equal" | "Less" | "Greater" | "Max" | "Min" if ins.len() == 2 => {
            let (a, b) = (c(0)?, c(1)?);
            let out = tg_ir::broadcast_shapes(&a.shape, &b.shape)?;
            let count: usize = out.iter().product();
            let cmp = matches!(op, "Equal" | "Less" | "Greater");
            Some(Ok(match (&a.data, &b.data) {
                (ValueData::I64(x), ValueData::I64(y)) => {
                    let mut r = Vec::with_capacity(count);
                    let mut bo = Vec::with_capacity(count);
                    for i in 0..count {
                        let (p, q) = (x[bcast_index(&out, &a.shape, i)], y[bcast_index(&out, &b.shape, i)]);
                        match op {
                            "Add" => r.push(p.wrapping_add(q)),
                            "Sub" => r.push(p.wrapping_sub(q)),
                            "Mul" => r.push(p.wrapping_mul(q)),
                            "Div" if q == 0 => return Some(Err("integer division by zero in shape arithmetic".into())),
                            "Div" => r.push(p.wrapping_div(q)),
                            "Max" => r.push(p.max(q)),
                            "Min" => r.push(p.min(q)),
                            "Equal" => bo.push(p == q),
                            "Less" => bo.push(p < q),
                            _ => bo.push(p > q),
                        }
                    }
                    if cmp {
                        Value { shape: out, data: ValueData::Bool(bo), onnx_type: dt::BOOL }
                    } else {
                        Value { shape: out, data: ValueData::I64(r), onnx_type: a.onnx_type }
                    }
                }
                _ => return None,
            }))
        }
        "Neg" | "Abs" => {
            let v = c(0)?;
            let ValueData::I64(x) = &v.data else { return None };
            let r = x.iter().map(|&i| if op == "Neg" { i.wrapping_neg() } else { i.wrapping_abs() }).collect();
            Some(Ok(Value { shape: v.shape.clone(), data: ValueData::I64(r), onnx_type: v.onnx_type }))
        }
        "Cast" => {
            let to = attr_i(n, "to")? as i32;
            let v = c(0)?;
            let data = match (&v.data, to) {
                (ValueData::I64(x), dt::INT64 | dt::INT32) => ValueData::I64(x.clone()),
                (ValueData::F32(x), dt::INT64 | dt::INT32) => ValueData::I64(x.iter().map(|&f| f as i64).collect()),
                (ValueData::I64(x), dt::FLOAT) => ValueData::F32(x.iter().map(|&i| i as f32).collect()),
                (ValueData::F32(x), dt::FLOAT) => ValueData::F32(x.clone()),
                _ => return None,
            };
            Some(Ok(Value { shape: v.shape.clone(), data, onnx_type: to }))
        }
        "Concat" => {
            let vs: Vec<&Value> = ins.iter().map(|v| v.as_ref()).collect::<Option<_>>()?;
            if vs.iter().any(|v| v.shape.len() != 1) {
                return None;
            }
            let mut out = Vec::new();
            for v in &vs {
                out.extend(int_list(v)?);
            }
            Some(Ok(Value { shape: vec![out.len()], data: ValueData::I64(out), onnx_type: vs[0].onnx_type }))
        }
        "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten" => {
            let v = c(0)?;
            let shape = match op {
                "Reshape" => match reshape_target(&v.shape, &int_list(c(1)?)?, attr_i(n, "allowzero").unwrap_or(0) != 0) {
                    Ok(s) => s,
                    Err(e) => return Some(Err(e)),
                },
                "Flatten" => {
                    let a = norm_axis(attr_i(n, "axis").unwrap_or(1), v.shape.len() + 1)?;
                    vec![v.shape[..a].iter().product(), v.shape[a..].iter().product()]
                }
                _ => {
                    let axes = if opset >= 13 { c(1).and_then(int_list) } else { attr_ints(n, "axes") };
                    match squeeze_target(&v.shape, axes.as_deref(), op == "Unsqueeze") {
                        Ok(s) => s,
                        Err(e) => return Some(Err(e)),
                    }
                }
            };
            Some(Ok(Value { shape, data: v.data.clone(), onnx_type: v.onnx_type }))
        }
        "Gather" => {
            let (v, idx) = (c(0)?, c(1)?);
            let data = int_list(v)?;
            let ix = int_list(idx)?;
            if v.shape.len() != 1 || attr_i(n, "axis").unwrap_or(0) != 0 {
                return None;
            }
            let d = v.shape[0] as i64;
            let mut out = Vec::new();
            for &i in &ix {
                let j = if i < 0 { i + d } else { i };
                if !(0..d).contains(&j) {
                    return Some(Err(format!("index {i} out of range for {d}")));
                }
                out.push(data[j as usize]);
            }
            Some(Ok(Value { shape: idx.shape.clone(), data: ValueData::I64(out), onnx_type: v.onnx_type }))
        }
        "Slice" if opset >= 10 => {
            let v = c(0)?;
            if v.shape.len() != 1 {
                return None;
            }
            let data = int_list(v)?;
            let axes = c(3).and_then(int_list);
            let steps = c(4).and_then(int_list);
            match slice_ranges(&v.shape, &int_list(c(1)?)?, &int_list(c(2)?)?, axes.as_deref(), steps.as_deref()) {
                Ok(r) => {
                    let (a, b) = r[0];
                    Some(Ok(Value { shape: vec![b - a], data: ValueData::I64(data[a..b].to_vec()), onnx_type: v.onnx_type }))
                }
                Err(SliceErr::Step) => None,
                Err(SliceErr::Bad(e)) => Some(Err(e)),
            }
        }
        "Where" => {
            let (cond, a, b) = (c(0)?, c(1)?, c(2)?);
            let (ValueData::Bool(cv), ValueData::I64(x), ValueData::I64(y)) = (&cond.data, &a.data, &b.data) else { return None };
            let out = tg_ir::broadcast_shapes(&tg_ir::broadcast_shapes(&cond.shape, &a.shape)?, &b.shape)?;
            let count: usize = out.iter().product();
            let r = (0..count).map(|i| if cv[bcast_index(&out, &cond.shape, i)] { x[bcast_index(&out, &a.shape, i)] } else { y[bcast_index(&out, &b.shape, i)] }).collect();
            Some(Ok(Value { shape: out, data: ValueData::I64(r), onnx_type: a.onnx_type }))
        }
        _ => None,
    }
}

/// Imports `model`'s graph with its inputs bound to `shapes` (a graph input whose every
/// dimension is fixed in the file may be left out).
pub fn import(model: &OnnxModel, shapes: &HashMap<String, Vec<usize>>) -> Result<Imported, OnnxError> {
    import_with(model, shapes, &HashMap::new())
}

/// [`import`], with some graph inputs bound to values: those become constants of the graph
/// (no longer inputs), as a shape is — for inputs that decide shapes (a `Reshape` target,
/// `Slice` bounds, `Unsqueeze` axes given as graph inputs), so the plan is for those values.
pub fn import_with(model: &OnnxModel, shapes: &HashMap<String, Vec<usize>>, values: &HashMap<String, Value>) -> Result<Imported, OnnxError> {
    let g = model.graph();
    let mut imp =
        Imp { model, b: GraphBuilder::new(), vals: HashMap::new(), lazy: HashMap::new(), weights: OnnxWeights::default(), consts: 0, node: String::new(), op: String::new() };
    let file = model.path.display().to_string();
    for t in &g.initializer {
        let name = t.name.clone().unwrap_or_default();
        if t.data_type == Some(dt::FLOAT) {
            imp.lazy.insert(name, t);
        } else {
            let v = decode_tensor(Some(model), t)?;
            imp.vals.insert(name, V::C(v));
        }
    }
    let fed = model.inputs();
    if let Some(extra) = shapes.keys().chain(values.keys()).find(|k| !fed.iter().any(|v| v.name.as_deref() == Some(k.as_str()))) {
        return Err(OnnxError::Invalid(format!("{file}: the model has no input '{extra}'")));
    }
    let mut inputs = Vec::new();
    for vi in fed {
        let name = vi.name.clone().unwrap_or_default();
        if let Some(v) = values.get(&name) {
            imp.vals.insert(name, V::C(v.clone()));
            continue;
        }
        let (declared, ty) = crate::tensor_type(vi)
            .ok_or_else(|| OnnxError::UnsupportedType(format!("{file}: input '{name}' is not a tensor (sequences, maps and optionals are not supported)")))?;
        let dtype = ir_dtype(ty).ok_or_else(|| OnnxError::UnsupportedType(format!("{file}: input '{name}': element type {} is not supported", type_name(ty))))?;
        let shape = match shapes.get(&name) {
            Some(s) => {
                if !declared.is_empty() && (s.len() != declared.len() || s.iter().zip(&declared).any(|(&a, d)| d.is_some_and(|d| d != a))) {
                    let shown: Vec<String> = declared.iter().map(|d| d.map_or("?".to_string(), |v| v.to_string())).collect();
                    return Err(OnnxError::Invalid(format!("{file}: input '{name}' is [{}] in the model, given {s:?}", shown.join(", "))));
                }
                s.clone()
            }
            None => {
                declared.iter().map(|d| d.ok_or_else(|| OnnxError::Invalid(format!("{file}: input '{name}' has a dynamic dimension: give its shape")))).collect::<Result<_, _>>()?
            }
        };
        let t = imp.b.input(&name, &shape, dtype).map_err(|source| OnnxError::Ir { node: format!("input '{name}'"), op_type: "input".into(), source: Box::new(source) })?;
        imp.vals.insert(name.clone(), V::T(t, ty));
        inputs.push((name, shape, dtype, ty));
    }
    for (i, n) in g.node.iter().enumerate() {
        imp.node(n, i)?;
    }
    let mut outputs = Vec::new();
    for vi in &g.output {
        let name = vi.name.clone().unwrap_or_default();
        imp.op = "output".into();
        imp.node = name.clone();
        let (t, ty) = imp.tensor(&name)?;
        imp.b.output(&name, t).map_err(|source| OnnxError::Ir { node: format!("output '{name}'"), op_type: "output".into(), source: Box::new(source) })?;
        outputs.push((name, ty));
    }
    let graph = imp.b.finish().map_err(|source| OnnxError::Ir { node: "the graph".into(), op_type: "finish".into(), source: Box::new(source) })?;
    Ok(Imported { graph, weights: imp.weights, inputs, outputs })
}

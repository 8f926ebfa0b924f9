//! `lower` and `views`: one implementation per node (a kernel on a device, or a strided
//! view of another value), with copies inserted where a kernel cannot read a view.

use crate::CompileError;
use std::sync::Arc;
use tg_ir::shape::contiguous_strides;
use tg_ir::{DType, Graph, Node, Op};
use tg_runtime::{Device, Kernel, Layout, Operand, Step, TensorRef};

/// Kind of a buffer before memory assignment.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum VKind {
    Arena,
    Weight(String),
    /// A state kept between runs, in the caller's state set.
    State(String),
}

/// A buffer before memory assignment.
#[derive(Debug, Clone)]
pub(crate) struct VBuf {
    pub kind: VKind,
    pub bytes: usize,
    pub node: usize,
}

/// The lowered program: steps over virtual buffers.
pub(crate) struct Program {
    pub buffers: Vec<VBuf>,
    pub steps: Vec<Step>,
    pub inputs: Vec<(String, TensorRef)>,
    pub outputs: Vec<(String, TensorRef)>,
    pub n_views: usize,
    pub n_copies: usize,
}

impl Program {
    pub fn summary(&self) -> String {
        let mut counts: std::collections::BTreeMap<String, usize> = Default::default();
        for s in &self.steps {
            *counts.entry(s.kernel.name()).or_default() += 1;
        }
        let top: Vec<String> = counts.iter().map(|(k, v)| format!("{k}:{v}")).collect();
        format!("{} steps, {} buffers [{}]", self.steps.len(), self.buffers.len(), top.join(" "))
    }
}

/// Bytes of a value of `shape` and `dtype`, or `None` when that overflows (verification
/// refuses such graphs; this keeps lowering honest on its own).
pub(crate) fn bytes_of(shape: &[usize], dtype: DType) -> Option<usize> {
    let count = |s: &[usize]| s.iter().try_fold(1usize, |a, &d| a.checked_mul(d));
    match dtype {
        DType::Quant(t) => {
            let (&k, rows) = shape.split_last()?;
            count(rows)?.checked_mul(t.row_bytes(k).ok()?)
        }
        DType::F32 | DType::I32 => count(shape)?.checked_mul(4),
        DType::Bool => count(shape),
    }
}

/// What kernel selection knows about the operands of node `n` of `g`.
pub(crate) fn operands<'g>(g: &'g Graph, n: &Node) -> Vec<Operand<'g>> {
    n.inputs.iter().map(|&x| Operand { shape: &g.nodes[x].shape, dtype: g.nodes[x].dtype, weight: matches!(g.nodes[x].op, Op::Weight { .. }) }).collect()
}

struct Lowerer<'a> {
    /// The device every step runs on (index into the plan's devices).
    device: usize,
    dev: &'a Arc<dyn Device>,
    quantize_activations: bool,
    prog: Program,
    refs: Vec<Option<TensorRef>>,
}

impl Lowerer<'_> {
    fn new_buffer(&mut self, kind: VKind, shape: &[usize], dtype: DType, node: usize) -> Result<usize, CompileError> {
        let bytes =
            bytes_of(shape, dtype).ok_or_else(|| CompileError::Unsupported { node, op: "buffer".into(), reason: format!("the size of a {dtype} {shape:?} value overflows") })?;
        self.prog.buffers.push(VBuf { kind, bytes, node });
        Ok(self.prog.buffers.len() - 1)
    }

    /// Emits a step writing a fresh contiguous buffer; tries the operands as given, then
    /// with every non-contiguous operand copied.
    fn emit(&mut self, node: usize, n: &Node, kernel: Kernel, mut ins: Vec<TensorRef>, shape: &[usize], dtype: DType) -> Result<TensorRef, CompileError> {
        let out_layout = Layout::contiguous(shape, dtype);
        let dev = self.dev;
        let layouts: Vec<Layout> = ins.iter().map(|t| t.layout.clone()).collect();
        if let Err(first) = dev.supports(&kernel, &layouts, &out_layout) {
            let mut changed = false;
            for t in ins.iter_mut() {
                if !t.layout.is_contiguous() || t.layout.offset != 0 {
                    if matches!(t.layout.dtype, DType::Quant(_)) {
                        continue;
                    }
                    *t = self.copy(node, t.clone())?;
                    changed = true;
                }
            }
            let layouts: Vec<Layout> = ins.iter().map(|t| t.layout.clone()).collect();
            if !changed {
                return Err(CompileError::Unsupported { node, op: n.op.name(), reason: first });
            }
            dev.supports(&kernel, &layouts, &out_layout).map_err(|reason| CompileError::Unsupported { node, op: n.op.name(), reason })?;
        }
        let buf = self.new_buffer(VKind::Arena, shape, dtype, node)?;
        let out = TensorRef { buffer: buf, layout: out_layout };
        self.prog.steps.push(Step { kernel, device: self.device, inputs: ins, output: out.clone(), node });
        Ok(out)
    }

    /// Materialises a view contiguously.
    fn copy(&mut self, node: usize, src: TensorRef) -> Result<TensorRef, CompileError> {
        let layout = Layout::contiguous(&src.layout.shape, src.layout.dtype);
        let buf = self.new_buffer(VKind::Arena, &layout.shape, layout.dtype, node)?;
        let out = TensorRef { buffer: buf, layout };
        let kernel = Kernel::Copy;
        self.dev.supports(&kernel, std::slice::from_ref(&src.layout), &out.layout).map_err(|reason| CompileError::Unsupported { node, op: "copy".into(), reason })?;
        self.prog.steps.push(Step { kernel, device: self.device, inputs: vec![src], output: out.clone(), node });
        self.prog.n_copies += 1;
        Ok(out)
    }

    fn operand(&self, id: usize) -> TensorRef {
        self.refs[id].clone().expect("operands are lowered before users")
    }
}

/// Lowers every node of `g` (which must be verified) to steps and views, every step on
/// device `device` of `devices`.
pub(crate) fn lower(g: &Graph, devices: &[Arc<dyn Device>], device: usize, views: bool, quantize_activations: bool) -> Result<Program, CompileError> {
    let dev = devices.get(device).ok_or_else(|| CompileError::Options(format!("no device {device}")))?;
    let mut l = Lowerer {
        device,
        dev,
        quantize_activations,
        prog: Program { buffers: vec![], steps: vec![], inputs: vec![], outputs: vec![], n_views: 0, n_copies: 0 },
        refs: vec![None; g.nodes.len()],
    };
    for (i, n) in g.nodes.iter().enumerate() {
        let shape = n.shape.as_slice();
        let r = match &n.op {
            Op::Input { name } => {
                let buf = l.new_buffer(VKind::Arena, shape, n.dtype, i)?;
                let t = TensorRef { buffer: buf, layout: Layout::contiguous(shape, n.dtype) };
                l.prog.inputs.push((name.clone(), t.clone()));
                t
            }
            Op::Weight { name } => {
                let buf = l.new_buffer(VKind::Weight(name.clone()), shape, n.dtype, i)?;
                TensorRef { buffer: buf, layout: Layout::contiguous(shape, n.dtype) }
            }
            Op::State { name } => {
                let buf = l.new_buffer(VKind::State(name.clone()), shape, n.dtype, i)?;
                TensorRef { buffer: buf, layout: Layout::contiguous(shape, n.dtype) }
            }
            Op::StoreRows { axis } => {
                // Written in place: the step's output is the state's own buffer, and the
                // node's value is that buffer (verification guarantees the state has no
                // other reader).
                let state = l.operand(n.inputs[0]);
                let mut rows = l.operand(n.inputs[1]);
                if !rows.layout.is_contiguous() {
                    rows = l.copy(i, rows)?;
                }
                let off = l.operand(n.inputs[2]);
                let kernel = Kernel::StoreRows { axis: *axis };
                let layouts = [rows.layout.clone(), off.layout.clone()];
                l.dev.supports(&kernel, &layouts, &state.layout).map_err(|reason| CompileError::Unsupported { node: i, op: n.op.name(), reason })?;
                l.prog.steps.push(Step { kernel, device: l.device, inputs: vec![rows, off], output: state.clone(), node: i });
                state
            }
            Op::Constant { bits } => l.emit(i, n, Kernel::Fill { bits: *bits }, vec![], shape, n.dtype)?,
            Op::Iota { axis } => l.emit(i, n, Kernel::Iota { axis: *axis }, vec![], shape, n.dtype)?,
            Op::Unary(u) => {
                let a = l.operand(n.inputs[0]);
                l.emit(i, n, Kernel::Unary(*u), vec![a], shape, n.dtype)?
            }
            Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } => {
                let ins: Vec<TensorRef> = n
                    .inputs
                    .iter()
                    .map(|&x| {
                        let t = l.operand(x);
                        TensorRef { buffer: t.buffer, layout: tg_runtime::broadcast_layout(&t.layout, shape) }
                    })
                    .collect();
                let k = match &n.op {
                    Op::Binary(b) => Kernel::Binary(*b),
                    Op::Compare(c) => Kernel::Compare(*c),
                    Op::Where => Kernel::Where,
                    _ => Kernel::Cast,
                };
                l.emit(i, n, k, ins, shape, n.dtype)?
            }
            Op::Reduce { op, axis } => {
                let a = l.operand(n.inputs[0]);
                l.emit(i, n, Kernel::Reduce { op: *op, axis: *axis }, vec![a], shape, n.dtype)?
            }
            Op::MatMul { transpose_rhs } => {
                let a = l.operand(n.inputs[0]);
                let b = l.operand(n.inputs[1]);
                let ops = operands(g, n);
                if tg_runtime::registry::matmul_reads_weight(&ops[1], *transpose_rhs) {
                    l.emit(i, n, Kernel::MatMulQuant { quantize_activations: l.quantize_activations }, vec![a, b], shape, n.dtype)?
                } else {
                    let r = shape.len();
                    let expand = |t: &TensorRef, rows: usize, cols: usize| {
                        let mut s = shape[..r - 2].to_vec();
                        s.push(rows);
                        s.push(cols);
                        TensorRef { buffer: t.buffer, layout: tg_runtime::broadcast_layout(&t.layout, &s) }
                    };
                    let (ar, ac) = (a.layout.shape[a.layout.shape.len() - 2], a.layout.shape[a.layout.shape.len() - 1]);
                    let (br, bc) = (b.layout.shape[b.layout.shape.len() - 2], b.layout.shape[b.layout.shape.len() - 1]);
                    let (a2, b2) = (expand(&a, ar, ac), expand(&b, br, bc));
                    l.emit(i, n, Kernel::MatMul { transpose_rhs: *transpose_rhs }, vec![a2, b2], shape, n.dtype)?
                }
            }
            Op::MatMulAdd { .. } => {
                // Lowered only for weight right operands (the rule checks), like the
                // quantized matmul.
                let ins: Vec<TensorRef> = n.inputs.iter().map(|&x| l.operand(x)).collect();
                l.emit(i, n, Kernel::MatMulQuantAdd { quantize_activations: l.quantize_activations }, ins, shape, n.dtype)?
            }
            Op::Reshape | Op::Permute { .. } | Op::Expand | Op::Slice { .. } => {
                let mut src = l.operand(n.inputs[0]);
                if !views {
                    // Views switched off: every data-movement op materialises its result.
                    let v = view_of(&n.op, &src.layout, shape, true).expect("contiguous source always views");
                    let t = TensorRef { buffer: src.buffer, layout: v };
                    l.copy(i, t)?
                } else {
                    let v = match view_of(&n.op, &src.layout, shape, false) {
                        Some(v) => v,
                        None => {
                            src = l.copy(i, src)?;
                            view_of(&n.op, &src.layout, shape, true).expect("contiguous source always views")
                        }
                    };
                    l.prog.n_views += 1;
                    TensorRef { buffer: src.buffer, layout: v }
                }
            }
            Op::Concat { axis } => {
                let ins: Vec<TensorRef> = n.inputs.iter().map(|&x| l.operand(x)).collect();
                l.emit(i, n, Kernel::Concat { axis: *axis }, ins, shape, n.dtype)?
            }
            Op::Gather => {
                let t = l.operand(n.inputs[0]);
                let ids = l.operand(n.inputs[1]);
                l.emit(i, n, Kernel::Gather, vec![t, ids], shape, n.dtype)?
            }
            Op::RmsNorm { .. }
            | Op::RopeNeox
            | Op::RmsNormRopeNeox { .. }
            | Op::GeluTanh
            | Op::GatedGelu
            | Op::Softmax
            | Op::Attention { .. }
            | Op::AddRmsNorm { .. }
            | Op::AttentionSeqMajor { .. } => {
                let k = tg_runtime::select(&n.op, &operands(g, n), shape, l.quantize_activations).map(|(k, _)| k).ok_or_else(|| CompileError::Unsupported {
                    node: i,
                    op: n.op.name(),
                    reason: "no kernel".into(),
                })?;
                // Fused kernels read their operands as plain rows: `emit` copies any
                // operand that is not contiguous.
                let ins: Vec<TensorRef> = n.inputs.iter().map(|&x| l.operand(x)).collect();
                l.emit(i, n, k, ins, shape, n.dtype)?
            }
        };
        l.refs[i] = Some(r);
    }
    for (name, o) in &g.outputs {
        let t = l.operand(*o);
        l.prog.outputs.push((name.clone(), t));
    }
    Ok(l.prog)
}

/// The layout of a view op applied to `src`, or `None` when it cannot be expressed as a
/// strided view of it (a reshape of a non-contiguous layout). With `contiguous_src`, `src`
/// is known contiguous.
fn view_of(op: &Op, src: &Layout, shape: &[usize], contiguous_src: bool) -> Option<Layout> {
    match op {
        Op::Reshape => {
            if contiguous_src || src.is_contiguous() {
                Some(Layout { shape: shape.to_vec(), strides: contiguous_strides(shape), offset: src.offset, dtype: src.dtype })
            } else {
                None
            }
        }
        Op::Permute { perm } => {
            Some(Layout { shape: perm.iter().map(|&p| src.shape[p]).collect(), strides: perm.iter().map(|&p| src.strides[p]).collect(), offset: src.offset, dtype: src.dtype })
        }
        Op::Expand => Some(tg_runtime::broadcast_layout(src, shape)),
        Op::Slice { axis, start, .. } => {
            let mut v = src.clone();
            v.shape = shape.to_vec();
            v.offset = (src.offset as isize + *start as isize * src.strides[*axis]) as usize;
            Some(v)
        }
        _ => None,
    }
}

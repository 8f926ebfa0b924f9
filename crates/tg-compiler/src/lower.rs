//! `lower` and `views`: one implementation per node (a kernel on a device, or a strided
//! view of another value), with copies inserted where a kernel cannot read a view.

use crate::CompileError;
use std::collections::HashMap;
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
    /// Index of the device holding it.
    pub device: usize,
}

/// The lowered program: steps over virtual buffers.
pub(crate) struct Program {
    pub buffers: Vec<VBuf>,
    pub steps: Vec<Step>,
    pub inputs: Vec<(String, TensorRef)>,
    pub outputs: Vec<(String, TensorRef)>,
    pub n_views: usize,
    pub n_copies: usize,
    /// Transfer steps inserted at cross-device edges.
    pub n_transfers: usize,
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

/// Where each node of the graph runs and when the planner scheduled it: what `lower` needs
/// from a placement (no placement: every step on one device, in node order).
pub(crate) struct NodePlacement {
    /// Device of every node (inputs: home, the plan's device 0; weights: ignored, they are
    /// bound on each device that reads them).
    pub device: Vec<usize>,
    /// The planner's start (ns) of every node that runs a step, for the step order.
    pub start: Vec<Option<u64>>,
    /// Start (ns) of the planner's copy of node `n`'s value to device `d`.
    pub copies: std::collections::HashMap<(usize, usize), u64>,
}

impl NodePlacement {
    /// Every node on `device`, no times.
    pub fn single(g: &Graph, device: usize) -> NodePlacement {
        NodePlacement { device: vec![device; g.nodes.len()], start: vec![None; g.nodes.len()], copies: Default::default() }
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
    devices: &'a [Arc<dyn Device>],
    place: &'a NodePlacement,
    /// The device of the node being lowered.
    device: usize,
    quantize_activations: bool,
    prog: Program,
    /// Each node's value, on the device that computed it.
    refs: Vec<Option<TensorRef>>,
    /// Weight buffers by (node, device): bound once on each device that reads them.
    weights: HashMap<(usize, usize), TensorRef>,
    /// Transfer destinations by (source buffer, device).
    transfers: HashMap<(usize, usize), usize>,
    /// Per step: its order key (planner start ns, tier, lowering index) before sorting.
    keys: Vec<(u64, u8)>,
    /// The order key of the node being lowered.
    key: (u64, u8),
}

impl Lowerer<'_> {
    fn dev(&self) -> &Arc<dyn Device> {
        &self.devices[self.device]
    }

    fn new_buffer(&mut self, kind: VKind, shape: &[usize], dtype: DType, node: usize) -> Result<usize, CompileError> {
        let bytes =
            bytes_of(shape, dtype).ok_or_else(|| CompileError::Unsupported { node, op: "buffer".into(), reason: format!("the size of a {dtype} {shape:?} value overflows") })?;
        self.prog.buffers.push(VBuf { kind, bytes, node, device: self.device });
        Ok(self.prog.buffers.len() - 1)
    }

    fn push(&mut self, step: Step, key: (u64, u8)) {
        self.prog.steps.push(step);
        self.keys.push(key);
    }

    /// Emits a step writing a fresh contiguous buffer; tries the operands as given, then
    /// with every non-contiguous operand copied.
    fn emit(&mut self, node: usize, n: &Node, kernel: Kernel, mut ins: Vec<TensorRef>, shape: &[usize], dtype: DType) -> Result<TensorRef, CompileError> {
        let out_layout = Layout::contiguous(shape, dtype);
        let dev = self.dev().clone();
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
                return Err(CompileError::Unsupported { node, op: n.op.name(), reason: format!("{}: {first}", dev.name()) });
            }
            dev.supports(&kernel, &layouts, &out_layout).map_err(|reason| CompileError::Unsupported { node, op: n.op.name(), reason: format!("{}: {reason}", dev.name()) })?;
        }
        let buf = self.new_buffer(VKind::Arena, shape, dtype, node)?;
        let out = TensorRef { buffer: buf, layout: out_layout };
        self.push(Step { kernel, device: self.device, inputs: ins, output: out.clone(), node }, self.key);
        Ok(out)
    }

    /// Materialises a view contiguously.
    fn copy(&mut self, node: usize, src: TensorRef) -> Result<TensorRef, CompileError> {
        let layout = Layout::contiguous(&src.layout.shape, src.layout.dtype);
        let buf = self.new_buffer(VKind::Arena, &layout.shape, layout.dtype, node)?;
        let out = TensorRef { buffer: buf, layout };
        let kernel = Kernel::Copy;
        self.dev().supports(&kernel, std::slice::from_ref(&src.layout), &out.layout).map_err(|reason| CompileError::Unsupported { node, op: "copy".into(), reason })?;
        self.push(Step { kernel, device: self.device, inputs: vec![src], output: out.clone(), node }, self.key);
        self.prog.n_copies += 1;
        Ok(out)
    }

    /// Node `id`'s value as the current device reads it: its own buffer when it lives
    /// here, else the copy a transfer step brings over (one per buffer and device, shared by
    /// every reader there). Weights are bound on every device that reads them.
    fn operand(&mut self, g: &Graph, id: usize) -> Result<TensorRef, CompileError> {
        let d = self.device;
        if let Op::Weight { name } = &g.nodes[id].op {
            if let Some(t) = self.weights.get(&(id, d)) {
                return Ok(t.clone());
            }
            let n = &g.nodes[id];
            let buf = self.new_buffer(VKind::Weight(name.clone()), &n.shape, n.dtype, id)?;
            let t = TensorRef { buffer: buf, layout: Layout::contiguous(&n.shape, n.dtype) };
            self.weights.insert((id, d), t.clone());
            return Ok(t);
        }
        let t = self.refs[id].clone().ok_or_else(|| CompileError::Invalid(format!("lowering: node {id} is read before it is lowered")))?;
        let from = self.prog.buffers[t.buffer].device;
        if from == d {
            return Ok(t);
        }
        if let Some(&b) = self.transfers.get(&(t.buffer, d)) {
            return Ok(TensorRef { buffer: b, layout: t.layout });
        }
        let src = &self.prog.buffers[t.buffer];
        let (bytes, src_node) = (src.bytes, src.node);
        self.prog.buffers.push(VBuf { kind: VKind::Arena, bytes, node: src_node, device: d });
        let dst = self.prog.buffers.len() - 1;
        let whole = Layout::contiguous(&[bytes], DType::Bool);
        // When the planner copied this value, at its copy's start; else just before the reader.
        let key = match self.place.copies.get(&(src_node, d)) {
            Some(&s) => (s, 0),
            None => (self.key.0, 0),
        };
        self.push(
            Step {
                kernel: Kernel::Transfer { from },
                device: d,
                inputs: vec![TensorRef { buffer: t.buffer, layout: whole.clone() }],
                output: TensorRef { buffer: dst, layout: whole },
                node: src_node,
            },
            key,
        );
        self.prog.n_transfers += 1;
        self.transfers.insert((t.buffer, d), dst);
        Ok(TensorRef { buffer: dst, layout: t.layout })
    }

    fn operands(&mut self, g: &Graph, n: &Node) -> Result<Vec<TensorRef>, CompileError> {
        n.inputs.iter().map(|&x| self.operand(g, x)).collect()
    }
}

/// Lowers every node of `g` (which must be verified) to steps and views, each on the device
/// `place` gives it, with a transfer step wherever a value crosses devices, and orders the
/// steps by the planner's start times (a topological order; ties and unplaced steps in
/// lowering order). Outputs are brought to device 0 (home).
pub(crate) fn lower(g: &Graph, devices: &[Arc<dyn Device>], place: &NodePlacement, views: bool, quantize_activations: bool) -> Result<Program, CompileError> {
    if devices.is_empty() {
        return Err(CompileError::Options("no devices to compile for".into()));
    }
    if let Some(&d) = place.device.iter().find(|&&d| d >= devices.len()) {
        return Err(CompileError::Options(format!("no device {d}")));
    }
    let mut l = Lowerer {
        devices,
        place,
        device: 0,
        quantize_activations,
        prog: Program { buffers: vec![], steps: vec![], inputs: vec![], outputs: vec![], n_views: 0, n_copies: 0, n_transfers: 0 },
        refs: vec![None; g.nodes.len()],
        weights: HashMap::new(),
        transfers: HashMap::new(),
        keys: Vec::new(),
        key: (0, 1),
    };
    for (i, n) in g.nodes.iter().enumerate() {
        l.device = if matches!(n.op, Op::Input { .. }) { 0 } else { place.device[i] };
        l.key = (place.start[i].unwrap_or(0), 1);
        let shape = n.shape.as_slice();
        let r = match &n.op {
            Op::Input { name } => {
                let buf = l.new_buffer(VKind::Arena, shape, n.dtype, i)?;
                let t = TensorRef { buffer: buf, layout: Layout::contiguous(shape, n.dtype) };
                l.prog.inputs.push((name.clone(), t.clone()));
                t
            }
            // Bound on each device that reads it (see `Lowerer::operand`).
            Op::Weight { .. } => continue,
            Op::Alternatives => return Err(CompileError::Invalid(format!("node {i}: alternatives reached lowering unresolved"))),
            Op::State { name } => {
                let buf = l.new_buffer(VKind::State(name.clone()), shape, n.dtype, i)?;
                TensorRef { buffer: buf, layout: Layout::contiguous(shape, n.dtype) }
            }
            Op::StoreRows { axis } => {
                // Written in place: the step's output is the state's own buffer, and the
                // node's value is that buffer (verification guarantees the state has no
                // other reader; placement keeps the update on the state's device).
                let state = l.refs[n.inputs[0]].clone().ok_or_else(|| CompileError::Invalid(format!("lowering: node {i} reads a state before it is lowered")))?;
                if l.prog.buffers[state.buffer].device != l.device {
                    return Err(CompileError::Invalid(format!("node {i}: the update of a state is placed on another device than the state")));
                }
                let mut rows = l.operand(g, n.inputs[1])?;
                if !rows.layout.is_contiguous() {
                    rows = l.copy(i, rows)?;
                }
                let off = l.operand(g, n.inputs[2])?;
                let kernel = Kernel::StoreRows { axis: *axis };
                let layouts = [rows.layout.clone(), off.layout.clone()];
                l.dev().supports(&kernel, &layouts, &state.layout).map_err(|reason| CompileError::Unsupported { node: i, op: n.op.name(), reason })?;
                let key = l.key;
                l.push(Step { kernel, device: l.device, inputs: vec![rows, off], output: state.clone(), node: i }, key);
                state
            }
            Op::Constant { bits } => l.emit(i, n, Kernel::Fill { bits: *bits }, vec![], shape, n.dtype)?,
            Op::Iota { axis } => l.emit(i, n, Kernel::Iota { axis: *axis }, vec![], shape, n.dtype)?,
            Op::Unary(u) => {
                let a = l.operand(g, n.inputs[0])?;
                l.emit(i, n, Kernel::Unary(*u), vec![a], shape, n.dtype)?
            }
            Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } => {
                let ins: Vec<TensorRef> = l.operands(g, n)?.into_iter().map(|t| TensorRef { buffer: t.buffer, layout: tg_runtime::broadcast_layout(&t.layout, shape) }).collect();
                let k = match &n.op {
                    Op::Binary(b) => Kernel::Binary(*b),
                    Op::Compare(c) => Kernel::Compare(*c),
                    Op::Where => Kernel::Where,
                    _ => Kernel::Cast,
                };
                l.emit(i, n, k, ins, shape, n.dtype)?
            }
            Op::Reduce { op, axis } => {
                let a = l.operand(g, n.inputs[0])?;
                l.emit(i, n, Kernel::Reduce { op: *op, axis: *axis }, vec![a], shape, n.dtype)?
            }
            Op::MatMul { transpose_rhs } => {
                let a = l.operand(g, n.inputs[0])?;
                let b = l.operand(g, n.inputs[1])?;
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
                let ins = l.operands(g, n)?;
                l.emit(i, n, Kernel::MatMulQuantAdd { quantize_activations: l.quantize_activations }, ins, shape, n.dtype)?
            }
            Op::Reshape | Op::Permute { .. } | Op::Expand | Op::Slice { .. } => {
                let mut src = l.operand(g, n.inputs[0])?;
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
                let ins = l.operands(g, n)?;
                l.emit(i, n, Kernel::Concat { axis: *axis }, ins, shape, n.dtype)?
            }
            Op::Gather => {
                let t = l.operand(g, n.inputs[0])?;
                let ids = l.operand(g, n.inputs[1])?;
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
            | Op::AttentionSeqMajor { .. }
            | Op::Conv { .. }
            | Op::Im2Col { .. }
            | Op::Pool { .. }
            | Op::ConvBias { .. }
            | Op::GroupNorm { .. } => {
                let k = tg_runtime::select(&n.op, &operands(g, n), shape, l.quantize_activations).map(|(k, _)| k).ok_or_else(|| CompileError::Unsupported {
                    node: i,
                    op: n.op.name(),
                    reason: "no kernel".into(),
                })?;
                // Fused kernels read their operands as plain rows: `emit` copies any
                // operand that is not contiguous.
                let ins = l.operands(g, n)?;
                l.emit(i, n, k, ins, shape, n.dtype)?
            }
        };
        l.refs[i] = Some(r);
    }
    // Outputs leave from home: a value computed elsewhere is brought back (at the end).
    l.device = 0;
    l.key = (u64::MAX, 0);
    for (name, o) in &g.outputs {
        let t = l.operand(g, *o)?;
        l.prog.outputs.push((name.clone(), t));
    }
    let keys = std::mem::take(&mut l.keys);
    order_steps(&mut l.prog, &keys)?;
    Ok(l.prog)
}

/// Reorders the steps topologically (a step after the writers of what it reads), smallest
/// `(key, lowering index)` first: the planner's start times where it gave them.
fn order_steps(prog: &mut Program, keys: &[(u64, u8)]) -> Result<(), CompileError> {
    let n = prog.steps.len();
    let mut writer: HashMap<usize, usize> = HashMap::new();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    let mut pending = vec![0usize; n];
    for (si, s) in prog.steps.iter().enumerate() {
        let mut deps: Vec<usize> = s.inputs.iter().filter_map(|t| writer.get(&t.buffer).copied()).collect();
        deps.sort_unstable();
        deps.dedup();
        for d in deps {
            users[d].push(si);
            pending[si] += 1;
        }
        writer.insert(s.output.buffer, si);
    }
    let mut heap: std::collections::BinaryHeap<std::cmp::Reverse<((u64, u8), usize)>> = (0..n).filter(|&s| pending[s] == 0).map(|s| std::cmp::Reverse((keys[s], s))).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(std::cmp::Reverse((_, s))) = heap.pop() {
        order.push(s);
        for &u in &users[s] {
            pending[u] -= 1;
            if pending[u] == 0 {
                heap.push(std::cmp::Reverse((keys[u], u)));
            }
        }
    }
    if order.len() != n {
        return Err(CompileError::Invalid(format!("lowering: the steps' reads and writes form a cycle ({} of {n} steps ordered)", order.len())));
    }
    let mut old: Vec<Option<Step>> = std::mem::take(&mut prog.steps).into_iter().map(Some).collect();
    prog.steps = order.into_iter().filter_map(|s| old[s].take()).collect();
    Ok(())
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

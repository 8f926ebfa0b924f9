use crate::shape::{checked_numel, numel};
use crate::{broadcast_shapes, BinaryOp, DType, Graph, IrError, Op, Shape};
use std::collections::HashSet;

fn shape_err(op: &Op, detail: String) -> IrError {
    IrError::Shape { op: op.name(), detail }
}

fn dtype_err(op: &Op, detail: String) -> IrError {
    IrError::DType { op: op.name(), detail }
}

fn arity(op: &Op, ins: &[(&[usize], DType)], n: usize) -> Result<(), IrError> {
    if ins.len() != n {
        return Err(IrError::Arity { op: op.name(), expected: n, got: ins.len() });
    }
    Ok(())
}

/// Infers the output shape and dtype of `op` applied to inputs of the given shapes and
/// dtypes. `declared` is the node's own shape/dtype, required by ops that take them from
/// the node (sources, reshape, expand) and ignored otherwise. Refuses an output too large
/// to size as a buffer ([`MAX_TENSOR_BYTES`]).
pub fn infer(op: &Op, ins: &[(&[usize], DType)], declared: Option<(&[usize], DType)>) -> Result<(Shape, DType), IrError> {
    infer_at(None, op, ins, declared)
}

/// [`infer`] for node `node` of a graph: a size error names the node.
pub(crate) fn infer_at(node: Option<usize>, op: &Op, ins: &[(&[usize], DType)], declared: Option<(&[usize], DType)>) -> Result<(Shape, DType), IrError> {
    let (shape, dtype) = infer_shape(op, ins, declared)?;
    check_size(&shape, dtype).map_err(|detail| shape_err(op, if let Some(i) = node { format!("{detail} (node {i})") } else { detail }))?;
    Ok((shape, dtype))
}

/// Largest tensor the IR accepts, in bytes (2^47: far beyond any memory, far below overflow).
pub const MAX_TENSOR_BYTES: usize = 1 << 47;

/// Every later stage sizes buffers as elements × element bytes, strides as products of
/// dimensions, and the reference interpreter holds 8-byte values: a shape must count at most
/// `MAX_TENSOR_BYTES / 8` elements (2^44), with zero dimensions counted as 1 so that every
/// stride is bounded too, and its bytes ([`DType::tensor_bytes`]) must not overflow.
fn check_size(shape: &[usize], dtype: DType) -> Result<(), String> {
    const MAX_ELEMENTS: usize = MAX_TENSOR_BYTES / 8;
    let span = shape.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d.max(1)));
    let Some(span) = span else {
        let what = if shape.contains(&0) { "the product of its dimensions (zero ones counted as 1)" } else { "its element count" };
        return Err(format!("shape {shape:?} is too large: {what} overflows usize"));
    };
    let n = if shape.contains(&0) { 0 } else { span };
    let bytes = match dtype.tensor_bytes(shape) {
        Some(b) => b,
        None if matches!(dtype, DType::Quant(_)) && shape.last().is_none_or(|&row| dtype.bytes_for(row).is_none()) => {
            return Err(format!("shape {shape:?} of {dtype}: not rows of whole {dtype} blocks"));
        }
        None => return Err(format!("shape {shape:?} is too large: {n} elements of {dtype} overflow usize in bytes")),
    };
    if span > MAX_ELEMENTS || bytes > MAX_TENSOR_BYTES {
        let what = if span == n { format!("{n} elements") } else { format!("{span} elements (counting its zero dimensions as 1)") };
        return Err(format!("shape {shape:?} is too large: {what} of {dtype}, {bytes} bytes (the IR accepts at most 2^44 elements and {MAX_TENSOR_BYTES} bytes)"));
    }
    Ok(())
}

fn infer_shape(op: &Op, ins: &[(&[usize], DType)], declared: Option<(&[usize], DType)>) -> Result<(Shape, DType), IrError> {
    let need_decl = || declared.ok_or_else(|| shape_err(op, "needs a declared shape".into()));
    match op {
        Op::Input { .. } | Op::Weight { .. } => {
            arity(op, ins, 0)?;
            let (s, d) = need_decl()?;
            if let DType::Quant(t) = d {
                if !matches!(op, Op::Weight { .. }) {
                    return Err(dtype_err(op, "only weights may be quantized".into()));
                }
                if s.len() != 2 || s[1] % t.block_size() != 0 {
                    return Err(shape_err(op, format!("{t} weight must be [rows, row_len] with row_len a multiple of {}, got {s:?}", t.block_size())));
                }
            }
            Ok((s.to_vec(), d))
        }
        Op::Constant { .. } => {
            arity(op, ins, 0)?;
            let (s, d) = need_decl()?;
            if !s.is_empty() || matches!(d, DType::Quant(_)) {
                return Err(shape_err(op, format!("constants are scalars of f32/i32/bool, got {s:?} {d}")));
            }
            Ok((vec![], d))
        }
        Op::Iota { axis } => {
            arity(op, ins, 0)?;
            let (s, d) = need_decl()?;
            if *axis >= s.len() {
                return Err(shape_err(op, format!("axis {axis} out of range for {s:?}")));
            }
            if !matches!(d, DType::F32 | DType::I32) {
                return Err(dtype_err(op, format!("iota produces f32 or i32, not {d}")));
            }
            Ok((s.to_vec(), d))
        }
        Op::Unary(_) => {
            arity(op, ins, 1)?;
            if ins[0].1 != DType::F32 {
                return Err(dtype_err(op, format!("expects f32, got {}", ins[0].1)));
            }
            Ok((ins[0].0.to_vec(), DType::F32))
        }
        Op::Binary(b) => {
            arity(op, ins, 2)?;
            let (da, db) = (ins[0].1, ins[1].1);
            if da != db || matches!(da, DType::Quant(_)) {
                return Err(dtype_err(op, format!("operands must share a plain dtype, got {da} and {db}")));
            }
            let logical = matches!(b, BinaryOp::And | BinaryOp::Or);
            if logical != (da == DType::Bool) {
                return Err(dtype_err(op, format!("{b:?} does not apply to {da}")));
            }
            let s = broadcast_shapes(ins[0].0, ins[1].0).ok_or_else(|| shape_err(op, format!("cannot broadcast {:?} with {:?}", ins[0].0, ins[1].0)))?;
            Ok((s, da))
        }
        Op::Compare(_) => {
            arity(op, ins, 2)?;
            let (da, db) = (ins[0].1, ins[1].1);
            if da != db || !matches!(da, DType::F32 | DType::I32) {
                return Err(dtype_err(op, format!("compares f32 or i32 of one dtype, got {da} and {db}")));
            }
            let s = broadcast_shapes(ins[0].0, ins[1].0).ok_or_else(|| shape_err(op, format!("cannot broadcast {:?} with {:?}", ins[0].0, ins[1].0)))?;
            Ok((s, DType::Bool))
        }
        Op::Where => {
            arity(op, ins, 3)?;
            if ins[0].1 != DType::Bool {
                return Err(dtype_err(op, format!("condition must be bool, got {}", ins[0].1)));
            }
            if ins[1].1 != ins[2].1 || matches!(ins[1].1, DType::Quant(_)) {
                return Err(dtype_err(op, format!("branches must share a plain dtype, got {} and {}", ins[1].1, ins[2].1)));
            }
            let s = broadcast_shapes(ins[0].0, ins[1].0)
                .and_then(|s| broadcast_shapes(&s, ins[2].0))
                .ok_or_else(|| shape_err(op, format!("cannot broadcast {:?}, {:?}, {:?}", ins[0].0, ins[1].0, ins[2].0)))?;
            Ok((s, ins[1].1))
        }
        Op::Cast { to } => {
            arity(op, ins, 1)?;
            if matches!(to, DType::Quant(_) | DType::Bool) || matches!(ins[0].1, DType::Quant(_)) {
                return Err(dtype_err(op, format!("cannot cast {} to {to}", ins[0].1)));
            }
            Ok((ins[0].0.to_vec(), *to))
        }
        Op::Reduce { axis, .. } => {
            arity(op, ins, 1)?;
            if ins[0].1 != DType::F32 {
                return Err(dtype_err(op, format!("expects f32, got {}", ins[0].1)));
            }
            let mut s = ins[0].0.to_vec();
            if *axis >= s.len() {
                return Err(shape_err(op, format!("axis {axis} out of range for {s:?}")));
            }
            s[*axis] = 1;
            Ok((s, DType::F32))
        }
        Op::MatMul { transpose_rhs } => {
            arity(op, ins, 2)?;
            let (a, da) = ins[0];
            let (b, db) = ins[1];
            if da != DType::F32 {
                return Err(dtype_err(op, format!("left operand must be f32, got {da}")));
            }
            if !db.is_float() {
                return Err(dtype_err(op, format!("right operand must be f32 or quantized, got {db}")));
            }
            if matches!(db, DType::Quant(_)) && (!transpose_rhs || b.len() != 2) {
                return Err(shape_err(op, "a quantized right operand must be a rank-2 [n, k] weight used transposed".into()));
            }
            if a.len() < 2 || b.len() < 2 {
                return Err(shape_err(op, format!("operands need rank >= 2, got {a:?} and {b:?}")));
            }
            let (m, k) = (a[a.len() - 2], a[a.len() - 1]);
            let (kb, n) = if *transpose_rhs { (b[b.len() - 1], b[b.len() - 2]) } else { (b[b.len() - 2], b[b.len() - 1]) };
            if k != kb {
                return Err(shape_err(op, format!("contracted dims differ: {a:?} · {b:?}{}", if *transpose_rhs { "ᵀ" } else { "" })));
            }
            let batch = broadcast_shapes(&a[..a.len() - 2], &b[..b.len() - 2]).ok_or_else(|| shape_err(op, format!("batch dims of {a:?} and {b:?} do not broadcast")))?;
            let mut s = batch;
            s.push(m);
            s.push(n);
            Ok((s, DType::F32))
        }
        Op::Reshape => {
            arity(op, ins, 1)?;
            let (s, _) = need_decl()?;
            let n = numel(ins[0].0);
            match checked_numel(s) {
                None => return Err(shape_err(op, format!("cannot reshape {:?} ({n} elements) to {s:?}: its element count overflows usize", ins[0].0))),
                Some(m) if m != n => return Err(shape_err(op, format!("cannot reshape {:?} ({n} elements) to {s:?} ({m} elements)", ins[0].0))),
                Some(_) => {}
            }
            if matches!(ins[0].1, DType::Quant(_)) {
                return Err(dtype_err(op, "quantized tensors cannot be reshaped".into()));
            }
            Ok((s.to_vec(), ins[0].1))
        }
        Op::Permute { perm } => {
            arity(op, ins, 1)?;
            let s = ins[0].0;
            let mut seen = vec![false; s.len()];
            if perm.len() != s.len() || perm.iter().any(|&p| p >= s.len() || std::mem::replace(&mut seen[p], true)) {
                return Err(shape_err(op, format!("{perm:?} is not a permutation of the {} dims of {s:?}", s.len())));
            }
            if matches!(ins[0].1, DType::Quant(_)) {
                return Err(dtype_err(op, "quantized tensors cannot be permuted".into()));
            }
            Ok((perm.iter().map(|&p| s[p]).collect(), ins[0].1))
        }
        Op::Expand => {
            arity(op, ins, 1)?;
            let (s, _) = need_decl()?;
            match broadcast_shapes(ins[0].0, s) {
                Some(b) if b == s => Ok((s.to_vec(), ins[0].1)),
                _ => Err(shape_err(op, format!("cannot expand {:?} to {s:?}", ins[0].0))),
            }
        }
        Op::Slice { axis, start, end } => {
            arity(op, ins, 1)?;
            let mut s = ins[0].0.to_vec();
            if *axis >= s.len() || start > end || *end > s[*axis] {
                return Err(shape_err(op, format!("slice {start}..{end} on axis {axis} out of range for {s:?}")));
            }
            if matches!(ins[0].1, DType::Quant(_)) {
                return Err(dtype_err(op, "quantized tensors cannot be sliced".into()));
            }
            s[*axis] = end - start;
            Ok((s, ins[0].1))
        }
        Op::Concat { axis } => {
            if ins.len() < 2 {
                return Err(IrError::Arity { op: op.name(), expected: 2, got: ins.len() });
            }
            let first = ins[0].0;
            if *axis >= first.len() {
                return Err(shape_err(op, format!("axis {axis} out of range for {first:?}")));
            }
            let mut s = first.to_vec();
            s[*axis] = 0;
            for (x, d) in ins {
                if *d != ins[0].1 || matches!(d, DType::Quant(_)) {
                    return Err(dtype_err(op, format!("operands must share a plain dtype, got {} and {d}", ins[0].1)));
                }
                if x.len() != first.len() || (0..x.len()).any(|i| i != *axis && x[i] != first[i]) {
                    return Err(shape_err(op, format!("{x:?} does not match {first:?} outside axis {axis}")));
                }
                s[*axis] = s[*axis].checked_add(x[*axis]).ok_or_else(|| shape_err(op, format!("the lengths along axis {axis} overflow usize")))?;
            }
            Ok((s, ins[0].1))
        }
        Op::State { .. } => {
            arity(op, ins, 0)?;
            let (s, d) = need_decl()?;
            if matches!(d, DType::Quant(_)) || s.is_empty() {
                return Err(shape_err(op, format!("a state is a tensor of rank >= 1 of f32/i32/bool, got {s:?} {d}")));
            }
            Ok((s.to_vec(), d))
        }
        Op::StoreRows { axis } => {
            arity(op, ins, 3)?;
            let ((s, d), (r, dr), (o, dof)) = (ins[0], ins[1], ins[2]);
            if *axis >= s.len() {
                return Err(shape_err(op, format!("axis {axis} out of range for {s:?}")));
            }
            if d != dr {
                return Err(dtype_err(op, format!("rows are {dr}, the state {d}")));
            }
            if r.len() != s.len() || (0..s.len()).any(|i| i != *axis && r[i] != s[i]) || r[*axis] > s[*axis] {
                return Err(shape_err(op, format!("rows {r:?} do not fit state {s:?} along axis {axis}")));
            }
            if dof != DType::I32 || checked_numel(o) != Some(1) || o.len() > 1 {
                return Err(shape_err(op, format!("offset must be an i32 scalar or [1], got {o:?} {dof}")));
            }
            Ok((s.to_vec(), d))
        }
        Op::Alternatives => {
            let Some(&(s, d)) = ins.first() else { return Err(shape_err(op, "needs at least one way".into())) };
            if let Some((k, (t, e))) = ins.iter().enumerate().find(|(_, (t, e))| *t != s || *e != d) {
                return Err(shape_err(op, format!("way {k} is {t:?} {e}, the first {s:?} {d}")));
            }
            Ok((s.to_vec(), d))
        }
        Op::Gather => {
            arity(op, ins, 2)?;
            let (t, dt) = ins[0];
            let (ids, di) = ins[1];
            if t.len() != 2 {
                return Err(shape_err(op, format!("table must be rank 2, got {t:?}")));
            }
            if di != DType::I32 {
                return Err(dtype_err(op, format!("indices must be i32, got {di}")));
            }
            if !dt.is_float() {
                return Err(dtype_err(op, format!("table must be f32 or quantized, got {dt}")));
            }
            let mut s = ids.to_vec();
            s.push(t[1]);
            Ok((s, DType::F32))
        }
        Op::Conv { window, groups } | Op::Im2Col { window, groups } | Op::ConvBias { window, groups, .. } => {
            let conv = !matches!(op, Op::Im2Col { .. });
            // ConvBias: [x, w, b] or [x, w, b, residual].
            let bias_res = matches!(op, Op::ConvBias { .. }) && ins.len() == 4;
            arity(
                op,
                ins,
                if bias_res {
                    4
                } else if matches!(op, Op::ConvBias { .. }) {
                    3
                } else if conv {
                    2
                } else {
                    1
                },
            )?;
            all_f32(op, ins)?;
            let (n, c, out_sp) = windowed(op, ins[0].0, window)?;
            let g = *groups;
            if g == 0 || !c.is_multiple_of(g) {
                return Err(shape_err(op, format!("{c} input channels are not a multiple of {g} groups")));
            }
            if !conv {
                let k = (c / g).checked_mul(window.taps());
                let p = out_sp.iter().try_fold(1usize, |acc, &d| acc.checked_mul(d));
                let (Some(k), Some(p)) = (k, p) else { return Err(shape_err(op, format!("the unfolded windows of {:?} overflow usize", ins[0].0))) };
                return Ok((vec![n, g, k, p], DType::F32));
            }
            let w = ins[1].0;
            let m = *w.first().unwrap_or(&0);
            if w.len() != window.rank() + 2 || w[1] != c / g || w[2..] != window.size[..] || m == 0 || !m.is_multiple_of(g) {
                return Err(shape_err(
                    op,
                    format!(
                        "weight {w:?} must be [M, C/groups = {}, {}] with M a multiple of {g} groups",
                        c / g,
                        window.size.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
            if matches!(op, Op::ConvBias { .. }) {
                channel_vector(op, "bias", ins[2].0, m, ins[0].0.len())?;
            }
            let mut s = vec![n, m];
            s.extend(out_sp);
            if bias_res && ins[3].0 != s.as_slice() {
                return Err(shape_err(op, format!("residual {:?} must have the output's shape {s:?}", ins[3].0)));
            }
            Ok((s, DType::F32))
        }
        Op::GroupNorm { groups, eps_bits, .. } => {
            arity(op, ins, 3)?;
            all_f32(op, ins)?;
            let x = ins[0].0;
            if x.len() < 2 {
                return Err(shape_err(op, format!("input {x:?} must be [N, C, ..]")));
            }
            let (c, g) = (x[1], *groups);
            if g == 0 || !c.is_multiple_of(g) {
                return Err(shape_err(op, format!("{c} channels are not a multiple of {g} groups")));
            }
            let eps = f64::from_bits(*eps_bits);
            if !(eps >= 0.0 && eps.is_finite()) {
                return Err(shape_err(op, format!("epsilon {eps} must be finite and >= 0")));
            }
            for (what, v) in [("scale", ins[1].0), ("shift", ins[2].0)] {
                // One value per channel, or per image and channel ([N, C, 1, ..]).
                let per_image = v.len() == x.len() && v[..2] == x[..2] && v[2..].iter().all(|&d| d == 1);
                if !per_image {
                    channel_vector(op, what, v, c, x.len()).map_err(|_| shape_err(op, format!("{what} {v:?} must be one value per channel ([{c}, 1, ..]) or per image and channel ([{}, {c}, 1, ..])", x[0])))?;
                }
            }
            if ins[1].0 != ins[2].0 {
                return Err(shape_err(op, format!("scale {:?} and shift {:?} must have one shape", ins[1].0, ins[2].0)));
            }
            Ok((x.to_vec(), DType::F32))
        }
        Op::Pool { window, .. } => {
            arity(op, ins, 1)?;
            all_f32(op, ins)?;
            let (n, c, out_sp) = windowed(op, ins[0].0, window)?;
            let mut s = vec![n, c];
            s.extend(out_sp);
            Ok((s, DType::F32))
        }
        Op::RmsNorm { .. } => {
            arity(op, ins, 2)?;
            all_f32(op, ins)?;
            let x = ins[0].0;
            if x.is_empty() || broadcast_shapes(x, ins[1].0).as_deref() != Some(x) {
                return Err(shape_err(op, format!("weight {:?} does not broadcast to {x:?}", ins[1].0)));
            }
            Ok((x.to_vec(), DType::F32))
        }
        Op::RopeNeox => {
            arity(op, ins, 3)?;
            all_f32(op, ins)?;
            let x = ins[0].0;
            let d = *x.last().ok_or_else(|| shape_err(op, "x must have rank >= 1".into()))?;
            if d % 2 != 0 {
                return Err(shape_err(op, format!("last dim {d} of {x:?} is odd")));
            }
            let mut half = x.to_vec();
            *half.last_mut().unwrap_or(&mut 0) = d / 2;
            for t in &ins[1..] {
                if broadcast_shapes(&half, t.0).as_deref() != Some(&half[..]) {
                    return Err(shape_err(op, format!("cos/sin {:?} do not broadcast to {half:?}", t.0)));
                }
            }
            Ok((x.to_vec(), DType::F32))
        }
        Op::AddRmsNorm { .. } => {
            arity(op, ins, 3)?;
            all_f32(op, ins)?;
            if ins[0].0 != ins[1].0 {
                return Err(shape_err(op, format!("summands {:?} and {:?} differ in shape", ins[0].0, ins[1].0)));
            }
            let (s, _) = infer_shape(&Op::RmsNorm { eps_bits: 0 }, &[ins[0], ins[2]], None).map_err(|e| retag(e, op))?;
            let mut out = vec![2];
            out.extend_from_slice(&s);
            Ok((out, DType::F32))
        }
        Op::RmsNormRopeNeox { .. } => {
            arity(op, ins, 4)?;
            let (s, _) = infer_shape(&Op::RmsNorm { eps_bits: 0 }, &ins[..2], None).map_err(|e| retag(e, op))?;
            let rope_ins = [(s.as_slice(), DType::F32), ins[2], ins[3]];
            infer_shape(&Op::RopeNeox, &rope_ins, None).map_err(|e| retag(e, op))
        }
        Op::GeluTanh | Op::Softmax => {
            arity(op, ins, 1)?;
            all_f32(op, ins)?;
            if matches!(op, Op::Softmax) && ins[0].0.is_empty() {
                return Err(shape_err(op, "softmax needs rank >= 1".into()));
            }
            Ok((ins[0].0.to_vec(), DType::F32))
        }
        Op::GatedGelu => {
            arity(op, ins, 2)?;
            all_f32(op, ins)?;
            if ins[0].0 != ins[1].0 {
                return Err(shape_err(op, format!("gate {:?} and up {:?} differ", ins[0].0, ins[1].0)));
            }
            Ok((ins[0].0.to_vec(), DType::F32))
        }
        Op::Attention { .. } => {
            arity(op, ins, 4)?;
            all_f32(op, ins)?;
            let (q, k, v, m) = (ins[0].0, ins[1].0, ins[2].0, ins[3].0);
            if q.len() < 2 || k.len() < 2 || v.len() < 2 {
                return Err(shape_err(op, format!("q {q:?}, k {k:?}, v {v:?} need rank >= 2")));
            }
            let (sq, d) = (q[q.len() - 2], q[q.len() - 1]);
            let (sk, dk) = (k[k.len() - 2], k[k.len() - 1]);
            let (sv, dv) = (v[v.len() - 2], v[v.len() - 1]);
            if d != dk || sk != sv {
                return Err(shape_err(op, format!("q {q:?}, k {k:?}, v {v:?}: head dims or key counts differ")));
            }
            let batch = broadcast_shapes(&q[..q.len() - 2], &k[..k.len() - 2])
                .and_then(|b| broadcast_shapes(&b, &v[..v.len() - 2]))
                .ok_or_else(|| shape_err(op, format!("batch dims of q {q:?}, k {k:?}, v {v:?} do not broadcast")))?;
            let mut scores = batch.clone();
            scores.extend([sq, sk]);
            if broadcast_shapes(&scores, m).as_deref() != Some(&scores[..]) {
                return Err(shape_err(op, format!("mask {m:?} does not broadcast to the scores {scores:?}")));
            }
            let mut s = batch;
            s.extend([sq, dv]);
            Ok((s, DType::F32))
        }
        Op::MatMulAdd { transpose_rhs } => {
            arity(op, ins, 3)?;
            let (s, d) = infer_shape(&Op::MatMul { transpose_rhs: *transpose_rhs }, &ins[..2], None).map_err(|e| retag(e, op))?;
            if ins[2].1 != DType::F32 {
                return Err(dtype_err(op, format!("the addend must be f32, got {}", ins[2].1)));
            }
            if broadcast_shapes(&s, ins[2].0).as_deref() != Some(&s[..]) {
                return Err(shape_err(op, format!("addend {:?} does not broadcast to the product {s:?}", ins[2].0)));
            }
            Ok((s, d))
        }
        Op::AttentionSeqMajor { scale_bits } => {
            arity(op, ins, 4)?;
            let q = ins[0].0;
            if q.len() != 4 {
                return Err(shape_err(op, format!("q {q:?} must be [sq, a, b, d]")));
            }
            let qh = [q[1], q[2], q[0], q[3]];
            let (s, d) = infer_shape(&Op::Attention { scale_bits: *scale_bits }, &[(&qh, ins[0].1), ins[1], ins[2], ins[3]], None).map_err(|e| retag(e, op))?;
            if s.len() != 4 {
                return Err(shape_err(op, format!("k {:?} and v {:?} must not add batch dims to q's", ins[1].0, ins[2].0)));
            }
            Ok((vec![s[2], s[0], s[1], s[3]], d))
        }
    }
}

/// The same error under the name of the fused op that delegated the check.
fn retag(e: IrError, op: &Op) -> IrError {
    match e {
        IrError::Shape { detail, .. } => IrError::Shape { op: op.name(), detail },
        IrError::DType { detail, .. } => IrError::DType { op: op.name(), detail },
        other => other,
    }
}

/// `(N, C, output spatial dims)` of a window over `x [N, C, *S]`.
fn windowed(op: &Op, x: &[usize], window: &crate::Window) -> Result<(usize, usize, Vec<usize>), IrError> {
    if x.len() != window.rank() + 2 {
        return Err(shape_err(op, format!("input {x:?} must be [N, C] and {} spatial dims", window.rank())));
    }
    let out = window.output(&x[2..]).map_err(|e| shape_err(op, format!("input {x:?}: {e}")))?;
    Ok((x[0], x[1], out))
}

fn all_f32(op: &Op, ins: &[(&[usize], DType)]) -> Result<(), IrError> {
    match ins.iter().find(|(_, d)| *d != DType::F32) {
        Some((_, d)) => Err(dtype_err(op, format!("expects f32 operands, got {d}"))),
        None => Ok(()),
    }
}

/// Checks a whole graph independently of how it was built: topological order, every
/// node's shape/dtype equal to what its op infers, unique input/weight/output names,
/// outputs that exist. Run between compiler stages; it never modifies the graph.
pub fn verify(g: &Graph) -> Result<(), IrError> {
    let mut names = HashSet::new();
    for (i, n) in g.nodes.iter().enumerate() {
        for &x in &n.inputs {
            if x >= i {
                return Err(IrError::BadReference { node: i, input: x });
            }
        }
        match &n.op {
            Op::Input { name } if !names.insert(format!("input:{name}")) => {
                return Err(IrError::Name(format!("input '{name}' declared twice")));
            }
            Op::Weight { name } if !names.insert(format!("weight:{name}")) => {
                return Err(IrError::Name(format!("weight '{name}' declared twice")));
            }
            Op::State { name } if !names.insert(format!("state:{name}")) => {
                return Err(IrError::Name(format!("state '{name}' declared twice")));
            }
            Op::StoreRows { .. } if !matches!(g.nodes[n.inputs[0]].op, Op::State { .. }) => {
                return Err(IrError::Name(format!("node {i} stores rows into node {}, which is not a state", n.inputs[0])));
            }
            _ => {}
        }
        let ins: Vec<(&[usize], DType)> = n.inputs.iter().map(|&x| (g.nodes[x].shape.as_slice(), g.nodes[x].dtype)).collect();
        let (s, d) = infer_at(Some(i), &n.op, &ins, Some((&n.shape, n.dtype)))?;
        if s != n.shape || d != n.dtype {
            return Err(IrError::Inconsistent { node: i, op: n.op.name(), recorded: format!("{:?} {}", n.shape, n.dtype), inferred: format!("{s:?} {d}") });
        }
    }
    // A state is read only through the one StoreRows that updates it (so the update can be
    // done in place, and no reader sees a half-updated cache).
    let users = g.users();
    for (i, n) in g.nodes.iter().enumerate() {
        if let Op::State { name } = &n.op {
            let ok = users[i].len() == 1 && matches!(g.nodes[users[i][0]].op, Op::StoreRows { .. }) && g.nodes[users[i][0]].inputs[0] == i;
            if !ok {
                return Err(IrError::Name(format!("state '{name}' must be read by exactly one store_rows (as its first operand), found users {:?}", users[i])));
            }
        }
    }
    let mut outs = HashSet::new();
    for (name, id) in &g.outputs {
        if *id >= g.nodes.len() {
            return Err(IrError::Name(format!("output '{name}' refers to missing node {id}")));
        }
        if !outs.insert(name) {
            return Err(IrError::Name(format!("output '{name}' declared twice")));
        }
    }
    Ok(())
}

/// Checks that `v` is one value per channel shaped `[c, 1, ..]` with rank `rank − 1` (so
/// that it broadcasts over `[N, c, *S]`).
fn channel_vector(op: &Op, what: &str, v: &[usize], c: usize, rank: usize) -> Result<(), IrError> {
    if v.len() + 1 != rank || v.first() != Some(&c) || v[1..].iter().any(|&d| d != 1) {
        let mut want = vec![c.to_string()];
        want.extend(std::iter::repeat_n("1".to_string(), rank.saturating_sub(2)));
        return Err(shape_err(op, format!("{what} {v:?} must be [{}] (one value per channel)", want.join(", "))));
    }
    Ok(())
}

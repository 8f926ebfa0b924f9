//! The device-independent contract of every kernel ([`well_formed`]): what a launch of each
//! [`Kernel`] must look like on any device. Device registries add their own limits on top.

use crate::{Kernel, Layout};
use tg_ir::DType;

fn same_shape(inputs: &[Layout], out: &Layout) -> Result<(), String> {
    for l in inputs {
        if l.shape != out.shape {
            return Err(format!("operand shape {:?} differs from output {:?} (broadcast must be a strided view)", l.shape, out.shape));
        }
    }
    Ok(())
}

fn need(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

pub(crate) fn quant_or_f32(d: DType) -> Option<tg_quant::GgmlType> {
    match d {
        DType::F32 => Some(tg_quant::GgmlType::F32),
        DType::Quant(t) => Some(t),
        _ => None,
    }
}

/// Whether `kernel` reading `ins` and writing `out` is a well-formed launch: the arity, the
/// shapes and dtypes its definition relates, and the layouts every implementation of it reads
/// (which operands may be strided or broadcast, which must be plain rows). Each device's
/// contract is this plus its own limits (the CPU: outputs at offset 0; OpenCL: strided rank,
/// head size, weight formats), so no device restates it.
pub fn well_formed(kernel: &Kernel, ins: &[Layout], out: &Layout) -> Result<(), String> {
    need(out.is_contiguous(), || "output must be contiguous".into())?;
    need(!matches!(out.dtype, DType::Quant(_)), || "outputs cannot be quantized".into())?;
    need(out.strides.len() == out.shape.len() && ins.iter().all(|l| l.strides.len() == l.shape.len()), || "layout strides and shape differ in rank".into())?;
    let arity = |n: usize| need(ins.len() == n, || format!("expects {n} operands, got {}", ins.len()));
    match kernel {
        Kernel::Transfer { .. } => {
            arity(1)?;
            same_shape(ins, out)?;
            need(ins[0].dtype == out.dtype, || "transfer: the copy has the source's dtype".into())
        }
        Kernel::Fill { .. } => arity(0),
        Kernel::Iota { axis } => {
            arity(0)?;
            need(*axis < out.shape.len() && matches!(out.dtype, DType::F32 | DType::I32), || "iota: bad axis or dtype".into())
        }
        Kernel::Unary(_) => {
            arity(1)?;
            same_shape(ins, out)?;
            need(ins[0].dtype == DType::F32 && out.dtype == DType::F32, || "unary ops are f32".into())
        }
        Kernel::Binary(_) | Kernel::Compare(_) => {
            arity(2)?;
            same_shape(ins, out)?;
            need(ins[0].dtype == ins[1].dtype && !matches!(ins[0].dtype, DType::Quant(_)), || "operands must share a plain dtype".into())?;
            if matches!(kernel, Kernel::Compare(_)) {
                need(out.dtype == DType::Bool, || "comparisons write bool".into())
            } else {
                need(out.dtype != DType::F32 || ins[0].dtype == DType::F32, || "binary f32 output from non-f32 operands".into())
            }
        }
        Kernel::Where => {
            arity(3)?;
            same_shape(ins, out)?;
            need(ins[0].dtype == DType::Bool && ins[1].dtype == out.dtype && ins[2].dtype == out.dtype, || "where: dtypes".into())
        }
        Kernel::Cast => {
            arity(1)?;
            same_shape(ins, out)?;
            need(!matches!(ins[0].dtype, DType::Quant(_)), || "cast of quantized storage".into())
        }
        Kernel::Reduce { axis, .. } => {
            arity(1)?;
            need(ins[0].dtype == DType::F32 && ins[0].is_contiguous() && out.dtype == DType::F32, || "reduce needs a contiguous f32 operand".into())?;
            let mut s = ins[0].shape.clone();
            need(*axis < s.len(), || "reduce axis out of range".into())?;
            s[*axis] = 1;
            need(s == out.shape, || format!("reduce output {:?} != {:?}", out.shape, s))
        }
        Kernel::MatMul { transpose_rhs } => {
            arity(2)?;
            let (a, b) = (&ins[0], &ins[1]);
            let r = out.shape.len();
            need(a.dtype == DType::F32 && b.dtype == DType::F32 && out.dtype == DType::F32, || "matmul_f32 operands must be f32".into())?;
            need(r >= 2 && a.shape.len() == r && b.shape.len() == r, || "matmul_f32 operands must have the output's rank".into())?;
            need(a.shape[..r - 2] == out.shape[..r - 2] && b.shape[..r - 2] == out.shape[..r - 2], || "batch dims must be expanded to the output's".into())?;
            let (m, k) = (a.shape[r - 2], a.shape[r - 1]);
            let (kb, n) = if *transpose_rhs { (b.shape[r - 1], b.shape[r - 2]) } else { (b.shape[r - 2], b.shape[r - 1]) };
            need(k == kb && out.shape[r - 2] == m && out.shape[r - 1] == n, || "matmul_f32 dims".into())?;
            need(a.strides.iter().chain(&b.strides).all(|&s| s >= 0), || "matmul_f32 needs non-negative strides".into())
        }
        Kernel::MatMulQuant { .. } => {
            arity(2)?;
            let (a, w) = (&ins[0], &ins[1]);
            need(a.dtype == DType::F32 && a.is_contiguous() && out.dtype == DType::F32, || "matmul_quant: activations must be contiguous f32".into())?;
            need(quant_or_f32(w.dtype).is_some() && w.shape.len() == 2 && w.is_contiguous() && w.offset == 0, || "matmul_quant: weight must be a whole [n, k] tensor".into())?;
            let k = *a.shape.last().unwrap_or(&0);
            need(w.shape[1] == k, || format!("matmul_quant: k mismatch {} vs {}", k, w.shape[1]))?;
            let mut s = a.shape.clone();
            if let Some(l) = s.last_mut() {
                *l = w.shape[0];
            }
            need(s == out.shape, || format!("matmul_quant output {:?} != {:?}", out.shape, s))
        }
        Kernel::MatMulQuantAdd { quantize_activations } => {
            arity(3)?;
            well_formed(&Kernel::MatMulQuant { quantize_activations: *quantize_activations }, &ins[..2], out)?;
            let c = &ins[2];
            let n = *out.shape.last().unwrap_or(&0);
            let row = c.numel() == n && c.shape.last() == Some(&n);
            need(c.dtype == DType::F32 && c.is_contiguous() && (row || c.shape == out.shape), || {
                "matmul_quant_add: the addend must be a contiguous f32 row of n or the output's shape".into()
            })
        }
        Kernel::Copy => {
            arity(1)?;
            same_shape(ins, out)?;
            need(ins[0].dtype == out.dtype, || "copy keeps the dtype".into())
        }
        Kernel::Concat { axis } => {
            need(!ins.is_empty(), || "concat of nothing".into())?;
            need(ins.iter().all(|l| l.is_contiguous() && l.dtype == out.dtype), || "concat operands must be contiguous and share the dtype".into())?;
            need(*axis < out.shape.len() && ins.iter().all(|l| l.shape.len() == out.shape.len()), || "concat axis or rank".into())?;
            need(ins.iter().all(|l| (0..out.shape.len()).all(|d| d == *axis || l.shape[d] == out.shape[d])), || "concat: operands differ off the axis".into())?;
            need(ins.iter().map(|l| l.shape[*axis]).sum::<usize>() == out.shape[*axis], || "concat sizes".into())
        }
        Kernel::StoreRows { axis } => {
            arity(2)?;
            let (r, o) = (&ins[0], &ins[1]);
            need(*axis < out.shape.len() && r.shape.len() == out.shape.len(), || "store_rows: axis or rank".into())?;
            need(r.is_contiguous() && r.dtype == out.dtype, || "store_rows: rows must be contiguous, of the state's dtype".into())?;
            need((0..out.shape.len()).all(|i| i == *axis || r.shape[i] == out.shape[i]) && r.shape[*axis] <= out.shape[*axis], || "store_rows: rows do not fit".into())?;
            need(o.dtype == DType::I32 && o.numel() == 1, || "store_rows: offset must be one i32".into())
        }
        Kernel::Gather => {
            arity(2)?;
            let (t, ids) = (&ins[0], &ins[1]);
            need(quant_or_f32(t.dtype).is_some() && t.shape.len() == 2 && t.is_contiguous() && t.offset == 0, || "gather: table must be a whole [rows, k] tensor".into())?;
            need(ids.dtype == DType::I32 && ids.is_contiguous(), || "gather: ids must be contiguous i32".into())?;
            need(out.dtype == DType::F32 && out.numel() == ids.numel() * t.shape[1], || "gather output size".into())
        }
        Kernel::Conv { window, groups } | Kernel::Im2Col { window, groups } => {
            let conv = matches!(kernel, Kernel::Conv { .. });
            arity(if conv { 2 } else { 1 })?;
            fused_f32(ins)?;
            need(out.dtype == DType::F32 && out.is_contiguous(), || "conv/im2col: contiguous f32 output".into())?;
            let op = if conv { tg_ir::Op::Conv { window: window.clone(), groups: *groups } } else { tg_ir::Op::Im2Col { window: window.clone(), groups: *groups } };
            window_shapes(&op, ins, out)
        }
        Kernel::ConvBias { window, groups, act } => {
            // [x, w, bias] or [x, w, bias, residual].
            if ins.len() != 4 {
                arity(3)?;
            }
            fused_f32(ins)?;
            need(out.dtype == DType::F32 && out.is_contiguous(), || "conv_bias: contiguous f32 output".into())?;
            window_shapes(&tg_ir::Op::ConvBias { window: window.clone(), groups: *groups, act: *act }, ins, out)
        }
        Kernel::GroupNorm { groups, eps_bits, act } => {
            arity(3)?;
            fused_f32(ins)?;
            need(out.dtype == DType::F32 && out.is_contiguous(), || "group_norm: contiguous f32 output".into())?;
            let typed: Vec<(&[usize], DType)> = ins.iter().map(|l| (&l.shape[..], l.dtype)).collect();
            let op = tg_ir::Op::GroupNorm { groups: *groups, eps_bits: *eps_bits, act: *act };
            let (shape, _) = tg_ir::infer(&op, &typed, None).map_err(|e| e.to_string())?;
            need(shape == out.shape, || format!("group_norm: output {:?}, expected {shape:?}", out.shape))
        }
        Kernel::Pool { kind, window } => {
            arity(1)?;
            fused_f32(ins)?;
            need(out.dtype == DType::F32 && out.is_contiguous(), || "pool: contiguous f32 output".into())?;
            window_shapes(&tg_ir::Op::Pool { kind: *kind, window: window.clone() }, ins, out)
        }
        Kernel::RmsNorm { .. } => {
            arity(2)?;
            fused_f32(ins)?;
            same_shape(&ins[..1], out)?;
            let n = *out.shape.last().unwrap_or(&0);
            need(ins[1].numel() == n && ins[1].shape.last() == Some(&n), || "rms_norm: the weight must be one row of the last dim".into())
        }
        Kernel::RopeNeox => {
            arity(3)?;
            fused_f32(ins)?;
            same_shape(&ins[..1], out)?;
            need(out.shape.len() == 3 && out.shape[2].is_multiple_of(2), || "rope_neox: x must be [seq, heads, even d]".into())?;
            rope_tables(out, &ins[1], &ins[2], "rope_neox")
        }
        Kernel::AddRmsNorm { .. } => {
            arity(3)?;
            fused_f32(ins)?;
            let (a, b, w) = (&ins[0], &ins[1], &ins[2]);
            need(a.shape == b.shape, || "add_rms_norm: the summands must have one shape".into())?;
            need(out.shape.first() == Some(&2) && out.shape[1..] == a.shape[..], || "add_rms_norm: the output must be [2, ..a.shape]".into())?;
            let n = *a.shape.last().unwrap_or(&0);
            need(w.numel() == n && w.shape.last() == Some(&n), || "add_rms_norm: the weight must be one row of the last dim".into())
        }
        Kernel::RmsNormRopeNeox { .. } => {
            arity(4)?;
            fused_f32(ins)?;
            same_shape(&ins[..1], out)?;
            need(out.shape.len() == 3 && out.shape[2].is_multiple_of(2), || "rms_norm_rope_neox: x must be [seq, heads, even d]".into())?;
            let d = out.shape[2];
            need(ins[1].numel() == d && ins[1].shape.last() == Some(&d), || "rms_norm_rope_neox: the weight must be one row of head_dim".into())?;
            rope_tables(out, &ins[2], &ins[3], "rms_norm_rope_neox")
        }
        Kernel::GeluTanh | Kernel::Softmax | Kernel::GatedGelu => {
            arity(if matches!(kernel, Kernel::GatedGelu) { 2 } else { 1 })?;
            fused_f32(ins)?;
            need(out.dtype == DType::F32, || "f32 output".into())?;
            same_shape(ins, out)
        }
        Kernel::Attention { .. } => {
            arity(4)?;
            fused_f32(&ins[..3])?;
            attention_mask(&ins[3])?;
            let (q, k, v, m) = (&ins[0], &ins[1], &ins[2], &ins[3]);
            need(q.shape.len() == 4 && k.shape.len() == 4 && v.shape.len() == 4, || "attention: q, k, v must be rank 4".into())?;
            let (nkv, d) = (q.shape[0], q.shape[3]);
            let sk = k.shape[2];
            need(k.shape == [nkv, 1, sk, d] && v.shape == [nkv, 1, sk, d], || "attention: k/v must be [n_kv, 1, sk, d] like q's".into())?;
            need(m.numel() == q.shape[2] * sk && m.shape.last() == Some(&sk), || "attention: mask must be one [sq, sk] matrix".into())?;
            same_shape(&ins[..1], out)
        }
        Kernel::AttentionSeqMajor { .. } => {
            arity(4)?;
            fused_f32(&ins[..3])?;
            attention_mask(&ins[3])?;
            let (q, k, v, m) = (&ins[0], &ins[1], &ins[2], &ins[3]);
            need(q.shape.len() == 4 && k.shape.len() == 4 && v.shape.len() == 4, || "attention_seq_major: q, k, v must be rank 4".into())?;
            let (sq, nkv, d) = (q.shape[0], q.shape[1], q.shape[3]);
            let sk = k.shape[2];
            need(k.shape == [nkv, 1, sk, d] && v.shape == [nkv, 1, sk, d], || "attention_seq_major: k/v must be [n_kv, 1, sk, d] for q [sq, n_kv, g, d]".into())?;
            need(m.numel() == sq * sk && m.shape.last() == Some(&sk), || "attention_seq_major: mask must be one [sq, sk] matrix".into())?;
            same_shape(&ins[..1], out)
        }
    }
}

/// RoPE tables for `out: [seq, heads, d]`: `cos` and `sin` hold one row of `d/2` per position.
fn rope_tables(out: &Layout, cos: &Layout, sin: &Layout, what: &str) -> Result<(), String> {
    let (seq, half) = (out.shape[0], out.shape[2] / 2);
    let ok = |l: &Layout| l.numel() == seq * half && l.shape.last() == Some(&half) && l.shape.first() == Some(&seq);
    need(ok(cos) && ok(sin), || format!("{what}: cos/sin must be [seq, .., d/2] with one row per position"))
}

/// The plane geometry the window kernels of every device take for `window` over `x [N, C,
/// *S]`: a 1-D window is a plane of height 1. An error for 3 spatial axes or a shape that
/// does not fit.
pub fn window_2d(window: &tg_ir::Window, x: &[usize]) -> Result<tg_kernels::Window2d, String> {
    window.check()?;
    let r = window.rank();
    if r > 2 || x.len() != r + 2 {
        return Err(format!("window {window} over {x:?}: the kernels take 1 or 2 spatial axes"));
    }
    let two = |v: &[usize], fill: usize| if r == 1 { [fill, v[0]] } else { [v[0], v[1]] };
    Ok(tg_kernels::Window2d {
        n: x[0],
        c: x[1],
        in_hw: two(&x[2..], 1),
        size: two(&window.size, 1),
        stride: two(&window.stride, 1),
        dilation: two(&window.dilation, 1),
        pad_begin: two(&window.pad_begin, 0),
        pad_end: two(&window.pad_end, 0),
    })
}

/// The window kernels take the IR op's shapes exactly, over at most 2 spatial axes.
fn window_shapes(op: &tg_ir::Op, ins: &[Layout], out: &Layout) -> Result<(), String> {
    let window = match op {
        tg_ir::Op::Conv { window, .. } | tg_ir::Op::Im2Col { window, .. } | tg_ir::Op::Pool { window, .. } | tg_ir::Op::ConvBias { window, .. } => window,
        _ => return Err("not a window op".into()),
    };
    need(window.rank() <= 2, || format!("{}: the kernels take 1 or 2 spatial axes, not {}", op.name(), window.rank()))?;
    let typed: Vec<(&[usize], DType)> = ins.iter().map(|l| (&l.shape[..], l.dtype)).collect();
    let (shape, _) = tg_ir::infer(op, &typed, None).map_err(|e| e.to_string())?;
    need(shape == out.shape, || format!("{}: output {:?}, expected {shape:?}", op.name(), out.shape))
}

/// All operands contiguous f32 (the fused kernels read plain rows).
/// An attention mask: f32, one contiguous `[sq, sk]` matrix, or one row broadcast over the
/// positions (stride 0 on every axis but the last) or one value broadcast to all (stride 0
/// everywhere) — what an exporter's "no mask" becomes, read without materializing it.
fn attention_mask(m: &Layout) -> Result<(), String> {
    let last = m.strides.len().saturating_sub(1);
    let broadcast = m.strides[..last].iter().all(|&s| s == 0) && m.strides.get(last).is_some_and(|&s| s == 0 || s == 1);
    need(m.dtype == DType::F32 && (m.is_contiguous() || broadcast), || "attention: the mask must be f32, contiguous or one row / one value broadcast".into())
}

fn fused_f32(ins: &[Layout]) -> Result<(), String> {
    need(ins.iter().all(|l| l.dtype == DType::F32 && l.is_contiguous()), || "fused kernels need contiguous f32 operands".into())
}

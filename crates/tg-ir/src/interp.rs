//! The reference interpreter: the living definition of every op.
//!
//! Each op is implemented in the plainest way that is obviously right, in f64 (inputs and
//! weights are widened; sums, matmuls and reductions accumulate in f64). It is slow on
//! purpose; kernels, rewrite rules and compiled plans are all tested against it.

use crate::shape::{broadcast_strides, contiguous_strides, numel, strided_offsets};
use crate::{BinaryOp, CmpOp, DType, Graph, HostTensor, IrError, Node, Op, PoolKind, ReduceOp, WeightStore, Window};
use std::collections::HashMap;

/// A dense f64 tensor (values of any dtype, widened exactly).
#[derive(Debug, Clone, PartialEq)]
pub struct Array {
    /// Shape, outermost first.
    pub shape: Vec<usize>,
    /// Logical dtype of the values.
    pub dtype: DType,
    /// Row-major values.
    pub data: Vec<f64>,
}

enum Value<'w> {
    Dense(Array),
    /// A quantized (or f16/bf16) weight left in storage form; rows are dequantized on use.
    Stored {
        shape: Vec<usize>,
        ty: tg_quant::GgmlType,
        bytes: &'w [u8],
    },
}

fn err(node: usize, n: &Node, msg: impl std::fmt::Display) -> IrError {
    IrError::Eval(format!("node {node} ({}): {msg}", n.op.name()))
}

fn stored_row(shape: &[usize], ty: tg_quant::GgmlType, bytes: &[u8], r: usize) -> Result<Vec<f64>, String> {
    let k = shape[1];
    let rb = ty.row_bytes(k).map_err(|e| e.to_string())?;
    let src = bytes.get(r * rb..(r + 1) * rb).ok_or_else(|| format!("row {r} past the end of the weight"))?;
    let mut out = vec![0f32; k];
    tg_quant::dequantize_row(ty, src, &mut out).map_err(|e| e.to_string())?;
    Ok(out.into_iter().map(|x| x as f64).collect())
}

impl Value<'_> {
    fn dense(&self) -> Result<Array, String> {
        match self {
            Value::Dense(a) => Ok(a.clone()),
            Value::Stored { shape, ty, bytes } => {
                let mut data = Vec::with_capacity(numel(shape));
                for r in 0..shape[0] {
                    data.extend(stored_row(shape, *ty, bytes, r)?);
                }
                Ok(Array { shape: shape.clone(), dtype: DType::F32, data })
            }
        }
    }
}

/// Calls `f` for each tap of output position `o` (row-major over `osp`) of `window` over an
/// input of spatial dims `sp`, in tap order, with the tap's row-major input offset or `None`
/// for padding.
fn for_taps(window: &Window, sp: &[usize], osp: &[usize], o: usize, mut f: impl FnMut(Option<usize>)) {
    let r = window.rank();
    let mut oi = vec![0usize; r];
    let mut rest = o;
    for a in (0..r).rev() {
        oi[a] = rest % osp[a];
        rest /= osp[a];
    }
    for j in 0..window.taps() {
        let mut rest = j;
        let mut at = Some(0usize);
        let mut ji = vec![0usize; r];
        for a in (0..r).rev() {
            ji[a] = rest % window.size[a];
            rest /= window.size[a];
        }
        for a in 0..r {
            let pos = (oi[a] * window.stride[a] + ji[a] * window.dilation[a]) as isize - window.pad_begin[a] as isize;
            at = match at {
                Some(acc) if pos >= 0 && (pos as usize) < sp[a] => Some(acc * sp[a] + pos as usize),
                _ => None,
            };
        }
        f(at);
    }
}

/// The im2col matrix `[N, g, (C/g)·taps, P]` of `x [N, C, *S]` (see [`Op::Im2Col`]).
fn im2col_f64(x: &Array, window: &Window) -> Vec<f64> {
    let (batch, c, sp) = (x.shape[0], x.shape[1], &x.shape[2..]);
    let Ok(osp) = window.output(sp) else { return Vec::new() };
    let (isz, p, taps) = (numel(sp), numel(&osp), window.taps());
    let mut cols = vec![0f64; batch * c * taps * p];
    for b in 0..batch {
        for ch in 0..c {
            let plane = &x.data[(b * c + ch) * isz..][..isz];
            // (b, ch / cg, ch % cg) rows start at ((b·g + gi)·cg + c')·taps = (b·c + ch)·taps.
            let base = (b * c + ch) * taps;
            for o in 0..p {
                let mut j = 0;
                for_taps(window, sp, &osp, o, |at| {
                    if let Some(at) = at {
                        cols[(base + j) * p + o] = plane[at];
                    }
                    j += 1;
                });
            }
        }
    }
    cols
}

fn broadcast_to(a: &Array, shape: &[usize]) -> Vec<f64> {
    let st = broadcast_strides(&a.shape, shape);
    strided_offsets(shape, &st, 0).into_iter().map(|i| a.data[i]).collect()
}

fn round_to(dtype: DType, x: f64) -> f64 {
    match dtype {
        DType::I32 => (x as i64 as i32) as f64,
        DType::Bool => (x != 0.0) as u8 as f64,
        _ => x,
    }
}

/// Evaluates a single node given its operand values (exposed for rule soundness tests).
fn eval_node<'w>(
    i: usize,
    n: &Node,
    args: &[&Value<'w>],
    inputs: &HashMap<String, HostTensor>,
    weights: &'w dyn WeightStore,
    states: &HashMap<String, Array>,
) -> Result<Value<'w>, IrError> {
    let dense = |k: usize| args[k].dense().map_err(|e| err(i, n, e));
    let out = |data: Vec<f64>| Ok(Value::Dense(Array { shape: n.shape.clone(), dtype: n.dtype, data }));
    match &n.op {
        Op::Input { name } => {
            let t = inputs.get(name).ok_or_else(|| err(i, n, format!("missing input '{name}'")))?;
            if t.shape != n.shape || t.dtype() != n.dtype {
                return Err(err(i, n, format!("input '{name}' is {:?} {}, graph wants {:?} {}", t.shape, t.dtype(), n.shape, n.dtype)));
            }
            out(t.to_f64())
        }
        Op::Weight { name } => {
            let bytes = weights.bytes(name).ok_or_else(|| err(i, n, format!("weight store has no '{name}'")))?;
            let want = n.shape.iter().take(n.shape.len().saturating_sub(1)).product::<usize>()
                * n.dtype.bytes_for(*n.shape.last().unwrap_or(&1)).ok_or_else(|| err(i, n, "bad row length"))?;
            if bytes.len() != want {
                return Err(err(i, n, format!("weight '{name}' has {} bytes, shape {:?} {} needs {want}", bytes.len(), n.shape, n.dtype)));
            }
            match n.dtype {
                DType::Quant(ty) => Ok(Value::Stored { shape: n.shape.clone(), ty, bytes }),
                DType::F32 => out(bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect()),
                DType::I32 => out(bytes.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64).collect()),
                DType::Bool => out(bytes.iter().map(|&b| (b != 0) as u8 as f64).collect()),
            }
        }
        Op::Constant { bits } => out(vec![round_to(n.dtype, f64::from_bits(*bits))]),
        // Graphs with alternatives are evaluated resolved (see `eval_with_states`).
        Op::Alternatives => out(dense(0)?.data),
        Op::State { name } => match states.get(name) {
            Some(a) if a.shape == n.shape && a.dtype == n.dtype => out(a.data.clone()),
            Some(a) => Err(err(i, n, format!("state '{name}' holds {:?} {}, graph wants {:?} {}", a.shape, a.dtype, n.shape, n.dtype))),
            None => out(vec![0.0; numel(&n.shape)]),
        },
        Op::StoreRows { axis } => {
            let (mut s, r, o) = (dense(0)?, dense(1)?, dense(2)?);
            let (ext, k) = (s.shape[*axis], r.shape[*axis]);
            let off = o.data[0];
            if off < 0.0 || off as usize + k > ext {
                return Err(err(i, n, format!("rows {off}..{} past the state's {ext} along axis {axis}", off + k as f64)));
            }
            let off = off as usize;
            let inner: usize = s.shape[axis + 1..].iter().product();
            let outer: usize = s.shape[..*axis].iter().product();
            for a in 0..outer {
                let dst = (a * ext + off) * inner;
                let src = a * k * inner;
                s.data[dst..dst + k * inner].copy_from_slice(&r.data[src..src + k * inner]);
            }
            Ok(Value::Dense(s))
        }
        Op::Iota { axis } => {
            let st = contiguous_strides(&n.shape);
            let size = n.shape[*axis];
            out((0..numel(&n.shape)).map(|l| ((l / st[*axis] as usize) % size) as f64).collect())
        }
        Op::Unary(u) => {
            let a = dense(0)?;
            out(a.data.iter().map(|&x| u.eval_f64(x)).collect())
        }
        Op::Binary(b) => {
            let (x, y) = (broadcast_to(&dense(0)?, &n.shape), broadcast_to(&dense(1)?, &n.shape));
            let f = |a: f64, c: f64| match b {
                // Integer division truncates toward zero (`round_to`); by zero it is 0.
                BinaryOp::Div if n.dtype == DType::I32 && c == 0.0 => 0.0,
                _ => b.eval_f64(a, c),
            };
            out(x.iter().zip(&y).map(|(&a, &c)| round_to(n.dtype, f(a, c))).collect())
        }
        Op::Compare(c) => {
            let (x, y) = (broadcast_to(&dense(0)?, &n.shape), broadcast_to(&dense(1)?, &n.shape));
            let f = |a: f64, b: f64| match c {
                CmpOp::Eq => a == b,
                CmpOp::Ne => a != b,
                CmpOp::Lt => a < b,
                CmpOp::Le => a <= b,
                CmpOp::Gt => a > b,
                CmpOp::Ge => a >= b,
            };
            out(x.iter().zip(&y).map(|(&a, &b)| f(a, b) as u8 as f64).collect())
        }
        Op::Where => {
            let c = broadcast_to(&dense(0)?, &n.shape);
            let (x, y) = (broadcast_to(&dense(1)?, &n.shape), broadcast_to(&dense(2)?, &n.shape));
            out((0..c.len()).map(|k| if c[k] != 0.0 { x[k] } else { y[k] }).collect())
        }
        Op::Cast { to } => {
            let a = dense(0)?;
            out(a.data.iter().map(|&x| if *to == DType::I32 { x.trunc() } else { x }).map(|x| round_to(*to, x)).collect())
        }
        Op::Reduce { op, axis } => {
            let a = dense(0)?;
            let len = a.shape[*axis];
            let inner: usize = a.shape[axis + 1..].iter().product();
            let outer: usize = a.shape[..*axis].iter().product();
            let mut data = Vec::with_capacity(outer * inner);
            for o in 0..outer {
                for p in 0..inner {
                    let it = (0..len).map(|r| a.data[(o * len + r) * inner + p]);
                    data.push(match op {
                        ReduceOp::Sum => it.sum(),
                        ReduceOp::Mean => it.sum::<f64>() / len as f64,
                        ReduceOp::Max => it.fold(f64::NEG_INFINITY, f64::max),
                    });
                }
            }
            out(data)
        }
        Op::MatMul { transpose_rhs } | Op::MatMulAdd { transpose_rhs } => {
            let a = dense(0)?;
            let (m, k) = (a.shape[a.shape.len() - 2], a.shape[a.shape.len() - 1]);
            let nn = n.shape[n.shape.len() - 1];
            let batch_shape = &n.shape[..n.shape.len() - 2];
            let nb = numel(batch_shape);
            // Batch index → offset of each operand's matrix (broadcast batch dims).
            let a_batch = &a.shape[..a.shape.len() - 2];
            let a_off = strided_offsets(batch_shape, &broadcast_strides(a_batch, batch_shape), 0);
            let mut data = vec![0f64; nb * m * nn];
            match args[1] {
                Value::Stored { shape, ty, bytes } => {
                    // Quantized [n, k] weight, no batch dims: one row at a time.
                    for j in 0..nn {
                        let row = stored_row(shape, *ty, bytes, j).map_err(|e| err(i, n, e))?;
                        for bi in 0..nb {
                            for r in 0..m {
                                let x = &a.data[a_off[bi] * m * k + r * k..][..k];
                                data[(bi * m + r) * nn + j] = x.iter().zip(&row).map(|(p, q)| p * q).sum();
                            }
                        }
                    }
                }
                Value::Dense(b) => {
                    let b_batch = &b.shape[..b.shape.len() - 2];
                    let b_off = strided_offsets(batch_shape, &broadcast_strides(b_batch, batch_shape), 0);
                    for bi in 0..nb {
                        let ab = &a.data[a_off[bi] * m * k..][..m * k];
                        let bb = &b.data[b_off[bi] * k * nn..][..k * nn];
                        for r in 0..m {
                            for j in 0..nn {
                                let mut s = 0f64;
                                for p in 0..k {
                                    let bv = if *transpose_rhs { bb[j * k + p] } else { bb[p * nn + j] };
                                    s += ab[r * k + p] * bv;
                                }
                                data[(bi * m + r) * nn + j] = s;
                            }
                        }
                    }
                }
            }
            if matches!(n.op, Op::MatMulAdd { .. }) {
                // The epilogue: + c, broadcast to the product.
                let c = broadcast_to(&dense(2)?, &n.shape);
                data.iter_mut().zip(&c).for_each(|(d, c)| *d += c);
            }
            out(data)
        }
        Op::Reshape => Ok(Value::Dense(Array { shape: n.shape.clone(), dtype: n.dtype, data: dense(0)?.data })),
        Op::Permute { perm } => {
            let a = dense(0)?;
            let st = contiguous_strides(&a.shape);
            let pst: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
            out(strided_offsets(&n.shape, &pst, 0).into_iter().map(|l| a.data[l]).collect())
        }
        Op::Expand => out(broadcast_to(&dense(0)?, &n.shape)),
        Op::Slice { axis, start, .. } => {
            let a = dense(0)?;
            let st = contiguous_strides(&a.shape);
            out(strided_offsets(&n.shape, &st, *start * st[*axis] as usize).into_iter().map(|l| a.data[l]).collect())
        }
        Op::Concat { axis } => {
            let parts: Vec<Array> = (0..args.len()).map(dense).collect::<Result<_, _>>()?;
            let outer: usize = n.shape[..*axis].iter().product();
            let mut data = Vec::with_capacity(numel(&n.shape));
            for o in 0..outer {
                for p in &parts {
                    let chunk: usize = p.shape[*axis..].iter().product();
                    data.extend_from_slice(&p.data[o * chunk..(o + 1) * chunk]);
                }
            }
            out(data)
        }
        Op::Gather => {
            let ids = dense(1)?;
            let (rows, k) = match args[0] {
                Value::Stored { shape, .. } => (shape[0], shape[1]),
                Value::Dense(t) => (t.shape[0], t.shape[1]),
            };
            let mut data = Vec::with_capacity(ids.data.len() * k);
            for &id in &ids.data {
                if id < 0.0 || id as usize >= rows {
                    return Err(err(i, n, format!("index {id} out of range for a table of {rows} rows")));
                }
                match args[0] {
                    Value::Stored { shape, ty, bytes } => data.extend(stored_row(shape, *ty, bytes, id as usize).map_err(|e| err(i, n, e))?),
                    Value::Dense(t) => data.extend_from_slice(&t.data[id as usize * k..][..k]),
                }
            }
            out(data)
        }
        Op::Conv { window, groups } | Op::Im2Col { window, groups } => {
            let x = dense(0)?;
            if matches!(n.op, Op::Im2Col { .. }) {
                return out(im2col_f64(&x, window));
            }
            out(conv_f64(&x, &dense(1)?, window, *groups, &n.shape))
        }
        Op::ConvBias { window, groups, act } => {
            // act(conv(x, w) + b [+ r]), b one value per output channel, r the output's shape.
            let mut data = conv_f64(&dense(0)?, &dense(1)?, window, *groups, &n.shape);
            let b = dense(2)?;
            let r = if args.len() > 3 { Some(dense(3)?) } else { None };
            let p = numel(&n.shape[2..]).max(1);
            for (i, v) in data.iter_mut().enumerate() {
                let res = r.as_ref().map_or(0.0, |r| r.data[i]);
                *v = act.eval_f64(*v + b.data[(i / p) % n.shape[1]] + res);
            }
            out(data)
        }
        Op::GroupNorm { groups, eps_bits, act } => {
            // Per (sample, group): (x − mean)·rsqrt(mean((x − mean)²) + ε), then ·γ + β per
            // channel and the activation.
            let (x, gam, bet) = (dense(0)?, dense(1)?, dense(2)?);
            let (c, g, eps) = (x.shape[1], *groups, f64::from_bits(*eps_bits));
            let plane = numel(&x.shape[2..]);
            let per = c / g * plane;
            // γ and β hold one value per channel, or one per image and channel.
            let at = |t: &Array, bi: usize, ch: usize| t.data[if t.data.len() == c { ch } else { bi / g * c + ch }];
            let mut data = Vec::with_capacity(x.data.len());
            for (bi, blk) in x.data.chunks(per.max(1)).enumerate().take(x.shape[0] * g) {
                let mean = blk.iter().sum::<f64>() / per as f64;
                let var = blk.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / per as f64;
                let inv = 1.0 / (var + eps).sqrt();
                for (j, v) in blk.iter().enumerate() {
                    let ch = (bi % g) * (c / g) + j / plane.max(1);
                    data.push(act.eval_f64((v - mean) * inv * at(&gam, bi, ch) + at(&bet, bi, ch)));
                }
            }
            out(data)
        }
        Op::Pool { kind, window } => {
            let x = dense(0)?;
            let (nc, sp) = (x.shape[0] * x.shape[1], &x.shape[2..]);
            let osp = &n.shape[2..];
            let (isz, osz) = (numel(sp), numel(osp));
            let mut data = Vec::with_capacity(nc * osz);
            for plane in x.data.chunks(isz.max(1)).take(nc) {
                for o in 0..osz {
                    let (mut acc, mut count) = (if *kind == PoolKind::Max { f64::NEG_INFINITY } else { 0.0 }, 0usize);
                    for_taps(window, sp, osp, o, |pos| {
                        if let Some(at) = pos {
                            let v = plane[at];
                            acc = if *kind == PoolKind::Max {
                                if v.is_nan() || v > acc {
                                    v
                                } else {
                                    acc
                                }
                            } else {
                                acc + v
                            };
                            count += 1;
                        }
                    });
                    data.push(match kind {
                        PoolKind::Max => acc,
                        PoolKind::Avg => acc / count.max(1) as f64,
                        PoolKind::AvgPadded => acc / window.taps() as f64,
                    });
                }
            }
            out(data)
        }
        Op::RmsNorm { eps_bits } => {
            let x = dense(0)?;
            let w = broadcast_to(&dense(1)?, &n.shape);
            let d = *n.shape.last().unwrap_or(&1);
            let eps = f64::from_bits(*eps_bits);
            let mut data = Vec::with_capacity(x.data.len());
            for (r, row) in x.data.chunks(d.max(1)).enumerate() {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
                let inv = 1.0 / (ms + eps).sqrt();
                data.extend(row.iter().enumerate().map(|(j, v)| v * inv * w[r * d + j]));
            }
            out(data)
        }
        Op::AddRmsNorm { eps_bits } => {
            let (a, b) = (dense(0)?, dense(1)?);
            let row_shape = &n.shape[1..];
            let w = broadcast_to(&dense(2)?, row_shape);
            let d = *row_shape.last().unwrap_or(&1);
            let eps = f64::from_bits(*eps_bits);
            let sum: Vec<f64> = a.data.iter().zip(&b.data).map(|(x, y)| x + y).collect();
            let mut data = sum.clone();
            data.reserve(sum.len());
            for (r, row) in sum.chunks(d.max(1)).enumerate() {
                let ms = row.iter().map(|v| v * v).sum::<f64>() / d as f64;
                let inv = 1.0 / (ms + eps).sqrt();
                data.extend(row.iter().enumerate().map(|(j, v)| v * inv * w[r * d + j]));
            }
            out(data)
        }
        Op::RmsNormRopeNeox { eps_bits } => {
            let x = dense(0)?;
            let w = broadcast_to(&dense(1)?, &n.shape);
            let d = *n.shape.last().unwrap_or(&2);
            let h = d / 2;
            let mut half = n.shape.clone();
            if let Some(l) = half.last_mut() {
                *l = h;
            }
            let (c, sn) = (broadcast_to(&dense(2)?, &half), broadcast_to(&dense(3)?, &half));
            let eps = f64::from_bits(*eps_bits);
            let mut data = vec![0f64; x.data.len()];
            for r in 0..x.data.len() / d.max(1) {
                let row = &x.data[r * d..(r + 1) * d];
                let inv = 1.0 / (row.iter().map(|v| v * v).sum::<f64>() / d as f64 + eps).sqrt();
                let y: Vec<f64> = (0..d).map(|j| row[j] * inv * w[r * d + j]).collect();
                for i in 0..h {
                    let (cc, ss) = (c[r * h + i], sn[r * h + i]);
                    data[r * d + i] = y[i] * cc - y[i + h] * ss;
                    data[r * d + i + h] = y[i + h] * cc + y[i] * ss;
                }
            }
            out(data)
        }
        Op::RopeNeox => {
            let x = dense(0)?;
            let d = *n.shape.last().unwrap_or(&2);
            let h = d / 2;
            let mut half = n.shape.clone();
            if let Some(l) = half.last_mut() {
                *l = h;
            }
            let (c, sn) = (broadcast_to(&dense(1)?, &half), broadcast_to(&dense(2)?, &half));
            let mut data = vec![0f64; x.data.len()];
            for r in 0..x.data.len() / d.max(1) {
                for i in 0..h {
                    let (x1, x2) = (x.data[r * d + i], x.data[r * d + i + h]);
                    let (cc, ss) = (c[r * h + i], sn[r * h + i]);
                    data[r * d + i] = x1 * cc - x2 * ss;
                    data[r * d + i + h] = x2 * cc + x1 * ss;
                }
            }
            out(data)
        }
        Op::GeluTanh | Op::GatedGelu => {
            let g = dense(0)?;
            let gelu = |x: f64| 0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh());
            if matches!(n.op, Op::GeluTanh) {
                out(g.data.iter().map(|&x| gelu(x)).collect())
            } else {
                let u = dense(1)?;
                out(g.data.iter().zip(&u.data).map(|(&x, &y)| gelu(x) * y).collect())
            }
        }
        Op::Softmax => {
            let x = dense(0)?;
            let d = *n.shape.last().unwrap_or(&1);
            let mut data = Vec::with_capacity(x.data.len());
            for row in x.data.chunks(d.max(1)) {
                data.extend(softmax_f64(row));
            }
            out(data)
        }
        Op::Attention { scale_bits } => out(attention_f64(&dense(0)?, &dense(1)?, &dense(2)?, &dense(3)?, &n.shape, f64::from_bits(*scale_bits))),
        Op::AttentionSeqMajor { scale_bits } => {
            // permute(attention(permute(q, [1, 2, 0, 3]), k, v, m), [2, 0, 1, 3])
            let q = permuted(&dense(0)?, &[1, 2, 0, 3]);
            let hm = [n.shape[1], n.shape[2], n.shape[0], n.shape[3]];
            let o = attention_f64(&q, &dense(1)?, &dense(2)?, &dense(3)?, &hm, f64::from_bits(*scale_bits));
            let o = Array { shape: hm.to_vec(), dtype: n.dtype, data: o };
            out(permuted(&o, &[2, 0, 1, 3]).data)
        }
    }
}

/// The grouped convolution of `x` with `w` (see [`Op::Conv`]) into `shape`: the weights
/// times the im2col matrix, group by group.
fn conv_f64(x: &Array, w: &Array, window: &crate::Window, groups: usize, shape: &[usize]) -> Vec<f64> {
    let cols = im2col_f64(x, window);
    // out[n, gi·Mg + m', p] = Σ_k w[gi·Mg + m', k] · cols[n, gi, k, p].
    let (batch, m, g) = (x.shape[0], shape[1], groups);
    let (mg, k, p) = (m / g, w.data.len() / m.max(1), numel(&shape[2..]));
    let mut data = vec![0f64; numel(shape)];
    for b in 0..batch {
        for gi in 0..g {
            let col = &cols[(b * g + gi) * k * p..][..k * p];
            for mm in 0..mg {
                let oc = gi * mg + mm;
                let wr = &w.data[oc * k..][..k];
                let o = &mut data[(b * m + oc) * p..][..p];
                for (kk, &wv) in wr.iter().enumerate() {
                    for (ov, cv) in o.iter_mut().zip(&col[kk * p..][..p]) {
                        *ov += wv * cv;
                    }
                }
            }
        }
    }
    data
}

/// `a` with its dimensions reordered: output dim `i` is input dim `perm[i]`.
fn permuted(a: &Array, perm: &[usize]) -> Array {
    let st = contiguous_strides(&a.shape);
    let shape: Vec<usize> = perm.iter().map(|&p| a.shape[p]).collect();
    let pst: Vec<isize> = perm.iter().map(|&p| st[p]).collect();
    let data = strided_offsets(&shape, &pst, 0).into_iter().map(|l| a.data[l]).collect();
    Array { shape, dtype: a.dtype, data }
}

/// `softmax(scale · q·kᵀ + mask) · v` with batch dims broadcast to `out_shape[..r-2]`.
fn attention_f64(q: &Array, k: &Array, v: &Array, mask: &Array, out_shape: &[usize], scale: f64) -> Vec<f64> {
    let r = out_shape.len();
    let (sq, dv) = (out_shape[r - 2], out_shape[r - 1]);
    let (d, sk) = (q.shape[q.shape.len() - 1], k.shape[k.shape.len() - 2]);
    let batch = &out_shape[..r - 2];
    let nb = numel(batch);
    let off = |a: &Array| strided_offsets(batch, &broadcast_strides(&a.shape[..a.shape.len() - 2], batch), 0);
    let (qo, ko, vo) = (off(q), off(k), off(v));
    let mut sshape = batch.to_vec();
    sshape.extend([sq, sk]);
    let mask = broadcast_to(mask, &sshape);
    let mut data = vec![0f64; nb * sq * dv];
    for b in 0..nb {
        let (qb, kb, vb) = (&q.data[qo[b] * sq * d..][..sq * d], &k.data[ko[b] * sk * d..][..sk * d], &v.data[vo[b] * sk * dv..][..sk * dv]);
        for i in 0..sq {
            let scores: Vec<f64> = (0..sk).map(|j| scale * (0..d).map(|p| qb[i * d + p] * kb[j * d + p]).sum::<f64>() + mask[(b * sq + i) * sk + j]).collect();
            let pr = softmax_f64(&scores);
            for c in 0..dv {
                data[(b * sq + i) * dv + c] = (0..sk).map(|j| pr[j] * vb[j * dv + c]).sum();
            }
        }
    }
    data
}

/// `exp(x − max) / Σ exp(x − max)`; a row of all −∞ gives NaN, as the formula does.
fn softmax_f64(row: &[f64]) -> Vec<f64> {
    let m = row.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let e: Vec<f64> = row.iter().map(|&x| (x - m).exp()).collect();
    let s: f64 = e.iter().sum();
    e.into_iter().map(|x| x / s).collect()
}

/// Evaluates every output of `graph` on `inputs` (by input name) and `weights`.
/// Values are freed after their last use, so whole models fit in memory.
pub fn eval(graph: &Graph, inputs: &HashMap<String, HostTensor>, weights: &dyn WeightStore) -> Result<HashMap<String, Array>, IrError> {
    eval_with_states(graph, inputs, weights, &mut HashMap::new())
}

/// [`eval`] with the values kept between runs: each [`Op::State`] reads `states[name]`
/// (zeros when absent), and each [`Op::StoreRows`] result is stored back under its state's
/// name once the run succeeded.
pub fn eval_with_states(
    graph: &Graph,
    inputs: &HashMap<String, HostTensor>,
    weights: &dyn WeightStore,
    states: &mut HashMap<String, Array>,
) -> Result<HashMap<String, Array>, IrError> {
    crate::verify(graph)?;
    if graph.has_alternatives() {
        return eval_with_states(&graph.resolve_alternatives(), inputs, weights, states);
    }
    let live = graph.live_mask();
    let mut last_use = vec![0usize; graph.nodes.len()];
    for (i, n) in graph.nodes.iter().enumerate() {
        for &x in &n.inputs {
            last_use[x] = i;
        }
    }
    for (_, o) in &graph.outputs {
        last_use[*o] = usize::MAX;
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        if matches!(n.op, Op::StoreRows { .. }) {
            last_use[i] = usize::MAX;
        }
    }
    let mut vals: Vec<Option<Value>> = (0..graph.nodes.len()).map(|_| None).collect();
    for (i, n) in graph.nodes.iter().enumerate() {
        if !live[i] {
            continue;
        }
        let v = {
            let args: Vec<&Value> = n.inputs.iter().map(|&x| vals[x].as_ref().expect("operand evaluated")).collect();
            eval_node(i, n, &args, inputs, weights, states)?
        };
        vals[i] = Some(v);
        for &x in &n.inputs {
            if last_use[x] == i {
                vals[x] = None;
            }
        }
    }
    let mut outs = HashMap::new();
    for (name, o) in &graph.outputs {
        let v = vals[*o].as_ref().ok_or_else(|| IrError::Eval(format!("output '{name}' was not computed")))?;
        outs.insert(name.clone(), v.dense().map_err(IrError::Eval)?);
    }
    for (i, n) in graph.nodes.iter().enumerate() {
        if let (Op::StoreRows { .. }, Some(Value::Dense(a))) = (&n.op, vals[i].take()) {
            if let Op::State { name } = &graph.nodes[n.inputs[0]].op {
                states.insert(name.clone(), a);
            }
        }
    }
    Ok(outs)
}

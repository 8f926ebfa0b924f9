//! The CPU's kernels: SIMD kernels from `tg-kernels` for the heavy ops (matmuls, gather,
//! contiguous elementwise and row reductions) and plain strided loops for the rest, all run
//! inside the device's rayon pool; and their contract ([`contract`]).

use crate::{Kernel, Layout};
use rayon::prelude::*;
use tg_ir::shape::{contiguous_strides, strided_offsets};
use tg_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp};

fn cast_slice<T>(b: &[u8]) -> Result<&[T], String> {
    // SAFETY: f32/i32/u8 have no invalid bit patterns; alignment is checked below.
    let (pre, mid, post) = unsafe { b.align_to::<T>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(format!("buffer of {} bytes is misaligned for {}-byte elements", b.len(), std::mem::size_of::<T>()));
    }
    Ok(mid)
}

fn cast_slice_mut<T>(b: &mut [u8]) -> Result<&mut [T], String> {
    let n = b.len();
    // SAFETY: as above.
    let (pre, mid, post) = unsafe { b.align_to_mut::<T>() };
    if !pre.is_empty() || !post.is_empty() {
        return Err(format!("buffer of {n} bytes is misaligned for {}-byte elements", std::mem::size_of::<T>()));
    }
    Ok(mid)
}

/// Element values of a buffer, read as f64-convertible by dtype (used by strided loops).
#[derive(Clone, Copy)]
enum Src<'a> {
    F32(&'a [f32]),
    I32(&'a [i32]),
    Bool(&'a [u8]),
}

impl Src<'_> {
    fn new<'a>(bytes: &'a [u8], l: &Layout) -> Result<Src<'a>, String> {
        Ok(match l.dtype {
            DType::F32 => Src::F32(cast_slice(bytes)?),
            DType::I32 => Src::I32(cast_slice(bytes)?),
            DType::Bool => Src::Bool(bytes),
            DType::Quant(t) => return Err(format!("{t} storage cannot be read elementwise")),
        })
    }

    #[inline]
    fn get(&self, i: usize) -> f32 {
        match self {
            Src::F32(v) => v[i],
            Src::I32(v) => v[i] as f32,
            Src::Bool(v) => v[i] as f32,
        }
    }

    #[inline]
    fn get_i(&self, i: usize) -> i32 {
        match self {
            Src::F32(v) => v[i] as i32,
            Src::I32(v) => v[i],
            Src::Bool(v) => v[i] as i32,
        }
    }
}

/// Offsets (in elements) of the start of every innermost row of `l` over its shape.
fn row_starts(l: &Layout) -> Vec<usize> {
    match l.shape.len() {
        0 => vec![l.offset],
        r => strided_offsets(&l.shape[..r - 1], &l.strides[..r - 1], l.offset),
    }
}

fn inner(l: &Layout) -> (usize, isize) {
    match l.shape.last() {
        Some(&n) => (n, *l.strides.last().unwrap_or(&1)),
        None => (1, 1),
    }
}

/// Rows per parallel task so each task has ~16K elements.
fn chunk_rows(row_len: usize) -> usize {
    (16384 / row_len.max(1)).max(1)
}

/// Applies `f(row_index, out_row)` to every innermost row of a contiguous output, in
/// parallel when there is enough work.
fn for_rows<T: Send>(out: &mut [T], row_len: usize, f: impl Fn(usize, &mut [T]) + Sync) {
    if row_len == 0 {
        return;
    }
    if out.len() < 32768 {
        out.chunks_mut(row_len).enumerate().for_each(|(r, o)| f(r, o));
    } else {
        let cr = chunk_rows(row_len);
        out.par_chunks_mut(row_len * cr).enumerate().for_each(|(c, o)| {
            for (k, row) in o.chunks_mut(row_len).enumerate() {
                f(c * cr + k, row)
            }
        });
    }
}

/// `o[r, j] = f(a[sa[r] + j·ia], b[sb[r] + j·ib])` over rows, with contiguous and
/// broadcast fast paths.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn binary_rows<F: Fn(f32, f32) -> f32 + Sync + Copy>(o: &mut [f32], row_len: usize, av: &[f32], bv: &[f32], sa: &[usize], sb: &[usize], ia: isize, ib: isize, f: F) {
    // Whole tensor contiguous in both operands: one flat pass.
    let n = o.len();
    if ia == 1 && ib == 1 && sa.len() > 1 && sa.windows(2).all(|w| w[1] == w[0] + row_len) && sb.windows(2).all(|w| w[1] == w[0] + row_len) {
        let (x, y) = (&av[sa[0]..][..n], &bv[sb[0]..][..n]);
        if n < 32768 {
            o.iter_mut().zip(x.iter().zip(y)).for_each(|(v, (&p, &q))| *v = f(p, q));
        } else {
            o.par_chunks_mut(16384)
                .zip(x.par_chunks(16384).zip(y.par_chunks(16384)))
                .for_each(|(oc, (xc, yc))| oc.iter_mut().zip(xc.iter().zip(yc)).for_each(|(v, (&p, &q))| *v = f(p, q)));
        }
        return;
    }
    for_rows(o, row_len, |r, orow| {
        let n = orow.len();
        match (ia, ib) {
            (1, 1) => {
                let (x, y) = (&av[sa[r]..][..n], &bv[sb[r]..][..n]);
                orow.iter_mut().zip(x.iter().zip(y)).for_each(|(v, (&p, &q))| *v = f(p, q));
            }
            (1, 0) => {
                let (x, y) = (&av[sa[r]..][..n], bv[sb[r]]);
                orow.iter_mut().zip(x).for_each(|(v, &p)| *v = f(p, y));
            }
            (0, 1) => {
                let (x, y) = (av[sa[r]], &bv[sb[r]..][..n]);
                orow.iter_mut().zip(y).for_each(|(v, &q)| *v = f(x, q));
            }
            _ => {
                for (j, v) in orow.iter_mut().enumerate() {
                    *v = f(av[(sa[r] as isize + j as isize * ia) as usize], bv[(sb[r] as isize + j as isize * ib) as usize]);
                }
            }
        }
    });
}

fn unary_f(op: UnaryOp) -> fn(f32) -> f32 {
    match op {
        UnaryOp::Neg => |x| -x,
        UnaryOp::Exp => f32::exp,
        UnaryOp::Log => f32::ln,
        UnaryOp::Tanh => f32::tanh,
        UnaryOp::Sqrt => f32::sqrt,
        UnaryOp::Rsqrt => |x| 1.0 / x.sqrt(),
        UnaryOp::Recip => |x| 1.0 / x,
        UnaryOp::Sin => f32::sin,
        UnaryOp::Cos => f32::cos,
        UnaryOp::Abs => f32::abs,
        UnaryOp::Sigmoid => |x| tg_kernels::UnaryOp::Sigmoid.apply(x),
        UnaryOp::Silu => |x| tg_kernels::UnaryOp::Silu.apply(x),
        UnaryOp::Erf => |x| tg_kernels::UnaryOp::Erf.apply(x),
    }
}

fn binary_f(op: BinaryOp) -> fn(f32, f32) -> f32 {
    match op {
        BinaryOp::Add => |a, b| a + b,
        BinaryOp::Sub => |a, b| a - b,
        BinaryOp::Mul => |a, b| a * b,
        BinaryOp::Div => |a, b| a / b,
        BinaryOp::Max => f32::max,
        BinaryOp::Min => f32::min,
        BinaryOp::And => |a, b| ((a != 0.0) && (b != 0.0)) as u8 as f32,
        BinaryOp::Or => |a, b| ((a != 0.0) || (b != 0.0)) as u8 as f32,
    }
}

fn binary_i(op: BinaryOp) -> fn(i32, i32) -> i32 {
    match op {
        BinaryOp::Add => i32::wrapping_add,
        BinaryOp::Sub => i32::wrapping_sub,
        BinaryOp::Mul => i32::wrapping_mul,
        BinaryOp::Div => |a, b| if b == 0 { 0 } else { a.wrapping_div(b) },
        BinaryOp::Max => i32::max,
        BinaryOp::Min => i32::min,
        BinaryOp::And => |a, b| ((a != 0) && (b != 0)) as i32,
        BinaryOp::Or => |a, b| ((a != 0) || (b != 0)) as i32,
    }
}

fn compare<T: PartialOrd>(op: CmpOp, a: T, b: T) -> bool {
    match op {
        CmpOp::Eq => a == b,
        CmpOp::Ne => a != b,
        CmpOp::Lt => a < b,
        CmpOp::Le => a <= b,
        CmpOp::Gt => a > b,
        CmpOp::Ge => a >= b,
    }
}

fn quant_or_f32(d: DType) -> Option<tg_quant::GgmlType> {
    match d {
        DType::F32 => Some(tg_quant::GgmlType::F32),
        DType::Quant(t) => Some(t),
        _ => None,
    }
}

/// Runs `kernel` on host bytes: `ins` and the output are the byte ranges of the buffers the
/// layouts index into.
pub(crate) fn run(kernel: &Kernel, ins: &[(&[u8], &Layout)], (out_b, out): (&mut [u8], &Layout)) -> Result<(), String> {
    let n_out = out.numel();
    let (row_len, _) = inner(out);
    match kernel {
        Kernel::Transfer { .. } => return Err("a transfer is not a kernel: the executor runs it".into()),
        Kernel::Fill { bits } => {
            let v = f64::from_bits(*bits);
            match out.dtype {
                DType::F32 => cast_slice_mut::<f32>(out_b)?[..n_out].fill(v as f32),
                DType::I32 => cast_slice_mut::<i32>(out_b)?[..n_out].fill(v as i32),
                DType::Bool => out_b[..n_out].fill((v != 0.0) as u8),
                DType::Quant(_) => return Err("fill of quantized storage".into()),
            }
        }
        Kernel::Iota { axis } => {
            let st = contiguous_strides(&out.shape);
            let size = out.shape[*axis];
            let idx = |l: usize| (l / st[*axis] as usize) % size;
            match out.dtype {
                DType::F32 => cast_slice_mut::<f32>(out_b)?[..n_out].iter_mut().enumerate().for_each(|(l, o)| *o = idx(l) as f32),
                DType::I32 => cast_slice_mut::<i32>(out_b)?[..n_out].iter_mut().enumerate().for_each(|(l, o)| *o = idx(l) as i32),
                _ => return Err("iota dtype".into()),
            }
        }
        Kernel::Unary(op) => {
            let f = unary_f(*op);
            let a = Src::new(ins[0].0, ins[0].1)?;
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            if let (Src::F32(av), true) = (a, ins[0].1.is_contiguous()) {
                let av = &av[ins[0].1.offset..][..n_out];
                tg_kernels::unary_f32(kernel_unary(*op), av, o).map_err(|e| e.to_string())?;
            } else {
                let starts = row_starts(ins[0].1);
                let (_, s) = inner(ins[0].1);
                for_rows(o, row_len, |r, orow| {
                    for (j, v) in orow.iter_mut().enumerate() {
                        *v = f(a.get((starts[r] as isize + j as isize * s) as usize));
                    }
                });
            }
        }
        Kernel::Binary(op) => {
            let (la, lb) = (ins[0].1, ins[1].1);
            let (a, b) = (Src::new(ins[0].0, la)?, Src::new(ins[1].0, lb)?);
            let (sa, sb) = (row_starts(la), row_starts(lb));
            let (_, ia) = inner(la);
            let (_, ib) = inner(lb);
            match out.dtype {
                DType::F32 => {
                    let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
                    if let (Src::F32(av), Src::F32(bv)) = (a, b) {
                        // Static dispatch so each op's loop is inlined and vectorised.
                        macro_rules! go {
                            ($f:expr) => {
                                binary_rows(o, row_len, av, bv, &sa, &sb, ia, ib, $f)
                            };
                        }
                        match op {
                            BinaryOp::Add => go!(|x: f32, y: f32| x + y),
                            BinaryOp::Sub => go!(|x: f32, y: f32| x - y),
                            BinaryOp::Mul => go!(|x: f32, y: f32| x * y),
                            BinaryOp::Div => go!(|x: f32, y: f32| x / y),
                            BinaryOp::Max => go!(f32::max),
                            BinaryOp::Min => go!(f32::min),
                            BinaryOp::And | BinaryOp::Or => go!(binary_f(*op)),
                        }
                    } else {
                        return Err("binary f32 output from non-f32 operands".into());
                    }
                }
                DType::I32 | DType::Bool => {
                    let f = binary_i(*op);
                    let compute = |r: usize, j: usize| f(a.get_i((sa[r] as isize + j as isize * ia) as usize), b.get_i((sb[r] as isize + j as isize * ib) as usize));
                    if out.dtype == DType::I32 {
                        for_rows(&mut cast_slice_mut::<i32>(out_b)?[..n_out], row_len, |r, orow| orow.iter_mut().enumerate().for_each(|(j, v)| *v = compute(r, j)));
                    } else {
                        for_rows(&mut out_b[..n_out], row_len, |r, orow| orow.iter_mut().enumerate().for_each(|(j, v)| *v = (compute(r, j) != 0) as u8));
                    }
                }
                DType::Quant(_) => return Err("quantized output".into()),
            }
        }
        Kernel::Compare(op) => {
            let (la, lb) = (ins[0].1, ins[1].1);
            let (a, b) = (Src::new(ins[0].0, la)?, Src::new(ins[1].0, lb)?);
            let (sa, sb) = (row_starts(la), row_starts(lb));
            let ((_, ia), (_, ib)) = (inner(la), inner(lb));
            let is_int = la.dtype != DType::F32;
            for_rows(&mut out_b[..n_out], row_len, |r, orow| {
                for (j, v) in orow.iter_mut().enumerate() {
                    let (x, y) = ((sa[r] as isize + j as isize * ia) as usize, (sb[r] as isize + j as isize * ib) as usize);
                    *v = if is_int { compare(*op, a.get_i(x), b.get_i(y)) } else { compare(*op, a.get(x), b.get(y)) } as u8;
                }
            });
        }
        Kernel::Where => {
            let ls: Vec<&Layout> = ins.iter().map(|x| x.1).collect();
            let srcs: Vec<Src> = ins.iter().map(|(b, l)| Src::new(b, l)).collect::<Result<_, _>>()?;
            let starts: Vec<Vec<usize>> = ls.iter().map(|l| row_starts(l)).collect();
            let st: Vec<isize> = ls.iter().map(|l| inner(l).1).collect();
            let at = |k: usize, r: usize, j: usize| (starts[k][r] as isize + j as isize * st[k]) as usize;
            match out.dtype {
                DType::F32 => for_rows(&mut cast_slice_mut::<f32>(out_b)?[..n_out], row_len, |r, orow| {
                    orow.iter_mut().enumerate().for_each(|(j, v)| *v = if srcs[0].get_i(at(0, r, j)) != 0 { srcs[1].get(at(1, r, j)) } else { srcs[2].get(at(2, r, j)) })
                }),
                DType::I32 => for_rows(&mut cast_slice_mut::<i32>(out_b)?[..n_out], row_len, |r, orow| {
                    orow.iter_mut().enumerate().for_each(|(j, v)| *v = if srcs[0].get_i(at(0, r, j)) != 0 { srcs[1].get_i(at(1, r, j)) } else { srcs[2].get_i(at(2, r, j)) })
                }),
                DType::Bool => for_rows(&mut out_b[..n_out], row_len, |r, orow| {
                    orow.iter_mut()
                        .enumerate()
                        .for_each(|(j, v)| *v = if srcs[0].get_i(at(0, r, j)) != 0 { srcs[1].get_i(at(1, r, j)) as u8 } else { srcs[2].get_i(at(2, r, j)) as u8 })
                }),
                DType::Quant(_) => return Err("quantized output".into()),
            }
        }
        // An f32 view copied as it is (a copy, or a cast to its own type): the strided copy
        // kernel (merged dimensions, tiled transposes, repeated broadcasts).
        Kernel::Copy | Kernel::Cast if ins[0].1.dtype == DType::F32 && out.dtype == DType::F32 => {
            let l = ins[0].1;
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::copy_strided_f32(cast_slice::<f32>(ins[0].0)?, &l.shape, &l.strides, l.offset, o).map_err(|e| e.to_string())?;
        }
        Kernel::Cast | Kernel::Copy => {
            let l = ins[0].1;
            let a = Src::new(ins[0].0, l)?;
            let starts = row_starts(l);
            let (_, s) = inner(l);
            let at = |r: usize, j: usize| (starts[r] as isize + j as isize * s) as usize;
            match out.dtype {
                DType::F32 => {
                    let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
                    for_rows(o, row_len, |r, orow| orow.iter_mut().enumerate().for_each(|(j, v)| *v = a.get(at(r, j))));
                }
                DType::I32 => for_rows(&mut cast_slice_mut::<i32>(out_b)?[..n_out], row_len, |r, orow| orow.iter_mut().enumerate().for_each(|(j, v)| *v = a.get_i(at(r, j)))),
                DType::Bool => for_rows(&mut out_b[..n_out], row_len, |r, orow| orow.iter_mut().enumerate().for_each(|(j, v)| *v = (a.get_i(at(r, j)) != 0) as u8)),
                DType::Quant(_) => return Err("quantized output".into()),
            }
        }
        Kernel::Reduce { op, axis } => {
            let l = ins[0].1;
            let x = &cast_slice::<f32>(ins[0].0)?[l.offset..][..l.numel()];
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            let len = l.shape[*axis];
            let inner_n: usize = l.shape[axis + 1..].iter().product();
            if inner_n == 1 {
                tg_kernels::reduce_rows_f32(kernel_reduce(*op), x, len, o).map_err(|e| e.to_string())?;
            } else {
                let outer: usize = l.shape[..*axis].iter().product();
                for ob in 0..outer {
                    for p in 0..inner_n {
                        let it = (0..len).map(|r| x[(ob * len + r) * inner_n + p]);
                        o[ob * inner_n + p] = match op {
                            ReduceOp::Sum => it.sum(),
                            ReduceOp::Mean => it.sum::<f32>() / len as f32,
                            ReduceOp::Max => it.fold(f32::NEG_INFINITY, f32::max),
                        };
                    }
                }
            }
        }
        Kernel::MatMul { transpose_rhs } => {
            let (la, lb) = (ins[0].1, ins[1].1);
            let r = out.shape.len();
            let (a, b) = (cast_slice::<f32>(ins[0].0)?, cast_slice::<f32>(ins[1].0)?);
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], out.shape[r - 1]);
            let us = |x: isize| usize::try_from(x).map_err(|_| "matmul_f32: negative stride".to_string());
            // The kernel takes two batch dims; leading ones beyond that are looped here.
            let nb = r - 2;
            let lead = nb.saturating_sub(2);
            let bdim = |l: &Layout, i: usize| -> Result<(usize, usize), String> {
                // (size, stride) of kernel batch dim i (0 or 1), padding with size-1 dims.
                let pad = 2 - (nb - lead);
                if i < pad {
                    Ok((1, 0))
                } else {
                    let d = lead + i - pad;
                    Ok((l.shape[d], us(l.strides[d])?))
                }
            };
            let batch = [bdim(la, 0)?.0, bdim(la, 1)?.0];
            let n_lead: usize = out.shape[..lead].iter().product();
            let per = batch[0] * batch[1] * m * n;
            for li in 0..n_lead.max(1) {
                let (mut oa, mut ob) = (la.offset, lb.offset);
                let mut rem = li;
                for d in (0..lead).rev() {
                    let idx = rem % out.shape[d];
                    rem /= out.shape[d];
                    oa += idx * us(la.strides[d])?;
                    ob += idx * us(lb.strides[d])?;
                }
                let av = tg_kernels::MatView {
                    data: a,
                    offset: oa,
                    rows: m,
                    cols: k,
                    row_stride: us(la.strides[r - 2])?,
                    col_stride: us(la.strides[r - 1])?,
                    batch_strides: [bdim(la, 0)?.1, bdim(la, 1)?.1],
                };
                let bv = tg_kernels::MatView {
                    data: b,
                    offset: ob,
                    rows: lb.shape[r - 2],
                    cols: lb.shape[r - 1],
                    row_stride: us(lb.strides[r - 2])?,
                    col_stride: us(lb.strides[r - 1])?,
                    batch_strides: [bdim(lb, 0)?.1, bdim(lb, 1)?.1],
                };
                let bv = if *transpose_rhs { bv.t() } else { bv };
                tg_kernels::matmul_f32(batch, &av, &bv, &mut o[li * per..(li + 1) * per]).map_err(|e| e.to_string())?;
            }
        }
        Kernel::MatMulQuant { quantize_activations } | Kernel::MatMulQuantAdd { quantize_activations } => {
            let (la, lw) = (ins[0].1, ins[1].1);
            let ty = quant_or_f32(lw.dtype).ok_or("weight dtype")?;
            let (k, n) = (lw.shape[1], lw.shape[0]);
            let m = la.numel() / k.max(1);
            let x = &cast_slice::<f32>(ins[0].0)?[la.offset..][..m * k];
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            if *quantize_activations {
                tg_kernels::matmul_qt_q8(x, m, k, ins[1].0, ty, n, o).map_err(|e| e.to_string())?;
            } else {
                tg_kernels::matmul_qt(x, m, k, ins[1].0, ty, n, o).map_err(|e| e.to_string())?;
            }
            // The epilogue: the addend over the output the product just wrote (one product
            // over all rows: splitting rows would stream the weights once per split).
            if let Kernel::MatMulQuantAdd { .. } = kernel {
                let c = f32_in(ins, 2)?;
                if c.len() == n {
                    o.chunks_mut(n.max(1)).for_each(|row| row.iter_mut().zip(c).for_each(|(o, c)| *o += c));
                } else {
                    o.iter_mut().zip(c).for_each(|(o, c)| *o += c);
                }
            }
        }
        Kernel::Concat { axis } => {
            let outer: usize = out.shape[..*axis].iter().product();
            let o = out_b;
            let eb = out.elem_bytes();
            let total_chunk: usize = out.shape[*axis..].iter().product::<usize>() * eb;
            let mut at = 0usize;
            for (b, l) in ins {
                let chunk = l.shape[*axis..].iter().product::<usize>() * eb;
                let src = &b[l.offset * eb..];
                for ob in 0..outer {
                    o[ob * total_chunk + at..][..chunk].copy_from_slice(&src[ob * chunk..][..chunk]);
                }
                at += chunk;
            }
        }
        Kernel::StoreRows { axis } => {
            let (rb, rl) = ins[0];
            let (ob, ol) = ins[1];
            let off = *cast_slice::<i32>(ob)?.get(ol.offset).ok_or("store_rows: offset outside its buffer")?;
            let (ext, k) = (out.shape[*axis], rl.shape[*axis]);
            if off < 0 || off as usize + k > ext {
                return Err(format!("store_rows: rows {off}..{} past the state's {ext} along axis {axis}", off as i64 + k as i64));
            }
            let eb = out.elem_bytes();
            let inner = out.shape[axis + 1..].iter().product::<usize>() * eb;
            let outer: usize = out.shape[..*axis].iter().product();
            let src = rb.get(rl.offset * eb..(rl.offset + rl.numel()) * eb).ok_or("store_rows: rows outside their buffer")?;
            for a in 0..outer {
                let dst = (a * ext + off as usize) * inner;
                out_b.get_mut(dst..dst + k * inner).ok_or("store_rows: state buffer too small")?.copy_from_slice(&src[a * k * inner..(a + 1) * k * inner]);
            }
        }
        Kernel::Gather => {
            let (lt, li) = (ins[0].1, ins[1].1);
            let ty = quant_or_f32(lt.dtype).ok_or("table dtype")?;
            let ids = &cast_slice::<i32>(ins[1].0)?[li.offset..][..li.numel()];
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::get_rows(ins[0].0, ty, lt.shape[1], lt.shape[0], ids, o).map_err(|e| e.to_string())?;
        }
        Kernel::Conv { window, groups } => {
            let g = crate::window_2d(window, &ins[0].1.shape)?;
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            // Implicit GEMM: im2col panels per block of output positions, no whole scratch.
            tg_kernels::conv2d_implicit_f32(&g, *groups, out.shape[1], f32_in(ins, 0)?, f32_in(ins, 1)?, o).map_err(|e| e.to_string())?;
        }
        Kernel::ConvBias { window, groups, act } => {
            let g = crate::window_2d(window, &ins[0].1.shape)?;
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            let (x, w, b) = (f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?);
            if ins.len() > 3 {
                tg_kernels::conv2d_bias_residual_act_f32(&g, *groups, out.shape[1], x, w, b, f32_in(ins, 3)?, kernel_act(*act), o).map_err(|e| e.to_string())?;
            } else {
                tg_kernels::conv2d_bias_act_f32(&g, *groups, out.shape[1], x, w, b, kernel_act(*act), o).map_err(|e| e.to_string())?;
            }
        }
        Kernel::GroupNorm { groups, eps_bits, act } => {
            let s = &ins[0].1.shape;
            let shape = tg_kernels::GroupNormShape { n: s[0], c: s[1], plane: s[2..].iter().product(), groups: *groups };
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::group_norm(f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?, shape, f64::from_bits(*eps_bits) as f32, kernel_act(*act), o).map_err(|e| e.to_string())?;
        }
        Kernel::Im2Col { window, .. } => {
            let g = crate::window_2d(window, &ins[0].1.shape)?;
            tg_kernels::im2col_f32(&g, f32_in(ins, 0)?, &mut cast_slice_mut::<f32>(out_b)?[..n_out]).map_err(|e| e.to_string())?;
        }
        Kernel::Pool { kind, window } => {
            let g = crate::window_2d(window, &ins[0].1.shape)?;
            let kind = match kind {
                tg_ir::PoolKind::Max => tg_kernels::Pool::Max,
                tg_ir::PoolKind::Avg => tg_kernels::Pool::Avg,
                tg_ir::PoolKind::AvgPadded => tg_kernels::Pool::AvgPadded,
            };
            tg_kernels::pool2d_f32(&g, kind, f32_in(ins, 0)?, &mut cast_slice_mut::<f32>(out_b)?[..n_out]).map_err(|e| e.to_string())?;
        }
        Kernel::RmsNorm { eps_bits } => {
            let n = *out.shape.last().unwrap_or(&1);
            let (x, w) = (f32_in(ins, 0)?, f32_in(ins, 1)?);
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::rms_norm(x, w, n_out / n.max(1), n, f64::from_bits(*eps_bits) as f32, o).map_err(|e| e.to_string())?;
        }
        Kernel::RopeNeox => {
            let (seq, heads, d) = (out.shape[0], out.shape[1], out.shape[2]);
            let (x, c, sn) = (f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?);
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::rope_neox(x, c, sn, seq, heads, d, o).map_err(|e| e.to_string())?;
        }
        Kernel::AddRmsNorm { eps_bits } => {
            let n = *out.shape.last().unwrap_or(&1);
            let (a, b, w) = (f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?);
            let (sum, norm) = cast_slice_mut::<f32>(out_b)?[..n_out].split_at_mut(n_out / 2);
            tg_kernels::add_rms_norm(a, b, w, sum.len() / n.max(1), n, f64::from_bits(*eps_bits) as f32, sum, norm).map_err(|e| e.to_string())?;
        }
        Kernel::RmsNormRopeNeox { eps_bits } => {
            let (seq, heads, d) = (out.shape[0], out.shape[1], out.shape[2]);
            let (x, w, c, sn) = (f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?, f32_in(ins, 3)?);
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            tg_kernels::rms_norm_rope_neox(x, w, c, sn, seq, heads, d, f64::from_bits(*eps_bits) as f32, o).map_err(|e| e.to_string())?;
        }
        Kernel::GeluTanh => {
            let x = f32_in(ins, 0)?;
            tg_kernels::gelu_tanh(x, &mut cast_slice_mut::<f32>(out_b)?[..n_out]).map_err(|e| e.to_string())?;
        }
        Kernel::GatedGelu => {
            let (g, u) = (f32_in(ins, 0)?, f32_in(ins, 1)?);
            tg_kernels::gated_gelu_tanh(g, u, &mut cast_slice_mut::<f32>(out_b)?[..n_out]).map_err(|e| e.to_string())?;
        }
        Kernel::Softmax => {
            let n = *out.shape.last().unwrap_or(&1);
            let x = f32_in(ins, 0)?;
            tg_kernels::softmax_rows(x, n_out / n.max(1), n, &mut cast_slice_mut::<f32>(out_b)?[..n_out]).map_err(|e| e.to_string())?;
        }
        Kernel::Attention { scale_bits } | Kernel::AttentionSeqMajor { scale_bits } => {
            let q = &ins[0].1.shape;
            let (layout, (nkv, g, sq, d)) = match kernel {
                Kernel::Attention { .. } => (tg_kernels::AttnLayout::HeadMajor, (q[0], q[1], q[2], q[3])),
                _ => (tg_kernels::AttnLayout::SeqMajor, (q[1], q[2], q[0], q[3])),
            };
            let sk = ins[1].1.shape[2];
            let (qv, kv, vv) = (f32_in(ins, 0)?, f32_in(ins, 1)?, f32_in(ins, 2)?);
            let o = &mut cast_slice_mut::<f32>(out_b)?[..n_out];
            let scale = f64::from_bits(*scale_bits) as f32;
            let ml = ins[3].1;
            let r = if ml.is_contiguous() {
                tg_kernels::attention_layout_with(tg_kernels::isa(), layout, qv, kv, vv, f32_in(ins, 3)?, nkv, g, sq, sk, d, scale, o)
            } else {
                // A broadcast mask (the contract): one row, or one value made a row.
                let m = &cast_slice::<f32>(ins[3].0)?[ml.offset..];
                let row: Vec<f32> = if ml.strides.last() == Some(&0) { vec![m[0]; sk] } else { m[..sk].to_vec() };
                tg_kernels::attention_row_mask_with(tg_kernels::isa(), layout, qv, kv, vv, &row, nkv, g, sq, sk, d, scale, o)
            };
            r.map_err(|e| e.to_string())?;
        }
    }
    Ok(())
}

/// Operand `i` as its contiguous f32 elements.
fn f32_in<'a>(ins: &[(&'a [u8], &Layout)], i: usize) -> Result<&'a [f32], String> {
    let (b, l) = ins[i];
    Ok(&cast_slice::<f32>(b)?[l.offset..][..l.numel()])
}

fn kernel_unary(op: UnaryOp) -> tg_kernels::UnaryOp {
    match op {
        UnaryOp::Neg => tg_kernels::UnaryOp::Neg,
        UnaryOp::Exp => tg_kernels::UnaryOp::Exp,
        UnaryOp::Log => tg_kernels::UnaryOp::Log,
        UnaryOp::Tanh => tg_kernels::UnaryOp::Tanh,
        UnaryOp::Sqrt => tg_kernels::UnaryOp::Sqrt,
        UnaryOp::Rsqrt => tg_kernels::UnaryOp::Rsqrt,
        UnaryOp::Recip => tg_kernels::UnaryOp::Recip,
        UnaryOp::Sin => tg_kernels::UnaryOp::Sin,
        UnaryOp::Cos => tg_kernels::UnaryOp::Cos,
        UnaryOp::Abs => tg_kernels::UnaryOp::Abs,
        UnaryOp::Sigmoid => tg_kernels::UnaryOp::Sigmoid,
        UnaryOp::Silu => tg_kernels::UnaryOp::Silu,
        UnaryOp::Erf => tg_kernels::UnaryOp::Erf,
    }
}

fn kernel_act(a: tg_ir::Act) -> tg_kernels::Act {
    match a {
        tg_ir::Act::None => tg_kernels::Act::None,
        tg_ir::Act::Relu => tg_kernels::Act::Relu,
        tg_ir::Act::LeakyRelu { alpha_bits } => tg_kernels::Act::LeakyRelu(f64::from_bits(alpha_bits) as f32),
        tg_ir::Act::Silu => tg_kernels::Act::Silu,
        tg_ir::Act::LeakyReluFloor { alpha_bits, floor_bits } => tg_kernels::Act::LeakyReluFloor(f64::from_bits(alpha_bits) as f32, f64::from_bits(floor_bits) as f32),
    }
}

fn kernel_reduce(op: ReduceOp) -> tg_kernels::ReduceOp {
    match op {
        ReduceOp::Sum => tg_kernels::ReduceOp::Sum,
        ReduceOp::Mean => tg_kernels::ReduceOp::Mean,
        ReduceOp::Max => tg_kernels::ReduceOp::Max,
    }
}

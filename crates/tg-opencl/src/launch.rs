//! Argument marshaling: one function per plan kernel, setting the OpenCL kernel's arguments
//! (buffers, byte bases, element offsets, merged shapes and strides) and enqueueing it.
//! The caller has checked the contract ([`crate::supports`]) and the buffer bounds.

use opencl3::command_queue::CommandQueue;
use opencl3::memory::{Buffer, ClMem};
use opencl3::types::cl_mem;
use tg_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp};
use tg_quant::GgmlType;
use tg_runtime::{Kernel, Layout};

use crate::shape::{contiguous, merge, pack8};
use crate::supports::weight_type;
use crate::{ClArg, ClKernels};

/// Work-group size of `tg_attention` (one work item per query row and head).
const ATTENTION_GROUP: usize = 32;

/// One kernel argument.
enum A<'a> {
    /// A buffer.
    M(&'a Buffer<u8>),
    /// A raw buffer handle (the status buffer).
    Raw(cl_mem),
    /// `long`.
    L(i64),
    /// `int`.
    I(i32),
    /// `uint`.
    U(u32),
    /// `float`.
    F(f32),
    /// `long8`.
    V([i64; 8]),
    /// A `__local` buffer of this many bytes.
    Local(usize),
}

fn l(x: usize) -> A<'static> {
    A::L(x as i64)
}

/// Buffer, byte base and element offset of a tensor.
fn t<'a>(a: &'a ClArg<'_>) -> [A<'a>; 3] {
    [A::M(a.mem), l(a.byte_offset), l(a.layout.offset)]
}

fn dt(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::I32 => 1,
        _ => 2,
    }
}

/// The `act_f` code of an activation and its parameters (`window.cl`).
fn act_code(a: tg_ir::Act) -> (i32, f32, f32) {
    let f = |b: u64| f64::from_bits(b) as f32;
    match a {
        tg_ir::Act::None => (0, 0.0, 0.0),
        tg_ir::Act::Relu => (1, 0.0, 0.0),
        tg_ir::Act::LeakyRelu { alpha_bits } => (2, f(alpha_bits), 0.0),
        tg_ir::Act::Silu => (3, 0.0, 0.0),
        tg_ir::Act::LeakyReluFloor { alpha_bits, floor_bits } => (4, f(alpha_bits), f(floor_bits)),
    }
}

fn unary_code(op: UnaryOp) -> i32 {
    match op {
        UnaryOp::Neg => 0,
        UnaryOp::Exp => 1,
        UnaryOp::Log => 2,
        UnaryOp::Tanh => 3,
        UnaryOp::Sqrt => 4,
        UnaryOp::Rsqrt => 5,
        UnaryOp::Recip => 6,
        UnaryOp::Sin => 7,
        UnaryOp::Cos => 8,
        UnaryOp::Abs => 9,
        UnaryOp::Sigmoid => 10,
        UnaryOp::Silu => 11,
        UnaryOp::Erf => 12,
    }
}

fn binary_code(op: BinaryOp) -> i32 {
    match op {
        BinaryOp::Add => 0,
        BinaryOp::Sub => 1,
        BinaryOp::Mul => 2,
        BinaryOp::Div => 3,
        BinaryOp::Max => 4,
        BinaryOp::Min => 5,
        BinaryOp::And => 6,
        BinaryOp::Or => 7,
    }
}

fn cmp_code(op: CmpOp) -> i32 {
    match op {
        CmpOp::Eq => 0,
        CmpOp::Ne => 1,
        CmpOp::Lt => 2,
        CmpOp::Le => 3,
        CmpOp::Gt => 4,
        CmpOp::Ge => 5,
    }
}

fn prod(s: &[usize]) -> usize {
    s.iter().product()
}

impl ClKernels {
    /// Sets `args` on kernel `name` and enqueues it over `global` (rounded up to `local` if
    /// given). Nothing is enqueued for an empty range.
    fn run(&self, queue: &CommandQueue, name: &str, args: &[A], global: &[usize], local: Option<&[usize]>) -> Result<(), String> {
        if global.contains(&0) {
            return Ok(());
        }
        let global: Vec<usize> = match local {
            Some(loc) => global.iter().zip(loc).map(|(&g, &lo)| g.div_ceil(lo) * lo).collect(),
            None => global.to_vec(),
        };
        let k = self.kernels.get(name).ok_or_else(|| format!("kernel {name} missing from the program"))?;
        let k = k.lock().map_err(|_| format!("kernel {name}: lock poisoned"))?;
        for (i, a) in args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: each argument has the size and type of the kernel's parameter `i` (the
            // signatures in src/cl/*.cl); buffers outlive the enqueue (OpenCL retains them).
            let r = unsafe {
                match a {
                    A::M(b) => k.set_arg(i, &b.get()),
                    A::Raw(m) => k.set_arg(i, m),
                    A::L(v) => k.set_arg(i, v),
                    A::I(v) => k.set_arg(i, v),
                    A::U(v) => k.set_arg(i, v),
                    A::F(v) => k.set_arg(i, v),
                    A::V(v) => k.set_arg(i, v),
                    A::Local(n) => k.set_arg_local_buffer(i, (*n).max(4)),
                }
            };
            r.map_err(|e| format!("kernel {name}: argument {i}: {e}"))?;
        }
        let lp = local.map_or(std::ptr::null(), |l| l.as_ptr());
        // SAFETY: `global` and `local` have `global.len()` entries; arguments are set.
        unsafe { queue.enqueue_nd_range_kernel(k.get(), global.len() as u32, std::ptr::null(), global.as_ptr(), lp, &[]) }
            .map_err(|e| format!("kernel {name}: enqueue over {global:?}: {e}"))?;
        Ok(())
    }

    fn status_mem(&self) -> Result<cl_mem, String> {
        Ok(self.status.lock().map_err(|_| "status buffer lock poisoned".to_string())?.get())
    }

    /// Elementwise kernels: operands' (buffer, base, offset, strides) over the merged output
    /// shape, then the output, shape, rank and `n`, then `extra`.
    fn elementwise(&self, queue: &CommandQueue, name: &str, ins: &[ClArg], out: &ClArg, extra: &[A]) -> Result<(), String> {
        let cs = contiguous(&out.layout.shape);
        let mut all: Vec<&[isize]> = ins.iter().map(|a| a.layout.strides.as_slice()).collect();
        all.push(&cs);
        let m = merge(&out.layout.shape, &all);
        let mut args: Vec<A> = Vec::new();
        for (a, st) in ins.iter().zip(&m.strides) {
            args.extend(t(a));
            args.push(A::V(pack8(st, 0)));
        }
        args.extend(t(out));
        args.push(A::V(pack8(&m.shape, 1)));
        args.push(A::I(m.shape.len() as i32));
        let n = out.layout.numel();
        args.push(l(n));
        args.extend(extra.iter().map(|a| match a {
            A::I(v) => A::I(*v),
            A::U(v) => A::U(*v),
            A::L(v) => A::L(*v),
            A::F(v) => A::F(*v),
            _ => A::I(0),
        }));
        self.run(queue, name, &args, &[n], None)
    }
}

/// See [`ClKernels::enqueue`].
pub(crate) fn enqueue(ck: &ClKernels, queue: &CommandQueue, kernel: &Kernel, ins: &[ClArg], out: &ClArg) -> Result<(), String> {
    let ol: &Layout = out.layout;
    let n_out = ol.numel();
    match kernel {
        Kernel::Transfer { .. } => Err("a transfer is not a kernel: the executor runs it".into()),
        Kernel::Fill { bits } => {
            let v = f64::from_bits(*bits);
            let (pattern, esize) = match ol.dtype {
                DType::F32 => ((v as f32).to_bits(), 4),
                DType::I32 => ((v as i32) as u32, 4),
                _ => ((v != 0.0) as u32, 1),
            };
            let mut args = Vec::from(t(out));
            args.extend([l(n_out), A::U(pattern), A::I(esize)]);
            ck.run(queue, "tg_fill", &args, &[n_out], None)
        }
        Kernel::Iota { axis } => {
            let mut args = Vec::from(t(out));
            args.extend([l(n_out), l(prod(&ol.shape[axis + 1..])), l(ol.shape[*axis]), A::I(dt(ol.dtype))]);
            ck.run(queue, "tg_iota", &args, &[n_out], None)
        }
        Kernel::Unary(op) => ck.elementwise(queue, "tg_unary", ins, out, &[A::I(unary_code(*op))]),
        Kernel::Binary(op) => ck.elementwise(queue, "tg_binary", ins, out, &[A::I(binary_code(*op)), A::I(dt(ins[0].layout.dtype)), A::I(dt(ol.dtype))]),
        Kernel::Compare(op) => ck.elementwise(queue, "tg_compare", ins, out, &[A::I(cmp_code(*op)), A::I(dt(ins[0].layout.dtype))]),
        Kernel::Where => ck.elementwise(queue, "tg_where", ins, out, &[A::I(dt(ins[0].layout.dtype)), A::I(dt(ol.dtype))]),
        Kernel::Cast | Kernel::Copy => ck.elementwise(queue, "tg_cast", ins, out, &[A::I(dt(ins[0].layout.dtype)), A::I(dt(ol.dtype))]),
        Kernel::Concat { axis } => {
            let outer = prod(&ol.shape[..*axis]);
            let total = prod(&ol.shape[*axis..]);
            let esize = ol.elem_bytes();
            let mut at = 0usize;
            for a in ins {
                let chunk = prod(&a.layout.shape[*axis..]);
                let args = [
                    A::M(a.mem),
                    l(a.byte_offset),
                    l(a.layout.offset),
                    l(chunk),
                    A::M(out.mem),
                    l(out.byte_offset),
                    l(ol.offset + at),
                    l(total),
                    l(chunk),
                    l(outer),
                    A::I(esize as i32),
                ];
                ck.run(queue, "tg_copy_rows", &args, &[chunk, outer], None)?;
                at += chunk;
            }
            Ok(())
        }
        Kernel::StoreRows { axis } => {
            let (r, o) = (&ins[0], &ins[1]);
            let outer = prod(&ol.shape[..*axis]);
            let (k, ext) = (r.layout.shape[*axis], ol.shape[*axis]);
            let inner = prod(&ol.shape[axis + 1..]);
            let mut args = Vec::from(t(r));
            args.extend(t(o));
            args.extend(t(out));
            args.extend([l(outer), l(k), l(ext), l(inner), A::I(ol.elem_bytes() as i32), A::Raw(ck.status_mem()?)]);
            // At least one work-item, so the offset is checked even when there is nothing to copy.
            ck.run(queue, "tg_store_rows", &args, &[(k * inner).max(1), outer.max(1)], None)
        }
        Kernel::Reduce { op, axis } => {
            let x = &ins[0];
            let s = &x.layout.shape;
            let (outer, len, inner) = (prod(&s[..*axis]), s[*axis], prod(&s[axis + 1..]));
            let code = match op {
                ReduceOp::Sum => 0,
                ReduceOp::Mean => 1,
                ReduceOp::Max => 2,
            };
            let mut args = Vec::from(t(x));
            args.extend(t(out));
            args.extend([l(outer), l(len), l(inner), A::I(code)]);
            ck.run(queue, "tg_reduce", &args, &[inner, outer], None)
        }
        Kernel::MatMul { transpose_rhs } => {
            let (a, b) = (&ins[0], &ins[1]);
            let (la, lb) = (a.layout, b.layout);
            let r = ol.shape.len();
            let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], ol.shape[r - 1]);
            let (b_ks, b_ns) = if *transpose_rhs { (lb.strides[r - 1], lb.strides[r - 2]) } else { (lb.strides[r - 2], lb.strides[r - 1]) };
            let cs = contiguous(&ol.shape[..r - 2]);
            let bm = merge(&ol.shape[..r - 2], &[&la.strides[..r - 2], &lb.strides[..r - 2], &cs]);
            let nbatch = prod(&ol.shape[..r - 2]);
            let mut args = Vec::from(t(a));
            args.extend([A::L(la.strides[r - 2] as i64), A::L(la.strides[r - 1] as i64)]);
            args.extend(t(b));
            args.extend([A::L(b_ks as i64), A::L(b_ns as i64)]);
            args.extend(t(out));
            args.extend([l(m), l(n), l(k), A::I(bm.shape.len() as i32), A::V(pack8(&bm.shape, 1)), A::V(pack8(&bm.strides[0], 0)), A::V(pack8(&bm.strides[1], 0))]);
            ck.run(queue, "tg_matmul", &args, &[n, m, nbatch], None)
        }
        Kernel::MatMulQuant { quantize_activations } | Kernel::MatMulQuantAdd { quantize_activations } => {
            let (x, w) = (&ins[0], &ins[1]);
            let ty = weight_type(w.layout.dtype).ok_or("weight type")?;
            let (n, k) = (w.layout.shape[0], w.layout.shape[1]);
            let m = prod(&x.layout.shape[..x.layout.shape.len().saturating_sub(1)]);
            let row_bytes = ty.row_bytes(k).map_err(|e| e.to_string())?;
            let mut args = Vec::from(t(x));
            args.extend([A::M(w.mem), l(w.byte_offset), l(row_bytes), A::I(ty as u32 as i32)]);
            args.extend(t(out));
            match ins.get(2) {
                Some(c) => {
                    let row = c.layout.numel() == n && c.layout.shape.last() == Some(&n);
                    args.extend(t(c));
                    args.push(A::I(if row { 1 } else { 2 }));
                }
                None => args.extend([A::M(x.mem), l(0), l(0), A::I(0)]),
            }
            args.extend([l(m), l(n), l(k)]);
            let act = match ty {
                GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(0),
                GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Some(1),
                _ => None,
            };
            match (quantize_activations, act) {
                (true, Some(act)) => {
                    let bs = if act == 0 { 32 } else { 256 };
                    let nb = k / bs;
                    let bytes = |mt: usize| (mt * k, mt * nb * 4, if act == 1 { mt * nb * 32 } else { 4 });
                    let fits = |mt: usize| {
                        let (a, b, c) = bytes(mt);
                        (a + b + c + 1024) as u64 <= ck.local_mem
                    };
                    let mt = [4usize, 2, 1]
                        .into_iter()
                        .find(|&mt| fits(mt))
                        .ok_or_else(|| format!("k = {k}: one quantized activation row exceeds the device's {} bytes of local memory", ck.local_mem))?;
                    let (qb, db, sb) = bytes(mt);
                    args.extend([A::I(act), A::I(mt as i32), A::Local(qb), A::Local(db), A::Local(sb)]);
                    let lsz = ck.max_group.clamp(1, 64);
                    ck.run(queue, "tg_mmq_q8", &args, &[n, m.div_ceil(mt)], Some(&[lsz, 1]))
                }
                _ => ck.run(queue, "tg_mmq_f32", &args, &[n, m.div_ceil(4)], None),
            }
        }
        Kernel::Gather => {
            let (tb, ids) = (&ins[0], &ins[1]);
            let ty = weight_type(tb.layout.dtype).ok_or("table type")?;
            let (rows, k) = (tb.layout.shape[0], tb.layout.shape[1]);
            let row_bytes = ty.row_bytes(k).map_err(|e| e.to_string())?;
            let nids = ids.layout.numel();
            let mut args = vec![A::M(tb.mem), l(tb.byte_offset), l(row_bytes), A::I(ty as u32 as i32), l(rows)];
            args.extend(t(ids));
            args.extend(t(out));
            args.extend([l(k), l(nids), A::Raw(ck.status_mem()?)]);
            ck.run(queue, "tg_gather", &args, &[k.div_ceil(32), nids], None)
        }
        Kernel::RmsNorm { eps_bits } => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = n_out.checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(&ins[1]));
            args.extend(t(out));
            args.extend([l(rows), l(n), A::F(f64::from_bits(*eps_bits) as f32)]);
            ck.run(queue, "tg_rms_norm", &args, &[rows], None)
        }
        Kernel::AddRmsNorm { eps_bits } => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = (n_out / 2).checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(&ins[1]));
            args.extend(t(&ins[2]));
            args.extend(t(out));
            args.extend([l(rows), l(n), A::F(f64::from_bits(*eps_bits) as f32)]);
            ck.run(queue, "tg_add_rms_norm", &args, &[rows], None)
        }
        Kernel::RopeNeox | Kernel::RmsNormRopeNeox { .. } => {
            let (seq, heads, d) = (ol.shape[0], ol.shape[1], ol.shape[2]);
            let (w, cs, sn, norm, eps) = match kernel {
                Kernel::RmsNormRopeNeox { eps_bits } => (&ins[1], &ins[2], &ins[3], 1, f64::from_bits(*eps_bits) as f32),
                _ => (&ins[0], &ins[1], &ins[2], 0, 0.0),
            };
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(w));
            args.push(A::I(norm));
            args.extend(t(cs));
            args.extend(t(sn));
            args.extend(t(out));
            args.extend([l(seq), l(heads), l(d), A::F(eps)]);
            ck.run(queue, "tg_rope_neox", &args, &[heads, seq], None)
        }
        Kernel::GeluTanh | Kernel::GatedGelu => {
            let gated = matches!(kernel, Kernel::GatedGelu);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(if gated { &ins[1] } else { &ins[0] }));
            args.push(A::I(gated as i32));
            args.extend(t(out));
            args.push(l(n_out));
            ck.run(queue, "tg_gelu", &args, &[n_out], None)
        }
        Kernel::GroupNorm { groups, eps_bits, act } => {
            let s = &ol.shape;
            let (code, alpha, floor) = act_code(*act);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(&ins[1]));
            args.extend(t(&ins[2]));
            args.extend(t(out));
            // γ and β per channel ([C, 1, ..]) or per image and channel ([N, C, 1, ..]).
            let affine_stride = if ins[1].layout.shape.len() == s.len() { s[1] } else { 0 };
            args.extend([l(s[0]), l(s[1]), l(s[2..].iter().product()), l(*groups), l(affine_stride), A::F(f64::from_bits(*eps_bits) as f32), A::I(code), A::F(alpha), A::F(floor)]);
            ck.run(queue, "tg_group_norm", &args, &[s[0] * groups], None)
        }
        Kernel::Conv { window, .. } | Kernel::Im2Col { window, .. } | Kernel::Pool { window, .. } | Kernel::ConvBias { window, .. } => {
            let g = tg_runtime::window_2d(window, &ins[0].layout.shape)?;
            let [oh, ow] = g.out_hw().map_err(|e| e.to_string())?;
            let geom = [l(g.size[0]), l(g.size[1]), l(g.stride[0]), l(g.stride[1]), l(g.dilation[0]), l(g.dilation[1]), l(g.pad_begin[0]), l(g.pad_begin[1])];
            let mut args = Vec::from(t(&ins[0]));
            match kernel {
                Kernel::Conv { groups, .. } | Kernel::ConvBias { groups, .. } => {
                    args.extend(t(&ins[1]));
                    match kernel {
                        Kernel::ConvBias { act, .. } => {
                            let (code, alpha, floor) = act_code(*act);
                            args.extend(t(&ins[2]));
                            args.extend([A::I(1), A::I(code), A::F(alpha), A::F(floor)]);
                        }
                        // No bias: the input stands in for the unread bias buffer.
                        _ => {
                            args.extend(t(&ins[0]));
                            args.extend([A::I(0), A::I(0), A::F(0.0), A::F(0.0)]);
                        }
                    }
                    // The residual of a 4-operand ConvBias; else the input stands in, unread.
                    match ins.get(3) {
                        Some(r) if matches!(kernel, Kernel::ConvBias { .. }) => {
                            args.extend(t(r));
                            args.push(A::I(1));
                        }
                        _ => {
                            args.extend(t(&ins[0]));
                            args.push(A::I(0));
                        }
                    }
                    args.extend(t(out));
                    args.extend([l(g.n), l(g.c), l(g.in_hw[0]), l(g.in_hw[1]), l(ol.shape[1]), l(*groups), l(oh), l(ow)]);
                    args.extend(geom);
                    ck.run(queue, "tg_conv", &args, &[n_out], None)
                }
                Kernel::Im2Col { .. } => {
                    args.extend(t(out));
                    args.extend([l(g.n), l(g.c), l(g.in_hw[0]), l(g.in_hw[1]), l(oh), l(ow)]);
                    args.extend(geom);
                    ck.run(queue, "tg_im2col", &args, &[n_out], None)
                }
                _ => {
                    let kind = match kernel {
                        Kernel::Pool { kind: tg_ir::PoolKind::Max, .. } => 0,
                        Kernel::Pool { kind: tg_ir::PoolKind::Avg, .. } => 1,
                        _ => 2,
                    };
                    args.extend(t(out));
                    args.extend([l(g.n * g.c), l(g.in_hw[0]), l(g.in_hw[1]), l(oh), l(ow)]);
                    args.extend(geom);
                    args.push(A::I(kind));
                    ck.run(queue, "tg_pool", &args, &[n_out], None)
                }
            }
        }
        Kernel::Softmax => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = n_out.checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(out));
            args.extend([l(rows), l(n)]);
            ck.run(queue, "tg_softmax", &args, &[rows], None)
        }
        Kernel::Attention { scale_bits } | Kernel::AttentionSeqMajor { scale_bits } => {
            let seq_major = matches!(kernel, Kernel::AttentionSeqMajor { .. });
            let q = &ins[0].layout.shape;
            let (nkv, g, sq, d) = if seq_major { (q[1], q[2], q[0], q[3]) } else { (q[0], q[1], q[2], q[3]) };
            let sk = ins[1].layout.shape[2];
            let mut args = Vec::new();
            for a in &ins[..4] {
                args.extend(t(a));
            }
            args.extend(t(out));
            args.extend([l(nkv), l(g), l(sq), l(sk), l(d), A::F(f64::from_bits(*scale_bits) as f32), A::I(seq_major as i32)]);
            // An explicit work-group: each work item holds two `ATT_MAXD` float arrays, and
            // with no local size PoCL picks groups of thousands of items for long sequences,
            // whose private arrays overflow its worker threads' stacks (a crash at sq·g = 12288).
            ck.run(queue, "tg_attention", &args, &[sq * g, nkv], Some(&[ATTENTION_GROUP, 1]))
        }
    }
}

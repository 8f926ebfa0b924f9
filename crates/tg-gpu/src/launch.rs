//! From a plan step to kernel launches: which kernels of the shared program run, with which
//! arguments (in parameter order) on which grid. Devices marshal the [`KArg`]s for their API;
//! nothing here knows OpenCL or CUDA. The caller has checked the contract ([`crate::supports`])
//! and the buffer bounds.

use tg_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp};
use tg_quant::GgmlType;
use tg_runtime::{Kernel, Layout};

use crate::shape::{contiguous, merge, pack8};
use crate::supports::weight_type;
use crate::Tuning;

/// Most work-groups along any grid axis (CUDA's limit on axes 1 and 2); kernels loop over
/// the rest (grid-stride).
pub const MAX_GROUPS: usize = 65_535;

/// Activation rows up to which a quantized product runs as matrix–vector (`MV_MAXM`).
const MV_MAXM: usize = 8;
/// Work-items of the attention kernel's work-groups (`ATT_L`).
const ATT_L: usize = 64;
/// Query rows per attention work-group (`ATT_G`).
const ATT_G: usize = 8;

/// One operand or result: the device's buffer, where the tensor's buffer starts in it, and
/// the tensor's layout (offset in elements from `byte_offset`).
pub struct Tensor<'a, M> {
    /// The device's buffer (an arena, a weight).
    pub mem: &'a M,
    /// Byte offset of the tensor's storage inside `mem`.
    pub byte_offset: usize,
    /// Layout of the tensor in its storage.
    pub layout: &'a Layout,
}

/// One kernel argument, in parameter order.
#[derive(Debug)]
pub enum KArg<'a, M> {
    /// A buffer (its byte base follows as an `I64`).
    Buf(&'a M),
    /// The device's status words (4 × i32, zero while no kernel failed).
    Status,
    /// The device's scratch buffer, at least [`Launches::scratch_bytes`] long; it carries data
    /// from one launch of a step to the next.
    Scratch,
    /// `int`.
    I32(i32),
    /// `uint`.
    U32(u32),
    /// `long`.
    I64(i64),
    /// `float`.
    F32(f32),
    /// Eight `long`s by value (`dims8`: OpenCL `long8`, a 64-byte struct on CUDA).
    Dims([i64; 8]),
}

/// One launch: a kernel of the program, its arguments, `groups` work-groups along three grid
/// axes, of `group_size` work-items each (1-D work-groups).
#[derive(Debug)]
pub struct Launch<'a, M> {
    /// Kernel function name (one of [`crate::KERNEL_NAMES`]).
    pub kernel: &'static str,
    /// Arguments in parameter order.
    pub args: Vec<KArg<'a, M>>,
    /// Work-groups along grid axes 0, 1, 2 (each in `1..=MAX_GROUPS`).
    pub groups: [usize; 3],
    /// Work-items per work-group.
    pub group_size: usize,
}

/// The launches of one plan step, in order.
#[derive(Debug)]
pub struct Launches<'a, M> {
    /// Launches to enqueue one after the other on one in-order queue.
    pub launches: Vec<Launch<'a, M>>,
    /// Bytes of scratch memory the launches share (0: none).
    pub scratch_bytes: usize,
}

impl<M> Clone for KArg<'_, M> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<M> Copy for KArg<'_, M> {}

fn l<'a, M>(x: usize) -> KArg<'a, M> {
    KArg::I64(x as i64)
}

/// Buffer, byte base and element offset of a tensor.
fn t<'a, M>(a: &Tensor<'a, M>) -> [KArg<'a, M>; 3] {
    [KArg::Buf(a.mem), l(a.byte_offset), l(a.layout.offset)]
}

fn dt(d: DType) -> i32 {
    match d {
        DType::F32 => 0,
        DType::I32 => 1,
        _ => 2,
    }
}

/// The `act_f` code of an activation and its parameters (`fused.gpu`).
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

/// `n` work-items' worth of groups of `size`, at least one, at most [`MAX_GROUPS`].
fn groups_for(n: usize, size: usize) -> usize {
    n.div_ceil(size).clamp(1, MAX_GROUPS)
}

/// A work-group size for rows of `n` elements: the tuned size, or the power of two ≥ n when
/// that is smaller (at least 32).
fn row_group(n: usize, tuning: &Tuning) -> usize {
    n.next_power_of_two().clamp(32, tuning.row_group.max(32))
}

struct Builder<'a, M> {
    launches: Vec<Launch<'a, M>>,
    scratch_bytes: usize,
}

impl<'a, M> Builder<'a, M> {
    fn push(&mut self, kernel: &'static str, args: Vec<KArg<'a, M>>, groups: [usize; 3], group_size: usize) {
        let groups = groups.map(|g| g.clamp(1, MAX_GROUPS));
        self.launches.push(Launch { kernel, args, groups, group_size });
    }

    /// A grid-stride launch over `n` elements along axis 0.
    fn flat(&mut self, kernel: &'static str, args: Vec<KArg<'a, M>>, n: usize, tuning: &Tuning) {
        let g = tuning.elementwise_group;
        self.push(kernel, args, [groups_for(n, g), 1, 1], g);
    }

    /// Elementwise kernels: operands' (buffer, base, offset, strides) over the merged output
    /// shape, then the output, shape, rank and `n`, then `extra`.
    fn elementwise(&mut self, kernel: &'static str, ins: &[Tensor<'a, M>], out: &Tensor<'a, M>, extra: &[KArg<'a, M>], tuning: &Tuning) {
        let cs = contiguous(&out.layout.shape);
        let mut all: Vec<&[isize]> = ins.iter().map(|a| a.layout.strides.as_slice()).collect();
        all.push(&cs);
        let m = merge(&out.layout.shape, &all);
        let mut args: Vec<KArg<M>> = Vec::new();
        for (a, st) in ins.iter().zip(&m.strides) {
            args.extend(t(a));
            args.push(KArg::Dims(pack8(st, 0)));
        }
        args.extend(t(out));
        args.push(KArg::Dims(pack8(&m.shape, 1)));
        args.push(KArg::I32(m.shape.len() as i32));
        let n = out.layout.numel();
        args.push(l(n));
        args.extend_from_slice(extra);
        self.flat(kernel, args, n, tuning);
    }
}

/// The launches that run `kernel` reading `ins` and writing `out` (see the module docs).
/// Errors are for launches the contract accepts but this plan cannot express (none today
/// beyond malformed windows).
pub fn plan<'a, M>(kernel: &Kernel, ins: &[Tensor<'a, M>], out: &Tensor<'a, M>, tuning: &Tuning) -> Result<Launches<'a, M>, String> {
    let mut b = Builder { launches: Vec::new(), scratch_bytes: 0 };
    let ol: &Layout = out.layout;
    let n_out = ol.numel();
    match kernel {
        Kernel::Transfer { .. } => return Err("a transfer is not a kernel: the executor runs it".into()),
        Kernel::Fill { bits } => {
            let v = f64::from_bits(*bits);
            let (pattern, esize) = match ol.dtype {
                DType::F32 => ((v as f32).to_bits(), 4),
                DType::I32 => ((v as i32) as u32, 4),
                _ => ((v != 0.0) as u32, 1),
            };
            let mut args = Vec::from(t(out));
            args.extend([l(n_out), KArg::U32(pattern), KArg::I32(esize)]);
            b.flat("tg_fill", args, n_out, tuning);
        }
        Kernel::Iota { axis } => {
            let mut args = Vec::from(t(out));
            args.extend([l(n_out), l(prod(&ol.shape[axis + 1..])), l(ol.shape[*axis]), KArg::I32(dt(ol.dtype))]);
            b.flat("tg_iota", args, n_out, tuning);
        }
        Kernel::Unary(op) => b.elementwise("tg_unary", ins, out, &[KArg::I32(unary_code(*op))], tuning),
        Kernel::Binary(op) => b.elementwise("tg_binary", ins, out, &[KArg::I32(binary_code(*op)), KArg::I32(dt(ins[0].layout.dtype)), KArg::I32(dt(ol.dtype))], tuning),
        Kernel::Compare(op) => b.elementwise("tg_compare", ins, out, &[KArg::I32(cmp_code(*op)), KArg::I32(dt(ins[0].layout.dtype))], tuning),
        Kernel::Where => b.elementwise("tg_where", ins, out, &[KArg::I32(dt(ins[0].layout.dtype)), KArg::I32(dt(ol.dtype))], tuning),
        Kernel::Cast | Kernel::Copy => b.elementwise("tg_cast", ins, out, &[KArg::I32(dt(ins[0].layout.dtype)), KArg::I32(dt(ol.dtype))], tuning),
        Kernel::Concat { axis } => {
            let outer = prod(&ol.shape[..*axis]);
            let total = prod(&ol.shape[*axis..]);
            let esize = ol.elem_bytes();
            let mut at = 0usize;
            for a in ins {
                let chunk = prod(&a.layout.shape[*axis..]);
                let args = vec![
                    KArg::Buf(a.mem),
                    l(a.byte_offset),
                    l(a.layout.offset),
                    l(chunk),
                    KArg::Buf(out.mem),
                    l(out.byte_offset),
                    l(ol.offset + at),
                    l(total),
                    l(chunk),
                    l(outer),
                    KArg::I32(esize as i32),
                ];
                if chunk * outer > 0 {
                    b.flat("tg_copy_rows", args, chunk * outer, tuning);
                }
                at += chunk;
            }
        }
        Kernel::StoreRows { axis } => {
            let (r, o) = (&ins[0], &ins[1]);
            let outer = prod(&ol.shape[..*axis]);
            let (k, ext) = (r.layout.shape[*axis], ol.shape[*axis]);
            let inner = prod(&ol.shape[axis + 1..]);
            let mut args = Vec::from(t(r));
            args.extend(t(o));
            args.extend(t(out));
            args.extend([l(outer), l(k), l(ext), l(inner), KArg::I32(ol.elem_bytes() as i32), KArg::Status]);
            // At least one work-group, so the offset is checked even with nothing to copy.
            b.flat("tg_store_rows", args, (outer * k * inner).max(1), tuning);
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
            if inner == 1 {
                args.extend([l(outer), l(len), KArg::I32(code)]);
                b.push("tg_reduce_rows", args, [outer, 1, 1], row_group(len, tuning));
            } else {
                args.extend([l(outer), l(len), l(inner), KArg::I32(code)]);
                b.flat("tg_reduce_cols", args, outer * inner, tuning);
            }
        }
        Kernel::MatMul { transpose_rhs } => {
            let (a, bb) = (&ins[0], &ins[1]);
            let (la, lb) = (a.layout, bb.layout);
            let r = ol.shape.len();
            let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], ol.shape[r - 1]);
            let (b_ks, b_ns) = if *transpose_rhs { (lb.strides[r - 1], lb.strides[r - 2]) } else { (lb.strides[r - 2], lb.strides[r - 1]) };
            let cs = contiguous(&ol.shape[..r - 2]);
            let bm = merge(&ol.shape[..r - 2], &[&la.strides[..r - 2], &lb.strides[..r - 2], &cs]);
            let nbatch = prod(&ol.shape[..r - 2]);
            let mut args = Vec::from(t(a));
            args.extend([KArg::I64(la.strides[r - 2] as i64), KArg::I64(la.strides[r - 1] as i64)]);
            args.extend(t(bb));
            args.extend([KArg::I64(b_ks as i64), KArg::I64(b_ns as i64)]);
            args.extend(t(out));
            args.extend([
                l(m),
                l(n),
                l(k),
                KArg::I32(bm.shape.len() as i32),
                KArg::Dims(pack8(&bm.shape, 1)),
                KArg::Dims(pack8(&bm.strides[0], 0)),
                KArg::Dims(pack8(&bm.strides[1], 0)),
            ]);
            let (name, tb) = if m.min(n) >= tuning.tile64_min { ("tg_matmul_t64", 64) } else { ("tg_matmul_t32", 32) };
            if m * n * nbatch > 0 {
                b.push(name, args, [n.div_ceil(tb), m.div_ceil(tb), nbatch], 256);
            }
        }
        Kernel::MatMulQuant { quantize_activations } | Kernel::MatMulQuantAdd { quantize_activations } => {
            let (x, w) = (&ins[0], &ins[1]);
            let ty = weight_type(w.layout.dtype).ok_or("weight type")?;
            let (n, k) = (w.layout.shape[0], w.layout.shape[1]);
            let m = prod(&x.layout.shape[..x.layout.shape.len().saturating_sub(1)]);
            let row_bytes = ty.row_bytes(k).map_err(|e| e.to_string())?;
            // q8 numerics: the activation rows quantized into scratch first (Q8_0 blocks for
            // the 32-element formats, Q8_K for the K-quants); plain formats stay f32.
            let act_block = match (quantize_activations, ty) {
                (true, GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0) => Some(32usize),
                (true, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K) => Some(256),
                _ => None,
            };
            let (xmode, xbs, doff) = match act_block {
                Some(bs) if m * k > 0 => {
                    let doff = (m * k).div_ceil(16) * 16;
                    b.scratch_bytes = doff + m * (k / bs) * 4;
                    let nblocks = m * k / bs;
                    let mut qa = Vec::from(t(x));
                    if tuning.mv_lanes == 1 {
                        qa.extend([l(nblocks), KArg::I32(bs as i32), KArg::Scratch, l(doff)]);
                        b.flat("tg_quantize_rows", qa, nblocks, tuning);
                    } else {
                        qa.extend([l(nblocks), KArg::Scratch, l(doff)]);
                        b.push(if bs == 32 { "tg_quantize_q8_0" } else { "tg_quantize_q8_k" }, qa, [nblocks, 1, 1], 32);
                    }
                    (1, bs, doff)
                }
                _ => (0, 32, 0),
            };
            let mut args = Vec::from(t(x));
            // Without q8 the scratch argument is never read: the activations stand in.
            if xmode == 1 {
                args.push(KArg::Scratch);
            } else {
                args.push(KArg::Buf(x.mem));
            }
            args.extend([l(doff), KArg::I32(xmode), KArg::I32(xbs.trailing_zeros() as i32)]);
            args.extend([KArg::Buf(w.mem), l(w.byte_offset), l(row_bytes), KArg::I32(ty as u32 as i32)]);
            args.extend(t(out));
            match ins.get(2) {
                Some(c) => {
                    let row = c.layout.numel() == n && c.layout.shape.last() == Some(&n);
                    args.extend(t(c));
                    args.push(KArg::I32(if row { 1 } else { 2 }));
                }
                None => args.extend([KArg::Buf(x.mem), l(0), l(0), KArg::I32(0)]),
            }
            args.extend([l(m), l(n), l(k)]);
            if m * n == 0 {
            } else if m <= MV_MAXM && tuning.mv_lanes == 1 {
                b.flat("tg_mmv_rows", args, n, tuning);
            } else if m <= MV_MAXM {
                let rows = tuning.mv_rows.clamp(1, 8);
                b.push("tg_mmv", args, [n.div_ceil(rows), 1, 1], 32 * rows);
            } else {
                let (name, tb) = if m.min(n) >= tuning.tile64_min { ("tg_mmq_t64", 64) } else { ("tg_mmq_t32", 32) };
                b.push(name, args, [n.div_ceil(tb), m.div_ceil(tb), 1], 256);
            }
        }
        Kernel::Gather => {
            let (tb, ids) = (&ins[0], &ins[1]);
            let ty = weight_type(tb.layout.dtype).ok_or("table type")?;
            let (rows, k) = (tb.layout.shape[0], tb.layout.shape[1]);
            let row_bytes = ty.row_bytes(k).map_err(|e| e.to_string())?;
            let nids = ids.layout.numel();
            let mut args = vec![KArg::Buf(tb.mem), l(tb.byte_offset), l(row_bytes), KArg::I32(ty as u32 as i32), l(rows)];
            args.extend(t(ids));
            args.extend(t(out));
            args.extend([l(k), l(nids), KArg::Status]);
            if nids > 0 {
                b.push("tg_gather", args, [nids, 1, 1], row_group(k.div_ceil(8), tuning).min(128));
            }
        }
        Kernel::RmsNorm { eps_bits } => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = n_out.checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(&ins[1]));
            args.extend(t(out));
            args.extend([l(rows), l(n), KArg::F32(f64::from_bits(*eps_bits) as f32)]);
            if rows > 0 {
                b.push("tg_rms_norm", args, [rows, 1, 1], row_group(n, tuning));
            }
        }
        Kernel::AddRmsNorm { eps_bits } => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = (n_out / 2).checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(&ins[1]));
            args.extend(t(&ins[2]));
            args.extend(t(out));
            args.extend([l(rows), l(n), KArg::F32(f64::from_bits(*eps_bits) as f32)]);
            if rows > 0 {
                b.push("tg_add_rms_norm", args, [rows, 1, 1], row_group(n, tuning));
            }
        }
        Kernel::RopeNeox | Kernel::RmsNormRopeNeox { .. } => {
            let (seq, heads, d) = (ol.shape[0], ol.shape[1], ol.shape[2]);
            let (w, cs, sn, norm, eps) = match kernel {
                Kernel::RmsNormRopeNeox { eps_bits } => (&ins[1], &ins[2], &ins[3], 1, f64::from_bits(*eps_bits) as f32),
                _ => (&ins[0], &ins[1], &ins[2], 0, 0.0),
            };
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(w));
            args.push(KArg::I32(norm));
            args.extend(t(cs));
            args.extend(t(sn));
            args.extend(t(out));
            args.extend([l(seq), l(heads), l(d), KArg::F32(eps)]);
            if seq * heads > 0 {
                b.push("tg_rope_neox", args, [seq * heads, 1, 1], row_group(d, tuning));
            }
        }
        Kernel::GeluTanh | Kernel::GatedGelu => {
            let gated = matches!(kernel, Kernel::GatedGelu);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(if gated { &ins[1] } else { &ins[0] }));
            args.push(KArg::I32(gated as i32));
            args.extend(t(out));
            args.push(l(n_out));
            b.flat("tg_gelu", args, n_out, tuning);
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
            let plane: usize = s[2..].iter().product();
            args.extend([
                l(s[0]),
                l(s[1]),
                l(plane),
                l(*groups),
                l(affine_stride),
                KArg::F32(f64::from_bits(*eps_bits) as f32),
                KArg::I32(code),
                KArg::F32(alpha),
                KArg::F32(floor),
            ]);
            let len = (s[1] / (*groups).max(1)) * plane;
            if s[0] * groups > 0 {
                b.push("tg_group_norm", args, [s[0] * groups, 1, 1], row_group(len, tuning));
            }
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
                            args.extend([KArg::I32(1), KArg::I32(code), KArg::F32(alpha), KArg::F32(floor)]);
                        }
                        // No bias: the input stands in for the unread bias buffer.
                        _ => {
                            args.extend(t(&ins[0]));
                            args.extend([KArg::I32(0), KArg::I32(0), KArg::F32(0.0), KArg::F32(0.0)]);
                        }
                    }
                    // The residual of a 4-operand ConvBias; else the input stands in, unread.
                    match ins.get(3) {
                        Some(r) if matches!(kernel, Kernel::ConvBias { .. }) => {
                            args.extend(t(r));
                            args.push(KArg::I32(1));
                        }
                        _ => {
                            args.extend(t(&ins[0]));
                            args.push(KArg::I32(0));
                        }
                    }
                    let m = ol.shape[1];
                    args.extend(t(out));
                    args.extend([l(g.n), l(g.c), l(g.in_hw[0]), l(g.in_hw[1]), l(m), l(*groups), l(oh), l(ow)]);
                    args.extend(geom);
                    let mg = m / (*groups).max(1);
                    let p = oh * ow;
                    if n_out == 0 {
                    } else if mg >= tuning.conv_tiled_min_channels {
                        let (name, tb) = if mg.min(p) >= tuning.tile64_min { ("tg_conv_t64", 64) } else { ("tg_conv_t32", 32) };
                        b.push(name, args, [p.div_ceil(tb), mg.div_ceil(tb), g.n * groups], 256);
                    } else {
                        b.flat("tg_conv", args, n_out, tuning);
                    }
                }
                Kernel::Im2Col { .. } => {
                    args.extend(t(out));
                    args.extend([l(g.n), l(g.c), l(g.in_hw[0]), l(g.in_hw[1]), l(oh), l(ow)]);
                    args.extend(geom);
                    b.flat("tg_im2col", args, n_out, tuning);
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
                    args.push(KArg::I32(kind));
                    b.flat("tg_pool", args, n_out, tuning);
                }
            }
        }
        Kernel::Softmax => {
            let n = *ol.shape.last().unwrap_or(&1);
            let rows = n_out.checked_div(n).unwrap_or(0);
            let mut args = Vec::from(t(&ins[0]));
            args.extend(t(out));
            args.extend([l(rows), l(n)]);
            if rows > 0 {
                b.push("tg_softmax", args, [rows, 1, 1], row_group(n, tuning));
            }
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
            // The mask's row and column strides (0 where it is broadcast).
            let ms = &ins[3].layout.strides;
            let mcs = ms.last().copied().unwrap_or(0);
            let mrs = if ms.len() >= 2 && sq > 1 { ms[ms.len() - 2] } else { 0 };
            args.extend([KArg::I64(mrs as i64), KArg::I64(mcs as i64)]);
            args.extend(t(out));
            args.extend([l(nkv), l(g), l(sq), l(sk), l(d), KArg::F32(f64::from_bits(*scale_bits) as f32), KArg::I32(seq_major as i32)]);
            let items = sq * g.div_ceil(ATT_G);
            // Too few work-groups for a long context: split the keys (see attention.gpu).
            let split = tuning.attention_split_keys.max(16).next_multiple_of(16);
            let nsplit = if items * nkv < tuning.attention_min_groups && sk > split { sk.div_ceil(split).min(MAX_GROUPS) } else { 1 };
            let split_len = sk.div_ceil(nsplit).next_multiple_of(16).max(16);
            if nsplit > 1 {
                b.scratch_bytes = nsplit * nkv * sq * g * (d + 2) * 4;
                args.extend([l(nsplit), l(split_len), KArg::Scratch]);
            } else {
                args.extend([l(1), l(sk.max(1)), KArg::Buf(out.mem)]);
            }
            if n_out > 0 {
                b.push("tg_attention", args, [items, nkv, nsplit], ATT_L);
                if nsplit > 1 {
                    let ca = vec![KArg::Scratch, l(nsplit), l(nkv), l(g), l(sq), l(d), KArg::I32(seq_major as i32), KArg::Buf(out.mem), l(out.byte_offset), l(ol.offset)];
                    b.push("tg_attention_combine", ca, [nkv * sq * g, 1, 1], row_group(d, tuning).min(256));
                }
            }
        }
    }
    Ok(Launches { launches: b.launches, scratch_bytes: b.scratch_bytes })
}

//! Kernel registries: for each device, the kernels it has and the contract of each — the
//! operand dtypes and layouts it accepts — plus the work formula every cost model uses.
//!
//! This is the one place a kernel's contract is written. Lowering asks it whether a kernel
//! runs on the operands' layouts (and copies views otherwise), the cost models key and size
//! kernels with [`select`] and [`work`], the profiler measures what it accepts, the fusion
//! rules offer a fused op only where a target device's registry implements it, and the plan
//! validator checks every step against it.

use crate::{Kernel, Layout};
use tg_ir::{DType, Op, UnaryOp};

/// The kernel families, as [`Kernel::family`] names them. A registry entry implements one.
pub const FAMILIES: &[&str] = &[
    "fill",
    "iota",
    "unary",
    "binary",
    "compare",
    "where",
    "cast",
    "reduce",
    "matmul_f32",
    "matmul_quant",
    "matmul_quant_add",
    "copy",
    "concat",
    "gather",
    "store_rows",
    "conv",
    "im2col",
    "pool",
    "conv_bias",
    "group_norm",
    "rms_norm",
    "rope_neox",
    "rms_norm_rope_neox",
    "gelu_tanh",
    "gated_gelu",
    "softmax",
    "attention",
    "attention_seq_major",
    "add_rms_norm",
];

impl Kernel {
    /// The family of this kernel (its variant, without attributes): one of [`FAMILIES`].
    pub fn family(&self) -> &'static str {
        match self {
            Kernel::Fill { .. } => "fill",
            Kernel::Iota { .. } => "iota",
            Kernel::Unary(_) => "unary",
            Kernel::Binary(_) => "binary",
            Kernel::Compare(_) => "compare",
            Kernel::Where => "where",
            Kernel::Cast => "cast",
            Kernel::Reduce { .. } => "reduce",
            Kernel::MatMul { .. } => "matmul_f32",
            Kernel::MatMulQuant { .. } => "matmul_quant",
            Kernel::MatMulQuantAdd { .. } => "matmul_quant_add",
            Kernel::Copy => "copy",
            Kernel::Concat { .. } => "concat",
            Kernel::Gather => "gather",
            Kernel::StoreRows { .. } => "store_rows",
            Kernel::RmsNorm { .. } => "rms_norm",
            Kernel::RopeNeox => "rope_neox",
            Kernel::RmsNormRopeNeox { .. } => "rms_norm_rope_neox",
            Kernel::GeluTanh => "gelu_tanh",
            Kernel::GatedGelu => "gated_gelu",
            Kernel::Softmax => "softmax",
            Kernel::Conv { .. } => "conv",
            Kernel::Im2Col { .. } => "im2col",
            Kernel::Pool { .. } => "pool",
            Kernel::ConvBias { .. } => "conv_bias",
            Kernel::GroupNorm { .. } => "group_norm",
            Kernel::Attention { .. } => "attention",
            Kernel::AttentionSeqMajor { .. } => "attention_seq_major",
            Kernel::AddRmsNorm { .. } => "add_rms_norm",
            // No registry implements it: the executor runs transfers itself.
            Kernel::Transfer { .. } => "transfer",
        }
    }
}

/// The contract of one kernel: `Ok(())` if it runs on these operand layouts and this output,
/// else the reason.
pub type Contract = fn(&Kernel, &[Layout], &Layout) -> Result<(), String>;

/// One kernel of a device.
#[derive(Clone, Copy)]
pub struct KernelEntry {
    /// Family it implements (one of [`FAMILIES`]).
    pub family: &'static str,
    /// What it accepts.
    pub contract: Contract,
    /// One line on how it is implemented (reports, `tg devices --kernels`).
    pub note: &'static str,
}

/// Why a registry refuses a kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The device has no kernel of this family.
    NotImplemented {
        /// Device.
        device: String,
        /// Family.
        family: &'static str,
    },
    /// It has one, but its contract rejects these operands.
    Contract(String),
}

impl std::fmt::Display for Refusal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refusal::NotImplemented { device, family } => write!(f, "{device} has no {family} kernel"),
            Refusal::Contract(r) => f.write_str(r),
        }
    }
}

/// The kernels of one device.
pub struct KernelRegistry {
    device: String,
    entries: Vec<KernelEntry>,
}

impl KernelRegistry {
    /// A registry for the device named `device`.
    pub fn new(device: impl Into<String>, entries: Vec<KernelEntry>) -> KernelRegistry {
        KernelRegistry { device: device.into(), entries }
    }

    /// The device it describes.
    pub fn device(&self) -> &str {
        &self.device
    }

    /// Every entry.
    pub fn entries(&self) -> &[KernelEntry] {
        &self.entries
    }

    /// The entry of `family`, if the device has one.
    pub fn entry(&self, family: &str) -> Option<&KernelEntry> {
        self.entries.iter().find(|e| e.family == family)
    }

    /// Whether the device has a kernel of `kernel`'s family.
    pub fn implements(&self, kernel: &Kernel) -> bool {
        self.entry(kernel.family()).is_some()
    }

    /// Checks `kernel` on these layouts against the contract.
    pub fn check(&self, kernel: &Kernel, inputs: &[Layout], output: &Layout) -> Result<(), Refusal> {
        let e = self.entry(kernel.family()).ok_or_else(|| Refusal::NotImplemented { device: self.device.clone(), family: kernel.family() })?;
        (e.contract)(kernel, inputs, output).map_err(Refusal::Contract)
    }

    /// Whether the device runs the kernel of `op` on contiguous operands of these types
    /// (what lowering gives a fused op: it copies views), writing a contiguous `out`. The
    /// fusion rules' guard.
    pub fn accepts_op(&self, op: &Op, ins: &[Operand], out: (&[usize], DType), quantize_activations: bool) -> bool {
        match select(op, ins, out.0, quantize_activations) {
            Some((k, layouts)) => self.check(&k, &layouts, &Layout::contiguous(out.0, out.1)).is_ok(),
            None => false,
        }
    }
}

/// What kernel selection knows about an operand.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Operand<'a> {
    /// Shape.
    pub shape: &'a [usize],
    /// Dtype.
    pub dtype: DType,
    /// The value is a weight (read in place from the weight store).
    pub weight: bool,
}

impl<'a> Operand<'a> {
    /// An operand that is not a weight.
    pub fn value(shape: &'a [usize], dtype: DType) -> Operand<'a> {
        Operand { shape, dtype, weight: false }
    }
}

/// A view of contiguous `shape` broadcast to `to` (stride 0 on broadcast and new leading
/// dims), as lowering passes elementwise operands.
pub fn broadcast_layout(src: &Layout, to: &[usize]) -> Layout {
    let off = to.len() - src.shape.len();
    let bs = tg_ir::shape::broadcast_strides(&src.shape, to);
    let strides = (0..to.len()).map(|i| if bs[i] == 0 || i < off { 0 } else { src.strides[i - off] }).collect();
    Layout { shape: to.to_vec(), strides, offset: src.offset, dtype: src.dtype }
}

/// Whether a matmul runs as the weight-reading [`Kernel::MatMulQuant`]: the right operand
/// is quantized storage, or a rank-2 weight used transposed (`x · Wᵀ`). Every other matmul
/// (activations times activations, e.g. `q · kᵀ`) is the f32 batched kernel.
pub fn matmul_reads_weight(rhs: &Operand, transpose_rhs: bool) -> bool {
    matches!(rhs.dtype, DType::Quant(_)) || (rhs.weight && rhs.shape.len() == 2 && transpose_rhs)
}

/// The kernel that implements `op` and the layouts it reads when its operands are
/// contiguous (elementwise operands broadcast to the output's shape, matmul batch dims
/// expanded): the single choice lowering makes and the cost models price. `None` for ops
/// that are not kernels (sources and views: reshape, expand, slice; a permute is priced as
/// the copy its reader needs, see the compiler's cost model).
pub fn select(op: &Op, ins: &[Operand], out: &[usize], quantize_activations: bool) -> Option<(Kernel, Vec<Layout>)> {
    let c = |o: &Operand| Layout::contiguous(o.shape, o.dtype);
    let all = || ins.iter().map(c).collect::<Vec<_>>();
    Some(match op {
        Op::Input { .. } | Op::Weight { .. } | Op::State { .. } | Op::Reshape | Op::Expand | Op::Slice { .. } | Op::Permute { .. } => return None,
        // Resolved before lowering (extraction keeps one way, or the first is taken).
        Op::Alternatives => return None,
        Op::StoreRows { axis } => (Kernel::StoreRows { axis: *axis }, vec![c(ins.get(1)?), c(ins.get(2)?)]),
        Op::Constant { bits } => (Kernel::Fill { bits: *bits }, vec![]),
        Op::Iota { axis } => (Kernel::Iota { axis: *axis }, vec![]),
        Op::Unary(u) => (Kernel::Unary(*u), all()),
        Op::Binary(_) | Op::Compare(_) | Op::Where | Op::Cast { .. } => {
            let k = match op {
                Op::Binary(b) => Kernel::Binary(*b),
                Op::Compare(x) => Kernel::Compare(*x),
                Op::Where => Kernel::Where,
                _ => Kernel::Cast,
            };
            (k, ins.iter().map(|o| broadcast_layout(&c(o), out)).collect())
        }
        Op::Reduce { op, axis } => (Kernel::Reduce { op: *op, axis: *axis }, all()),
        Op::MatMul { transpose_rhs } => {
            let (a, b) = (ins.first()?, ins.get(1)?);
            if matmul_reads_weight(b, *transpose_rhs) {
                (Kernel::MatMulQuant { quantize_activations }, vec![c(a), c(b)])
            } else {
                let r = out.len();
                if r < 2 || a.shape.len() < 2 || b.shape.len() < 2 {
                    return None;
                }
                let expand = |o: &Operand| {
                    let s = o.shape;
                    let mut to = out[..r - 2].to_vec();
                    to.extend_from_slice(&s[s.len() - 2..]);
                    broadcast_layout(&c(o), &to)
                };
                (Kernel::MatMul { transpose_rhs: *transpose_rhs }, vec![expand(a), expand(b)])
            }
        }
        // The epilogue kernel exists for weight right operands only (`x · Wᵀ + c`).
        Op::MatMulAdd { transpose_rhs } => {
            if !matmul_reads_weight(ins.get(1)?, *transpose_rhs) {
                return None;
            }
            (Kernel::MatMulQuantAdd { quantize_activations }, all())
        }
        Op::Concat { axis } => (Kernel::Concat { axis: *axis }, all()),
        Op::Gather => (Kernel::Gather, all()),
        Op::Conv { window, groups } => (Kernel::Conv { window: window.clone(), groups: *groups }, all()),
        Op::Im2Col { window, groups } => (Kernel::Im2Col { window: window.clone(), groups: *groups }, all()),
        Op::Pool { kind, window } => (Kernel::Pool { kind: *kind, window: window.clone() }, all()),
        Op::ConvBias { window, groups, act } => (Kernel::ConvBias { window: window.clone(), groups: *groups, act: *act }, all()),
        Op::GroupNorm { groups, eps_bits, act } => (Kernel::GroupNorm { groups: *groups, eps_bits: *eps_bits, act: *act }, all()),
        Op::RmsNorm { eps_bits } => (Kernel::RmsNorm { eps_bits: *eps_bits }, all()),
        // The kernels read cos/sin as one row per position; the op broadcasts them to
        // `[seq, heads, d/2]`: the same only when they are `[seq, 1, d/2]`.
        Op::RopeNeox | Op::RmsNormRopeNeox { .. } => {
            let (x, tables) = (ins.first()?, if matches!(op, Op::RopeNeox) { ins.get(1..3)? } else { ins.get(2..4)? });
            if x.shape.len() != 3 || tables.iter().any(|t| t.shape != [x.shape[0], 1, x.shape[2] / 2]) {
                return None;
            }
            let k = match op {
                Op::RmsNormRopeNeox { eps_bits } => Kernel::RmsNormRopeNeox { eps_bits: *eps_bits },
                _ => Kernel::RopeNeox,
            };
            (k, all())
        }
        Op::GeluTanh => (Kernel::GeluTanh, all()),
        Op::GatedGelu => (Kernel::GatedGelu, all()),
        Op::Softmax => (Kernel::Softmax, all()),
        // The kernels read the mask as one `[sq, sk]` matrix shared by every head; the op
        // broadcasts it to the scores: the same when its shape is `[sq, sk]` after leading 1s.
        Op::Attention { scale_bits } | Op::AttentionSeqMajor { scale_bits } => {
            let (q, k, m) = (ins.first()?.shape, ins.get(1)?.shape, ins.get(3)?.shape);
            let sq = if matches!(op, Op::Attention { .. }) { q.len().checked_sub(2).map(|i| q[i])? } else { *q.first()? };
            let sk = k.len().checked_sub(2).map(|i| k[i])?;
            let rest: Vec<usize> = m.iter().copied().skip_while(|&d| d == 1).collect();
            if !(rest == [sq, sk] || (sq == 1 && (rest == [sk] || (sk == 1 && rest.is_empty())))) {
                return None;
            }
            let k = match op {
                Op::Attention { .. } => Kernel::Attention { scale_bits: *scale_bits },
                _ => Kernel::AttentionSeqMajor { scale_bits: *scale_bits },
            };
            (k, all())
        }
        Op::AddRmsNorm { eps_bits } => (Kernel::AddRmsNorm { eps_bits: *eps_bits }, all()),
    })
}

/// Bytes and floating-point operations of one launch: what the estimate and the profile's
/// fallback fits scale with.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Work {
    /// Bytes read and written (each distinct operand element once; quantized rows at their
    /// block size; a gather reads only the selected rows).
    pub bytes: f64,
    /// Arithmetic operations (a multiply-add is 2; transcendental functions count as ~10).
    pub flops: f64,
}

/// Bytes of the distinct elements a layout touches (broadcast dims count once; quantized rows
/// at their block size).
pub fn touched_bytes(l: &Layout) -> f64 {
    match l.dtype {
        DType::Quant(t) => {
            let Some((&k, rows)) = l.shape.split_last() else { return 0.0 };
            rows.iter().product::<usize>() as f64 * t.row_bytes(k).unwrap_or(k * 4) as f64
        }
        _ => {
            let distinct: usize = l.shape.iter().zip(&l.strides).map(|(&d, &s)| if s == 0 { d.min(1) } else { d }).product();
            distinct as f64 * l.elem_bytes() as f64
        }
    }
}

/// The work of `kernel` reading `inputs` and writing `output`, the same on every device.
pub fn work(kernel: &Kernel, ins: &[Layout], out: &Layout) -> Work {
    let n = out.numel() as f64;
    let dim = |i: usize, from_end: usize| -> f64 { ins.get(i).and_then(|l| l.shape.len().checked_sub(from_end).and_then(|j| l.shape.get(j))).copied().unwrap_or(1) as f64 };
    let mut bytes = touched_bytes(out) + ins.iter().map(touched_bytes).sum::<f64>();
    let flops = match kernel {
        Kernel::Fill { .. } | Kernel::Iota { .. } | Kernel::Copy | Kernel::Concat { .. } => 0.0,
        // One read on the source device, one write on this one: priced by the link, not here.
        Kernel::Transfer { .. } => 0.0,
        Kernel::StoreRows { .. } => {
            // Only the rows move, not the whole state.
            bytes = 2.0 * ins.first().map_or(0.0, touched_bytes);
            0.0
        }
        Kernel::Unary(u) => n * if matches!(u, UnaryOp::Neg | UnaryOp::Abs) { 1.0 } else { 10.0 },
        Kernel::Binary(_) | Kernel::Compare(_) | Kernel::Where | Kernel::Cast => n,
        Kernel::Reduce { .. } => ins.first().map_or(n, |l| l.numel() as f64),
        // out = [.., m, n], a = [.., m, k].
        Kernel::MatMul { .. } => 2.0 * n * dim(0, 1),
        // out = [.., n] with m rows, k = the weight's row length.
        Kernel::MatMulQuant { .. } => 2.0 * n * dim(1, 1),
        Kernel::MatMulQuantAdd { .. } => 2.0 * n * dim(1, 1) + n,
        Kernel::Gather => {
            // Only the selected rows of the table are read.
            if let (Some(t), Some(ids)) = (ins.first(), ins.get(1)) {
                let table = touched_bytes(t);
                let rows = t.shape.first().copied().unwrap_or(1).max(1) as f64;
                bytes += (table / rows * ids.numel() as f64).min(table) - table;
            }
            0.0
        }
        // out [N, M, *O], w [M, C/g, *K]: one multiply-add per weight element per output
        // position.
        Kernel::Conv { .. } => 2.0 * n * ins.get(1).map_or(1, |w| w.shape[1..].iter().product::<usize>()) as f64,
        // The convolution, then a bias add and the activation (≈ 10 flops for SiLU).
        Kernel::ConvBias { act, .. } => 2.0 * n * ins.get(1).map_or(1, |w| w.shape[1..].iter().product::<usize>()) as f64 + n * if *act == tg_ir::Act::Silu { 11.0 } else { 2.0 },
        // Two passes for the statistics, one affine pass (and the activation).
        Kernel::GroupNorm { act, .. } => n * if *act == tg_ir::Act::Silu { 16.0 } else { 6.0 },
        Kernel::Im2Col { .. } => 0.0,
        Kernel::Pool { window, .. } => n * window.taps() as f64,
        Kernel::RmsNorm { .. } => 4.0 * n,
        // out = [2, ..x]: the sum (1 flop) and its norm (4) per element of x.
        Kernel::AddRmsNorm { .. } => 2.5 * n,
        Kernel::RopeNeox => 6.0 * n,
        Kernel::RmsNormRopeNeox { .. } => 10.0 * n,
        Kernel::GeluTanh => 14.0 * n,
        Kernel::GatedGelu => 15.0 * n,
        Kernel::Softmax => 13.0 * n,
        Kernel::Attention { .. } | Kernel::AttentionSeqMajor { .. } => {
            // q [n_kv, group, sq, d] (or [sq, n_kv, group, d]), k [n_kv, 1, sk, d]: scores,
            // online softmax, p·v.
            let q = ins.first().map_or(0.0, |l| l.numel() as f64);
            let (d, sk) = (dim(0, 1), dim(1, 2));
            q / d.max(1.0) * sk * (4.0 * d + 13.0)
        }
    };
    Work { bytes, flops }
}

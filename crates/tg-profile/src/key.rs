//! What is measured: [`ProfileKey`], its kernel family and its [`work`].

use serde::{Deserialize, Serialize};
use tg_ir::{DType, UnaryOp};
use tg_runtime::{Kernel, Layout, Plan, Step};

/// One combination a plan asks about: a kernel reading `inputs` and writing `output` (layouts
/// with shape, strides and dtype), on the device named `device` running `threads` workers.
///
/// Keys are compared after [`ProfileKey::normalized`]: layout offsets and the attributes that
/// do not change the work (fill value, epsilon, attention scale) are canonicalised, so the
/// same kernel at the same shapes is one entry wherever its buffers sit. Strides are kept:
/// contiguity decides which code path runs.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct ProfileKey {
    /// The kernel and its attributes.
    pub kernel: Kernel,
    /// Operand layouts, in the kernel's operand order.
    pub inputs: Vec<Layout>,
    /// Result layout.
    pub output: Layout,
    /// Device name (`Device::name`, e.g. `"cpu"`).
    pub device: String,
    /// Worker threads of the device.
    pub threads: usize,
}

impl ProfileKey {
    /// A normalised key (see [`ProfileKey::normalized`]).
    pub fn new(kernel: Kernel, inputs: Vec<Layout>, output: Layout, device: impl Into<String>, threads: usize) -> ProfileKey {
        ProfileKey { kernel, inputs, output, device: device.into(), threads }.normalized()
    }

    /// The key of one plan step run with `threads` workers on its device.
    pub fn from_step(plan: &Plan, step: &Step, threads: usize) -> ProfileKey {
        let device = plan.devices.get(step.device).cloned().unwrap_or_default();
        ProfileKey::new(step.kernel.clone(), step.inputs.iter().map(|t| t.layout.clone()).collect(), step.output.layout.clone(), device, threads)
    }

    /// The distinct keys of a plan's steps, in first-use order.
    pub fn from_plan(plan: &Plan, threads: usize) -> Vec<ProfileKey> {
        let mut seen = std::collections::HashSet::new();
        plan.steps.iter().map(|s| ProfileKey::from_step(plan, s, threads)).filter(|k| seen.insert(k.clone())).collect()
    }

    /// This key with every layout at its smallest valid offset (0 unless a stride is
    /// negative) and with the fill value, epsilon and attention scale set to canonical
    /// values (they do not change the work; the scale becomes `1/√d`).
    pub fn normalized(mut self) -> ProfileKey {
        for l in self.inputs.iter_mut().chain(std::iter::once(&mut self.output)) {
            l.offset = min_offset(l);
        }
        self.kernel = match self.kernel {
            Kernel::Fill { .. } => Kernel::Fill { bits: 0f64.to_bits() },
            Kernel::RmsNorm { .. } => Kernel::RmsNorm { eps_bits: 1e-6f64.to_bits() },
            Kernel::RmsNormRopeNeox { .. } => Kernel::RmsNormRopeNeox { eps_bits: 1e-6f64.to_bits() },
            Kernel::AddRmsNorm { .. } => Kernel::AddRmsNorm { eps_bits: 1e-6f64.to_bits() },
            Kernel::Attention { .. } | Kernel::AttentionSeqMajor { .. } => {
                let d = self.inputs.first().and_then(|q| q.shape.last()).copied().unwrap_or(1).max(1);
                let scale_bits = (1.0 / (d as f64).sqrt()).to_bits();
                if matches!(self.kernel, Kernel::Attention { .. }) {
                    Kernel::Attention { scale_bits }
                } else {
                    Kernel::AttentionSeqMajor { scale_bits }
                }
            }
            k => k,
        };
        self
    }

    /// The kernel family whose measurements share one fallback fit: the kernel name, the
    /// storage type where it selects the code (`matmul_quant:q4_k`, `gather:q6_k`,
    /// `add:i32`, `cast:i32>f32`), and `:strided` when an operand is not contiguous.
    pub fn family(&self) -> String {
        let mut f = self.kernel.name();
        match &self.kernel {
            Kernel::MatMulQuant { .. } | Kernel::MatMulQuantAdd { .. } | Kernel::Gather => {
                let w = if matches!(self.kernel, Kernel::Gather) { self.inputs.first() } else { self.inputs.get(1) };
                if let Some(w) = w {
                    f = format!("{f}:{}", dtype_name(w.dtype));
                }
            }
            Kernel::Cast => {
                if let Some(a) = self.inputs.first() {
                    f = format!("{f}:{}>{}", dtype_name(a.dtype), dtype_name(self.output.dtype));
                }
            }
            _ => {
                let d = self.inputs.first().map_or(self.output.dtype, |l| l.dtype);
                if d != DType::F32 {
                    f = format!("{f}:{}", dtype_name(d));
                }
            }
        }
        if self.inputs.iter().any(|l| !l.is_contiguous()) {
            f.push_str(":strided");
        }
        f
    }

    /// A one-line description for messages: `rms_norm [4,640]f32 [640]f32 -> [4,640]f32 @cpu/2`.
    pub fn short(&self) -> String {
        let lay = |l: &Layout| {
            let s: Vec<String> = l.shape.iter().map(|d| d.to_string()).collect();
            let strided = if l.is_contiguous() { "" } else { "~" };
            format!("[{}]{}{strided}", s.join(","), dtype_name(l.dtype))
        };
        let ins: Vec<String> = self.inputs.iter().map(lay).collect();
        format!("{} {} -> {} @{}/{}", self.kernel.name(), ins.join(" "), lay(&self.output), self.device, self.threads)
    }
}

/// Lower-case dtype name (`f32`, `i32`, `bool`, `q4_k`).
pub(crate) fn dtype_name(d: DType) -> String {
    match d {
        DType::F32 => "f32".into(),
        DType::I32 => "i32".into(),
        DType::Bool => "bool".into(),
        DType::Quant(t) => t.name().to_ascii_lowercase(),
    }
}

/// Smallest offset at which no element index is negative.
fn min_offset(l: &Layout) -> usize {
    if l.shape.contains(&0) {
        return 0;
    }
    l.shape.iter().zip(&l.strides).map(|(&d, &s)| if s < 0 { (d - 1) * s.unsigned_abs() } else { 0 }).sum()
}

/// The work of one kernel launch, the quantities the roofline fallback scales with.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Work {
    /// Bytes read and written (each distinct operand element once; quantized rows at their
    /// block size; a gather reads only the selected rows).
    pub bytes: f64,
    /// Arithmetic operations (a multiply-add is 2; transcendental functions count as ~10).
    pub flops: f64,
}

/// Bytes of the distinct elements a layout touches (broadcast dims count once).
fn touched_bytes(l: &Layout) -> f64 {
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

/// Bytes moved and flops of running `key` (any [`Kernel`] variant). Both are non-decreasing
/// in every dimension of every operand, which makes the fallback monotone in problem size.
pub fn work(key: &ProfileKey) -> Work {
    let out = &key.output;
    let n = out.numel() as f64;
    let ins = &key.inputs;
    let dim = |i: usize, from_end: usize| -> f64 { ins.get(i).and_then(|l| l.shape.len().checked_sub(from_end).and_then(|j| l.shape.get(j))).copied().unwrap_or(1) as f64 };
    let mut bytes = touched_bytes(out) + ins.iter().map(touched_bytes).sum::<f64>();
    let flops = match &key.kernel {
        Kernel::Fill { .. } | Kernel::Iota { .. } | Kernel::Copy | Kernel::Concat { .. } => 0.0,
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

#[cfg(test)]
mod tests {
    use super::*;
    use tg_ir::BinaryOp;
    use tg_quant::GgmlType;

    #[test]
    fn normalisation_drops_offsets_and_attributes() {
        let mut x = Layout::contiguous(&[4, 8], DType::F32);
        x.offset = 96;
        let w = Layout::contiguous(&[8], DType::F32);
        let a = ProfileKey::new(Kernel::RmsNorm { eps_bits: 1e-5f64.to_bits() }, vec![x.clone(), w.clone()], Layout::contiguous(&[4, 8], DType::F32), "cpu", 2);
        x.offset = 0;
        let b = ProfileKey::new(Kernel::RmsNorm { eps_bits: 1e-6f64.to_bits() }, vec![x, w], Layout::contiguous(&[4, 8], DType::F32), "cpu", 2);
        assert_eq!(a, b);
        // A reversed view keeps the offset it needs.
        let rev = Layout { shape: vec![5], strides: vec![-1], offset: 100, dtype: DType::F32 };
        let k = ProfileKey::new(Kernel::Copy, vec![rev], Layout::contiguous(&[5], DType::F32), "cpu", 1);
        assert_eq!(k.inputs[0].offset, 4);
        assert_eq!(k.family(), "copy:strided");
    }

    #[test]
    fn work_of_quant_matmul_and_gather() {
        let q = DType::Quant(GgmlType::Q4_K);
        let k = ProfileKey::new(
            Kernel::MatMulQuant { quantize_activations: true },
            vec![Layout::contiguous(&[3, 512], DType::F32), Layout::contiguous(&[100, 512], q)],
            Layout::contiguous(&[3, 100], DType::F32),
            "cpu",
            1,
        );
        let w = work(&k);
        assert_eq!(w.flops, 2.0 * 3.0 * 100.0 * 512.0);
        assert_eq!(w.bytes, (3 * 512 * 4 + 100 * 2 * 144 + 3 * 100 * 4) as f64);
        assert_eq!(k.family(), "matmul_quant_q8act:q4_k");
        let g =
            ProfileKey::new(Kernel::Gather, vec![Layout::contiguous(&[1000, 256], q), Layout::contiguous(&[7], DType::I32)], Layout::contiguous(&[7, 256], DType::F32), "cpu", 1);
        assert_eq!(work(&g).bytes, (7 * 144 + 7 * 4 + 7 * 256 * 4) as f64);
        // Broadcast operands count their distinct elements once.
        let bcast = Layout { shape: vec![4, 8], strides: vec![0, 1], offset: 0, dtype: DType::F32 };
        let b = ProfileKey::new(Kernel::Binary(BinaryOp::Add), vec![Layout::contiguous(&[4, 8], DType::F32), bcast], Layout::contiguous(&[4, 8], DType::F32), "cpu", 1);
        assert_eq!(work(&b).bytes, ((32 + 8 + 32) * 4) as f64);
        assert_eq!(b.family(), "add:strided");
    }
}

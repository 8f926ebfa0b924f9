//! What is measured: [`ProfileKey`], its kernel family and its [`work`].

use serde::{Deserialize, Serialize};
use tg_ir::DType;
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

    /// The distinct keys of a plan's kernel steps, in first-use order (transfers are not
    /// kernels: links are measured apart).
    pub fn from_plan(plan: &Plan, threads: usize) -> Vec<ProfileKey> {
        let mut seen = std::collections::HashSet::new();
        plan.steps
            .iter()
            .filter(|s| !matches!(s.kernel, tg_runtime::Kernel::Transfer { .. }))
            .map(|s| ProfileKey::from_step(plan, s, threads))
            .filter(|k| seen.insert(k.clone()))
            .collect()
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
            Kernel::GroupNorm { groups, act, .. } => Kernel::GroupNorm { groups, eps_bits: 1e-5f64.to_bits(), act },
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

pub use tg_runtime::Work;

/// Bytes moved and flops of running `key` ([`tg_runtime::work`], the formula every cost model
/// shares). Both are non-decreasing in every dimension of every operand, which makes the
/// fallback monotone in problem size.
pub fn work(key: &ProfileKey) -> Work {
    tg_runtime::work(&key.kernel, &key.inputs, &key.output)
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

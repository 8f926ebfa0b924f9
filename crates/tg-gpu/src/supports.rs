//! The contract of every shared GPU kernel: the device-independent one
//! ([`tg_runtime::contract::well_formed`]) with the kernels' limits (at most eight strided
//! dims after merging, head_dim ≤ 256 in attention, the weight formats the kernels decode,
//! i32 error reports). The output may start at any element offset but must be contiguous.

use tg_ir::DType;
use tg_quant::GgmlType;
use tg_runtime::{Kernel, Layout};

use crate::shape::{contiguous, merge};
pub use crate::shape::MAX_RANK;

/// Largest attention head dimension (`ATT_MAXD` of `attention.gpu`: the query rows and a key
/// tile are staged in local memory at this width).
pub const ATTENTION_MAX_HEAD_DIM: usize = 256;

fn need(cond: bool, msg: impl FnOnce() -> String) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(msg())
    }
}

/// The weight / table formats the kernels read (as a GGML type; plain F32 counts as F32).
pub fn weight_type(d: DType) -> Option<GgmlType> {
    let t = match d {
        DType::F32 => GgmlType::F32,
        DType::Quant(t) => t,
        _ => return None,
    };
    matches!(t, GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 | GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 | GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K).then_some(t)
}

/// Elementwise operands walked over the output's shape must merge to at most eight dims.
fn strided_rank(ins: &[Layout], out: &Layout) -> Result<(), String> {
    let cs = contiguous(&out.shape);
    let mut all: Vec<&[isize]> = ins.iter().map(|l| l.strides.as_slice()).collect();
    all.push(&cs);
    let m = merge(&out.shape, &all);
    need(m.shape.len() <= MAX_RANK, || format!("strided rank {} after merging dims exceeds {MAX_RANK}", m.shape.len()))?;
    for l in ins {
        need(l.span().is_some(), || "a negative stride reaches before the offset".into())?;
    }
    Ok(())
}

/// The contract of the shared kernels: `Ok(())` if [`crate::plan`] takes `kernel` reading
/// `ins` and writing `out`, else the reason. Every well-formed launch
/// ([`tg_runtime::contract::well_formed`]) within the kernels' limits.
pub fn supports(kernel: &Kernel, ins: &[Layout], out: &Layout) -> Result<(), String> {
    tg_runtime::contract::well_formed(kernel, ins, out)?;
    match kernel {
        Kernel::Transfer { .. } => Err("a transfer is not a kernel: the executor runs it".into()),
        Kernel::Unary(_) | Kernel::Binary(_) | Kernel::Compare(_) | Kernel::Where | Kernel::Cast | Kernel::Copy => strided_rank(ins, out),
        Kernel::MatMul { .. } => {
            let r = out.shape.len();
            let (a, b) = (&ins[0], &ins[1]);
            let cs = contiguous(&out.shape[..r - 2]);
            let bm = merge(&out.shape[..r - 2], &[&a.strides[..r - 2], &b.strides[..r - 2], &cs]);
            need(bm.shape.len() <= MAX_RANK, || format!("matmul_f32: batch rank {} after merging exceeds {MAX_RANK}", bm.shape.len()))
        }
        Kernel::MatMulQuant { .. } | Kernel::MatMulQuantAdd { .. } => {
            let (a, w) = (&ins[0], &ins[1]);
            let ty = weight_type(w.dtype).ok_or_else(|| format!("{}: weight type {:?} not supported", kernel.name(), w.dtype))?;
            let k = *a.shape.last().unwrap_or(&0);
            need(k % ty.block_size() == 0, || format!("{}: k = {k} is not a multiple of the {} block", kernel.name(), ty.name()))
        }
        Kernel::StoreRows { .. } => need(out.numel() < i32::MAX as usize, || "store_rows: state too large for i32 error reports".into()),
        Kernel::Gather => {
            let t = &ins[0];
            weight_type(t.dtype).ok_or_else(|| format!("gather: table type {:?} not supported", t.dtype))?;
            need(t.shape[0] <= i32::MAX as usize, || "gather: more table rows than i32 ids reach".into())
        }
        Kernel::Attention { .. } | Kernel::AttentionSeqMajor { .. } => {
            let d = ins[0].shape[3];
            // The mask is read in place: contiguous, or a row or value broadcast (well_formed).
            need(d <= ATTENTION_MAX_HEAD_DIM, || format!("{}: head_dim {d} exceeds {ATTENTION_MAX_HEAD_DIM}", kernel.name()))
        }
        Kernel::Fill { .. }
        | Kernel::Iota { .. }
        | Kernel::Reduce { .. }
        | Kernel::Concat { .. }
        | Kernel::RmsNorm { .. }
        | Kernel::RopeNeox
        | Kernel::RmsNormRopeNeox { .. }
        | Kernel::GeluTanh
        | Kernel::GatedGelu
        | Kernel::Softmax
        | Kernel::AddRmsNorm { .. }
        | Kernel::GroupNorm { .. } => Ok(()),
        // Element indices are longs; the geometry is the CPU's (`tg_runtime::window_2d`).
        Kernel::Conv { window, .. } | Kernel::Im2Col { window, .. } | Kernel::Pool { window, .. } | Kernel::ConvBias { window, .. } => {
            tg_runtime::window_2d(window, &ins[0].shape).map(|_| ())
        }
    }
}

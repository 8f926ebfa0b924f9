//! GPU kernels written once, for every GPU API: a small C dialect over OpenCL C and CUDA C.
//!
//! Each kernel is written once, in `src/kernels/*.gpu`, against the names `common.h` lists
//! (kernel and helper qualifiers, address spaces, work-group ids, barriers, local arrays,
//! fixed-width integers, math functions). A dialect header maps them to one API:
//! `dialect_opencl.h` to OpenCL C 1.2, `dialect_cuda.h` to CUDA C++ for NVRTC. [`source`]
//! joins a dialect header and the kernel files into one program, so the OpenCL device (PoCL in
//! CI, any GPU's OpenCL driver) runs the very code the CUDA device compiles. What exists on
//! CUDA only — warp shuffles — sits behind one macro (`TG_WARP`) with a local-memory twin
//! that the OpenCL build uses, so PoCL checks everything but the shuffles.
//!
//! The host side is shared too: [`supports`] is the contract of every kernel (what the
//! registries of both devices say), and [`plan`] turns a plan step into launches — kernel
//! name, arguments in parameter order, grid and work-group size — that each device only has
//! to marshal for its API ([`KArg`]). Launch shapes follow [`Tuning`], which a device may
//! measure and store (`tg profile --device …`).
//!
//! # Kernel shapes
//! - elementwise, casts, copies, fills: grid-stride loops, neighbouring work-items on
//!   neighbouring output elements (coalesced writes), operands as strided views of ≤ 8 dims;
//! - norms, softmax, RoPE, group norm, row reductions: one work-group per row, work-group
//!   reductions (`group_sum` / `group_max`);
//! - quantized matrix–vector products for decode (`tg_mmv`, m ≤ 8): a run of 32 work-items per
//!   weight row, reading it once, in 8-element units, for every activation row; a tiled
//!   product for prefill (`tg_mmq_t32`, `tg_mmq_t64`) with the weight tile dequantized into
//!   local memory as it is staged; the q8 numerics quantize the activation rows first
//!   (`tg_quantize_q8_0` / `_k`, into the device's scratch buffer);
//! - batched f32 matmul and convolution (implicit GEMM) tiled the same way;
//! - flash attention with an online softmax per work-group of one query position and up to
//!   eight query heads sharing a kv head.
#![warn(missing_docs)]

mod launch;
mod shape;
mod supports;
mod tuning;

pub use launch::{plan, KArg, Launch, Launches, Tensor};
pub use supports::{supports, weight_type, ATTENTION_MAX_HEAD_DIM, MAX_RANK};
pub use tuning::{Tuning, TILE_CHOICES};

use tg_runtime::{Contract, Kernel, KernelEntry, KernelRegistry, Layout, FAMILIES};

/// The API a program is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// OpenCL C 1.2.
    OpenCl,
    /// CUDA C++ compiled by NVRTC.
    Cuda,
}

/// The dialect headers, one per [`Target`].
pub const DIALECTS: [(&str, &str); 2] = [("dialect_opencl.h", include_str!("kernels/dialect_opencl.h")), ("dialect_cuda.h", include_str!("kernels/dialect_cuda.h"))];

/// The shared kernel sources, in program order (after the dialect header).
pub const SOURCES: [(&str, &str); 7] = [
    ("common.h", include_str!("kernels/common.h")),
    ("elementwise.gpu", include_str!("kernels/elementwise.gpu")),
    ("quant.gpu", include_str!("kernels/quant.gpu")),
    ("matmul.gpu", include_str!("kernels/matmul.gpu")),
    ("fused.gpu", include_str!("kernels/fused.gpu")),
    ("attention.gpu", include_str!("kernels/attention.gpu")),
    ("window.gpu", include_str!("kernels/window.gpu")),
];

/// Name of the kernel program (in errors and logs).
pub const PROGRAM_NAME: &str = "tg_kernels";

/// Every kernel function of the program (each device resolves them once).
pub const KERNEL_NAMES: [&str; 34] = [
    "tg_fill",
    "tg_iota",
    "tg_unary",
    "tg_binary",
    "tg_compare",
    "tg_where",
    "tg_cast",
    "tg_copy_rows",
    "tg_store_rows",
    "tg_reduce_rows",
    "tg_reduce_cols",
    "tg_quantize_q8_0",
    "tg_quantize_q8_k",
    "tg_quantize_rows",
    "tg_mmv",
    "tg_mmv_rows",
    "tg_mmq_t64",
    "tg_mmq_t32",
    "tg_gather",
    "tg_matmul_t64",
    "tg_matmul_t32",
    "tg_rms_norm",
    "tg_add_rms_norm",
    "tg_rope_neox",
    "tg_gelu",
    "tg_softmax",
    "tg_group_norm",
    "tg_attention",
    "tg_attention_combine",
    "tg_conv",
    "tg_conv_t64",
    "tg_conv_t32",
    "tg_im2col",
    "tg_pool",
];

/// The whole program for `target`: its dialect header, then [`SOURCES`], each preceded by a
/// `#line` so compiler messages name the file and line.
pub fn source(target: Target) -> String {
    let (dname, dialect) = match target {
        Target::OpenCl => DIALECTS[0],
        Target::Cuda => DIALECTS[1],
    };
    let mut s = String::new();
    for (name, text) in std::iter::once((dname, dialect)).chain(SOURCES.iter().copied()) {
        s.push_str(&format!("#line 1 \"{name}\"\n"));
        s.push_str(text);
        s.push('\n');
    }
    s
}

/// A 64-bit FNV-1a hash of the program for `target` (program caches and profile fingerprints
/// key on it).
pub fn source_hash(target: Target) -> u64 {
    source(target).bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// The error the kernels recorded in a device's status words (`report_error` of `common.h`:
/// code, then three details), or `None` when they recorded none.
pub fn status_message(words: [i32; 4]) -> Option<String> {
    Some(match words[0] {
        0 => return None,
        1 => format!("store_rows: rows {}..{} past the state's {} along the axis", words[1], words[1] as i64 + words[2] as i64, words[3]),
        2 => format!("gather: id {} at position {} outside the table's {} rows", words[1], words[2], words[3]),
        c => format!("unknown kernel error code {c}"),
    })
}

/// One line per family on how the shared kernels implement it (`tg devices --kernels`).
pub fn family_note(family: &str) -> &'static str {
    match family {
        "fill" | "iota" | "unary" | "binary" | "compare" | "where" | "cast" | "copy" => "elementwise.gpu: grid-stride, coalesced writes, strided operands (≤ 8 merged dims)",
        "reduce" => "elementwise.gpu: a work-group per row (last axis) or a work-item per column",
        "matmul_f32" => "matmul.gpu: tiled 32² / 64² per work-group of 256, local-memory staging, strided batches",
        "matmul_quant" | "matmul_quant_add" => {
            "quant.gpu: m ≤ 8 a 32-lane run per weight row (tg_mmv); else tiled with weights dequantized into local memory; q8: activations quantized first"
        }
        "gather" => "quant.gpu: a work-group per id, 8-element units of any weight format",
        "concat" | "store_rows" => "elementwise.gpu: row copies, grid-stride; store_rows checks its offset on the device",
        "conv" | "conv_bias" => "window.gpu: implicit GEMM tiles (≥ 8 channels per group), else direct; fused bias, residual, activation",
        "im2col" | "pool" => "window.gpu: a work-item per output",
        "group_norm" => "fused.gpu: a work-group per (image, group), two reductions",
        "rms_norm" | "add_rms_norm" | "rope_neox" | "rms_norm_rope_neox" | "softmax" => "fused.gpu: a work-group per row, work-group reductions",
        "gelu_tanh" | "gated_gelu" => "fused.gpu: grid-stride elementwise",
        "attention" | "attention_seq_major" => "attention.gpu: flash attention, online softmax, a work-group per (position, kv head, ≤ 8 query heads)",
        _ => "tg-gpu",
    }
}

/// A kernel registry named `device` with every family, each with [`supports`] as its
/// contract: what the OpenCL and CUDA devices both run.
pub fn registry(device: &str) -> KernelRegistry {
    let contract: Contract = |k: &Kernel, ins: &[Layout], out: &Layout| supports(k, ins, out);
    KernelRegistry::new(device, FAMILIES.iter().map(|&family| KernelEntry { family, contract, note: family_note(family) }).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `KERNEL name(` of the sources is in KERNEL_NAMES and the other way round.
    #[test]
    fn kernel_names_match_the_sources() {
        let mut found = Vec::new();
        for (_, text) in SOURCES {
            for line in text.lines() {
                if let Some(rest) = line.strip_prefix("KERNEL ") {
                    let name = rest.split('(').next().unwrap_or("").trim();
                    found.push(name.to_string());
                }
            }
        }
        let mut listed: Vec<String> = KERNEL_NAMES.iter().map(|s| s.to_string()).collect();
        found.sort();
        listed.sort();
        assert_eq!(found, listed);
    }

    #[test]
    fn both_targets_have_a_source() {
        for t in [Target::OpenCl, Target::Cuda] {
            let s = source(t);
            assert!(s.contains("tg_mmv") && s.contains("#line 1 \"common.h\""));
        }
        assert!(source(Target::Cuda).contains("TG_WARP"));
        assert!(!source(Target::OpenCl).contains("__shfl"));
        assert_ne!(source_hash(Target::OpenCl), source_hash(Target::Cuda));
    }
}

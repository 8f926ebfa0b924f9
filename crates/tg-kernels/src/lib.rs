//! CPU kernels for Tensor Graphs: quantized-weight matmul, f32 batched matmul, row gather
//! (embedding lookup), elementwise maps, row reductions, strided copies, and convolution,
//! im2col and pooling windows.
//!
//! # Instruction sets
//! Every kernel has one generic implementation written against a small vector abstraction and
//! instantiated three times: portable ([`Isa::Scalar`]), AVX2+FMA+F16C ([`Isa::Avx2`]) and
//! AVX-512 F/BW/VL/DQ ([`Isa::Avx512`]). The public functions use [`isa()`] (best available,
//! overridable with `TG_ISA=scalar|avx2|avx512`); each has a `*_with(isa, ..)` twin so tests
//! and benchmarks can run every path explicitly.
//!
//! # Threads
//! Kernels split work with rayon and use whatever pool they are called in (the runtime calls
//! them inside `pool.install(..)`). Small problems run on the calling thread; work is split
//! into a few contiguous chunks per thread, never into tiny pieces.
//!
//! # Numerics
//! Activations and accumulation are f32 (no activation quantization). Quantized weights are
//! decoded to exactly the values `tg_quant::dequantize_row` gives (the AVX-512 single-row matvec
//! applies block scales to partial sums instead, also in f32); dot products use several
//! independent f32 accumulators (lane-parallel, then a tree). The tests check every output
//! against an f64 reference with the worst-case bound `2·(k/8 + 12)·ε·Σ|x·w|` and NMSE < 1e-10
//! (measured worst NMSE ≈ 3e-12).
#![warn(missing_docs)]

mod conv;
mod copy;
mod dequant;
mod elementwise;
mod fused;
mod isa;
mod matmul_f32;
mod matmul_q;
mod par;
mod reduce;
mod simd;
mod winograd;

pub use tg_quant::GgmlType;
use thiserror::Error;

pub use conv::{
    conv2d_bias_act_f32, conv2d_bias_residual_act_f32, conv2d_f32, ConvEpilogue, conv2d_f32_with, conv2d_gemm_f32, conv2d_implicit_f32, conv2d_implicit_f32_with, conv2d_winograd_f32_with, im2col_f32, pool2d_f32,
    pool2d_f32_with, winograd_applies, winograd_tile, Pool, Window2d,
};
pub use copy::copy_strided_f32;
pub use dequant::{dequantize_row, dequantize_row_with, get_rows, get_rows_with, has_simd_decoder, supports_type};
pub use elementwise::{
    binary_col_broadcast, binary_col_broadcast_with, binary_f32, binary_f32_with, binary_row_broadcast, binary_row_broadcast_with, unary_f32, unary_f32_with, BinaryOp, UnaryOp,
};
pub use fused::{
    add_rms_norm, add_rms_norm_with, attention, attention_is_dense, attention_layout_with, attention_row_mask_with, attention_with, bias_act_rows, bias_act_rows_with,
    gated_gelu_tanh, gated_gelu_tanh_with, gelu_tanh, gelu_tanh_with, group_norm, group_norm_with, rms_norm, rms_norm_rope_neox, rms_norm_rope_neox_with, rms_norm_with, rope_neox,
    rope_neox_with, softmax_rows, softmax_rows_with, Act, AttnLayout, GroupNormShape,
};
pub use isa::{cpu_features, isa, Isa};
pub use matmul_f32::{matmul_f32, matmul_f32_with, MatView};
pub use matmul_q::{matmul_qt, matmul_qt_with};
pub use reduce::{reduce_rows_f32, reduce_rows_f32_with, ReduceOp};

/// Errors from kernel argument validation. Kernels never panic on bad arguments.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum KernelError {
    /// A buffer has the wrong number of elements (or bytes, for quantized data).
    #[error("{what}: expected {expected}, got {got}")]
    Length {
        /// Which buffer.
        what: &'static str,
        /// Required length.
        expected: usize,
        /// Supplied length.
        got: usize,
    },
    /// A row id of `get_rows` is outside the table.
    #[error("get_rows: id {id} at position {pos} is out of range for a table of {n_rows} rows")]
    IdOutOfRange {
        /// Position of the offending id in `ids`.
        pos: usize,
        /// The id.
        id: i64,
        /// Rows in the table.
        n_rows: usize,
    },
    /// The element type is not supported by this kernel.
    #[error("element type {0} is not supported by this kernel")]
    UnsupportedType(GgmlType),
    /// A layout error from `tg-quant` (e.g. a row length that is not a multiple of the block).
    #[error(transparent)]
    Quant(#[from] tg_quant::QuantError),
    /// The requested instruction set is not available on this CPU.
    #[error("instruction set {0} is not available on this CPU")]
    IsaUnavailable(Isa),
    /// Inconsistent shapes or strides.
    #[error("{0}")]
    Shape(String),
    /// A size computation overflowed `usize`.
    #[error("{0}: size overflows usize")]
    Overflow(&'static str),
}

/// Makes a scratch buffer at least `n` long without rewriting what it holds: for buffers
/// whose every element used is written before it is read (zero-filling them again on each
/// reuse would be a wasted pass).
pub(crate) fn grow(v: &mut Vec<f32>, n: usize) {
    if v.len() < n {
        v.resize(n, 0.0);
    }
}

/// `a * b`, or an overflow error naming `what`.
pub(crate) fn mul(what: &'static str, a: usize, b: usize) -> Result<usize, KernelError> {
    a.checked_mul(b).ok_or(KernelError::Overflow(what))
}

/// Checks `got == expected` for buffer `what`.
pub(crate) fn check_len(what: &'static str, expected: usize, got: usize) -> Result<(), KernelError> {
    if expected == got {
        Ok(())
    } else {
        Err(KernelError::Length { what, expected, got })
    }
}

/// Names of one quantized-matmul entry point's buffers, for error messages.
pub(crate) struct MatmulNames {
    pub x: &'static str,
    pub w_bytes: &'static str,
    pub w: &'static str,
    pub y: &'static str,
}

/// Shared argument checks of the `x · Wᵀ` kernels: `x` is `[m, k]` (when given), `w` holds
/// `n` rows of `k` elements in `ty`, `y` is `[m, n]`. Returns the bytes of a weight row, or
/// `None` when nothing is left to compute (`y` empty, or `k == 0` and `y` zeroed).
#[allow(clippy::too_many_arguments)]
pub(crate) fn check_matmul(
    names: &MatmulNames,
    ty: GgmlType,
    m: usize,
    k: usize,
    n: usize,
    x_len: Option<usize>,
    w_len: usize,
    y: &mut [f32],
) -> Result<Option<usize>, KernelError> {
    let row_bytes = dequant::row_bytes_checked(ty, k)?;
    if let Some(x_len) = x_len {
        check_len(names.x, mul(names.x, m, k)?, x_len)?;
    }
    check_len(names.w_bytes, mul(names.w, n, row_bytes)?, w_len)?;
    check_len(names.y, mul(names.y, m, n)?, y.len())?;
    if y.is_empty() {
        return Ok(None);
    }
    if k == 0 {
        y.fill(0.0);
        return Ok(None);
    }
    Ok(Some(row_bytes))
}

mod matmul_q8;
pub use matmul_q8::{
    matmul_qt_q8, matmul_qt_q8_ordered, matmul_qt_q8_pre, matmul_qt_q8_pre_ordered, matmul_qt_q8_with, q8_activation_type, quantize_activations, quantize_activations_with,
    Q8Order, QuantizedActivations,
};

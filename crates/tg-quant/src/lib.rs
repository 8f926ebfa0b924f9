//! GGML tensor element types and their block layouts.
//!
//! Every quantized format stores a row of `n` elements as `n / block_size()` blocks of
//! `type_size()` bytes each. This crate is the single source of truth for those layouts:
//! the GGUF reader uses it to size tensors, the kernels use it to walk blocks, and the
//! reference dequantizers here are what every fast kernel is tested against.
#![warn(missing_docs)]

use thiserror::Error;

pub mod blocks;
pub mod dequant;
pub mod quantize;
pub mod random;

pub use blocks::{
    get_scale_min_k4, unpack_q3k_scales, Block, BlockQ2K, BlockQ3K, BlockQ4K, BlockQ4_0, BlockQ4_1,
    BlockQ5K, BlockQ5_0, BlockQ5_1, BlockQ6K, BlockQ8K, BlockQ8_0, BlockQ8_1, K_SCALE_SIZE, QK32,
    QK_K,
};
pub use dequant::{
    bf16_to_f32, can_dequantize, dequantize_block, dequantize_row, dequantize_to_vec, f16_to_f32,
    f32_to_f16,
};
pub use quantize::{quantize_row_q8_0, quantize_row_q8_k};
pub use random::random_blocks;

/// Errors from layout computations and (de)quantization.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum QuantError {
    /// The GGML type id is not one this crate knows.
    #[error("unknown GGML type id {0}")]
    UnknownType(u32),
    /// The type is known but (de)quantization is not implemented for it.
    #[error("GGML type {0} is not supported")]
    Unsupported(&'static str),
    /// A row length is not a multiple of the block size.
    #[error("row of {n} elements is not a multiple of {ty}'s block size {block}")]
    RowNotBlockMultiple {
        /// Type name.
        ty: &'static str,
        /// Elements in the row.
        n: usize,
        /// Block size of the type.
        block: usize,
    },
    /// The byte size of `n` elements does not fit in `usize`.
    #[error("{ty}: byte size of {n} elements overflows usize")]
    Overflow {
        /// Type name.
        ty: &'static str,
        /// Elements requested.
        n: usize,
    },
    /// A byte buffer has the wrong length for the requested elements.
    #[error("{ty}: {n} elements need {expected} bytes, got {got}")]
    WrongByteLength {
        /// Type name.
        ty: &'static str,
        /// Elements requested.
        n: usize,
        /// Bytes required.
        expected: usize,
        /// Bytes supplied.
        got: usize,
    },
}

/// A GGML element type, with the numeric ids used in GGUF files.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
#[repr(u32)]
#[allow(non_camel_case_types)]
pub enum GgmlType {
    /// IEEE binary32.
    F32 = 0,
    /// IEEE binary16.
    F16 = 1,
    /// 32-element blocks: f16 scale + 4-bit values (offset 8).
    Q4_0 = 2,
    /// 32-element blocks: f16 scale, f16 min + 4-bit values.
    Q4_1 = 3,
    /// 32-element blocks: f16 scale + 5-bit values (offset 16).
    Q5_0 = 6,
    /// 32-element blocks: f16 scale, f16 min + 5-bit values.
    Q5_1 = 7,
    /// 32-element blocks: f16 scale + int8 values.
    Q8_0 = 8,
    /// 32-element blocks: f16 scale, f16 scaled sum + int8 values.
    Q8_1 = 9,
    /// 256-element super-blocks, 2-bit.
    Q2_K = 10,
    /// 256-element super-blocks, 3-bit.
    Q3_K = 11,
    /// 256-element super-blocks of 8×32, 6-bit scales and mins, 4-bit values.
    Q4_K = 12,
    /// 256-element super-blocks of 8×32, 6-bit scales and mins, 5-bit values.
    Q5_K = 13,
    /// 256-element super-blocks of 16×16, int8 scales, 6-bit values.
    Q6_K = 14,
    /// 256-element super-blocks: f32 scale, int8 values, 16 block sums.
    Q8_K = 15,
    /// 8-bit signed integer.
    I8 = 24,
    /// 16-bit signed integer.
    I16 = 25,
    /// 32-bit signed integer.
    I32 = 26,
    /// 64-bit signed integer.
    I64 = 27,
    /// IEEE binary64.
    F64 = 28,
    /// bfloat16.
    BF16 = 30,
}

impl GgmlType {
    /// All types this crate knows, in id order.
    pub const ALL: [GgmlType; 20] = [
        GgmlType::F32,
        GgmlType::F16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q8_1,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
        GgmlType::Q8_K,
        GgmlType::I8,
        GgmlType::I16,
        GgmlType::I32,
        GgmlType::I64,
        GgmlType::F64,
        GgmlType::BF16,
    ];

    /// Looks up a type by its GGUF id.
    pub fn from_id(id: u32) -> Result<GgmlType, QuantError> {
        GgmlType::ALL
            .iter()
            .copied()
            .find(|t| *t as u32 == id)
            .ok_or(QuantError::UnknownType(id))
    }

    /// The type's name as ggml spells it (`"Q4_K"`, `"F32"`).
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "F32",
            GgmlType::F16 => "F16",
            GgmlType::Q4_0 => "Q4_0",
            GgmlType::Q4_1 => "Q4_1",
            GgmlType::Q5_0 => "Q5_0",
            GgmlType::Q5_1 => "Q5_1",
            GgmlType::Q8_0 => "Q8_0",
            GgmlType::Q8_1 => "Q8_1",
            GgmlType::Q2_K => "Q2_K",
            GgmlType::Q3_K => "Q3_K",
            GgmlType::Q4_K => "Q4_K",
            GgmlType::Q5_K => "Q5_K",
            GgmlType::Q6_K => "Q6_K",
            GgmlType::Q8_K => "Q8_K",
            GgmlType::I8 => "I8",
            GgmlType::I16 => "I16",
            GgmlType::I32 => "I32",
            GgmlType::I64 => "I64",
            GgmlType::F64 => "F64",
            GgmlType::BF16 => "BF16",
        }
    }

    /// Elements per block (1 for plain scalar types).
    pub const fn block_size(self) -> usize {
        match self {
            GgmlType::Q4_0
            | GgmlType::Q4_1
            | GgmlType::Q5_0
            | GgmlType::Q5_1
            | GgmlType::Q8_0
            | GgmlType::Q8_1 => 32,
            GgmlType::Q2_K
            | GgmlType::Q3_K
            | GgmlType::Q4_K
            | GgmlType::Q5_K
            | GgmlType::Q6_K
            | GgmlType::Q8_K => 256,
            _ => 1,
        }
    }

    /// Bytes per block.
    pub const fn type_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::I32 => 4,
            GgmlType::F16 | GgmlType::BF16 | GgmlType::I16 => 2,
            GgmlType::I8 => 1,
            GgmlType::I64 | GgmlType::F64 => 8,
            GgmlType::Q4_0 => 2 + 16,
            GgmlType::Q4_1 => 2 + 2 + 16,
            GgmlType::Q5_0 => 2 + 4 + 16,
            GgmlType::Q5_1 => 2 + 2 + 4 + 16,
            GgmlType::Q8_0 => 2 + 32,
            // ggml's block_q8_1 is two f16 (d, s) + 32 int8 = 36 bytes (gguf-py's table
            // still says 40, but no file stores Q8_1; ggml itself is authoritative).
            GgmlType::Q8_1 => 2 + 2 + 32,
            GgmlType::Q2_K => 256 / 16 + 256 / 4 + 2 + 2,
            GgmlType::Q3_K => 256 / 8 + 256 / 4 + 12 + 2,
            GgmlType::Q4_K => 2 + 2 + 12 + 256 / 2,
            GgmlType::Q5_K => 2 + 2 + 12 + 256 / 8 + 256 / 2,
            GgmlType::Q6_K => 256 / 2 + 256 / 4 + 256 / 16 + 2,
            GgmlType::Q8_K => 4 + 256 + 2 * 256 / 16,
        }
    }

    /// True for block-quantized formats (block size > 1).
    pub const fn is_quantized(self) -> bool {
        self.block_size() > 1
    }

    /// Bytes taken by a row of `n` elements, or an error if `n` is not a whole number of blocks.
    pub fn row_bytes(self, n: usize) -> Result<usize, QuantError> {
        let b = self.block_size();
        let tail = n % b;
        if tail != 0 {
            return Err(QuantError::RowNotBlockMultiple {
                ty: self.name(),
                n,
                block: b,
            });
        }
        (n / b)
            .checked_mul(self.type_size())
            .ok_or(QuantError::Overflow { ty: self.name(), n })
    }
}

impl std::fmt::Display for GgmlType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

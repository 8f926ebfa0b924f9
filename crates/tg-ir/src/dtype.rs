use serde::{Deserialize, Serialize};
use tg_quant::GgmlType;

/// Element type of a tensor.
///
/// `Quant` tensors are constants (weights) stored in a GGML block format; their logical
/// shape is `[rows, row_len]` with `row_len` a multiple of the block size. Only a few ops
/// (matmul with the weight as right operand, gather) read them directly; everything else
/// sees f32 values.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum DType {
    /// 32-bit float.
    F32,
    /// 32-bit signed integer (token ids, positions).
    I32,
    /// Boolean, one byte per element (0 or 1).
    Bool,
    /// GGML block-quantized (or F16/BF16) storage; logically f32 values.
    Quant(#[serde(with = "ggml_type_serde")] GgmlType),
}

impl DType {
    /// Bytes taken by `n` elements in a contiguous row (whole blocks for quantized types);
    /// `None` when `n` is not a whole number of blocks or the size overflows `usize`.
    pub fn bytes_for(self, n: usize) -> Option<usize> {
        match self {
            DType::F32 | DType::I32 => n.checked_mul(4),
            DType::Bool => Some(n),
            DType::Quant(t) => t.row_bytes(n).ok(),
        }
    }

    /// Bytes of a contiguous tensor of this dtype and `shape`: elements × element bytes, or
    /// for quantized storage rows (all dimensions but the last) × the bytes of one row.
    /// `None` when the size overflows `usize`, a quantized row is not a whole number of
    /// blocks, or a quantized shape has no row dimension. Every node of a built or verified
    /// graph has a size here of at most [`crate::MAX_TENSOR_BYTES`].
    pub fn tensor_bytes(self, shape: &[usize]) -> Option<usize> {
        match self {
            DType::Quant(t) => {
                let (&row, outer) = shape.split_last()?;
                let row_bytes = t.row_bytes(row).ok()?;
                crate::shape::checked_numel(outer)?.checked_mul(row_bytes)
            }
            d => d.bytes_for(crate::shape::checked_numel(shape)?),
        }
    }

    /// The value type seen by arithmetic: quantized storage reads as F32.
    pub fn value_type(self) -> DType {
        match self {
            DType::Quant(_) => DType::F32,
            d => d,
        }
    }

    /// True for floating-point value types (F32 and quantized storage).
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::Quant(_))
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DType::F32 => f.write_str("f32"),
            DType::I32 => f.write_str("i32"),
            DType::Bool => f.write_str("bool"),
            DType::Quant(t) => write!(f, "{}", t.name().to_lowercase()),
        }
    }
}

mod ggml_type_serde {
    use serde::{Deserialize, Deserializer, Serializer};
    use tg_quant::GgmlType;

    pub fn serialize<S: Serializer>(t: &GgmlType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(t.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<GgmlType, D::Error> {
        let name = String::deserialize(d)?;
        GgmlType::ALL.iter().copied().find(|t| t.name().eq_ignore_ascii_case(&name)).ok_or_else(|| serde::de::Error::custom(format!("unknown GGML type {name}")))
    }
}

//! Element types of safetensors tensors.

use std::fmt;
use std::str::FromStr;

/// The element type of a tensor, as named by the `"dtype"` field of the header.
///
/// Covers every name of the safetensors format: the byte types, the 8-bit floats, and the
/// sub-byte floats `F4`, `F6_E2M3` and `F6_E3M2` (packed; a tensor of those must hold a
/// whole number of bytes). All multi-byte types are little-endian.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dtype {
    /// `BOOL`: one byte per element, 0 or 1.
    Bool,
    /// `F4`: 4-bit float (E2M1), two per byte.
    F4,
    /// `F6_E2M3`: 6-bit float, 2 exponent and 3 mantissa bits, packed.
    F6E2M3,
    /// `F6_E3M2`: 6-bit float, 3 exponent and 2 mantissa bits, packed.
    F6E3M2,
    /// `U8`: unsigned 8-bit integer.
    U8,
    /// `I8`: signed 8-bit integer.
    I8,
    /// `F8_E5M2`: 8-bit float, 5 exponent and 2 mantissa bits.
    F8E5M2,
    /// `F8_E4M3`: 8-bit float, 4 exponent and 3 mantissa bits.
    F8E4M3,
    /// `F8_E8M0`: 8-bit power-of-two scale (exponent only).
    F8E8M0,
    /// `I16`: signed 16-bit integer.
    I16,
    /// `U16`: unsigned 16-bit integer.
    U16,
    /// `F16`: IEEE half precision.
    F16,
    /// `BF16`: bfloat16.
    BF16,
    /// `I32`: signed 32-bit integer.
    I32,
    /// `U32`: unsigned 32-bit integer.
    U32,
    /// `F32`: IEEE single precision.
    F32,
    /// `C64`: complex number of two `F32` (real, imaginary).
    C64,
    /// `F64`: IEEE double precision.
    F64,
    /// `I64`: signed 64-bit integer.
    I64,
    /// `U64`: unsigned 64-bit integer.
    U64,
}

impl Dtype {
    /// Every dtype, in the order of the enum.
    pub const ALL: [Dtype; 20] = [
        Dtype::Bool,
        Dtype::F4,
        Dtype::F6E2M3,
        Dtype::F6E3M2,
        Dtype::U8,
        Dtype::I8,
        Dtype::F8E5M2,
        Dtype::F8E4M3,
        Dtype::F8E8M0,
        Dtype::I16,
        Dtype::U16,
        Dtype::F16,
        Dtype::BF16,
        Dtype::I32,
        Dtype::U32,
        Dtype::F32,
        Dtype::C64,
        Dtype::F64,
        Dtype::I64,
        Dtype::U64,
    ];

    /// The name used in safetensors headers (e.g. `"F32"`, `"F8_E4M3"`).
    pub const fn name(self) -> &'static str {
        match self {
            Dtype::Bool => "BOOL",
            Dtype::F4 => "F4",
            Dtype::F6E2M3 => "F6_E2M3",
            Dtype::F6E3M2 => "F6_E3M2",
            Dtype::U8 => "U8",
            Dtype::I8 => "I8",
            Dtype::F8E5M2 => "F8_E5M2",
            Dtype::F8E4M3 => "F8_E4M3",
            Dtype::F8E8M0 => "F8_E8M0",
            Dtype::I16 => "I16",
            Dtype::U16 => "U16",
            Dtype::F16 => "F16",
            Dtype::BF16 => "BF16",
            Dtype::I32 => "I32",
            Dtype::U32 => "U32",
            Dtype::F32 => "F32",
            Dtype::C64 => "C64",
            Dtype::F64 => "F64",
            Dtype::I64 => "I64",
            Dtype::U64 => "U64",
        }
    }

    /// Parses a header dtype name (exact, case-sensitive, as the format requires).
    pub fn from_name(name: &str) -> Option<Dtype> {
        Dtype::ALL.into_iter().find(|d| d.name() == name)
    }

    /// Bits per element (4 and 6 for the packed sub-byte floats).
    pub const fn bits(self) -> usize {
        match self {
            Dtype::F4 => 4,
            Dtype::F6E2M3 | Dtype::F6E3M2 => 6,
            Dtype::Bool | Dtype::U8 | Dtype::I8 | Dtype::F8E5M2 | Dtype::F8E4M3 | Dtype::F8E8M0 => {
                8
            }
            Dtype::I16 | Dtype::U16 | Dtype::F16 | Dtype::BF16 => 16,
            Dtype::I32 | Dtype::U32 | Dtype::F32 => 32,
            Dtype::C64 | Dtype::F64 | Dtype::I64 | Dtype::U64 => 64,
        }
    }

    /// Bytes per element, or `None` for the packed sub-byte types.
    pub const fn byte_size(self) -> Option<usize> {
        if self.bits().is_multiple_of(8) {
            Some(self.bits() / 8)
        } else {
            None
        }
    }

    /// Bytes taken by `n_elements` elements, or `None` when that is not a whole number of
    /// bytes (sub-byte types) or does not fit in `u64`.
    pub fn bytes_for(self, n_elements: u64) -> Option<u64> {
        let bits = u128::from(n_elements) * self.bits() as u128;
        if !bits.is_multiple_of(8) {
            return None;
        }
        u64::try_from(bits / 8).ok()
    }
}

impl fmt::Display for Dtype {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Error of [`Dtype::from_str`]: the string is not a safetensors dtype name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown safetensors dtype {0:?}")]
pub struct UnknownDtype(pub String);

impl FromStr for Dtype {
    type Err = UnknownDtype;

    fn from_str(s: &str) -> Result<Dtype, UnknownDtype> {
        Dtype::from_name(s).ok_or_else(|| UnknownDtype(s.to_string()))
    }
}

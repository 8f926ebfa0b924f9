//! `#[repr(C)]` views of the GGML block formats.
//!
//! Each struct has exactly the size and field order of the corresponding ggml block, with
//! no padding, so a slice of raw tensor bytes can be viewed as a slice of blocks with
//! [`Block::cast_slice`] (which checks length and alignment). All multi-byte fields are
//! little-endian in files; the casts are therefore only offered on little-endian hosts.
//!
//! Half-precision fields are stored as their raw `u16` bit patterns; convert them with
//! [`f16_to_f32`](crate::f16_to_f32).
//!
//! Element order inside the K-quant super-blocks is described on each struct; the
//! reference dequantizers in [`crate::dequant`] are the executable definition.

use crate::GgmlType;

/// Elements per K-quant super-block.
pub const QK_K: usize = 256;
/// Elements per block of the legacy 32-element formats (Q4_0 … Q8_1).
pub const QK32: usize = 32;
/// Bytes of packed 6-bit scales/mins in Q4_K and Q5_K (and of the 6-bit scales in Q3_K).
pub const K_SCALE_SIZE: usize = 12;

/// A plain-old-data block type whose layout matches a ggml block byte for byte.
///
/// # Safety
/// Implementors must be `#[repr(C)]`, contain only integer fields and arrays of them, have
/// no padding, and have `size_of::<Self>() == Self::TYPE.type_size()`. Every bit pattern
/// must be a valid value.
pub unsafe trait Block: Copy + Sized + 'static {
    /// The GGML type this block encodes.
    const TYPE: GgmlType;
    /// Elements per block.
    const ELEMENTS: usize;

    /// Views `bytes` as a slice of blocks. Returns `None` when the length is not a whole
    /// number of blocks, the pointer is not aligned for `Self`, or the host is big-endian.
    fn cast_slice(bytes: &[u8]) -> Option<&[Self]> {
        let size = std::mem::size_of::<Self>();
        let tail = bytes.len() % size;
        let misalign = (bytes.as_ptr() as usize) % std::mem::align_of::<Self>();
        if cfg!(target_endian = "big") || tail != 0 || misalign != 0 {
            return None;
        }
        // SAFETY: length and alignment are checked above; `Self` is POD with no padding and
        // every bit pattern valid (trait contract), and the lifetime is tied to `bytes`.
        Some(unsafe {
            std::slice::from_raw_parts(bytes.as_ptr().cast::<Self>(), bytes.len() / size)
        })
    }

    /// Reads one block from the start of `bytes` (any alignment). `None` if too short.
    fn read(bytes: &[u8]) -> Option<Self> {
        let size = std::mem::size_of::<Self>();
        if cfg!(target_endian = "big") || bytes.len() < size {
            return None;
        }
        // SAFETY: at least `size` bytes are readable; unaligned read of a POD type whose
        // every bit pattern is valid.
        Some(unsafe { std::ptr::read_unaligned(bytes.as_ptr().cast::<Self>()) })
    }

    /// The block's bytes.
    fn as_bytes(&self) -> &[u8] {
        // SAFETY: POD without padding, so all `size_of::<Self>()` bytes are initialized.
        unsafe {
            std::slice::from_raw_parts(
                (self as *const Self).cast::<u8>(),
                std::mem::size_of::<Self>(),
            )
        }
    }
}

/// Q4_0: 32 elements, `x[i] = d * (q[i] - 8)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// 4-bit quants: byte `j` holds element `j` in its low nibble and element `j + 16` in
    /// its high nibble.
    pub qs: [u8; QK32 / 2],
}

/// Q4_1: 32 elements, `x[i] = d * q[i] + m`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum (offset), f16 bits.
    pub m: u16,
    /// 4-bit quants, packed as in [`BlockQ4_0`].
    pub qs: [u8; QK32 / 2],
}

/// Q5_0: 32 elements, `x[i] = d * (q[i] - 16)` with 5-bit `q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Fifth bits: bit `i` of this little-endian u32 is bit 4 of element `i`.
    pub qh: [u8; 4],
    /// Low 4 bits, packed as in [`BlockQ4_0`] (element `j` low nibble, `j + 16` high).
    pub qs: [u8; QK32 / 2],
}

/// Q5_1: 32 elements, `x[i] = d * q[i] + m` with 5-bit `q`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Minimum (offset), f16 bits.
    pub m: u16,
    /// Fifth bits, as in [`BlockQ5_0`].
    pub qh: [u8; 4],
    /// Low 4 bits, as in [`BlockQ5_0`].
    pub qs: [u8; QK32 / 2],
}

/// Q8_0: 32 elements, `x[i] = q[i] * d`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ8_0 {
    /// Scale, f16 bits.
    pub d: u16,
    /// Signed 8-bit quants, in element order.
    pub qs: [i8; QK32],
}

/// Q8_1 (activation format of ggml): 32 elements, `x[i] = q[i] * d`, with `s = d * sum(q)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ8_1 {
    /// Scale, f16 bits.
    pub d: u16,
    /// `d * sum(qs)`, f16 bits.
    pub s: u16,
    /// Signed 8-bit quants, in element order.
    pub qs: [i8; QK32],
}

/// Q2_K: 256 elements in 16 sub-blocks of 16; `x = d * (sc & 15) * q - dmin * (sc >> 4)`.
///
/// Element `e = 128*h + 32*s + j` (`h` in 0..2, `s` in 0..4, `j` in 0..32) is
/// `(qs[32*h + j] >> (2*s)) & 3`, and uses `scales[e / 16]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ2K {
    /// Per sub-block: low nibble = 4-bit scale, high nibble = 4-bit min.
    pub scales: [u8; QK_K / 16],
    /// 2-bit quants, four per byte (see the element order above).
    pub qs: [u8; QK_K / 4],
    /// Super-block scale for the scales, f16 bits.
    pub d: u16,
    /// Super-block scale for the mins, f16 bits.
    pub dmin: u16,
}

/// Q3_K: 256 elements in 16 sub-blocks of 16; `x = d * (scale - 32) * (q - 4*!hbit)`.
///
/// Element `e = 128*h + 32*s + j` has low bits `(qs[32*h + j] >> (2*s)) & 3` and high bit
/// `(hmask[e % 32] >> (e / 32)) & 1`; the value is `low - 4` when the high bit is **clear**
/// and `low` when it is set. Scales: see [`unpack_q3k_scales`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ3K {
    /// High bits: bit `b` of `hmask[j]` belongs to element `32*b + j`.
    pub hmask: [u8; QK_K / 8],
    /// Low 2 bits, four per byte (see the element order above).
    pub qs: [u8; QK_K / 4],
    /// Sixteen 6-bit scales (biased by 32), packed; see [`unpack_q3k_scales`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Super-block scale, f16 bits.
    pub d: u16,
}

/// Q4_K: 256 elements in 8 sub-blocks of 32; `x = d * sc * q - dmin * m`.
///
/// Element `e = 64*c + 32*h + j` (`c` in 0..4, `h` in 0..2) is `(qs[32*c + j] >> (4*h)) & 15`
/// and belongs to sub-block `e / 32 = 2*c + h`, whose 6-bit `(sc, m)` come from
/// [`get_scale_min_k4`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ4K {
    /// Super-block scale for the scales, f16 bits.
    pub d: u16,
    /// Super-block scale for the mins, f16 bits.
    pub dmin: u16,
    /// Eight 6-bit scales and eight 6-bit mins, packed; see [`get_scale_min_k4`].
    pub scales: [u8; K_SCALE_SIZE],
    /// 4-bit quants (see the element order above).
    pub qs: [u8; QK_K / 2],
}

/// Q5_K: 256 elements in 8 sub-blocks of 32; `x = d * sc * q - dmin * m` with 5-bit `q`.
///
/// Low 4 bits as in [`BlockQ4K`]; bit 4 of element `e` is `(qh[e % 32] >> (e / 32)) & 1`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ5K {
    /// Super-block scale for the scales, f16 bits.
    pub d: u16,
    /// Super-block scale for the mins, f16 bits.
    pub dmin: u16,
    /// Scales and mins, packed as in [`BlockQ4K`].
    pub scales: [u8; K_SCALE_SIZE],
    /// Fifth bits: bit `b` of `qh[j]` belongs to element `32*b + j`.
    pub qh: [u8; QK_K / 8],
    /// Low 4 bits, as in [`BlockQ4K`].
    pub qs: [u8; QK_K / 2],
}

/// Q6_K: 256 elements in 16 sub-blocks of 16; `x = d * scales[e / 16] * (q - 32)`.
///
/// Element `e = 128*h + 64*n + k` (`h`, `n` in 0..2, `k` in 0..64) has low 4 bits
/// `(ql[64*h + k] >> (4*n)) & 15`; element `e = 128*h + 32*s + j` (`s` in 0..4) has high
/// 2 bits `(qh[32*h + j] >> (2*s)) & 3`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(C)]
pub struct BlockQ6K {
    /// Low 4 bits of the quants (see the element order above).
    pub ql: [u8; QK_K / 2],
    /// High 2 bits of the quants (see the element order above).
    pub qh: [u8; QK_K / 4],
    /// Signed 8-bit sub-block scales.
    pub scales: [i8; QK_K / 16],
    /// Super-block scale, f16 bits.
    pub d: u16,
}

/// Q8_K (activation format of the K-quant dot products): `x[i] = d * qs[i]`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[repr(C)]
pub struct BlockQ8K {
    /// Scale (f32, not f16).
    pub d: f32,
    /// Signed 8-bit quants, in element order.
    pub qs: [i8; QK_K],
    /// Sum of each group of 16 quants: `bsums[g] = sum(qs[16*g .. 16*g + 16])`.
    pub bsums: [i16; QK_K / 16],
}

macro_rules! impl_block {
    ($($t:ty => $ty:ident),* $(,)?) => {$(
        // SAFETY: repr(C), integer fields only (f32 in Q8_K: every bit pattern valid), no
        // padding — checked by the size assertion below.
        unsafe impl Block for $t {
            const TYPE: GgmlType = GgmlType::$ty;
            const ELEMENTS: usize = GgmlType::$ty.block_size();
        }
        const _: () = assert!(std::mem::size_of::<$t>() == GgmlType::$ty.type_size());
    )*};
}

impl_block!(
    BlockQ4_0 => Q4_0,
    BlockQ4_1 => Q4_1,
    BlockQ5_0 => Q5_0,
    BlockQ5_1 => Q5_1,
    BlockQ8_0 => Q8_0,
    BlockQ8_1 => Q8_1,
    BlockQ2K => Q2_K,
    BlockQ3K => Q3_K,
    BlockQ4K => Q4_K,
    BlockQ5K => Q5_K,
    BlockQ6K => Q6_K,
    BlockQ8K => Q8_K,
);

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K / Q5_K block.
///
/// Bytes 0..4 hold scales 0..4 in their low 6 bits, bytes 4..8 mins 0..4 likewise; for
/// `j >= 4` the low 4 bits come from the nibbles of byte `8 + j - 4` (scale low, min high)
/// and the top 2 bits from the spare top bits of bytes `j - 4` (scale) and `j` (min).
#[inline]
pub fn get_scale_min_k4(j: usize, scales: &[u8; K_SCALE_SIZE]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        let sc = (scales[j + 4] & 0x0F) | ((scales[j - 4] >> 6) << 4);
        let m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        (sc, m)
    }
}

/// The sixteen signed scales (`raw - 32`, in -32..32) of a Q3_K block.
///
/// Scale `i` has low 4 bits from byte `i % 8` (low nibble for `i < 8`, high nibble
/// otherwise) and high 2 bits from bits `2*(i/4)..` of byte `8 + i % 4`.
#[inline]
pub fn unpack_q3k_scales(scales: &[u8; K_SCALE_SIZE]) -> [i8; 16] {
    let mut out = [0i8; 16];
    for (i, o) in out.iter_mut().enumerate() {
        let low = (scales[i % 8] >> (4 * (i / 8))) & 0x0F;
        let high = (scales[8 + i % 4] >> (2 * (i / 4))) & 0x03;
        *o = ((low | (high << 4)) as i8) - 32;
    }
    out
}

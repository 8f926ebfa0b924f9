//! Reference dequantization: plain scalar code, bit-exact with gguf-py.
//!
//! Formulas follow `gguf.quants` (f32 arithmetic, scales converted from f16 exactly).
//! Note for kernel writers: an f16 scale has 11 significant bits and the sub-block scales
//! and quants at most 8 and 6, so all partial products are exact in f32 and each output is
//! the single correctly-rounded value of the exact `d*sc*q - dmin*m` (or `d*q + m`).
//! Consequently any association order, and fused multiply-add, give the same bits; only
//! approximations (e.g. pre-rounding `d*sc` to f16, or summing in another precision) break
//! bit-exactness.

use crate::blocks::*;
use crate::{GgmlType, QuantError};

/// Converts IEEE binary16 bits to f32 exactly (NaN payloads are kept, not quieted).
#[inline]
pub fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h & 0x8000) << 16;
    let exp = u32::from((h >> 10) & 0x1F);
    let man = u32::from(h & 0x03FF);
    let bits = match exp {
        0 if man == 0 => sign,
        0 => {
            // Subnormal: man * 2^-24. Normalize so the leading one lands on bit 10.
            let shift = man.leading_zeros() - 21; // 1..=10
            let e = 127 - 14 - shift;
            sign | (e << 23) | (((man << shift) & 0x03FF) << 13)
        }
        31 => sign | 0x7F80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// Converts bfloat16 bits to f32 (exact: the bits become the top half of the f32).
#[inline]
pub fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits(u32::from(h) << 16)
}

/// Converts f32 to IEEE binary16 bits, rounding to nearest even (as ggml and numpy do).
#[inline]
pub fn f32_to_f16(x: f32) -> u16 {
    half::f16::from_f32(x).to_bits()
}

fn le_u16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn le_f16(b: &[u8], at: usize) -> f32 {
    f16_to_f32(le_u16(b, at))
}

/// Dequantizes one block of `ty` (`block.len() == ty.type_size()`) into
/// `out` (`out.len() == ty.block_size()`).
pub fn dequantize_block(ty: GgmlType, block: &[u8], out: &mut [f32]) -> Result<(), QuantError> {
    check_supported(ty)?;
    if block.len() != ty.type_size() {
        return Err(QuantError::WrongByteLength {
            ty: ty.name(),
            n: ty.block_size(),
            expected: ty.type_size(),
            got: block.len(),
        });
    }
    if out.len() != ty.block_size() {
        return Err(QuantError::RowNotBlockMultiple {
            ty: ty.name(),
            n: out.len(),
            block: ty.block_size(),
        });
    }
    dequant_unchecked(ty, block, out);
    Ok(())
}

/// Dequantizes a run of `dst.len()` elements of type `ty` stored in `src`.
///
/// `dst.len()` must be a multiple of the block size and `src.len()` must be exactly the
/// matching byte count ([`GgmlType::row_bytes`]). Supported: F32, F16, BF16, Q4_0, Q4_1,
/// Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, Q8_K.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), QuantError> {
    check_supported(ty)?;
    let expected = ty.row_bytes(dst.len())?;
    if src.len() != expected {
        return Err(QuantError::WrongByteLength {
            ty: ty.name(),
            n: dst.len(),
            expected,
            got: src.len(),
        });
    }
    let (bs, ts) = (ty.block_size(), ty.type_size());
    match ty {
        // Scalar formats: skip the per-block dispatch.
        GgmlType::F32 => {
            for (o, b) in dst.iter_mut().zip(src.chunks_exact(4)) {
                *o = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        GgmlType::F16 => {
            for (o, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = f16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        GgmlType::BF16 => {
            for (o, b) in dst.iter_mut().zip(src.chunks_exact(2)) {
                *o = bf16_to_f32(u16::from_le_bytes([b[0], b[1]]));
            }
        }
        _ => {
            for (o, b) in dst.chunks_exact_mut(bs).zip(src.chunks_exact(ts)) {
                dequant_unchecked(ty, b, o);
            }
        }
    }
    Ok(())
}

/// Dequantizes a whole tensor given as raw bytes into a new vector of `n_elements` floats.
pub fn dequantize_to_vec(
    ty: GgmlType,
    src: &[u8],
    n_elements: usize,
) -> Result<Vec<f32>, QuantError> {
    let mut out = vec![0f32; n_elements];
    dequantize_row(ty, src, &mut out)?;
    Ok(out)
}

/// True when [`dequantize_row`] supports `ty`.
pub fn can_dequantize(ty: GgmlType) -> bool {
    check_supported(ty).is_ok()
}

fn check_supported(ty: GgmlType) -> Result<(), QuantError> {
    match ty {
        GgmlType::F32
        | GgmlType::F16
        | GgmlType::BF16
        | GgmlType::Q4_0
        | GgmlType::Q4_1
        | GgmlType::Q5_0
        | GgmlType::Q5_1
        | GgmlType::Q8_0
        | GgmlType::Q2_K
        | GgmlType::Q3_K
        | GgmlType::Q4_K
        | GgmlType::Q5_K
        | GgmlType::Q6_K
        | GgmlType::Q8_K => Ok(()),
        _ => Err(QuantError::Unsupported(ty.name())),
    }
}

/// `b.len() == ty.type_size()`, `out.len() == ty.block_size()`, `ty` supported.
fn dequant_unchecked(ty: GgmlType, b: &[u8], out: &mut [f32]) {
    match ty {
        GgmlType::F32 => out[0] = f32::from_le_bytes([b[0], b[1], b[2], b[3]]),
        GgmlType::F16 => out[0] = le_f16(b, 0),
        GgmlType::BF16 => out[0] = bf16_to_f32(le_u16(b, 0)),
        GgmlType::Q4_0 => q4_0(b, out),
        GgmlType::Q4_1 => q4_1(b, out),
        GgmlType::Q5_0 => q5_0(b, out),
        GgmlType::Q5_1 => q5_1(b, out),
        GgmlType::Q8_0 => q8_0(b, out),
        GgmlType::Q2_K => q2_k(b, out),
        GgmlType::Q3_K => q3_k(b, out),
        GgmlType::Q4_K => q4_k(b, out),
        GgmlType::Q5_K => q5_k(b, out),
        GgmlType::Q6_K => q6_k(b, out),
        GgmlType::Q8_K => q8_k(b, out),
        _ => unreachable!("checked by check_supported"),
    }
}

// Byte offsets inside the blocks (see the structs in `blocks`).

fn q4_0(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let qs = &b[2..18];
    for j in 0..16 {
        out[j] = d * ((qs[j] & 0x0F) as i32 - 8) as f32;
        out[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
    }
}

fn q4_1(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let m = le_f16(b, 2);
    let qs = &b[4..20];
    for j in 0..16 {
        out[j] = d * (qs[j] & 0x0F) as f32 + m;
        out[j + 16] = d * (qs[j] >> 4) as f32 + m;
    }
}

fn q5_0(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let qh = u32::from_le_bytes([b[2], b[3], b[4], b[5]]);
    let qs = &b[6..22];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) as u32 | (((qh >> j) & 1) << 4);
        let hi = (qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
        out[j] = d * (lo as i32 - 16) as f32;
        out[j + 16] = d * (hi as i32 - 16) as f32;
    }
}

fn q5_1(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let m = le_f16(b, 2);
    let qh = u32::from_le_bytes([b[4], b[5], b[6], b[7]]);
    let qs = &b[8..24];
    for j in 0..16 {
        let lo = (qs[j] & 0x0F) as u32 | (((qh >> j) & 1) << 4);
        let hi = (qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
        out[j] = d * lo as f32 + m;
        out[j + 16] = d * hi as f32 + m;
    }
}

fn q8_0(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    for (o, &q) in out.iter_mut().zip(&b[2..34]) {
        *o = (q as i8) as f32 * d;
    }
}

fn q2_k(b: &[u8], out: &mut [f32]) {
    let scales = &b[0..16];
    let qs = &b[16..80];
    let d = le_f16(b, 80);
    let dmin = le_f16(b, 82);
    for (e, o) in out.iter_mut().enumerate() {
        let (h, s, j) = (e / 128, (e / 32) % 4, e % 32);
        let q = (qs[32 * h + j] >> (2 * s)) & 3;
        let sc = scales[e / 16];
        let dl = d * (sc & 0x0F) as f32;
        let ml = dmin * (sc >> 4) as f32;
        *o = dl * q as f32 - ml;
    }
}

fn q3_k(b: &[u8], out: &mut [f32]) {
    let hmask = &b[0..32];
    let qs = &b[32..96];
    let mut packed = [0u8; K_SCALE_SIZE];
    packed.copy_from_slice(&b[96..108]);
    let scales = unpack_q3k_scales(&packed);
    let d = le_f16(b, 108);
    for (e, o) in out.iter_mut().enumerate() {
        let (h, s, j) = (e / 128, (e / 32) % 4, e % 32);
        let low = ((qs[32 * h + j] >> (2 * s)) & 3) as i32;
        let high = (hmask[e % 32] >> (e / 32)) & 1;
        let q = if high == 0 { low - 4 } else { low };
        let dl = d * scales[e / 16] as f32;
        *o = dl * q as f32;
    }
}

fn k4_scales(b: &[u8]) -> [u8; K_SCALE_SIZE] {
    let mut s = [0u8; K_SCALE_SIZE];
    s.copy_from_slice(&b[4..16]);
    s
}

fn q4_k(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let dmin = le_f16(b, 2);
    let scales = k4_scales(b);
    let qs = &b[16..144];
    for (e, o) in out.iter_mut().enumerate() {
        let (c, h, j) = (e / 64, (e / 32) % 2, e % 32);
        let q = (qs[32 * c + j] >> (4 * h)) & 0x0F;
        let (sc, m) = get_scale_min_k4(e / 32, &scales);
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        *o = dl * q as f32 - ml;
    }
}

fn q5_k(b: &[u8], out: &mut [f32]) {
    let d = le_f16(b, 0);
    let dmin = le_f16(b, 2);
    let scales = k4_scales(b);
    let qh = &b[16..48];
    let qs = &b[48..176];
    for (e, o) in out.iter_mut().enumerate() {
        let (c, h, j) = (e / 64, (e / 32) % 2, e % 32);
        let low = (qs[32 * c + j] >> (4 * h)) & 0x0F;
        let high = (qh[e % 32] >> (e / 32)) & 1;
        let q = low | (high << 4);
        let (sc, m) = get_scale_min_k4(e / 32, &scales);
        let dl = d * sc as f32;
        let ml = dmin * m as f32;
        *o = dl * q as f32 - ml;
    }
}

fn q6_k(b: &[u8], out: &mut [f32]) {
    let ql = &b[0..128];
    let qh = &b[128..192];
    let scales = &b[192..208];
    let d = le_f16(b, 208);
    for (e, o) in out.iter_mut().enumerate() {
        let (h, n, k) = (e / 128, (e / 64) % 2, e % 64);
        let low = (ql[64 * h + k] >> (4 * n)) & 0x0F;
        let (s, j) = ((e / 32) % 4, e % 32);
        let high = (qh[32 * h + j] >> (2 * s)) & 3;
        let q = (low | (high << 4)) as i32 - 32;
        let dl = d * (scales[e / 16] as i8) as f32;
        *o = dl * q as f32;
    }
}

fn q8_k(b: &[u8], out: &mut [f32]) {
    let d = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    for (o, &q) in out.iter_mut().zip(&b[4..260]) {
        *o = d * (q as i8) as f32;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn f16_matches_half_crate_on_all_patterns() {
        for bits in 0..=u16::MAX {
            let ours = f16_to_f32(bits);
            let theirs = half::f16::from_bits(bits).to_f32();
            if theirs.is_nan() {
                assert!(ours.is_nan(), "{bits:#06x}");
                // payload kept, sign kept
                assert_eq!(ours.to_bits() >> 31, u32::from(bits >> 15));
                assert_eq!((ours.to_bits() >> 13) & 0x3FF, u32::from(bits & 0x3FF));
            } else {
                assert_eq!(ours.to_bits(), theirs.to_bits(), "{bits:#06x}");
            }
        }
    }

    #[test]
    fn f16_roundtrip_all_finite() {
        for bits in 0..=u16::MAX {
            if (bits & 0x7C00) != 0x7C00 {
                assert_eq!(f32_to_f16(f16_to_f32(bits)), bits, "{bits:#06x}");
            }
        }
    }

    #[test]
    fn rejects_bad_lengths_and_types() {
        let mut out = [f32::NAN; 32];
        assert!(matches!(
            dequantize_row(GgmlType::Q4_0, &[0u8; 17], &mut out),
            Err(QuantError::WrongByteLength {
                expected: 18,
                got: 17,
                ..
            })
        ));
        let mut odd = [0f32; 31];
        assert!(matches!(
            dequantize_row(GgmlType::Q4_0, &[0u8; 18], &mut odd),
            Err(QuantError::RowNotBlockMultiple {
                n: 31,
                block: 32,
                ..
            })
        ));
        assert!(matches!(
            dequantize_row(GgmlType::Q8_1, &[0u8; 36], &mut out),
            Err(QuantError::Unsupported("Q8_1"))
        ));
        assert!(matches!(
            dequantize_row(GgmlType::I32, &[0u8; 128], &mut out),
            Err(QuantError::Unsupported("I32"))
        ));
        assert!(dequantize_block(GgmlType::Q8_0, &[0u8; 34], &mut out[..31]).is_err());
    }

    #[test]
    fn empty_row_is_fine() {
        for ty in GgmlType::ALL {
            if can_dequantize(ty) {
                dequantize_row(ty, &[], &mut []).unwrap();
            }
        }
    }
}

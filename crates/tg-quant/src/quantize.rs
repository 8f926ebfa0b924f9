//! Reference quantizers (f32 -> blocks) for activation formats.

use crate::dequant::f32_to_f16;
use crate::{GgmlType, QuantError};

fn check(ty: GgmlType, src: &[f32], dst: &[u8]) -> Result<(), QuantError> {
    let expected = ty.row_bytes(src.len())?;
    if dst.len() != expected {
        return Err(QuantError::WrongByteLength {
            ty: ty.name(),
            n: src.len(),
            expected,
            got: dst.len(),
        });
    }
    Ok(())
}

/// Quantizes `src` to Q8_0 blocks in `dst`, as ggml's reference quantizer does:
/// `d = max|x| / 127` (stored as f16), `q = round_half_away(x / d)` computed as `x * (1/d)`
/// with the f32 `d` (before f16 rounding).
///
/// `src.len()` must be a multiple of 32 and `dst.len()` the matching byte count.
/// Non-finite inputs give unspecified (but memory-safe) quants.
pub fn quantize_row_q8_0(src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check(GgmlType::Q8_0, src, dst)?;
    for (x, b) in src.chunks_exact(32).zip(dst.chunks_exact_mut(34)) {
        let amax = x.iter().fold(0f32, |m, v| m.max(v.abs()));
        let d = amax / 127.0;
        let id = if d != 0.0 { 1.0 / d } else { 0.0 };
        b[0..2].copy_from_slice(&f32_to_f16(d).to_le_bytes());
        for (q, &v) in b[2..].iter_mut().zip(x) {
            // `as i8` saturates; |v * id| <= 127 up to rounding for finite input.
            *q = ((v * id).round() as i8) as u8;
        }
    }
    Ok(())
}

/// Quantizes `src` to Q8_K blocks in `dst`, as ggml's reference quantizer does: the
/// element of largest magnitude `max` (first one on ties) maps to -127 via
/// `iscale = -127 / max`, `q = min(127, round_half_even(iscale * x))`, `d = 1 / iscale`,
/// and `bsums` holds the sums of each 16 quants. An all-zero block gets `d = 0`.
///
/// `src.len()` must be a multiple of 256 and `dst.len()` the matching byte count.
pub fn quantize_row_q8_k(src: &[f32], dst: &mut [u8]) -> Result<(), QuantError> {
    check(GgmlType::Q8_K, src, dst)?;
    for (x, b) in src.chunks_exact(256).zip(dst.chunks_exact_mut(292)) {
        let (mut amax, mut max) = (0f32, 0f32);
        for &v in x {
            if v.abs() > amax {
                amax = v.abs();
                max = v;
            }
        }
        let mut qs = [0i8; 256];
        let d = if amax == 0.0 {
            0.0
        } else {
            let iscale = -127.0 / max;
            for (q, &v) in qs.iter_mut().zip(x) {
                let r = (iscale * v).round_ties_even();
                *q = r.clamp(-128.0, 127.0) as i8;
            }
            1.0 / iscale
        };
        b[0..4].copy_from_slice(&d.to_le_bytes());
        for (o, q) in b[4..260].iter_mut().zip(&qs) {
            *o = *q as u8;
        }
        for g in 0..16 {
            let s: i16 = qs[16 * g..16 * g + 16].iter().map(|&q| i16::from(q)).sum();
            b[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequantize_row;
    use rand::{Rng, SeedableRng};
    use rand_chacha::ChaCha8Rng;

    fn inputs(seed: u64, n: usize) -> Vec<f32> {
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let mut v: Vec<f32> = (0..n).map(|_| rng.gen_range(-3.0f32..3.0)).collect();
        // an all-zero block and a block with one huge outlier
        if n >= 512 {
            v[256..512].fill(0.0);
        }
        if n > 600 {
            v[600] = -1000.0;
        }
        v
    }

    #[test]
    fn q8_0_roundtrip_error_bounded() {
        let seed = 0x5138_0000;
        println!("seed {seed:#x}");
        let x = inputs(seed, 32 * 37);
        let mut q = vec![0xAAu8; 34 * 37];
        quantize_row_q8_0(&x, &mut q).unwrap();
        let mut y = vec![f32::NAN; x.len()];
        dequantize_row(GgmlType::Q8_0, &q, &mut y).unwrap();
        for (bx, by) in x.chunks(32).zip(y.chunks(32)) {
            let amax = bx.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in bx.iter().zip(by) {
                // half a quant step, plus f16 scale rounding (rel 2^-11 of 127 steps)
                let tol = amax / 127.0 * 0.5 + amax * 2f32.powi(-11) + 1e-6;
                assert!((a - b).abs() <= tol, "{a} vs {b} (amax {amax})");
            }
            for &q8 in &q[2..34] {
                assert_ne!(q8 as i8, -128);
            }
        }
    }

    #[test]
    fn q8_k_roundtrip_error_bounded_and_bsums() {
        let seed = 0x518B_0000;
        println!("seed {seed:#x}");
        let x = inputs(seed, 256 * 5);
        let mut q = vec![0xAAu8; 292 * 5];
        quantize_row_q8_k(&x, &mut q).unwrap();
        let mut y = vec![f32::NAN; x.len()];
        dequantize_row(GgmlType::Q8_K, &q, &mut y).unwrap();
        for ((bx, by), bq) in x.chunks(256).zip(y.chunks(256)).zip(q.chunks(292)) {
            let amax = bx.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (a, b) in bx.iter().zip(by) {
                let tol = amax / 127.0 * 0.5 * 1.0001 + 1e-6;
                assert!((a - b).abs() <= tol, "{a} vs {b} (amax {amax})");
            }
            for g in 0..16 {
                let s: i32 = bq[4 + 16 * g..20 + 16 * g]
                    .iter()
                    .map(|&v| i32::from(v as i8))
                    .sum();
                assert_eq!(
                    s,
                    i32::from(i16::from_le_bytes([bq[260 + 2 * g], bq[261 + 2 * g]]))
                );
            }
        }
        // The all-zero block has d == 0 and zero quants.
        assert_eq!(&q[292..296], &[0u8; 4]);
        assert!(q[296..292 + 260].iter().all(|&v| v == 0));
    }

    #[test]
    fn wrong_sizes_rejected() {
        assert!(quantize_row_q8_0(&[0.0; 31], &mut [0; 34]).is_err());
        assert!(quantize_row_q8_0(&[0.0; 32], &mut [0; 33]).is_err());
        assert!(quantize_row_q8_k(&[0.0; 256], &mut [0; 291]).is_err());
    }
}

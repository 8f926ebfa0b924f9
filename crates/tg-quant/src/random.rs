//! Seeded random, valid block data for kernel tests.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::dequant::f32_to_f16;
use crate::GgmlType;

/// A random scale with `|d|` log-uniform in `[1e-3, 1e-1]` and a random sign.
fn scale<R: Rng>(rng: &mut R, signed: bool) -> f32 {
    let mag = 10f32.powf(rng.gen_range(-3.0f32..=-1.0));
    if signed && rng.gen::<bool>() {
        -mag
    } else {
        mag
    }
}

fn put_f16(block: &mut [u8], at: usize, x: f32) {
    block[at..at + 2].copy_from_slice(&f32_to_f16(x).to_le_bytes());
}

/// `n_elements` elements of `ty` as seeded random, valid bytes (same seed, same bytes).
///
/// Quant bits are uniformly random; scales are finite with `|d|` log-uniform in
/// `[1e-3, 1e-1]` (f16 for all formats but Q8_K's f32; the K-quant `d`/`dmin` and the
/// Q4_1/Q5_1 `m` take both signs). 8-bit quants (Q8_0, Q8_1, Q8_K) lie in `-127..=127`
/// as produced by ggml's quantizers, and the Q8_1 `s` / Q8_K `bsums` fields are
/// consistent with the quants. F32/F16/BF16/F64 values are uniform in `[-1, 1)`; integer
/// types are random bytes. Never NaN or infinite.
///
/// # Panics
/// If `n_elements` is not a multiple of `ty.block_size()` (a test-setup bug).
pub fn random_blocks(ty: GgmlType, n_elements: usize, seed: u64) -> Vec<u8> {
    let n_bytes = ty
        .row_bytes(n_elements)
        .unwrap_or_else(|e| panic!("random_blocks({ty}, {n_elements}): {e}"));
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut out = vec![0u8; n_bytes];
    let ts = ty.type_size();
    for b in out.chunks_exact_mut(ts) {
        match ty {
            GgmlType::F32 => b.copy_from_slice(&rng.gen_range(-1.0f32..1.0).to_le_bytes()),
            GgmlType::F64 => b.copy_from_slice(&rng.gen_range(-1.0f64..1.0).to_le_bytes()),
            GgmlType::F16 => put_f16(b, 0, rng.gen_range(-1.0f32..1.0)),
            GgmlType::BF16 => {
                let x: f32 = rng.gen_range(-1.0f32..1.0);
                b.copy_from_slice(&((x.to_bits() >> 16) as u16).to_le_bytes());
            }
            GgmlType::I8 | GgmlType::I16 | GgmlType::I32 | GgmlType::I64 => rng.fill(b),
            GgmlType::Q8_0 | GgmlType::Q8_1 => {
                let d = scale(&mut rng, false);
                let mut sum = 0i32;
                for q in &mut b[ts - 32..] {
                    let v: i8 = rng.gen_range(-127..=127);
                    sum += i32::from(v);
                    *q = v as u8;
                }
                put_f16(b, 0, d);
                if ty == GgmlType::Q8_1 {
                    put_f16(b, 2, d * sum as f32);
                }
            }
            GgmlType::Q8_K => {
                let d = scale(&mut rng, false);
                b[0..4].copy_from_slice(&d.to_le_bytes());
                let mut qs = [0i8; 256];
                for q in &mut qs {
                    *q = rng.gen_range(-127..=127);
                }
                for (dst, q) in b[4..260].iter_mut().zip(&qs) {
                    *dst = *q as u8;
                }
                for g in 0..16 {
                    let s: i16 = qs[16 * g..16 * g + 16].iter().map(|&q| i16::from(q)).sum();
                    b[260 + 2 * g..262 + 2 * g].copy_from_slice(&s.to_le_bytes());
                }
            }
            _ => {
                rng.fill(b);
                for (at, signed) in f16_scale_fields(ty) {
                    let d = scale(&mut rng, *signed);
                    put_f16(b, *at, d);
                }
            }
        }
    }
    out
}

/// Byte offsets of the f16 scale fields of each block format, and whether the value is
/// naturally signed (Q4_1/Q5_1 `m` is a minimum and may be negative; K-quant super
/// scales are kept positive, as produced by the quantizers, except Q3_K/Q6_K `d` whose
/// sign ggml's quantizers choose freely).
fn f16_scale_fields(ty: GgmlType) -> &'static [(usize, bool)] {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 => &[(0, true)],
        GgmlType::Q4_1 | GgmlType::Q5_1 => &[(0, false), (2, true)],
        GgmlType::Q2_K => &[(80, false), (82, false)],
        GgmlType::Q3_K => &[(108, true)],
        GgmlType::Q4_K | GgmlType::Q5_K => &[(0, false), (2, false)],
        GgmlType::Q6_K => &[(208, true)],
        _ => &[],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dequantize_row;

    #[test]
    fn deterministic_finite_and_sized() {
        for ty in GgmlType::ALL {
            let n = ty.block_size() * 5;
            let a = random_blocks(ty, n, 42);
            assert_eq!(a.len(), ty.row_bytes(n).unwrap());
            assert_eq!(a, random_blocks(ty, n, 42), "{ty}");
            assert_ne!(a, random_blocks(ty, n, 43), "{ty}");
            if crate::can_dequantize(ty) {
                let mut out = vec![f32::NAN; n];
                dequantize_row(ty, &a, &mut out).unwrap();
                assert!(out.iter().all(|x| x.is_finite()), "{ty}");
                // Realistic magnitudes: nothing beyond what 8-bit quants x 0.1 x 63 allow.
                assert!(out.iter().all(|x| x.abs() < 1e3), "{ty}");
            }
        }
    }

    #[test]
    fn q8k_bsums_consistent() {
        let b = random_blocks(GgmlType::Q8_K, 512, 7);
        for blk in b.chunks_exact(292) {
            for g in 0..16 {
                let s: i32 = blk[4 + 16 * g..4 + 16 * g + 16]
                    .iter()
                    .map(|&q| i32::from(q as i8))
                    .sum();
                let stored = i16::from_le_bytes([blk[260 + 2 * g], blk[261 + 2 * g]]);
                assert_eq!(s, i32::from(stored));
            }
        }
    }
}

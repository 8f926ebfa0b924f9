//! Bit-exactness against gguf-py on seeded random blocks (fixtures written by
//! `scripts/gen_quant_fixtures.py`), plus Q8_K against an independent f64 computation
//! (gguf-py has no Q8_K dequantizer) and the documented block-struct layouts.

use std::path::PathBuf;

use sha2::{Digest, Sha256};
use tg_quant::*;

fn fixture_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/quant")
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn random_blocks_bit_exact_with_gguf_py() {
    let dir = fixture_dir();
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(dir.join("random_manifest.json"))
            .expect("random_manifest.json (run scripts/gen_quant_fixtures.py)"),
    )
    .expect("valid json");
    let types = manifest["types"].as_array().expect("types array");
    let mut seen = Vec::new();
    for entry in types {
        let name = entry["type"].as_str().unwrap();
        let n = entry["n_elements"].as_u64().unwrap() as usize;
        let ty = GgmlType::ALL
            .iter()
            .copied()
            .find(|t| t.name() == name)
            .expect("known type");
        let src = std::fs::read(dir.join(format!("random_{name}.bin"))).unwrap();
        let want = std::fs::read(dir.join(format!("random_{name}.f32"))).unwrap();
        assert_eq!(
            hex(&Sha256::digest(&src)),
            entry["bin_sha256"].as_str().unwrap(),
            "{name} .bin corrupted"
        );
        assert_eq!(
            hex(&Sha256::digest(&want)),
            entry["f32_sha256"].as_str().unwrap(),
            "{name} .f32 corrupted"
        );
        assert_eq!(want.len(), 4 * n);

        // Whole row at once, output poisoned.
        let mut got = vec![f32::from_bits(0x7FC0_DEAD); n];
        dequantize_row(ty, &src, &mut got).unwrap();
        let mut mismatches = 0;
        for (i, (g, w)) in got.iter().zip(want.chunks_exact(4)).enumerate() {
            let w = u32::from_le_bytes([w[0], w[1], w[2], w[3]]);
            if g.to_bits() != w {
                if mismatches < 5 {
                    eprintln!(
                        "{name}[{i}]: got {g:e} ({:#010x}), gguf-py {:e} ({w:#010x})",
                        g.to_bits(),
                        f32::from_bits(w)
                    );
                }
                mismatches += 1;
            }
        }
        assert_eq!(
            mismatches, 0,
            "{name}: {mismatches} of {n} elements differ from gguf-py"
        );

        // Block by block gives the same bits.
        let (bs, ts) = (ty.block_size(), ty.type_size());
        let mut blk = vec![f32::NAN; bs];
        for (k, b) in src.chunks_exact(ts).enumerate() {
            dequantize_block(ty, b, &mut blk).unwrap();
            for (x, y) in blk.iter().zip(&got[k * bs..(k + 1) * bs]) {
                assert_eq!(x.to_bits(), y.to_bits(), "{name} block {k}");
            }
        }
        println!("{name}: {n} elements bit-exact (seed {})", entry["seed"]);
        seen.push(ty);
    }
    for ty in [
        GgmlType::F16,
        GgmlType::BF16,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
        GgmlType::Q8_0,
        GgmlType::Q2_K,
        GgmlType::Q3_K,
        GgmlType::Q4_K,
        GgmlType::Q5_K,
        GgmlType::Q6_K,
    ] {
        assert!(seen.contains(&ty), "no fixture for {ty}");
    }
}

/// gguf-py has no Q8_K dequantizer: check against f64 arithmetic on the raw fields
/// (the product of an f32 and an 8-bit integer is exact in f64, so rounding it once to f32
/// is the correctly rounded f32 product).
#[test]
fn q8_k_matches_f64_reference() {
    let seed = 0x0008_000Au64;
    println!("seed {seed:#x}");
    let n = 256 * 7;
    let mut src = random_blocks(GgmlType::Q8_K, n, seed);
    // Extreme scales too: subnormal, huge, negative, zero.
    for (k, d) in [1e-40f32, 3.0e38, -0.75, 0.0].iter().enumerate() {
        src[k * 292..k * 292 + 4].copy_from_slice(&d.to_le_bytes());
    }
    let mut got = vec![f32::NAN; n];
    dequantize_row(GgmlType::Q8_K, &src, &mut got).unwrap();
    for (k, b) in src.chunks_exact(292).enumerate() {
        let d = f64::from(f32::from_le_bytes([b[0], b[1], b[2], b[3]]));
        for j in 0..256 {
            let want = (d * f64::from(b[4 + j] as i8)) as f32;
            assert_eq!(
                got[k * 256 + j].to_bits(),
                want.to_bits(),
                "block {k} elem {j}"
            );
        }
    }
}

/// The block structs decode to the same values as `dequantize_row` when read with the
/// formulas written in their doc comments (checks the docs and the struct layouts).
#[test]
fn block_struct_docs_match_dequantizer() {
    let seed = 0xB10C_0001u64;
    println!("seed {seed:#x}");
    let n = 256 * 3;

    let src = random_blocks(GgmlType::Q4_K, n, seed);
    let mut want = vec![f32::NAN; n];
    dequantize_row(GgmlType::Q4_K, &src, &mut want).unwrap();
    for (k, b) in src.chunks_exact(144).enumerate() {
        let blk = BlockQ4K::read(b).unwrap();
        for e in 0..256 {
            let (c, h, j) = (e / 64, (e / 32) % 2, e % 32);
            let q = (blk.qs[32 * c + j] >> (4 * h)) & 15;
            let (sc, m) = get_scale_min_k4(e / 32, &blk.scales);
            let x = f16_to_f32(blk.d) * sc as f32 * q as f32 - f16_to_f32(blk.dmin) * m as f32;
            assert_eq!(
                x.to_bits(),
                want[k * 256 + e].to_bits(),
                "Q4_K block {k} elem {e}"
            );
        }
    }

    let src = random_blocks(GgmlType::Q6_K, n, seed);
    dequantize_row(GgmlType::Q6_K, &src, &mut want).unwrap();
    for (k, b) in src.chunks_exact(210).enumerate() {
        let blk = BlockQ6K::read(b).unwrap();
        for e in 0..256 {
            let (h, nn, kk) = (e / 128, (e / 64) % 2, e % 64);
            let (s, j) = ((e / 32) % 4, e % 32);
            let lo = (blk.ql[64 * h + kk] >> (4 * nn)) & 15;
            let hi = (blk.qh[32 * h + j] >> (2 * s)) & 3;
            let q = (lo | (hi << 4)) as i32 - 32;
            let x = f16_to_f32(blk.d) * blk.scales[e / 16] as f32 * q as f32;
            assert_eq!(
                x.to_bits(),
                want[k * 256 + e].to_bits(),
                "Q6_K block {k} elem {e}"
            );
        }
    }

    let src = random_blocks(GgmlType::Q3_K, n, seed);
    dequantize_row(GgmlType::Q3_K, &src, &mut want).unwrap();
    for (k, b) in src.chunks_exact(110).enumerate() {
        let blk = BlockQ3K::read(b).unwrap();
        let scales = unpack_q3k_scales(&blk.scales);
        for e in 0..256 {
            let (h, s, j) = (e / 128, (e / 32) % 4, e % 32);
            let low = ((blk.qs[32 * h + j] >> (2 * s)) & 3) as i32;
            let hbit = (blk.hmask[e % 32] >> (e / 32)) & 1;
            let q = if hbit == 0 { low - 4 } else { low };
            let x = f16_to_f32(blk.d) * scales[e / 16] as f32 * q as f32;
            assert_eq!(
                x.to_bits(),
                want[k * 256 + e].to_bits(),
                "Q3_K block {k} elem {e}"
            );
        }
    }

    let src = random_blocks(GgmlType::Q8_0, 32 * 9, seed);
    let mut want = vec![f32::NAN; 32 * 9];
    dequantize_row(GgmlType::Q8_0, &src, &mut want).unwrap();
    // Aligned cast over a copy that is 2-aligned (Vec<u16> backing).
    let mut aligned = vec![0u16; src.len() / 2];
    for (a, c) in aligned.iter_mut().zip(src.chunks_exact(2)) {
        *a = u16::from_ne_bytes([c[0], c[1]]);
    }
    let bytes: &[u8] = unsafe { std::slice::from_raw_parts(aligned.as_ptr().cast(), src.len()) };
    let blocks = BlockQ8_0::cast_slice(bytes).expect("aligned, whole blocks");
    assert_eq!(blocks.len(), 9);
    for (k, blk) in blocks.iter().enumerate() {
        assert_eq!(blk.as_bytes(), &src[k * 34..(k + 1) * 34]);
        for j in 0..32 {
            let x = blk.qs[j] as f32 * f16_to_f32(blk.d);
            assert_eq!(x.to_bits(), want[k * 32 + j].to_bits());
        }
    }
    assert!(BlockQ8_0::cast_slice(&bytes[..33]).is_none());
    assert!(
        BlockQ8_0::cast_slice(&bytes[1..35]).is_none(),
        "misaligned must be refused"
    );
}

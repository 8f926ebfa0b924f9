//! `matmul_qt` and `dequantize_row`/`get_rows` against `tg_quant`'s reference dequantizer and
//! an f64 dot product, for every weight type × every ISA available on this machine.

mod common;

use common::*;
use tg_kernels::{matmul_qt_with, GgmlType, Isa, KernelError};

/// Types with SIMD decoders, plus the reference-path ones.
const TYPES: [GgmlType; 14] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::BF16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Q2_K,
    GgmlType::Q3_K,
    GgmlType::Q8_K,
];

fn ks(ty: GgmlType) -> Vec<usize> {
    match ty.block_size() {
        1 => vec![7, 33, 640, 1100],
        32 => vec![32, 96, 640],
        _ => vec![256, 1024, 2048],
    }
}

fn seed_of(ty: GgmlType, m: usize, n: usize, k: usize) -> u64 {
    (ty as u64) << 48 ^ (m as u64) << 32 ^ (n as u64) << 16 ^ k as u64
}

fn reference_weights(ty: GgmlType, w: &[u8], n: usize, k: usize) -> Vec<f32> {
    let mut wf = vec![0.0f32; n * k];
    let rb = ty.row_bytes(k).unwrap();
    for j in 0..n {
        tg_quant::dequantize_row(ty, &w[j * rb..(j + 1) * rb], &mut wf[j * k..(j + 1) * k]).unwrap();
    }
    wf
}

#[test]
fn dequantize_row_is_bit_exact() {
    let isas = isas();
    for ty in TYPES {
        for &k in &ks(ty) {
            for n in [1usize, 3] {
                let seed = seed_of(ty, 0, n, k);
                eprintln!("dequantize {ty} k={k} n={n} seed={seed}");
                let w = tg_quant::random_blocks(ty, n * k, seed);
                let reference = reference_weights(ty, &w, n, k);
                for &isa in &isas {
                    let rb = ty.row_bytes(k).unwrap();
                    for j in 0..n {
                        let mut out = vec![f32::NAN; k];
                        tg_kernels::dequantize_row_with(isa, ty, &w[j * rb..(j + 1) * rb], &mut out).unwrap();
                        for (e, (a, b)) in out.iter().zip(&reference[j * k..(j + 1) * k]).enumerate() {
                            assert_eq!(a.to_bits(), b.to_bits(), "{isa} {ty} k={k} row {j} elem {e}: {a} vs {b}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn get_rows_matches_reference() {
    let isas = isas();
    let mut rng = rng("get_rows", 7);
    for ty in TYPES {
        let row_len = ks(ty)[1];
        let n_rows = 37;
        let table = tg_quant::random_blocks(ty, n_rows * row_len, seed_of(ty, 1, n_rows, row_len));
        let reference = reference_weights(ty, &table, n_rows, row_len);
        // Many ids (some repeated) so the threaded split is exercised too.
        let ids: Vec<i32> = (0..3000).map(|_| rand::Rng::gen_range(&mut rng, 0..n_rows as i32)).collect();
        for &isa in &isas {
            for threads in [1, 2] {
                let mut out = vec![f32::NAN; ids.len() * row_len];
                pool(threads)
                    .install(|| tg_kernels::get_rows_with(isa, &table, ty, row_len, n_rows, &ids, &mut out))
                    .unwrap();
                for (i, &id) in ids.iter().enumerate() {
                    let got = &out[i * row_len..(i + 1) * row_len];
                    let want = &reference[id as usize * row_len..(id as usize + 1) * row_len];
                    assert!(
                        got.iter().zip(want).all(|(a, b)| a.to_bits() == b.to_bits()),
                        "{isa} {ty} threads={threads}: row {i} (id {id}) differs"
                    );
                }
            }
        }
    }
}

#[test]
fn matmul_qt_all_types_isas_shapes() {
    let isas = isas();
    let ms = [1usize, 2, 3, 4, 5, 7, 17, 64];
    let ns = [1usize, 5, 33, 263];
    let mut worst: Vec<(f64, String)> = Vec::new();
    for ty in TYPES {
        for &k in &ks(ty) {
            for &n in &ns {
                let w = tg_quant::random_blocks(ty, n * k, seed_of(ty, 0, n, k));
                let wf = reference_weights(ty, &w, n, k);
                for &m in &ms {
                    let seed = seed_of(ty, m, n, k);
                    let mut r = rng(&format!("matmul_qt {ty} m={m} n={n} k={k}"), seed);
                    let x = uniform(&mut r, m * k, -1.0, 1.0);
                    let refs = matmul_abt_f64(&x, &wf, m, n, k);
                    for &isa in &isas {
                        let mut y = vec![f32::NAN; m * n];
                        matmul_qt_with(isa, &x, m, k, &w, ty, n, &mut y).unwrap();
                        let what = format!("{isa} {ty} m={m} n={n} k={k}");
                        let e = check_dot(&what, &y, &refs, k);
                        assert!(e < 1e-10, "{what}: NMSE {e:e}");
                        worst.push((e, what));
                    }
                }
            }
        }
    }
    worst.sort_by(|a, b| b.0.total_cmp(&a.0));
    eprintln!("worst NMSE: {:?}", &worst[..3]);
}

#[test]
fn matmul_qt_same_result_on_one_and_two_threads() {
    for &isa in &isas() {
        for (ty, m, n, k) in [
            (GgmlType::Q8_0, 1, 2048, 640),
            (GgmlType::Q5_0, 3, 1500, 640),
            (GgmlType::Q6_K, 1, 640, 2048),
            (GgmlType::Q4_K, 9, 640, 1024),
            (GgmlType::Q5_0, 64, 300, 640),
            (GgmlType::Q2_K, 2, 300, 256),
        ] {
            let w = tg_quant::random_blocks(ty, n * k, seed_of(ty, m, n, k) + 1);
            let mut r = rng(&format!("threads {isa} {ty} m={m} n={n} k={k}"), seed_of(ty, m, n, k) + 2);
            let x = uniform(&mut r, m * k, -1.0, 1.0);
            let mut outs = Vec::new();
            for threads in [1, 2] {
                let mut y = vec![f32::NAN; m * n];
                pool(threads).install(|| matmul_qt_with(isa, &x, m, k, &w, ty, n, &mut y)).unwrap();
                assert!(y.iter().all(|v| v.is_finite()), "{isa} {ty}: unwritten outputs");
                outs.push(y);
            }
            assert!(
                outs[0].iter().zip(&outs[1]).all(|(a, b)| a.to_bits() == b.to_bits()),
                "{isa} {ty} m={m} n={n} k={k}: 1 vs 2 threads differ"
            );
        }
    }
}

#[test]
fn matmul_qt_rejects_bad_arguments() {
    let ty = GgmlType::Q8_0;
    let (m, n, k) = (2, 3, 64);
    let w = tg_quant::random_blocks(ty, n * k, 1);
    let x = vec![0.5f32; m * k];
    let mut y = vec![0.0f32; m * n];
    let isa = Isa::detect();
    assert!(matches!(
        matmul_qt_with(isa, &x[1..], m, k, &w, ty, n, &mut y),
        Err(KernelError::Length { what: "matmul_qt: x", .. })
    ));
    assert!(matches!(
        matmul_qt_with(isa, &x, m, k, &w[..w.len() - 1], ty, n, &mut y),
        Err(KernelError::Length { what: "matmul_qt: w bytes", .. })
    ));
    assert!(matches!(
        matmul_qt_with(isa, &x, m, k, &w, ty, n, &mut y[1..]),
        Err(KernelError::Length { what: "matmul_qt: y", .. })
    ));
    // k not a whole number of blocks.
    assert!(matches!(matmul_qt_with(isa, &x, 4, 32 + 1, &w, ty, 1, &mut y), Err(KernelError::Quant(_))));
    // Types without a dequantizer.
    assert!(matches!(
        matmul_qt_with(isa, &x, m, k, &w, GgmlType::I32, n, &mut y),
        Err(KernelError::UnsupportedType(GgmlType::I32))
    ));
    // Overflowing sizes are errors, not panics.
    assert!(matmul_qt_with(isa, &x, usize::MAX, 2, &w, ty, n, &mut y).is_err());
    // Empty problems are fine; k = 0 gives zeros.
    matmul_qt_with(isa, &[], 0, k, &w, ty, n, &mut []).unwrap();
    let mut z = vec![f32::NAN; 6];
    matmul_qt_with(isa, &[], 2, 0, &[], ty, 3, &mut z).unwrap();
    assert!(z.iter().all(|&v| v == 0.0));
}

#[test]
fn get_rows_rejects_bad_ids_and_lengths() {
    let ty = GgmlType::Q5_0;
    let (n_rows, row_len) = (10, 64);
    let table = tg_quant::random_blocks(ty, n_rows * row_len, 3);
    let mut out = vec![0.0f32; 3 * row_len];
    let isa = Isa::detect();
    let e = tg_kernels::get_rows_with(isa, &table, ty, row_len, n_rows, &[1, 10, 2], &mut out).unwrap_err();
    assert_eq!(e, KernelError::IdOutOfRange { pos: 1, id: 10, n_rows: 10 });
    assert!(e.to_string().contains("id 10 at position 1"), "{e}");
    let e = tg_kernels::get_rows_with(isa, &table, ty, row_len, n_rows, &[0, 1, -1], &mut out).unwrap_err();
    assert_eq!(e, KernelError::IdOutOfRange { pos: 2, id: -1, n_rows: 10 });
    assert!(matches!(
        tg_kernels::get_rows_with(isa, &table[1..], ty, row_len, n_rows, &[0, 1, 2], &mut out),
        Err(KernelError::Length { .. })
    ));
    assert!(matches!(
        tg_kernels::get_rows_with(isa, &table, ty, row_len, n_rows, &[0, 1], &mut out),
        Err(KernelError::Length { .. })
    ));
    assert!(matches!(
        tg_kernels::get_rows_with(isa, &table, ty, 33, n_rows, &[0], &mut out[..33]),
        Err(KernelError::Quant(_))
    ));
}

#[test]
fn unavailable_isa_is_an_error() {
    for isa in Isa::ALL {
        if !isa.is_available() {
            let mut y = [0.0f32; 1];
            assert_eq!(
                matmul_qt_with(isa, &[1.0], 1, 1, &1.0f32.to_le_bytes(), GgmlType::F32, 1, &mut y),
                Err(KernelError::IsaUnavailable(isa))
            );
        }
    }
}

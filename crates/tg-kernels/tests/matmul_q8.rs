//! `matmul_qt_q8` (ggml-style quantized-activation matmul) against independent references:
//! activations quantized by a transcription of ggml's x86 Q8_0 quantizer / `tg_quant`'s Q8_K
//! quantizer, both operands dequantized by `tg_quant::dequantize_row`, dot products in f64.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_kernels::{
    matmul_qt_q8_ordered, matmul_qt_q8_pre_ordered, matmul_qt_q8_with, matmul_qt_with, q8_activation_type,
    quantize_activations_with, GgmlType, Isa, KernelError, Q8Order,
};
use tg_quant::{dequantize_row, f16_to_f32, f32_to_f16, quantize_row_q8_0, quantize_row_q8_k, random_blocks};

const TYPES: [GgmlType; 6] =
    [GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

fn isas() -> Vec<Isa> {
    let v = Isa::available();
    eprintln!("ISAs {v:?} ({})", tg_kernels::cpu_features());
    v
}

fn rng(test: &str, seed: u64) -> ChaCha8Rng {
    eprintln!("{test}: seed {seed:#x}");
    ChaCha8Rng::seed_from_u64(seed)
}

/// Activations: rows of different magnitudes (1e-3 … 1e2), a few outliers, an all-zero block.
fn activations(rng: &mut ChaCha8Rng, m: usize, k: usize) -> Vec<f32> {
    let mut x = Vec::with_capacity(m * k);
    for i in 0..m {
        let scale = 10f32.powf(rng.gen_range(-3.0..2.0));
        for e in 0..k {
            let mut v = rng.gen_range(-1.0f32..1.0) * scale;
            if rng.gen_ratio(1, 200) {
                v *= 20.0;
            }
            if i == 1 && e < 32 {
                v = 0.0;
            }
            x.push(v);
        }
    }
    x
}

/// ggml's x86 `quantize_row_q8_0` (AVX/AVX2 code path) for finite input: `d = f16(amax/127)`,
/// `q = round_half_even(x · (127/amax))`; a zero scale gives zero quants.
fn ref_quantize_q8_0_x86(x: &[f32]) -> Vec<u8> {
    let mut out = Vec::new();
    for b in x.chunks_exact(32) {
        let amax = b.iter().fold(0.0f32, |a, v| a.max(v.abs()));
        let dh = f32_to_f16(amax / 127.0);
        out.extend_from_slice(&dh.to_le_bytes());
        let id = if f16_to_f32(dh) == 0.0 { 0.0 } else { 127.0 / amax };
        for &v in b {
            out.push(((v * id).round_ties_even().clamp(-128.0, 127.0) as i8) as u8);
        }
    }
    out
}

/// Reference activation blocks (ggml layout) for one row.
fn ref_quantize(act: GgmlType, x: &[f32]) -> Vec<u8> {
    if act == GgmlType::Q8_0 {
        ref_quantize_q8_0_x86(x)
    } else {
        let mut q = vec![0u8; act.row_bytes(x.len()).unwrap()];
        quantize_row_q8_k(x, &mut q).unwrap();
        q
    }
}

fn dequant(ty: GgmlType, bytes: &[u8], n: usize) -> Vec<f32> {
    let mut out = vec![f32::NAN; n];
    dequantize_row(ty, bytes, &mut out).unwrap();
    out
}

/// `|min_e|` per element for Q4_K/Q5_K (the `dmin·m` part, which the kernels subtract as a
/// separate float term): dequantize with all quants zeroed. Zero for the other types.
fn min_magnitudes(ty: GgmlType, w: &[u8], n_el: usize) -> Vec<f32> {
    let range = match ty {
        GgmlType::Q4_K => 16..144,
        GgmlType::Q5_K => 16..176,
        _ => return vec![0.0; n_el],
    };
    let mut z = w.to_vec();
    for blk in z.chunks_exact_mut(ty.type_size()) {
        blk[range.clone()].fill(0);
    }
    dequant(ty, &z, n_el).into_iter().map(f32::abs).collect()
}

/// Reference `(y, Σ|terms|)` for all `m × n` pairs, in f64 over dequantized operands.
struct Reference {
    y: Vec<f64>,
    mag: Vec<f64>,
    n: usize,
}

fn reference(ty: GgmlType, x: &[f32], m: usize, k: usize, w: &[u8], n: usize) -> Reference {
    let act = q8_activation_type(ty).unwrap();
    let xd: Vec<f32> = x.chunks_exact(k).flat_map(|r| dequant(act, &ref_quantize(act, r), k)).collect();
    let wd = dequant(ty, w, n * k);
    let wm = min_magnitudes(ty, w, n * k);
    let mut y = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        let xr = &xd[i * k..(i + 1) * k];
        for j in 0..n {
            let (wr, mr) = (&wd[j * k..(j + 1) * k], &wm[j * k..(j + 1) * k]);
            let (mut s, mut a) = (0.0f64, 0.0f64);
            for e in 0..k {
                let p = f64::from(xr[e]) * f64::from(wr[e]);
                s += p;
                a += p.abs() + (f64::from(xr[e]) * f64::from(mr[e])).abs();
            }
            y[i * n + j] = s;
            mag[i * n + j] = a;
        }
    }
    Reference { y, mag, n }
}

/// Allowed error relative to `Σ|terms|`: each term takes one rounding for `d_w·d_x`, one for
/// the product, then up to `k/32` sequential f32 additions plus a short tree; the reference's
/// dequantized f32 values carry a few roundings more. Generous by 2×.
fn bound(k: usize) -> f64 {
    2.0 * (f32::EPSILON as f64 / 2.0) * ((k / 32) as f64 + 12.0)
}

/// Checks `y` (`m × n`) against the top-left `m × n` part of `r`; returns the worst error in
/// units of the bound.
fn check(what: &str, y: &[f32], r: &Reference, m: usize, n: usize, k: usize) -> f64 {
    let b = bound(k);
    let mut worst = 0.0f64;
    for i in 0..m {
        for j in 0..n {
            let v = y[i * n + j];
            let (rv, mag) = (r.y[i * r.n + j], r.mag[i * r.n + j]);
            let err = (f64::from(v) - rv).abs();
            let tol = b * mag + f64::from(f32::MIN_POSITIVE);
            assert!(err <= tol, "{what}: y[{i},{j}] = {v}, reference {rv}, |err| {err:e} > {tol:e} (Σ|terms| {mag:e})");
            worst = worst.max(err / tol);
        }
    }
    worst
}

#[test]
fn activations_match_ggml_quantizers_bit_exactly() {
    let mut rng = rng("activations", 0x51_0001);
    for act in [GgmlType::Q8_0, GgmlType::Q8_K] {
        for k in [256, 2048] {
            let m = 9;
            let mut x = activations(&mut rng, m, k);
            // Exact ties for Q8_0: amax 127 gives multiplier 1, so these are ±(n + ½).
            x[2 * k..2 * k + 8].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -2.5, 126.5, -3.5]);
            // Q8_K: largest magnitude negative, and a tie between +a and −a (first wins).
            for v in &mut x[3 * k..3 * k + 512] {
                *v = rng.gen_range(-1.0..1.0);
            }
            x[3 * k + 5] = -50.0;
            x[3 * k + 256 + 7] = 9.0;
            x[3 * k + 256 + 9] = -9.0;
            // A tiny block whose f16 scale underflows to zero.
            for v in &mut x[5 * k..5 * k + 256] {
                *v *= 1e-9;
            }
            for isa in Isa::available() {
                let q = quantize_activations_with(isa, &x, m, k, act).unwrap();
                assert_eq!((q.act_type(), q.rows(), q.cols()), (act, m, k));
                for i in 0..m {
                    let want = ref_quantize(act, &x[i * k..(i + 1) * k]);
                    let got = q.row_ggml_bytes(i).unwrap();
                    assert_eq!(got, want, "{act} {isa} k={k} row {i}");
                }
                assert!(q.row_ggml_bytes(m).is_none());
            }
        }
    }
}

#[test]
fn q8_0_rounding_is_x86_not_reference() {
    // ggml's x86 quantizer rounds half to even with multiplier 127/amax; the portable reference
    // (and tg_quant::quantize_row_q8_0) rounds half away from zero with 1/(amax/127).
    let mut x = vec![0.0f32; 32];
    x[..6].copy_from_slice(&[127.0, 0.5, 1.5, 2.5, -0.5, -2.5]);
    let ours = ref_quantize_q8_0_x86(&x);
    let kern = quantize_activations_with(tg_kernels::isa(), &x, 1, 32, GgmlType::Q8_0).unwrap();
    assert_eq!(kern.row_ggml_bytes(0).unwrap(), ours);
    let q = |b: &[u8]| b[2..8].iter().map(|&v| v as i8).collect::<Vec<_>>();
    assert_eq!(q(&ours), [127, 0, 2, 2, 0, -2]);
    let mut tq = vec![0u8; 34];
    quantize_row_q8_0(&x, &mut tq).unwrap();
    assert_eq!(q(&tq), [127, 1, 2, 3, -1, -3]);

    // On random data the two differ rarely, by one step, and never in the scale.
    let mut rng = rng("q8_0 rounding", 0x51_0002);
    let x: Vec<f32> = (0..32 * 4096).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    let a = ref_quantize_q8_0_x86(&x);
    let mut b = vec![0u8; a.len()];
    quantize_row_q8_0(&x, &mut b).unwrap();
    let mut diff = 0;
    for (ba, bb) in a.chunks_exact(34).zip(b.chunks_exact(34)) {
        assert_eq!(ba[..2], bb[..2]);
        for (&u, &v) in ba[2..].iter().zip(&bb[2..]) {
            let d = i32::from(u as i8) - i32::from(v as i8);
            assert!(d.abs() <= 1);
            diff += usize::from(d != 0);
        }
    }
    eprintln!("x86 vs reference Q8_0 quants: {diff} of {} differ by ±1", x.len());
    assert!(diff < x.len() / 500);
}

#[test]
fn matches_f64_reference_all_isas_types_shapes() {
    let isas = isas();
    // Both kernel families: one-row tiles (small m) and packed panels (m ≥ 2 … 8 by type).
    const MS: [usize; 8] = [1, 2, 3, 7, 8, 11, 17, 64];
    const NS: [usize; 4] = [1, 5, 33, 263];
    let (m_max, n_max) = (64, 263);
    for (t, &ty) in TYPES.iter().enumerate() {
        let ks: &[usize] = if ty.block_size() == 32 { &[256, 640, 1024, 2048] } else { &[256, 1024, 2048] };
        for &k in ks {
            let seed = 0x51_1000 + (t as u64) * 16 + k as u64 / 128;
            let mut rng = rng(&format!("{ty} k={k}"), seed);
            let x = activations(&mut rng, m_max, k);
            let w = random_blocks(ty, n_max * k, rng.gen());
            let r = reference(ty, &x, m_max, k, &w, n_max);
            let row_bytes = ty.row_bytes(k).unwrap();
            for &isa in &isas {
                for order in [Q8Order::Fast, Q8Order::Ggml] {
                    let mut worst = 0.0f64;
                    for &m in &MS {
                        for &n in &NS {
                            let mut y = vec![f32::NAN; m * n];
                            let (xs, ws) = (&x[..m * k], &w[..n * row_bytes]);
                            matmul_qt_q8_ordered(isa, order, xs, m, k, ws, ty, n, &mut y).unwrap();
                            let what = format!("{isa} {order:?} {ty} m={m} n={n} k={k}");
                            worst = worst.max(check(&what, &y, &r, m, n, k));
                        }
                    }
                    eprintln!("{isa:>6} {order:?} {ty:<4} k={k:<4}: worst error {worst:.3} × bound");
                }
            }
        }
    }
}

#[test]
fn quantization_error_is_visible_against_f32_activations() {
    // NMSE of the int8 path against the f32-activation kernel: the activations' 8-bit rounding
    // (relative step 1/254 of the block maximum) must show, well above f32 noise (~1e-13).
    let (m, n, k) = (8, 64, 2048);
    for &ty in &TYPES {
        let mut rng = rng(&format!("nmse {ty}"), 0x51_2000 + ty as u64);
        let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        let w = random_blocks(ty, n * k, rng.gen());
        let mut yq = vec![f32::NAN; m * n];
        let mut yf = vec![f32::NAN; m * n];
        matmul_qt_q8_with(tg_kernels::isa(), &x, m, k, &w, ty, n, &mut yq).unwrap();
        matmul_qt_with(tg_kernels::isa(), &x, m, k, &w, ty, n, &mut yf).unwrap();
        let num: f64 = yq.iter().zip(&yf).map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2)).sum();
        let den: f64 = yf.iter().map(|&b| f64::from(b).powi(2)).sum();
        let nmse = num / den;
        eprintln!("{ty}: NMSE(q8 activations vs f32 activations) = {nmse:.2e}");
        assert!((1e-6..1e-3).contains(&nmse), "{ty}: NMSE {nmse:e}");
    }
}

#[test]
fn threads_and_prequantization_do_not_change_results() {
    let (m, n, k) = (7, 70, 1024);
    for &ty in &TYPES {
        let mut rng = rng(&format!("threads {ty}"), 0x51_3000 + ty as u64);
        let x = activations(&mut rng, m, k);
        let w = random_blocks(ty, n * k, rng.gen());
        for isa in Isa::available() {
            let run = |threads: usize| {
                let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().unwrap();
                let mut y = vec![f32::NAN; m * n];
                pool.install(|| matmul_qt_q8_with(isa, &x, m, k, &w, ty, n, &mut y)).unwrap();
                y
            };
            let y1 = run(1);
            assert!(y1.iter().all(|v| v.is_finite()));
            for t in [2, 3, 5] {
                assert_eq!(
                    run(t).iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    y1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                    "{isa} {ty} {t} threads"
                );
            }
            // Pre-quantized activations give the same bits.
            let xq = quantize_activations_with(isa, &x, m, k, q8_activation_type(ty).unwrap()).unwrap();
            let mut y2 = vec![f32::NAN; m * n];
            matmul_qt_q8_pre_ordered(isa, Q8Order::Fast, &xq, &w, ty, n, &mut y2).unwrap();
            assert_eq!(
                y2.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                y1.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                "{isa} {ty} pre"
            );
        }
    }
}

#[test]
fn zero_and_nonfinite_activations() {
    let (m, n, k) = (3, 9, 512);
    for &ty in &TYPES {
        let mut rng = rng(&format!("special {ty}"), 0x51_4000 + ty as u64);
        let w = random_blocks(ty, n * k, rng.gen());
        let mut x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
        x[..k].fill(0.0); // row 0 all zero
        x[2 * k + 300] = f32::NAN; // row 2 has a NaN
        for isa in Isa::available() {
            for bad in [f32::NAN, f32::INFINITY, f32::NEG_INFINITY] {
                x[2 * k + 300] = bad;
                let mut y = vec![f32::NAN; m * n];
                matmul_qt_q8_with(isa, &x, m, k, &w, ty, n, &mut y).unwrap();
                assert!(y[..n].iter().all(|&v| v == 0.0), "{isa} {ty}: zero row gives {:?}", &y[..n]);
                assert!(y[n..2 * n].iter().all(|v| v.is_finite()), "{isa} {ty}");
                assert!(y[2 * n..].iter().all(|v| v.is_nan()), "{isa} {ty} {bad}: {:?}", &y[2 * n..]);
            }
        }
    }
}

#[test]
fn float_weights_delegate_to_matmul_qt() {
    let (m, n, k) = (5, 7, 96);
    let mut rng = rng("float weights", 0x51_5000);
    let x: Vec<f32> = (0..m * k).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    for ty in [GgmlType::F32, GgmlType::F16, GgmlType::BF16] {
        assert_eq!(q8_activation_type(ty), None);
        let w = random_blocks(ty, n * k, rng.gen());
        for isa in Isa::available() {
            let mut a = vec![f32::NAN; m * n];
            let mut b = vec![f32::NAN; m * n];
            matmul_qt_q8_with(isa, &x, m, k, &w, ty, n, &mut a).unwrap();
            matmul_qt_with(isa, &x, m, k, &w, ty, n, &mut b).unwrap();
            assert_eq!(
                a.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
                b.iter().map(|v| v.to_bits()).collect::<Vec<_>>()
            );
        }
    }
}

#[test]
fn bad_arguments_are_errors() {
    let isa = tg_kernels::isa();
    let (m, n, k) = (2, 3, 256);
    for &ty in &TYPES {
        let rb = ty.row_bytes(k).unwrap();
        let x = vec![0.5f32; m * k];
        let w = random_blocks(ty, n * k, 1);
        let mut y = vec![0.0f32; m * n];
        let e = matmul_qt_q8_with(isa, &x[1..], m, k, &w, ty, n, &mut y).unwrap_err();
        assert!(matches!(e, KernelError::Length { .. }), "{e}");
        let e = matmul_qt_q8_with(isa, &x, m, k, &w[..n * rb - 1], ty, n, &mut y).unwrap_err();
        assert!(matches!(e, KernelError::Length { .. }), "{e}");
        let e = matmul_qt_q8_with(isa, &x, m, k, &w, ty, n, &mut y[1..]).unwrap_err();
        assert!(matches!(e, KernelError::Length { .. }), "{e}");
        // k not a whole number of blocks.
        let kk = k - 16;
        let e = matmul_qt_q8_with(isa, &x[..m * kk], m, kk, &w, ty, n, &mut y).unwrap_err();
        assert!(matches!(e, KernelError::Quant(_)), "{e}");
        // Activations of the wrong type for these weights.
        let other = if q8_activation_type(ty) == Some(GgmlType::Q8_0) { GgmlType::Q8_K } else { GgmlType::Q8_0 };
        let xq = quantize_activations_with(isa, &x, m, k, other).unwrap();
        assert!(matmul_qt_q8_pre_ordered(isa, Q8Order::Fast, &xq, &w, ty, n, &mut y).is_err());
        let xq = quantize_activations_with(isa, &x, m, k, q8_activation_type(ty).unwrap()).unwrap();
        assert!(matches!(
            matmul_qt_q8_pre_ordered(isa, Q8Order::Fast, &xq, &w, ty, n, &mut y[1..]),
            Err(KernelError::Length { .. })
        ));
    }
    // Types without an int8 kernel, and non-activation formats for the quantizer.
    for ty in [GgmlType::Q4_1, GgmlType::Q5_1, GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::Q8_K] {
        let k = 256;
        let w = random_blocks(ty, k, 2);
        let mut y = vec![0.0f32; 1];
        let e = matmul_qt_q8_with(isa, &vec![1.0; k], 1, k, &w, ty, 1, &mut y).unwrap_err();
        assert_eq!(e, KernelError::UnsupportedType(ty));
    }
    assert!(quantize_activations_with(isa, &[0.0; 256], 1, 256, GgmlType::Q4_0).is_err());
    assert!(quantize_activations_with(isa, &[0.0; 250], 1, 250, GgmlType::Q8_0).is_err());
    assert!(quantize_activations_with(isa, &[0.0; 255], 1, 256, GgmlType::Q8_K).is_err());
    // Empty shapes are fine; k = 0 gives zeros.
    let mut y = vec![f32::NAN; 6];
    matmul_qt_q8_with(isa, &[], 2, 0, &[], GgmlType::Q8_0, 3, &mut y).unwrap();
    assert!(y.iter().all(|&v| v == 0.0));
    matmul_qt_q8_with(isa, &[], 0, 256, &random_blocks(GgmlType::Q4_K, 256, 3), GgmlType::Q4_K, 1, &mut []).unwrap();
}

/// Outputs of llama.cpp's libggml-cpu (x86-64 build with AVX-512 VNNI, the llama.cpp vendored
/// by llama-cpp-python 0.3.36) for the deterministic inputs of [`golden_inputs`]: FNV-1a hashes
/// of the quantized activation rows (`from_float` of the activation type), `ggml_vec_dot_*`
/// results (`m = 2` rows × `n = 8` weight rows, `k = 512`, row-major f32 bits) and, for Q4_K,
/// the repacked kernel `ggml_gemv_q4_K_8x8_q8_K`.
struct Golden {
    ty: GgmlType,
    seed: u32,
    act_fnv: [u64; 2],
    vec_dot: [u32; 16],
    repack_gemv: Option<[u32; 16]>,
}

#[rustfmt::skip]
const GOLDEN: [Golden; 6] = [
    Golden { ty: GgmlType::Q4_0, seed: 2, act_fnv: [0xf5cbdb103325b5c1, 0xdb5aee4e845f9b41], vec_dot: [0xc1dc4072, 0x41dc585c, 0xc20a3628, 0x4155f12e, 0x4234b7cc, 0x41f3b8fa, 0xc231e62b, 0x416372ae, 0x414ad490, 0xc24175bc, 0x4277bed5, 0xbea60400, 0x41a41a16, 0xc194d9d0, 0xc1d7426c, 0x41b7e79f], repack_gemv: None },
    Golden { ty: GgmlType::Q5_0, seed: 6, act_fnv: [0xf5cbdb103325b5c1, 0xdb5aee4e845f9b41], vec_dot: [0xc2b35621, 0xc239bdfc, 0xc27a421c, 0xc1d4fec3, 0xc15c97c7, 0xc2cc9452, 0xc1e86092, 0x42473fb8, 0xc28b6f10, 0x4188d8bc, 0xc2013637, 0x3f9d3cc0, 0x4264cb46, 0x42e3db95, 0x42225d13, 0xc2dedfc7], repack_gemv: None },
    Golden { ty: GgmlType::Q8_0, seed: 8, act_fnv: [0xf5cbdb103325b5c1, 0xdb5aee4e845f9b41], vec_dot: [0xc39c407d, 0xc3ab3f08, 0xc3f9d60c, 0xc418c6b0, 0xc2e5f314, 0xc216341e, 0xbff26c40, 0xc1aaf900, 0xc3169a31, 0x4386a1ce, 0x4379cbd6, 0x4481b970, 0x440f5353, 0x43abcd98, 0x439d1ca0, 0x43984c7b], repack_gemv: None },
    Golden { ty: GgmlType::Q4_K, seed: 12, act_fnv: [0x34e1ddf242b11660, 0x4ebd609679934b82], vec_dot: [0xc33c9822, 0xc3f4c348, 0xc0e831d8, 0xc3eafe96, 0xc49261db, 0x42866233, 0xc4ec0848, 0xc3c9366c, 0x441dccf2, 0x4495303f, 0x44332458, 0x43b76aa6, 0xc3a8ce81, 0x450ce8d3, 0x44c58d39, 0x43a076c6], repack_gemv: Some([0xc33c9822, 0xc3f4c346, 0xc0e83210, 0xc3eafe97, 0xc49261db, 0x42866234, 0xc4ec0848, 0xc3c93666, 0x441dccf2, 0x4495303e, 0x44332458, 0x43b76aa4, 0xc3a8ce82, 0x450ce8d2, 0x44c58d3a, 0x43a076c2]) },
    Golden { ty: GgmlType::Q5_K, seed: 13, act_fnv: [0x34e1ddf242b11660, 0x4ebd609679934b82], vec_dot: [0xc24ad3ea, 0xc42c0f1c, 0x435059fc, 0xc4c39c39, 0x44c8b2a8, 0x451c8fce, 0xc5fcc5ce, 0xc50dce4b, 0x41a08db8, 0xc384b605, 0xc37da9ae, 0x4419bb89, 0x455e6afd, 0x44c7d5af, 0x46458016, 0x45c7af05], repack_gemv: None },
    Golden { ty: GgmlType::Q6_K, seed: 14, act_fnv: [0x34e1ddf242b11660, 0x4ebd609679934b82], vec_dot: [0x45af6a96, 0xc4ca5ca0, 0x4613b2ae, 0xc5e0a91f, 0x44a86a48, 0xc4fdf060, 0x45ccc258, 0x4529431c, 0xc5c01f7a, 0x4583d091, 0x44f1660c, 0xc5312188, 0xc48be768, 0x44ed2810, 0xc4b1edb8, 0xc60a8fd7], repack_gemv: None },
];

const GOLDEN_K: usize = 512;

/// Inputs reproducible bit for bit elsewhere: dyadic activations, LCG weight bytes with fixed
/// positive f16 scales.
fn golden_inputs(g: &Golden) -> (Vec<f32>, Vec<u8>) {
    let k = GOLDEN_K;
    let mut x = Vec::with_capacity(2 * k);
    for i in 0..2 {
        for e in 0..k {
            let v = ((e * 7919 + i * 104_729) % 2003) as i32 - 1001;
            x.push(v as f32 / 128.0 * 2f32.powi((e / 32) as i32 % 4 - 1));
        }
    }
    let (ts, fields): (usize, &[usize]) = match g.ty {
        GgmlType::Q4_0 => (18, &[0]),
        GgmlType::Q5_0 => (22, &[0]),
        GgmlType::Q8_0 => (34, &[0]),
        GgmlType::Q4_K => (144, &[0, 2]),
        GgmlType::Q5_K => (176, &[0, 2]),
        _ => (210, &[208]),
    };
    let mut s = g.seed;
    let mut w: Vec<u8> = (0..8 * k / g.ty.block_size() * ts)
        .map(|_| {
            s = s.wrapping_mul(1_103_515_245).wrapping_add(12_345);
            (s >> 16) as u8
        })
        .collect();
    for (b, blk) in w.chunks_exact_mut(ts).enumerate() {
        for (f, &off) in fields.iter().enumerate() {
            let h = 0x2000 + ((b * 131 + f * 17) % 0x0C00) as u16;
            blk[off..off + 2].copy_from_slice(&h.to_le_bytes());
        }
    }
    (x, w)
}

fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3))
}

#[test]
fn bit_identical_to_libggml_cpu() {
    let k = GOLDEN_K;
    for g in &GOLDEN {
        let (x, w) = golden_inputs(g);
        let act = q8_activation_type(g.ty).unwrap();
        for isa in Isa::available() {
            let xq = quantize_activations_with(isa, &x, 2, k, act).unwrap();
            for i in 0..2 {
                assert_eq!(fnv1a(&xq.row_ggml_bytes(i).unwrap()), g.act_fnv[i], "{isa} {}: activations row {i}", g.ty);
            }
            if isa == Isa::Scalar {
                continue; // the portable path sums in its own order
            }
            let bits = |y: &[f32]| y.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
            // One activation row at a time: ggml_vec_dot order, for every type.
            for i in 0..2 {
                let mut y = vec![f32::NAN; 8];
                matmul_qt_q8_ordered(isa, Q8Order::Fast, &x[i * k..(i + 1) * k], 1, k, &w, g.ty, 8, &mut y).unwrap();
                assert_eq!(bits(&y), g.vec_dot[8 * i..8 * i + 8], "{isa} {} fast m=1 row {i} vs vec_dot", g.ty);
            }
            // Both rows in llama.cpp's order (vec_dot / tinyBLAS; repacked gemv for Q4_K).
            let mut y = vec![f32::NAN; 16];
            matmul_qt_q8_ordered(isa, Q8Order::Ggml, &x, 2, k, &w, g.ty, 8, &mut y).unwrap();
            assert_eq!(bits(&y), g.repack_gemv.unwrap_or(g.vec_dot), "{isa} {} ggml order m=2", g.ty);
        }
    }
}

/// The model file (`TG_MODEL` or the default path), if present.
fn model_path() -> Option<std::path::PathBuf> {
    let p = std::env::var_os("TG_MODEL").map(std::path::PathBuf::from).or_else(|| {
        std::env::var_os("HOME")
            .map(|h| std::path::Path::new(&h).join(".cache/tensor-graphs/models/gemma-3-270m-q4_k_m.gguf"))
    })?;
    p.exists().then_some(p)
}

/// Residual-stream-like activations: N(0, 1) everywhere, and a few fixed channels (the same in
/// every row) scaled by ~1e3 — as in Gemma's residual stream, where a handful of channels reach
/// 1e3…1e4 while most |x| < 10. Per-block scales therefore differ by orders of magnitude.
fn heavy_tailed(rng: &mut ChaCha8Rng, m: usize, k: usize) -> Vec<f32> {
    let hot: Vec<usize> = (0..(k / 160).max(2)).map(|_| rng.gen_range(0..k)).collect();
    let mut x = Vec::with_capacity(m * k);
    for i in 0..m {
        // Rows of different overall magnitude as well (1e-2, 1, 1e2).
        let row_scale = [1.0, 1e-2, 1e2][i % 3];
        for e in 0..k {
            // Box–Muller.
            let (u1, u2): (f64, f64) = (rng.gen_range(f64::MIN_POSITIVE..1.0), rng.gen());
            let g = (-2.0 * u1.ln()).sqrt() * (std::f64::consts::TAU * u2).cos();
            let v = if hot.contains(&e) { g * 1000.0 + 3000.0 * g.signum() } else { g };
            x.push((v * row_scale) as f32);
        }
    }
    x
}

#[test]
fn heavy_tailed_activations_all_kernels_m_1_to_8() {
    // Real Gemma 3 weights when the model is present (their scale statistics differ from random
    // blocks), random blocks for the other types and as a fallback.
    let file = model_path().map(|p| tg_gguf::GgufFile::open(p).unwrap());
    let mut cases: Vec<(String, GgmlType, usize, Vec<u8>)> = Vec::new();
    if let Some(f) = &file {
        // The first matrix of each (type, row length) in the file — for Gemma 3 270M: the Q8_0
        // embedding (= lm head), Q5_0 attn_k, Q4_K attn_output, Q6_K and Q4_K ffn_down — first
        // 264 rows each. `heavy_tailed_activations_every_model_matrix` covers every matrix.
        let mut seen = Vec::new();
        for t in f.tensors() {
            if q8_activation_type(t.ty).is_none() || t.dims.len() != 2 || seen.contains(&(t.ty, t.row_len())) {
                continue;
            }
            seen.push((t.ty, t.row_len()));
            let (k, n) = (t.row_len(), t.n_rows().min(264));
            let bytes = &f.tensor_bytes(t)[..n * t.row_bytes()];
            cases.push((t.name.clone(), t.ty, k, bytes.to_vec()));
        }
    } else {
        eprintln!("model not found (set TG_MODEL): random weights only");
    }
    for (t, &ty) in TYPES.iter().enumerate() {
        let k = if ty.block_size() == 32 { 640 } else { 2048 };
        cases.push((format!("random {ty}"), ty, k, random_blocks(ty, 264 * k, 0x51_3000 + t as u64)));
    }
    let isas = isas();
    for (c, (name, ty, k, w)) in cases.iter().enumerate() {
        let (ty, k) = (*ty, *k);
        let n = w.len() / ty.row_bytes(k).unwrap();
        let mut rng = rng(&format!("heavy {name} ({ty}, k={k}, n={n})"), 0x51_4000 + c as u64);
        let x = heavy_tailed(&mut rng, 8, k);
        let r = reference(ty, &x, 8, k, w, n);
        for &isa in &isas {
            for order in [Q8Order::Fast, Q8Order::Ggml] {
                // Worst error in units of the bound and NMSE against the reference, over m.
                let (mut worst, mut worst_nmse) = (0.0f64, 0.0f64);
                for m in 1..=8 {
                    let mut y = vec![f32::NAN; m * n];
                    matmul_qt_q8_ordered(isa, order, &x[..m * k], m, k, w, ty, n, &mut y).unwrap();
                    worst = worst.max(check(&format!("{name} {isa} {order:?} m={m}"), &y, &r, m, n, k));
                    let (num, den) = y
                        .iter()
                        .zip(&r.y)
                        .fold((0.0, 0.0), |(a, b), (&v, &rv)| (a + (f64::from(v) - rv).powi(2), b + rv * rv));
                    worst_nmse = worst_nmse.max(num / den);
                }
                eprintln!(
                    "{name:<26} {ty:<4} {isa:>6} {order:?} m=1..8: worst {worst:.3} × bound, NMSE ≤ {worst_nmse:.1e}"
                );
                assert!(worst_nmse < 1e-12, "{name} {isa} {order:?}: NMSE {worst_nmse:e}");
            }
        }
    }
}

#[test]
#[ignore = "slow: every quantized matrix of the model, full size (set TG_MODEL)"]
fn heavy_tailed_activations_every_model_matrix() {
    let Some(path) = model_path() else {
        panic!("model not found: set TG_MODEL");
    };
    let f = tg_gguf::GgufFile::open(path).unwrap();
    let isas = isas();
    for (c, t) in f.tensors().iter().enumerate() {
        if q8_activation_type(t.ty).is_none() || t.dims.len() != 2 {
            continue;
        }
        let (ty, k, n) = (t.ty, t.row_len(), t.n_rows());
        let w = f.tensor_bytes(t);
        let mut rng = rng(&format!("every {} ({ty}, k={k}, n={n})", t.name), 0x51_5000 + c as u64);
        let ms: &[usize] = if n > 100_000 { &[1] } else { &[1, 5] };
        let m_max = *ms.last().unwrap();
        let x = heavy_tailed(&mut rng, m_max, k);
        let r = reference(ty, &x, m_max, k, w, n);
        for &isa in &isas {
            for order in [Q8Order::Fast, Q8Order::Ggml] {
                for &m in ms {
                    let mut y = vec![f32::NAN; m * n];
                    matmul_qt_q8_ordered(isa, order, &x[..m * k], m, k, w, ty, n, &mut y).unwrap();
                    let worst = check(&format!("{} {isa} {order:?} m={m}", t.name), &y, &r, m, n, k);
                    eprintln!("{:<26} {ty:<4} {isa:>6} {order:?} m={m}: worst {worst:.3} × bound", t.name);
                }
            }
        }
    }
}

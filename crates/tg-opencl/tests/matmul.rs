//! f32 batched matmul, quantized matmuls (both numerics, with and without the add epilogue)
//! and gathers against f64 references.
//!
//! Tolerances (ε = 2⁻²³, S = Σ|a·b| over the dot product's terms):
//! * f32 matmul: `(k + 16)·ε·S` — f32 accumulation of k products in four partial sums.
//! * quantized, f32 numerics: reference = f64 dot of tg_quant-dequantized weights (the kernel's
//!   dequantization is exact, so only accumulation differs): `(k + 64)·ε·S`.
//! * quantized, q8 numerics: activations quantized with tg_quant's reference quantizers
//!   (`quantize_row_q8_0` / `quantize_row_q8_k`) and dequantized again; the reference is the
//!   exact f64 value of the integer block products, `Σ w·x_q`. The kernel rounds one f32 scale
//!   product per block and accumulates blocks in f32: `(k/32 + 64)·ε·S`. (Q8_0: the kernels
//!   round like ggml's x86 code, the reference quantizer half away from zero; they differ only
//!   on exact ties, about one element in a million — none with these seeds.) The result is
//!   also checked against the CPU kernel `tg_kernels::matmul_qt_q8` with the same bound.
//! * gather: bit-exact with tg_quant's dequantizers.

mod common;

use common::*;
use tg_ir::DType;
use tg_quant::GgmlType;
use tg_runtime::{Kernel, Layout};

const EPS: f64 = f32::EPSILON as f64;

fn f(shape: &[usize]) -> Layout {
    Layout::contiguous(shape, DType::F32)
}

fn run_matmul(env: &Env, transpose_rhs: bool, a: (&[f32], Layout), b: (&[f32], Layout), out_shape: &[usize]) {
    let r = out_shape.len();
    let (la, lb) = (a.1.clone(), b.1.clone());
    let out = f(out_shape);
    let got =
        to_f32(&run(env, &Kernel::MatMul { transpose_rhs }, &[In { bytes: f32_bytes(a.0), layout: la.clone() }, In { bytes: f32_bytes(b.0), layout: lb.clone() }], &out).unwrap());
    let (m, k, n) = (la.shape[r - 2], la.shape[r - 1], out_shape[r - 1]);
    let nb: usize = out_shape[..r - 2].iter().product();
    let (mut want, mut scale) = (Vec::new(), Vec::new());
    for bt in 0..nb {
        // Batch index → per-dim indices.
        let mut rem = bt;
        let mut idx = vec![0usize; r - 2];
        for d in (0..r - 2).rev() {
            idx[d] = rem % out_shape[d];
            rem /= out_shape[d];
        }
        let base = |l: &Layout| idx.iter().enumerate().map(|(d, &i)| i as isize * l.strides[d]).sum::<isize>() + l.offset as isize;
        let (ba, bb) = (base(&la), base(&lb));
        for i in 0..m {
            for j in 0..n {
                let (mut s, mut sa) = (0.0f64, 0.0f64);
                for e in 0..k {
                    let av = a.0[(ba + i as isize * la.strides[r - 2] + e as isize * la.strides[r - 1]) as usize] as f64;
                    let bi = if transpose_rhs {
                        bb + j as isize * lb.strides[r - 2] + e as isize * lb.strides[r - 1]
                    } else {
                        bb + e as isize * lb.strides[r - 2] + j as isize * lb.strides[r - 1]
                    };
                    let bv = b.0[bi as usize] as f64;
                    s += av * bv;
                    sa += (av * bv).abs();
                }
                want.push(s);
                scale.push(sa);
            }
        }
    }
    check(&format!("matmul {out_shape:?} t={transpose_rhs}"), &got, &want, |i, _| (k as f64 + 16.0) * EPS * scale[i] + 1e-30);
}

#[test]
fn matmul_f32_batched_strided() {
    let Some(env) = env() else { return };
    let mut r = rng("matmul_f32", 21);
    // Plain [7, 13] x [13, 9].
    let a = rand_f32(&mut r, 91, -1.0, 1.0);
    let b = rand_f32(&mut r, 117, -1.0, 1.0);
    run_matmul(env, false, (&a, f(&[7, 13])), (&b, f(&[13, 9])), &[7, 9]);
    // Batched rank 4: a [2, 3, 5, 11] stored as [2, 5, 3, 11] (permuted), b [2, 3, 6, 11]
    // transposed rhs, broadcast along dim 0 (stride 0) and offset.
    let a = rand_f32(&mut r, 330, -1.0, 1.0);
    let la = strided(&[2, 3, 5, 11], &[165, 11, 33, 1], 0, DType::F32);
    let b = rand_f32(&mut r, 210, -1.0, 1.0);
    let lb = strided(&[2, 3, 6, 11], &[0, 66, 11, 1], 5, DType::F32);
    run_matmul(env, true, (&a, la), (&b, lb), &[2, 3, 5, 6]);
    // Rank 3 with the rhs a transposed view ([4, 11, 6] over [4, 6, 11] storage), k = 1.
    let b = rand_f32(&mut r, 264, -1.0, 1.0);
    let lb = strided(&[4, 11, 6], &[66, 1, 11], 0, DType::F32);
    let a = rand_f32(&mut r, 4 * 3 * 11, -1.0, 1.0);
    run_matmul(env, false, (&a, f(&[4, 3, 11])), (&b, lb), &[4, 3, 6]);
    let a1 = rand_f32(&mut r, 8, -1.0, 1.0);
    run_matmul(env, false, (&a1, f(&[8, 1])), (&a1, f(&[1, 8])), &[8, 8]);
    // Rank 5, three batch dims (one broadcast), 17 x 33 x 19.
    let a = rand_f32(&mut r, 2 * 3 * 17 * 33, -1.0, 1.0);
    let la = strided(&[2, 2, 3, 17, 33], &[1683, 0, 561, 33, 1], 0, DType::F32);
    let b = rand_f32(&mut r, 2 * 2 * 3 * 33 * 19, -1.0, 1.0);
    run_matmul(env, false, (&a, la), (&b, f(&[2, 2, 3, 33, 19])), &[2, 2, 3, 17, 19]);
}

fn dequant(ty: GgmlType, bytes: &[u8], n: usize, k: usize) -> Vec<f32> {
    let mut w = vec![0f32; n * k];
    tg_quant::dequantize_row(ty, bytes, &mut w).unwrap();
    w
}

/// The activations as the q8 numerics see them: quantized with tg_quant's reference
/// quantizer for `ty`'s activation format, then dequantized.
fn q8_view(ty: GgmlType, x: &[f32], m: usize, k: usize) -> Option<Vec<f32>> {
    let act = tg_kernels::q8_activation_type(ty)?;
    let mut out = vec![0f32; m * k];
    for i in 0..m {
        let mut blocks = vec![0u8; act.row_bytes(k).unwrap()];
        let row = &x[i * k..(i + 1) * k];
        match act {
            GgmlType::Q8_0 => tg_quant::quantize_row_q8_0(row, &mut blocks).unwrap(),
            _ => tg_quant::quantize_row_q8_k(row, &mut blocks).unwrap(),
        }
        tg_quant::dequantize_row(act, &blocks, &mut out[i * k..(i + 1) * k]).unwrap();
    }
    Some(out)
}

const TYPES: [GgmlType; 9] = [GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q5_0, GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K, GgmlType::Q6_K];

#[test]
fn matmul_quant_all_types_both_numerics() {
    let Some(env) = env() else { return };
    // Both launch shapes run every case: the GPU one (a 32-lane run per weight row) and the
    // CPU-like one (a work-item per row) take different kernels for m <= 8.
    with_each_tuning(env, matmul_quant_cases);
}

fn matmul_quant_cases(env: &Env) {
    let mut r = rng("matmul_quant", 22);
    let n = 37;
    for (ti, ty) in TYPES.into_iter().enumerate() {
        let k = match ty.block_size() {
            1 => 70,
            32 => 96,
            _ => 512,
        };
        let wb = tg_quant::random_blocks(ty, n * k, 1000 + ti as u64);
        let w = dequant(ty, &wb, n, k);
        let wl = Layout::contiguous(&[n, k], if ty == GgmlType::F32 { DType::F32 } else { DType::Quant(ty) });
        for m in [1usize, 5, 9] {
            // Activations in a [m, k] view at element offset 3 of their buffer.
            let mut xs = rand_f32(&mut r, m * k + 3, -1.0, 1.0);
            xs[3] = 2.5;
            let x = xs[3..].to_vec();
            let xl = Layout { offset: 3, ..f(&[m, k]) };
            let bias = rand_f32(&mut r, n, -1.0, 1.0);
            let resid = rand_f32(&mut r, m * n, -1.0, 1.0);
            for qa in [false, true] {
                let xv = if qa { q8_view(ty, &x, m, k).unwrap_or_else(|| x.clone()) } else { x.clone() };
                let mut want = vec![0f64; m * n];
                let mut scale = vec![0f64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        for e in 0..k {
                            let p = xv[i * k + e] as f64 * w[j * k + e] as f64;
                            want[i * n + j] += p;
                            scale[i * n + j] += p.abs();
                        }
                    }
                }
                let per = if qa && ty.block_size() > 1 { k as f64 / 32.0 + 64.0 } else { k as f64 + 64.0 };
                let tol = |i: usize, _w: f64| per * EPS * scale[i] + 1e-30;
                let what = format!("{ty} m={m} k={k} q8={qa}");
                let ins = [In { bytes: f32_bytes(&xs), layout: xl.clone() }, In { bytes: wb.clone(), layout: wl.clone() }];
                let got = to_f32(&run(env, &Kernel::MatMulQuant { quantize_activations: qa }, &ins, &f(&[m, n])).unwrap());
                check(&what, &got, &want, tol);
                // The CPU kernel of the same numerics.
                let mut cpu = vec![0f32; m * n];
                if qa {
                    tg_kernels::matmul_qt_q8(&x, m, k, &wb, ty, n, &mut cpu).unwrap();
                } else {
                    tg_kernels::matmul_qt(&x, m, k, &wb, ty, n, &mut cpu).unwrap();
                }
                let cpu64: Vec<f64> = cpu.iter().map(|&v| v as f64).collect();
                check(&format!("{what} vs cpu"), &got, &cpu64, |i, _| 2.0 * per * EPS * scale[i] + 1e-30);
                // Epilogues: a bias row, and a residual of the output's shape.
                for (c, cl) in [(&bias, f(&[n])), (&resid, f(&[m, n]))] {
                    let mut ins2 = vec![In { bytes: f32_bytes(&xs), layout: xl.clone() }, In { bytes: wb.clone(), layout: wl.clone() }];
                    ins2.push(In { bytes: f32_bytes(c), layout: cl.clone() });
                    let got = to_f32(&run(env, &Kernel::MatMulQuantAdd { quantize_activations: qa }, &ins2, &f(&[m, n])).unwrap());
                    let want2: Vec<f64> = want.iter().enumerate().map(|(i, &v)| v + c[if c.len() == n { i % n } else { i }] as f64).collect();
                    check(&format!("{what} + c{:?}", cl.shape), &got, &want2, |i, w| tol(i, w) + EPS * w.abs());
                }
            }
        }
    }
}

#[test]
fn matmul_quant_q8_degenerate_blocks() {
    let Some(env) = env() else { return };
    with_each_tuning(env, q8_degenerate_cases);
}

fn q8_degenerate_cases(env: &Env) {
    // All-zero activation blocks (Q8_0 scale 0, Q8_K amax 0) give exact zeros; a NaN in a block
    // makes the dependent outputs NaN (as the CPU kernel).
    for ty in [GgmlType::Q8_0, GgmlType::Q4_K] {
        let (n, k) = (5, 256);
        let wb = tg_quant::random_blocks(ty, n * k, 7);
        let mut x = vec![0f32; 2 * k];
        x[k + 3] = f32::NAN;
        let ins = [In { bytes: f32_bytes(&x), layout: f(&[2, k]) }, In { bytes: wb.clone(), layout: Layout::contiguous(&[n, k], DType::Quant(ty)) }];
        let got = to_f32(&run(env, &Kernel::MatMulQuant { quantize_activations: true }, &ins, &f(&[2, n])).unwrap());
        assert!(got[..n].iter().all(|&v| v == 0.0), "{ty}: {got:?}");
        assert!(got[n..].iter().all(|v| v.is_nan()), "{ty}: {got:?}");
    }
}

#[test]
fn gather_all_types_exact() {
    let Some(env) = env() else { return };
    let rows = 11;
    for (ti, ty) in TYPES.into_iter().enumerate() {
        let k = match ty.block_size() {
            1 => 45,
            32 => 64,
            _ => 256,
        };
        let tb = tg_quant::random_blocks(ty, rows * k, 2000 + ti as u64);
        let table = dequant(ty, &tb, rows, k);
        let ids = [3i32, 0, 10, 3, 7, 1];
        let tl = Layout::contiguous(&[rows, k], if ty == GgmlType::F32 { DType::F32 } else { DType::Quant(ty) });
        let ins = [In { bytes: tb.clone(), layout: tl.clone() }, In { bytes: i32_bytes(&ids), layout: Layout::contiguous(&[2, 3], DType::I32) }];
        let got = to_f32(&run(env, &Kernel::Gather, &ins, &f(&[2, 3, k])).unwrap());
        let want: Vec<f32> = ids.iter().flat_map(|&i| table[i as usize * k..(i as usize + 1) * k].to_vec()).collect();
        assert!(got.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "gather {ty}");
        // An id outside the table is an error.
        let ins = [In { bytes: tb, layout: tl }, In { bytes: i32_bytes(&[1, rows as i32]), layout: Layout::contiguous(&[2], DType::I32) }];
        let e = run(env, &Kernel::Gather, &ins, &f(&[2, k])).unwrap_err();
        assert!(e.contains("gather") && e.contains("outside"), "{e}");
    }
}

fn time_matmul(env: &Env, ty: GgmlType, m: usize, n: usize, k: usize, qa: bool) -> f64 {
    use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
    let wb = tg_quant::random_blocks(ty, n * k, 5);
    let x = vec![0.5f32; m * k];
    let wbuf = upload(env, &wb, 0);
    let xbuf = upload(env, &f32_bytes(&x), 0);
    // SAFETY: no host pointer.
    let obuf = unsafe { Buffer::<u8>::create(&env.context, CL_MEM_READ_WRITE, m * n * 4, std::ptr::null_mut()) }.unwrap();
    let (xl, wl, ol) = (f(&[m, k]), Layout::contiguous(&[n, k], DType::Quant(ty)), f(&[m, n]));
    let kern = Kernel::MatMulQuant { quantize_activations: qa };
    let go = || {
        env.kernels
            .enqueue(
                &env.queue,
                &kern,
                &[tg_opencl::ClArg { mem: &xbuf, byte_offset: 0, layout: &xl }, tg_opencl::ClArg { mem: &wbuf, byte_offset: 0, layout: &wl }],
                tg_opencl::ClArg { mem: &obuf, byte_offset: 0, layout: &ol },
            )
            .unwrap();
        env.queue.finish().unwrap();
    };
    go();
    let reps = 10;
    let t = std::time::Instant::now();
    for _ in 0..reps {
        go();
    }
    t.elapsed().as_secs_f64() / reps as f64 * 1e3
}

/// Timings (not a check): `cargo test --release -p tg-opencl --test matmul -- --ignored --nocapture`.
#[test]
#[ignore]
fn bench_matmul_quant() {
    let Some(env) = env() else { return };
    for (ty, m, n, k) in
        [(GgmlType::Q4_K, 6, 640, 2048), (GgmlType::Q6_K, 6, 640, 2048), (GgmlType::Q5_0, 6, 2048, 640), (GgmlType::Q8_0, 6, 2048, 640), (GgmlType::Q8_0, 1, 262_144, 640)]
    {
        for qa in [false, true] {
            println!("{ty} x[{m},{k}] · W[{n},{k}]ᵀ q8={qa}: {:.1} ms", time_matmul(env, ty, m, n, k, qa));
        }
    }
}

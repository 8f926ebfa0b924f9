//! Elementwise maps, row reductions and strided copies against scalar / f64 references on every
//! ISA, with odd lengths, special values and poisoned outputs.

mod common;

use common::*;
use rand::Rng;
use tg_kernels::{
    binary_col_broadcast_with, binary_f32_with, binary_row_broadcast_with, copy_strided_f32, reduce_rows_f32_with, unary_f32_with, BinaryOp, Isa, KernelError, ReduceOp, UnaryOp,
};

const LENS: [usize; 9] = [0, 1, 7, 15, 16, 17, 63, 1000, 70_001];

fn same(a: f32, b: f32) -> bool {
    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan())
}

/// Random values with a sprinkling of specials.
fn values(r: &mut rand_chacha::ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    let specials = [0.0, -0.0, 1.0, -1.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 1e-40, f32::MAX];
    (0..n).map(|_| if r.gen_range(0..20) == 0 { specials[r.gen_range(0..specials.len())] } else { r.gen_range(lo..hi) }).collect()
}

const BINOPS: [BinaryOp; 6] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min];

#[test]
fn binary_ops_are_exact() {
    for isa in isas() {
        for op in BINOPS {
            for &n in &LENS {
                let mut r = rng(&format!("binary {isa} {op:?} n={n}"), n as u64 * 31 + op as u64);
                let a = values(&mut r, n, -10.0, 10.0);
                let b = values(&mut r, n, -10.0, 10.0);
                let mut out = vec![f32::NAN; n];
                binary_f32_with(isa, op, &a, &b, &mut out).unwrap();
                for i in 0..n {
                    let want = op.apply(a[i], b[i]);
                    assert!(same(out[i], want), "{isa} {op:?} n={n} [{i}]: {} {} -> {} want {want}", a[i], b[i], out[i]);
                }
            }
        }
    }
}

#[test]
fn broadcast_ops_are_exact() {
    for isa in isas() {
        for op in BINOPS {
            for &(rows, n) in &[(1usize, 1usize), (3, 17), (5, 16), (40, 33), (2, 40_000), (3000, 7)] {
                let mut r = rng(&format!("broadcast {isa} {op:?} {rows}x{n}"), (rows * n) as u64 + op as u64);
                let a = values(&mut r, rows * n, -10.0, 10.0);
                let brow = values(&mut r, n, -10.0, 10.0);
                let bcol = values(&mut r, rows, -10.0, 10.0);
                let mut out = vec![f32::NAN; rows * n];
                binary_row_broadcast_with(isa, op, &a, &brow, &mut out).unwrap();
                for i in 0..rows * n {
                    assert!(same(out[i], op.apply(a[i], brow[i % n])), "{isa} row-bcast {op:?} {rows}x{n} [{i}]");
                }
                let mut out = vec![f32::NAN; rows * n];
                binary_col_broadcast_with(isa, op, &a, &bcol, &mut out).unwrap();
                for i in 0..rows * n {
                    assert!(same(out[i], op.apply(a[i], bcol[i / n])), "{isa} col-bcast {op:?} {rows}x{n} [{i}]");
                }
            }
        }
    }
}

#[test]
fn binary_rejects_bad_lengths() {
    let isa = Isa::detect();
    let a = [1.0f32; 12];
    let mut o = [0.0f32; 12];
    assert!(matches!(binary_f32_with(isa, BinaryOp::Add, &a, &a[1..], &mut o), Err(KernelError::Length { .. })));
    assert!(matches!(binary_f32_with(isa, BinaryOp::Add, &a, &a, &mut o[1..]), Err(KernelError::Length { .. })));
    assert!(matches!(binary_row_broadcast_with(isa, BinaryOp::Add, &a, &a[..5], &mut o), Err(KernelError::Shape(_))));
    assert!(matches!(binary_col_broadcast_with(isa, BinaryOp::Add, &a, &a[..5], &mut o), Err(KernelError::Shape(_))));
    assert!(binary_row_broadcast_with(isa, BinaryOp::Add, &a, &[], &mut o).is_err());
    assert!(binary_col_broadcast_with(isa, BinaryOp::Add, &a, &[], &mut o).is_err());
}

/// Relative error of `got` against the f64 value, in units of 2^-24 of |want| (with subnormal
/// results measured against the subnormal spacing).
fn rel_ulps(got: f32, want: f64) -> f64 {
    if want.is_nan() {
        return if got.is_nan() { 0.0 } else { f64::INFINITY };
    }
    // Results beyond f32's range must be the correctly rounded infinity.
    if (want as f32).is_infinite() || got.is_infinite() {
        return if got == want as f32 { 0.0 } else { f64::INFINITY };
    }
    let spacing = (want.abs() * f32::EPSILON as f64 / 2.0).max(f32::from_bits(1) as f64);
    (got as f64 - want).abs() / spacing
}

/// `1 / (1 + e^−x)` in f64 (exact enough to be the reference for f32).
fn sigmoid_f64(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn unary_ops_accuracy() {
    let ops = [
        (UnaryOp::Neg, -50.0, 50.0),
        (UnaryOp::Abs, -50.0, 50.0),
        (UnaryOp::Square, -50.0, 50.0),
        (UnaryOp::Sqrt, 0.0, 1000.0),
        (UnaryOp::Rsqrt, 0.0, 1000.0),
        (UnaryOp::Recip, -10.0, 10.0),
        (UnaryOp::Exp, -110.0, 95.0),
        (UnaryOp::Tanh, -12.0, 12.0),
        (UnaryOp::Log, 0.0, 100.0),
        (UnaryOp::Sin, -10.0, 10.0),
        (UnaryOp::Cos, -10.0, 10.0),
        (UnaryOp::Sigmoid, -120.0, 120.0),
        (UnaryOp::Silu, -120.0, 120.0),
        (UnaryOp::Erf, -6.0, 6.0),
    ];
    for isa in isas() {
        for &(op, lo, hi) in &ops {
            let mut r = rng(&format!("unary {isa} {op:?}"), op as u64 + 11);
            let mut x = values(&mut r, 50_000, lo, hi);
            // Dense coverage near 0 and of the exp/tanh range boundaries.
            x.extend((0..4000).map(|i| (i as f32 - 2000.0) * 1e-3));
            x.extend([88.72, 88.73, 89.5, -87.3, -103.0, -103.9, -104.5, 0.625, -0.625, 0.624_999_9, 9.0, 1e-30]);
            let mut out = vec![f32::NAN; x.len()];
            unary_f32_with(isa, op, &x, &mut out).unwrap();
            let mut worst = 0.0f64;
            for (i, (&v, &o)) in x.iter().zip(&out).enumerate() {
                let e = match op {
                    UnaryOp::Exp => rel_ulps(o, (v as f64).exp()),
                    UnaryOp::Tanh => rel_ulps(o, (v as f64).tanh()),
                    UnaryOp::Sigmoid => rel_ulps(o, sigmoid_f64(v as f64)),
                    UnaryOp::Silu => {
                        // Where σ(x) is subnormal (x < −87.3) it carries fewer bits: there the
                        // bound is |x| times the subnormal spacing.
                        let want = v as f64 * sigmoid_f64(v as f64);
                        if sigmoid_f64(v as f64) < f32::MIN_POSITIVE as f64 && !want.is_nan() {
                            let err = (o as f64 - want).abs() / (v.abs() as f64 * f32::from_bits(1) as f64);
                            assert!(err <= 1.0, "{isa} silu({v}) = {o}, want {want}");
                            0.0
                        } else {
                            rel_ulps(o, want)
                        }
                    }
                    UnaryOp::Erf => rel_ulps(o, libm::erf(v as f64)),
                    // Everything else is defined as the std / IEEE f32 computation, exactly.
                    _ => {
                        assert!(same(o, op.apply(v)), "{isa} {op:?}({v}) = {o}, want {}", op.apply(v));
                        0.0
                    }
                };
                assert!(e <= 4.0, "{isa} {op:?}[{i}]({v}) = {o}: {e} ulps");
                worst = worst.max(e);
            }
            eprintln!("{isa} {op:?}: worst {worst:.2} ulps (2^-24 relative)");
        }
    }
}

#[test]
fn reductions() {
    for isa in isas() {
        for op in [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max] {
            for &n in &[0usize, 1, 5, 16, 17, 63, 64, 65, 1000, 4099] {
                for rows in [1usize, 3, 40] {
                    let mut r = rng(&format!("reduce {isa} {op:?} {rows}x{n}"), (n * 100 + rows) as u64);
                    let x = uniform(&mut r, rows * n, -2.0, 3.0);
                    let mut out = vec![f32::NAN; rows];
                    reduce_rows_f32_with(isa, op, &x, n, &mut out).unwrap();
                    for (i, &o) in out.iter().enumerate() {
                        let row = &x[i * n..(i + 1) * n];
                        match op {
                            ReduceOp::Max => {
                                let want = row.iter().cloned().fold(f32::NEG_INFINITY, f32::max);
                                assert_eq!(o, want, "{isa} max {rows}x{n} row {i}");
                            }
                            _ => {
                                let s: f64 = row.iter().map(|&v| v as f64).sum();
                                let mag: f64 = row.iter().map(|&v| (v as f64).abs()).sum();
                                let (want, scale) = if op == ReduceOp::Mean { (s / n as f64, n as f64) } else { (s, 1.0) };
                                if n == 0 {
                                    assert!(if op == ReduceOp::Mean { o.is_nan() } else { o == 0.0 });
                                    continue;
                                }
                                // Documented bound: (n/(4·LANES) + log2(4·LANES)) ε Σ|x|, LANES ≥ 8.
                                let bound = (n as f64 / 32.0 + 8.0) * f32::EPSILON as f64 / 2.0 * mag / scale + f32::EPSILON as f64 * want.abs();
                                assert!((o as f64 - want).abs() <= bound, "{isa} {op:?} {rows}x{n} row {i}: {o} vs {want} (bound {bound:e})");
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(reduce_rows_f32_with(Isa::detect(), ReduceOp::Sum, &[1.0; 10], 3, &mut [0.0; 3]).is_err());
}

/// Naive strided gather.
fn gather(src: &[f32], shape: &[usize], strides: &[isize], offset: usize) -> Vec<f32> {
    let total: usize = shape.iter().product();
    let mut out = Vec::with_capacity(total);
    for lin in 0..total {
        let mut rem = lin;
        let mut off = offset as isize;
        for d in (0..shape.len()).rev() {
            off += (rem % shape[d]) as isize * strides[d];
            rem /= shape[d];
        }
        out.push(src[off as usize]);
    }
    out
}

#[test]
fn copy_strided_matches_naive_gather() {
    let mut r = rng("copy_strided", 9);
    let src = uniform(&mut r, 200_000, -1.0, 1.0);
    // (shape, strides, offset)
    let cases: Vec<(Vec<usize>, Vec<isize>, usize)> = vec![
        // Permute [2,3,4,5] → axes (0,2,1,3): inner stride 1.
        (vec![2, 4, 3, 5], vec![60, 5, 20, 1], 0),
        // Full transpose of a [37, 53] matrix: inner stride 53.
        (vec![53, 37], vec![1, 53], 0),
        // Slice rows 3..10, columns 2..30 of a [40, 64] matrix.
        (vec![7, 28], vec![64, 1], 3 * 64 + 2),
        // Broadcast a row of 33 over 100 rows, and a scalar over a block.
        (vec![100, 33], vec![0, 1], 17),
        (vec![4, 5, 6], vec![0, 0, 0], 99),
        // Reversal.
        (vec![10, 20], vec![-20, -1], 199),
        // Contiguous [8, 9, 10] (merges to one memcpy), with unit dims sprinkled in.
        (vec![1, 8, 1, 9, 10], vec![7, 90, 3, 10, 1], 5),
        // Rank 0: a single element.
        (vec![], vec![], 42),
        // Big enough to be split across threads: [300, 128, 4] permuted.
        (vec![128, 300, 4], vec![4, 512, 1], 0),
        // Empty.
        (vec![3, 0, 2], vec![1, 1, 1], 0),
    ];
    for (shape, strides, offset) in &cases {
        let want = gather(&src, shape, strides, *offset);
        for t in [1, 2] {
            let mut dst = vec![f32::NAN; want.len()];
            pool(t).install(|| copy_strided_f32(&src, shape, strides, *offset, &mut dst)).unwrap();
            assert!(dst.iter().zip(&want).all(|(a, b)| a.to_bits() == b.to_bits()), "shape {shape:?} strides {strides:?} offset {offset} threads {t}");
        }
    }
}

#[test]
fn copy_strided_rejects_bad_views() {
    let src = vec![0.0f32; 100];
    let mut dst = vec![0.0f32; 20];
    assert!(matches!(copy_strided_f32(&src, &[4, 5], &[5], 0, &mut dst), Err(KernelError::Shape(_))));
    assert!(matches!(copy_strided_f32(&src, &[4, 5], &[5, 1], 0, &mut dst[1..]), Err(KernelError::Length { .. })));
    assert!(matches!(copy_strided_f32(&src, &[4, 5], &[25, 1], 30, &mut dst), Err(KernelError::Shape(_))));
    assert!(matches!(copy_strided_f32(&src, &[4, 5], &[-5, 1], 10, &mut dst), Err(KernelError::Shape(_))));
    assert!(copy_strided_f32(&src, &[usize::MAX, 3], &[0, 0], 0, &mut dst).is_err());
    copy_strided_f32(&src, &[4, 5], &[-5, 1], 15, &mut dst).unwrap();
}

#[test]
fn one_and_two_threads_agree() {
    let isa = Isa::detect();
    let mut r = rng("threads elementwise", 77);
    let (rows, n) = (300, 1000);
    let a = uniform(&mut r, rows * n, -3.0, 3.0);
    let b = uniform(&mut r, rows * n, -3.0, 3.0);
    let run = |t: usize| {
        pool(t).install(|| {
            let mut outs = vec![vec![f32::NAN; rows * n]; 4];
            binary_f32_with(isa, BinaryOp::Mul, &a, &b, &mut outs[0]).unwrap();
            binary_row_broadcast_with(isa, BinaryOp::Sub, &a, &b[..n], &mut outs[1]).unwrap();
            binary_col_broadcast_with(isa, BinaryOp::Div, &a, &b[..rows], &mut outs[2]).unwrap();
            unary_f32_with(isa, UnaryOp::Tanh, &a, &mut outs[3]).unwrap();
            let mut sums = vec![f32::NAN; rows];
            reduce_rows_f32_with(isa, ReduceOp::Sum, &a, n, &mut sums).unwrap();
            outs.push(sums);
            outs
        })
    };
    let (one, two) = (run(1), run(2));
    for (x, y) in one.iter().zip(&two) {
        assert!(x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits()));
        assert!(x.iter().all(|v| !v.is_nan()));
    }
}

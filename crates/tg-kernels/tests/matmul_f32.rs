//! `matmul_f32` against an f64 reference: dot form (`A·Bᵀ`), axpy form (`A·B`), packed general
//! strides, broadcasting batch dimensions, every ISA, 1 vs 2 threads.

mod common;

use common::*;
use tg_kernels::{matmul_f32_with, Isa, KernelError, MatView};

/// f64 reference and Σ|terms| for element `[b0, b1, i, j]`.
fn reference(batch: [usize; 2], a: &MatView<'_>, b: &MatView<'_>) -> (Vec<f64>, Vec<f64>) {
    let at = |v: &MatView<'_>, b0: usize, b1: usize, r: usize, c: usize| {
        v.data[v.offset + b0 * v.batch_strides[0] + b1 * v.batch_strides[1] + r * v.row_stride + c * v.col_stride] as f64
    };
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let mut out = (Vec::new(), Vec::new());
    for b0 in 0..batch[0] {
        for b1 in 0..batch[1] {
            for i in 0..m {
                for j in 0..n {
                    let (mut s, mut t) = (0.0, 0.0);
                    for q in 0..k {
                        let p = at(a, b0, b1, i, q) * at(b, b0, b1, q, j);
                        s += p;
                        t += p.abs();
                    }
                    out.0.push(s);
                    out.1.push(t);
                }
            }
        }
    }
    out
}

#[derive(Clone, Copy, Debug)]
enum Layout {
    /// `b` stored `[n, k]` (dot form, as Q·Kᵀ), with broadcast over batch dim 1 (GQA).
    Bt,
    /// `b` stored `[k, n]` row-major (axpy form, as P·V), broadcast over batch dim 1.
    B,
    /// `a` stored transposed and `b` with non-unit strides in both dims (packed path).
    Strided,
}

fn run_case(isa: Isa, layout: Layout, batch: [usize; 2], m: usize, n: usize, k: usize, seed: u64) {
    let mut r = rng(&format!("matmul_f32 {isa} {layout:?} {batch:?} m={m} n={n} k={k}"), seed);
    let nb = batch[0] * batch[1];
    let (a_store, a);
    let b_store;
    match layout {
        Layout::Strided => {
            // a: each matrix stored column-major with 3 pad elements in front.
            a_store = uniform(&mut r, 3 + nb * m * k, -1.0, 1.0);
            a = MatView { data: &a_store, offset: 3, rows: m, cols: k, row_stride: 1, col_stride: m, batch_strides: [batch[1] * m * k, m * k] };
        }
        _ => {
            a_store = uniform(&mut r, nb * m * k, -1.0, 1.0);
            a = MatView::row_major(&a_store, batch, m, k);
        }
    }
    let b = match layout {
        Layout::Bt => {
            // One key matrix per batch[0] item, shared by all batch[1] items.
            b_store = uniform(&mut r, batch[0] * n * k, -1.0, 1.0);
            MatView { batch_strides: [n * k, 0], ..MatView::row_major(&b_store, [batch[0], 1], n, k) }.t()
        }
        Layout::B => {
            b_store = uniform(&mut r, batch[0] * k * n, -1.0, 1.0);
            MatView { batch_strides: [k * n, 0], ..MatView::row_major(&b_store, [batch[0], 1], k, n) }
        }
        Layout::Strided => {
            // Every other element of a [k, 2n+1] buffer, rows 2n+1 apart, own matrix per item.
            b_store = uniform(&mut r, nb * k * (2 * n + 1), -1.0, 1.0);
            MatView { data: &b_store, offset: 0, rows: k, cols: n, row_stride: 2 * n + 1, col_stride: 2, batch_strides: [batch[1] * k * (2 * n + 1), k * (2 * n + 1)] }
        }
    };
    let refs = reference(batch, &a, &b);
    let mut c = vec![f32::NAN; nb * m * n];
    matmul_f32_with(isa, batch, &a, &b, &mut c).unwrap();
    let what = format!("{isa} {layout:?} {batch:?} m={m} n={n} k={k}");
    let e = check_dot(&what, &c, &refs, k);
    assert!(e < 1e-10, "{what}: NMSE {e:e}");
}

#[test]
fn matmul_f32_layouts_sizes_isas() {
    let mut seed = 100;
    for isa in isas() {
        for layout in [Layout::Bt, Layout::B, Layout::Strided] {
            for &(m, n, k) in &[(1, 1, 1), (1, 37, 256), (2, 3, 7), (3, 16, 64), (5, 17, 300), (17, 70, 256), (33, 5, 33), (8, 100, 1)] {
                seed += 1;
                run_case(isa, layout, [2, 3], m, n, k, seed);
            }
        }
        // Wide axpy-form products (an im2col convolution's shape) are split by column blocks
        // over all rows: a ragged last block, a row tail, a block narrower than a tile, and
        // 1024-column blocks (K = 64), whose panel rows are a cache line wider than the block.
        for &(m, n, k) in &[(32, 1024, 9), (35, 1100, 72), (33, 1031, 1200), (64, 2000, 300), (24, 2100, 64)] {
            seed += 1;
            run_case(isa, Layout::B, [1, 2], m, n, k, seed);
        }
    }
}

#[test]
fn matmul_f32_one_vs_two_threads() {
    let isa = Isa::detect();
    for (m, n, k) in [(40, 300, 256), (40, 1500, 100)] {
        one_vs_two_threads(isa, m, n, k);
    }
}

fn one_vs_two_threads(isa: Isa, m: usize, n: usize, k: usize) {
    let mut r = rng("matmul_f32 threads", 5);
    let a_s = uniform(&mut r, 4 * m * k, -1.0, 1.0);
    let b_s = uniform(&mut r, n * k, -1.0, 1.0);
    let a = MatView::row_major(&a_s, [1, 4], m, k);
    for b in [MatView { batch_strides: [0, 0], ..MatView::row_major(&b_s, [1, 1], n, k) }.t(), MatView { batch_strides: [0, 0], ..MatView::row_major(&b_s, [1, 1], k, n) }] {
        let mut outs = Vec::new();
        for t in [1, 2] {
            let mut c = vec![f32::NAN; 4 * m * n];
            pool(t).install(|| matmul_f32_with(isa, [1, 4], &a, &b, &mut c)).unwrap();
            outs.push(c);
        }
        assert!(outs[0].iter().zip(&outs[1]).all(|(x, y)| x.to_bits() == y.to_bits()));
    }
}

#[test]
fn matmul_f32_rejects_bad_arguments() {
    let isa = Isa::detect();
    let d = vec![1.0f32; 24];
    let a = MatView::row_major(&d, [1, 1], 2, 3);
    let b = MatView::row_major(&d, [1, 1], 3, 4);
    let mut c = vec![0.0f32; 8];
    matmul_f32_with(isa, [1, 1], &a, &b, &mut c).unwrap();
    assert!(c.iter().all(|&v| v == 3.0));
    assert!(matches!(matmul_f32_with(isa, [1, 1], &a, &a, &mut c), Err(KernelError::Shape(_))));
    assert!(matches!(matmul_f32_with(isa, [1, 1], &a, &b, &mut c[1..]), Err(KernelError::Length { .. })));
    // A view reaching past its buffer.
    let big = MatView::row_major(&d, [1, 1], 3, 9);
    let mut c2 = vec![0.0f32; 2 * 9];
    assert!(matches!(matmul_f32_with(isa, [1, 1], &a, &big, &mut c2), Err(KernelError::Shape(_))));
    // Batch strides reaching past the buffer.
    let mut c3 = vec![0.0f32; 5 * 8];
    assert!(matches!(matmul_f32_with(isa, [5, 1], &a, &b, &mut c3), Err(KernelError::Shape(_))));
    // k = 0 gives zeros.
    let e = MatView::row_major(&d, [1, 1], 2, 0);
    let f = MatView::row_major(&d, [1, 1], 0, 4);
    let mut z = vec![f32::NAN; 8];
    matmul_f32_with(isa, [1, 1], &e, &f, &mut z).unwrap();
    assert!(z.iter().all(|&v| v == 0.0));
}

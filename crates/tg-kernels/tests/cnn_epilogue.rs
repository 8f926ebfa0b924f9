//! The CNN epilogues (a convolution's per-channel bias with an activation, and group
//! normalisation with its affine map and an activation) against f64 references written
//! from their formulas, on every ISA of this machine, on 1 and 2 threads, with odd sizes and
//! NaN-poisoned outputs.
//!
//! Bounds (u = 2^-24): the bias epilogue is one rounded add and the activation (`silu` as the
//! unary kernel's, within 4 ulps), so each element is within `6u·(|y| + |b|)` plus the
//! activation's rounding. Group normalisation accumulates the mean and the squared deviations
//! in f32 lanes (about `len / 32` terms each on AVX2), then one f64 step: each element is
//! within `(len/16 + 32)·u·(s·(|x − μ| + m) + |β|)` of the exact value, with `s = |γ|/σ` its
//! scale and `m` the mean magnitude of the group (the error of `μ` is relative to that).
//! Each case's NMSE must also stay below 1e-10.

mod common;

use common::*;
use rand::Rng;
use tg_kernels::{bias_act_rows_with, group_norm_with, Act, GroupNormShape, Isa, KernelError};

const U: f64 = f32::EPSILON as f64 / 2.0;

fn act_f64(a: Act, y: f64) -> f64 {
    match a {
        Act::None => y,
        Act::Relu => y.max(0.0),
        Act::LeakyRelu(al) => {
            if y < 0.0 {
                al as f64 * y
            } else {
                y
            }
        }
        Act::Silu => y / (1.0 + (-y).exp()),
        Act::LeakyReluFloor(al, f) => act_f64(Act::LeakyRelu(al), y).max(f as f64),
    }
}

const ACTS: [Act; 5] = [Act::None, Act::Relu, Act::LeakyRelu(0.2), Act::Silu, Act::LeakyReluFloor(0.2, -0.4)];

fn each_config(mut f: impl FnMut(Isa, usize) + Send) {
    for isa in isas() {
        for t in [1, 2] {
            pool(t).install(|| f(isa, t));
        }
    }
}

fn check(what: &str, y: &[f32], r: &[f64], tol: &[f64]) {
    for i in 0..y.len() {
        let err = (y[i] as f64 - r[i]).abs();
        assert!(err <= tol[i], "{what}: element {i}: got {}, reference {}, |err| {err:.3e} > bound {:.3e}", y[i], r[i], tol[i]);
    }
    let e = nmse(y, r);
    assert!(e <= 1e-10, "{what}: NMSE {e:.3e}");
}

#[test]
fn bias_act_matches_reference() {
    for (case, &(n, m, p)) in [(1usize, 1usize, 1usize), (1, 3, 17), (2, 5, 33), (1, 16, 4096), (2, 7, 1000)].iter().enumerate() {
        let mut r = rng(&format!("bias_act {n}x{m}x{p}"), 700 + case as u64);
        let y = uniform(&mut r, n * m * p, -4.0, 4.0);
        let b = uniform(&mut r, m, -2.0, 2.0);
        for act in ACTS {
            let want: Vec<f64> = y.iter().enumerate().map(|(i, &v)| act_f64(act, v as f64 + b[(i / p) % m] as f64)).collect();
            let tol: Vec<f64> = y.iter().enumerate().map(|(i, &v)| 12.0 * U * (v.abs() as f64 + b[(i / p) % m].abs() as f64) + 1e-38).collect();
            each_config(|isa, t| {
                let mut out = y.clone();
                bias_act_rows_with(isa, &mut out, &b, p, act).unwrap();
                check(&format!("bias_act {isa} t{t} {act:?} {n}x{m}x{p}"), &out, &want, &tol);
            });
        }
    }
}

#[test]
fn group_norm_matches_reference() {
    // (n, c, plane, groups): instance norm (groups = c), one group, the terrain UNet's
    // 32 groups of a 128×128 plane, odd sizes.
    let shapes = [(1usize, 1usize, 1usize, 1usize), (2, 6, 7, 3), (1, 4, 33, 4), (2, 8, 100, 1), (1, 64, 1024, 32), (1, 32, 16384, 32), (3, 10, 5, 5)];
    // Each shape twice: γ and β one per channel, then one per image and channel ([n, c]).
    for (case, (&(n, c, plane, groups), per_image)) in shapes.iter().flat_map(|s| [(s, false), (s, true)]).enumerate() {
        let mut r = rng(&format!("group_norm {n}x{c}x{plane} g{groups} per image {per_image}"), 800 + case as u64);
        // An offset per sample, so the mean is not near zero and cancellation is tested.
        let x: Vec<f32> = (0..n * c * plane).map(|i| r.gen_range(-1.0..1.0f32) * 3.0 + (i / (c * plane)) as f32 * 5.0 + 1.5).collect();
        let na = if per_image { n * c } else { c };
        let gamma = uniform(&mut r, na, -2.0, 2.0);
        let beta = uniform(&mut r, na, -1.0, 1.0);
        let eps = 1e-5f32;
        let s = GroupNormShape { n, c, plane, groups };
        let len = c / groups * plane;
        for act in ACTS {
            let (mut want, mut tol) = (Vec::new(), Vec::new());
            for blk in x.chunks(len) {
                let mean = blk.iter().map(|&v| v as f64).sum::<f64>() / len as f64;
                let mag = blk.iter().map(|&v| (v as f64).abs()).sum::<f64>() / len as f64;
                let var = blk.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / len as f64;
                let inv = 1.0 / (var + eps as f64).sqrt();
                let blk_i = want.len() / len;
                let g0 = (blk_i % groups) * (c / groups) + if per_image { blk_i / groups * c } else { 0 };
                for (j, &v) in blk.iter().enumerate() {
                    let ch = g0 + j / plane;
                    let y = (v as f64 - mean) * inv * gamma[ch] as f64 + beta[ch] as f64;
                    want.push(act_f64(act, y));
                    let sc = inv * (gamma[ch] as f64).abs();
                    tol.push((len as f64 / 16.0 + 32.0) * U * (sc * ((v as f64 - mean).abs() + mag) + (beta[ch] as f64).abs()) + 1e-30);
                }
            }
            each_config(|isa, t| {
                let mut out = vec![f32::NAN; x.len()];
                group_norm_with(isa, &x, &gamma, &beta, s, eps, act, &mut out).unwrap();
                check(&format!("group_norm {isa} t{t} {act:?} {n}x{c}x{plane} g{groups} per image {per_image}"), &out, &want, &tol);
            });
        }
    }
}

#[test]
fn epilogues_reject_bad_shapes() {
    let isa = Isa::Scalar;
    let s = GroupNormShape { n: 1, c: 4, plane: 3, groups: 2 };
    let mut out = vec![f32::NAN; 12];
    let v = |n: usize| vec![1.0f32; n];
    assert!(matches!(group_norm_with(isa, &v(11), &v(4), &v(4), s, 1e-5, Act::None, &mut out), Err(KernelError::Length { .. })));
    assert!(matches!(group_norm_with(isa, &v(12), &v(3), &v(4), s, 1e-5, Act::None, &mut out), Err(KernelError::Length { .. })));
    // Per image: γ and β both [n, c]; one per image with the other per channel is refused.
    let s2 = GroupNormShape { n: 2, c: 4, plane: 3, groups: 2 };
    let mut out2 = vec![f32::NAN; 24];
    assert!(matches!(group_norm_with(isa, &v(24), &v(8), &v(4), s2, 1e-5, Act::None, &mut out2), Err(KernelError::Length { .. })));
    assert!(matches!(group_norm_with(isa, &v(24), &v(6), &v(6), s2, 1e-5, Act::None, &mut out2), Err(KernelError::Length { .. })));
    assert!(out2.iter().all(|x| x.is_nan()), "group_norm wrote on error");
    assert!(matches!(group_norm_with(isa, &v(12), &v(4), &v(4), GroupNormShape { groups: 3, ..s }, 1e-5, Act::None, &mut out), Err(KernelError::Shape(_))));
    assert!(out.iter().all(|x| x.is_nan()), "group_norm wrote on error");
    let mut y = v(12);
    assert!(matches!(bias_act_rows_with(isa, &mut y, &v(5), 3, Act::Relu), Err(KernelError::Shape(_))));
    assert!(y.iter().all(|&x| x == 1.0), "bias_act wrote on error");
}

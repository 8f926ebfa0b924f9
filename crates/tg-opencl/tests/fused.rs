//! Fused kernels against f64 formulas (the compositions they replace).
//!
//! Tolerance `1e-5·(1 + |ref|)` for the norms, RoPE, GELU and softmax: each output is a few
//! correctly rounded f32 operations on an f32 sum of at most a few hundred non-negative terms
//! (relative error ≲ (n/8 + 8)·ε ≈ 1e-5 for n = 640 only in the worst case, typically far
//! less). Attention `1e-4·(1 + |ref|)`: scores are dot products over d ≤ 256 scaled into
//! `exp`, whose relative error is the score's absolute error (≈ d·ε·Σ|q·k|·scale).

mod common;

use common::*;
use rand::Rng;
use tg_ir::DType;
use tg_runtime::{Kernel, Layout};

fn f(shape: &[usize]) -> Layout {
    Layout::contiguous(shape, DType::F32)
}

fn inp(v: &[f32], shape: &[usize]) -> In {
    In { bytes: f32_bytes(v), layout: f(shape) }
}

fn rms(x: &[f32], eps: f64) -> f64 {
    1.0 / (x.iter().map(|&v| (v as f64).powi(2)).sum::<f64>() / x.len() as f64 + eps).sqrt()
}

#[test]
fn rms_norm_and_add_rms_norm() {
    let Some(env) = env() else { return };
    let mut r = rng("rms_norm", 31);
    let eps = 1e-6f64;
    for (rows, n) in [(1usize, 640usize), (5, 33)] {
        let x = rand_f32(&mut r, rows * n, -2.0, 2.0);
        let y = rand_f32(&mut r, rows * n, -2.0, 2.0);
        let w = rand_f32(&mut r, n, -1.5, 1.5);
        let got = to_f32(&run(env, &Kernel::RmsNorm { eps_bits: eps.to_bits() }, &[inp(&x, &[rows, n]), inp(&w, &[n])], &f(&[rows, n])).unwrap());
        let mut want = Vec::new();
        for row in x.chunks(n) {
            let inv = rms(row, eps);
            want.extend(row.iter().zip(&w).map(|(&v, &wv)| v as f64 * inv * wv as f64));
        }
        check("rms_norm", &got, &want, rel(1e-5));
        let got = to_f32(&run(env, &Kernel::AddRmsNorm { eps_bits: eps.to_bits() }, &[inp(&x, &[rows, n]), inp(&y, &[rows, n]), inp(&w, &[n])], &f(&[2, rows, n])).unwrap());
        let sum: Vec<f32> = x.iter().zip(&y).map(|(a, b)| a + b).collect();
        let mut want: Vec<f64> = sum.iter().map(|&v| v as f64).collect();
        for row in sum.chunks(n) {
            let inv = rms(row, eps);
            want.extend(row.iter().zip(&w).map(|(&v, &wv)| v as f64 * inv * wv as f64));
        }
        check("add_rms_norm", &got, &want, rel(1e-5));
    }
}

#[test]
fn rope_and_norm_rope() {
    let Some(env) = env() else { return };
    let mut r = rng("rope", 32);
    let (seq, heads, d) = (5usize, 3usize, 10usize);
    let h = d / 2;
    let x = rand_f32(&mut r, seq * heads * d, -2.0, 2.0);
    let w = rand_f32(&mut r, d, -1.5, 1.5);
    let ang: Vec<f64> = (0..seq * h).map(|i| (i / h) as f64 * 0.37 / (1.0 + (i % h) as f64)).collect();
    let c: Vec<f32> = ang.iter().map(|a| a.cos() as f32).collect();
    let s: Vec<f32> = ang.iter().map(|a| a.sin() as f32).collect();
    let eps = 1e-6f64;
    for norm in [false, true] {
        let mut ins = vec![inp(&x, &[seq, heads, d])];
        if norm {
            ins.push(inp(&w, &[d]));
        }
        ins.push(inp(&c, &[seq, 1, h]));
        ins.push(inp(&s, &[seq, h]));
        let kernel = if norm { Kernel::RmsNormRopeNeox { eps_bits: eps.to_bits() } } else { Kernel::RopeNeox };
        let got = to_f32(&run(env, &kernel, &ins, &f(&[seq, heads, d])).unwrap());
        let mut want = vec![0f64; x.len()];
        for p in 0..seq {
            for hd in 0..heads {
                let row = &x[(p * heads + hd) * d..][..d];
                let inv = if norm { rms(row, eps) } else { 1.0 };
                let y: Vec<f64> = (0..d).map(|i| row[i] as f64 * if norm { inv * w[i] as f64 } else { 1.0 }).collect();
                for i in 0..h {
                    let (cv, sv) = (c[p * h + i] as f64, s[p * h + i] as f64);
                    want[(p * heads + hd) * d + i] = y[i] * cv - y[i + h] * sv;
                    want[(p * heads + hd) * d + i + h] = y[i + h] * cv + y[i] * sv;
                }
            }
        }
        check(&format!("rope norm={norm}"), &got, &want, rel(1e-5));
    }
}

fn gelu64(x: f64) -> f64 {
    0.5 * x * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x)).tanh())
}

#[test]
fn gelu_and_gated_gelu() {
    let Some(env) = env() else { return };
    let mut r = rng("gelu", 33);
    let n = 1001;
    let mut g = rand_f32(&mut r, n, -6.0, 6.0);
    g[0] = -30.0;
    g[1] = 30.0;
    let u = rand_f32(&mut r, n, -2.0, 2.0);
    let got = to_f32(&run(env, &Kernel::GeluTanh, &[inp(&g, &[7, 143])], &f(&[7, 143])).unwrap());
    check("gelu", &got, &g.iter().map(|&v| gelu64(v as f64)).collect::<Vec<_>>(), rel(1e-5));
    let got = to_f32(&run(env, &Kernel::GatedGelu, &[inp(&g, &[n]), inp(&u, &[n])], &f(&[n])).unwrap());
    check("gated_gelu", &got, &g.iter().zip(&u).map(|(&v, &w)| gelu64(v as f64) * w as f64).collect::<Vec<_>>(), rel(1e-5));
}

#[test]
fn softmax_rows_with_masked_entries() {
    let Some(env) = env() else { return };
    let mut r = rng("softmax", 34);
    let (rows, n) = (4usize, 37usize);
    let mut x = rand_f32(&mut r, rows * n, -8.0, 8.0);
    for i in 0..n {
        if i % 3 == 0 {
            x[i] = f32::NEG_INFINITY;
        }
        x[3 * n + i] = f32::NEG_INFINITY; // a fully masked row: NaN, as the formula gives
    }
    let got = to_f32(&run(env, &Kernel::Softmax, &[inp(&x, &[rows, n])], &f(&[rows, n])).unwrap());
    let mut want = Vec::new();
    for row in x.chunks(n) {
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        want.extend(e.iter().map(|v| v / s));
    }
    check("softmax", &got, &want, rel(1e-5));
}

/// f64 attention over (n_kv, g, sq, sk, d); `q_at(head, g, i)` gives a query row's offset.
#[allow(clippy::too_many_arguments)]
fn attention_ref(q: &[f32], k: &[f32], v: &[f32], mask: &[f32], nkv: usize, g: usize, sq: usize, sk: usize, d: usize, scale: f64, seq_major: bool) -> Vec<f64> {
    let mut out = vec![0f64; q.len()];
    for h in 0..nkv {
        for gg in 0..g {
            for i in 0..sq {
                let row = if seq_major { ((i * nkv + h) * g + gg) * d } else { ((h * g + gg) * sq + i) * d };
                let vis: Vec<usize> = (0..sk).filter(|&j| mask[i * sk + j] != f32::NEG_INFINITY).collect();
                let sc: Vec<f64> = vis.iter().map(|&j| scale * (0..d).map(|t| q[row + t] as f64 * k[(h * sk + j) * d + t] as f64).sum::<f64>() + mask[i * sk + j] as f64).collect();
                let m = sc.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b));
                let e: Vec<f64> = sc.iter().map(|s| (s - m).exp()).collect();
                let l: f64 = e.iter().sum();
                for t in 0..d {
                    out[row + t] = if vis.is_empty() { f64::NAN } else { vis.iter().zip(&e).map(|(&j, p)| p * v[(h * sk + j) * d + t] as f64).sum::<f64>() / l };
                }
            }
        }
    }
    out
}

#[test]
fn attention_both_layouts_masks_and_nan_rows() {
    let Some(env) = env() else { return };
    // Every launch shape: the split-key path (a 16-key split of every row longer than 16)
    // and its merge included.
    with_each_tuning(env, attention_cases);
}

fn attention_cases(env: &Env) {
    let mut r = rng("attention", 35);
    for (nkv, g, sq, sk, d) in [(2usize, 2usize, 5usize, 13usize, 64usize), (1, 4, 1, 70, 256), (1, 3, 3, 1, 2)] {
        let q = rand_f32(&mut r, nkv * g * sq * d, -1.0, 1.0);
        let mut k = rand_f32(&mut r, nkv * sk * d, -1.0, 1.0);
        let mut v = rand_f32(&mut r, nkv * sk * d, -1.0, 1.0);
        // Causal-with-offset mask plus random extra -inf and finite additive terms.
        let mut mask = vec![0f32; sq * sk];
        for i in 0..sq {
            for j in 0..sk {
                mask[i * sk + j] = if j as isize > sk as isize - sq as isize + i as isize || r.gen_range(0..5) == 0 { f32::NEG_INFINITY } else { r.gen_range(-1.0..1.0) };
            }
        }
        // Keys masked for every query hold NaN in k and v: they must contribute nothing.
        for j in 0..sk {
            if (0..sq).all(|i| mask[i * sk + j] == f32::NEG_INFINITY) {
                for h in 0..nkv {
                    k[(h * sk + j) * d..][..d].fill(f32::NAN);
                    v[(h * sk + j) * d..][..d].fill(f32::NAN);
                }
            }
        }
        // The last query row sees nothing (NaN output, as the CPU kernel) when sq > 1.
        if sq > 1 {
            mask[(sq - 1) * sk..].fill(f32::NEG_INFINITY);
        }
        let scale = 1.0 / (d as f64).sqrt();
        for seq_major in [false, true] {
            let qs: Vec<usize> = if seq_major { vec![sq, nkv, g, d] } else { vec![nkv, g, sq, d] };
            let kernel = if seq_major { Kernel::AttentionSeqMajor { scale_bits: scale.to_bits() } } else { Kernel::Attention { scale_bits: scale.to_bits() } };
            let ins = [inp(&q, &qs), inp(&k, &[nkv, 1, sk, d]), inp(&v, &[nkv, 1, sk, d]), inp(&mask, &[sq, sk])];
            let got = to_f32(&run(env, &kernel, &ins, &f(&qs)).unwrap());
            let want = attention_ref(&q, &k, &v, &mask, nkv, g, sq, sk, d, scale as f32 as f64, seq_major);
            check(&format!("attention {:?} seq_major={seq_major}", (nkv, g, sq, sk, d)), &got, &want, rel(1e-4));
        }
    }
}

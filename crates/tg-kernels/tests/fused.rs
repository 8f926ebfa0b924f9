//! Fused kernels (RMSNorm, add + RMSNorm, NeoX RoPE, q/k-norm + RoPE, GELU-tanh, gated GELU,
//! row softmax, flash attention) against plain f64 references written straight from their
//! formulas, on every ISA of this machine, on 1 and 2 threads, with odd sizes and
//! NaN-poisoned outputs.
//!
//! Every case draws its inputs from a seeded RNG; the seed is printed as `base+case` (base
//! `TG_SEED`, default below). Each output element is checked against a per-element error bound
//! derived from the kernel's arithmetic (stated at each check, with ε = u = 2^-24 the unit
//! roundoff of f32), and each case's NMSE `Σ(y−r)²/Σr²` against a fixed threshold:
//! 1e-10 for norms, RoPE, GELU and softmax (their per-element relative errors are a few tens of
//! u, i.e. NMSE ≈ 1e-12 at worst), 1e-9 for attention (score errors of `Σ_d |q·k|·d/LANES·u`
//! are amplified by `exp`; NMSE ≈ 1e-12 in practice). A wrong element (unwritten, wrong
//! block, wrong head) gives NMSE ≳ 1e-4.

mod common;

use common::*;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tg_kernels::{
    add_rms_norm_with, attention_is_dense, attention_layout_with, attention_row_mask_with, attention_with, gated_gelu_tanh_with, gelu_tanh_with, rms_norm_rope_neox_with,
    rms_norm_with, rope_neox_with, softmax_rows_with, AttnLayout, Isa, KernelError,
};

/// Unit roundoff of f32.
const U: f64 = f32::EPSILON as f64 / 2.0;
const THREADS: [usize; 2] = [1, 2];
const NMSE_MAX: f64 = 1e-10;
const NMSE_MAX_ATTN: f64 = 1e-9;

fn base_seed() -> u64 {
    std::env::var("TG_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(20_261_205)
}

fn case_rng(what: &str, case: u64) -> ChaCha8Rng {
    let base = base_seed();
    rng(&format!("{what} (seed = TG_SEED {base} + case {case})"), base.wrapping_add(case))
}

/// Runs `f(isa, threads)` on every ISA and thread count.
fn each_config(mut f: impl FnMut(Isa, usize) + Send) {
    for isa in isas() {
        for &t in &THREADS {
            pool(t).install(|| f(isa, t));
        }
    }
}

/// Tracks the worst NMSE per label and prints it at the end.
#[derive(Default)]
struct Worst(Vec<(String, f64)>);

impl Worst {
    fn add(&mut self, label: String, v: f64) {
        match self.0.iter_mut().find(|(l, _)| *l == label) {
            Some((_, w)) => *w = w.max(v),
            None => self.0.push((label, v)),
        }
    }
    fn print(&self, test: &str) {
        for (l, v) in &self.0 {
            eprintln!("{test}: worst NMSE {l}: {v:.3e}");
        }
    }
}

/// Checks `|y − r| ≤ tol[i]` elementwise (NaN expected where `r` is NaN) and returns the NMSE
/// over the non-NaN references.
fn check(what: &str, y: &[f32], r: &[f64], tol: &[f64], nmse_max: f64) -> f64 {
    assert_eq!(y.len(), r.len());
    let (mut ys, mut rs) = (Vec::new(), Vec::new());
    for i in 0..y.len() {
        if r[i].is_nan() {
            assert!(y[i].is_nan(), "{what}: element {i}: got {}, want NaN", y[i]);
            continue;
        }
        let err = (y[i] as f64 - r[i]).abs();
        assert!(err <= tol[i] || (y[i] as f64 == r[i]), "{what}: element {i}: got {}, reference {}, |err| {err:.3e} > bound {:.3e}", y[i], r[i], tol[i]);
        ys.push(y[i]);
        rs.push(r[i]);
    }
    let e = nmse(&ys, &rs);
    assert!(e <= nmse_max, "{what}: NMSE {e:.3e} > {nmse_max:e}");
    e
}

// ---------------------------------------------------------------------------------------------
// f64 references, straight from the formulas.

fn rms_norm_ref(x: &[f32], w: &[f32], rows: usize, n: usize, eps: f32) -> Vec<f64> {
    let mut out = vec![0.0; rows * n];
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let ms = row.iter().map(|&v| v as f64 * v as f64).sum::<f64>() / n as f64;
        let inv = 1.0 / (ms + eps as f64).sqrt();
        for i in 0..n {
            out[r * n + i] = row[i] as f64 * inv * w[i] as f64;
        }
    }
    out
}

/// Per-element bound of the norms: relative `(n/32 + 16)·u` (twice the worst case for 8
/// lanes: `n/32` lane-accumulated terms of the sum of squares, halved by the square root, and
/// the tree, the f64 finish and the two products).
fn norm_tol(r: &[f64], n: usize) -> Vec<f64> {
    r.iter().map(|v| v.abs() * (n as f64 / 32.0 + 16.0) * U + 1e-38).collect()
}

/// RoPE reference over `[seq, heads, hd]` (x already in f64); returns values and the bound
/// `2·(2u + xrel)·(|x0·c| + |x1·s|)`: at most three roundings (two products and the sum;
/// two with FMA), each within `u` of the magnitude sum, doubled; `xrel` is the relative error
/// already in `x` (from a fused norm).
fn rope_ref(x: &[f64], xrel: &[f64], cos: &[f32], sin: &[f32], seq: usize, heads: usize, hd: usize) -> (Vec<f64>, Vec<f64>) {
    let h = hd / 2;
    let mut out = vec![0.0; x.len()];
    let mut tol = vec![0.0; x.len()];
    for s in 0..seq {
        for hh in 0..heads {
            let b = (s * heads + hh) * hd;
            for i in 0..h {
                let (c, sn) = (cos[s * h + i] as f64, sin[s * h + i] as f64);
                let (x0, x1) = (x[b + i], x[b + i + h]);
                out[b + i] = x0 * c - x1 * sn;
                out[b + i + h] = x1 * c + x0 * sn;
                let rel = xrel[b + i].max(xrel[b + i + h]);
                let mag0 = (x0 * c).abs() + (x1 * sn).abs();
                let mag1 = (x1 * c).abs() + (x0 * sn).abs();
                tol[b + i] = mag0 * (2.0 * U + rel) * 2.0 + 1e-38;
                tol[b + i + h] = mag1 * (2.0 * U + rel) * 2.0 + 1e-38;
            }
        }
    }
    (out, tol)
}

fn gelu_ref(x: f32) -> f64 {
    let x = x as f64;
    let t = (2.0 / std::f64::consts::PI).sqrt() * (x + 0.044715 * x * x * x);
    0.5 * x * (1.0 + t.tanh())
}

/// GELU bound: relative `(24|t| + 8)·u` (twice the analysis: `t` carries ~6u relative error,
/// which `e^{−2t}` turns into `12|t|·u`, plus exp, add and divide), plus `|x|·1e-15` for the
/// reference's own cancellation in `1 + tanh(t)` at large negative `x` (f64 ε · |x|).
fn gelu_tol(x: f32, r: f64) -> f64 {
    let xd = x as f64;
    let t = (2.0 / std::f64::consts::PI).sqrt() * (xd + 0.044715 * xd * xd * xd);
    r.abs() * (24.0 * t.abs() + 8.0) * U + xd.abs() * 1e-15 + 1e-44
}

/// Row softmax in f64; the bound is relative `(2|x−m| + 2·X + n/8 + 16)·u` with `X` the largest
/// `|x−m|` of the row (rounding of `x − m` amplified by `exp`, the exp error, and the lane sums).
fn softmax_ref(x: &[f32], rows: usize, n: usize) -> (Vec<f64>, Vec<f64>) {
    let mut out = vec![0.0; rows * n];
    let mut tol = vec![0.0; rows * n];
    for r in 0..rows {
        let row = &x[r * n..(r + 1) * n];
        let m = row.iter().fold(f64::NEG_INFINITY, |a, &b| a.max(b as f64));
        let e: Vec<f64> = row.iter().map(|&v| (v as f64 - m).exp()).collect();
        let s: f64 = e.iter().sum();
        let big = row.iter().map(|&v| (v as f64 - m).abs()).filter(|d| d.is_finite()).fold(0.0, f64::max);
        for i in 0..n {
            out[r * n + i] = e[i] / s;
            let d = (row[i] as f64 - m).abs();
            let d = if d.is_finite() { d } else { 0.0 };
            tol[r * n + i] = out[r * n + i] * (2.0 * d + 2.0 * big + n as f64 / 8.0 + 16.0) * U + 1e-44;
        }
    }
    (out, tol)
}

struct Attn {
    n_kv: usize,
    group: usize,
    sq: usize,
    sk: usize,
    hd: usize,
    scale: f32,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    mask: Vec<f32>,
}

/// Attention in f64 from the formula: full scores, max-subtracted softmax (a row with no finite
/// score is NaN), then `·v`. A key whose mask is −∞ for a row has probability exactly 0 there
/// and its `k` and `v` rows are not read (they may hold NaN: an unused KV-cache row); any other
/// NaN in the row's keys or values makes the row NaN. The bound per element is `(2δ + 2(sk + 2·sk/64 + 16)·u) ·
/// Σ_j p_j |v_jc|`: `δ` bounds each score's error (the f32 dot product,
/// `dot_bound(hd) · |scale| · Σ|q·k|`, plus the rounding of `s` and `s − m` and `exp`), which
/// `exp` turns into a relative error of `p_j` (doubled for the normalization); the second term
/// is the sequential f32 accumulation of `O` and `l` across keys and blocks.
fn attention_ref(a: &Attn) -> (Vec<f64>, Vec<f64>) {
    let (sq, sk, hd) = (a.sq, a.sk, a.hd);
    let mut out = vec![0.0; a.n_kv * a.group * sq * hd];
    let mut tol = vec![0.0; out.len()];
    let dotb = dot_bound(hd);
    for kv in 0..a.n_kv {
        for g in 0..a.group {
            for i in 0..sq {
                let qo = ((kv * a.group + g) * sq + i) * hd;
                let q = &a.q[qo..qo + hd];
                let mut s = vec![0.0f64; sk];
                let mut serr = vec![0.0f64; sk];
                for j in 0..sk {
                    if a.mask[i * sk + j] == f32::NEG_INFINITY {
                        s[j] = f64::NEG_INFINITY;
                        continue;
                    }
                    let k = &a.k[(kv * sk + j) * hd..(kv * sk + j + 1) * hd];
                    let (mut d, mut mag) = (0.0f64, 0.0f64);
                    for c in 0..hd {
                        d += q[c] as f64 * k[c] as f64;
                        mag += (q[c] as f64 * k[c] as f64).abs();
                    }
                    s[j] = a.scale as f64 * d + a.mask[i * sk + j] as f64;
                    serr[j] = dotb * (a.scale as f64).abs() * mag;
                }
                let m = s.iter().fold(f64::NEG_INFINITY, |x, &y| x.max(y));
                let o = &mut out[qo..qo + hd];
                if m == f64::NEG_INFINITY {
                    o.fill(f64::NAN);
                    continue;
                }
                let p: Vec<f64> = s.iter().map(|&x| (x - m).exp()).collect();
                let l: f64 = p.iter().sum();
                let mut delta: f64 = 0.0;
                for ((&pj, &sj), &ej) in p.iter().zip(&s).zip(&serr) {
                    if pj > 0.0 {
                        delta = delta.max(ej + (sj.abs() + (sj - m).abs() + 2.0) * U);
                    }
                }
                let acc = 2.0 * (sk as f64 + 2.0 * sk as f64 / 64.0 + 16.0) * U;
                for c in 0..hd {
                    let (mut y, mut mag) = (0.0, 0.0);
                    for (j, &pj) in p.iter().enumerate() {
                        if a.mask[i * sk + j] == f32::NEG_INFINITY {
                            continue;
                        }
                        let vv = a.v[(kv * sk + j) * hd + c] as f64;
                        y += pj * vv;
                        mag += pj * vv.abs();
                    }
                    o[c] = y / l;
                    tol[qo + c] = (2.0 * delta + acc) * mag / l + 1e-30;
                }
            }
        }
    }
    (out, tol)
}

// ---------------------------------------------------------------------------------------------
// Norms.

/// `rows × n` values in [-2, 2), each row scaled by 10^k, k ∈ {-3, 0, 0, 3}, so the norm's scale
/// invariance is exercised.
fn rows_with_scales(r: &mut ChaCha8Rng, rows: usize, n: usize) -> Vec<f32> {
    let mut x = uniform(r, rows * n, -2.0, 2.0);
    for row in x.chunks_mut(n.max(1)) {
        let s = [1e-3f32, 1.0, 1.0, 1e3][r.gen_range(0..4)];
        row.iter_mut().for_each(|v| *v *= s);
    }
    x
}

const NORM_SHAPES: [(usize, usize); 9] = [(1, 1), (5, 1), (3, 7), (5, 33), (1, 640), (5, 640), (128, 640), (5, 768), (128, 768)];

#[test]
fn rms_norm_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(rows, n)) in NORM_SHAPES.iter().enumerate() {
        let mut r = case_rng(&format!("rms_norm {rows}x{n}"), case as u64);
        let x = rows_with_scales(&mut r, rows, n);
        let w = uniform(&mut r, n, -1.0, 2.0);
        let eps = 1e-6;
        let want = rms_norm_ref(&x, &w, rows, n, eps);
        let tol = norm_tol(&want, n);
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; rows * n];
            rms_norm_with(isa, &x, &w, rows, n, eps, &mut out).unwrap();
            let e = check(&format!("rms_norm {isa} t{t} {rows}x{n}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("rms_norm");
}

#[test]
fn add_rms_norm_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(rows, n)) in NORM_SHAPES.iter().enumerate() {
        let mut r = case_rng(&format!("add_rms_norm {rows}x{n}"), 100 + case as u64);
        let a = rows_with_scales(&mut r, rows, n);
        let b = uniform(&mut r, rows * n, -2.0, 2.0);
        let w = uniform(&mut r, n, -1.0, 2.0);
        let eps = 1e-5;
        let sum: Vec<f32> = a.iter().zip(&b).map(|(x, y)| x + y).collect();
        let want = rms_norm_ref(&sum, &w, rows, n, eps);
        let tol = norm_tol(&want, n);
        each_config(|isa, t| {
            let mut s = vec![f32::NAN; rows * n];
            let mut out = vec![f32::NAN; rows * n];
            add_rms_norm_with(isa, &a, &b, &w, rows, n, eps, &mut s, &mut out).unwrap();
            for i in 0..rows * n {
                assert_eq!(s[i].to_bits(), sum[i].to_bits(), "add_rms_norm {isa} t{t} {rows}x{n}: sum_out[{i}]");
            }
            let e = check(&format!("add_rms_norm {isa} t{t} {rows}x{n}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("add_rms_norm");
}

// ---------------------------------------------------------------------------------------------
// RoPE.

const ROPE_SHAPES: [(usize, usize, usize); 9] = [(1, 1, 2), (1, 4, 256), (5, 4, 256), (5, 1, 256), (17, 3, 32), (17, 2, 40), (130, 4, 64), (130, 1, 256), (3, 5, 6)];

/// Angles `pos · base^(−2i/hd)` as cos/sin tables `[seq, hd/2]`, positions offset at random.
fn rope_tables(r: &mut ChaCha8Rng, seq: usize, hd: usize) -> (Vec<f32>, Vec<f32>) {
    let h = hd / 2;
    let p0 = r.gen_range(0..1000) as f64;
    let (mut c, mut s) = (Vec::new(), Vec::new());
    for p in 0..seq {
        for i in 0..h {
            let a = (p0 + p as f64) * 10_000f64.powf(-2.0 * i as f64 / hd as f64);
            c.push(a.cos() as f32);
            s.push(a.sin() as f32);
        }
    }
    (c, s)
}

#[test]
fn rope_neox_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(seq, heads, hd)) in ROPE_SHAPES.iter().enumerate() {
        let mut r = case_rng(&format!("rope_neox seq={seq} heads={heads} hd={hd}"), 200 + case as u64);
        let x = uniform(&mut r, seq * heads * hd, -3.0, 3.0);
        let (c, s) = rope_tables(&mut r, seq, hd);
        let xd: Vec<f64> = x.iter().map(|&v| v as f64).collect();
        let (want, tol) = rope_ref(&xd, &vec![0.0; xd.len()], &c, &s, seq, heads, hd);
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; x.len()];
            rope_neox_with(isa, &x, &c, &s, seq, heads, hd, &mut out).unwrap();
            let e = check(&format!("rope_neox {isa} t{t} {seq}x{heads}x{hd}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("rope_neox");
}

#[test]
fn rms_norm_rope_neox_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(seq, heads, hd)) in ROPE_SHAPES.iter().enumerate() {
        let mut r = case_rng(&format!("rms_norm_rope_neox seq={seq} heads={heads} hd={hd}"), 300 + case as u64);
        let x = rows_with_scales(&mut r, seq * heads, hd);
        let w = uniform(&mut r, hd, -1.0, 2.0);
        let (c, s) = rope_tables(&mut r, seq, hd);
        let eps = 1e-6;
        // Norm in f64, then RoPE in f64; the norm's own relative error feeds the RoPE bound.
        let normed = rms_norm_ref(&x, &w, seq * heads, hd, eps);
        let rel = vec![(hd as f64 / 32.0 + 16.0) * U; normed.len()];
        let (want, tol) = rope_ref(&normed, &rel, &c, &s, seq, heads, hd);
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; x.len()];
            rms_norm_rope_neox_with(isa, &x, &w, &c, &s, seq, heads, hd, eps, &mut out).unwrap();
            let e = check(&format!("rms_norm_rope_neox {isa} t{t} {seq}x{heads}x{hd}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("rms_norm_rope_neox");
}

// ---------------------------------------------------------------------------------------------
// GELU.

const GELU_LENS: [usize; 8] = [0, 1, 7, 33, 640, 768, 5 * 2048, 70_001];

#[test]
fn gelu_tanh_matches_reference() {
    let mut worst = Worst::default();
    for (case, &n) in GELU_LENS.iter().enumerate() {
        let mut r = case_rng(&format!("gelu_tanh n={n}"), 400 + case as u64);
        let x = uniform(&mut r, n, -10.0, 10.0);
        let up = uniform(&mut r, n, -3.0, 3.0);
        let want: Vec<f64> = x.iter().map(|&v| gelu_ref(v)).collect();
        let tol: Vec<f64> = x.iter().zip(&want).map(|(&v, &w)| gelu_tol(v, w)).collect();
        let want_g: Vec<f64> = want.iter().zip(&up).map(|(&g, &u)| g * u as f64).collect();
        let tol_g: Vec<f64> = tol.iter().zip(&up).zip(&want_g).map(|((&t, &u), &w)| t * (u as f64).abs() + w.abs() * U).collect();
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; n];
            gelu_tanh_with(isa, &x, &mut out).unwrap();
            let e = check(&format!("gelu_tanh {isa} t{t} n={n}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("gelu {isa}"), e);
            let mut out = vec![f32::NAN; n];
            gated_gelu_tanh_with(isa, &x, &up, &mut out).unwrap();
            let e = check(&format!("gated_gelu_tanh {isa} t{t} n={n}"), &out, &want_g, &tol_g, NMSE_MAX);
            worst.add(format!("gated {isa}"), e);
        });
    }
    worst.print("gelu_tanh");
}

#[test]
fn gelu_tanh_special_values() {
    let x = [0.0f32, -0.0, 1e-30, -1e-30, 20.0, -20.0, 1e30, -1e30, f32::INFINITY, f32::NEG_INFINITY, f32::NAN, 3.0];
    for isa in isas() {
        let mut out = vec![f32::NAN; x.len()];
        gelu_tanh_with(isa, &x, &mut out).unwrap();
        for (i, (&v, &y)) in x.iter().zip(&out).enumerate() {
            let r = gelu_ref(v);
            if r.is_nan() {
                // ±∞·0 (x = −∞) and NaN.
                assert!(y.is_nan(), "{isa} gelu({v}) = {y}, want NaN");
            } else if r.is_infinite() {
                assert_eq!(y as f64, r, "{isa} gelu({v})");
            } else {
                assert!((y as f64 - r).abs() <= gelu_tol(v, r), "{isa} gelu({v}) [{i}] = {y}, want {r}");
            }
        }
        assert_eq!(out[0].to_bits(), 0.0f32.to_bits(), "{isa} gelu(0)");
    }
}

// ---------------------------------------------------------------------------------------------
// Softmax.

#[test]
fn softmax_rows_matches_reference() {
    let shapes = [(1usize, 1usize), (3, 7), (5, 33), (17, 640), (128, 768), (2, 1000), (40, 5), (4, 130)];
    let mut worst = Worst::default();
    for (case, &(rows, n)) in shapes.iter().enumerate() {
        let mut r = case_rng(&format!("softmax_rows {rows}x{n}"), 500 + case as u64);
        let mut x = uniform(&mut r, rows * n, -10.0, 10.0);
        for (ri, row) in x.chunks_mut(n).enumerate() {
            match ri % 5 {
                // Wide logits.
                1 => row.iter_mut().for_each(|v| *v *= 5.0),
                // Some masked entries (−∞), as after an additive mask.
                2 => row.iter_mut().for_each(|v| {
                    if r.gen_range(0..3) == 0 {
                        *v = f32::NEG_INFINITY
                    }
                }),
                // A fully masked row: NaN.
                3 if rows > 1 => row.fill(f32::NEG_INFINITY),
                _ => {}
            }
        }
        let (want, tol) = softmax_ref(&x, rows, n);
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; rows * n];
            softmax_rows_with(isa, &x, rows, n, &mut out).unwrap();
            let e = check(&format!("softmax_rows {isa} t{t} {rows}x{n}"), &out, &want, &tol, NMSE_MAX);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("softmax_rows");
}

// ---------------------------------------------------------------------------------------------
// Attention.

#[derive(Debug, Clone, Copy)]
enum Mask {
    /// All zeros (no masking).
    Zero,
    /// Query `i` sits at position `sk − sq + i` and sees keys `j ≤` that position.
    Causal,
    /// Causal, and only the last `w` positions.
    Window(usize),
    /// Finite values in [-5, 5).
    Random,
    /// Random finite values with about a third −∞.
    RandomInf,
    /// Causal with every third query row fully masked.
    CausalDeadRows,
    /// Everything −∞.
    All,
}

fn make_mask(r: &mut ChaCha8Rng, kind: Mask, sq: usize, sk: usize) -> Vec<f32> {
    let ninf = f32::NEG_INFINITY;
    let mut m = vec![0.0f32; sq * sk];
    for i in 0..sq {
        let pos = (sk + i) as isize - sq as isize;
        for j in 0..sk {
            let ji = j as isize;
            m[i * sk + j] = match kind {
                Mask::Zero => 0.0,
                Mask::Causal => {
                    if ji <= pos {
                        0.0
                    } else {
                        ninf
                    }
                }
                Mask::Window(w) => {
                    if ji <= pos && pos - ji < w as isize {
                        0.0
                    } else {
                        ninf
                    }
                }
                Mask::Random => r.gen_range(-5.0..5.0),
                Mask::RandomInf => {
                    if r.gen_range(0..3) == 0 {
                        ninf
                    } else {
                        r.gen_range(-5.0..5.0)
                    }
                }
                Mask::CausalDeadRows => {
                    if i % 3 == 1 || ji > pos {
                        ninf
                    } else {
                        0.0
                    }
                }
                Mask::All => ninf,
            };
        }
    }
    m
}

/// (n_kv, group, sq, sk, head_dim, mask)
/// Cases with no −∞ in the mask and at least 6 query rows per head take the dense path (see
/// `attention_takes_both_paths`): the last four are shaped for its tails (keys not a multiple
/// of 32, head dimensions not a multiple of 8, rows not a multiple of 6, groups).
const ATTN_CASES: [(usize, usize, usize, usize, usize, Mask); 21] = [
    (1, 1, 1, 1, 32, Mask::Zero),
    (1, 4, 1, 130, 256, Mask::Zero),
    (1, 4, 1, 517, 256, Mask::Window(100)),
    (1, 4, 5, 5, 256, Mask::Causal),
    (2, 2, 17, 17, 64, Mask::Causal),
    (1, 4, 130, 130, 256, Mask::Causal),
    (3, 1, 130, 200, 64, Mask::Causal),
    (1, 4, 130, 130, 256, Mask::Window(40)),
    (2, 3, 17, 200, 32, Mask::Window(64)),
    (1, 2, 5, 17, 40, Mask::Random),
    (2, 2, 130, 70, 72, Mask::Random),
    (1, 1, 17, 130, 1, Mask::RandomInf),
    (1, 3, 130, 65, 256, Mask::RandomInf),
    (1, 4, 17, 130, 64, Mask::CausalDeadRows),
    (2, 1, 40, 129, 33, Mask::CausalDeadRows),
    (2, 2, 5, 5, 32, Mask::All),
    (1, 2, 3, 64, 8, Mask::Zero),
    (2, 1, 100, 77, 32, Mask::Zero),
    (3, 1, 37, 300, 20, Mask::Random),
    (1, 3, 13, 33, 17, Mask::Zero),
    (2, 2, 9, 1, 64, Mask::Random),
];

/// The cases above exercise both attention paths: the dense one (no −∞ in the mask, at least
/// one register tile of query rows per head) and the flash loop.
#[test]
fn attention_takes_both_paths() {
    let mut dense = 0;
    for (case, &(n_kv, group, sq, sk, hd, mk)) in ATTN_CASES.iter().enumerate() {
        let a = random_attn(&mut case_rng("paths", 900 + case as u64), n_kv, group, sq, sk, hd, mk);
        let d = attention_is_dense(&a.mask, false, group, sq, sk);
        assert_eq!(d, attention_is_dense(&a.mask[..sk], true, group, sq, sk), "case {case}: row mask decides like the full mask");
        let finite = a.mask.iter().all(|&x| x != f32::NEG_INFINITY);
        assert!(!d || finite, "case {case}: a mask with −∞ never takes the dense path");
        dense += d as usize;
    }
    assert!(dense >= 5 && dense < ATTN_CASES.len() - 5, "{dense} of {} cases take the dense path", ATTN_CASES.len());
}

/// Random head-major q, k, v and a mask of kind `mk`, scaled so the scores are a few units (a
/// realistic, not flat, softmax).
fn random_attn(r: &mut ChaCha8Rng, n_kv: usize, group: usize, sq: usize, sk: usize, hd: usize, mk: Mask) -> Attn {
    let q = uniform(r, n_kv * group * sq * hd, -1.0, 1.0);
    let k = uniform(r, n_kv * sk * hd, -1.0, 1.0);
    let v = uniform(r, n_kv * sk * hd, -2.0, 2.0);
    let mask = make_mask(r, mk, sq, sk);
    let scale = 4.0 / (hd as f32).sqrt();
    Attn { n_kv, group, sq, sk, hd, scale, q, k, v, mask }
}

#[test]
fn attention_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(n_kv, group, sq, sk, hd, mk)) in ATTN_CASES.iter().enumerate() {
        let what = format!("attention n_kv={n_kv} group={group} sq={sq} sk={sk} hd={hd} {mk:?}");
        let a = random_attn(&mut case_rng(&what, 600 + case as u64), n_kv, group, sq, sk, hd, mk);
        let scale = a.scale;
        let (want, tol) = attention_ref(&a);
        let dead = want.iter().filter(|x| x.is_nan()).count();
        if matches!(mk, Mask::CausalDeadRows | Mask::All) {
            assert!(dead > 0, "{what}: the case must contain fully masked rows");
        }
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; want.len()];
            attention_with(isa, &a.q, &a.k, &a.v, &a.mask, n_kv, group, sq, sk, hd, scale, &mut out).unwrap();
            let e = check(&format!("{what} {isa} t{t}"), &out, &want, &tol, NMSE_MAX_ATTN);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("attention");
}

/// One mask row for every query position (a broadcast mask) gives exactly what that row
/// repeated as a full `[sq, sk]` mask gives: the same arithmetic, in both layouts, on every
/// ISA and thread count, for each case's first mask row (causal cases: a row with −∞).
#[test]
fn attention_row_mask_equals_repeated_rows() {
    for (case, &(n_kv, group, sq, sk, hd, mk)) in ATTN_CASES.iter().enumerate() {
        let what = format!("attention (row mask) n_kv={n_kv} group={group} sq={sq} sk={sk} hd={hd} {mk:?}");
        let a = random_attn(&mut case_rng(&what, 700 + case as u64), n_kv, group, sq, sk, hd, mk);
        let row = a.mask[..sk].to_vec();
        let full: Vec<f32> = (0..sq).flat_map(|_| row.iter().copied()).collect();
        for layout in [AttnLayout::HeadMajor, AttnLayout::SeqMajor] {
            each_config(|isa, t| {
                let n = n_kv * group * sq * hd;
                let (mut want, mut got) = (vec![f32::NAN; n], vec![f32::NAN; n]);
                attention_layout_with(isa, layout, &a.q, &a.k, &a.v, &full, n_kv, group, sq, sk, hd, a.scale, &mut want).unwrap();
                attention_row_mask_with(isa, layout, &a.q, &a.k, &a.v, &row, n_kv, group, sq, sk, hd, a.scale, &mut got).unwrap();
                assert!(want.iter().zip(&got).all(|(w, g)| w.to_bits() == g.to_bits()), "{what} {layout:?} {isa} t{t}");
            });
        }
    }
    let a = random_attn(&mut case_rng("row mask length", 799), 1, 1, 4, 8, 16, Mask::Zero);
    let mut out = vec![0f32; 4 * 16];
    assert!(attention_row_mask_with(Isa::Scalar, AttnLayout::HeadMajor, &a.q, &a.k, &a.v, &a.mask, 1, 1, 4, 8, 16, a.scale, &mut out).is_err(), "a full mask is not a row");
}

/// Rows of `x`, head-major `[n_kv, group, sq, hd]` (the shape of `a`), in the position-major
/// order `[sq, n_kv, group, hd]`: row (kv, g, i) of the first is row (i, kv, g) of the second.
fn to_seq_major<T: Copy + Default>(a: &Attn, x: &[T]) -> Vec<T> {
    let (heads, sq, hd) = (a.n_kv * a.group, a.sq, a.hd);
    let mut y = vec![T::default(); x.len()];
    for r in 0..heads * sq {
        let (h, i) = (r / sq, r % sq);
        let (src, dst) = (r * hd, (i * heads + h) * hd);
        y[dst..dst + hd].copy_from_slice(&x[src..src + hd]);
    }
    y
}

/// The position-major layout (`q`, `out` as `[sq, n_kv, group, hd]`) gives the head-major
/// result, transposed: the same reference and bounds, with the rows permuted on the way in
/// and out.
#[test]
fn attention_seq_major_matches_reference() {
    let mut worst = Worst::default();
    for (case, &(n_kv, group, sq, sk, hd, mk)) in ATTN_CASES.iter().enumerate() {
        let what = format!("attention (seq-major) n_kv={n_kv} group={group} sq={sq} sk={sk} hd={hd} {mk:?}");
        let a = random_attn(&mut case_rng(&what, 650 + case as u64), n_kv, group, sq, sk, hd, mk);
        let scale = a.scale;
        let (want_hm, tol_hm) = attention_ref(&a);
        let (q_sm, want, tol) = (to_seq_major(&a, &a.q), to_seq_major(&a, &want_hm), to_seq_major(&a, &tol_hm));
        each_config(|isa, t| {
            let mut out = vec![f32::NAN; want.len()];
            attention_layout_with(isa, AttnLayout::SeqMajor, &q_sm, &a.k, &a.v, &a.mask, n_kv, group, sq, sk, hd, scale, &mut out).unwrap();
            let e = check(&format!("{what} {isa} t{t}"), &out, &want, &tol, NMSE_MAX_ATTN);
            worst.add(format!("{isa}"), e);
        });
    }
    worst.print("attention (seq-major)");
}

/// Block skipping changes nothing but speed: a mask with −1e30 in place of −∞ (never skipped)
/// gives the same result to rounding. And a block holding only large negative *finite* values
/// is not skipped: with every visible score offset by −1e4 the result still matches the
/// reference (the offset cancels in the softmax; its rounding at 1e4 costs ~1e-3 relative in
/// each score, which the per-element bound accounts for through `|s|·u`).
#[test]
fn attention_skipping_is_transparent() {
    let (n_kv, group, sq, sk, hd) = (1, 2, 70, 200, 64);
    let mut r = case_rng("attention skipping", 700);
    let q = uniform(&mut r, n_kv * group * sq * hd, -1.0, 1.0);
    let k = uniform(&mut r, n_kv * sk * hd, -1.0, 1.0);
    let v = uniform(&mut r, n_kv * sk * hd, -2.0, 2.0);
    let window = make_mask(&mut r, Mask::Window(50), sq, sk);
    let finite: Vec<f32> = window.iter().map(|&x| if x == f32::NEG_INFINITY { -1e30 } else { x }).collect();
    let shifted: Vec<f32> = window.iter().map(|&x| if x == 0.0 { -1e4 } else { x }).collect();
    let a = Attn { n_kv, group, sq, sk, hd, scale: 0.125, q, k, v, mask: shifted };
    let (want, tol) = attention_ref(&a);
    each_config(|isa, t| {
        let run = |mask: &[f32]| {
            let mut out = vec![f32::NAN; a.q.len()];
            attention_with(isa, &a.q, &a.k, &a.v, mask, n_kv, group, sq, sk, hd, a.scale, &mut out).unwrap();
            out
        };
        let skipped: Vec<f64> = run(&window).iter().map(|&x| x as f64).collect();
        let e = nmse(&run(&finite), &skipped);
        assert!(e < 1e-12, "{isa} t{t}: skipped vs unskipped NMSE {e:e}");
        check(&format!("attention shifted mask {isa} t{t}"), &run(&a.mask), &want, &tol, 1e-5);
    });
}

#[test]
fn attention_edge_shapes() {
    for isa in isas() {
        // No keys: the softmax normalizer is an empty sum, so every row is NaN.
        let q = vec![0.5f32; 2 * 3 * 8];
        let mut out = vec![0.0f32; q.len()];
        attention_with(isa, &q, &[], &[], &[], 2, 1, 3, 0, 8, 1.0, &mut out).unwrap();
        assert!(out.iter().all(|x| x.is_nan()), "{isa}: sk = 0");
        // Empty output: nothing to do, nothing read.
        let mut none: Vec<f32> = vec![];
        attention_with(isa, &[], &[], &[], &[0.0; 25], 0, 4, 5, 5, 8, 1.0, &mut none).unwrap();
        attention_with(isa, &[], &[], &[], &[0.0; 25], 1, 4, 5, 5, 0, 1.0, &mut none).unwrap();
        // One key: the output is that key's value whatever the scores (mask finite).
        let v = [1.0f32, -2.0, 3.0, 0.25];
        let mut out = vec![f32::NAN; 4];
        attention_with(isa, &[9.0, 9.0, 9.0, 9.0], &[1.0; 4], &v, &[-3.0], 1, 1, 1, 1, 4, 1.0, &mut out).unwrap();
        assert_eq!(out, v, "{isa}: single key");
    }
}

// ---------------------------------------------------------------------------------------------
// Attention over a KV cache (decoding).

/// Thread counts of the decoding tests: more threads than tiles make the kernel split keys.
const DECODE_THREADS: [usize; 3] = [1, 2, 4];

/// A KV-cache mask: query `i` sits at position `pos + i` and sees the keys `j ≤ pos + i`
/// (with `window`, only the last `window` of them); all other keys, among them the unused cache
/// rows past `pos + sq − 1`, are −∞.
fn cache_mask(sq: usize, sk: usize, pos: usize, window: Option<usize>) -> Vec<f32> {
    let mut m = vec![f32::NEG_INFINITY; sq * sk];
    for i in 0..sq {
        let p = pos + i;
        for j in 0..sk.min(p + 1) {
            if window.is_none_or(|w| p - j < w) {
                m[i * sk + j] = 0.0;
            }
        }
    }
    m
}

/// Fills the `k` and `v` rows of every key the mask hides from all query rows with NaN or ±∞
/// (what a preallocated cache's unused rows may hold); returns how many keys that is.
fn poison_hidden_keys(a: &mut Attn) -> usize {
    let poison = [f32::NAN, f32::INFINITY, f32::NAN, f32::NEG_INFINITY];
    let mut n = 0;
    for j in 0..a.sk {
        if (0..a.sq).all(|i| a.mask[i * a.sk + j] == f32::NEG_INFINITY) {
            for kv in 0..a.n_kv {
                let o = (kv * a.sk + j) * a.hd;
                a.k[o..o + a.hd].fill(poison[n % 4]);
                a.v[o..o + a.hd].fill(poison[(n + 1) % 4]);
            }
            n += 1;
        }
    }
    n
}

/// Runs both layouts of `a` on `isa` (in the current pool) and checks them against the
/// head-major reference `want`/`tol`; returns the head-major output and the worse NMSE.
fn run_both_layouts(isa: Isa, a: &Attn, want: &[f64], tol: &[f64], what: &str) -> (Vec<f32>, f64) {
    let (n_kv, group, sq, sk, hd) = (a.n_kv, a.group, a.sq, a.sk, a.hd);
    let mut out = vec![f32::NAN; want.len()];
    attention_with(isa, &a.q, &a.k, &a.v, &a.mask, n_kv, group, sq, sk, hd, a.scale, &mut out).unwrap();
    let e_hm = check(&format!("{what} (head-major)"), &out, want, tol, NMSE_MAX_ATTN);
    let (q_sm, want_sm, tol_sm) = (to_seq_major(a, &a.q), to_seq_major(a, want), to_seq_major(a, tol));
    let mut out_sm = vec![f32::NAN; want.len()];
    attention_layout_with(isa, AttnLayout::SeqMajor, &q_sm, &a.k, &a.v, &a.mask, n_kv, group, sq, sk, hd, a.scale, &mut out_sm).unwrap();
    let e_sm = check(&format!("{what} (seq-major)"), &out_sm, &want_sm, &tol_sm, NMSE_MAX_ATTN);
    (out, e_hm.max(e_sm))
}

/// Decoding over a KV cache: 1, 2 and 5 query rows against caches of 1 to 4097 keys, causal
/// with the current position anywhere in the cache, or with a sliding window; the `k` and `v`
/// rows of every key hidden from all query rows hold NaN or ±∞. Both layouts, 1, 2 and 4
/// threads (with few tiles, several threads split the keys of a tile into chunks whose partial
/// results are combined: that changes the rounding of one-row decodes, which is how the test
/// knows it ran).
#[test]
fn attention_decode_matches_reference() {
    let isas = isas();
    let mut worst = Worst::default();
    let (mut case, mut split_seen) = (0u64, 0usize);
    for sq in [1, 2, 5] {
        for sk in [1usize, 63, 64, 65, 1000, 4097] {
            for (n_kv, group, hd) in [(1, 1, 64), (1, 4, 64), (2, 1, 64), (2, 4, 64), (1, 1, 256), (1, 4, 256), (2, 1, 256), (2, 4, 256)] {
                for windowed in [false, true] {
                    let mut r = case_rng(&format!("attention decode case {case}"), 800 + case);
                    case += 1;
                    let pos = r.gen_range(0..=sk.saturating_sub(sq));
                    let window = windowed.then(|| [1, 17, 100, 512][r.gen_range(0..4)]);
                    let mut a = random_attn(&mut r, n_kv, group, sq, sk, hd, Mask::Zero);
                    a.mask = cache_mask(sq, sk, pos, window);
                    let hidden = poison_hidden_keys(&mut a);
                    let what = format!("attention decode n_kv={n_kv} group={group} sq={sq} sk={sk} hd={hd} pos={pos} window={window:?} ({hidden} hidden keys poisoned)");
                    let (want, tol) = attention_ref(&a);
                    // Every query inside the cache sees its own key.
                    assert!(sk < sq || want.iter().all(|x| x.is_finite()), "{what}: reference not finite");
                    for &isa in &isas {
                        let mut single: Option<Vec<f32>> = None;
                        for &t in &DECODE_THREADS {
                            let (out, e) = pool(t).install(|| run_both_layouts(isa, &a, &want, &tol, &format!("{what} {isa} t{t}")));
                            worst.add(format!("{isa} hd={hd}"), e);
                            match &single {
                                None => single = Some(out),
                                // With one query row the tiles (≤ 4 rows) are the same on any
                                // number of threads: only the key split changes the rounding.
                                Some(s) if sq == 1 => split_seen += s.iter().zip(&out).any(|(x, y)| x.to_bits() != y.to_bits()) as usize,
                                Some(_) => {}
                            }
                        }
                    }
                }
            }
        }
    }
    assert!(split_seen > 0, "no multi-threaded decode differed from the single-threaded one in rounding: the key split never ran");
    eprintln!("attention decode: {split_seen} multi-threaded runs rounded differently from one thread");
    worst.print("attention decode");
}

/// A key hidden from some query rows only never reaches those rows, whatever its `k` and `v`
/// hold, also inside a register tile whose other rows see it and between keys visible to the
/// tile. The mask is causal with holes (every fifth key −∞ for all rows, and about a quarter
/// of the rest −∞ per row); the keys hidden from all rows hold NaN/±∞, and the key at the last
/// query's position — seen by the last query row alone — has one NaN in `k` and one in `v`:
/// the last query's rows are NaN, all others must come out exact.
#[test]
fn attention_masked_keys_never_contribute() {
    const CASES: [(usize, usize, usize, usize, usize); 7] =
        [(1, 1, 7, 150, 64), (1, 2, 5, 300, 40), (2, 3, 4, 130, 32), (1, 4, 3, 700, 256), (1, 1, 2, 4097, 256), (2, 1, 9, 1000, 64), (1, 1, 4, 64, 16)];
    let isas = isas();
    let mut worst = Worst::default();
    for (case, &(n_kv, group, sq, sk, hd)) in CASES.iter().enumerate() {
        let what = format!("attention masked keys n_kv={n_kv} group={group} sq={sq} sk={sk} hd={hd}");
        let mut r = case_rng(&what, 900 + case as u64);
        let pos = r.gen_range(0..=sk - sq);
        let last = pos + sq - 1;
        let mut a = random_attn(&mut r, n_kv, group, sq, sk, hd, Mask::Zero);
        let mut mask = cache_mask(sq, sk, pos, None);
        for i in 0..sq {
            for j in 0..sk {
                // Each query keeps its own key; the last one keeps `last`.
                if j != pos + i && (j % 5 == 2 || r.gen_range(0..4) == 0) {
                    mask[i * sk + j] = f32::NEG_INFINITY;
                }
            }
        }
        a.mask = mask;
        let hidden = poison_hidden_keys(&mut a);
        for kv in 0..n_kv {
            let o = (kv * sk + last) * hd;
            a.k[o + r.gen_range(0..hd)] = f32::NAN;
            a.v[o + r.gen_range(0..hd)] = f32::NAN;
        }
        let (want, tol) = attention_ref(&a);
        // Head-major rows: (kv, g, i), i fastest.
        for (row, w) in want.chunks(hd).enumerate() {
            let i = row % sq;
            assert_eq!(w.iter().all(|x| x.is_nan()), i == sq - 1, "{what}: reference row {row}");
            assert!(i == sq - 1 || w.iter().all(|x| x.is_finite()), "{what}: reference row {row}");
        }
        eprintln!("{what}: pos {pos}, {hidden} keys hidden from all rows");
        for &isa in &isas {
            for &t in &DECODE_THREADS {
                let (_, e) = pool(t).install(|| run_both_layouts(isa, &a, &want, &tol, &format!("{what} {isa} t{t}")));
                worst.add(format!("{isa}"), e);
            }
        }
    }
    worst.print("attention masked keys");
}

// ---------------------------------------------------------------------------------------------
// Argument validation.

fn is_len_err<T: std::fmt::Debug>(r: Result<T, KernelError>, what: &str) {
    match r {
        Err(KernelError::Length { .. }) => {}
        other => panic!("{what}: expected a length error, got {other:?}"),
    }
}

#[test]
fn fused_kernels_reject_bad_lengths() {
    let isa = Isa::Scalar;
    let v = |n: usize| vec![1.0f32; n];
    let o = |n: usize| vec![f32::NAN; n];

    let mut out = o(12);
    is_len_err(rms_norm_with(isa, &v(11), &v(4), 3, 4, 1e-6, &mut out), "rms_norm x");
    is_len_err(rms_norm_with(isa, &v(12), &v(3), 3, 4, 1e-6, &mut out), "rms_norm w");
    is_len_err(rms_norm_with(isa, &v(12), &v(4), 3, 4, 1e-6, &mut o(13)), "rms_norm out");
    assert!(out.iter().all(|x| x.is_nan()), "rms_norm wrote on error");
    assert!(matches!(rms_norm_with(isa, &v(0), &v(4), usize::MAX, 4, 1e-6, &mut o(0)), Err(KernelError::Overflow(_))));

    let (mut s, mut out) = (o(12), o(12));
    is_len_err(add_rms_norm_with(isa, &v(12), &v(11), &v(4), 3, 4, 1e-6, &mut s, &mut out), "add_rms_norm b");
    is_len_err(add_rms_norm_with(isa, &v(11), &v(12), &v(4), 3, 4, 1e-6, &mut s, &mut out), "add_rms_norm a");
    is_len_err(add_rms_norm_with(isa, &v(12), &v(12), &v(5), 3, 4, 1e-6, &mut s, &mut out), "add_rms_norm w");
    is_len_err(add_rms_norm_with(isa, &v(12), &v(12), &v(4), 3, 4, 1e-6, &mut o(2), &mut out), "add_rms_norm sum");
    is_len_err(add_rms_norm_with(isa, &v(12), &v(12), &v(4), 3, 4, 1e-6, &mut s, &mut o(2)), "add_rms_norm out");
    assert!(s.iter().chain(&out).all(|x| x.is_nan()), "add_rms_norm wrote on error");

    // rope: seq 2, heads 3, head_dim 4 → x 24, tables 4.
    let mut out = o(24);
    is_len_err(rope_neox_with(isa, &v(23), &v(4), &v(4), 2, 3, 4, &mut out), "rope x");
    is_len_err(rope_neox_with(isa, &v(24), &v(3), &v(4), 2, 3, 4, &mut out), "rope cos");
    is_len_err(rope_neox_with(isa, &v(24), &v(4), &v(5), 2, 3, 4, &mut out), "rope sin");
    is_len_err(rope_neox_with(isa, &v(24), &v(4), &v(4), 2, 3, 4, &mut o(25)), "rope out");
    assert!(matches!(rope_neox_with(isa, &v(18), &v(2), &v(2), 2, 3, 3, &mut o(18)), Err(KernelError::Shape(_))));
    is_len_err(rms_norm_rope_neox_with(isa, &v(24), &v(3), &v(4), &v(4), 2, 3, 4, 1e-6, &mut out), "qk-norm w");
    is_len_err(rms_norm_rope_neox_with(isa, &v(24), &v(4), &v(4), &v(4), 2, 3, 4, 1e-6, &mut o(1)), "qk-norm out");
    assert!(out.iter().all(|x| x.is_nan()), "rope wrote on error");

    is_len_err(gelu_tanh_with(isa, &v(5), &mut o(4)), "gelu out");
    is_len_err(gated_gelu_tanh_with(isa, &v(5), &v(4), &mut o(5)), "gated up");
    is_len_err(gated_gelu_tanh_with(isa, &v(5), &v(5), &mut o(6)), "gated out");
    is_len_err(softmax_rows_with(isa, &v(11), 3, 4, &mut o(12)), "softmax x");
    is_len_err(softmax_rows_with(isa, &v(12), 3, 4, &mut o(11)), "softmax out");

    // attention: n_kv 2, group 2, sq 3, sk 5, hd 4 → q/out 48, k/v 40, mask 15.
    let a = |q: usize, k: usize, vv: usize, m: usize, out: usize| attention_with(isa, &v(q), &v(k), &v(vv), &v(m), 2, 2, 3, 5, 4, 0.5, &mut o(out));
    a(48, 40, 40, 15, 48).unwrap();
    is_len_err(a(47, 40, 40, 15, 48), "attention q");
    is_len_err(a(48, 41, 40, 15, 48), "attention k");
    is_len_err(a(48, 40, 39, 15, 48), "attention v");
    is_len_err(a(48, 40, 40, 16, 48), "attention mask");
    is_len_err(a(48, 40, 40, 15, 49), "attention out");
}

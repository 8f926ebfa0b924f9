//! Window kernels (direct grouped convolution, im2col, max / average pooling) against plain
//! f64 references written here from the definitions (naive loops over output positions and
//! window taps, independent of the kernels' column ranges), on every ISA of this machine, on 1
//! and 2 threads, with NaN-poisoned outputs.
//!
//! Geometries: 1-D (a plane of height 1) and 2-D, kernel sizes 1, 3, 5 and a 1x400 window of
//! stride 160 (an STFT framing), strides 1-3, dilations 1-2, asymmetric padding, padding wider
//! than the window (windows entirely in padding), groups 1, 2 and depthwise, odd widths (vector
//! tails), batch 2, and planes large enough to be split across threads.
//!
//! Every case draws its inputs from a seeded RNG; the seed is printed as `base+case` (base
//! `TG_SEED`, default below). Bounds, with u = 2^-24 the unit roundoff of f32:
//! * conv (direct `conv2d_f32` and the implicit GEMM `conv2d_implicit_f32` on every ISA, and
//!   `conv2d_gemm_f32`, im2col + the f32 matmul):
//!   each output is an f32 sum of K = (c/groups)·kh·kw products, accumulated in tap order
//!   (direct: one fused multiply-add per term) or in the matmul's order. Summing K terms in any
//!   order, with each product rounded or not, has `|err| ≤ (K + 1)·u·Σ|w·x|` to first order;
//!   checked per element against `2·K·u·Σ|w·x|` (so exactly 0 where every tap reads padding),
//!   and each case's NMSE against [`NMSE_MAX`] 1e-10 (random signs give relative errors ≈ √K·u,
//!   NMSE ≈ 1e-12 for K = 400; a wrong or missing tap gives ≳ 1e-4).
//! * conv by Winograd F(2×2, 3×3) (`conv2d_winograd_f32_with`, every ISA): the products are
//!   taken of transformed inputs and filters (sums of up to 4 values, coefficients ±1, ±1/2)
//!   and transformed back (sums of up to 9 products' sums), so each output carries the
//!   rounding of those extra additions on top of the K-term sum: checked against
//!   [`WINOGRAD_FACTOR`] times the direct bound, and NMSE ≤ 1e-10.
//! * im2col: data movement, bit-exact (padding reads +0.0).
//! * max pooling: exact (−∞ for a window entirely in padding).
//! * average pooling: an f32 sum of the `t` taps inside the input then one division (Avg, by
//!   `t`) or a product with the rounded `1/taps` (AvgPadded): `|err| ≤ 2·(t + 2)·u·Σ|x| / d` with
//!   `d` the divisor; NMSE ≤ 1e-10.

mod common;

use common::*;
use rand_chacha::ChaCha8Rng;
use tg_kernels::{
    conv2d_bias_act_f32, conv2d_bias_residual_act_f32, conv2d_f32, conv2d_f32_with, conv2d_gemm_f32, conv2d_implicit_f32_with, conv2d_winograd_f32_with, im2col_f32, pool2d_f32, pool2d_f32_with,
    winograd_applies, winograd_tile, Act, ConvEpilogue, Isa, KernelError, Pool, Window2d,
};

/// Unit roundoff of f32.
const U: f64 = f32::EPSILON as f64 / 2.0;
const THREADS: [usize; 2] = [1, 2];
const NMSE_MAX: f64 = 1e-10;
/// Winograd's bound over the direct one's: the input transform adds up to 4 values, the
/// output transform up to 9 products' sums (each of magnitude up to 4·9/4 times a direct
/// term's), 3 more roundings per value on the way; the worst measured ratio of error to the
/// direct bound is printed by the test.
const WINOGRAD_FACTOR: f64 = 4.0;

fn base_seed() -> u64 {
    std::env::var("TG_SEED").ok().and_then(|s| s.trim().parse().ok()).unwrap_or(20_261_202)
}

fn case_rng(what: &str, case: u64) -> ChaCha8Rng {
    let base = base_seed();
    rng(&format!("{what} (seed = TG_SEED {base} + case {case})"), base.wrapping_add(case))
}

/// Tracks the worst NMSE per label and prints it at the end.
#[derive(Default)]
struct Worst(Vec<(String, f64)>);

impl Worst {
    fn add(&mut self, label: &str, v: f64) {
        match self.0.iter_mut().find(|(l, _)| l == label) {
            Some((_, w)) => *w = w.max(v),
            None => self.0.push((label.to_string(), v)),
        }
    }
    fn print(&self, test: &str) {
        for (l, v) in &self.0 {
            eprintln!("{test}: worst NMSE {l}: {v:.3e}");
        }
    }
}

/// A window geometry: batch, channels, input `[h, w]`, size, stride, dilation, padding before
/// and after (each `[h, w]`).
#[allow(clippy::too_many_arguments)]
fn win(n: usize, c: usize, in_hw: [usize; 2], size: [usize; 2], stride: [usize; 2], dilation: [usize; 2], pad_begin: [usize; 2], pad_end: [usize; 2]) -> Window2d {
    Window2d { n, c, in_hw, size, stride, dilation, pad_begin, pad_end }
}

/// A 1-D window over `[n, c, 1, w]`: size `k`, stride `s`, dilation `d`, padding `pb`/`pe`.
#[allow(clippy::too_many_arguments)]
fn win1(n: usize, c: usize, w: usize, k: usize, s: usize, d: usize, pb: usize, pe: usize) -> Window2d {
    win(n, c, [1, w], [1, k], [1, s], [1, d], [0, pb], [0, pe])
}

// ---------------------------------------------------------------------------------------------
// f64 references, straight from the definitions.

/// Output length along one axis: `(len + pb + pe − d·(k − 1) − 1) / s + 1`.
fn out_len(len: usize, k: usize, s: usize, d: usize, pb: usize, pe: usize) -> usize {
    (len + pb + pe - d * (k - 1) - 1) / s + 1
}

fn out_hw(g: &Window2d) -> [usize; 2] {
    [0, 1].map(|a| out_len(g.in_hw[a], g.size[a], g.stride[a], g.dilation[a], g.pad_begin[a], g.pad_end[a]))
}

/// Input position along axis `a` of output position `o`, tap `j`; `None` in the padding.
fn pos(g: &Window2d, a: usize, o: usize, j: usize) -> Option<usize> {
    let p = (o * g.stride[a] + j * g.dilation[a]) as isize - g.pad_begin[a] as isize;
    (p >= 0 && (p as usize) < g.in_hw[a]).then_some(p as usize)
}

/// `out[b, oc, oy, ox] = Σ_{ci, jy, jx} w[oc, ci, jy, jx] · x[b, (oc / (m/g))·(c/g) + ci, iy, ix]`,
/// with `Σ|terms|` per element.
fn conv_ref(g: &Window2d, groups: usize, m: usize, x: &[f32], w: &[f32]) -> (Vec<f64>, Vec<f64>) {
    let [oh, ow] = out_hw(g);
    let ([ih, iw], [kh, kw]) = (g.in_hw, g.size);
    let (cg, mg) = (g.c / groups, m / groups);
    let (mut out, mut mag) = (Vec::new(), Vec::new());
    for b in 0..g.n {
        for oc in 0..m {
            for oy in 0..oh {
                for ox in 0..ow {
                    let (mut s, mut t) = (0f64, 0f64);
                    for ci in 0..cg {
                        let ch = (oc / mg) * cg + ci;
                        for jy in 0..kh {
                            for jx in 0..kw {
                                if let (Some(iy), Some(ix)) = (pos(g, 0, oy, jy), pos(g, 1, ox, jx)) {
                                    let p = w[((oc * cg + ci) * kh + jy) * kw + jx] as f64 * x[((b * g.c + ch) * ih + iy) * iw + ix] as f64;
                                    s += p;
                                    t += p.abs();
                                }
                            }
                        }
                    }
                    out.push(s);
                    mag.push(t);
                }
            }
        }
    }
    (out, mag)
}

/// `out[b, (ch·kh + jy)·kw + jx, oy·ow + ox] = x[b, ch, iy, ix]` (0 in the padding).
fn im2col_ref(g: &Window2d, x: &[f32]) -> Vec<f32> {
    let [oh, ow] = out_hw(g);
    let ([ih, iw], [kh, kw]) = (g.in_hw, g.size);
    let mut out = Vec::new();
    for b in 0..g.n {
        for ch in 0..g.c {
            for jy in 0..kh {
                for jx in 0..kw {
                    for oy in 0..oh {
                        for ox in 0..ow {
                            out.push(match (pos(g, 0, oy, jy), pos(g, 1, ox, jx)) {
                                (Some(iy), Some(ix)) => x[((b * g.c + ch) * ih + iy) * iw + ix],
                                _ => 0.0,
                            });
                        }
                    }
                }
            }
        }
    }
    out
}

/// Per output: the pooled value, `Σ|x|` over the taps inside, the divisor (1 for Max).
fn pool_ref(g: &Window2d, kind: Pool, x: &[f32]) -> Vec<(f64, f64, f64)> {
    let [oh, ow] = out_hw(g);
    let ([ih, iw], [kh, kw]) = (g.in_hw, g.size);
    let mut out = Vec::new();
    for plane in 0..g.n * g.c {
        for oy in 0..oh {
            for ox in 0..ow {
                let (mut mx, mut sum, mut mag, mut count) = (f64::NEG_INFINITY, 0f64, 0f64, 0usize);
                for jy in 0..kh {
                    for jx in 0..kw {
                        if let (Some(iy), Some(ix)) = (pos(g, 0, oy, jy), pos(g, 1, ox, jx)) {
                            let v = x[(plane * ih + iy) * iw + ix] as f64;
                            mx = mx.max(v);
                            sum += v;
                            mag += v.abs();
                            count += 1;
                        }
                    }
                }
                out.push(match kind {
                    Pool::Max => (mx, 0.0, 1.0),
                    Pool::Avg if count == 0 => (0.0, 0.0, 1.0),
                    Pool::Avg => (sum / count as f64, mag, count as f64),
                    Pool::AvgPadded => (sum / (kh * kw) as f64, mag, (kh * kw) as f64),
                });
            }
        }
    }
    out
}

/// Checks `|y − r| ≤ tol` elementwise (equal values pass, so ±∞ matches itself) and returns the
/// NMSE over the finite references, which must be ≤ [`NMSE_MAX`].
fn check(what: &str, y: &[f32], r: &[f64], tol: &[f64]) -> f64 {
    assert_eq!(y.len(), r.len(), "{what}: output length");
    let (mut ys, mut rs) = (Vec::new(), Vec::new());
    for i in 0..y.len() {
        if y[i] as f64 == r[i] {
            if r[i].is_finite() {
                ys.push(y[i]);
                rs.push(r[i]);
            }
            continue;
        }
        let err = (y[i] as f64 - r[i]).abs();
        assert!(err <= tol[i], "{what}: element {i}: got {}, reference {}, |err| {err:.3e} > bound {:.3e}", y[i], r[i], tol[i]);
        ys.push(y[i]);
        rs.push(r[i]);
    }
    let e = nmse(&ys, &rs);
    assert!(e <= NMSE_MAX, "{what}: NMSE {e:.3e} > {NMSE_MAX:e}");
    e
}

// ---------------------------------------------------------------------------------------------
// Geometries.

/// Convolution cases: (name, window, groups, output channels).
fn conv_cases() -> Vec<(&'static str, Window2d, usize, usize)> {
    vec![
        ("1d k1 w17", win1(2, 3, 17, 1, 1, 1, 0, 0), 1, 4),
        ("1d k3 w33 pad 1+1", win1(2, 3, 33, 3, 1, 1, 1, 1), 1, 5),
        ("1d k5 w33 s2 d2 pad 3+1", win1(2, 3, 33, 5, 2, 2, 3, 1), 1, 4),
        ("1d k3 w17 s3 pad 2+0 groups 2", win1(2, 4, 17, 3, 3, 1, 2, 0), 2, 6),
        ("1d k5 w33 pad 2+2 depthwise", win1(2, 6, 33, 5, 1, 1, 2, 2), 6, 6),
        ("1d k3 w31 s2 depthwise x2 (m = 2c)", win1(2, 3, 31, 3, 2, 1, 1, 0), 3, 6),
        ("1d k400 s160 w1999 pad 200+200 (stft)", win1(2, 1, 1999, 400, 160, 1, 200, 200), 1, 16),
        ("1d k400 s160 w2000 no pad (stft)", win1(1, 1, 2000, 400, 160, 1, 0, 0), 1, 9),
        ("1d k3 w7 pad 5+4 (windows all padding)", win1(2, 2, 7, 3, 1, 1, 5, 4), 1, 3),
        ("2d k1 [7,9]", win(2, 4, [7, 9], [1, 1], [1, 1], [1, 1], [0, 0], [0, 0]), 1, 3),
        ("2d k3 [9,17] pad 1", win(2, 3, [9, 17], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 1, 4),
        ("2d k3 [16,20] pad 1, 32 → 1 (the terrain UNet's last conv: the direct kernel)", win(2, 32, [16, 20], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 1, 1),
        ("2d k3 [11,17] s2 pad [1,0]+[0,2]", win(2, 3, [11, 17], [3, 3], [2, 2], [1, 1], [1, 0], [0, 2]), 1, 5),
        ("2d k5 [13,33] d2 pad [2,3]+[3,2]", win(2, 2, [13, 33], [5, 5], [1, 1], [2, 2], [2, 3], [3, 2]), 1, 3),
        ("2d k3x5 [12,33] s[3,2] d[1,2] pad [0,4]+[2,1]", win(2, 3, [12, 33], [3, 5], [3, 2], [1, 2], [0, 4], [2, 1]), 1, 4),
        ("2d k5 [17,33] s3 pad 2", win(2, 2, [17, 33], [5, 5], [3, 3], [1, 1], [2, 2], [2, 2]), 1, 3),
        ("2d k3 [9,17] s2 pad 1 groups 2", win(2, 4, [9, 17], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]), 2, 6),
        ("2d k3 [17,33] pad 1 depthwise", win(2, 8, [17, 33], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 8, 8),
        ("2d k5 [9,19] s2 d2 pad 4 depthwise", win(2, 4, [9, 19], [5, 5], [2, 2], [2, 2], [4, 4], [4, 4]), 4, 4),
        ("2d k2 [5,7] pad 3+3 (windows all padding)", win(2, 2, [5, 7], [2, 2], [1, 1], [1, 1], [3, 3], [3, 3]), 1, 2),
        ("2d k3 [33,33] pad 1 c8 m16 (threads)", win(2, 8, [33, 33], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 1, 16),
        ("2d k3 [40,65] s2 pad 1 c8 m8 groups 2 (threads)", win(2, 8, [40, 65], [3, 3], [2, 2], [1, 1], [1, 1], [0, 1]), 2, 8),
        // Position blocks of the implicit GEMM that end mid-row (K = 288: 192 positions a block).
        ("2d k3 [20,70] pad 1 c32 m40 (blocks)", win(1, 32, [20, 70], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 1, 40),
        // A 1024-column block (K = 64): panel rows one cache line apart more than its width.
        ("2d k1 [32,32] c64 m20 (padded panel rows)", win(1, 64, [32, 32], [1, 1], [1, 1], [1, 1], [0, 0], [0, 0]), 1, 20),
        // One column block for two threads: the output channels are cut in two (36 + 24, 36 + 14).
        ("2d k3 [8,8] pad 1 c16 m60 (channels cut over threads)", win(1, 16, [8, 8], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 1, 60),
        ("2d k1 [6,6] c24 m50 (pointwise, channels cut over threads)", win(1, 24, [6, 6], [1, 1], [1, 1], [1, 1], [0, 0], [0, 0]), 1, 50),
    ]
}

/// Pooling cases: (name, window).
fn pool_cases() -> Vec<(&'static str, Window2d)> {
    vec![
        ("1d k3 w33 pad 1+1", win1(2, 3, 33, 3, 1, 1, 1, 1)),
        ("1d k4 w17 s2 pad 2+1", win1(2, 3, 17, 4, 2, 1, 2, 1)),
        ("1d k2 w17 s2", win1(2, 2, 17, 2, 2, 1, 0, 0)),
        ("1d k3 w35 s3 d2 pad 0+2", win1(2, 2, 35, 3, 3, 2, 0, 2)),
        ("2d k2 [8,17] s2", win(2, 3, [8, 17], [2, 2], [2, 2], [1, 1], [0, 0], [0, 0])),
        ("2d k3 [9,17] s2 pad 1", win(2, 3, [9, 17], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1])),
        ("2d k3 [17,33] pad 1", win(2, 2, [17, 33], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1])),
        ("2d k3 [11,19] d2 pad [2,1]+[1,2]", win(2, 2, [11, 19], [3, 3], [1, 1], [2, 2], [2, 1], [1, 2])),
        ("2d k3x5 [9,21] s[1,2] pad [2,4]+[1,3] (windows mostly padding)", win(2, 2, [9, 21], [3, 5], [1, 2], [1, 1], [2, 4], [1, 3])),
        ("2d k2 [5,7] pad 3+3 (windows all padding)", win(2, 2, [5, 7], [2, 2], [1, 1], [1, 1], [3, 3], [3, 3])),
        ("2d k3 [33,65] pad 1 c8 (threads)", win(2, 8, [33, 65], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1])),
    ]
}

const KINDS: [Pool; 3] = [Pool::Max, Pool::Avg, Pool::AvgPadded];

// ---------------------------------------------------------------------------------------------
// Tests.

#[test]
fn conv2d_matches_reference() {
    let mut worst = Worst::default();
    for (case, (name, g, groups, m)) in conv_cases().into_iter().enumerate() {
        let mut r = case_rng(&format!("conv {name}"), case as u64);
        let [oh, ow] = out_hw(&g);
        let (cg, taps) = (g.c / groups, g.size[0] * g.size[1]);
        let x = uniform(&mut r, g.n * g.c * g.in_hw[0] * g.in_hw[1], -1.0, 1.0);
        let w = uniform(&mut r, m * cg * taps, -1.0, 1.0);
        let (want, mag) = conv_ref(&g, groups, m, &x, &w);
        assert_eq!(want.len(), g.n * m * oh * ow);
        // K = (c/g)·taps terms per output, one f32 rounding each: 2·K·u·Σ|w·x|.
        let k = (cg * taps) as f64;
        let tol: Vec<f64> = mag.iter().map(|t| 2.0 * k * U * t).collect();
        for isa in isas() {
            for &t in &THREADS {
                let mut out = vec![f32::NAN; want.len()];
                pool(t).install(|| conv2d_f32_with(isa, &g, groups, m, &x, &w, &mut out)).unwrap_or_else(|e| panic!("conv {name}: {e}"));
                let e = check(&format!("conv {name} on {isa:?}, {t} threads"), &out, &want, &tol);
                worst.add(&format!("{isa:?}"), e);
            }
        }
        // The default-ISA entry point, and im2col + matmul (the CPU runtime's path; any
        // summation order of K terms stays within the same bound).
        let mut out = vec![f32::NAN; want.len()];
        conv2d_f32(&g, groups, m, &x, &w, &mut out).unwrap_or_else(|e| panic!("conv {name}: {e}"));
        check(&format!("conv {name} (default ISA)"), &out, &want, &tol);
        for &t in &THREADS {
            let mut out = vec![f32::NAN; want.len()];
            pool(t).install(|| conv2d_gemm_f32(&g, groups, m, &x, &w, &mut out)).unwrap_or_else(|e| panic!("conv gemm {name}: {e}"));
            let e = check(&format!("conv {name} as im2col + matmul, {t} threads"), &out, &want, &tol);
            worst.add("im2col + matmul", e);
        }
        // The implicit GEMM (the CPU runtime's path): im2col panels per block of positions.
        for isa in isas() {
            for &t in &THREADS {
                let mut out = vec![f32::NAN; want.len()];
                pool(t).install(|| conv2d_implicit_f32_with(isa, &g, groups, m, &x, &w, None, &mut out)).unwrap_or_else(|e| panic!("conv implicit {name}: {e}"));
                let e = check(&format!("conv {name} as implicit GEMM on {isa:?}, {t} threads"), &out, &want, &tol);
                worst.add(&format!("implicit GEMM {isa:?}"), e);
            }
        }
        // With the fused epilogue act(conv + bias): the add's rounding and the activation's
        // (|act'| ≤ 1.1; SiLU within 4 ulps) on top of the sum's bound.
        let bias = uniform(&mut r, m, -1.0, 1.0);
        let p = oh * ow;
        for act in [Act::LeakyRelu(0.2), Act::Silu] {
            let f = |y: f64| match act {
                Act::LeakyRelu(a) => {
                    if y < 0.0 {
                        a as f64 * y
                    } else {
                        y
                    }
                }
                _ => y / (1.0 + (-y).exp()),
            };
            let want_b: Vec<f64> = want.iter().enumerate().map(|(i, &y)| f(y + bias[(i / p) % m] as f64)).collect();
            let tol_b: Vec<f64> =
                tol.iter().enumerate().map(|(i, &t)| 1.1 * (t + 2.0 * U * (want[i].abs() + bias[(i / p) % m].abs() as f64)) + 8.0 * U * want_b[i].abs() + 1e-30).collect();
            // With a residual added before the activation: its add's rounding on top.
            let res = uniform(&mut r, want.len(), -1.0, 1.0);
            let want_r: Vec<f64> = want.iter().enumerate().map(|(i, &y)| f(y + bias[(i / p) % m] as f64 + res[i] as f64)).collect();
            let tol_r: Vec<f64> = tol_b.iter().enumerate().map(|(i, &t)| t + 2.2 * U * (want[i].abs() + bias[(i / p) % m].abs() as f64 + res[i].abs() as f64)).collect();
            for &t in &THREADS {
                let mut out = vec![f32::NAN; want.len()];
                pool(t).install(|| conv2d_bias_act_f32(&g, groups, m, &x, &w, &bias, act, &mut out)).unwrap_or_else(|e| panic!("conv bias {name}: {e}"));
                check(&format!("conv {name} + bias, {act:?}, {t} threads"), &out, &want_b, &tol_b);
                let mut out = vec![f32::NAN; want.len()];
                pool(t).install(|| conv2d_bias_residual_act_f32(&g, groups, m, &x, &w, &bias, &res, act, &mut out)).unwrap_or_else(|e| panic!("conv bias residual {name}: {e}"));
                check(&format!("conv {name} + bias + residual, {act:?}, {t} threads"), &out, &want_r, &tol_r);
            }
        }
    }
    worst.print("conv2d");
}

/// Convolutions Winograd computes (each by both tiles): odd and even output sizes (partial tiles at
/// the right and bottom edges), padding 0 and 1 on either side, planes narrower than a
/// vector of tiles, several blocks of tile rows, batch 2, and enough work for 2 threads.
fn winograd_cases() -> Vec<(&'static str, Window2d, usize)> {
    vec![
        ("[16,32] pad 1 c16 m16", win(1, 16, [16, 32], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 16),
        ("[17,31] pad 1 c16 m24 (odd edges)", win(2, 16, [17, 31], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 24),
        ("[20,31] no pad c20 m17", win(1, 20, [20, 31], [3, 3], [1, 1], [1, 1], [0, 0], [0, 0]), 17),
        ("[16,35] pad [1,0]+[0,1] c16 m32", win(2, 16, [16, 35], [3, 3], [1, 1], [1, 1], [1, 0], [0, 1]), 32),
        ("[50,19] pad 1 c16 m16 (10 tiles a row: under a vector)", win(1, 16, [50, 19], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 16),
        ("[48,48] pad 1 c16 m16", win(1, 16, [48, 48], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 16),
        ("[45,47] pad 1 c24 m20 (odd edges)", win(2, 24, [45, 47], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 20),
        ("[50,51] no pad c16 m16", win(1, 16, [50, 51], [3, 3], [1, 1], [1, 1], [0, 0], [0, 0]), 16),
        ("[49,50] pad [0,1]+[1,0] c16 m16", win(1, 16, [49, 50], [3, 3], [1, 1], [1, 1], [0, 1], [1, 0]), 16),
        ("[40,70] pad 1 c32 m40 (blocks, threads)", win(1, 32, [40, 70], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 40),
        ("[6,300] pad 1 c16 m16 (a partial tile row)", win(1, 16, [6, 300], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 16),
        ("[4,600] pad 1 c16 m16 (one tile row longer than a block)", win(1, 16, [4, 600], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]), 16),
    ]
}

#[test]
fn conv2d_winograd_matches_reference() {
    let mut worst = Worst::default();
    let mut ratio = [0f64; 5];
    for (case, (name, g, m)) in winograd_cases().into_iter().enumerate() {
        assert!(winograd_applies(&g, 1, m), "{name}: Winograd should apply");
        assert!(matches!(winograd_tile(&g, 1, m), Some(2 | 4)), "{name}: the tile");
        let mut r = case_rng(&format!("winograd {name}"), case as u64);
        let [oh, ow] = out_hw(&g);
        let x = uniform(&mut r, g.n * g.c * g.in_hw[0] * g.in_hw[1], -1.0, 1.0);
        let w = uniform(&mut r, m * g.c * 9, -1.0, 1.0);
        let (want, mag) = conv_ref(&g, 1, m, &x, &w);
        let k = (g.c * 9) as f64;
        let tol: Vec<f64> = mag.iter().map(|t| WINOGRAD_FACTOR * 2.0 * k * U * t).collect();
        let bias = uniform(&mut r, m, -1.0, 1.0);
        let p = oh * ow;
        let want_b: Vec<f64> = want.iter().enumerate().map(|(i, &y)| (y + bias[(i / p) % m] as f64).max(0.0)).collect();
        let tol_b: Vec<f64> = tol.iter().enumerate().map(|(i, &t)| t + 2.0 * U * (want[i].abs() + bias[(i / p) % m].abs() as f64)).collect();
        let res = uniform(&mut r, want.len(), -1.0, 1.0);
        let want_r: Vec<f64> = want.iter().enumerate().map(|(i, &y)| (y + bias[(i / p) % m] as f64 + res[i] as f64).max(0.0)).collect();
        let tol_r: Vec<f64> = tol_b.iter().enumerate().map(|(i, &t)| t + 2.0 * U * (want[i].abs() + bias[(i / p) % m].abs() as f64 + res[i].abs() as f64)).collect();
        for (isa, tile) in isas().into_iter().flat_map(|i| [(i, 2), (i, 4)]) {
            for &t in &THREADS {
                let mut out = vec![f32::NAN; want.len()];
                pool(t).install(|| conv2d_winograd_f32_with(isa, tile, &g, 1, m, &x, &w, None, &mut out)).unwrap_or_else(|e| panic!("winograd {name}: {e}"));
                let e = check(&format!("conv {name} by Winograd F({tile}x{tile}) on {isa:?}, {t} threads"), &out, &want, &tol);
                worst.add(&format!("Winograd F({tile}x{tile}) {isa:?}"), e);
                for i in 0..want.len() {
                    ratio[tile] = ratio[tile].max((out[i] as f64 - want[i]).abs() / (2.0 * k * U * mag[i]));
                }
                let mut out = vec![f32::NAN; want.len()];
                pool(t)
                    .install(|| conv2d_winograd_f32_with(isa, tile, &g, 1, m, &x, &w, Some(ConvEpilogue::bias_act(&bias, Act::Relu)), &mut out))
                    .unwrap_or_else(|e| panic!("winograd {name} + bias: {e}"));
                check(&format!("conv {name} + bias, relu, by Winograd F({tile}x{tile}) on {isa:?}, {t} threads"), &out, &want_b, &tol_b);
                let mut out = vec![f32::NAN; want.len()];
                let ep = ConvEpilogue { bias: &bias, act: Act::Relu, residual: Some(&res) };
                pool(t).install(|| conv2d_winograd_f32_with(isa, tile, &g, 1, m, &x, &w, Some(ep), &mut out)).unwrap_or_else(|e| panic!("winograd {name} + residual: {e}"));
                check(&format!("conv {name} + bias + residual, relu, by Winograd F({tile}x{tile}) on {isa:?}, {t} threads"), &out, &want_r, &tol_r);
            }
        }
    }
    worst.print("conv2d (Winograd)");
    println!("conv2d (Winograd): worst error / direct bound: F(2x2) {:.3}, F(4x4) {:.3} (allowed {WINOGRAD_FACTOR})", ratio[2], ratio[4]);
    // Where it does not apply, it says so.
    let g = win(1, 16, [32, 32], [3, 3], [2, 2], [1, 1], [1, 1], [1, 1]);
    let mut out = vec![0f32; 16 * 16 * 16];
    assert!(!winograd_applies(&g, 1, 16));
    is_err(conv2d_winograd_f32_with(Isa::Scalar, 2, &g, 1, 16, &vec![0.0; 16 * 1024], &vec![0.0; 16 * 16 * 9], None, &mut out), "Winograd on stride 2");
    let g = win(1, 16, [8, 8], [3, 3], [1, 1], [1, 1], [1, 1], [1, 1]);
    let mut out = vec![0f32; 16 * 64];
    is_err(conv2d_winograd_f32_with(Isa::Scalar, 3, &g, 1, 16, &vec![0.0; 16 * 64], &vec![0.0; 16 * 16 * 9], None, &mut out), "Winograd F(3x3)");
}

#[test]
fn im2col_matches_reference() {
    let mut geoms: Vec<(&str, Window2d)> = conv_cases().into_iter().map(|(n, g, _, _)| (n, g)).collect();
    geoms.extend(pool_cases());
    for (case, (name, g)) in geoms.into_iter().enumerate() {
        let mut r = case_rng(&format!("im2col {name}"), 1000 + case as u64);
        let [oh, ow] = out_hw(&g);
        let x = uniform(&mut r, g.n * g.c * g.in_hw[0] * g.in_hw[1], -1.0, 1.0);
        let want = im2col_ref(&g, &x);
        assert_eq!(want.len(), g.n * g.c * g.size[0] * g.size[1] * oh * ow);
        for &t in &THREADS {
            let mut out = vec![f32::NAN; want.len()];
            pool(t).install(|| im2col_f32(&g, &x, &mut out)).unwrap_or_else(|e| panic!("im2col {name}: {e}"));
            if let Some(i) = (0..want.len()).find(|&i| out[i].to_bits() != want[i].to_bits()) {
                panic!("im2col {name}, {t} threads: element {i}: got {}, want {} (exact)", out[i], want[i]);
            }
        }
    }
}

#[test]
fn pool2d_matches_reference() {
    let mut worst = Worst::default();
    for (case, (name, g)) in pool_cases().into_iter().enumerate() {
        let mut r = case_rng(&format!("pool {name}"), 2000 + case as u64);
        let x = uniform(&mut r, g.n * g.c * g.in_hw[0] * g.in_hw[1], -2.0, 2.0);
        for kind in KINDS {
            let refs = pool_ref(&g, kind, &x);
            let want: Vec<f64> = refs.iter().map(|r| r.0).collect();
            // Max: exact. Averages: an f32 sum of ≤ t taps and one division (or a product
            // with the rounded 1/taps): 2·(t + 2)·u·Σ|x| / divisor, t ≤ taps.
            let taps = (g.size[0] * g.size[1]) as f64;
            let tol: Vec<f64> = refs.iter().map(|&(_, mag, d)| if kind == Pool::Max { 0.0 } else { 2.0 * (taps + 2.0) * U * mag / d }).collect();
            for isa in isas() {
                for &t in &THREADS {
                    let mut out = vec![f32::NAN; want.len()];
                    pool(t).install(|| pool2d_f32_with(isa, &g, kind, &x, &mut out)).unwrap_or_else(|e| panic!("pool {kind:?} {name}: {e}"));
                    let e = check(&format!("pool {kind:?} {name} on {isa:?}, {t} threads"), &out, &want, &tol);
                    worst.add(&format!("{kind:?} {isa:?}"), e);
                }
            }
            let mut out = vec![f32::NAN; want.len()];
            pool2d_f32(&g, kind, &x, &mut out).unwrap_or_else(|e| panic!("pool {kind:?} {name}: {e}"));
            check(&format!("pool {kind:?} {name} (default ISA)"), &out, &want, &tol);
        }
    }
    worst.print("pool2d");
}

/// The fully padded windows of the padding cases give exactly what the definitions say:
/// conv 0, max −∞, averages 0 (checked above too; here stated directly).
#[test]
fn windows_entirely_in_padding() {
    let g = win(1, 1, [2, 3], [2, 2], [1, 1], [1, 1], [3, 3], [3, 3]);
    let [oh, ow] = out_hw(&g);
    assert_eq!([oh, ow], [7, 8]);
    let x = [1.0f32, -2.0, 3.0, 4.0, 5.0, -6.0];
    for isa in isas() {
        let mut out = vec![f32::NAN; oh * ow];
        conv2d_f32_with(isa, &g, 1, 1, &x, &[1.0; 4], &mut out).unwrap();
        assert_eq!(out[0], 0.0);
        assert_eq!(out[oh * ow - 1], 0.0);
        // Output (3, 3) sees input (0..2, 0..2): 1 − 2 + 4 + 5.
        assert_eq!(out[3 * ow + 3], 8.0);
        for (kind, corner) in [(Pool::Max, f32::NEG_INFINITY), (Pool::Avg, 0.0), (Pool::AvgPadded, 0.0)] {
            let mut out = vec![f32::NAN; oh * ow];
            pool2d_f32_with(isa, &g, kind, &x, &mut out).unwrap();
            assert_eq!(out[0], corner, "{kind:?} on {isa:?}");
            assert_eq!(out[oh * ow - 1], corner, "{kind:?} on {isa:?}");
            // Output (2, 2) sees only input (0, 0) = 1.
            let want = if kind == Pool::AvgPadded { 0.25 } else { 1.0 };
            assert_eq!(out[2 * ow + 2], want, "{kind:?} on {isa:?}");
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Argument validation: errors, never panics, nothing written.

fn is_err<T: std::fmt::Debug>(r: Result<T, KernelError>, what: &str) {
    match r {
        Err(e) => eprintln!("{what}: {e}"),
        Ok(v) => panic!("{what}: expected an error, got Ok({v:?})"),
    }
}

#[test]
fn window_kernels_reject_bad_arguments() {
    let v = |n: usize| vec![1.0f32; n];
    let o = |n: usize| vec![f32::NAN; n];
    // x [2, 4, 5, 7], w [6, 2, 3, 3] (groups 2), out [2, 6, 3, 5].
    let g = win(2, 4, [5, 7], [3, 3], [1, 1], [1, 1], [0, 0], [0, 0]);
    let (nx, nw, no) = (2 * 4 * 5 * 7, 6 * 2 * 9, 2 * 6 * 3 * 5);
    // Pooling and im2col outputs: [2, 4, 3, 5] and [2, 36, 15].
    let (np, ni) = (2 * 4 * 3 * 5, 2 * 36 * 15);
    let isas = isas();
    // An ISA this machine lacks is an error too.
    if !isas.contains(&Isa::Avx512) {
        is_err(conv2d_f32_with(Isa::Avx512, &g, 2, 6, &v(nx), &v(nw), &mut o(no)), "conv on a missing ISA");
        is_err(pool2d_f32_with(Isa::Avx512, &g, Pool::Max, &v(nx), &mut o(np)), "pool on a missing ISA");
    }
    for isa in isas {
        conv2d_f32_with(isa, &g, 2, 6, &v(nx), &v(nw), &mut o(no)).expect("the valid conv");
        conv2d_gemm_f32(&g, 2, 6, &v(nx), &v(nw), &mut o(no)).expect("the valid conv (im2col + matmul)");
        pool2d_f32_with(isa, &g, Pool::Avg, &v(nx), &mut o(np)).expect("the valid pool");
        let conv = |g: &Window2d, groups: usize, m: usize, x: usize, w: usize, out: usize, what: &str| {
            let mut out = o(out);
            is_err(conv2d_f32_with(isa, g, groups, m, &v(x), &v(w), &mut out), &format!("conv {what} on {isa:?}"));
            assert!(out.iter().all(|y| y.is_nan()), "conv {what}: wrote on error");
            is_err(conv2d_gemm_f32(g, groups, m, &v(x), &v(w), &mut out), &format!("conv (im2col + matmul) {what}"));
            assert!(out.iter().all(|y| y.is_nan()), "conv (im2col + matmul) {what}: wrote on error");
        };
        conv(&g, 2, 6, nx - 1, nw, no, "x short");
        conv(&g, 2, 6, nx + 1, nw, no, "x long");
        conv(&g, 2, 6, nx, nw - 1, no, "weights short");
        conv(&g, 2, 6, nx, nw + 9, no, "weights long");
        conv(&g, 2, 6, nx, nw, no - 1, "out short");
        conv(&g, 2, 6, nx, nw, no + 1, "out long");
        conv(&g, 0, 6, nx, nw, no, "groups 0");
        conv(&g, 3, 6, nx, 6 * 9, no, "groups not dividing c");
        conv(&g, 4, 6, nx, 6 * 9, no, "groups not dividing m");
        let long = Window2d { size: [3, 8], ..g };
        conv(&long, 1, 6, nx, 6 * 4 * 24, 0, "window longer than the input");
        let dilated = Window2d { dilation: [1, 4], ..g };
        conv(&dilated, 1, 6, nx, 6 * 4 * 9, 0, "dilated window longer than the input");
        let padded = Window2d { size: [3, 10], pad_begin: [0, 1], pad_end: [0, 1], ..g };
        conv(&padded, 1, 6, nx, 6 * 4 * 30, 0, "window longer than the padded input");
        for bad in [Window2d { size: [0, 3], ..g }, Window2d { stride: [1, 0], ..g }, Window2d { dilation: [0, 1], ..g }] {
            conv(&bad, 2, 6, nx, nw, no, "size, stride or dilation 0");
        }
        // Padded lengths, extents and tap counts that overflow usize. Each is chosen so
        // that the wrapped arithmetic gives back the valid geometry's buffer lengths (padded
        // width 7 + MAX + 1 ≡ 7, extent 2·(MAX/2 + 2) + 1 ≡ 3, taps 2³²·2³² ≡ 0): only the
        // overflow check can reject them (the taps case read far outside the weights).
        let huge = Window2d { pad_begin: [0, usize::MAX], pad_end: [0, 1], ..g };
        conv(&huge, 2, 6, nx, nw, no, "padding overflowing usize");
        let huge = Window2d { dilation: [1, usize::MAX / 2 + 2], ..g };
        conv(&huge, 2, 6, nx, nw, no, "dilation overflowing usize");
        let t32 = 1usize << 32;
        let huge = Window2d { size: [t32, t32], pad_begin: [t32 - 5, t32 - 7], ..g };
        conv(&huge, 2, 6, nx, 0, 2 * 6, "taps overflowing usize");
        let huge = Window2d { n: usize::MAX / 2, ..g };
        conv(&huge, 2, 6, nx, nw, no, "batch overflowing usize");

        let pool = |g: &Window2d, x: usize, out: usize, what: &str| {
            for kind in KINDS {
                let mut out = o(out);
                is_err(pool2d_f32_with(isa, g, kind, &v(x), &mut out), &format!("pool {kind:?} {what} on {isa:?}"));
                assert!(out.iter().all(|y| y.is_nan()), "pool {what}: wrote on error");
            }
        };
        pool(&g, nx - 1, np, "x short");
        pool(&g, nx, np + 1, "out long");
        pool(&g, nx, np - 1, "out short");
        pool(&long, nx, 0, "window longer than the input");
        pool(&padded, nx, 0, "window longer than the padded input");
        pool(&Window2d { stride: [0, 1], ..g }, nx, np, "stride 0");
        pool(&Window2d { pad_begin: [usize::MAX, 0], pad_end: [1, 0], ..g }, nx, np, "padding overflowing usize");
        pool(&Window2d { size: [t32, t32], pad_begin: [t32 - 5, t32 - 7], ..g }, nx, 2 * 4, "taps overflowing usize");
    }
    let im2col = |g: &Window2d, x: usize, out: usize, what: &str| {
        let mut out = o(out);
        is_err(im2col_f32(g, &v(x), &mut out), &format!("im2col {what}"));
        assert!(out.iter().all(|y| y.is_nan()), "im2col {what}: wrote on error");
    };
    im2col_f32(&g, &v(nx), &mut o(ni)).expect("the valid im2col");
    im2col(&g, nx - 1, ni, "x short");
    im2col(&g, nx, ni - 1, "out short");
    im2col(&g, nx, ni + 1, "out long");
    im2col(&Window2d { size: [6, 3], ..g }, nx, 0, "window longer than the input");
    im2col(&Window2d { dilation: [1, 0], ..g }, nx, ni, "dilation 0");
    im2col(&Window2d { pad_begin: [usize::MAX, 0], pad_end: [1, 0], ..g }, nx, ni, "padding overflowing usize");
    let t32 = 1usize << 32;
    im2col(&Window2d { size: [t32, t32], pad_begin: [t32 - 5, t32 - 7], ..g }, nx, 0, "taps overflowing usize");
}

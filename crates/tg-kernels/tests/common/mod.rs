//! Shared helpers for the kernel tests: seeded inputs, f64 references, error metrics.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_kernels::Isa;

/// The ISAs this machine can run (the tests cover each one explicitly).
pub fn isas() -> Vec<Isa> {
    let v = Isa::available();
    eprintln!("testing ISAs {v:?} ({})", tg_kernels::cpu_features());
    v
}

/// A seeded RNG; the seed is printed so a failure can be replayed.
pub fn rng(test: &str, seed: u64) -> ChaCha8Rng {
    eprintln!("{test}: seed {seed}");
    ChaCha8Rng::seed_from_u64(seed)
}

/// `n` values uniform in `[lo, hi)`.
pub fn uniform(rng: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| rng.gen_range(lo..hi)).collect()
}

/// Normalized mean squared error `Σ(y−r)² / Σr²` (∞ if `y` has a NaN; 0/0 → 0).
pub fn nmse(y: &[f32], r: &[f64]) -> f64 {
    assert_eq!(y.len(), r.len());
    let mut num = 0.0;
    let mut den = 0.0;
    for (&a, &b) in y.iter().zip(r) {
        if !a.is_finite() {
            return f64::INFINITY;
        }
        num += (a as f64 - b) * (a as f64 - b);
        den += b * b;
    }
    if den == 0.0 {
        if num == 0.0 {
            0.0
        } else {
            f64::INFINITY
        }
    } else {
        num / den
    }
}

/// `c = a · bᵀ` in f64: `a` is `m × k`, `b` is `n × k`, both row-major.
pub fn matmul_abt_f64(a: &[f32], b: &[f32], m: usize, n: usize, k: usize) -> (Vec<f64>, Vec<f64>) {
    let mut c = vec![0.0; m * n];
    let mut mag = vec![0.0; m * n];
    for i in 0..m {
        for j in 0..n {
            let (mut s, mut t) = (0.0f64, 0.0f64);
            for q in 0..k {
                let p = a[i * k + q] as f64 * b[j * k + q] as f64;
                s += p;
                t += p.abs();
            }
            c[i * n + j] = s;
            mag[i * n + j] = t;
        }
    }
    (c, mag)
}

/// Worst-case bound on an f32 dot product of length `k` accumulated the way the kernels do
/// (`lanes`-wide vectors, two accumulators, tree reduction), relative to `Σ|x·w|`:
/// every term passes through at most `k / lanes` sequential additions plus the final tree
/// and a possible rounding of each product (`γ_n ≈ n·ε`). Generous by a factor 2.
pub fn dot_bound(k: usize) -> f64 {
    let eps = f32::EPSILON as f64 / 2.0;
    2.0 * eps * ((k as f64 / 8.0).ceil() + 12.0)
}

/// Checks `y` against `(reference, Σ|terms|)` elementwise with `dot_bound(k)` and returns NMSE.
pub fn check_dot(what: &str, y: &[f32], refs: &(Vec<f64>, Vec<f64>), k: usize) -> f64 {
    let bound = dot_bound(k);
    for (i, (&v, (&r, &mag))) in y.iter().zip(refs.0.iter().zip(&refs.1)).enumerate() {
        let err = (v as f64 - r).abs();
        assert!(
            err <= bound * mag + 1e-30,
            "{what}: element {i}: got {v}, reference {r}, |err| {err:e} > {bound:e} · Σ|terms| {mag:e}"
        );
    }
    nmse(y, &refs.0)
}

/// A rayon pool with `n` threads.
pub fn pool(n: usize) -> rayon::ThreadPool {
    rayon::ThreadPoolBuilder::new().num_threads(n).build().expect("thread pool")
}

//! What `bench_attention` and `bench_conv` share: seeded inputs and the timing rule.

use std::time::Instant;

/// `n` values in [-1, 1) from an xorshift generator seeded by `seed`.
pub fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0
        })
        .collect()
}

/// Best ms per call over five trials of at least `trial_s` seconds (and 3 calls) each,
/// after one untimed call.
pub fn best_ms(trial_s: f64, f: &mut dyn FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut n = 0u32;
        while t0.elapsed().as_secs_f64() < trial_s || n < 3 {
            f();
            n += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e3 / n as f64);
    }
    best
}

/// The value of `NAME=N` (`name` includes the `--` and the `=`) on the command line.
pub fn arg(name: &str) -> Option<usize> {
    std::env::args().find_map(|a| a.strip_prefix(name).and_then(|n| n.parse().ok()))
}

/// The first argument not starting with `--`: a filter on case names (empty when absent).
pub fn filter() -> String {
    std::env::args().skip(1).find(|a| !a.starts_with("--")).unwrap_or_default()
}

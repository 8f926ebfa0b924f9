//! Attention at the shapes of the terrain UNet's self-attention (no mask, head dimension 32,
//! 1024 tokens, two images as two kv heads) and of a causal LLM prefill, single-threaded
//! unless `--threads=N`: ms per call and GFLOP/s (4·sq·sk·hd per head).
//!
//! `cargo run -p tg-kernels --release --example bench_attention [-- --threads=N] [FILTER]`
//! (`FILTER` keeps the cases whose name contains it)
//! (`TG_ISA=avx2|scalar` selects another instruction set).

use std::time::Instant;

use tg_kernels::{attention_layout_with, attention_row_mask_with, isa, AttnLayout};

fn values(n: usize, seed: u64) -> Vec<f32> {
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

/// Best ms per call over five trials of at least 0.2 s.
fn best_ms(f: &mut dyn FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut n = 0u32;
        while t0.elapsed().as_secs_f64() < 0.2 || n < 3 {
            f();
            n += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e3 / n as f64);
    }
    best
}

fn main() {
    let threads = std::env::args().find_map(|a| a.strip_prefix("--threads=").and_then(|n| n.parse().ok())).unwrap_or(1);
    let filter = std::env::args().skip(1).find(|a| !a.starts_with("--")).unwrap_or_default();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    println!("isa {:?}, {threads} thread(s)", isa());
    println!("| case | ms | GFLOP/s |\n|---|---:|---:|");
    for (name, n_kv, group, sq, sk, hd, causal) in [
        ("terrain: 2 × 1024 tokens, hd 32, no mask", 2, 1, 1024, 1024, 32, false),
        ("terrain 16×16: 2 × 256 tokens, hd 32, no mask", 2, 1, 256, 256, 32, false),
        ("LLM prefill: 4 heads / 1 kv, 512 tokens, hd 256, causal", 1, 4, 512, 512, 256, true),
    ] {
        if !name.contains(&filter) {
            continue;
        }
        let q = values(n_kv * group * sq * hd, 1);
        let (k, v) = (values(n_kv * sk * hd, 2), values(n_kv * sk * hd, 3));
        let scale = 1.0 / (hd as f32).sqrt();
        let mut out = vec![0.0f32; q.len()];
        let ms = pool.install(|| {
            if causal {
                let mask: Vec<f32> = (0..sq * sk).map(|x| if x % sk > x / sk { f32::NEG_INFINITY } else { 0.0 }).collect();
                best_ms(&mut || attention_layout_with(isa(), AttnLayout::HeadMajor, &q, &k, &v, &mask, n_kv, group, sq, sk, hd, scale, &mut out).expect("attention"))
            } else {
                let row = vec![0.0f32; sk];
                best_ms(&mut || attention_row_mask_with(isa(), AttnLayout::HeadMajor, &q, &k, &v, &row, n_kv, group, sq, sk, hd, scale, &mut out).expect("attention"))
            }
        });
        let flop = 4.0 * (n_kv * group * sq * sk * hd) as f64 / if causal { 2.0 } else { 1.0 };
        println!("| {name} | {ms:.3} | {:.1} |", flop / ms / 1e6);
    }
}

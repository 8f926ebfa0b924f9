//! Attention at the shapes of the terrain UNet's self-attention (no mask, head dimension 32,
//! 1024 tokens, two images as two kv heads) and of a causal LLM prefill, single-threaded
//! unless `--threads=N`: ms per call and GFLOP/s (4·sq·sk·hd per head).
//!
//! `cargo run -p tg-kernels --release --example bench_attention [-- --threads=N] [FILTER]`
//! (`FILTER` keeps the cases whose name contains it)
//! (`TG_ISA=avx2|scalar` selects another instruction set).

mod common;

use common::{arg, best_ms, filter, values};
use tg_kernels::{attention_layout_with, attention_row_mask_with, isa, AttnLayout};

fn main() {
    let threads = arg("--threads=").unwrap_or(1);
    let filter = filter();
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
                best_ms(0.2, &mut || attention_layout_with(isa(), AttnLayout::HeadMajor, &q, &k, &v, &mask, n_kv, group, sq, sk, hd, scale, &mut out).expect("attention"))
            } else {
                let row = vec![0.0f32; sk];
                best_ms(0.2, &mut || attention_row_mask_with(isa(), AttnLayout::HeadMajor, &q, &k, &v, &row, n_kv, group, sq, sk, hd, scale, &mut out).expect("attention"))
            }
        });
        let flop = 4.0 * (n_kv * group * sq * sk * hd) as f64 / if causal { 2.0 } else { 1.0 };
        println!("| {name} | {ms:.3} | {:.1} |", flop / ms / 1e6);
    }
}

//! Convolutions at the terrain UNet's shapes (NCHW f32, bias, no activation), single-threaded
//! unless `--threads=N`: ms per call and GFLOP/s of the direct convolution's work
//! (`2·m·c·kh·kw·oh·ow` per image), by the implicit GEMM and, for the 3×3 windows, by Winograd
//! F(2×2, 3×3) and F(4×4, 3×3); the last column is what `conv2d_bias_act_f32` takes, and its time.
//!
//! `cargo run -p tg-kernels --release --example bench_conv [-- --threads=N] [--batch=N] [FILTER]`
//! (`FILTER` keeps the shapes whose name contains it; `TG_ISA=avx2|scalar` selects another
//! instruction set).

mod common;

use common::{arg, best_ms, filter, values};
use tg_kernels::{conv2d_bias_act_f32, conv2d_implicit_f32_with, ConvEpilogue, conv2d_winograd_f32_with, isa, winograd_tile, Act, Window2d};

fn main() {
    let threads = arg("--threads=").unwrap_or(1);
    let batch = arg("--batch=").unwrap_or(1);
    let filter = filter();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool");
    println!("isa {:?}, {threads} thread(s), batch {batch}", isa());
    println!("| shape | implicit GEMM ms | GFLOP/s | F(2×2) ms | GFLOP/s | F(4×4) ms | GFLOP/s | chosen |\n|---|---:|---:|---:|---:|---:|---:|---|");
    // (c, side, m, window)
    for (c, side, m, kk) in [
        (32, 128, 32, 3),
        (64, 128, 32, 3),
        (64, 128, 32, 1),
        (32, 64, 32, 3),
        (64, 32, 64, 3),
        (64, 32, 192, 1),
        (96, 16, 96, 3),
        (192, 16, 96, 3),
        (96, 16, 288, 1),
        (128, 8, 128, 3),
        (256, 8, 128, 3),
        (128, 8, 384, 1),
        (32, 128, 1, 3),
    ] {
        let name = format!("{c}→{m} {kk}×{kk} on {side}×{side}");
        if !name.contains(&filter) {
            continue;
        }
        let pad = kk / 2;
        let g = Window2d { n: batch, c, in_hw: [side, side], size: [kk, kk], stride: [1, 1], dilation: [1, 1], pad_begin: [pad, pad], pad_end: [pad, pad] };
        let x = values(batch * c * side * side, 1);
        let w = values(m * c * kk * kk, 2);
        let b = values(m, 3);
        let mut out = vec![0.0f32; batch * m * side * side];
        let flop = 2.0 * (batch * m * c * kk * kk * side * side) as f64;
        let ep = Some(ConvEpilogue::bias_act(&b, Act::None));
        let gemm = pool.install(|| best_ms(0.1, &mut || conv2d_implicit_f32_with(isa(), &g, 1, m, &x, &w, ep, &mut out).expect("conv")));
        let mut cells = String::new();
        for tile in [2, 4] {
            if kk == 3 && m >= 16 {
                let ms = pool.install(|| best_ms(0.1, &mut || conv2d_winograd_f32_with(isa(), tile, &g, 1, m, &x, &w, ep, &mut out).expect("conv")));
                cells += &format!(" {ms:.3} | {:.1} |", flop / ms / 1e6);
            } else {
                cells += " — | — |";
            }
        }
        let chosen = winograd_tile(&g, 1, m).map_or(if m < 4 { "direct" } else { "implicit GEMM" }.to_string(), |t| format!("F({t}×{t})"));
        // What `conv2d_bias_act_f32` takes (the direct kernel for a few output channels).
        let auto = pool.install(|| best_ms(0.1, &mut || conv2d_bias_act_f32(&g, 1, m, &x, &w, &b, Act::None, &mut out).expect("conv")));
        println!("| {name} | {gemm:.3} | {:.1} |{cells} {chosen} ({auto:.3} ms) |", flop / gemm / 1e6);
    }
}

//! f32-activation `matmul_qt` vs ggml-style int8-activation `matmul_qt_q8` on Gemma-3-270M's
//! weight shapes.
//!
//! `cargo run -p tg-kernels --release --example bench_q8 [-- --all-isas] [--quick] [--m 1,32,128] [--threads 1,2] [--only TYPE]`
//!
//! Prints the best wall time per call over a few trials, GFLOP/s (`2·m·n·k / t`) and GB/s
//! (weight bytes / t; the weights are "hot": one matrix, repeated, so it stays in cache when it
//! fits). `matmul_qt_q8` includes quantizing the activations; "ggml" is `Q8Order::Ggml`
//! (llama.cpp's summation order), "q8" the default `Q8Order::Fast`. Threads come from a rayon
//! pool of the given size.

use std::time::Instant;

use tg_kernels::{matmul_qt_q8_ordered, matmul_qt_with, GgmlType, Isa, Q8Order};

struct Shape {
    name: &'static str,
    ty: GgmlType,
    n: usize,
    k: usize,
}

const SHAPES: [Shape; 4] = [
    Shape { name: "ffn_gate/up", ty: GgmlType::Q5_0, n: 2048, k: 640 },
    Shape { name: "ffn_down", ty: GgmlType::Q6_K, n: 640, k: 2048 },
    Shape { name: "attn_output", ty: GgmlType::Q4_K, n: 640, k: 1024 },
    Shape { name: "lm_head", ty: GgmlType::Q8_0, n: 262_144, k: 640 },
];

/// Best wall time per call over five trials of at least `min_s` seconds (and two calls) each.
fn time_per_call(min_s: f64, mut f: impl FnMut()) -> f64 {
    f();
    let mut best = f64::INFINITY;
    for _ in 0..5 {
        let t0 = Instant::now();
        let mut iters = 0;
        while t0.elapsed().as_secs_f64() < min_s || iters < 2 {
            f();
            iters += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() / iters as f64);
    }
    best
}

fn list_arg(args: &[String], name: &str, default: &[usize]) -> Vec<usize> {
    match args.iter().position(|a| a == name).and_then(|i| args.get(i + 1)) {
        Some(v) => v.split(',').filter_map(|s| s.trim().parse().ok()).collect(),
        None => default.to_vec(),
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let all = args.iter().any(|a| a == "--all-isas");
    let min_s = if args.iter().any(|a| a == "--quick") { 0.05 } else { 0.2 };
    let ms = list_arg(&args, "--m", &[1, 32, 128]);
    let threads = list_arg(&args, "--threads", &[1, 2]);
    let only = args.iter().position(|a| a == "--only").and_then(|i| args.get(i + 1)).cloned();
    let isas = if all { Isa::available() } else { vec![tg_kernels::isa()] };
    println!("{}", tg_kernels::cpu_features());
    println!(
        "{:<7} {:<12} {:<5} {:>4} {:>3} | {:>9} {:>7} {:>6} | {:>9} {:>7} {:>6} {:>6} | {:>9} {:>6}",
        "isa",
        "shape",
        "type",
        "m",
        "thr",
        "f32 us",
        "GFLOP/s",
        "GB/s",
        "q8 us",
        "GFLOP/s",
        "GB/s",
        "vs f32",
        "ggml us",
        "vs f32"
    );
    for sh in SHAPES.iter().filter(|s| only.as_deref().is_none_or(|o| o.eq_ignore_ascii_case(s.ty.name()))) {
        let row_bytes = sh.ty.row_bytes(sh.k).expect("shape is whole blocks");
        let w = tg_quant::random_blocks(sh.ty, sh.n * sh.k, 7);
        for &m in &ms {
            let x: Vec<f32> = (0..m * sh.k).map(|i| ((i * 7919 % 1000) as f32 / 500.0 - 1.0) * 0.7).collect();
            let mut y = vec![0.0f32; m * sh.n];
            let flop = 2.0 * (m * sh.n * sh.k) as f64;
            let bytes = (sh.n * row_bytes) as f64;
            for &isa in &isas {
                for &t in &threads {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(t).build().expect("rayon pool");
                    let tf = pool.install(|| {
                        time_per_call(min_s, || {
                            matmul_qt_with(isa, &x, m, sh.k, &w, sh.ty, sh.n, &mut y).expect("matmul_qt")
                        })
                    });
                    let mut q8 = |order: Q8Order| {
                        pool.install(|| {
                            time_per_call(min_s, || {
                                matmul_qt_q8_ordered(isa, order, &x, m, sh.k, &w, sh.ty, sh.n, &mut y)
                                    .expect("matmul_qt_q8")
                            })
                        })
                    };
                    let (tq, tg) = (q8(Q8Order::Fast), q8(Q8Order::Ggml));
                    println!(
                        "{:<7} {:<12} {:<5} {:>4} {:>3} | {:>9.1} {:>7.1} {:>6.2} | {:>9.1} {:>7.1} {:>6.2} {:>5.2}x | {:>9.1} {:>5.2}x",
                        isa.name(),
                        sh.name,
                        sh.ty.name(),
                        m,
                        t,
                        tf * 1e6,
                        flop / tf * 1e-9,
                        bytes / tf * 1e-9,
                        tq * 1e6,
                        flop / tq * 1e-9,
                        bytes / tq * 1e-9,
                        tf / tq,
                        tg * 1e6,
                        tf / tg
                    );
                }
            }
        }
    }
}

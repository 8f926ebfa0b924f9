//! Throughput of the quantized matmul on Gemma-3-270M's weight shapes.
//!
//! `cargo run -p tg-kernels --release --example bench_kernels [-- --all-isas] [--quick]`
//!
//! For each shape, `m` and thread count it prints the time per call, the weight-streaming rate
//! (GB/s of weight bytes read per call) and GFLOP/s (`2·m·n·k`). "hot" repeats one weight matrix
//! (it stays in L2/L3 when small); "cold" cycles through enough copies (> 96 MiB) that every call
//! streams its weights from DRAM, as in real decoding where all layers' weights exceed the L3.
//! Select the path with `TG_ISA=scalar|avx2|avx512` or `--all-isas`.

use std::time::Instant;

use tg_kernels::{matmul_qt_with, GgmlType, Isa};

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
    Shape { name: "token_embd (lm head)", ty: GgmlType::Q8_0, n: 262_144, k: 640 },
];

#[repr(C)]
struct Timespec {
    sec: i64,
    nsec: i64,
}

extern "C" {
    fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32;
}

/// CPU time consumed by the whole process (all threads), in seconds.
fn process_cpu_s() -> f64 {
    const CLOCK_PROCESS_CPUTIME_ID: i32 = 2;
    let mut ts = Timespec { sec: 0, nsec: 0 };
    // SAFETY: valid out-pointer; Linux/glibc clock id.
    unsafe { clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    ts.sec as f64 + ts.nsec as f64 * 1e-9
}

/// Best (wall, cpu) time per call over a few trials of ≥ `min_s` seconds each. On a busy
/// machine the CPU time per thread is the better estimate of what the kernel can do.
fn time_per_call(min_s: f64, threads: usize, mut f: impl FnMut(usize)) -> (f64, f64) {
    f(0);
    let (mut best, mut best_cpu) = (f64::INFINITY, f64::INFINITY);
    let mut call = 1;
    for _ in 0..5 {
        let (t0, c0) = (Instant::now(), process_cpu_s());
        let mut iters = 0;
        while t0.elapsed().as_secs_f64() < min_s || iters < 2 {
            f(call);
            call += 1;
            iters += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() / iters as f64);
        best_cpu = best_cpu.min((process_cpu_s() - c0) / threads as f64 / iters as f64);
    }
    (best, best_cpu)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let all = args.iter().any(|a| a == "--all-isas");
    let quick = args.iter().any(|a| a == "--quick");
    let min_s = if quick { 0.05 } else { 0.2 };
    let isas = if all { Isa::available() } else { vec![tg_kernels::isa()] };
    println!("{}", tg_kernels::cpu_features());
    println!(
        "{:<7} {:<21} {:<5} {:>4} {:>3} {:>5} {:>10} {:>8} {:>9} | {:>10} {:>8} {:>9}",
        "isa", "shape", "type", "m", "thr", "mode", "us/call", "GB/s", "GFLOP/s", "cpu-us", "cpu-GB/s", "cpuGFLOP"
    );
    println!("(wall clock | per-thread CPU time: rates as if each thread had had its core to itself)");
    // The floor: a plain streaming read (row sums) over 256 MiB of f32, far beyond the L3.
    {
        let big = vec![1.0f32; 64 << 20];
        let mut sums = vec![0.0f32; 64];
        for threads in [1usize, 2] {
            let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
            let (t, tc) = pool.install(|| {
                time_per_call(min_s, threads, |_| {
                    tg_kernels::reduce_rows_f32(tg_kernels::ReduceOp::Sum, &big, 1 << 20, &mut sums).expect("sum")
                })
            });
            let bytes = (big.len() * 4) as f64;
            println!(
                "{:<7} {:<21} {:<5} {:>4} {:>3} {:>5} {:>10.1} {:>8.2} {:>9} | {:>10.1} {:>8.2}",
                tg_kernels::isa().name(),
                "stream read (floor)",
                "F32",
                "-",
                threads,
                "cold",
                t * 1e6,
                bytes / t / 1e9,
                "-",
                tc * 1e6,
                bytes / tc / 1e9
            );
        }
    }
    for &isa in &isas {
        for s in &SHAPES {
            let row_bytes = s.ty.row_bytes(s.k).expect("shape");
            let bytes = s.n * row_bytes;
            let copies = (96usize << 20).div_ceil(bytes).max(1);
            let weights: Vec<Vec<u8>> =
                (0..copies).map(|c| tg_quant::random_blocks(s.ty, s.n * s.k, 1000 + c as u64)).collect();
            let ms: &[usize] = if s.n > 100_000 { &[1, 32] } else { &[1, 32, 128] };
            for &m in ms {
                let x: Vec<f32> = (0..m * s.k).map(|i| ((i * 7919) % 2001) as f32 / 1000.0 - 1.0).collect();
                let mut y = vec![0.0f32; m * s.n];
                for threads in [1usize, 2] {
                    let pool = rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("pool");
                    let modes: &[&str] = if m == 1 && copies > 1 { &["hot", "cold"] } else { &["hot"] };
                    for &mode in modes {
                        let (t, tc) = pool.install(|| {
                            time_per_call(min_s, threads, |call| {
                                let w = if mode == "cold" { &weights[call % copies] } else { &weights[0] };
                                matmul_qt_with(isa, &x, m, s.k, w, s.ty, s.n, &mut y).expect("matmul");
                            })
                        });
                        let flop = 2.0 * (m * s.n * s.k) as f64;
                        println!(
                            "{:<7} {:<21} {:<5} {:>4} {:>3} {:>5} {:>10.1} {:>8.2} {:>9.2} | {:>10.1} {:>8.2} {:>9.2}",
                            isa.name(),
                            s.name,
                            s.ty.name(),
                            m,
                            threads,
                            mode,
                            t * 1e6,
                            bytes as f64 / t / 1e9,
                            flop / t / 1e9,
                            tc * 1e6,
                            bytes as f64 / tc / 1e9,
                            flop / tc / 1e9,
                        );
                    }
                }
            }
        }
    }
}

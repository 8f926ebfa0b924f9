//! Per-element cost of the elementwise, reduction and strided-copy kernels, single-threaded.
//!
//! `cargo run -p tg-kernels --release --example bench_elementwise [-- --quick]`
//!
//! Every kernel runs on 2^18 f32 elements (1 MiB per buffer, so inputs and outputs stay in L2
//! or L3) inside a 1-thread rayon pool, on every ISA this CPU supports. Each cell is the best
//! of five trials of ≥ 50 ms (20 ms with `--quick`): wall-clock ns per element, then process
//! CPU ns per element (the better figure on a busy machine). `copy_strided_f32` has no ISA
//! variants and is shown once.

use std::time::Instant;

use tg_kernels::{
    binary_col_broadcast_with, binary_f32_with, binary_row_broadcast_with, copy_strided_f32, reduce_rows_f32_with,
    unary_f32_with, BinaryOp, Isa, ReduceOp, UnaryOp,
};

/// Elements per call.
const N: usize = 1 << 18;
/// Row length for the broadcast and reduction shapes (`N / ROW` rows).
const ROW: usize = 1024;

const UNARY: [UnaryOp; 11] = [
    UnaryOp::Neg,
    UnaryOp::Abs,
    UnaryOp::Square,
    UnaryOp::Sqrt,
    UnaryOp::Recip,
    UnaryOp::Rsqrt,
    UnaryOp::Exp,
    UnaryOp::Tanh,
    UnaryOp::Log,
    UnaryOp::Sin,
    UnaryOp::Cos,
];
const BINARY: [BinaryOp; 6] = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min];
const REDUCE: [ReduceOp; 3] = [ReduceOp::Sum, ReduceOp::Max, ReduceOp::Mean];

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

/// Best (wall, cpu) ns per element over five trials of ≥ `min_s` seconds.
fn ns_per_elem(min_s: f64, mut f: impl FnMut()) -> (f64, f64) {
    f();
    let (mut best, mut best_cpu) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        let (t0, c0) = (Instant::now(), process_cpu_s());
        let mut iters = 0u32;
        while t0.elapsed().as_secs_f64() < min_s || iters < 3 {
            f();
            iters += 1;
        }
        let per = 1e9 / (iters as f64 * N as f64);
        best = best.min(t0.elapsed().as_secs_f64() * per);
        best_cpu = best_cpu.min((process_cpu_s() - c0) * per);
    }
    (best, best_cpu)
}

/// Deterministic values in `[lo, hi)`.
fn values(n: usize, seed: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|i| lo + (hi - lo) * (((i * 7919 + seed * 104_729) % 10_007) as f32 / 10_007.0)).collect()
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let min_s = if quick { 0.02 } else { 0.05 };
    let isas = Isa::available();
    let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().expect("1-thread pool");

    // Positive inputs keep log/sqrt/rsqrt on their ordinary path; [0.05, 3) spans both tanh
    // branches. Divisors stay away from 0.
    let a = values(N, 1, 0.05, 3.0);
    let b = values(N, 2, 0.5, 2.0);
    let b_row = values(ROW, 3, 0.5, 2.0);
    let b_col = values(N / ROW, 4, 0.5, 2.0);
    let mut out = vec![0.0f32; N];
    let mut red = vec![0.0f32; N / ROW];

    println!("{}", tg_kernels::cpu_features());
    println!("ns/element, {N} elements, 1 thread; each cell: best wall / best process-CPU");
    print!("{:<22}", "kernel");
    for isa in &isas {
        print!(" | {:>17}", isa.name());
    }
    println!();

    let row = |name: String, f: &mut (dyn FnMut(Isa) + Send)| {
        print!("{name:<22}");
        for &isa in &isas {
            let (w, c) = pool.install(|| ns_per_elem(min_s, || f(isa)));
            print!(" | {w:>8.3} {c:>8.3}");
        }
        println!();
    };

    for op in UNARY {
        row(format!("unary {op:?}"), &mut |isa| unary_f32_with(isa, op, &a, &mut out).expect("unary"));
    }
    for op in BINARY {
        row(format!("binary {op:?} same"), &mut |isa| binary_f32_with(isa, op, &a, &b, &mut out).expect("binary"));
        row(format!("binary {op:?} row{ROW}"), &mut |isa| {
            binary_row_broadcast_with(isa, op, &a, &b_row, &mut out).expect("row broadcast")
        });
        row(format!("binary {op:?} col{ROW}"), &mut |isa| {
            binary_col_broadcast_with(isa, op, &a, &b_col, &mut out).expect("col broadcast")
        });
    }
    for op in REDUCE {
        row(format!("reduce {op:?} n{ROW}"), &mut |isa| reduce_rows_f32_with(isa, op, &a, ROW, &mut red).expect("reduce"));
    }

    // Strided copies have no ISA variants: one column.
    let side = 1 << 9; // 512 × 512 = N
    let copies: [(&str, Vec<usize>, Vec<isize>); 3] = [
        ("copy transpose 512²", vec![side, side], vec![1, side as isize]),
        // [4 heads, 256 seq, 256 dim] gathered from [256 seq, 4 heads, 256 dim]: inner runs of 256.
        ("copy permute 4x256x256", vec![4, 256, 256], vec![256, 1024, 1]),
        // A row of 1024 broadcast over 256 rows (stride 0 outer, contiguous inner).
        ("copy bcast row1024", vec![N / ROW, ROW], vec![0, 1]),
    ];
    for (name, shape, strides) in copies {
        print!("{name:<22}");
        let (w, c) = pool.install(|| {
            ns_per_elem(min_s, || copy_strided_f32(&a, &shape, &strides, 0, &mut out).expect("copy"))
        });
        println!(" | {w:>8.3} {c:>8.3}   (no ISA variants)");
    }
}

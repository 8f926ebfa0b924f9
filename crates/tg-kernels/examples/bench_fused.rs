//! Fused kernels against the chains of primitive kernels they replace, at Gemma 3 270M shapes,
//! single-threaded.
//!
//! `cargo run -p tg-kernels --release --example bench_fused [-- --quick] [--threads=N] [FILTER]`
//! (`TG_ISA=avx2|scalar` selects another instruction set; `FILTER` keeps the rows whose name
//! contains it; `--threads` runs both sides in an `N`-thread pool instead of 1.)
//!
//! Shapes: hidden size 640 (rows 5 and 128), FFN 2048, 4 query heads sharing 1 kv head of
//! dimension 256, sequences of 5, 128 and 512 tokens (prefill with a causal mask, and decoding
//! one token against that many keys). Each chain is the sequence of existing `tg-kernels` calls
//! the unfused graph runs (listed per row); broadcast constants (eps, GELU coefficients, the
//! RoPE tables expanded over heads) are materialized once outside the timed loop, which flatters
//! the chains slightly. Each cell is the best of five trials of ≥ 50 ms (20 ms with `--quick`):
//! wall-clock ns per call, then process-CPU ns per call (the better figure on a busy machine).

use std::time::Instant;

use tg_kernels::{
    add_rms_norm, attention, binary_col_broadcast, binary_f32, binary_row_broadcast, copy_strided_f32, gated_gelu_tanh,
    gelu_tanh, matmul_f32, reduce_rows_f32, rms_norm, rms_norm_rope_neox, rope_neox, softmax_rows, unary_f32, BinaryOp,
    MatView, ReduceOp, UnaryOp,
};

const N_EMBD: usize = 640;
const N_FF: usize = 2048;
const HEADS: usize = 4;
const KV: usize = 1;
const HD: usize = 256;
const EPS: f32 = 1e-6;

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

/// Best (wall, cpu) ns per call over five trials of ≥ `min_s` seconds.
fn ns_per_call(min_s: f64, f: &mut dyn FnMut()) -> (f64, f64) {
    f();
    let (mut best, mut best_cpu) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..5 {
        let (t0, c0) = (Instant::now(), process_cpu_s());
        let mut iters = 0u32;
        while t0.elapsed().as_secs_f64() < min_s || iters < 3 {
            f();
            iters += 1;
        }
        best = best.min(t0.elapsed().as_secs_f64() * 1e9 / iters as f64);
        best_cpu = best_cpu.min((process_cpu_s() - c0) * 1e9 / iters as f64);
    }
    (best, best_cpu)
}

/// Deterministic values in `[lo, hi)`.
fn values(n: usize, seed: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|i| lo + (hi - lo) * (((i * 7919 + seed * 104_729) % 10_007) as f32 / 10_007.0)).collect()
}

fn causal(sq: usize, sk: usize, window: Option<usize>) -> Vec<f32> {
    let mut m = vec![0.0f32; sq * sk];
    for i in 0..sq {
        let pos = sk - sq + i;
        for j in 0..sk {
            if j > pos || window.is_some_and(|w| pos - j >= w) {
                m[i * sk + j] = f32::NEG_INFINITY;
            }
        }
    }
    m
}

struct Bench {
    min_s: f64,
    pool: rayon::ThreadPool,
    filter: Option<String>,
}

impl Bench {
    fn time(&self, f: &mut (dyn FnMut() + Send)) -> (f64, f64) {
        self.pool.install(|| ns_per_call(self.min_s, f))
    }

    /// Times `f(true)` (the fused kernel) and `f(false)` (the chain) and prints a table row.
    fn row(&self, name: &str, f: &mut (dyn FnMut(bool) + Send)) {
        if self.filter.as_ref().is_some_and(|s| !name.contains(s.as_str())) {
            return;
        }
        let (fw, fc) = self.time(&mut || f(true));
        let (cw, cc) = self.time(&mut || f(false));
        println!("{name:<40} | {fw:>10.0} {fc:>10.0} | {cw:>10.0} {cc:>10.0} | {:>6.2}x", cc / fc);
    }
}

/// `x · rsqrt(mean(x²) + eps) · w` as six primitive calls (`sq`, `ms`, `inv` are scratch).
#[allow(clippy::too_many_arguments)]
fn rms_chain(
    x: &[f32],
    w: &[f32],
    eps_rows: &[f32],
    sq: &mut [f32],
    ms: &mut [f32],
    inv: &mut [f32],
    y: &mut [f32],
    out: &mut [f32],
) {
    let n = w.len();
    binary_f32(BinaryOp::Mul, x, x, sq).unwrap();
    reduce_rows_f32(ReduceOp::Mean, sq, n, ms).unwrap();
    binary_f32(BinaryOp::Add, ms, eps_rows, inv).unwrap();
    unary_f32(UnaryOp::Rsqrt, inv, ms).unwrap();
    binary_col_broadcast(BinaryOp::Mul, x, ms, y).unwrap();
    binary_row_broadcast(BinaryOp::Mul, y, w, out).unwrap();
}

/// NeoX RoPE as the graph runs it: two half slices, four products with the tables (expanded
/// over heads), a subtraction, an addition and a concat (one strided copy of both halves).
struct RopeChain {
    rows: usize,
    h: usize,
    cos_x: Vec<f32>,
    sin_x: Vec<f32>,
    x1: Vec<f32>,
    x2: Vec<f32>,
    t1: Vec<f32>,
    t2: Vec<f32>,
    /// `[o1; o2]`, concatenated into the output by one strided copy.
    o: Vec<f32>,
}

impl RopeChain {
    fn new(seq: usize, heads: usize, cos: &[f32], sin: &[f32]) -> Self {
        let h = HD / 2;
        let rows = seq * heads;
        let expand = |t: &[f32]| {
            let mut e = vec![0.0f32; rows * h];
            copy_strided_f32(t, &[seq, heads, h], &[h as isize, 0, 1], 0, &mut e).unwrap();
            e
        };
        let z = || vec![0.0f32; rows * h];
        RopeChain {
            rows,
            h,
            cos_x: expand(cos),
            sin_x: expand(sin),
            x1: z(),
            x2: z(),
            t1: z(),
            t2: z(),
            o: vec![0.0; 2 * rows * h],
        }
    }

    fn run(&mut self, x: &[f32], out: &mut [f32]) {
        let (rows, h) = (self.rows, self.h);
        let hd = 2 * h;
        copy_strided_f32(x, &[rows, h], &[hd as isize, 1], 0, &mut self.x1).unwrap();
        copy_strided_f32(x, &[rows, h], &[hd as isize, 1], h, &mut self.x2).unwrap();
        let (o1, o2) = self.o.split_at_mut(rows * h);
        binary_f32(BinaryOp::Mul, &self.x1, &self.cos_x, &mut self.t1).unwrap();
        binary_f32(BinaryOp::Mul, &self.x2, &self.sin_x, &mut self.t2).unwrap();
        binary_f32(BinaryOp::Sub, &self.t1, &self.t2, o1).unwrap();
        binary_f32(BinaryOp::Mul, &self.x2, &self.cos_x, &mut self.t1).unwrap();
        binary_f32(BinaryOp::Mul, &self.x1, &self.sin_x, &mut self.t2).unwrap();
        binary_f32(BinaryOp::Add, &self.t1, &self.t2, o2).unwrap();
        // out[r, half, i] = o[half, r, i]
        copy_strided_f32(&self.o, &[rows, 2, h], &[h as isize, (rows * h) as isize, 1], 0, out).unwrap();
    }
}

fn main() {
    let quick = std::env::args().any(|a| a == "--quick");
    let threads = std::env::args().find_map(|a| a.strip_prefix("--threads=").and_then(|n| n.parse().ok())).unwrap_or(1);
    let b = Bench {
        min_s: if quick { 0.02 } else { 0.05 },
        pool: rayon::ThreadPoolBuilder::new().num_threads(threads).build().expect("thread pool"),
        filter: std::env::args().skip(1).find(|a| !a.starts_with("--")),
    };
    println!("{}", tg_kernels::cpu_features());
    println!("ns per call, {threads} thread(s); each pair: best wall / best process-CPU; gain = chain CPU / fused CPU");
    println!("{:<40} | {:>21} | {:>21} | {:>7}", "kernel (shape)", "fused", "primitive chain", "gain");

    // RMSNorm and add + RMSNorm over the hidden size.
    let w = values(N_EMBD, 9, 0.5, 1.5);
    for rows in [5, 128] {
        let len = rows * N_EMBD;
        let (x, r) = (values(len, 1, -2.0, 2.0), values(len, 2, -2.0, 2.0));
        let eps_rows = vec![EPS; rows];
        let (mut out, mut sum, mut sq, mut y) = (vec![0.0; len], vec![0.0; len], vec![0.0; len], vec![0.0; len]);
        let (mut ms, mut inv) = (vec![0.0; rows], vec![0.0; rows]);
        b.row(&format!("rms_norm [{rows}, {N_EMBD}] (6 ops)"), &mut |fused| match fused {
            true => rms_norm(&x, &w, rows, N_EMBD, EPS, &mut out).unwrap(),
            false => rms_chain(&x, &w, &eps_rows, &mut sq, &mut ms, &mut inv, &mut y, &mut out),
        });
        b.row(&format!("add_rms_norm [{rows}, {N_EMBD}] (7 ops)"), &mut |fused| match fused {
            true => add_rms_norm(&x, &r, &w, rows, N_EMBD, EPS, &mut sum, &mut out).unwrap(),
            false => {
                binary_f32(BinaryOp::Add, &x, &r, &mut sum).unwrap();
                rms_chain(&sum, &w, &eps_rows, &mut sq, &mut ms, &mut inv, &mut y, &mut out)
            }
        });
    }

    // RoPE and q/k-norm + RoPE on q (4 heads) and k (1 head).
    let wn = values(HD, 10, 0.5, 1.5);
    for seq in [5, 128] {
        let h = HD / 2;
        let ang: Vec<f64> =
            (0..seq * h).map(|i| (i / h) as f64 * 10_000f64.powf(-2.0 * (i % h) as f64 / HD as f64)).collect();
        let cos: Vec<f32> = ang.iter().map(|a| a.cos() as f32).collect();
        let sin: Vec<f32> = ang.iter().map(|a| a.sin() as f32).collect();
        for (heads, who) in [(HEADS, "q"), (KV, "k")] {
            let rows = seq * heads;
            let len = rows * HD;
            let x = values(len, 3, -2.0, 2.0);
            let mut out = vec![0.0; len];
            let mut chain = RopeChain::new(seq, heads, &cos, &sin);
            b.row(&format!("rope_neox {who} [{seq}, {heads}, {HD}] (9 ops)"), &mut |fused| match fused {
                true => rope_neox(&x, &cos, &sin, seq, heads, HD, &mut out).unwrap(),
                false => chain.run(&x, &mut out),
            });
            let eps_rows = vec![EPS; rows];
            let (mut sq, mut y, mut normed) = (vec![0.0; len], vec![0.0; len], vec![0.0; len]);
            let (mut ms, mut inv) = (vec![0.0; rows], vec![0.0; rows]);
            b.row(&format!("rms_norm_rope_neox {who} [{seq}, {heads}, {HD}] (15)"), &mut |fused| match fused {
                true => rms_norm_rope_neox(&x, &wn, &cos, &sin, seq, heads, HD, EPS, &mut out).unwrap(),
                false => {
                    rms_chain(&x, &wn, &eps_rows, &mut sq, &mut ms, &mut inv, &mut y, &mut normed);
                    chain.run(&normed, &mut out)
                }
            });
        }
    }

    // GELU-tanh and the gated FFN activation over [rows, n_ff].
    for rows in [5, 128] {
        let len = rows * N_FF;
        let (g, u) = (values(len, 4, -4.0, 4.0), values(len, 5, -2.0, 2.0));
        let k = |c: f32| vec![c; len];
        let (c3, cs, one, half) = (k(0.044715), k((2.0 / std::f32::consts::PI).sqrt()), k(1.0), k(0.5));
        let mut t = [vec![0.0; len], vec![0.0; len], vec![0.0; len]];
        let mut out = vec![0.0; len];
        // x², x³, ·c, +x, ·√(2/π), tanh, +1, x·0.5, ·  (9 ops)
        let gelu_chain = |t: &mut [Vec<f32>; 3], out: &mut [f32]| {
            let [t0, t1, t2] = t;
            binary_f32(BinaryOp::Mul, &g, &g, t0).unwrap();
            binary_f32(BinaryOp::Mul, t0, &g, t1).unwrap();
            binary_f32(BinaryOp::Mul, t1, &c3, t0).unwrap();
            binary_f32(BinaryOp::Add, &g, t0, t1).unwrap();
            binary_f32(BinaryOp::Mul, t1, &cs, t0).unwrap();
            unary_f32(UnaryOp::Tanh, t0, t1).unwrap();
            binary_f32(BinaryOp::Add, t1, &one, t0).unwrap();
            binary_f32(BinaryOp::Mul, &g, &half, t2).unwrap();
            binary_f32(BinaryOp::Mul, t2, t0, out).unwrap();
        };
        b.row(&format!("gelu_tanh [{rows}, {N_FF}] (9 ops)"), &mut |fused| match fused {
            true => gelu_tanh(&g, &mut out).unwrap(),
            false => gelu_chain(&mut t, &mut out),
        });
        let mut act = vec![0.0; len];
        b.row(&format!("gated_gelu_tanh [{rows}, {N_FF}] (10 ops)"), &mut |fused| match fused {
            true => gated_gelu_tanh(&g, &u, &mut out).unwrap(),
            false => {
                gelu_chain(&mut t, &mut act);
                binary_f32(BinaryOp::Mul, &act, &u, &mut out).unwrap()
            }
        });
    }

    // Softmax over attention score rows [heads·seq, seq].
    for seq in [5, 128, 512] {
        let rows = HEADS * seq;
        let x = values(rows * seq, 6, -8.0, 8.0);
        let (mut out, mut e) = (vec![0.0; rows * seq], vec![0.0; rows * seq]);
        let (mut m, mut s) = (vec![0.0; rows], vec![0.0; rows]);
        b.row(&format!("softmax_rows [{rows}, {seq}] (5 ops)"), &mut |fused| match fused {
            true => softmax_rows(&x, rows, seq, &mut out).unwrap(),
            false => {
                reduce_rows_f32(ReduceOp::Max, &x, seq, &mut m).unwrap();
                binary_col_broadcast(BinaryOp::Sub, &x, &m, &mut e).unwrap();
                unary_f32(UnaryOp::Exp, &e, &mut out).unwrap();
                reduce_rows_f32(ReduceOp::Sum, &out, seq, &mut s).unwrap();
                binary_col_broadcast(BinaryOp::Div, &out, &s, &mut e).unwrap();
            }
        });
    }

    // Attention: prefill (sq = sk = seq, causal) and decode (sq = 1, sk = seq).
    let group = HEADS / KV;
    let scale = 1.0 / (HD as f32).sqrt();
    for (sq, sk, window, tag) in [
        (5, 5, None, "prefill causal"),
        (128, 128, None, "prefill causal"),
        (512, 512, None, "prefill causal"),
        (512, 512, Some(128), "prefill window 128"),
        (1, 5, None, "decode"),
        (1, 128, None, "decode"),
        (1, 512, None, "decode"),
    ] {
        let q = values(KV * group * sq * HD, 7, -1.0, 1.0);
        let (k, v) = (values(KV * sk * HD, 8, -1.0, 1.0), values(KV * sk * HD, 11, -1.0, 1.0));
        let mask = causal(sq, sk, window);
        let mut out = vec![0.0; q.len()];
        let scale_q = vec![scale; q.len()];
        let (mut qs, mut s, mut p) =
            (vec![0.0; q.len()], vec![0.0; KV * group * sq * sk], vec![0.0; KV * group * sq * sk]);
        let (mut m, mut l) = (vec![0.0; KV * group * sq], vec![0.0; KV * group * sq]);
        b.row(&format!("attention {tag} sq={sq} sk={sk} (9 ops)"), &mut |fused| {
            if fused {
                attention(&q, &k, &v, &mask, KV, group, sq, sk, HD, scale, &mut out).unwrap();
                return;
            }
            binary_f32(BinaryOp::Mul, &q, &scale_q, &mut qs).unwrap();
            let qv = MatView::row_major(&qs, [KV, group], sq, HD);
            // kᵀ: [hd, sk] per kv head, shared by the group (batch stride 0).
            let kv = MatView {
                data: &k,
                offset: 0,
                rows: HD,
                cols: sk,
                row_stride: 1,
                col_stride: HD,
                batch_strides: [sk * HD, 0],
            };
            matmul_f32([KV, group], &qv, &kv, &mut s).unwrap();
            binary_row_broadcast(BinaryOp::Add, &s, &mask, &mut p).unwrap();
            reduce_rows_f32(ReduceOp::Max, &p, sk, &mut m).unwrap();
            binary_col_broadcast(BinaryOp::Sub, &p, &m, &mut s).unwrap();
            unary_f32(UnaryOp::Exp, &s, &mut p).unwrap();
            reduce_rows_f32(ReduceOp::Sum, &p, sk, &mut l).unwrap();
            binary_col_broadcast(BinaryOp::Div, &p, &l, &mut s).unwrap();
            let pv = MatView::row_major(&s, [KV, group], sq, sk);
            let vv = MatView {
                data: &v,
                offset: 0,
                rows: sk,
                cols: HD,
                row_stride: HD,
                col_stride: 1,
                batch_strides: [sk * HD, 0],
            };
            matmul_f32([KV, group], &pv, &vv, &mut out).unwrap();
        });
        if window.is_some() || (sq > 1 && sk >= 128) {
            // The same problem with −1e30 instead of −∞: identical result, no block skipped.
            let finite: Vec<f32> = mask.iter().map(|&x| if x == f32::NEG_INFINITY { -1e30 } else { x }).collect();
            b.row(&format!("  └ skipping on vs off sq={sq} sk={sk}"), &mut |fused| {
                let m = if fused { &mask } else { &finite };
                attention(&q, &k, &v, m, KV, group, sq, sk, HD, scale, &mut out).unwrap()
            });
        }
    }
}

//! Internal probe: compute-bound matvec rate with weights hot in L2 (CPU-time based).
use std::time::Instant;
use tg_kernels::{matmul_qt_with, GgmlType, Isa};
#[repr(C)]
struct Timespec { sec: i64, nsec: i64 }
extern "C" { fn clock_gettime(clock: i32, ts: *mut Timespec) -> i32; }
fn cpu() -> f64 { let mut ts = Timespec { sec: 0, nsec: 0 }; unsafe { clock_gettime(3, &mut ts) }; ts.sec as f64 + ts.nsec as f64 * 1e-9 }
fn main() {
    let isa = tg_kernels::isa();
    for (ty, k) in [(GgmlType::Q8_0, 640), (GgmlType::Q5_0, 640), (GgmlType::Q4_K, 1024), (GgmlType::Q6_K, 2048), (GgmlType::F32, 640), (GgmlType::F16, 640)] {
        for m in [1usize, 2, 4] {
        let n = 256;
        let w = tg_quant::random_blocks(ty, n * k, 1);
        let x = vec![0.5f32; m * k];
        let mut y = vec![0.0f32; m * n];
        let pool = rayon::ThreadPoolBuilder::new().num_threads(1).build().unwrap();
        let (t, c) = pool.install(|| {
            let mut best = (f64::INFINITY, f64::INFINITY);
            for _ in 0..5 {
                let (t0, c0) = (Instant::now(), cpu());
                let iters = 300;
                for _ in 0..iters { matmul_qt_with(isa, &x, m, k, &w, ty, n, &mut y).unwrap(); }
                let tt = t0.elapsed().as_secs_f64() / iters as f64;
                let cc = (cpu() - c0) / iters as f64;
                if cc < best.1 { best = (tt, cc); }
            }
            best
        });
        let blocks = (n * k / ty.block_size()) as f64;
        println!("{isa} {ty} m={m} n={n} k={k}: {:.1} us wall, {:.1} us cpu, {:.2} GB/s(cpu), {:.2} ns/block(cpu)", t * 1e6, c * 1e6, w.len() as f64 / c / 1e9, c / blocks * 1e9);
        }
    }
    let _ = Isa::ALL;
}

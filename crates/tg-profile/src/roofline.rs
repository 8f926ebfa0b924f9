//! The machine roofline (bandwidth, peak, launch overhead) and device-to-device links.

use crate::bench::{fnv, last_level_cache_bytes};
use crate::{bench, BenchOptions, Measurement, ProfileError, ProfileKey};
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tg_ir::{BinaryOp, DType};
use tg_runtime::{Device, Kernel, Layout};

/// What one (device, threads) can do, measured through its own kernels.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Roofline {
    /// Device name.
    pub device: String,
    /// Worker threads.
    pub threads: usize,
    /// Median time of a one-element f32 add: the fixed cost of a launch (ns).
    pub launch_ns: f64,
    /// Streaming bandwidth of a large f32 add, bytes read and written per ns (= GB/s).
    pub bytes_per_ns: f64,
    /// f32 matmul throughput at a compute-bound size, flops per ns (= GFLOP/s).
    pub flops_per_ns: f64,
}

impl Roofline {
    /// A stand-in when nothing was measured for a device: the planner's historical guess
    /// (500 ns launch, 20 GB/s, 50 GFLOP/s).
    pub fn guess(device: &str, threads: usize) -> Roofline {
        Roofline { device: device.to_string(), threads, launch_ns: 500.0, bytes_per_ns: 20.0, flops_per_ns: 50.0 }
    }
}

/// Sizes and budgets of the roofline measurement.
#[derive(Debug, Clone, PartialEq)]
pub struct RooflineOptions {
    /// Elements of each of the three f32 arrays of the bandwidth add (default: 4M elements,
    /// at least 4× the last-level cache in all, so it streams from memory).
    pub stream_elems: usize,
    /// Side of the square f32 matmul measuring peak throughput (default 512).
    pub matmul_dim: usize,
    /// Timing budget of each of the three measurements.
    pub bench: BenchOptions,
}

impl Default for RooflineOptions {
    fn default() -> Self {
        RooflineOptions {
            stream_elems: (4 << 20).max(4 * last_level_cache_bytes() / 12),
            matmul_dim: 512,
            bench: BenchOptions { min_reps: 10, min_time: Duration::from_millis(100), max_time: Duration::from_secs(2), cold_bytes: 0, ..BenchOptions::default() },
        }
    }
}

impl RooflineOptions {
    /// Small sizes and budgets for tests (figures are then only indicative).
    pub fn quick() -> RooflineOptions {
        RooflineOptions { stream_elems: 1 << 18, matmul_dim: 96, bench: BenchOptions::quick() }
    }
}

/// Measures the roofline of `device` (running `threads` workers): launch overhead with a
/// one-element add, bandwidth with a large add (12 bytes per element), peak with square f32
/// matmuls (the better of `a·b` and `a·bᵀ`).
pub fn measure_roofline(device: &dyn Device, threads: usize, opts: &RooflineOptions) -> Result<Roofline, ProfileError> {
    let f32s = |s: &[usize]| Layout::contiguous(s, DType::F32);
    let key = |kernel: Kernel, ins: Vec<Layout>, out: Layout| ProfileKey::new(kernel, ins, out, device.name(), threads);
    let add = |n: usize| key(Kernel::Binary(BinaryOp::Add), vec![f32s(&[n]), f32s(&[n])], f32s(&[n]));
    let launch = bench(device, &add(1), &opts.bench)?.median_ns;
    let n = opts.stream_elems.max(1);
    let stream = bench(device, &add(n), &opts.bench)?.median_ns;
    let d = opts.matmul_dim.max(1);
    let mut best_mm = f64::INFINITY;
    for transpose_rhs in [false, true] {
        let t = bench(device, &key(Kernel::MatMul { transpose_rhs }, vec![f32s(&[d, d]), f32s(&[d, d])], f32s(&[d, d])), &opts.bench)?.median_ns;
        best_mm = best_mm.min(t);
    }
    let pos = |x: f64| x.max(1e-3);
    Ok(Roofline {
        device: device.name().to_string(),
        threads,
        launch_ns: pos(launch),
        bytes_per_ns: pos(12.0 * n as f64 / pos(stream)),
        flops_per_ns: pos(2.0 * (d * d * d) as f64 / pos(best_mm)),
    })
}

/// A directed device pair, e.g. `cpu → cuda:0`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct LinkKey {
    /// Source device name.
    pub src: String,
    /// Destination device name.
    pub dst: String,
}

/// The measured cost of copying between two devices: `latency + bytes / bandwidth`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Link {
    /// Fixed cost of one copy (ns).
    pub latency_ns: f64,
    /// Bytes per ns (= GB/s; 1e12 when the fit finds no size dependence).
    pub bytes_per_ns: f64,
    /// Measured sizes the fit rests on.
    pub points: Vec<(usize, Measurement)>,
}

impl Link {
    /// Predicted nanoseconds of copying `bytes`.
    pub fn predict(&self, bytes: usize) -> f64 {
        self.latency_ns + bytes as f64 / self.bytes_per_ns
    }
}

/// Measures a link by timing `transfer(bytes)` (which must copy `bytes` from the source
/// device to the destination and return when done) at each of `sizes`, and fits latency and
/// bandwidth (non-negative least squares on relative error). Needs at least two distinct
/// sizes. Devices with transfers do not exist yet; this is what they will call.
pub fn measure_link(transfer: &mut dyn FnMut(usize) -> Result<(), String>, sizes: &[usize], opts: &BenchOptions) -> Result<Link, ProfileError> {
    let mut distinct = sizes.to_vec();
    distinct.sort_unstable();
    distinct.dedup();
    if distinct.len() < 2 {
        return Err(ProfileError::Fit("a link needs at least two transfer sizes".into()));
    }
    let mut points = Vec::new();
    for &bytes in &distinct {
        let seed = opts.seed ^ fnv(&format!("link:{bytes}"));
        let fail = |detail: String| ProfileError::Launch { key: format!("transfer of {bytes} bytes"), seed, detail };
        for _ in 0..opts.warmup {
            transfer(bytes).map_err(fail)?;
        }
        let (start, mut times) = (Instant::now(), Vec::new());
        loop {
            let t0 = Instant::now();
            transfer(bytes).map_err(fail)?;
            times.push(t0.elapsed().as_nanos() as f64);
            let (reps, el) = (times.len() as u32, start.elapsed());
            if reps >= opts.max_reps.max(1) || el >= opts.max_time || (reps >= opts.min_reps && el >= opts.min_time) {
                break;
            }
        }
        points.push((bytes, Measurement::from_times(times, opts.warmup, seed)));
    }
    let rows: Vec<([f64; 3], f64)> = points.iter().map(|(b, m)| ([1.0, *b as f64, 0.0], m.median_ns.max(1e-3))).collect();
    let c = crate::fit::nnls_relative(&rows).ok_or_else(|| ProfileError::Fit("link fit found no non-negative solution".into()))?;
    Ok(Link { latency_ns: c[0], bytes_per_ns: 1.0 / c[1].max(1e-12), points })
}

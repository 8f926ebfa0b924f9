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
    /// at least 4× the last-level cache in all, so it streams from memory). With a `budget`,
    /// the first size tried.
    pub stream_elems: usize,
    /// Side of the square f32 matmul measuring peak throughput (default 512). With a
    /// `budget`, the first size tried.
    pub matmul_dim: usize,
    /// Timing budget of each of the three measurements.
    pub bench: BenchOptions,
    /// A bound on the whole measurement, which then sizes itself (`None`, the default: the
    /// fixed sizes above). The bandwidth add grows ×4 from `stream_elems` up to
    /// `max_stream_elems`, the matmul ×2 from `matmul_dim` up to `max_matmul_dim` (the last
    /// step clamped to the maximum), while a
    /// launch takes less than `enough` (its launch overhead is then not amortised) and the
    /// next size is predicted to fit in what is left of its share of the budget (the add
    /// 40 %, the matmul the rest). The figures of the largest size measured are kept. Every
    /// benchmark's `max_time` is cut to what is left, so the budget is exceeded by at most
    /// one launch (and the filling of its operands).
    pub budget: Option<Duration>,
    /// Largest bandwidth add tried under a `budget` (elements per array).
    pub max_stream_elems: usize,
    /// Largest matmul side tried under a `budget`.
    pub max_matmul_dim: usize,
    /// Under a `budget`: a launch at least this long measures throughput, not launch
    /// overhead, and sizes stop growing.
    pub enough: Duration,
}

impl Default for RooflineOptions {
    fn default() -> Self {
        let stream_elems = (4 << 20).max(4 * last_level_cache_bytes() / 12);
        RooflineOptions {
            stream_elems,
            matmul_dim: 512,
            bench: BenchOptions { min_reps: 10, min_time: Duration::from_millis(100), max_time: Duration::from_secs(2), cold_bytes: 0, ..BenchOptions::default() },
            budget: None,
            max_stream_elems: stream_elems,
            max_matmul_dim: 512,
            enough: Duration::from_millis(2),
        }
    }
}

impl RooflineOptions {
    /// Small sizes and budgets for tests (figures are then only indicative).
    pub fn quick() -> RooflineOptions {
        RooflineOptions { stream_elems: 1 << 18, matmul_dim: 96, bench: BenchOptions::quick(), max_stream_elems: 1 << 18, max_matmul_dim: 96, ..RooflineOptions::default() }
    }

    /// The measurement of a device on its first use (no kernel times measured on it yet):
    /// bounded by a budget of 1.2 s rather than by its sizes. The add starts above 4× the
    /// host's last-level cache (a device sharing the host's cores streams from memory) and
    /// grows to 16M elements (192 MB, where a GPU's launch overhead is a few percent of the
    /// time); the matmul starts at 128 and grows to 2048 (17 GFLOP) while launches stay under
    /// 1 ms. On PoCL over two CPU cores it stays at the first add and a 256 matmul (0.3–0.9
    /// s in all); on a GPU the sizes grow until the launches take a millisecond or the budget
    /// says stop (filling the operands on the host is then most of the time).
    pub fn first_use() -> RooflineOptions {
        let max_stream_elems = 16 << 20;
        RooflineOptions {
            stream_elems: (1 << 20).max(4 * last_level_cache_bytes() / 12).min(max_stream_elems),
            matmul_dim: 128,
            bench: BenchOptions {
                warmup: 1,
                min_reps: 3,
                max_reps: 1000,
                min_time: Duration::from_millis(3),
                max_time: Duration::from_millis(100),
                cold_bytes: 0,
                passes: 1,
                ..BenchOptions::default()
            },
            budget: Some(Duration::from_millis(1200)),
            max_stream_elems,
            max_matmul_dim: 2048,
            enough: Duration::from_millis(1),
        }
    }
}

/// Measures the roofline of `device` (running `threads` workers): launch overhead with a
/// one-element add, bandwidth with a large add (12 bytes per element), peak with square f32
/// matmuls (the better of `a·b` and `a·bᵀ`). With [`RooflineOptions::budget`] the sizes
/// grow within the budget (see there).
pub fn measure_roofline(device: &dyn Device, threads: usize, opts: &RooflineOptions) -> Result<Roofline, ProfileError> {
    let f32s = |s: &[usize]| Layout::contiguous(s, DType::F32);
    let key = |kernel: Kernel, ins: Vec<Layout>, out: Layout| ProfileKey::new(kernel, ins, out, device.name(), threads);
    let add = |n: usize| key(Kernel::Binary(BinaryOp::Add), vec![f32s(&[n]), f32s(&[n])], f32s(&[n]));
    let matmul = |d: usize, transpose_rhs: bool| key(Kernel::MatMul { transpose_rhs }, vec![f32s(&[d, d]), f32s(&[d, d])], f32s(&[d, d]));
    let start = Instant::now();
    // Each benchmark within what is left of its phase (at least one launch always runs).
    let within = |deadline: Option<Instant>| -> BenchOptions {
        let mut b = opts.bench.clone();
        if let Some(d) = deadline {
            let left = d.saturating_duration_since(Instant::now());
            b.max_time = b.max_time.min(left);
            b.min_time = b.min_time.min(left);
        }
        b
    };
    let phase = |share: f64| opts.budget.map(|b| start + b.mul_f64(share));
    let launch = bench(device, &add(1), &within(phase(0.05)))?.median_ns;
    // A size is kept growing while its launch is short and the next one (`factor` times the
    // work, timed alike) fits before the phase's deadline.
    let grows = |m: &Measurement, wall: Duration, factor: f64, deadline: Option<Instant>| -> bool {
        let Some(deadline) = deadline else { return false };
        m.median_ns < opts.enough.as_nanos() as f64 && Instant::now() + wall.mul_f64(factor) <= deadline
    };
    let deadline = phase(0.4);
    let mut n = opts.stream_elems.max(1);
    let stream = loop {
        let t0 = Instant::now();
        let m = bench(device, &add(n), &within(deadline))?;
        let next = n.saturating_mul(4).min(opts.max_stream_elems);
        if next <= n || !grows(&m, t0.elapsed(), next as f64 / n as f64, deadline) {
            break m.median_ns;
        }
        n = next;
    };
    let deadline = phase(1.0);
    let mut d = opts.matmul_dim.max(1);
    let best_mm = loop {
        let t0 = Instant::now();
        let mut best: Option<Measurement> = None;
        for transpose_rhs in [false, true] {
            let m = bench(device, &matmul(d, transpose_rhs), &within(deadline))?;
            if best.as_ref().is_none_or(|b| m.median_ns < b.median_ns) {
                best = Some(m);
            }
        }
        let best = best.ok_or_else(|| ProfileError::Fit("no matmul measured".into()))?;
        let next = d.saturating_mul(2).min(opts.max_matmul_dim);
        if next <= d || !grows(&best, t0.elapsed(), (next as f64 / d as f64).powi(3), deadline) {
            break best.median_ns;
        }
        d = next;
    };
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
/// sizes. [`measure_device_links`] times transfers between two devices with it.
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

/// Measures both links between `home` and `device` with transfers as the executor makes
/// them (`tg_runtime::Executable`: a blocking `read` of the whole source buffer on its device
/// into a host staging buffer, then a blocking `write` of it on the other device) at each of
/// `sizes` bytes: `(home → device, device → home)`. `tg profile --device` and the first-use
/// measurement ([`crate::first_use`]) both call this.
pub fn measure_device_links(home: &dyn Device, device: &dyn Device, sizes: &[usize], opts: &BenchOptions) -> Result<(Link, Link), ProfileError> {
    let max = sizes.iter().copied().max().unwrap_or(0).max(1);
    let alloc = |d: &dyn Device| d.alloc(max).map_err(|_| ProfileError::Alloc { key: format!("link buffers on {}", d.name()), bytes: max });
    let (hbuf, dbuf) = (alloc(home)?, alloc(device)?);
    let mut staging = vec![0x5Au8; max];
    let init = |d: &dyn Device, b: &tg_runtime::DeviceBuffer, s: &[u8]| {
        d.write(b, 0, s).map_err(|e| ProfileError::Launch { key: format!("link buffers on {}", d.name()), seed: opts.seed, detail: e.to_string() })
    };
    init(home, &hbuf, &staging)?;
    init(device, &dbuf, &staging)?;
    let mut copy = |src: &dyn Device, sb: &tg_runtime::DeviceBuffer, dst: &dyn Device, db: &tg_runtime::DeviceBuffer, n: usize| -> Result<(), String> {
        src.read(sb, 0, &mut staging[..n]).map_err(|e| format!("{} read: {e}", src.name()))?;
        dst.write(db, 0, &staging[..n]).map_err(|e| format!("{} write: {e}", dst.name()))
    };
    let up = measure_link(&mut |n| copy(home, &hbuf, device, &dbuf, n), sizes, opts)?;
    let down = measure_link(&mut |n| copy(device, &dbuf, home, &hbuf, n), sizes, opts)?;
    Ok((up, down))
}

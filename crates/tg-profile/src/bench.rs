//! Timing one key on one device.

use crate::{ProfileError, ProfileKey};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde::{Deserialize, Serialize};
use std::time::{Duration, Instant};
use tg_ir::DType;
use tg_runtime::{Arg, Device, Kernel, Layout};

/// How long and how often to run a key. The defaults suit `tg profile`; tests use smaller
/// budgets.
#[derive(Debug, Clone, PartialEq)]
pub struct BenchOptions {
    /// Untimed runs first (page faults, lazy thread start, branch predictors).
    pub warmup: u32,
    /// Timed runs at least (unless `max_time` is reached first; at least one always runs).
    pub min_reps: u32,
    /// Timed runs at most.
    pub max_reps: u32,
    /// Keep repeating until this much time has passed (and `min_reps` are done).
    pub min_time: Duration,
    /// Stop after this much time even if `min_reps` are not done.
    pub max_time: Duration,
    /// Base seed of the random inputs; each key mixes in its own hash (the seed used is
    /// recorded in the [`Measurement`] and in errors).
    pub seed: u64,
    /// Rotate the runs over copies of the inputs spanning at least this many bytes, so that
    /// operands come from memory as they do in a model-sized run (whose weight stream evicts
    /// everything) rather than from a cache a repeated run keeps hot (0 = always the same
    /// inputs). The default is twice the largest cache.
    pub cold_bytes: usize,
    /// Passes over the keys a [`crate::Profiler`] session measures (at least 1; [`bench`]
    /// itself measures one pass of one key). Each pass times every key once with the budgets
    /// above, keys interleaved, so a key's passes lie seconds apart; the pass with the lowest
    /// median is kept. On a shared machine another process that holds a core for a while
    /// slows a multi-threaded launch by up to the thread count (its share of the work waits),
    /// and such windows last milliseconds to seconds: one contiguous window per key can
    /// land entirely in one. The default is 3.
    pub passes: u32,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            warmup: 2,
            min_reps: 5,
            max_reps: 100_000,
            min_time: Duration::from_millis(10),
            max_time: Duration::from_millis(500),
            seed: 0x7e57_c0de,
            cold_bytes: 2 * last_level_cache_bytes(),
            passes: 3,
        }
    }
}

impl BenchOptions {
    /// Small budgets for tests: 1 warm-up, 3 to 50 reps within 1–20 ms, hot inputs, one pass.
    pub fn quick() -> BenchOptions {
        BenchOptions {
            warmup: 1,
            min_reps: 3,
            max_reps: 50,
            min_time: Duration::from_millis(1),
            max_time: Duration::from_millis(20),
            cold_bytes: 0,
            passes: 1,
            ..BenchOptions::default()
        }
    }
}

/// The size of the largest CPU cache sysfs reports for CPU 0 (32 MiB if unknown).
pub(crate) fn last_level_cache_bytes() -> usize {
    let parse = |s: &str| -> Option<usize> {
        let s = s.trim();
        let (num, mult) = match s.chars().last()? {
            'K' => (&s[..s.len() - 1], 1 << 10),
            'M' => (&s[..s.len() - 1], 1 << 20),
            'G' => (&s[..s.len() - 1], 1 << 30),
            _ => (s, 1),
        };
        num.parse::<usize>().ok().map(|n| n * mult)
    };
    (0..8).filter_map(|i| std::fs::read_to_string(format!("/sys/devices/system/cpu/cpu0/cache/index{i}/size")).ok()).filter_map(|s| parse(&s)).max().unwrap_or(32 << 20)
}

/// Timing statistics of one key, in nanoseconds per launch.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Median launch time: what predictions use.
    pub median_ns: f64,
    /// Fastest launch.
    pub min_ns: f64,
    /// 90th percentile.
    pub p90_ns: f64,
    /// Median absolute deviation from the median (spread).
    pub mad_ns: f64,
    /// Timed launches.
    pub reps: u32,
    /// Untimed warm-up launches.
    pub warmup: u32,
    /// Seed of the random inputs.
    pub seed: u64,
}

impl Measurement {
    /// Statistics of `times` (ns, at least one).
    pub(crate) fn from_times(mut times: Vec<f64>, warmup: u32, seed: u64) -> Measurement {
        times.sort_by(f64::total_cmp);
        let med = median(&times);
        let mut dev: Vec<f64> = times.iter().map(|t| (t - med).abs()).collect();
        dev.sort_by(f64::total_cmp);
        let n = times.len();
        Measurement {
            median_ns: med,
            min_ns: times.first().copied().unwrap_or(0.0),
            p90_ns: times.get(((n as f64 * 0.9).ceil() as usize).saturating_sub(1)).copied().unwrap_or(0.0),
            mad_ns: median(&dev),
            reps: n as u32,
            warmup,
            seed,
        }
    }
}

fn median(sorted: &[f64]) -> f64 {
    match sorted.len() {
        0 => 0.0,
        n if n % 2 == 1 => sorted[n / 2],
        n => 0.5 * (sorted[n / 2 - 1] + sorted[n / 2]),
    }
}

/// 64-byte aligned bytes (kernels read f32/i32 through aligned slices).
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

struct Buf {
    lines: Vec<Line>,
    len: usize,
}

impl Buf {
    /// `len` bytes in `lines`, grown if needed; what `lines` held stays (not zeroed).
    fn reusing(mut lines: Vec<Line>, len: usize) -> Option<Buf> {
        let n = len.div_ceil(64);
        if lines.len() < n {
            lines.try_reserve_exact(n - lines.len()).ok()?;
            lines.resize(n, Line([0; 64]));
        }
        Some(Buf { lines, len })
    }

    fn bytes(&self) -> &[u8] {
        // SAFETY: `lines` holds at least `len` initialised bytes; `Line` is plain bytes.
        unsafe { std::slice::from_raw_parts(self.lines.as_ptr() as *const u8, self.len) }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and `&mut self` makes the borrow unique.
        unsafe { std::slice::from_raw_parts_mut(self.lines.as_mut_ptr() as *mut u8, self.len) }
    }
}

thread_local! {
    /// The operand arena of the last benchmark on this thread, reused by the next one: a
    /// fresh arena of `cold_bytes` costs its page faults (tens of ms for 64 MiB), more than
    /// timing most keys takes. Every byte an operand covers is rewritten before use.
    static ARENA: std::cell::RefCell<Vec<Line>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// FNV-1a of a string, to derive per-key seeds.
pub(crate) fn fnv(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3))
}

/// Fills operand `index` of `key` with random valid values: f32 uniform in [-1, 1) (in
/// [0.5, 2) for unary functions, whose domains may exclude negatives), gather ids in range,
/// other i32 in [-64, 64), bools 0/1, quantized storage as valid random blocks; an attention
/// mask is causal (see the body).
fn fill(key: &ProfileKey, index: usize, l: &Layout, buf: &mut [u8], rng: &mut ChaCha8Rng) -> Result<(), String> {
    match l.dtype {
        DType::F32 if index == 3 && matches!(key.kernel, Kernel::Attention { .. } | Kernel::AttentionSeqMajor { .. }) && l.is_contiguous() => {
            // The attention kernel skips keys its mask hides, so its time depends on the mask:
            // measure the causal mask of the last rows of a sequence (query row i sees keys
            // j <= i + sk - sq), which is the whole-sequence plans' mask and a one-token plan's
            // at its last position.
            let sk = l.shape.last().copied().unwrap_or(1).max(1);
            let sq = if l.shape.len() >= 2 { l.shape[l.shape.len() - 2].max(1) } else { 1 };
            for (e, c) in buf.chunks_exact_mut(4).enumerate() {
                let (i, j) = ((e / sk) % sq, e % sk);
                let v = if j + sq <= i + sk { 0f32 } else { f32::NEG_INFINITY };
                c.copy_from_slice(&v.to_le_bytes());
            }
        }
        DType::F32 => {
            let (lo, hi) = if matches!(key.kernel, Kernel::Unary(_)) { (0.5f32, 2.0f32) } else { (-1.0, 1.0) };
            buf.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&rng.gen_range(lo..hi).to_le_bytes()));
        }
        DType::I32 => {
            if matches!(key.kernel, Kernel::Gather) && index == 1 {
                let rows = key.inputs.first().and_then(|t| t.shape.first()).copied().unwrap_or(0);
                let rows = i32::try_from(rows).map_err(|_| "gather table has more rows than i32 ids can address".to_string())?;
                if rows == 0 && !buf.is_empty() {
                    return Err("gather from an empty table".into());
                }
                buf.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&rng.gen_range(0..rows.max(1)).to_le_bytes()));
            } else if let (Kernel::StoreRows { axis }, 1) = (&key.kernel, index) {
                // An offset at which the rows fit.
                let room = key.output.shape.get(*axis).copied().unwrap_or(0).saturating_sub(key.inputs.first().and_then(|r| r.shape.get(*axis)).copied().unwrap_or(0));
                let off = rng.gen_range(0..=room.min(i32::MAX as usize)) as i32;
                buf.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&off.to_le_bytes()));
            } else {
                buf.chunks_exact_mut(4).for_each(|c| c.copy_from_slice(&rng.gen_range(-64i32..64).to_le_bytes()));
            }
        }
        DType::Bool => buf.iter_mut().for_each(|b| *b = rng.gen_range(0..2)),
        DType::Quant(t) => {
            let k = *l.shape.last().ok_or("quantized scalar")?;
            let rows: usize = l.shape[..l.shape.len() - 1].iter().product();
            t.row_bytes(k).map_err(|e| e.to_string())?;
            let data = tg_quant::random_blocks(t, rows * k, rng.gen());
            if data.len() != buf.len() {
                return Err(format!("{t} storage of {} bytes, buffer of {}", data.len(), buf.len()));
            }
            buf.copy_from_slice(&data);
        }
    }
    Ok(())
}

/// Measures `key` on `device`: allocates the operands at the sizes their layouts need, fills
/// them with seeded random values, runs `opts.warmup` untimed launches and then timed ones
/// until the budget of `opts` is spent, all inside one `device.scope` as the executor runs a
/// plan (so a thread-pool hand-off is paid once, not per launch). Each launch is timed alone.
///
/// `device` must run `key.threads` workers (this is not checkable through the [`Device`]
/// trait; [`crate::Profiler`] obtains devices by thread count). Unsupported keys, bad layouts
/// and kernel errors or panics are returned as errors.
pub fn bench(device: &dyn Device, key: &ProfileKey, opts: &BenchOptions) -> Result<Measurement, ProfileError> {
    let short = key.short();
    if key.device != device.name() {
        return Err(ProfileError::Unsupported { key: short, reason: format!("key is for device {:?}, measuring on {:?}", key.device, device.name()) });
    }
    device.supports(&key.kernel, &key.inputs, &key.output).map_err(|reason| ProfileError::Unsupported { key: short.clone(), reason })?;
    let size = |l: &Layout| l.bytes_needed().ok_or_else(|| ProfileError::Layout { key: short.clone(), detail: format!("no valid byte size for {l:?}") });
    let in_sizes: Vec<usize> = key.inputs.iter().map(size).collect::<Result<_, _>>()?;
    let out_size = size(&key.output)?;

    // One slot holds every operand (each 64-byte aligned); the arena holds `copies` slots,
    // the first filled with random values and the others copies of it.
    let mut offsets = Vec::with_capacity(in_sizes.len());
    let mut slot = 0usize;
    for &b in &in_sizes {
        offsets.push(slot);
        slot += b.next_multiple_of(64);
    }
    let copies = if opts.cold_bytes == 0 || slot == 0 { 1 } else { opts.cold_bytes.div_ceil(slot).max(1) };
    let arena_bytes = slot.checked_mul(copies).ok_or(ProfileError::Alloc { key: short.clone(), bytes: usize::MAX })?;
    let mut arena = Buf::reusing(ARENA.take(), arena_bytes).ok_or(ProfileError::Alloc { key: short.clone(), bytes: arena_bytes })?;
    let seed = opts.seed ^ fnv(&serde_json::to_string(key).unwrap_or_default());
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    {
        let bytes = arena.bytes_mut();
        for (i, ((l, &size), &at)) in key.inputs.iter().zip(&in_sizes).zip(&offsets).enumerate() {
            fill(key, i, l, &mut bytes[at..at + size], &mut rng).map_err(|detail| ProfileError::Layout { key: short.clone(), detail })?;
        }
        for c in 1..copies {
            bytes.copy_within(0..slot, c * slot);
        }
    }
    let arena_buf = arena;
    // The operands live in the device's own memory, as the executor's arenas do.
    let dev_alloc = |bytes: usize| device.alloc(bytes.max(1)).map_err(|_| ProfileError::Alloc { key: short.clone(), bytes });
    let dev_arena = dev_alloc(arena_bytes)?;
    device.write(&dev_arena, 0, &arena_buf.bytes()[..arena_bytes]).map_err(|e| ProfileError::Launch { key: short.clone(), seed, detail: e.to_string() })?;
    let out = dev_alloc(out_size)?;
    // The operands of copy `c`, built per launch as the executor builds them per step.
    let operands = |c: usize| -> Vec<Arg> {
        offsets.iter().zip(&in_sizes).zip(&key.inputs).map(|((&at, &size), l)| Arg { buffer: &dev_arena, offset: c * slot + at, bytes: size, layout: l }).collect()
    };
    let mut times: Vec<f64> = Vec::new();
    let mut failure: Option<String> = None;
    let mut body = || {
        let mut next = 0usize;
        // Each launch is waited for, so an asynchronous device is timed to completion.
        let mut launch = || {
            let ins = operands(next % copies);
            next += 1;
            device.launch(0, &key.kernel, &ins, Arg { buffer: &out, offset: 0, bytes: out_size, layout: &key.output })?;
            device.synchronize().map_err(|e| e.to_string())
        };
        for _ in 0..opts.warmup {
            if let Err(e) = launch() {
                failure = Some(e);
                return;
            }
        }
        let start = Instant::now();
        loop {
            let t0 = Instant::now();
            if let Err(e) = launch() {
                failure = Some(e);
                return;
            }
            times.push(t0.elapsed().as_nanos() as f64);
            let elapsed = start.elapsed();
            let reps = times.len() as u32;
            if reps >= opts.max_reps.max(1) || elapsed >= opts.max_time || (reps >= opts.min_reps && elapsed >= opts.min_time) {
                return;
            }
        }
    };
    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| device.scope(&mut body)));
    // Keep the arena for the next key unless it is far above the usual size (a one-off
    // operand larger than `cold_bytes`).
    if arena_buf.lines.len() * 64 <= 2 * opts.cold_bytes.max(1 << 20) {
        ARENA.set(arena_buf.lines);
    }
    let launch_err = |detail: String| ProfileError::Launch { key: short.clone(), seed, detail };
    if let Err(p) = run {
        let msg = p.downcast_ref::<&str>().map(|s| s.to_string()).or_else(|| p.downcast_ref::<String>().cloned()).unwrap_or_else(|| "panic".into());
        return Err(launch_err(format!("panicked: {msg}")));
    }
    if let Some(e) = failure {
        return Err(launch_err(e));
    }
    if times.is_empty() {
        return Err(launch_err("no timed run".into()));
    }
    Ok(Measurement::from_times(times, opts.warmup, seed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statistics() {
        let m = Measurement::from_times(vec![5.0, 1.0, 3.0, 2.0, 4.0, 100.0], 1, 9);
        assert_eq!(m.median_ns, 3.5);
        assert_eq!(m.min_ns, 1.0);
        assert_eq!(m.p90_ns, 100.0);
        assert_eq!(m.mad_ns, 1.5);
        assert_eq!(m.reps, 6);
        assert!(last_level_cache_bytes() >= 1 << 16);
    }
}

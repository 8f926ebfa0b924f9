//! `y = x · Wᵀ` with f32 activations `x` (`m × k`) and weights `W` (`n × k`) stored in a GGML
//! format (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K, Q5_K, Q6_K with SIMD decoders;
//! Q2_K, Q3_K, Q8_K through the reference dequantizer).
//!
//! * **Small `m` (≤ [`MATVEC_MAX_M`]), the decode step**: memory-bound. Each weight row is
//!   streamed once (with a software prefetch ahead), decoded block by block in registers and
//!   multiplied into up to four activation rows at a time with FMAs into two or four interleaved
//!   accumulators per row. For `m = 1` on AVX-512 the common formats (Q4_0, Q5_0, Q8_0, Q4_K,
//!   Q5_K, Q6_K) use kernels that apply each block's scale once to a partial sum instead of to
//!   every weight (see `matmul_q/avx512.rs`).
//! * **Larger `m` (prefill)**: compute-bound. A panel of weight rows is decoded once into an f32
//!   tile that stays in L2 (`NP` rows × up to `KC` columns), then `4 × NR` register tiles of
//!   dot-form FMAs (see [`crate::matmul_f32`]) run over all activation rows.
//!
//! Both split the `n` output columns (weight rows) over threads in contiguous ranges.
//! Decoded weights are bit-identical to `tg_quant::dequantize_row`; accumulation is f32.

// Register-blocked kernels index small fixed-size arrays in loops and pass many scalars.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use tg_quant::GgmlType;

use crate::dequant::{dequant_row_simd, fmt, with_fmt, Fmt, SimdDecode, Sink};
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::matmul_f32::{micro_dot, MR};
use crate::par::{for_ranges, SyncPtr};
use crate::simd::Simd;
use crate::{Isa, KernelError};

#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512;

/// Largest `m` handled by the streaming matvec kernel; above it the tiled GEMM is used.
pub const MATVEC_MAX_M: usize = 8;

/// Longest stretch of `k` decoded into one GEMM tile.
const KC_MAX: usize = 1024;

/// Target size of a decoded GEMM weight tile, in bytes.
const TILE_BYTES: usize = 64 * 1024;

// ---------------------------------------------------------------------------------------------
// Streaming matvec.

/// How far ahead of the decoder the weight stream is prefetched, in bytes.
pub(crate) const PREFETCH_AHEAD: usize = 1024;

/// Hints the cache line at `p` into L1. Any address is fine (a prefetch never faults); callers
/// form `p` with `wrapping_add` since it may lie past the end of the weights.
#[inline(always)]
pub(crate) fn prefetch(p: *const u8) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: prefetch never faults; SSE is baseline on x86_64.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Multiplies decoded weight vectors into `R` activation rows with `NA` accumulators per row
/// (see [`dot_rows`]).
struct DotSink<S: Simd, const R: usize, const NA: usize> {
    x: [*const f32; R],
    /// Vector `i` of a unit goes to `acc[r][i % NA]` (a constant once the decoder is inlined).
    acc: [[S::V; NA]; R],
}

impl<S: Simd, const R: usize, const NA: usize> Sink<S::V> for DotSink<S, R, NA> {
    #[inline(always)]
    unsafe fn put(&mut self, i: usize, v: S::V) {
        let s = i % NA;
        for r in 0..R {
            self.acc[r][s] = S::fma(v, S::load(self.x[r].add(i * S::LANES)), self.acc[r][s]);
        }
    }
}

/// `[Σ_k x_r[k] · W[k]]_r` for one weight row `w` of `k` elements and `R` activation rows.
#[inline(always)]
unsafe fn dot_rows<S: SimdDecode, D: Fmt, const R: usize>(x: [*const f32; R], w: *const u8, k: usize) -> [f32; R] {
    // Independent FMA chains per row: four when a unit has at least four vectors (K-quants:
    // eight dependent FMAs per chain and block would otherwise bound the loop by FMA latency)
    // and there are registers for them, else two.
    if D::BLOCK / S::LANES >= 4 && (S::LANES >= 16 || R <= 2) {
        dot_rows_na::<S, D, R, 4>(x, w, k)
    } else {
        dot_rows_na::<S, D, R, 2>(x, w, k)
    }
}

#[inline(always)]
unsafe fn dot_rows_na<S: SimdDecode, D: Fmt, const R: usize, const NA: usize>(
    x: [*const f32; R],
    w: *const u8,
    k: usize,
) -> [f32; R] {
    let nb = k / D::BLOCK;
    let mut sink = DotSink::<S, R, NA> { x, acc: [[S::zero(); NA]; R] };
    for b in 0..nb {
        for r in 0..R {
            sink.x[r] = x[r].add(b * D::BLOCK);
        }
        prefetch(w.wrapping_add(b * D::BYTES + PREFETCH_AHEAD));
        D::decode::<S, _>(w.add(b * D::BYTES), &mut sink);
        // With one vector per unit (F32 on AVX-512), swap the pair between units so both
        // accumulators still take turns (two dependency chains, not one).
        if D::BLOCK == S::LANES {
            for r in 0..R {
                sink.acc[r].swap(0, 1);
            }
        }
    }
    let mut out = [0.0f32; R];
    for r in 0..R {
        let mut v = sink.acc[r][0];
        for a in 1..NA {
            v = S::add(v, sink.acc[r][a]);
        }
        out[r] = S::reduce_add(v);
    }
    if D::PLAIN {
        for e in nb * D::BLOCK..k {
            let wv = D::elem(w, e);
            for r in 0..R {
                out[r] += *x[r].add(e) * wv;
            }
        }
    }
    out
}

/// Weight rows `rows` against all `m` activation rows, streaming each weight row once.
struct MatvecTask {
    ty: GgmlType,
    x: *const f32,
    m: usize,
    k: usize,
    w: *const u8,
    row_bytes: usize,
    n: usize,
    y: *mut f32,
    rows: std::ops::Range<usize>,
}

impl IsaTask for MatvecTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        #[inline(always)]
        unsafe fn go<S: SimdDecode, D: Fmt, const R: usize>(t: &MatvecTask, i0: usize, j: usize) {
            let x: [*const f32; R] = std::array::from_fn(|r| t.x.add((i0 + r) * t.k));
            let out = dot_rows::<S, D, R>(x, t.w.add(j * t.row_bytes), t.k);
            for (r, v) in out.into_iter().enumerate() {
                *t.y.add((i0 + r) * t.n + j) = v;
            }
        }
        #[inline(always)]
        unsafe fn all<S: SimdDecode, D: Fmt>(t: &MatvecTask) {
            if t.m == 1 && S::has_dot1(D::TY) {
                // Specialized single-row kernel. Sums of x over each 32 elements (K-quants).
                let xs: Vec<f32> = if matches!(D::TY, GgmlType::Q4_K | GgmlType::Q5_K) {
                    (0..t.k / 32).map(|i| (0..32).map(|e| *t.x.add(32 * i + e)).sum()).collect()
                } else {
                    Vec::new()
                };
                for j in t.rows.clone() {
                    // One line per row, ~1 KiB ahead: enough to carry the stream across 4 KiB
                    // page boundaries, where the hardware prefetchers stop (the kernels below add
                    // their own for rows of several lines).
                    prefetch(t.w.wrapping_add(j * t.row_bytes + PREFETCH_AHEAD));
                    *t.y.add(j) = S::dot1(D::TY, t.x, xs.as_ptr(), t.w.add(j * t.row_bytes), t.k);
                }
                return;
            }
            for j in t.rows.clone() {
                let mut i = 0;
                while i < t.m {
                    match t.m - i {
                        1 => go::<S, D, 1>(t, i, j),
                        2 => go::<S, D, 2>(t, i, j),
                        3 => go::<S, D, 3>(t, i, j),
                        _ => go::<S, D, 4>(t, i, j),
                    }
                    i += 4;
                }
            }
        }
        with_fmt!(self.ty, |D| all::<S, D>(&self), else reference_rows::<S>(&self))
    }
}

/// Formats without SIMD decoders: decode each weight row with `tg_quant` into a scratch row,
/// then dot it with every activation row.
#[inline(always)]
unsafe fn reference_rows<S: SimdDecode>(t: &MatvecTask) {
    let mut row = vec![0.0f32; t.k];
    let w = std::slice::from_raw_parts(t.w, t.n * t.row_bytes);
    for j in t.rows.clone() {
        // Cannot fail: the type and lengths were validated by the entry point.
        if tg_quant::dequantize_row(t.ty, &w[j * t.row_bytes..(j + 1) * t.row_bytes], &mut row).is_err() {
            row.fill(f32::NAN);
        }
        let wp = row.as_ptr().cast::<u8>();
        for i in 0..t.m {
            let [v] = dot_rows::<S, fmt::F32, 1>([t.x.add(i * t.k)], wp, t.k);
            *t.y.add(i * t.n + j) = v;
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Tiled GEMM.

/// GEMM blocking for a given `k` and register tile width `nr`: `(kc, np)`.
fn gemm_blocking(ty: GgmlType, k: usize, nr: usize) -> (usize, usize) {
    let unit = if ty.is_quantized() { ty.block_size() } else { crate::dequant::PLAIN_BLOCK };
    let parts = k.div_ceil(KC_MAX);
    let kc = (k.div_ceil(parts)).div_ceil(unit) * unit;
    let np = (TILE_BYTES / (4 * kc)).clamp(nr, 64) / nr * nr;
    (kc, np)
}

/// Weight panels `panels` (of `np` rows each) against all `m` activation rows.
struct GemmTask<'t> {
    ty: GgmlType,
    x: *const f32,
    m: usize,
    k: usize,
    w: *const u8,
    row_bytes: usize,
    n: usize,
    y: *mut f32,
    panels: std::ops::Range<usize>,
    tile: &'t mut Vec<f32>,
}

impl IsaTask for GemmTask<'_> {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        if S::LANES >= 16 {
            with_fmt!(self.ty, |D| gemm_panels::<S, D, 4>(self), else unreachable!("checked by caller"))
        } else {
            with_fmt!(self.ty, |D| gemm_panels::<S, D, 2>(self), else unreachable!("checked by caller"))
        }
    }
}

#[inline(always)]
unsafe fn gemm_panels<S: SimdDecode, D: Fmt, const NR: usize>(t: GemmTask<'_>) {
    let GemmTask { ty, x, m, k, w, row_bytes, n, y, panels, tile } = t;
    let (kc_max, np) = gemm_blocking(ty, k, NR);
    tile.clear();
    tile.resize(np * kc_max, 0.0);
    let tp = tile.as_mut_ptr();
    for p in panels {
        let j0 = p * np;
        let rows = (n - j0).min(np);
        let mut kc0 = 0;
        while kc0 < k {
            let kc = (k - kc0).min(kc_max);
            for jj in 0..rows {
                let src = w.add((j0 + jj) * row_bytes + kc0 / D::BLOCK * D::BYTES);
                dequant_row_simd::<S, D>(src, kc, tp.add(jj * kc_max));
            }
            let accumulate = kc0 > 0;
            let mut i = 0;
            while i < m {
                let xi = x.add(i * k + kc0);
                let yi = y.add(i * n + j0);
                match (m - i).min(MR) {
                    1 => tile_row::<S, NR, 1>(xi, k, tp, kc_max, rows, kc, yi, n, accumulate),
                    2 => tile_row::<S, NR, 2>(xi, k, tp, kc_max, rows, kc, yi, n, accumulate),
                    3 => tile_row::<S, NR, 3>(xi, k, tp, kc_max, rows, kc, yi, n, accumulate),
                    _ => tile_row::<S, NR, 4>(xi, k, tp, kc_max, rows, kc, yi, n, accumulate),
                }
                i += MR;
            }
            kc0 += kc;
        }
    }
}

/// `M` activation rows (stride `xs`) against the `rows` decoded tile rows (stride `ts`), over `kc`
/// columns; results stored (or added) to `y` rows of stride `ys`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
unsafe fn tile_row<S: Simd, const NR: usize, const M: usize>(
    x: *const f32,
    xs: usize,
    tile: *const f32,
    ts: usize,
    rows: usize,
    kc: usize,
    y: *mut f32,
    ys: usize,
    accumulate: bool,
) {
    let xp: [*const f32; M] = std::array::from_fn(|r| x.add(r * xs));
    let mut j = 0;
    while j < rows {
        let nr = (rows - j).min(NR);
        // Tile rows past the panel reuse the last valid one; their results are dropped.
        let wp: [*const f32; NR] = std::array::from_fn(|q| tile.add((j + q.min(nr - 1)) * ts));
        let out = micro_dot::<S, M, NR>(xp, wp, kc);
        for (r, o) in out.iter().enumerate() {
            let yr = y.add(r * ys + j);
            for (q, &v) in o.iter().enumerate().take(nr) {
                if accumulate {
                    *yr.add(q) += v;
                } else {
                    *yr.add(q) = v;
                }
            }
        }
        j += nr;
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points.

/// `y[i, j] = Σ_k x[i, k] · W[j, k]`: `x` is `m × k` f32 row-major, `w` holds `n` rows of `k`
/// elements of type `ty` (`n · ty.row_bytes(k)` bytes), `y` is `m × n` row-major and is fully
/// overwritten.
///
/// Errors (never panics) on wrong buffer lengths, a `k` that is not a whole number of blocks,
/// or a type without a dequantizer.
pub fn matmul_qt(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    matmul_qt_with(isa(), x, m, k, w, ty, n, y)
}

/// [`matmul_qt`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qt_with(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    const NAMES: crate::MatmulNames = crate::MatmulNames { x: "matmul_qt: x", w_bytes: "matmul_qt: w bytes", w: "matmul_qt: w", y: "matmul_qt: y" };
    let Some(row_bytes) = crate::check_matmul(&NAMES, ty, m, k, n, Some(x.len()), w.len(), y)? else {
        return Ok(());
    };
    let (xp, wp, yp) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(w.as_ptr() as *mut u8), SyncPtr(y.as_mut_ptr()));

    if m <= MATVEC_MAX_M || !crate::has_simd_decoder(ty) {
        // ≥ 64 KiB of weights per task: enough to amortize the fork, small enough to balance.
        let min_rows = (65_536 / row_bytes).max(1);
        for_ranges(n, min_rows, 1, |rows| {
            run_on(isa, MatvecTask { ty, x: xp.get(), m, k, w: wp.get(), row_bytes, n, y: yp.get(), rows })
        });
        return Ok(());
    }

    let nr = if matches!(isa, Isa::Avx512) { 4 } else { 2 };
    let (_, np) = gemm_blocking(ty, k, nr);
    let panels = n.div_ceil(np);
    // ≥ ~2 MFLOP per task.
    let panel_flops = 2 * m * np * k;
    let min_panels = ((1usize << 21) / panel_flops.max(1)).max(1);
    for_ranges(panels, min_panels, 1, |panels| {
        let mut tile = Vec::new();
        run_on(isa, GemmTask { ty, x: xp.get(), m, k, w: wp.get(), row_bytes, n, y: yp.get(), panels, tile: &mut tile })
    });
    Ok(())
}

//! `y = x · Wᵀ` the way ggml's CPU backend computes it: the f32 activations are first quantized
//! to 8 bits per element, then every weight block is multiplied with the matching activation
//! block in integer arithmetic, and only the per-block results are scaled and summed in f32.
//!
//! | weights                 | activations | per-block float work                               |
//! |-------------------------|-------------|----------------------------------------------------|
//! | Q4_0, Q5_0, Q8_0        | Q8_0 (32)   | `(d_w·d_x) · Σ q_w·q_x`                             |
//! | Q4_K, Q5_K              | Q8_K (256)  | `(d_w·d_x) · Σ_s sc_s·Σ q_w·q_x − (dmin_w·d_x) · Σ_s m_s·Σ q_x` |
//! | Q6_K                    | Q8_K (256)  | `(d_w·d_x) · Σ_s sc_s·Σ (q_w − 32)·q_x`             |
//! | F32, F16, BF16          | —           | not quantized: delegated to [`crate::matmul_qt`]   |
//!
//! # Activation quantization (bit-exact with llama.cpp on x86)
//! * **Q8_0** follows ggml's x86 `quantize_row_q8_0` (the AVX/AVX2 code that every x86 build of
//!   llama.cpp runs, also used by its repacked and llamafile paths), which differs in rounding
//!   from ggml's portable reference `quantize_row_q8_0_ref` (and `tg_quant::quantize_row_q8_0`):
//!   per 32 elements `amax = max|x|`, the stored scale is `d = f16(amax / 127)`, and
//!   `q = round_half_even(x · (127 / amax))` (the reference uses `x · (1 / (amax / 127))` and rounds
//!   half away from zero; the two differ, by ±1, only for products at or within an ulp of a
//!   half-integer — exact ties, or about one element in a million on random data).
//! * **Q8_K** follows ggml's `quantize_row_q8_K_ref` (what x86 runs):
//!   the element `max` of largest magnitude (first one on ties) maps to −127:
//!   `iscale = −127 / max`, `q = min(127, round_half_even(iscale · x))`, `d = 1 / iscale` (f32),
//!   plus the sums of each 16 quants. This equals `tg_quant::quantize_row_q8_k`.
//!
//! Deviations, all in degenerate cases: a block whose f16 scale underflows to 0 gets zero quants
//! (its products are 0 in ggml too); a block with a NaN or infinite element gets scale NaN and
//! zero quants, so every output that depends on it is NaN (ggml's result is unspecified there);
//! all-zero Q8_K blocks get zero `bsums` (ggml leaves them unwritten).
//!
//! # Arithmetic
//! Integer block dot products are exact. The float part follows ggml's structure: the scale
//! product `d_w·d_x` is rounded to f32 once per block (super-block for the K-quants), multiplied
//! with the exactly converted integer sum (exact below 2²⁴) and accumulated in f32. Results agree
//! with ggml up to the order of the f32 summation, and with an f64 dot product of the
//! dequantized operands to within `~(k/32 + 12)·ε·Σ|w·x|`. [`Q8Order::Ggml`] goes further and
//! reproduces the summation order of the kernel llama.cpp picks for the shape where this module
//! mirrors it (bit-identical results, checked against libggml-cpu in the tests).
//!
//! # Kernels
//! * One-row tiles (`x86.rs`): up to four activation rows × two weight rows; per 32-block eight
//!   i32 lanes (each the sum of four products) go through `fma(d_w·d_x, ·, acc)`, as in ggml's
//!   x86 `vec_dot` (the K-quants sum a super-block in i32 lanes first; the mins are accumulated
//!   the way ggml's Q4_K / Q5_K code does). Bit-identical to ggml's `vec_dot`.
//! * Packed panels (`x86/panel.rs`), for more activation rows: eight weight rows are decoded and
//!   transposed so that one `u8 × i8` multiply-add with four broadcast activation bytes advances
//!   eight dot products; each lane holds one row's exact block sum. For Q4_K this is the float
//!   structure of ggml's repacked `gemv_q4_K_8x8` (bit-identical).
//! * Portable (`scalar.rs`): integer loops, one accumulator.
//!
//! # ISAs
//! * [`Isa::Scalar`]: portable integer loops.
//! * [`Isa::Avx2`]: 256-bit `vpmaddubsw`/`vpmaddwd` (u8 × i8 → i16 pairs → i32), as ggml's AVX2 code.
//! * [`Isa::Avx512`]: the same 256-bit kernels with AVX-512 VNNI `vpdpbusd`/`vpdpwssd` and
//!   AVX-512BW mask operations when the CPU has AVX512-VNNI (without VNNI: the AVX2 kernels).
//!   The integer sums are identical, so AVX2 and AVX-512 results are bit-identical.
//!
//! All paths give bit-identical quantized activations.
//!
//! # Work split
//! The activations are quantized once per call (rows in parallel when there are many), then the
//! `n` weight rows are split over the rayon pool in contiguous ranges (multiples of eight rows).
//! Every output is computed by the same steps whatever the split, so results do not depend on
//! the number of threads. Weight rows are streamed with software prefetch on the first pass; the
//! one-row tiles visit weight rows in groups small enough to stay in L1/L2 while all activation
//! rows pass over them, panels are packed once and reused by every activation row.

mod quant;
mod scalar;
#[cfg(target_arch = "x86_64")]
mod x86;

use std::ops::Range;

use tg_quant::GgmlType;

use crate::isa::checked;
use crate::par::{for_ranges, SyncPtr};
use crate::{check_len, isa, matmul_qt_with, mul, Isa, KernelError};

/// Buffer names in this module's error messages.
const NAMES: crate::MatmulNames = crate::MatmulNames { x: "matmul_qt_q8: x", w_bytes: "matmul_qt_q8: w bytes", w: "matmul_qt_q8: w", y: "matmul_qt_q8: y" };

/// The activation format ggml's CPU backend pairs with weights of type `ty`, for the weight
/// types this module implements: Q8_0 for Q4_0/Q5_0/Q8_0, Q8_K for Q4_K/Q5_K/Q6_K.
///
/// `None` for everything else. For F32/F16/BF16 weights [`matmul_qt_q8`] delegates to the f32
/// kernel [`crate::matmul_qt`] (note that ggml itself rounds the activations to F16/BF16 for
/// F16/BF16 weights, which this does not reproduce); other quantized types (Q4_1, Q5_1, Q2_K,
/// Q3_K, …) are rejected with [`KernelError::UnsupportedType`].
pub fn q8_activation_type(ty: GgmlType) -> Option<GgmlType> {
    match ty {
        GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => Some(GgmlType::Q8_0),
        GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => Some(GgmlType::Q8_K),
        _ => None,
    }
}

/// Activation rows quantized to Q8_0 or Q8_K exactly as llama.cpp's x86 CPU backend does, in a
/// layout made for the dot-product kernels: all quants row-major, scales as f32, and the sums of
/// each 32 (Q8_0) or 16 (Q8_K) quants.
///
/// * **Q8_0** (for Q4_0/Q5_0/Q8_0 weights) follows ggml's x86 `quantize_row_q8_0`: per 32
///   elements `d = f16(amax / 127)` and `q = round_half_even(x · (127 / amax))`. ggml's portable
///   reference (and `tg_quant::quantize_row_q8_0`) computes `x · (1 / (amax / 127))` and rounds
///   half away from zero; the two differ by ±1 in exact ties and, rarely, within an ulp of one.
/// * **Q8_K** (for K-quant weights) follows `quantize_row_q8_K_ref` (which x86 runs, and which
///   `tg_quant::quantize_row_q8_k` implements): the element `max` of largest magnitude (first on
///   ties) maps to −127, `q = min(127, round_half_even(x · (−127 / max)))`, `d = 1 / iscale`.
///
/// Degenerate blocks: a block whose f16 scale underflows to 0 gets zero quants (its products
/// are 0 in ggml too); a block with a NaN or infinite element gets scale NaN and zero quants, so
/// every output depending on it is NaN; all-zero Q8_K blocks get zero sums (ggml leaves them
/// unwritten).
///
/// Quantize once with [`quantize_activations`] and reuse for every weight matrix with the same
/// activation type (e.g. the Q, K and V projections of one input) via [`matmul_qt_q8_pre`].
#[derive(Debug, Clone, PartialEq)]
pub struct QuantizedActivations {
    ty: GgmlType,
    m: usize,
    k: usize,
    /// `m × k` quants.
    qs: Vec<i8>,
    /// `m × k / block` scales (for Q8_0: the f16 scale, converted exactly).
    d: Vec<f32>,
    /// `m × k / 32` sums (Q8_0) or `m × k / 16` sums (Q8_K) of the quants.
    sums: Vec<i16>,
    /// Q8_0 only: the sums of each 4 quants, negated (`m × k / 4`), for the offset corrections
    /// of Q4_0/Q5_0 in the lane layout of ggml's kernels.
    gsums: Vec<i16>,
}

impl QuantizedActivations {
    /// The activation type, [`GgmlType::Q8_0`] or [`GgmlType::Q8_K`].
    pub fn act_type(&self) -> GgmlType {
        self.ty
    }

    /// Number of rows (`m`).
    pub fn rows(&self) -> usize {
        self.m
    }

    /// Elements per row (`k`).
    pub fn cols(&self) -> usize {
        self.k
    }

    /// Row `i` as ggml blocks (`block_q8_0` / `block_q8_K` bytes, `act_type().row_bytes(k)` long),
    /// for comparison with ggml and `tg_quant`. `None` if `i` is out of range.
    pub fn row_ggml_bytes(&self, i: usize) -> Option<Vec<u8>> {
        if i >= self.m {
            return None;
        }
        let bs = self.ty.block_size();
        let nb = self.k / bs;
        let qs = &self.qs[i * self.k..(i + 1) * self.k];
        let d = &self.d[i * nb..(i + 1) * nb];
        let mut out = Vec::with_capacity(nb * self.ty.type_size());
        if self.ty == GgmlType::Q8_0 {
            for (q, &d) in qs.chunks_exact(32).zip(d) {
                out.extend_from_slice(&tg_quant::f32_to_f16(d).to_le_bytes());
                out.extend(q.iter().map(|&v| v as u8));
            }
        } else {
            let sums = &self.sums[i * nb * 16..(i + 1) * nb * 16];
            for ((q, &d), s) in qs.chunks_exact(256).zip(d).zip(sums.chunks_exact(16)) {
                out.extend_from_slice(&d.to_le_bytes());
                out.extend(q.iter().map(|&v| v as u8));
                for &v in s {
                    out.extend_from_slice(&v.to_le_bytes());
                }
            }
        }
        Some(out)
    }
}

/// Quantizes the `m × k` row-major activations `x` to `act` ([`GgmlType::Q8_0`] or
/// [`GgmlType::Q8_K`]) on the best ISA. `k` must be a multiple of the block size (32 / 256).
pub fn quantize_activations(x: &[f32], m: usize, k: usize, act: GgmlType) -> Result<QuantizedActivations, KernelError> {
    quantize_activations_with(isa(), x, m, k, act)
}

/// [`quantize_activations`] on an explicit ISA (the result is identical on every ISA).
pub fn quantize_activations_with(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    act: GgmlType,
) -> Result<QuantizedActivations, KernelError> {
    let isa = checked(isa)?;
    if !matches!(act, GgmlType::Q8_0 | GgmlType::Q8_K) {
        return Err(KernelError::UnsupportedType(act));
    }
    act.row_bytes(k)?;
    let total = mul("quantize_activations: x", m, k)?;
    check_len("quantize_activations: x", total, x.len())?;
    let bs = act.block_size();
    let sums_per_row = if act == GgmlType::Q8_0 { k / 32 } else { k / 16 };
    let mut qa = QuantizedActivations {
        ty: act,
        m,
        k,
        qs: vec![0; total],
        d: vec![0.0; m * (k / bs)],
        sums: vec![0; m * sums_per_row],
        gsums: vec![0; if act == GgmlType::Q8_0 { total / 4 } else { 0 }],
    };
    if total == 0 {
        return Ok(qa);
    }
    let (qp, dp, sp) = (SyncPtr(qa.qs.as_mut_ptr()), SyncPtr(qa.d.as_mut_ptr()), SyncPtr(qa.sums.as_mut_ptr()));
    let (gp, g_per_row) = (SyncPtr(qa.gsums.as_mut_ptr()), qa.gsums.len() / m.max(1));
    let nb = k / bs;
    // ≥ 32 Ki elements per task.
    for_ranges(m, (32_768 / k).max(1), 1, |rows| {
        for i in rows {
            // SAFETY: row `i` of each buffer is written by this task only; lengths were sized
            // above, and `x` has `m × k` elements.
            unsafe {
                let xr = std::slice::from_raw_parts(x.as_ptr().add(i * k), k);
                let q = std::slice::from_raw_parts_mut(qp.get().add(i * k), k);
                let d = std::slice::from_raw_parts_mut(dp.get().add(i * nb), nb);
                let s = std::slice::from_raw_parts_mut(sp.get().add(i * sums_per_row), sums_per_row);
                let g = std::slice::from_raw_parts_mut(gp.get().add(i * g_per_row), g_per_row);
                quant::quantize_row(isa, act, xr, q, d, s, g);
            }
        }
    });
    Ok(qa)
}

/// The f32 summation order of the int8 kernels. The integer block sums, and therefore the
/// quantization error, are the same either way; the orders differ in the last bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Q8Order {
    /// The fastest kernels for the shape: one-row tiles for few activation rows, packed
    /// eight-row weight panels for more (from 2 to 8 rows, by type).
    #[default]
    Fast,
    /// On x86 (AVX2 / AVX-512), the kernels llama.cpp's CPU backend (x86 build with AVX2 or
    /// AVX-512 VNNI, default settings) runs for the shape, reproducing its float steps so that
    /// results are bit-identical: `ggml_vec_dot_*` for Q4_0/Q5_0/Q8_0 at `m = 1`, llamafile's
    /// tinyBLAS (same per-block steps) at `m ≥ 2`; `vec_dot` for Q5_K/Q6_K at `m < 8`; the
    /// repacked 8-row Q4_K kernel (`gemv_q4_K_8x8`) when `n` is a multiple of 8, else `vec_dot`.
    /// Where llama.cpp uses kernels this module does not mirror (its "tiled" K-quant GEMM for
    /// `m ≥ 8`, the 4-row repacked Q4_K GEMM for `m ≥ 4`), the fast kernels are used and results
    /// differ from llama.cpp in the last bits. Verified bit-for-bit against libggml-cpu for
    /// `vec_dot` and `gemv_q4_K_8x8` (see the tests). Slower than [`Q8Order::Fast`] for
    /// Q4_0/Q5_0/Q8_0 with `m ≥ 2` and for Q4_K with small `m`. The portable path ignores this.
    Ggml,
}

/// `y[i, j] = Σ_blocks d_w·d_x·(integer block dot)`: `x` is `m × k` f32 row-major, quantized per
/// row like ggml (Q8_0 for 32-element weight blocks, Q8_K for K-quants; see
/// [`QuantizedActivations`]); `w` holds `n` rows of `k` elements of type `ty`; `y` is `m × n`
/// row-major and fully overwritten. Uses [`Q8Order::Fast`].
///
/// Weight types: Q4_0, Q5_0, Q8_0, Q4_K, Q5_K, Q6_K. F32/F16/BF16 weights are delegated to
/// [`crate::matmul_qt`] (f32 activations). Errors (never panics) on other types, wrong buffer
/// lengths or a `k` that is not a whole number of blocks.
pub fn matmul_qt_q8(
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    matmul_qt_q8_ordered(isa(), Q8Order::Fast, x, m, k, w, ty, n, y)
}

/// [`matmul_qt_q8`] on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qt_q8_with(
    isa: Isa,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    matmul_qt_q8_ordered(isa, Q8Order::Fast, x, m, k, w, ty, n, y)
}

/// [`matmul_qt_q8`] on an explicit ISA with an explicit summation order.
#[allow(clippy::too_many_arguments)]
pub fn matmul_qt_q8_ordered(
    isa: Isa,
    order: Q8Order,
    x: &[f32],
    m: usize,
    k: usize,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let Some(act) = q8_activation_type(ty) else {
        return match ty {
            GgmlType::F32 | GgmlType::F16 | GgmlType::BF16 => matmul_qt_with(isa, x, m, k, w, ty, n, y),
            _ => Err(KernelError::UnsupportedType(ty)),
        };
    };
    let Some(row_bytes) = crate::check_matmul(&NAMES, ty, m, k, n, Some(x.len()), w.len(), y)? else {
        return Ok(());
    };
    let xq = quantize_activations_with(isa, x, m, k, act)?;
    run(isa, order, &xq, w, ty, n, row_bytes, y);
    Ok(())
}

/// [`matmul_qt_q8`] with activations already quantized by [`quantize_activations`]
/// (`xq.act_type()` must be [`q8_activation_type`]`(ty)`; `m`, `k` are taken from `xq`).
pub fn matmul_qt_q8_pre(
    xq: &QuantizedActivations,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    matmul_qt_q8_pre_ordered(isa(), Q8Order::Fast, xq, w, ty, n, y)
}

/// [`matmul_qt_q8_pre`] on an explicit ISA with an explicit summation order.
pub fn matmul_qt_q8_pre_ordered(
    isa: Isa,
    order: Q8Order,
    xq: &QuantizedActivations,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    y: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    if q8_activation_type(ty) != Some(xq.ty) {
        return Err(KernelError::UnsupportedType(ty));
    }
    let (m, k) = (xq.m, xq.k);
    let Some(row_bytes) = crate::check_matmul(&NAMES, ty, m, k, n, None, w.len(), y)? else {
        return Ok(());
    };
    run(isa, order, xq, w, ty, n, row_bytes, y);
    Ok(())
}

/// One task's share of the matmul: weight rows `rows` against every activation row.
pub(crate) struct Task<'a> {
    pub ty: GgmlType,
    pub order: Q8Order,
    pub xq: &'a QuantizedActivations,
    pub w: *const u8,
    pub row_bytes: usize,
    pub n: usize,
    pub y: *mut f32,
    pub rows: Range<usize>,
}

impl Task<'_> {
    /// Weight rows per group: the group stays cache-resident while every activation row passes.
    pub fn group_rows(&self) -> usize {
        (24_576 / self.row_bytes).clamp(2, 64)
    }

    /// Stores `v` at `y[i, j]`.
    ///
    /// # Safety
    /// `i < m`, `j` inside this task's rows.
    #[inline(always)]
    pub unsafe fn put(&self, i: usize, j: usize, v: f32) {
        *self.y.add(i * self.n + j) = v;
    }
}

#[allow(clippy::too_many_arguments)]
fn run(
    isa: Isa,
    order: Q8Order,
    xq: &QuantizedActivations,
    w: &[u8],
    ty: GgmlType,
    n: usize,
    row_bytes: usize,
    y: &mut [f32],
) {
    let (wp, yp) = (SyncPtr(w.as_ptr() as *mut u8), SyncPtr(y.as_mut_ptr()));
    // Per task at least ~32 KiB of weights or ~1 M multiply-adds, whichever comes first.
    let macs_per_row = xq.m * xq.k;
    let min_rows = (32_768 / row_bytes).min((1 << 20) / macs_per_row.max(1)).max(1);
    for_ranges(n, min_rows, 8, |rows| {
        let t = Task { ty, order, xq, w: wp.get(), row_bytes, n, y: yp.get(), rows };
        match isa {
            // SAFETY: `checked` verified the ISA; `rows` is this task's disjoint output columns,
            // and the buffers were validated by the entry point.
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 if x86::has_vnni() => unsafe { x86::run_vnni(&t) },
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 | Isa::Avx2 => unsafe { x86::run_avx2(&t) },
            _ => unsafe { scalar::run(&t) },
        }
    });
}

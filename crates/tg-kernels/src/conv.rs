//! Sliding-window kernels over 2-D planes (1-D is a plane of height 1): direct grouped
//! convolution, im2col (the unfolded windows a matmul turns into a convolution) and max /
//! average pooling.
//!
//! Every kernel works one output row at a time: for each window tap it finds the output
//! columns whose input column is inside the plane (the rest read padding) and, where the
//! column stride is 1, runs the tap over them as one vector loop; other strides take a
//! scalar loop. Rows are split across threads.

use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::simd::Simd;
use crate::{check_len, mul, Isa, KernelError};

/// Output rows per task below which a window kernel stays on one thread (times the work of
/// a row, see each kernel).
const MIN_WORK_PER_TASK: usize = 1 << 15;

/// The geometry of a window over `[n, c, h, w]` planes: the window's size, strides,
/// dilations and padding per axis (`[height, width]`; a 1-D window has height 1, stride 1,
/// no padding along it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window2d {
    /// Batch.
    pub n: usize,
    /// Input channels.
    pub c: usize,
    /// Input height and width.
    pub in_hw: [usize; 2],
    /// Window height and width.
    pub size: [usize; 2],
    /// Strides (≥ 1).
    pub stride: [usize; 2],
    /// Dilations (≥ 1).
    pub dilation: [usize; 2],
    /// Padding before (top, left).
    pub pad_begin: [usize; 2],
    /// Padding after (bottom, right).
    pub pad_end: [usize; 2],
}

impl Window2d {
    /// Output height and width, or an error when the window is malformed, longer than the
    /// padded input, or its padded lengths, extents or tap count overflow `usize` (so the
    /// kernels' index arithmetic cannot wrap).
    pub fn out_hw(&self) -> Result<[usize; 2], KernelError> {
        let mut o = [0; 2];
        for (a, len) in o.iter_mut().enumerate() {
            if self.size[a] == 0 || self.stride[a] == 0 || self.dilation[a] == 0 {
                return Err(KernelError::Shape(format!("window {:?}: sizes, strides and dilations must be >= 1", self)));
            }
            let padded = self.in_hw[a].checked_add(self.pad_begin[a]).and_then(|p| p.checked_add(self.pad_end[a]));
            let extent = self.dilation[a].checked_mul(self.size[a] - 1).and_then(|e| e.checked_add(1));
            let (Some(padded), Some(extent)) = (padded, extent) else { return Err(KernelError::Overflow("window: padded length or extent")) };
            if padded < extent {
                return Err(KernelError::Shape(format!("window {:?}: padded input {padded} is shorter than the window's extent {extent}", self)));
            }
            *len = (padded - extent) / self.stride[a] + 1;
        }
        mul("window: taps", self.size[0], self.size[1])?;
        Ok(o)
    }

    fn taps(&self) -> usize {
        self.size[0] * self.size[1]
    }

    /// Elements of the im2col matrix [`im2col_f32`] writes (`n·c·taps·oh·ow`), the scratch
    /// [`conv2d_gemm_f32`] needs.
    pub fn im2col_len(&self) -> Result<usize, KernelError> {
        let [oh, ow] = self.out_hw()?;
        mul("im2col", mul("im2col", mul("im2col", self.n, self.c)?, self.taps())?, mul("im2col", oh, ow)?)
    }

    /// Input row of output row `o`, tap row `j`, or `None` for padding.
    #[inline(always)]
    fn in_row(&self, o: usize, j: usize) -> Option<usize> {
        let p = (o * self.stride[0] + j * self.dilation[0]).checked_sub(self.pad_begin[0])?;
        (p < self.in_hw[0]).then_some(p)
    }

    /// Output columns `lo..hi` whose input column for tap column `j` is inside the row, and
    /// the input column of `lo`.
    #[inline(always)]
    fn cols(&self, ow: usize, j: usize) -> (usize, usize, usize) {
        let (s, off, w) = (self.stride[1], j * self.dilation[1], self.in_hw[1]);
        let pad = self.pad_begin[1];
        // Smallest o with o·s + off ≥ pad, and one past the largest with o·s + off − pad < w.
        let lo = pad.saturating_sub(off).div_ceil(s);
        let hi = if w + pad > off { ((w + pad - off - 1) / s + 1).min(ow) } else { 0 };
        if lo >= hi {
            // No column: an empty range (whose input column is never read).
            return (hi, hi, 0);
        }
        (lo, hi, lo * s + off - pad)
    }
}

/// `out[i] += a · x[i]` for `i < n`.
#[inline(always)]
unsafe fn axpy<S: Simd>(a: f32, x: *const f32, out: *mut f32, n: usize) {
    let (l, av) = (S::LANES, S::splat(a));
    let mut i = 0;
    while i + l <= n {
        S::store(out.add(i), S::fma(av, S::load(x.add(i)), S::load(out.add(i))));
        i += l;
    }
    if i < n {
        let t = n - i;
        S::store_tail(out.add(i), t, S::fma(av, S::load_tail(x.add(i), t), S::load_tail(out.add(i), t)));
    }
}

struct ConvTask {
    x: *const f32,
    w: *const f32,
    out: *mut f32,
    g: Window2d,
    m: usize,
    groups: usize,
    ohw: [usize; 2],
    /// Output rows `(n·m + oc)·oh + oy`.
    rows: std::ops::Range<usize>,
}

impl IsaTask for ConvTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let ConvTask { x, w, out, g, m, groups, ohw: [oh, ow], rows } = self;
        let (cg, mg) = (g.c / groups, m / groups);
        let [ih, iw] = g.in_hw;
        let [kh, kw] = g.size;
        for r in rows {
            let (plane, oy) = (r / oh, r % oh);
            let (b, oc) = (plane / m, plane % m);
            let c0 = (oc / mg) * cg;
            let orow = out.add(r * ow);
            std::ptr::write_bytes(orow, 0, ow);
            for ci in 0..cg {
                let xplane = x.add((b * g.c + c0 + ci) * ih * iw);
                let wk = w.add((oc * cg + ci) * kh * kw);
                for jy in 0..kh {
                    let Some(iy) = g.in_row(oy, jy) else { continue };
                    let xrow = xplane.add(iy * iw);
                    for jx in 0..kw {
                        let wv = *wk.add(jy * kw + jx);
                        let (lo, hi, ix) = g.cols(ow, jx);
                        if g.stride[1] == 1 {
                            axpy::<S>(wv, xrow.add(ix), orow.add(lo), hi - lo);
                        } else {
                            for (k, o) in (lo..hi).enumerate() {
                                *orow.add(o) += wv * *xrow.add(ix + k * g.stride[1]);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Direct grouped convolution (cross-correlation) of `x [n, c, h, w]` with
/// `weights [m, c/groups, kh, kw]` into `out [n, m, oh, ow]` (see [`Window2d`]); padding reads
/// zeros. Accumulates in f32 in tap order.
pub fn conv2d_f32(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    conv2d_f32_with(isa(), g, groups, m, x, weights, out)
}

/// [`conv2d_f32`] on an explicit ISA.
pub fn conv2d_f32_with(isa: Isa, g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let [oh, ow] = g.out_hw()?;
    if groups == 0 || !g.c.is_multiple_of(groups) || !m.is_multiple_of(groups) {
        return Err(KernelError::Shape(format!("conv2d: {} input and {m} output channels are not multiples of {groups} groups", g.c)));
    }
    let planes = mul("conv2d", g.n, g.c)?;
    check_len("conv2d: x", mul("conv2d: x", planes, mul("conv2d: x", g.in_hw[0], g.in_hw[1])?)?, x.len())?;
    let per_oc = mul("conv2d: weights", g.c / groups, g.taps())?;
    check_len("conv2d: weights", mul("conv2d: weights", m, per_oc)?, weights.len())?;
    let rows = mul("conv2d: out", mul("conv2d: out", g.n, m)?, oh)?;
    check_len("conv2d: out", mul("conv2d: out", rows, ow)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let (xp, wp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(weights.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let per_row = (per_oc * ow).max(1);
    for_ranges(rows, (MIN_WORK_PER_TASK / per_row).max(1), 1, |rows| run_on(isa, ConvTask { x: xp.get(), w: wp.get(), out: op.get(), g: *g, m, groups, ohw: [oh, ow], rows }));
    Ok(())
}

/// The unfolded windows of `x [n, c, h, w]`: `out [n, c·kh·kw, oh·ow]` with row
/// `(ch·kh + jy)·kw + jx` holding, for every output position, the input element its tap
/// `(jy, jx)` reads (0 for padding). With groups this is `[n, g, (c/g)·taps, oh·ow]`, the same
/// memory. A convolution is then `weights [m, (c/g)·taps] · out` per group.
pub fn im2col_f32(g: &Window2d, x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let [oh, ow] = g.out_hw()?;
    let planes = mul("im2col", g.n, g.c)?;
    check_len("im2col: x", mul("im2col: x", planes, mul("im2col: x", g.in_hw[0], g.in_hw[1])?)?, x.len())?;
    let p = mul("im2col: out", oh, ow)?;
    let rows = mul("im2col: out", planes, g.taps())?;
    check_len("im2col: out", mul("im2col: out", rows, p)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let (xp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let [ih, iw] = g.in_hw;
    let [kh, kw] = g.size;
    let g = *g;
    for_ranges(rows, (MIN_WORK_PER_TASK / p.max(1)).max(1), 1, |rows| {
        for r in rows {
            let (plane, tap) = (r / (kh * kw), r % (kh * kw));
            let (jy, jx) = (tap / kw, tap % kw);
            // SAFETY: row `r` of `out` is written by this task only; reads stay in `x`.
            unsafe {
                let xplane = xp.get().add(plane * ih * iw) as *const f32;
                let orow = op.get().add(r * p);
                let (lo, hi, ix) = g.cols(ow, jx);
                for oy in 0..oh {
                    let o = std::slice::from_raw_parts_mut(orow.add(oy * ow), ow);
                    let Some(iy) = g.in_row(oy, jy) else {
                        o.fill(0.0);
                        continue;
                    };
                    let xrow = xplane.add(iy * iw);
                    o[..lo].fill(0.0);
                    o[hi..].fill(0.0);
                    if g.stride[1] == 1 {
                        std::ptr::copy_nonoverlapping(xrow.add(ix), o.as_mut_ptr().add(lo), hi - lo);
                    } else {
                        for (k, v) in o[lo..hi].iter_mut().enumerate() {
                            *v = *xrow.add(ix + k * g.stride[1]);
                        }
                    }
                }
            }
        }
    });
    Ok(())
}

/// What a pooling window computes (as `tg_ir::PoolKind`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pool {
    /// Maximum of the taps inside the input.
    Max,
    /// Mean of the taps inside the input.
    Avg,
    /// Sum of the taps inside the input over the window's size.
    AvgPadded,
}

struct PoolTask {
    x: *const f32,
    out: *mut f32,
    g: Window2d,
    kind: Pool,
    ohw: [usize; 2],
    rows: std::ops::Range<usize>,
}

impl IsaTask for PoolTask {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let PoolTask { x, out, g, kind, ohw: [oh, ow], rows } = self;
        let [ih, iw] = g.in_hw;
        let [kh, kw] = g.size;
        let l = S::LANES;
        for r in rows {
            let (plane, oy) = (r / oh, r % oh);
            let xplane = x.add(plane * ih * iw);
            let orow = out.add(r * ow);
            let init = if kind == Pool::Max { f32::NEG_INFINITY } else { 0.0 };
            std::slice::from_raw_parts_mut(orow, ow).fill(init);
            let mut valid_rows = 0usize;
            for jy in 0..kh {
                let Some(iy) = g.in_row(oy, jy) else { continue };
                valid_rows += 1;
                let xrow = xplane.add(iy * iw);
                for jx in 0..kw {
                    let (lo, hi, ix) = g.cols(ow, jx);
                    let (src, dst, n) = (xrow.add(ix), orow.add(lo), hi - lo);
                    if g.stride[1] == 1 {
                        let mut i = 0;
                        while i < n {
                            let t = (n - i).min(l);
                            let (a, v) = if t == l { (S::load(dst.add(i)), S::load(src.add(i))) } else { (S::load_tail(dst.add(i), t), S::load_tail(src.add(i), t)) };
                            let y = if kind == Pool::Max { S::max(a, v) } else { S::add(a, v) };
                            if t == l {
                                S::store(dst.add(i), y)
                            } else {
                                S::store_tail(dst.add(i), t, y)
                            }
                            i += t;
                        }
                    } else {
                        for k in 0..n {
                            let (a, v) = (*dst.add(k), *src.add(k * g.stride[1]));
                            *dst.add(k) = if kind == Pool::Max {
                                if a > v {
                                    a
                                } else {
                                    v
                                }
                            } else {
                                a + v
                            };
                        }
                    }
                }
            }
            match kind {
                Pool::Max => {}
                Pool::AvgPadded => {
                    let inv = 1.0 / g.taps() as f32;
                    std::slice::from_raw_parts_mut(orow, ow).iter_mut().for_each(|v| *v *= inv);
                }
                Pool::Avg => {
                    // The window is a box: its taps inside the input are (valid rows) × (valid
                    // columns), the latter per output column.
                    let o = std::slice::from_raw_parts_mut(orow, ow);
                    let mut cols = vec![0u32; ow];
                    for jx in 0..kw {
                        let (lo, hi, _) = g.cols(ow, jx);
                        cols[lo..hi].iter_mut().for_each(|c| *c += 1);
                    }
                    for (v, &c) in o.iter_mut().zip(&cols) {
                        let count = valid_rows * c as usize;
                        *v = if count == 0 { 0.0 } else { *v / count as f32 };
                    }
                }
            }
        }
    }
}

/// Pooling of `x [n, c, h, w]` into `out [n, c, oh, ow]`: per window the maximum (padding
/// ignored; a window entirely in padding gives −∞) or the mean ([`Pool::Avg`]: of the taps
/// inside the input, 0 for none; [`Pool::AvgPadded`]: the sum over the window's size).
pub fn pool2d_f32(g: &Window2d, kind: Pool, x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    pool2d_f32_with(isa(), g, kind, x, out)
}

/// [`pool2d_f32`] on an explicit ISA.
pub fn pool2d_f32_with(isa: Isa, g: &Window2d, kind: Pool, x: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let [oh, ow] = g.out_hw()?;
    let planes = mul("pool2d", g.n, g.c)?;
    check_len("pool2d: x", mul("pool2d: x", planes, mul("pool2d: x", g.in_hw[0], g.in_hw[1])?)?, x.len())?;
    let rows = mul("pool2d: out", planes, oh)?;
    check_len("pool2d: out", mul("pool2d: out", rows, ow)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let (xp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let per_row = (g.taps() * ow).max(1);
    for_ranges(rows, (MIN_WORK_PER_TASK / per_row).max(1), 1, |rows| run_on(isa, PoolTask { x: xp.get(), out: op.get(), g: *g, kind, ohw: [oh, ow], rows }));
    Ok(())
}

/// [`conv2d_f32`] as im2col into a scratch buffer and one batched f32 matmul per group
/// (`weights [m/g, (c/g)·taps] · cols [(c/g)·taps, oh·ow]`): the same result (sums in a
/// different order), far faster for wide kernels, strides above 1 and many channels, at the
/// price of `n·c·taps·oh·ow` floats of scratch.
pub fn conv2d_gemm_f32(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    let [oh, ow] = g.out_hw()?;
    if groups == 0 || !g.c.is_multiple_of(groups) || !m.is_multiple_of(groups) {
        return Err(KernelError::Shape(format!("conv2d: {} input and {m} output channels are not multiples of {groups} groups", g.c)));
    }
    let p = mul("conv2d: out", oh, ow)?;
    let k = mul("conv2d: weights", g.c / groups, g.taps())?;
    check_len("conv2d: weights", mul("conv2d: weights", m, k)?, weights.len())?;
    check_len("conv2d: out", mul("conv2d: out", mul("conv2d: out", g.n, m)?, p)?, out.len())?;
    let len = g.im2col_len()?;
    // One scratch per thread, kept between calls: a fresh multi-megabyte buffer per
    // convolution costs its page faults every time. im2col writes every element.
    SCRATCH.with(|cell| {
        let mut cols = cell.take();
        if cols.len() < len {
            cols = vec![0f32; len];
        }
        let r = conv_gemm_with(g, groups, m, k, p, x, weights, &mut cols[..len], out);
        cell.replace(cols);
        r
    })
}

/// [`conv2d_f32`] as an implicit GEMM: for each image, group and block of output positions
/// (about 256 KiB of im2col columns), that block's unfolded windows are written into a
/// per-thread `[(c/g)·taps, w]` panel and multiplied by the group's weights with the f32
/// matmul's register tiles. The result of [`conv2d_gemm_f32`] (the same sums in the same
/// order) without its `n·c·taps·oh·ow` scratch: the unfolded matrix never exists whole, and
/// each panel is read from cache by every row tile of the weights.
///
/// A 3×3 window of stride 1 with enough channels (see [`winograd_applies`]) is computed
/// by Winograd's F(4×4, 3×3) or F(2×2, 3×3) instead ([`conv2d_winograd_f32_with`]) unless `TG_WINOGRAD=off`.
pub fn conv2d_implicit_f32(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], out: &mut [f32]) -> Result<(), KernelError> {
    conv2d_auto(g, groups, m, x, weights, None, out)
}

/// What a convolution does to each block of its output while it is in cache:
/// `act(y + bias[m] + residual)`, `bias` one value per output channel and `residual` (when
/// given) a tensor of the output's shape, added before the activation (a residual
/// connection `x + conv(h)` of a ResNet or UNet block).
#[derive(Debug, Clone, Copy)]
pub struct ConvEpilogue<'a> {
    /// One value per output channel.
    pub bias: &'a [f32],
    /// The activation, last.
    pub act: crate::Act,
    /// Added element by element, before the activation.
    pub residual: Option<&'a [f32]>,
}

impl<'a> ConvEpilogue<'a> {
    /// `act(y + bias[m])`.
    pub fn bias_act(bias: &'a [f32], act: crate::Act) -> Self {
        ConvEpilogue { bias, act, residual: None }
    }

    /// Checks the bias (`m` values) and the residual (`out_len` values).
    fn check(&self, m: usize, out_len: usize) -> Result<(), KernelError> {
        check_len("conv2d: bias", m, self.bias.len())?;
        match self.residual {
            Some(r) => check_len("conv2d: residual", out_len, r.len()),
            None => Ok(()),
        }
    }
}

/// [`conv2d_implicit_f32`] with the fused epilogue `act(conv + bias[m])` applied to each
/// block of the output right after it is computed (`bias` has `m` elements); Winograd where
/// it applies, as there.
pub fn conv2d_bias_act_f32(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], bias: &[f32], act: crate::Act, out: &mut [f32]) -> Result<(), KernelError> {
    conv2d_auto(g, groups, m, x, weights, Some(ConvEpilogue::bias_act(bias, act)), out)
}

/// [`conv2d_bias_act_f32`] with a residual added before the activation:
/// `act(conv + bias[m] + residual)`, `residual` shaped like the output.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_bias_residual_act_f32(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], bias: &[f32], residual: &[f32], act: crate::Act, out: &mut [f32]) -> Result<(), KernelError> {
    conv2d_auto(g, groups, m, x, weights, Some(ConvEpilogue { bias, act, residual: Some(residual) }), out)
}

/// The largest Winograd tile the convolution kernels use: 4 by default; `TG_WINOGRAD=2`
/// keeps to F(2×2, 3×3) and `TG_WINOGRAD=off` switches Winograd off (for comparisons).
fn winograd_max_tile() -> usize {
    static MAX: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *MAX.get_or_init(|| match std::env::var("TG_WINOGRAD").as_deref() {
        Ok("off" | "0" | "false") => 0,
        Ok("2") => 2,
        _ => 4,
    })
}

/// Whether [`conv2d_implicit_f32`] computes this convolution (`groups` groups, `m` output
/// channels) by Winograd on the selected ISA: a 3×3 window of stride 1 and dilation 1, one
/// group, padding of at most 1 per side, at least 16 input and output channels, and a plane
/// with enough tiles for the products to outweigh the transforms (see [`winograd_tile`]).
pub fn winograd_applies(g: &Window2d, groups: usize, m: usize) -> bool {
    winograd_tile(g, groups, m).is_some()
}

/// The output tile the automatic choice takes for this convolution on the selected ISA: 4
/// (F(4×4, 3×3)) on planes of at least 64 such tiles with 8-lane vectors (128 with 16 lanes,
/// where the implicit GEMM is faster), else 2 (F(2×2, 3×3)) on planes of as many 2×2 tiles;
/// `None` where Winograd does not apply (measurements in the `winograd` module).
pub fn winograd_tile(g: &Window2d, groups: usize, m: usize) -> Option<usize> {
    g.out_hw().ok().and_then(|o| crate::winograd::tile(crate::isa(), g, groups, m, o))
}

/// The epilogue over a whole output `[N, M, p]` (after the direct kernel, or for an empty
/// window): the residual added, then the bias and activation. The caller has checked the
/// lengths ([`ConvEpilogue::check`]).
fn epilogue_rows(isa: Isa, out: &mut [f32], e: ConvEpilogue<'_>, p: usize) -> Result<(), KernelError> {
    if let Some(r) = e.residual {
        for (o, &v) in out.iter_mut().zip(r) {
            *o += v;
        }
    }
    crate::bias_act_rows_with(isa, out, e.bias, p, e.act)
}

/// Output channels per group below which [`conv2d_auto`] takes the direct kernel.
const DIRECT_MAX_OUT: usize = 4;

fn conv2d_auto(g: &Window2d, groups: usize, m: usize, x: &[f32], weights: &[f32], epilogue: Option<ConvEpilogue<'_>>, out: &mut [f32]) -> Result<(), KernelError> {
    let tile = match (winograd_tile(g, groups, m), winograd_max_tile()) {
        (Some(t), max) if t <= max => Some(t),
        // F(4×4) is chosen but F(2×2) is asked for: F(2×2) on the same plane.
        (Some(_), 2) => Some(2),
        _ => None,
    };
    // Fewer output channels per group than the GEMM's register tile has rows (the terrain
    // UNet's last 32→1 3×3 conv): the tile's rows would be mostly idle and the unfolded panel
    // is built for one output row, so the direct kernel, which reads the input in place, is
    // faster (AVX-512 Xeon, 32→1 3×3 on 128×128: see `examples/bench_conv`).
    if tile.is_none() && m / groups.max(1) < DIRECT_MAX_OUT {
        if let Some(e) = epilogue {
            e.check(m, out.len())?;
        }
        conv2d_f32_with(crate::isa(), g, groups, m, x, weights, out)?;
        let [oh, ow] = g.out_hw()?;
        return match epilogue {
            Some(e) => epilogue_rows(crate::isa(), out, e, oh * ow),
            None => Ok(()),
        };
    }
    match tile {
        Some(t) => conv2d_winograd_f32_with(crate::isa(), t, g, groups, m, x, weights, epilogue, out),
        None => conv2d_implicit_f32_with(crate::isa(), g, groups, m, x, weights, epilogue, out),
    }
}

/// [`conv2d_f32`] (with the optional bias-and-activation epilogue of
/// [`conv2d_bias_act_f32`]) by Winograd's F(`tile`×`tile`, 3×3), `tile` 2 or 4, on an
/// explicit ISA, whatever the plane size; an error where the window is not one Winograd
/// computes (a 3×3 window of stride 1 and dilation 1, one group, padding of at most 1 per
/// side, at least 16 input and output channels, an output of at least 4×4).
#[allow(clippy::too_many_arguments)]
pub fn conv2d_winograd_f32_with(
    isa: Isa,
    tile: usize,
    g: &Window2d,
    groups: usize,
    m: usize,
    x: &[f32],
    weights: &[f32],
    epilogue: Option<ConvEpilogue<'_>>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = crate::isa::checked(isa)?;
    let [oh, ow] = g.out_hw()?;
    if tile != 2 && tile != 4 {
        return Err(KernelError::Shape(format!("conv2d (Winograd): tile {tile}; F(2x2, 3x3) and F(4x4, 3x3) exist")));
    }
    if !crate::winograd::fits(g, groups, m, [oh, ow]) {
        return Err(KernelError::Shape(format!(
            "conv2d (Winograd): window {g:?} with {groups} groups and {m} outputs is not a 3x3, stride-1, one-group convolution of >= 16 channels with an output of at least 4x4"
        )));
    }
    if let Some(e) = epilogue {
        e.check(m, out.len())?;
    }
    check_len("conv2d: x", mul("conv2d: x", mul("conv2d: x", g.n, g.c)?, mul("conv2d: x", g.in_hw[0], g.in_hw[1])?)?, x.len())?;
    check_len("conv2d: weights", mul("conv2d: weights", m, g.c * 9)?, weights.len())?;
    check_len("conv2d: out", mul("conv2d: out", mul("conv2d: out", g.n, m)?, mul("conv2d: out", oh, ow)?)?, out.len())?;
    crate::winograd::conv3x3_winograd(isa, tile, g, m, x, weights, epilogue, out);
    Ok(())
}

/// [`conv2d_implicit_f32`] (with an optional bias-and-activation epilogue, see
/// [`conv2d_bias_act_f32`]) on an explicit ISA.
#[allow(clippy::too_many_arguments)]
pub fn conv2d_implicit_f32_with(
    isa: Isa,
    g: &Window2d,
    groups: usize,
    m: usize,
    x: &[f32],
    weights: &[f32],
    epilogue: Option<ConvEpilogue<'_>>,
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = crate::isa::checked(isa)?;
    if let Some(e) = epilogue {
        e.check(m, out.len())?;
    }
    let [oh, ow] = g.out_hw()?;
    if groups == 0 || !g.c.is_multiple_of(groups) || !m.is_multiple_of(groups) {
        return Err(KernelError::Shape(format!("conv2d: {} input and {m} output channels are not multiples of {groups} groups", g.c)));
    }
    let p = mul("conv2d: out", oh, ow)?;
    let cg = g.c / groups;
    let k = mul("conv2d: weights", cg, g.taps())?;
    check_len("conv2d: x", mul("conv2d: x", mul("conv2d: x", g.n, g.c)?, mul("conv2d: x", g.in_hw[0], g.in_hw[1])?)?, x.len())?;
    check_len("conv2d: weights", mul("conv2d: weights", m, k)?, weights.len())?;
    check_len("conv2d: out", mul("conv2d: out", mul("conv2d: out", g.n, m)?, p)?, out.len())?;
    if out.is_empty() {
        return Ok(());
    }
    let mg = m / groups;
    if k == 0 {
        out.fill(0.0);
        if let Some(e) = epilogue {
            return epilogue_rows(isa, out, e, p);
        }
        return Ok(());
    }
    let bp = SyncPtr(epilogue.map_or(std::ptr::null_mut(), |e| e.bias.as_ptr() as *mut f32));
    let rp = SyncPtr(epilogue.and_then(|e| e.residual).map_or(std::ptr::null_mut(), |r| r.as_ptr() as *mut f32));
    let act = epilogue.map(|e| e.act);
    let cb = ((1usize << 16) / k).clamp(64, p.max(64)) / 64 * 64;
    let blocks = p.div_ceil(cb);
    // Fewer column blocks than threads (a small plane of one image): the output channels are
    // cut too, in whole register tiles (12 rows: 6- and 4-row tiles divide it), into one
    // chunk per thread at most, since each chunk builds its own panel.
    let threads = crate::par::threads();
    let items = g.n * groups * blocks;
    let chunks = if threads > 1 && items < threads { threads.div_ceil(items).min(mg / 24).max(1) } else { 1 };
    let rows = (mg.div_ceil(chunks)).next_multiple_of(12).min(mg);
    let chunks = mg.div_ceil(rows);
    let units = g.n * groups * blocks * chunks;
    let min_units = ((1usize << 19) / (2 * rows * cb.min(p) * k).max(1)).max(1);
    let (xp, wp, op) = (SyncPtr(x.as_ptr() as *mut f32), SyncPtr(weights.as_ptr() as *mut f32), SyncPtr(out.as_mut_ptr()));
    let g = *g;
    let [ih, iw] = g.in_hw;
    let [kh, kw] = g.size;
    let pointwise = g.size == [1, 1] && g.stride == [1, 1] && g.pad_begin == [0, 0] && g.pad_end == [0, 0];
    for_ranges(units, min_units, 1, |r| {
        let mut panel = PANEL.with(|c| c.take());
        for u in r {
            let (item, rest) = (u / (blocks * chunks), u % (blocks * chunks));
            let (blk, chunk) = (rest / chunks, rest % chunks);
            let (b, gi) = (item / groups, item % groups);
            let (j0, j1) = (blk * cb, ((blk + 1) * cb).min(p));
            // Output channels r0..r0 + mr of the group.
            let r0 = chunk * rows;
            let mr = rows.min(mg - r0);
            let w = j1 - j0;
            let ps = crate::matmul_f32::panel_stride(w);
            if pointwise {
                // Every element read is copied in below: no zero fill.
                crate::grow(&mut panel, k * ps);
                // A 1×1 window of stride 1 without padding: the panel is the input's rows of
                // `p` positions at columns j0..j1, copied (read in place, rows `p` apart, they
                // would alias in L1).
                // SAFETY: as below; rows gi·cg.. of image b at columns j0..j1.
                unsafe {
                    let xb = xp.get().add((b * g.c + gi * cg) * p + j0) as *const f32;
                    for row in 0..k {
                        std::ptr::copy_nonoverlapping(xb.add(row * p), panel.as_mut_ptr().add(row * ps), w);
                    }
                    let a = wp.get().add((gi * mg + r0) * k) as *const f32;
                    let c = op.get().add((b * m + gi * mg + r0) * p + j0);
                    crate::matmul_f32::gemm_panel_strided(isa, a, k, mr, panel.as_ptr(), ps, w, k, c, p);
                    if let Some(act) = act {
                        let res = if rp.get().is_null() { std::ptr::null() } else { rp.get().add((b * m + gi * mg + r0) * p + j0) as *const f32 };
                        crate::fused::epilogue::bias_act_block(isa, c, p, mr, w, bp.get().add(gi * mg + r0) as *const f32, res, act);
                    }
                }
                continue;
            }
            // The window's padding is the panel's zeros.
            panel.clear();
            panel.resize(k * ps, 0.0);
            // SAFETY: reads stay in `x` (the window arithmetic was checked by `out_hw`);
            // this unit alone writes rows gi·mg + r0.. (mr of them) of item b's output at
            // columns j0..j1.
            unsafe {
                for row in 0..k {
                    let (ci, tap) = (row / (kh * kw), row % (kh * kw));
                    let (jy, jx) = (tap / kw, tap % kw);
                    let xplane = xp.get().add((b * g.c + gi * cg + ci) * ih * iw) as *const f32;
                    let (lo, hi, ix0) = g.cols(ow, jx);
                    let prow = &mut panel[row * ps..row * ps + w];
                    let mut pos = j0;
                    while pos < j1 {
                        let (oy, ox0) = (pos / ow, pos % ow);
                        let ox1 = (ox0 + (j1 - pos)).min(ow);
                        let seg = &mut prow[pos - j0..pos - j0 + (ox1 - ox0)];
                        if let Some(iy) = g.in_row(oy, jy) {
                            let (a, e) = (ox0.max(lo), ox1.min(hi));
                            if a < e {
                                let xrow = xplane.add(iy * iw + ix0 + (a - lo) * g.stride[1]);
                                let dst = &mut seg[a - ox0..e - ox0];
                                if g.stride[1] == 1 {
                                    std::ptr::copy_nonoverlapping(xrow, dst.as_mut_ptr(), e - a);
                                } else {
                                    for (t, v) in dst.iter_mut().enumerate() {
                                        *v = *xrow.add(t * g.stride[1]);
                                    }
                                }
                            }
                        }
                        pos += ox1 - ox0;
                    }
                }
                let a = wp.get().add((gi * mg + r0) * k) as *const f32;
                let c = op.get().add((b * m + gi * mg + r0) * p + j0);
                crate::matmul_f32::gemm_panel_strided(isa, a, k, mr, panel.as_ptr(), ps, w, k, c, p);
                if let Some(act) = act {
                    let res = if rp.get().is_null() { std::ptr::null() } else { rp.get().add((b * m + gi * mg + r0) * p + j0) as *const f32 };
                    crate::fused::epilogue::bias_act_block(isa, c, p, mr, w, bp.get().add(gi * mg + r0) as *const f32, res, act);
                }
            }
        }
        PANEL.with(|c| c.replace(panel));
    });
    Ok(())
}

thread_local! {
    static PANEL: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

thread_local! {
    static SCRATCH: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

#[allow(clippy::too_many_arguments)]
fn conv_gemm_with(g: &Window2d, groups: usize, m: usize, k: usize, p: usize, x: &[f32], weights: &[f32], cols: &mut [f32], out: &mut [f32]) -> Result<(), KernelError> {
    im2col_f32(g, x, cols)?;
    if out.is_empty() {
        return Ok(());
    }
    let mg = m / groups;
    let a = crate::MatView { data: weights, offset: 0, rows: mg, cols: k, row_stride: k, col_stride: 1, batch_strides: [0, mg * k] };
    let b = crate::MatView { data: cols, offset: 0, rows: k, cols: p, row_stride: p, col_stride: 1, batch_strides: [groups * k * p, k * p] };
    crate::matmul_f32([g.n, groups], &a, &b, out)
}

//! Batched f32 matmul over strided views, with broadcasting batch dimensions.
//!
//! Two register-blocked micro-kernels cover the layouts that matter without packing:
//! * **dot form** — `a` rows and `b` columns both contiguous along `k` (`A·Bᵀ` with `B` stored
//!   `[n, k]`, e.g. attention `Q·Kᵀ`): an `MR × NR` tile of vector accumulators runs along `k`,
//!   then the lanes are summed (`hsum4`);
//! * **axpy form** — `b` rows contiguous along `n` (`P·V`): `MR` rows × `NV` vectors of columns,
//!   each step broadcasting one `a` element.
//!
//! Any other layout is packed into the dot form first.

// Register-blocked kernels index small fixed-size arrays in loops and pass many scalars.
#![allow(clippy::needless_range_loop, clippy::too_many_arguments)]

use crate::dequant::SimdDecode;
use crate::isa::{checked, isa, run_on, IsaTask};
use crate::par::{for_ranges, SyncPtr};
use crate::simd::Simd;
use crate::{check_len, Isa, KernelError};

/// A strided view of a batch of matrices inside a flat f32 buffer:
/// element `[b0, b1, r, c]` is `data[offset + b0·batch_strides[0] + b1·batch_strides[1] +
/// r·row_stride + c·col_stride]`. A batch stride of 0 broadcasts the matrix over that batch
/// dimension (e.g. one key head shared by a group of query heads).
#[derive(Debug, Clone, Copy)]
pub struct MatView<'a> {
    /// The underlying buffer.
    pub data: &'a [f32],
    /// Offset of element `[0, 0, 0, 0]`.
    pub offset: usize,
    /// Rows of each matrix.
    pub rows: usize,
    /// Columns of each matrix.
    pub cols: usize,
    /// Elements between consecutive rows.
    pub row_stride: usize,
    /// Elements between consecutive columns.
    pub col_stride: usize,
    /// Elements between consecutive matrices along the two batch dimensions.
    pub batch_strides: [usize; 2],
}

impl<'a> MatView<'a> {
    /// A row-major `[batch[0], batch[1], rows, cols]` tensor stored contiguously.
    pub fn row_major(data: &'a [f32], batch: [usize; 2], rows: usize, cols: usize) -> Self {
        MatView { data, offset: 0, rows, cols, row_stride: cols, col_stride: 1, batch_strides: [batch[1] * rows * cols, rows * cols] }
    }

    /// The transpose of this view (rows ↔ columns), e.g. a `[n, k]` key matrix seen as `[k, n]`.
    pub fn t(self) -> Self {
        MatView { rows: self.cols, cols: self.rows, row_stride: self.col_stride, col_stride: self.row_stride, ..self }
    }

    fn check(&self, what: &'static str, batch: [usize; 2]) -> Result<(), KernelError> {
        if batch.contains(&0) || self.rows == 0 || self.cols == 0 {
            return Ok(());
        }
        let max = [
            (batch[0] - 1) as u128 * self.batch_strides[0] as u128,
            (batch[1] - 1) as u128 * self.batch_strides[1] as u128,
            (self.rows - 1) as u128 * self.row_stride as u128,
            (self.cols - 1) as u128 * self.col_stride as u128,
        ]
        .iter()
        .sum::<u128>()
            + self.offset as u128;
        if max >= self.data.len() as u128 {
            return Err(KernelError::Shape(format!("{what}: view reaches element {max} but the buffer holds {}", self.data.len())));
        }
        Ok(())
    }

    /// Pointer to matrix `(b0, b1)`.
    fn base(&self, b0: usize, b1: usize) -> *const f32 {
        self.data.as_ptr().wrapping_add(self.offset + b0 * self.batch_strides[0] + b1 * self.batch_strides[1])
    }
}

// ---------------------------------------------------------------------------------------------
// Micro-kernels (shared with the quantized GEMM).

/// Dot-form tile: `out[r][c] = Σ_{kk<k} a[r][kk] · b[c][kk]` for `MR` rows of `a` and `NR` rows
/// of `b`, all contiguous along `k`.
#[inline(always)]
pub(crate) unsafe fn micro_dot<S: Simd, const MR: usize, const NR: usize>(a: [*const f32; MR], b: [*const f32; NR], k: usize) -> [[f32; NR]; MR] {
    let l = S::LANES;
    let mut acc = [[S::zero(); NR]; MR];
    let mut kk = 0;
    while kk + l <= k {
        let mut bv = [S::zero(); NR];
        for c in 0..NR {
            bv[c] = S::load(b[c].add(kk));
        }
        for r in 0..MR {
            let av = S::load(a[r].add(kk));
            for c in 0..NR {
                acc[r][c] = S::fma(av, bv[c], acc[r][c]);
            }
        }
        kk += l;
    }
    if kk < k {
        let t = k - kk;
        let mut bv = [S::zero(); NR];
        for c in 0..NR {
            bv[c] = S::load_tail(b[c].add(kk), t);
        }
        for r in 0..MR {
            let av = S::load_tail(a[r].add(kk), t);
            for c in 0..NR {
                acc[r][c] = S::fma(av, bv[c], acc[r][c]);
            }
        }
    }
    let mut out = [[0.0f32; NR]; MR];
    let mut i = 0;
    while i + 4 <= MR * NR {
        let v = |j: usize| acc[(i + j) / NR][(i + j) % NR];
        let s = S::hsum4(v(0), v(1), v(2), v(3));
        for (j, x) in s.into_iter().enumerate() {
            out[(i + j) / NR][(i + j) % NR] = x;
        }
        i += 4;
    }
    while i < MR * NR {
        out[i / NR][i % NR] = S::reduce_add(acc[i / NR][i % NR]);
        i += 1;
    }
    out
}

/// Axpy-form tile: `c[r][0..NV·L] = Σ_kk a[r][kk·a_cs] · b[kk·b_rs + 0..NV·L]`, or only the first
/// `cols` columns when `cols < NV·L` (then `NV` must be 1).
#[inline(always)]
unsafe fn micro_axpy<S: Simd, const MR: usize, const NV: usize>(a: [*const f32; MR], a_cs: usize, b: *const f32, b_rs: usize, k: usize, c: [*mut f32; MR], cols: usize) {
    let l = S::LANES;
    let mut acc = [[S::zero(); NV]; MR];
    if cols == NV * l {
        for kk in 0..k {
            let bp = b.add(kk * b_rs);
            let mut bv = [S::zero(); NV];
            for v in 0..NV {
                bv[v] = S::load(bp.add(v * l));
            }
            for r in 0..MR {
                let av = S::splat(*a[r].add(kk * a_cs));
                for v in 0..NV {
                    acc[r][v] = S::fma(av, bv[v], acc[r][v]);
                }
            }
        }
        for r in 0..MR {
            for v in 0..NV {
                S::store(c[r].add(v * l), acc[r][v]);
            }
        }
    } else {
        debug_assert!(NV == 1 && cols < l);
        for kk in 0..k {
            let bv = S::load_tail(b.add(kk * b_rs), cols);
            for r in 0..MR {
                acc[r][0] = S::fma(S::splat(*a[r].add(kk * a_cs)), bv, acc[r][0]);
            }
        }
        for r in 0..MR {
            S::store_tail(c[r], cols, acc[r][0]);
        }
    }
}

/// Rows per register tile.
pub(crate) const MR: usize = 4;

// ---------------------------------------------------------------------------------------------
// Per-matrix drivers.

/// One matrix product `c[i0..i1, :] = a[i0..i1, :] · b` in dot form: `a` rows and `b` columns
/// contiguous along `k` (`a_rs` between `a` rows, `b_cs` between `b` columns).
#[inline(always)]
unsafe fn gemm_dot<S: Simd, const NR: usize>(a: *const f32, a_rs: usize, b: *const f32, b_cs: usize, c: *mut f32, n: usize, k: usize, rows: std::ops::Range<usize>) {
    // Keep a block of `b` columns (≈ 64 KiB) hot in L2 while all row tiles pass over it.
    let jb = ((16 * 1024) / k.max(1)).clamp(NR, 512) / NR * NR;
    let mut j0 = 0;
    while j0 < n {
        let j1 = (j0 + jb).min(n);
        let mut i = rows.start;
        while i < rows.end {
            let mr = (rows.end - i).min(MR);
            #[inline(always)]
            unsafe fn tile<S: Simd, const NR: usize, const M: usize>(
                a: *const f32,
                a_rs: usize,
                b: *const f32,
                b_cs: usize,
                c: *mut f32,
                n: usize,
                k: usize,
                i: usize,
                j0: usize,
                j1: usize,
            ) {
                let ap: [*const f32; M] = std::array::from_fn(|r| a.add((i + r) * a_rs));
                let mut j = j0;
                while j < j1 {
                    let nr = (j1 - j).min(NR);
                    // Columns past the end reuse the last valid one; their results are dropped.
                    let bp: [*const f32; NR] = std::array::from_fn(|q| b.add((j + q.min(nr - 1)) * b_cs));
                    let t = micro_dot::<S, M, NR>(ap, bp, k);
                    for (r, row) in t.iter().enumerate() {
                        let cr = c.add((i + r) * n + j);
                        for (q, &x) in row.iter().enumerate().take(nr) {
                            *cr.add(q) = x;
                        }
                    }
                    j += nr;
                }
            }
            match mr {
                1 => tile::<S, NR, 1>(a, a_rs, b, b_cs, c, n, k, i, j0, j1),
                2 => tile::<S, NR, 2>(a, a_rs, b, b_cs, c, n, k, i, j0, j1),
                3 => tile::<S, NR, 3>(a, a_rs, b, b_cs, c, n, k, i, j0, j1),
                _ => tile::<S, NR, 4>(a, a_rs, b, b_cs, c, n, k, i, j0, j1),
            }
            i += mr;
        }
        j0 = j1;
    }
}

/// Rows of the axpy form's register tile with 8-lane vectors (AVX2): 6 rows × 2 vectors are
/// 12 accumulators of the 16 registers, enough independent FMAs to cover their latency on
/// both FMA ports (4 rows, 8 accumulators, leave a fifth of the peak unused). With 16 lanes
/// (AVX-512) the tile is 4 rows × 4 vectors.
const AVX2_ROWS: usize = 6;

/// One matrix product in axpy form: `b` rows contiguous along `n` (`b_rs` between rows); `a`
/// has arbitrary strides.
#[inline(always)]
unsafe fn gemm_axpy<S: Simd, const NV: usize, const MX: usize>(
    a: *const f32,
    a_rs: usize,
    a_cs: usize,
    b: *const f32,
    b_rs: usize,
    c: *mut f32,
    n: usize,
    k: usize,
    rows: std::ops::Range<usize>,
    cols: std::ops::Range<usize>,
) {
    let mut i = rows.start;
    while i < rows.end {
        let mr = (rows.end - i).min(MX);
        #[inline(always)]
        unsafe fn tile<S: Simd, const NV: usize, const M: usize>(
            a: *const f32,
            a_rs: usize,
            a_cs: usize,
            b: *const f32,
            b_rs: usize,
            c: *mut f32,
            n: usize,
            k: usize,
            i: usize,
            cols: std::ops::Range<usize>,
        ) {
            let l = S::LANES;
            let ap: [*const f32; M] = std::array::from_fn(|r| a.add((i + r) * a_rs));
            let mut j = cols.start;
            while j + NV * l <= cols.end {
                let cp: [*mut f32; M] = std::array::from_fn(|r| c.add((i + r) * n + j));
                micro_axpy::<S, M, NV>(ap, a_cs, b.add(j), b_rs, k, cp, NV * l);
                j += NV * l;
            }
            while j < cols.end {
                let w = (cols.end - j).min(l);
                let cp: [*mut f32; M] = std::array::from_fn(|r| c.add((i + r) * n + j));
                micro_axpy::<S, M, 1>(ap, a_cs, b.add(j), b_rs, k, cp, w);
                j += w;
            }
        }
        let cols = cols.clone();
        match mr {
            1 => tile::<S, NV, 1>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
            2 => tile::<S, NV, 2>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
            3 => tile::<S, NV, 3>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
            4 => tile::<S, NV, 4>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
            5 => tile::<S, NV, 5>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
            _ => tile::<S, NV, 6>(a, a_rs, a_cs, b, b_rs, c, n, k, i, cols),
        }
        i += mr;
    }
}

#[derive(Clone, Copy)]
enum Form {
    /// `a` has unit column stride, `b` unit row stride.
    Dot,
    /// `b` has unit column stride.
    Axpy,
}

/// The row stride of a packed `[k, w]` panel: `w`, or one cache line more where `w` is a
/// multiple of 256 floats (1 KiB). At such strides the `k` rows a register tile walks down
/// fall in a few L1 sets and evict each other (a pointwise convolution's 1024-column blocks
/// ran 1.5× slower than with the extra line).
pub(crate) fn panel_stride(w: usize) -> usize {
    if w.is_multiple_of(256) {
        w + 16
    } else {
        w
    }
}

/// `c[i, 0..w] = Σ_kk a[i, kk] · panel[kk, 0..w]` for `i < rows`: `a` rows `a_rs` apart and
/// contiguous along `k`, `panel` a `[k, w]` matrix with rows `panel_rs ≥ w` apart (see
/// [`panel_stride`]), `c` rows `ldc` apart (the axpy form's register tiles; an implicit-GEMM
/// convolution's inner product).
///
/// # Safety
/// `a` holds `rows` rows of `k`, `panel` `k` rows of `w` at stride `panel_rs` and `c` `rows`
/// rows of `w` at stride `ldc`; `isa` is available.
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_panel_strided(isa: Isa, a: *const f32, a_rs: usize, rows: usize, panel: *const f32, panel_rs: usize, w: usize, k: usize, c: *mut f32, ldc: usize) {
    struct PanelTask {
        a: *const f32,
        a_rs: usize,
        rows: usize,
        panel: *const f32,
        panel_rs: usize,
        w: usize,
        k: usize,
        c: *mut f32,
        ldc: usize,
    }
    impl IsaTask for PanelTask {
        type Output = ();
        #[inline(always)]
        unsafe fn run<S: SimdDecode>(self) {
            let PanelTask { a, a_rs, rows, panel, panel_rs, w, k, c, ldc } = self;
            if S::LANES >= 16 {
                gemm_axpy::<S, 4, 4>(a, a_rs, 1, panel, panel_rs, c, ldc, k, 0..rows, 0..w)
            } else {
                gemm_axpy::<S, 2, AVX2_ROWS>(a, a_rs, 1, panel, panel_rs, c, ldc, k, 0..rows, 0..w)
            }
        }
    }
    run_on(isa, PanelTask { a, a_rs, rows, panel, panel_rs, w, k, c, ldc })
}

/// [`gemm_panel_strided`] with a contiguous panel (`panel_rs = w`), inside a kernel body
/// already running on `S` (no dispatch).
///
/// # Safety
/// As [`gemm_panel_strided`]; the CPU supports `S`.
#[inline(always)]
#[allow(clippy::too_many_arguments)]
pub(crate) unsafe fn gemm_panel_on<S: Simd>(a: *const f32, a_rs: usize, rows: usize, panel: *const f32, w: usize, k: usize, c: *mut f32, ldc: usize) {
    if S::LANES >= 16 {
        gemm_axpy::<S, 4, 4>(a, a_rs, 1, panel, w, c, ldc, k, 0..rows, 0..w)
    } else {
        gemm_axpy::<S, 2, AVX2_ROWS>(a, a_rs, 1, panel, w, c, ldc, k, 0..rows, 0..w)
    }
}

thread_local! {
    /// The packed column panel of a wide axpy-form product, kept per thread between calls.
    static PANEL: std::cell::Cell<Vec<f32>> = const { std::cell::Cell::new(Vec::new()) };
}

/// Rows `rows` of batch item `(b0, b1)`.
struct F32Task<'a> {
    form: Form,
    a: &'a MatView<'a>,
    b: &'a MatView<'a>,
    b0: usize,
    b1: usize,
    c: *mut f32,
    rows: std::ops::Range<usize>,
    /// Columns computed (the axpy form only; the dot form computes all).
    cols: std::ops::Range<usize>,
}

impl IsaTask for F32Task<'_> {
    type Output = ();
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) {
        let F32Task { form, a, b, b0, b1, c, rows, cols } = self;
        let (n, k) = (b.cols, a.cols);
        let (ap, bp) = (a.base(b0, b1), b.base(b0, b1));
        match form {
            Form::Dot if S::LANES >= 16 => gemm_dot::<S, 4>(ap, a.row_stride, bp, b.col_stride, c, n, k, rows),
            Form::Dot => gemm_dot::<S, 2>(ap, a.row_stride, bp, b.col_stride, c, n, k, rows),
            // A column block of a wide product: copy it into a contiguous [k, w] panel first,
            // so the row tiles that all read it walk consecutive cache lines and pages.
            // (The thread-local is taken and put back outside any closure: a closure would
            // not inherit this function's target features, see `elementwise`.)
            Form::Axpy if cols.len() < n => {
                let w = cols.len();
                let ps = panel_stride(w);
                let mut panel = PANEL.with(|cell| cell.take());
                crate::grow(&mut panel, k * ps);
                for kk in 0..k {
                    let src = bp.add(kk * b.row_stride + cols.start);
                    std::ptr::copy_nonoverlapping(src, panel.as_mut_ptr().add(kk * ps), w);
                }
                let c0 = c.add(cols.start);
                if S::LANES >= 16 {
                    gemm_axpy::<S, 4, 4>(ap, a.row_stride, a.col_stride, panel.as_ptr(), ps, c0, n, k, rows, 0..w);
                } else {
                    gemm_axpy::<S, 2, AVX2_ROWS>(ap, a.row_stride, a.col_stride, panel.as_ptr(), ps, c0, n, k, rows, 0..w);
                }
                PANEL.with(|cell| cell.replace(panel));
            }
            Form::Axpy if S::LANES >= 16 => gemm_axpy::<S, 4, 4>(ap, a.row_stride, a.col_stride, bp, b.row_stride, c, n, k, rows, cols),
            Form::Axpy => gemm_axpy::<S, 2, AVX2_ROWS>(ap, a.row_stride, a.col_stride, bp, b.row_stride, c, n, k, rows, cols),
        }
    }
}

/// Batched matmul: `c[b0, b1, i, j] = Σ_k a[b0, b1, i, k] · b[b0, b1, k, j]` for
/// `b0 < batch[0]`, `b1 < batch[1]`, with `c` contiguous `[batch[0], batch[1], a.rows, b.cols]`.
///
/// Views may have any strides (batch stride 0 broadcasts). The fast paths are `a` with unit
/// column stride and `b` with unit row stride (`b` stored transposed, `[n, k]`, as for `Q·Kᵀ`;
/// build it with [`MatView::t`]), and `b` with unit column stride (`P·V`). Other layouts are
/// packed first. Work is split over batch items × row blocks.
pub fn matmul_f32(batch: [usize; 2], a: &MatView<'_>, b: &MatView<'_>, c: &mut [f32]) -> Result<(), KernelError> {
    matmul_f32_with(isa(), batch, a, b, c)
}

/// [`matmul_f32`] on an explicit ISA.
pub fn matmul_f32_with(isa: Isa, batch: [usize; 2], a: &MatView<'_>, b: &MatView<'_>, c: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    if a.cols != b.rows {
        return Err(KernelError::Shape(format!("matmul_f32: a is {}×{} but b is {}×{}", a.rows, a.cols, b.rows, b.cols)));
    }
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let nb = crate::mul("matmul_f32: batch", batch[0], batch[1])?;
    let per = crate::mul("matmul_f32: output", m, n)?;
    check_len("matmul_f32: c", crate::mul("matmul_f32: output", nb, per)?, c.len())?;
    a.check("matmul_f32: a", batch)?;
    b.check("matmul_f32: b", batch)?;
    if c.is_empty() {
        return Ok(());
    }
    if k == 0 {
        c.fill(0.0);
        return Ok(());
    }

    // Pick a form; pack operands that fit neither.
    let (mut pa, mut pb) = (None, None);
    let form = if b.col_stride == 1 && !(a.col_stride == 1 && b.row_stride == 1 && n < 16) {
        Form::Axpy
    } else {
        if a.col_stride != 1 {
            pa = Some(pack(a, batch, false));
        }
        if b.row_stride != 1 {
            pb = Some(pack(b, batch, true));
        }
        Form::Dot
    };
    let a = pa.as_ref().map(|(d, v)| MatView { data: d, ..*v }).unwrap_or(*a);
    let b = pb.as_ref().map(|(d, v)| MatView { data: d, ..*v }).unwrap_or(*b);

    // Units of work: (batch item, block of 16 rows), or, for a wide axpy-form product (an
    // im2col convolution: `b` is [k, n] with n the output positions), (batch item, block of
    // columns) over all rows: each unit then streams its block of `b` from memory once and
    // every row tile reuses it from L2, where row blocks would each stream all of `b`.
    const RB: usize = 16;
    let by_cols = matches!(form, Form::Axpy) && n >= 1024 && m >= 2 * RB;
    let (blocks, block) = if by_cols {
        // About 256 KiB of `b` per block, whole vectors.
        let cb = ((1usize << 16) / k).clamp(64, n) / 64 * 64;
        (n.div_ceil(cb), cb)
    } else {
        (m.div_ceil(RB), RB)
    };
    let units = nb * blocks;
    let unit_flops = 2 * if by_cols { m * block } else { RB.min(m) * n } * k;
    let min_units = ((1usize << 19) / unit_flops.max(1)).max(1);
    let cp = SyncPtr(c.as_mut_ptr());
    let (a, b) = (&a, &b);
    for_ranges(units, min_units, 1, |r| {
        for u in r {
            let (item, blk) = (u / blocks, u % blocks);
            let (rows, cols) = if by_cols { (0..m, blk * block..((blk + 1) * block).min(n)) } else { (blk * RB..((blk + 1) * RB).min(m), 0..n) };
            let c_item = cp.get().wrapping_add(item * per);
            run_on(isa, F32Task { form, a, b, b0: item / batch[1], b1: item % batch[1], c: c_item, rows, cols });
        }
    });
    Ok(())
}

/// Copies every matrix of `v` into a fresh contiguous buffer, row-major, or column-major when
/// `transpose` (so that the result has unit row stride). Returns the buffer and a view
/// description of it (with an empty `data`, filled in by the caller).
fn pack(v: &MatView<'_>, batch: [usize; 2], transpose: bool) -> (Vec<f32>, MatView<'static>) {
    let (r, c) = (v.rows, v.cols);
    let mut out = vec![0.0f32; batch[0] * batch[1] * r * c];
    let mut o = 0;
    for b0 in 0..batch[0] {
        for b1 in 0..batch[1] {
            let base = v.offset + b0 * v.batch_strides[0] + b1 * v.batch_strides[1];
            if transpose {
                for j in 0..c {
                    for i in 0..r {
                        out[o] = v.data[base + i * v.row_stride + j * v.col_stride];
                        o += 1;
                    }
                }
            } else {
                for i in 0..r {
                    for j in 0..c {
                        out[o] = v.data[base + i * v.row_stride + j * v.col_stride];
                        o += 1;
                    }
                }
            }
        }
    }
    let (rs, cs) = if transpose { (1, r) } else { (c, 1) };
    let view = MatView { data: &[], offset: 0, rows: r, cols: c, row_stride: rs, col_stride: cs, batch_strides: [batch[1] * r * c, r * c] };
    (out, view)
}

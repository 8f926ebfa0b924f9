//! Block decoders (quantized/half-precision bytes → f32 vectors in registers) and the kernels
//! built directly on them: [`dequantize_row`] and [`get_rows`].
//!
//! Every decoder produces exactly the values of `tg_quant::dequantize_row` (bit for bit), on
//! every ISA; the quantized matmul reuses the same decoders, so its weights are the reference
//! weights and only the f32 summation order differs from an exact dot product.
//!
//! Layout per ISA: the portable decoders are in `dequant/scalar.rs`, the AVX2 and AVX-512 ones
//! beside them in `dequant/avx2.rs` and `dequant/avx512.rs`.

use rayon::prelude::*;
use tg_quant::GgmlType;

use crate::isa::{checked, isa, run_on, IsaTask};
use crate::simd::{bf16_to_f32, f16_to_f32_soft, rd_u16, Simd};
use crate::{Isa, KernelError};

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

pub(crate) use scalar::k4_scale_min;

/// Elements per decode unit of the unquantized formats (F32/F16/BF16).
pub(crate) const PLAIN_BLOCK: usize = 16;

/// Receives decoded vectors. (A trait with `#[inline(always)]` methods rather than a closure:
/// closures cannot be forced inline, and one left out of line would lose the target features
/// and every intrinsic in it would become a call.)
pub(crate) trait Sink<V> {
    /// Vector `i` of the unit being decoded.
    unsafe fn put(&mut self, i: usize, v: V);
}

/// Block decoders. Each `dec_*` decodes one unit at `p` and calls `k.put(i, v)` for its vectors
/// in order, `v` holding elements `i * LANES .. (i + 1) * LANES` of the unit. Units are one ggml
/// block for quantized formats and [`PLAIN_BLOCK`] elements for F32/F16/BF16.
///
/// # Safety
/// `p` must point at a whole unit; the ISA must be available.
pub(crate) trait SimdDecode: Simd {
    unsafe fn dec_f32<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_f16<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_bf16<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q4_0<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q4_1<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q5_0<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q5_1<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q8_0<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q4_k<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q5_k<K: Sink<Self::V>>(p: *const u8, k: &mut K);
    unsafe fn dec_q6_k<K: Sink<Self::V>>(p: *const u8, k: &mut K);

    /// Whether [`SimdDecode::dot1`] has a specialized kernel for `ty` on this ISA.
    #[inline(always)]
    fn has_dot1(_ty: GgmlType) -> bool {
        false
    }

    /// A specialized single-row dot product `Σ x·W` for one weight row of format `ty` (only
    /// called when [`SimdDecode::has_dot1`]). `xs` holds the sums of `x` over each 32 elements
    /// (only read for Q4_K/Q5_K).
    #[inline(always)]
    unsafe fn dot1(_ty: GgmlType, _x: *const f32, _xs: *const f32, _w: *const u8, _k: usize) -> f32 {
        unreachable!("dot1 without has_dot1")
    }
}

/// A weight format with a SIMD decoder, as a type so kernels monomorphize per format.
pub(crate) trait Fmt {
    /// The GGML type.
    const TY: GgmlType;
    /// Elements per decode unit.
    const BLOCK: usize;
    /// Bytes per decode unit.
    const BYTES: usize;
    /// F32/F16/BF16: rows may end in a partial unit, decoded with [`Fmt::elem`].
    const PLAIN: bool = false;
    /// Decodes one unit (see [`SimdDecode`]).
    unsafe fn decode<S: SimdDecode, K: Sink<S::V>>(p: *const u8, k: &mut K);
    /// Element `i` of a plain-format row starting at `row` (only called when `PLAIN`).
    #[inline(always)]
    unsafe fn elem(_row: *const u8, _i: usize) -> f32 {
        unreachable!("elem() on a block format")
    }
}

/// Marker types for [`Fmt`], one per format with SIMD decoders.
pub(crate) mod fmt {
    use super::*;

    macro_rules! fmts {
        ($($name:ident: $ty:ident, $block:literal, $bytes:literal, $dec:ident;)*) => {$(
            pub(crate) struct $name;
            impl Fmt for $name {
                const TY: GgmlType = GgmlType::$ty;
                const BLOCK: usize = $block;
                const BYTES: usize = $bytes;
                #[inline(always)]
                unsafe fn decode<S: SimdDecode, K: Sink<S::V>>(p: *const u8, k: &mut K) {
                    S::$dec(p, k)
                }
            }
        )*};
    }
    fmts! {
        Q4_0: Q4_0, 32, 18, dec_q4_0;
        Q4_1: Q4_1, 32, 20, dec_q4_1;
        Q5_0: Q5_0, 32, 22, dec_q5_0;
        Q5_1: Q5_1, 32, 24, dec_q5_1;
        Q8_0: Q8_0, 32, 34, dec_q8_0;
        Q4K: Q4_K, 256, 144, dec_q4_k;
        Q5K: Q5_K, 256, 176, dec_q5_k;
        Q6K: Q6_K, 256, 210, dec_q6_k;
    }

    pub(crate) struct F32;
    impl Fmt for F32 {
        const TY: GgmlType = GgmlType::F32;
        const BLOCK: usize = PLAIN_BLOCK;
        const BYTES: usize = 4 * PLAIN_BLOCK;
        const PLAIN: bool = true;
        #[inline(always)]
        unsafe fn decode<S: SimdDecode, K: Sink<S::V>>(p: *const u8, k: &mut K) {
            S::dec_f32(p, k)
        }
        #[inline(always)]
        unsafe fn elem(row: *const u8, i: usize) -> f32 {
            f32::from_bits(crate::simd::rd_u32(row.add(4 * i)))
        }
    }

    pub(crate) struct F16;
    impl Fmt for F16 {
        const TY: GgmlType = GgmlType::F16;
        const BLOCK: usize = PLAIN_BLOCK;
        const BYTES: usize = 2 * PLAIN_BLOCK;
        const PLAIN: bool = true;
        #[inline(always)]
        unsafe fn decode<S: SimdDecode, K: Sink<S::V>>(p: *const u8, k: &mut K) {
            S::dec_f16(p, k)
        }
        #[inline(always)]
        unsafe fn elem(row: *const u8, i: usize) -> f32 {
            f16_to_f32_soft(rd_u16(row.add(2 * i)))
        }
    }

    pub(crate) struct BF16;
    impl Fmt for BF16 {
        const TY: GgmlType = GgmlType::BF16;
        const BLOCK: usize = PLAIN_BLOCK;
        const BYTES: usize = 2 * PLAIN_BLOCK;
        const PLAIN: bool = true;
        #[inline(always)]
        unsafe fn decode<S: SimdDecode, K: Sink<S::V>>(p: *const u8, k: &mut K) {
            S::dec_bf16(p, k)
        }
        #[inline(always)]
        unsafe fn elem(row: *const u8, i: usize) -> f32 {
            bf16_to_f32(rd_u16(row.add(2 * i)))
        }
    }
}

/// Evaluates `$body` with the type alias `$F` bound to the [`Fmt`] marker of `$ty`, or
/// `$fallback` for formats without SIMD decoders.
macro_rules! with_fmt {
    ($ty:expr, |$F:ident| $body:expr, else $fallback:expr) => {{
        use $crate::dequant::fmt;
        match $ty {
            tg_quant::GgmlType::F32 => {
                type $F = fmt::F32;
                $body
            }
            tg_quant::GgmlType::F16 => {
                type $F = fmt::F16;
                $body
            }
            tg_quant::GgmlType::BF16 => {
                type $F = fmt::BF16;
                $body
            }
            tg_quant::GgmlType::Q4_0 => {
                type $F = fmt::Q4_0;
                $body
            }
            tg_quant::GgmlType::Q4_1 => {
                type $F = fmt::Q4_1;
                $body
            }
            tg_quant::GgmlType::Q5_0 => {
                type $F = fmt::Q5_0;
                $body
            }
            tg_quant::GgmlType::Q5_1 => {
                type $F = fmt::Q5_1;
                $body
            }
            tg_quant::GgmlType::Q8_0 => {
                type $F = fmt::Q8_0;
                $body
            }
            tg_quant::GgmlType::Q4_K => {
                type $F = fmt::Q4K;
                $body
            }
            tg_quant::GgmlType::Q5_K => {
                type $F = fmt::Q5K;
                $body
            }
            tg_quant::GgmlType::Q6_K => {
                type $F = fmt::Q6K;
                $body
            }
            _ => $fallback,
        }
    }};
}
pub(crate) use with_fmt;

/// True if `ty` has SIMD decoders here (F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q4_K,
/// Q5_K, Q6_K). Other formats that `tg_quant::dequantize_row` handles (Q2_K, Q3_K, Q8_K) are
/// still accepted by every kernel, through the reference dequantizer (slower).
pub fn has_simd_decoder(ty: GgmlType) -> bool {
    with_fmt!(ty, |_D| true, else false)
}

/// True if the kernels accept weights / tables of type `ty` at all.
pub fn supports_type(ty: GgmlType) -> bool {
    has_simd_decoder(ty) || tg_quant::can_dequantize(ty)
}

/// Decodes a row of `k` elements (`k` a multiple of `D::BLOCK` unless `D::PLAIN`).
///
/// # Safety
/// `src` holds the row's bytes, `dst` has room for `k` floats; the ISA of `S` is available.
#[inline(always)]
pub(crate) unsafe fn dequant_row_simd<S: SimdDecode, D: Fmt>(src: *const u8, k: usize, dst: *mut f32) {
    struct Store<S>(*mut f32, std::marker::PhantomData<S>);
    impl<S: Simd> Sink<S::V> for Store<S> {
        #[inline(always)]
        unsafe fn put(&mut self, i: usize, v: S::V) {
            S::store(self.0.add(i * S::LANES), v)
        }
    }
    let nb = k / D::BLOCK;
    for b in 0..nb {
        D::decode::<S, _>(src.add(b * D::BYTES), &mut Store::<S>(dst.add(b * D::BLOCK), std::marker::PhantomData));
    }
    if D::PLAIN {
        for e in nb * D::BLOCK..k {
            *dst.add(e) = D::elem(src, e);
        }
    }
}

/// Checks `ty` is usable and returns the bytes of a `k`-element row.
pub(crate) fn row_bytes_checked(ty: GgmlType, k: usize) -> Result<usize, KernelError> {
    if !supports_type(ty) {
        return Err(KernelError::UnsupportedType(ty));
    }
    Ok(ty.row_bytes(k)?)
}

/// Dequantizes rows `ids` (already validated) of `table` into consecutive rows of `out`.
struct RowsTask<'a> {
    table: &'a [u8],
    ty: GgmlType,
    row_len: usize,
    row_bytes: usize,
    ids: &'a [i32],
    out: &'a mut [f32],
}

impl IsaTask for RowsTask<'_> {
    type Output = Result<(), KernelError>;
    #[inline(always)]
    unsafe fn run<S: SimdDecode>(self) -> Self::Output {
        let RowsTask { table, ty, row_len, row_bytes, ids, out } = self;
        debug_assert_eq!(out.len(), ids.len() * row_len);
        with_fmt!(ty, |D| {
            for (i, &id) in ids.iter().enumerate() {
                let src = table.as_ptr().add(id as usize * row_bytes);
                dequant_row_simd::<S, D>(src, row_len, out.as_mut_ptr().add(i * row_len));
            }
            Ok(())
        }, else {
            for (&id, o) in ids.iter().zip(out.chunks_exact_mut(row_len.max(1))) {
                let at = id as usize * row_bytes;
                tg_quant::dequantize_row(ty, &table[at..at + row_bytes], o)?;
            }
            Ok(())
        })
    }
}

/// Dequantizes one row of `dst.len()` elements of type `ty` from `src` (SIMD path of [`isa`]).
/// Bit-exact with `tg_quant::dequantize_row`.
pub fn dequantize_row(ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), KernelError> {
    dequantize_row_with(isa(), ty, src, dst)
}

/// [`dequantize_row`] on an explicit ISA.
pub fn dequantize_row_with(isa: Isa, ty: GgmlType, src: &[u8], dst: &mut [f32]) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let row_bytes = row_bytes_checked(ty, dst.len())?;
    if src.len() != row_bytes {
        return Err(KernelError::Length { what: "dequantize_row: source bytes", expected: row_bytes, got: src.len() });
    }
    let row_len = dst.len();
    run_on(isa, RowsTask { table: src, ty, row_len, row_bytes, ids: &[0], out: dst })
}

/// Gathers rows of an `n_rows × row_len` table stored as `ty` (embedding lookup):
/// `out[i, :] = dequantize(table[ids[i], :])`, `out` being `ids.len() × row_len` row-major.
/// An id outside `0..n_rows` is an error naming its position; wrong buffer lengths are errors.
pub fn get_rows(
    table: &[u8],
    ty: GgmlType,
    row_len: usize,
    n_rows: usize,
    ids: &[i32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    get_rows_with(isa(), table, ty, row_len, n_rows, ids, out)
}

/// [`get_rows`] on an explicit ISA.
pub fn get_rows_with(
    isa: Isa,
    table: &[u8],
    ty: GgmlType,
    row_len: usize,
    n_rows: usize,
    ids: &[i32],
    out: &mut [f32],
) -> Result<(), KernelError> {
    let isa = checked(isa)?;
    let row_bytes = row_bytes_checked(ty, row_len)?;
    let table_bytes = crate::mul("get_rows: table size", n_rows, row_bytes)?;
    if table.len() != table_bytes {
        return Err(KernelError::Length { what: "get_rows: table bytes", expected: table_bytes, got: table.len() });
    }
    let out_len = crate::mul("get_rows: output size", ids.len(), row_len)?;
    if out.len() != out_len {
        return Err(KernelError::Length { what: "get_rows: output", expected: out_len, got: out.len() });
    }
    if let Some((pos, &id)) = ids.iter().enumerate().find(|(_, &id)| id < 0 || id as usize >= n_rows) {
        return Err(KernelError::IdOutOfRange { pos, id: id as i64, n_rows });
    }
    if row_len == 0 || ids.is_empty() {
        return Ok(());
    }
    // Rows are independent; split when there is enough to copy (≥ 256 KiB of output per task).
    let per_task = (65_536 / row_len).max(1);
    if crate::par::threads() <= 1 || ids.len() <= per_task {
        return run_on(isa, RowsTask { table, ty, row_len, row_bytes, ids, out });
    }
    out.par_chunks_mut(per_task * row_len)
        .zip(ids.par_chunks(per_task))
        .try_for_each(|(o, ids)| run_on(isa, RowsTask { table, ty, row_len, row_bytes, ids, out: o }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unit_sizes_match_tg_quant() {
        fn check<D: Fmt>(ty: GgmlType) {
            if D::PLAIN {
                assert_eq!(D::BYTES, D::BLOCK * ty.type_size(), "{ty}");
            } else {
                assert_eq!((D::BLOCK, D::BYTES), (ty.block_size(), ty.type_size()), "{ty}");
            }
        }
        for ty in GgmlType::ALL {
            with_fmt!(ty, |D| check::<D>(ty), else ());
        }
    }
}

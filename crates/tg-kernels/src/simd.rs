//! The vector abstraction every kernel body is written against.
//!
//! A kernel is written once, generic over [`Simd`], and instantiated for [`Scalar`] (portable,
//! eight `f32` lanes in a plain array), [`Avx2`] (`__m256`) and [`Avx512`] (`__m512`). All
//! methods are `#[inline(always)]`; they are only ever called from inside a
//! [`crate::isa::IsaTask`] body, which [`crate::isa::run_on`] compiles with the right target
//! features, so the intrinsics inline into straight-line vector code.
//!
//! Lane-wise semantics are identical across implementations, except that `fma` is fused on
//! AVX2/AVX-512 and a separate multiply and add on the portable path (both are accurate to
//! f32 rounding; no kernel result is specified bit-for-bit across paths, only dequantized
//! values are).

#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
mod scalar;

#[cfg(target_arch = "x86_64")]
pub(crate) use avx2::Avx2;
#[cfg(target_arch = "x86_64")]
pub(crate) use avx512::Avx512;
pub(crate) use scalar::Scalar;

/// f32 vector operations.
///
/// # Safety
/// Every method requires the CPU to support the implementation's instruction set; pointer
/// arguments must be valid for the lanes touched (`LANES` elements, or `n` for the `_tail`
/// forms). Loads and stores are unaligned.
pub(crate) trait Simd: Copy + 'static {
    /// One vector of `LANES` f32.
    type V: Copy;
    /// Lanes per vector.
    const LANES: usize;
    /// True for the portable path (kernels may prefer `std` math there).
    const PORTABLE: bool = false;

    unsafe fn zero() -> Self::V;
    unsafe fn splat(x: f32) -> Self::V;
    unsafe fn load(p: *const f32) -> Self::V;
    /// Loads `n < LANES` elements; the other lanes are zero.
    unsafe fn load_tail(p: *const f32, n: usize) -> Self::V;
    unsafe fn store(p: *mut f32, v: Self::V);
    /// Stores the first `n < LANES` lanes.
    unsafe fn store_tail(p: *mut f32, n: usize, v: Self::V);

    unsafe fn add(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V;
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V;
    /// `a > b ? a : b` lane-wise (x86 `maxps` semantics: a NaN in either yields `b`).
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V;
    /// `a < b ? a : b` lane-wise (x86 `minps` semantics: a NaN in either yields `b`).
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V;
    /// `a * b + c` (fused where the ISA has FMA).
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V;
    unsafe fn abs(a: Self::V) -> Self::V;
    unsafe fn neg(a: Self::V) -> Self::V;
    /// Correctly rounded square root.
    unsafe fn sqrt(a: Self::V) -> Self::V;
    /// Round to nearest integer, ties to even.
    unsafe fn round(a: Self::V) -> Self::V;
    /// `2^n` for lanes holding integers `n` in `[-126, 127]`.
    unsafe fn pow2i(n: Self::V) -> Self::V;
    /// `a·2^n` for lanes holding integers `n` in `[-252, 254]` (over- and underflowing as
    /// the product would). The default multiplies by `2^⌊n/2⌉` and `2^(n−⌊n/2⌉)`, each
    /// within [`Simd::pow2i`]'s range; AVX-512 has it as one instruction (`vscalefps`).
    #[inline(always)]
    unsafe fn scalef(a: Self::V, n: Self::V) -> Self::V {
        let n1 = Self::round(Self::mul(n, Self::splat(0.5)));
        let n2 = Self::sub(n, n1);
        Self::mul(Self::mul(a, Self::pow2i(n1)), Self::pow2i(n2))
    }
    /// `a < b ? t : f` lane-wise.
    unsafe fn select_lt(a: Self::V, b: Self::V, t: Self::V, f: Self::V) -> Self::V;
    /// `|mag|` with the sign bit of `sign`.
    unsafe fn copysign(mag: Self::V, sign: Self::V) -> Self::V;
    /// `(lo, hi)` with the lanes of `a` and `b` alternating: `lo = [a0, b0, a1, b1, ..]` (the
    /// first `LANES`), `hi` the rest.
    unsafe fn interleave(a: Self::V, b: Self::V) -> (Self::V, Self::V);
    /// The inverse of [`Simd::interleave`]: the even and the odd lanes of `[lo, hi]`.
    unsafe fn deinterleave(lo: Self::V, hi: Self::V) -> (Self::V, Self::V);

    /// Sum of all lanes (tree order).
    unsafe fn reduce_add(v: Self::V) -> f32;
    /// Maximum of all lanes (`max` semantics).
    unsafe fn reduce_max(v: Self::V) -> f32;
    /// Lane sums of four vectors, `[Σa, Σb, Σc, Σd]`.
    unsafe fn hsum4(a: Self::V, b: Self::V, c: Self::V, d: Self::V) -> [f32; 4];

    /// The binary16 value `h`, converted exactly, in every lane.
    unsafe fn splat_f16(h: u16) -> Self::V;
}

/// Exact binary16 → binary32 conversion without hardware support.
#[inline]
pub(crate) fn f16_to_f32_soft(h: u16) -> f32 {
    let sign = ((h as u32) & 0x8000) << 16;
    let exp = ((h >> 10) & 0x1f) as u32;
    let man = (h & 0x3ff) as u32;
    match exp {
        0 => {
            // Zero or subnormal: man · 2^-24, exact in f32.
            let mag = man as f32 * (1.0 / 16_777_216.0);
            f32::from_bits(sign | mag.to_bits())
        }
        31 => f32::from_bits(sign | 0x7f80_0000 | (man << 13)),
        _ => f32::from_bits(sign | ((exp + 112) << 23) | (man << 13)),
    }
}

/// Exact bfloat16 → binary32 conversion.
#[inline(always)]
pub(crate) fn bf16_to_f32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

/// Reads a little-endian `u16` at `p` (any alignment).
#[inline(always)]
pub(crate) unsafe fn rd_u16(p: *const u8) -> u16 {
    // SAFETY: caller guarantees 2 readable bytes.
    u16::from_le_bytes(unsafe { p.cast::<[u8; 2]>().read_unaligned() })
}

/// Reads a little-endian `u32` at `p` (any alignment).
#[inline(always)]
pub(crate) unsafe fn rd_u32(p: *const u8) -> u32 {
    // SAFETY: caller guarantees 4 readable bytes.
    u32::from_le_bytes(unsafe { p.cast::<[u8; 4]>().read_unaligned() })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lanes<S: Simd>(v: S::V) -> Vec<f32> {
        let mut out = vec![0.0f32; S::LANES];
        // SAFETY: `out` has LANES elements; callers check ISA availability.
        unsafe { S::store(out.as_mut_ptr(), v) };
        out
    }

    /// Every binary16 pattern converts exactly like the reference, on every ISA.
    #[test]
    fn f16_conversion_is_exact_for_all_patterns() {
        for h in 0..=u16::MAX {
            let want = tg_quant::f16_to_f32(h);
            let check = |got: f32, who: &str| {
                if want.is_nan() {
                    assert!(got.is_nan(), "{who} {h:#06x}");
                } else {
                    assert_eq!(got.to_bits(), want.to_bits(), "{who} {h:#06x}");
                }
            };
            check(f16_to_f32_soft(h), "soft");
            // SAFETY: pure computation.
            for v in lanes::<Scalar>(unsafe { Scalar::splat_f16(h) }) {
                check(v, "scalar");
            }
            #[cfg(target_arch = "x86_64")]
            {
                if crate::Isa::Avx2.is_available() {
                    // SAFETY: AVX2+F16C available.
                    for v in lanes::<Avx2>(unsafe { Avx2::splat_f16(h) }) {
                        check(v, "avx2");
                    }
                }
                if crate::Isa::Avx512.is_available() {
                    // SAFETY: AVX-512 available.
                    for v in lanes::<Avx512>(unsafe { Avx512::splat_f16(h) }) {
                        check(v, "avx512");
                    }
                }
            }
        }
    }

    fn horizontal<S: Simd>() {
        let l = S::LANES;
        let data: Vec<f32> = (0..4 * l).map(|i| (i * i % 97) as f32 - 40.0).collect();
        // SAFETY: callers check ISA availability; `data` has 4·LANES elements.
        unsafe {
            let v: Vec<S::V> = (0..4).map(|j| S::load(data.as_ptr().add(j * l))).collect();
            let sums = S::hsum4(v[0], v[1], v[2], v[3]);
            for j in 0..4 {
                let want: f32 = data[j * l..(j + 1) * l].iter().sum();
                assert_eq!(sums[j], want, "hsum4 lane {j}");
                assert_eq!(S::reduce_add(v[j]), want, "reduce_add {j}");
                let mx = data[j * l..(j + 1) * l].iter().cloned().fold(f32::MIN, f32::max);
                assert_eq!(S::reduce_max(v[j]), mx, "reduce_max {j}");
            }
            // interleave: [a0 b0 a1 b1 ..]; deinterleave undoes it.
            let (lo, hi) = S::interleave(v[0], v[1]);
            let both: Vec<f32> = lanes::<S>(lo).into_iter().chain(lanes::<S>(hi)).collect();
            let want: Vec<f32> = (0..2 * l).map(|i| data[(i % 2) * l + i / 2]).collect();
            assert_eq!(both, want, "interleave");
            let (e, o) = S::deinterleave(v[2], v[3]);
            let want_e: Vec<f32> = (0..l).map(|i| data[2 * l + 2 * i]).collect();
            let want_o: Vec<f32> = (0..l).map(|i| data[2 * l + 2 * i + 1]).collect();
            assert_eq!((lanes::<S>(e), lanes::<S>(o)), (want_e, want_o), "deinterleave");
            for n in 0..l {
                let t = lanes::<S>(S::load_tail(data.as_ptr(), n));
                assert_eq!(&t[..n], &data[..n]);
                assert!(t[n..].iter().all(|&x| x == 0.0));
                let mut out = vec![f32::NAN; l];
                S::store_tail(out.as_mut_ptr(), n, S::splat(1.5));
                assert!(out[..n].iter().all(|&x| x == 1.5) && out[n..].iter().all(|x| x.is_nan()));
            }
        }
    }

    #[test]
    fn horizontal_ops_and_tails() {
        horizontal::<Scalar>();
        #[cfg(target_arch = "x86_64")]
        {
            if crate::Isa::Avx2.is_available() {
                horizontal::<Avx2>();
            }
            if crate::Isa::Avx512.is_available() {
                horizontal::<Avx512>();
            }
        }
    }
}

//! Portable implementation: a "vector" is `[f32; 8]` processed lane by lane. No intrinsics;
//! the compiler is free to vectorize for the baseline target. `fma` is an unfused multiply-add
//! (a software `fmaf` would be far slower on targets without FMA).

use super::{f16_to_f32_soft, Simd};

/// The portable path.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scalar;

const L: usize = 8;

#[inline(always)]
fn map(a: [f32; L], f: impl Fn(f32) -> f32) -> [f32; L] {
    let mut r = [0.0; L];
    for i in 0..L {
        r[i] = f(a[i]);
    }
    r
}

#[inline(always)]
fn zip(a: [f32; L], b: [f32; L], f: impl Fn(f32, f32) -> f32) -> [f32; L] {
    let mut r = [0.0; L];
    for i in 0..L {
        r[i] = f(a[i], b[i]);
    }
    r
}

impl Simd for Scalar {
    type V = [f32; L];
    const LANES: usize = L;
    const PORTABLE: bool = true;

    #[inline(always)]
    unsafe fn zero() -> Self::V {
        [0.0; L]
    }
    #[inline(always)]
    unsafe fn splat(x: f32) -> Self::V {
        [x; L]
    }
    #[inline(always)]
    unsafe fn load(p: *const f32) -> Self::V {
        // SAFETY: caller guarantees L readable elements.
        unsafe { p.cast::<[f32; L]>().read_unaligned() }
    }
    #[inline(always)]
    unsafe fn load_tail(p: *const f32, n: usize) -> Self::V {
        let mut r = [0.0; L];
        for (i, v) in r.iter_mut().enumerate().take(n) {
            // SAFETY: caller guarantees n readable elements.
            *v = unsafe { *p.add(i) };
        }
        r
    }
    #[inline(always)]
    unsafe fn store(p: *mut f32, v: Self::V) {
        // SAFETY: caller guarantees L writable elements.
        unsafe { p.cast::<[f32; L]>().write_unaligned(v) }
    }
    #[inline(always)]
    unsafe fn store_tail(p: *mut f32, n: usize, v: Self::V) {
        for (i, x) in v.iter().enumerate().take(n) {
            // SAFETY: caller guarantees n writable elements.
            unsafe { *p.add(i) = *x };
        }
    }
    #[inline(always)]
    unsafe fn add(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x + y)
    }
    #[inline(always)]
    unsafe fn sub(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x - y)
    }
    #[inline(always)]
    unsafe fn mul(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x * y)
    }
    #[inline(always)]
    unsafe fn div(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| x / y)
    }
    #[inline(always)]
    unsafe fn max(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| if x > y { x } else { y })
    }
    #[inline(always)]
    unsafe fn min(a: Self::V, b: Self::V) -> Self::V {
        zip(a, b, |x, y| if x < y { x } else { y })
    }
    #[inline(always)]
    unsafe fn fma(a: Self::V, b: Self::V, c: Self::V) -> Self::V {
        let mut r = [0.0; L];
        for i in 0..L {
            r[i] = a[i] * b[i] + c[i];
        }
        r
    }
    #[inline(always)]
    unsafe fn abs(a: Self::V) -> Self::V {
        map(a, f32::abs)
    }
    #[inline(always)]
    unsafe fn neg(a: Self::V) -> Self::V {
        map(a, |x| -x)
    }
    #[inline(always)]
    unsafe fn sqrt(a: Self::V) -> Self::V {
        map(a, f32::sqrt)
    }
    #[inline(always)]
    unsafe fn round(a: Self::V) -> Self::V {
        map(a, f32::round_ties_even)
    }
    #[inline(always)]
    unsafe fn pow2i(n: Self::V) -> Self::V {
        map(n, |x| f32::from_bits((((x as i32) + 127) as u32) << 23))
    }
    #[inline(always)]
    unsafe fn select_lt(a: Self::V, b: Self::V, t: Self::V, f: Self::V) -> Self::V {
        let mut r = [0.0; L];
        for i in 0..L {
            r[i] = if a[i] < b[i] { t[i] } else { f[i] };
        }
        r
    }
    #[inline(always)]
    unsafe fn copysign(mag: Self::V, sign: Self::V) -> Self::V {
        zip(mag, sign, f32::copysign)
    }
    #[inline(always)]
    unsafe fn interleave(a: [f32; L], b: [f32; L]) -> ([f32; L], [f32; L]) {
        let mut r = [[0.0; L]; 2];
        for i in 0..L {
            r[2 * i / L][2 * i % L] = a[i];
            r[(2 * i + 1) / L][(2 * i + 1) % L] = b[i];
        }
        (r[0], r[1])
    }
    #[inline(always)]
    unsafe fn deinterleave(lo: [f32; L], hi: [f32; L]) -> ([f32; L], [f32; L]) {
        let (mut e, mut o) = ([0.0; L], [0.0; L]);
        for i in 0..L {
            let (x, y) = (2 * i, 2 * i + 1);
            e[i] = if x < L { lo[x] } else { hi[x - L] };
            o[i] = if y < L { lo[y] } else { hi[y - L] };
        }
        (e, o)
    }
    #[inline(always)]
    unsafe fn reduce_add(v: Self::V) -> f32 {
        let a = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
        (a[0] + a[2]) + (a[1] + a[3])
    }
    #[inline(always)]
    unsafe fn reduce_max(v: Self::V) -> f32 {
        let mut m = v[0];
        for &x in &v[1..] {
            m = if m > x { m } else { x };
        }
        m
    }
    #[inline(always)]
    unsafe fn hsum4(a: Self::V, b: Self::V, c: Self::V, d: Self::V) -> [f32; 4] {
        // SAFETY: pure arithmetic.
        unsafe { [Self::reduce_add(a), Self::reduce_add(b), Self::reduce_add(c), Self::reduce_add(d)] }
    }
    #[inline(always)]
    unsafe fn splat_f16(h: u16) -> Self::V {
        [f16_to_f32_soft(h); L]
    }
}

//! Portable block decoders: each block is decoded into a small array with plain integer and
//! f32 arithmetic (the same formulas as the reference), then handed out 8 lanes at a time.

use super::{SimdDecode, Sink};
use crate::simd::{bf16_to_f32, f16_to_f32_soft, rd_u16, rd_u32, Scalar};

type V8 = [f32; 8];

#[inline(always)]
unsafe fn emit<const N: usize, K: Sink<V8>>(vals: &[f32; N], f: &mut K) {
    for (i, c) in vals.chunks_exact(8).enumerate() {
        let mut v = [0.0; 8];
        v.copy_from_slice(c);
        f.put(i, v);
    }
}

#[inline(always)]
unsafe fn half(p: *const u8) -> f32 {
    f16_to_f32_soft(rd_u16(p))
}

#[inline(always)]
unsafe fn bytes<const N: usize>(p: *const u8) -> [u8; N] {
    p.cast::<[u8; N]>().read_unaligned()
}

/// Scales and mins of the eight 32-element sub-blocks of a Q4_K/Q5_K block (`s` = the 12 packed
/// bytes).
#[inline(always)]
pub(crate) fn k4_scale_min(s: &[u8; 12]) -> ([u8; 8], [u8; 8]) {
    let mut sc = [0u8; 8];
    let mut mn = [0u8; 8];
    for j in 0..4 {
        sc[j] = s[j] & 63;
        mn[j] = s[j + 4] & 63;
        sc[j + 4] = (s[j + 8] & 0x0f) | ((s[j] >> 6) << 4);
        mn[j + 4] = (s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4);
    }
    (sc, mn)
}

impl SimdDecode for Scalar {
    #[inline(always)]
    unsafe fn dec_f32<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let mut v = [0.0f32; 16];
        for (i, x) in v.iter_mut().enumerate() {
            *x = f32::from_bits(rd_u32(p.add(4 * i)));
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_f16<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let mut v = [0.0f32; 16];
        for (i, x) in v.iter_mut().enumerate() {
            *x = half(p.add(2 * i));
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_bf16<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let mut v = [0.0f32; 16];
        for (i, x) in v.iter_mut().enumerate() {
            *x = bf16_to_f32(rd_u16(p.add(2 * i)));
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q4_0<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let qs: [u8; 16] = bytes(p.add(2));
        let mut v = [0.0f32; 32];
        for j in 0..16 {
            v[j] = d * ((qs[j] & 0x0f) as i32 - 8) as f32;
            v[j + 16] = d * ((qs[j] >> 4) as i32 - 8) as f32;
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q4_1<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let (d, m) = (half(p), half(p.add(2)));
        let qs: [u8; 16] = bytes(p.add(4));
        let mut v = [0.0f32; 32];
        for j in 0..16 {
            v[j] = d * (qs[j] & 0x0f) as f32 + m;
            v[j + 16] = d * (qs[j] >> 4) as f32 + m;
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q5_0<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let qh = rd_u32(p.add(2));
        let qs: [u8; 16] = bytes(p.add(6));
        let mut v = [0.0f32; 32];
        for j in 0..16 {
            let lo = (qs[j] & 0x0f) as i32 | ((((qh >> j) & 1) as i32) << 4);
            let hi = (qs[j] >> 4) as i32 | ((((qh >> (j + 16)) & 1) as i32) << 4);
            v[j] = d * (lo - 16) as f32;
            v[j + 16] = d * (hi - 16) as f32;
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q5_1<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let (d, m) = (half(p), half(p.add(2)));
        let qh = rd_u32(p.add(4));
        let qs: [u8; 16] = bytes(p.add(8));
        let mut v = [0.0f32; 32];
        for j in 0..16 {
            let lo = (qs[j] & 0x0f) as u32 | (((qh >> j) & 1) << 4);
            let hi = (qs[j] >> 4) as u32 | (((qh >> (j + 16)) & 1) << 4);
            v[j] = d * lo as f32 + m;
            v[j + 16] = d * hi as f32 + m;
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q8_0<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let d = half(p);
        let qs: [u8; 32] = bytes(p.add(2));
        let mut v = [0.0f32; 32];
        for j in 0..32 {
            v[j] = d * (qs[j] as i8) as f32;
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q4_k<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&bytes(p.add(4)));
        let qs: [u8; 128] = bytes(p.add(16));
        let mut v = [0.0f32; 256];
        for c in 0..4 {
            for h in 0..2 {
                let s = 2 * c + h;
                let (dl, ml) = (d * sc[s] as f32, dmin * mn[s] as f32);
                for j in 0..32 {
                    let q = (qs[32 * c + j] >> (4 * h)) & 0x0f;
                    v[32 * s + j] = dl * q as f32 - ml;
                }
            }
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q5_k<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let (d, dmin) = (half(p), half(p.add(2)));
        let (sc, mn) = k4_scale_min(&bytes(p.add(4)));
        let qh: [u8; 32] = bytes(p.add(16));
        let qs: [u8; 128] = bytes(p.add(48));
        let mut v = [0.0f32; 256];
        for c in 0..4 {
            for h in 0..2 {
                let s = 2 * c + h;
                let (dl, ml) = (d * sc[s] as f32, dmin * mn[s] as f32);
                for j in 0..32 {
                    let q = ((qs[32 * c + j] >> (4 * h)) & 0x0f) | (((qh[j] >> s) & 1) << 4);
                    v[32 * s + j] = dl * q as f32 - ml;
                }
            }
        }
        emit(&v, f)
    }
    #[inline(always)]
    unsafe fn dec_q6_k<K: Sink<V8>>(p: *const u8, f: &mut K) {
        let ql: [u8; 128] = bytes(p);
        let qh: [u8; 64] = bytes(p.add(128));
        let scales: [u8; 16] = bytes(p.add(192));
        let d = half(p.add(208));
        let mut v = [0.0f32; 256];
        for h in 0..2 {
            for l in 0..32 {
                let (a, b, hb) = (ql[64 * h + l], ql[64 * h + l + 32], qh[32 * h + l]);
                let q = [
                    (a & 0x0f) | ((hb & 3) << 4),
                    (b & 0x0f) | (((hb >> 2) & 3) << 4),
                    (a >> 4) | (((hb >> 4) & 3) << 4),
                    (b >> 4) | (((hb >> 6) & 3) << 4),
                ];
                for (g, &q) in q.iter().enumerate() {
                    let e = 128 * h + 32 * g + l;
                    let dl = d * (scales[e / 16] as i8) as f32;
                    v[e] = dl * (q as i32 - 32) as f32;
                }
            }
        }
        emit(&v, f)
    }
}

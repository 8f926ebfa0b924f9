//! Portable kernels: each weight row is decoded once into signed 8-bit values and per-block
//! integer scales, then dotted exactly (i32) with every activation row; only the per-block
//! results are scaled and accumulated in f32.

// Register tiles index several arrays with the same counters.
#![allow(clippy::needless_range_loop)]

use tg_quant::{f16_to_f32, get_scale_min_k4, GgmlType};

use super::{QuantizedActivations, Task};

/// A weight row decoded for integer dot products.
struct Decoded {
    /// Signed quant values (`q - offset` for the offset formats; Q4_K/Q5_K keep `q ≥ 0`).
    q: Vec<i8>,
    /// Per block of the activation format: `d_w` (32-blocks) or the super-block `d`.
    d: Vec<f32>,
    /// K-quants: super-block `dmin`.
    dmin: Vec<f32>,
    /// K-quants: sub-block scales (8 per super-block for Q4_K/Q5_K, 16 for Q6_K).
    sc: Vec<i32>,
    /// Q4_K/Q5_K: sub-block mins (8 per super-block).
    mins: Vec<i32>,
}

fn rd16(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

impl Decoded {
    fn new(k: usize) -> Self {
        Decoded { q: vec![0; k], d: Vec::new(), dmin: Vec::new(), sc: Vec::new(), mins: Vec::new() }
    }

    /// Decodes one weight row `w` of type `ty` (validated length).
    fn decode(&mut self, ty: GgmlType, w: &[u8]) {
        self.d.clear();
        self.dmin.clear();
        self.sc.clear();
        self.mins.clear();
        let bs = ty.block_size();
        for (blk, q) in w.chunks_exact(ty.type_size()).zip(self.q.chunks_exact_mut(bs)) {
            match ty {
                GgmlType::Q4_0 => {
                    self.d.push(f16_to_f32(rd16(blk, 0)));
                    for j in 0..16 {
                        q[j] = (blk[2 + j] & 0x0F) as i8 - 8;
                        q[j + 16] = (blk[2 + j] >> 4) as i8 - 8;
                    }
                }
                GgmlType::Q5_0 => {
                    self.d.push(f16_to_f32(rd16(blk, 0)));
                    let qh = u32::from_le_bytes([blk[2], blk[3], blk[4], blk[5]]);
                    for j in 0..16 {
                        let lo = (blk[6 + j] & 0x0F) | (((qh >> j) & 1) << 4) as u8;
                        let hi = (blk[6 + j] >> 4) | (((qh >> (j + 16)) & 1) << 4) as u8;
                        q[j] = lo as i8 - 16;
                        q[j + 16] = hi as i8 - 16;
                    }
                }
                GgmlType::Q8_0 => {
                    self.d.push(f16_to_f32(rd16(blk, 0)));
                    for (q, &v) in q.iter_mut().zip(&blk[2..34]) {
                        *q = v as i8;
                    }
                }
                GgmlType::Q4_K | GgmlType::Q5_K => {
                    self.d.push(f16_to_f32(rd16(blk, 0)));
                    self.dmin.push(f16_to_f32(rd16(blk, 2)));
                    let mut scales = [0u8; 12];
                    scales.copy_from_slice(&blk[4..16]);
                    for s in 0..8 {
                        let (sc, m) = get_scale_min_k4(s, &scales);
                        self.sc.push(i32::from(sc));
                        self.mins.push(i32::from(m));
                    }
                    let (qh, qs) =
                        if ty == GgmlType::Q5_K { (Some(&blk[16..48]), &blk[48..176]) } else { (None, &blk[16..144]) };
                    for e in 0..256 {
                        let (c, h, j) = (e / 64, (e / 32) % 2, e % 32);
                        let mut v = (qs[32 * c + j] >> (4 * h)) & 0x0F;
                        if let Some(qh) = qh {
                            v |= ((qh[j] >> (e / 32)) & 1) << 4;
                        }
                        q[e] = v as i8;
                    }
                }
                GgmlType::Q6_K => {
                    self.d.push(f16_to_f32(rd16(blk, 208)));
                    let (ql, qh) = (&blk[0..128], &blk[128..192]);
                    for &s in &blk[192..208] {
                        self.sc.push(i32::from(s as i8));
                    }
                    for e in 0..256 {
                        let (h, r) = (e / 128, e % 128);
                        let lo = (ql[64 * h + r % 64] >> (4 * (r / 64))) & 0x0F;
                        let hi = (qh[32 * h + r % 32] >> (2 * (r / 32))) & 0x03;
                        q[e] = (lo | (hi << 4)) as i8 - 32;
                    }
                }
                _ => unreachable!("validated by the entry point"),
            }
        }
    }

    /// Dot product with activation row `i` of `xq`.
    fn dot(&self, ty: GgmlType, xq: &QuantizedActivations, i: usize) -> f32 {
        let k = xq.k;
        let xs = &xq.qs[i * k..(i + 1) * k];
        let idot = |a: &[i8], b: &[i8]| -> i32 { a.iter().zip(b).map(|(&a, &b)| i32::from(a) * i32::from(b)).sum() };
        let mut acc = 0.0f32;
        match ty {
            GgmlType::Q4_0 | GgmlType::Q5_0 | GgmlType::Q8_0 => {
                let nb = k / 32;
                let xd = &xq.d[i * nb..(i + 1) * nb];
                for b in 0..nb {
                    let isum = idot(&self.q[32 * b..32 * b + 32], &xs[32 * b..32 * b + 32]);
                    acc += (self.d[b] * xd[b]) * isum as f32;
                }
            }
            GgmlType::Q4_K | GgmlType::Q5_K => {
                let nb = k / 256;
                let xd = &xq.d[i * nb..(i + 1) * nb];
                let bsums = &xq.sums[i * nb * 16..(i + 1) * nb * 16];
                for b in 0..nb {
                    let (mut isum, mut msum) = (0i32, 0i32);
                    for s in 0..8 {
                        let e = 256 * b + 32 * s;
                        isum += self.sc[8 * b + s] * idot(&self.q[e..e + 32], &xs[e..e + 32]);
                        let xsum = i32::from(bsums[16 * b + 2 * s]) + i32::from(bsums[16 * b + 2 * s + 1]);
                        msum += self.mins[8 * b + s] * xsum;
                    }
                    acc += (self.d[b] * xd[b]) * isum as f32;
                    acc -= (self.dmin[b] * xd[b]) * msum as f32;
                }
            }
            GgmlType::Q6_K => {
                let nb = k / 256;
                let xd = &xq.d[i * nb..(i + 1) * nb];
                for b in 0..nb {
                    let mut isum = 0i32;
                    for t in 0..16 {
                        let e = 256 * b + 16 * t;
                        isum += self.sc[16 * b + t] * idot(&self.q[e..e + 16], &xs[e..e + 16]);
                    }
                    acc += (self.d[b] * xd[b]) * isum as f32;
                }
            }
            _ => unreachable!("validated by the entry point"),
        }
        acc
    }
}

/// Runs `t` on the portable path.
///
/// # Safety
/// `t` describes validated buffers; this task owns output columns `t.rows`.
pub(super) unsafe fn run(t: &Task<'_>) {
    let xq = t.xq;
    let mut dec = Decoded::new(xq.k);
    for j in t.rows.clone() {
        let w = std::slice::from_raw_parts(t.w.add(j * t.row_bytes), t.row_bytes);
        dec.decode(t.ty, w);
        for i in 0..xq.m {
            t.put(i, j, dec.dot(t.ty, xq, i));
        }
    }
}

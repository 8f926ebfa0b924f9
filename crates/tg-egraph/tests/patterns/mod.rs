//! The primitive compositions the fusion rules look for, written the way model code writes
//! them (see `tg_models::gemma3`), with optional commuted operands, and a random graph
//! generator that uses them. (Also included by `tg-compiler`'s rewrite-stage tests.)
#![allow(dead_code)]

use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use tg_ir::{BinaryOp, CmpOp, DType, Graph, GraphBuilder, IrError, Op, ReduceOp, Tensor, UnaryOp};

/// Multiplies in the given operand order (`swap` puts `b` first).
pub fn mul(b: &mut GraphBuilder, x: Tensor, y: Tensor, swap: bool) -> Result<Tensor, IrError> {
    if swap {
        b.mul(y, x)
    } else {
        b.mul(x, y)
    }
}

pub fn add(b: &mut GraphBuilder, x: Tensor, y: Tensor, swap: bool) -> Result<Tensor, IrError> {
    if swap {
        b.add(y, x)
    } else {
        b.add(x, y)
    }
}

/// `x · rsqrt(mean(x², axis) + eps) · w` (`axis` = last for a real RMSNorm).
pub fn rms_norm(b: &mut GraphBuilder, x: Tensor, w: Tensor, eps: f64, axis: usize, swap: bool) -> Result<Tensor, IrError> {
    let sq = b.mul(x, x)?;
    let ms = b.reduce(ReduceOp::Mean, sq, axis)?;
    let e = b.scalar(eps)?;
    let ms = add(b, ms, e, swap)?;
    let r = b.unary(UnaryOp::Rsqrt, ms)?;
    let y = mul(b, x, r, swap)?;
    mul(b, y, w, swap)
}

/// `0.5·x·(1 + tanh(√(2/π)·(x + c3·x³)))`; `c3` = 0.044715 for the real GELU.
pub fn gelu(b: &mut GraphBuilder, x: Tensor, c3: f64, swap: bool) -> Result<Tensor, IrError> {
    let x2 = b.mul(x, x)?;
    let x3 = mul(b, x2, x, swap)?;
    let k3 = b.scalar(c3)?;
    let c = mul(b, x3, k3, swap)?;
    let inner = add(b, x, c, swap)?;
    let k = b.scalar((2.0 / std::f64::consts::PI).sqrt())?;
    let inner = mul(b, inner, k, swap)?;
    let t = b.unary(UnaryOp::Tanh, inner)?;
    let one = b.scalar(1.0)?;
    let t1 = add(b, t, one, swap)?;
    let half = b.scalar(0.5)?;
    let hx = mul(b, x, half, swap)?;
    mul(b, hx, t1, swap)
}

/// `exp(x − max(x, max_axis)) / sum(exp(..), sum_axis)` (both last for a real softmax).
pub fn softmax(b: &mut GraphBuilder, x: Tensor, max_axis: usize, sum_axis: usize) -> Result<Tensor, IrError> {
    let m = b.reduce(ReduceOp::Max, x, max_axis)?;
    let d = b.sub(x, m)?;
    let e = b.unary(UnaryOp::Exp, d)?;
    let s = b.reduce(ReduceOp::Sum, e, sum_axis)?;
    b.div(e, s)
}

pub fn softmax_last(b: &mut GraphBuilder, x: Tensor) -> Result<Tensor, IrError> {
    let r = b.shape(x).len() - 1;
    softmax(b, x, r, r)
}

/// NeoX RoPE of `x [.., d]`: halves `x₁ = x[..d/2]`, `x₂ = x[d/2..]`,
/// `concat(x₁·cos − x₂·sin, x₂·cos + x₁·sin)`.
pub fn rope_neox(b: &mut GraphBuilder, x: Tensor, cos: Tensor, sin: Tensor, swap: bool) -> Result<Tensor, IrError> {
    let r = b.shape(x).len() - 1;
    let d = b.shape(x)[r];
    let x1 = b.slice(x, r, 0, d / 2)?;
    let x2 = b.slice(x, r, d / 2, d)?;
    let a = mul(b, x1, cos, swap)?;
    let c = mul(b, x2, sin, swap)?;
    let o1 = b.sub(a, c)?;
    let a = mul(b, x2, cos, swap)?;
    let c = mul(b, x1, sin, swap)?;
    let o2 = add(b, a, c, swap)?;
    b.concat(&[o1, o2], r)
}

/// `softmax(scale·(q·kᵀ) + mask)·v` in primitives (`scale` None: unscaled).
pub fn attention(b: &mut GraphBuilder, q: Tensor, k: Tensor, v: Tensor, mask: Tensor, scale: Option<f64>, swap: bool) -> Result<Tensor, IrError> {
    let mut s = b.matmul(q, k, true)?;
    if let Some(c) = scale {
        let c = b.scalar(c)?;
        s = mul(b, s, c, swap)?;
    }
    let s = add(b, s, mask, swap)?;
    let p = softmax_last(b, s)?;
    b.matmul(p, v, false)
}

/// Causal mask `[sq, sk]` (query i sees keys j ≤ i + sk − sq), 0 or −∞.
pub fn causal_mask(b: &mut GraphBuilder, sq: usize, sk: usize) -> Result<Tensor, IrError> {
    let i = b.iota(&[sq, sk], 0, DType::I32)?;
    let j = b.iota(&[sq, sk], 1, DType::I32)?;
    let off = b.constant((sk - sq) as f64, DType::I32)?;
    let i = b.add(i, off)?;
    let ok = b.compare(tg_ir::CmpOp::Le, j, i)?;
    let zero = b.scalar(0.0)?;
    let ninf = b.scalar(f64::NEG_INFINITY)?;
    b.select(ok, zero, ninf)
}

/// A fused op node.
pub fn fused(b: &mut GraphBuilder, op: Op, ins: &[Tensor]) -> Result<Tensor, IrError> {
    b.push(op, ins, None)
}

pub fn scaled(b: &mut GraphBuilder, x: Tensor, c: f64, swap: bool) -> Result<Tensor, IrError> {
    let k = b.scalar(c)?;
    mul(b, x, k, swap)
}

pub fn binary(b: &mut GraphBuilder, op: BinaryOp, x: Tensor, y: Tensor) -> Result<Tensor, IrError> {
    b.binary(op, x, y)
}

/// A random graph over f32 tensors using every op family and the primitive patterns the
/// fusion rules look for (sometimes with an intermediate read twice).
pub fn random_graph(rng: &mut ChaCha8Rng) -> Graph {
    let mut b = GraphBuilder::new();
    let d0 = rng.gen_range(1..5);
    let d1 = rng.gen_range(1..5);
    let d2 = 2 * rng.gen_range(1..5);
    let shape = [d0, d1, d2];
    let mut pool: Vec<Tensor> = (0..3).map(|i| b.input(&format!("x{i}"), &shape, DType::F32).unwrap()).collect();
    let w = b.weight("w", &[d2, d2], DType::F32).unwrap();
    let wn = b.weight("wn", &[d2], DType::F32).unwrap();
    let cs = b.input("cos", &[d0, 1, d2 / 2], DType::F32).unwrap();
    let sn = b.input("sin", &[d0, 1, d2 / 2], DType::F32).unwrap();
    let mut side_outputs: Vec<Tensor> = Vec::new();
    let steps = rng.gen_range(4..16);
    for _ in 0..steps {
        let a = pool[rng.gen_range(0..pool.len())];
        let c = pool[rng.gen_range(0..pool.len())];
        let sa = b.shape(a).to_vec();
        let r = sa.len();
        let swap = rng.gen_bool(0.5);
        let t = match rng.gen_range(0..18) {
            0 => {
                let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min];
                b.binary(ops[rng.gen_range(0..ops.len())], a, c).ok()
            }
            1 => {
                let ops = [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Abs];
                let x = scaled(&mut b, a, 0.5, swap).unwrap();
                b.unary(ops[rng.gen_range(0..ops.len())], x).ok()
            }
            2 => {
                let ops = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max];
                let red = b.reduce(ops[rng.gen_range(0..3)], a, rng.gen_range(0..r)).unwrap();
                b.add(a, red).ok()
            }
            3 => {
                let mut perm: Vec<usize> = (0..r).collect();
                perm.shuffle(rng);
                let pm = b.permute(a, &perm).unwrap();
                let back: Vec<usize> = (0..r).map(|i| perm.iter().position(|&x| x == i).unwrap()).collect();
                let e = b.unary(UnaryOp::Neg, pm).unwrap();
                b.permute(e, &back).ok()
            }
            4 => {
                let ax = rng.gen_range(0..r);
                if sa[ax] >= 2 {
                    let cut = rng.gen_range(1..sa[ax]);
                    let x = b.slice(a, ax, 0, cut).unwrap();
                    let y = b.slice(a, ax, cut, sa[ax]).unwrap();
                    let y = if rng.gen_bool(0.5) { scaled(&mut b, y, 2.0, swap).unwrap() } else { y };
                    b.concat(&[x, y], ax).ok()
                } else {
                    None
                }
            }
            5 => {
                let x = b.matmul(a, w, rng.gen_bool(0.5)).unwrap();
                Some(scaled(&mut b, x, 0.25, swap).unwrap())
            }
            6 => {
                let s = b.matmul(a, c, true).ok();
                s.and_then(|s| b.matmul(s, a, false).ok()).map(|x| scaled(&mut b, x, 0.1, swap).unwrap())
            }
            7 => {
                let z = b.scalar(0.0).unwrap();
                let cond = b.compare(CmpOp::Gt, a, z).unwrap();
                b.select(cond, a, c).ok()
            }
            8 => {
                let n: usize = sa.iter().product();
                let flat = b.reshape(a, &[n]).unwrap();
                let e = b.unary(UnaryOp::Abs, flat).unwrap();
                let mid = b.reshape(e, &[sa[0] * sa[1], sa[2]]).unwrap();
                b.reshape(mid, &sa).ok()
            }
            9 => {
                let one = b.scalar(1.0).unwrap();
                let zero = b.scalar(0.0).unwrap();
                let x = mul(&mut b, a, one, swap).unwrap();
                let x = add(&mut b, x, zero, swap).unwrap();
                let n = b.unary(UnaryOp::Neg, x).unwrap();
                b.unary(UnaryOp::Neg, n).ok()
            }
            10 => {
                let io = b.iota(&sa, rng.gen_range(0..r), DType::F32).unwrap();
                b.add(a, io).ok()
            }
            11 => {
                let io = b.iota(&sa, rng.gen_range(0..r), DType::I32).unwrap();
                let two = b.constant(2.0, DType::I32).unwrap();
                let m = b.binary(BinaryOp::Min, io, two).unwrap();
                let f = b.cast(m, DType::F32).unwrap();
                b.mul(a, f).ok()
            }
            12 => Some(softmax_last(&mut b, a).unwrap()),
            13 => {
                let offset = rng.gen_bool(0.5);
                let wv = if offset {
                    let one = b.scalar(1.0).unwrap();
                    b.add(wn, one).unwrap()
                } else {
                    wn
                };
                Some(rms_norm(&mut b, a, wv, 1e-6, r - 1, swap).unwrap())
            }
            14 => {
                let g = gelu(&mut b, a, 0.044715, swap).unwrap();
                if rng.gen_bool(0.5) {
                    Some(mul(&mut b, g, c, swap).unwrap())
                } else {
                    Some(g)
                }
            }
            15 => Some(rope_neox(&mut b, a, cs, sn, swap).unwrap()),
            16 => {
                // Attention over [d0, d1, d2] as [n_kv = 1, g = d0, sq = d1, d = d2] with keys
                // and values from `c`'s first row, and a causal mask.
                let q = b.reshape(a, &[1, d0, d1, d2]).unwrap();
                let q = scaled(&mut b, q, 0.3, swap).unwrap();
                let kv = b.slice(c, 0, 0, 1).unwrap();
                let kv = b.reshape(kv, &[1, 1, d1, d2]).unwrap();
                let m = causal_mask(&mut b, d1, d1).unwrap();
                let o = attention(&mut b, q, kv, kv, m, None, swap).unwrap();
                b.reshape(o, &sa).ok()
            }
            _ => {
                // A fusion whose intermediate has a second reader (exported as an output).
                let sq = b.mul(a, a).unwrap();
                let ms = b.reduce_last(ReduceOp::Mean, sq).unwrap();
                let eps = b.scalar(1e-5).unwrap();
                let ms = b.add(ms, eps).unwrap();
                let rs = b.unary(UnaryOp::Rsqrt, ms).unwrap();
                side_outputs.push(rs);
                let y = b.mul(a, rs).unwrap();
                b.mul(y, wn).ok()
            }
        };
        if let Some(t) = t {
            pool.push(t);
        }
    }
    let n_out = rng.gen_range(1..3).min(pool.len());
    for k in 0..n_out {
        b.output(&format!("out{k}"), pool[pool.len() - 1 - k]).unwrap();
    }
    for (k, t) in side_outputs.into_iter().enumerate() {
        b.output(&format!("side{k}"), t).unwrap();
    }
    b.finish().unwrap()
}

/// `(x − mean(x))·rsqrt(mean((x − mean(x))²) + ε)` over the last axis (the ONNX importer's
/// instance normalisation).
pub fn normalise_last(b: &mut GraphBuilder, x: Tensor, eps: f64) -> Result<Tensor, IrError> {
    let mean = b.reduce_last(ReduceOp::Mean, x)?;
    let d = b.sub(x, mean)?;
    let sq = b.mul(d, d)?;
    let var = b.reduce_last(ReduceOp::Mean, sq)?;
    let e = b.scalar(eps)?;
    let ve = b.add(var, e)?;
    let inv = b.unary(UnaryOp::Rsqrt, ve)?;
    b.mul(d, inv)
}

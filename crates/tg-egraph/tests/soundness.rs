//! Soundness of every rule.
//!
//! Each rule has a case generator that instantiates its left side and its right side on
//! random shapes. For each rule and several seeds:
//! 1. both sides are evaluated by the reference interpreter (f64) on random inputs and must
//!    agree within `TOL` (relative; both sides are exact f64 arithmetic, so only rounding
//!    differs);
//! 2. the rule alone, run on the left side, must fire and put the right side into the
//!    root's e-class (so the case tests what the rule really builds);
//! 3. the graph extracted after running the rule must verify and agree with the left side.
//!
//! `every_rule_has_a_soundness_case` fails for a rule without a case (and for a case whose
//! rule no longer exists), so a new rule cannot land untested.

mod common;
mod patterns;

use common::*;
use patterns as p;
use rand::seq::SliceRandom;
use rand::Rng;
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use tg_egraph::{enode_of, load, rewrite, saturate, Id, RewriteOptions, TEGraph};
use tg_ir::{Act, BinaryOp, CmpOp, DType, Graph, GraphBuilder, IrError, Op, Tensor, UnaryOp, Window};

/// Relative tolerance of the two sides (both evaluated in f64).
const TOL: f64 = 1e-9;
/// Random instances per rule.
const SEEDS: u64 = 12;

/// The two sides of a rule, on the same inputs `x0..` and weights `w0..`.
struct Case {
    lhs: Graph,
    rhs: Graph,
}

type Build<'a> = &'a dyn Fn(&mut GraphBuilder, &[Tensor], &[Tensor]) -> Result<Tensor, IrError>;

fn side(inputs: &[Vec<usize>], weights: &[Vec<usize>], f: Build) -> Graph {
    let mut b = GraphBuilder::new();
    let xs: Vec<Tensor> = inputs.iter().enumerate().map(|(i, s)| b.input(&format!("x{i}"), s, DType::F32).unwrap()).collect();
    let ws: Vec<Tensor> = weights.iter().enumerate().map(|(i, s)| b.weight(&format!("w{i}"), s, DType::F32).unwrap()).collect();
    let y = f(&mut b, &xs, &ws).unwrap_or_else(|e| panic!("building a case: {e}"));
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

fn case(inputs: &[Vec<usize>], weights: &[Vec<usize>], lhs: Build, rhs: Build) -> Case {
    Case { lhs: side(inputs, weights, lhs), rhs: side(inputs, weights, rhs) }
}

fn dims(rng: &mut ChaCha8Rng, rank: usize, max: usize) -> Vec<usize> {
    (0..rank).map(|_| rng.gen_range(1..=max)).collect()
}

fn perm(rng: &mut ChaCha8Rng, n: usize) -> Vec<usize> {
    let mut p: Vec<usize> = (0..n).collect();
    p.shuffle(rng);
    p
}

type CaseFn = fn(&mut ChaCha8Rng) -> Case;

/// One case generator per rule, by rule name.
fn cases() -> Vec<(&'static str, CaseFn)> {
    vec![
        // ---- layout
        ("reshape-reshape", |rng| {
            let s = dims(rng, 3, 5);
            let (a, b_, c) = (s[0], s[1], s[2]);
            case(
                std::slice::from_ref(&s),
                &[],
                &|b, x, _| {
                    let r = b.reshape(x[0], &[a * b_, c])?;
                    b.reshape(r, &[a, b_ * c])
                },
                &|b, x, _| b.reshape(x[0], &[a, b_ * c]),
            )
        }),
        ("reshape-identity", |rng| {
            let s = dims(rng, 3, 5);
            let s2 = s.clone();
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let n = b.unary(UnaryOp::Neg, x[0])?;
                    let r = b.reshape(n, &s2)?;
                    b.unary(UnaryOp::Exp, r)
                },
                &|b, x, _| {
                    let n = b.unary(UnaryOp::Neg, x[0])?;
                    b.unary(UnaryOp::Exp, n)
                },
            )
        }),
        ("permute-permute", |rng| {
            let s = dims(rng, 4, 4);
            let (q, pp) = (perm(rng, 4), perm(rng, 4));
            let r: Vec<usize> = pp.iter().map(|&i| q[i]).collect();
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let t = b.permute(x[0], &q)?;
                    b.permute(t, &pp)
                },
                &|b, x, _| b.permute(x[0], &r),
            )
        }),
        ("permute-identity", |rng| {
            let n = rng.gen_range(1..5);
            let s = dims(rng, n, 4);
            let id: Vec<usize> = (0..n).collect();
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let t = b.permute(x[0], &id)?;
                    b.unary(UnaryOp::Tanh, t)
                },
                &|b, x, _| b.unary(UnaryOp::Tanh, x[0]),
            )
        }),
        ("permute-unit-dims", |rng| {
            // A shape with unit dims and a permutation that moves only them.
            let n = rng.gen_range(2..6);
            loop {
                let s: Vec<usize> = (0..n).map(|_| if rng.gen_bool(0.5) { 1 } else { rng.gen_range(2..5) }).collect();
                let q = perm(rng, n);
                let moved: Vec<usize> = q.iter().copied().filter(|&i| s[i] != 1).collect();
                if q.iter().enumerate().all(|(i, &v)| i == v) || !moved.windows(2).all(|w| w[0] < w[1]) {
                    continue;
                }
                let out: Vec<usize> = q.iter().map(|&i| s[i]).collect();
                return case(&[s], &[], &|b, x, _| b.permute(x[0], &q), &|b, x, _| b.reshape(x[0], &out));
            }
        }),
        ("expand-expand", |rng| {
            let (a, b_, c) = (rng.gen_range(1..5), rng.gen_range(1..5), rng.gen_range(1..5));
            case(
                &[vec![1, c]],
                &[],
                &|b, x, _| {
                    let e = b.expand(x[0], &[b_, c])?;
                    b.expand(e, &[a, b_, c])
                },
                &|b, x, _| b.expand(x[0], &[a, b_, c]),
            )
        }),
        ("expand-identity", |rng| {
            let s = dims(rng, 3, 4);
            let s2 = s.clone();
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let e = b.expand(x[0], &s2)?;
                    b.unary(UnaryOp::Neg, e)
                },
                &|b, x, _| b.unary(UnaryOp::Neg, x[0]),
            )
        }),
        ("slice-full", |rng| {
            let s = dims(rng, 3, 5);
            let axis = rng.gen_range(0..3);
            let n = s[axis];
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let t = b.slice(x[0], axis, 0, n)?;
                    b.unary(UnaryOp::Sin, t)
                },
                &|b, x, _| b.unary(UnaryOp::Sin, x[0]),
            )
        }),
        ("slice-slice", |rng| {
            let a = rng.gen_range(1..4);
            let n = rng.gen_range(2..12);
            let (s1, e1) = {
                let s = rng.gen_range(0..n);
                (s, rng.gen_range(s + 1..=n))
            };
            let m = e1 - s1;
            let (s2, e2) = {
                let s = rng.gen_range(0..m);
                (s, rng.gen_range(s + 1..=m))
            };
            case(
                &[vec![a, n]],
                &[],
                &|b, x, _| {
                    let t = b.slice(x[0], 1, s1, e1)?;
                    b.slice(t, 1, s2, e2)
                },
                &|b, x, _| b.slice(x[0], 1, s1 + s2, s1 + e2),
            )
        }),
        ("concat-slices", |rng| {
            let s = dims(rng, 3, 6);
            let axis = rng.gen_range(0..3);
            let n = s[axis];
            let mut cuts: Vec<usize> = (1..n).filter(|_| rng.gen_bool(0.5)).collect();
            if cuts.is_empty() && n > 1 {
                cuts.push(n / 2);
            }
            let mut bounds = vec![0];
            bounds.extend(cuts);
            bounds.push(n);
            if bounds.len() < 3 {
                // A single piece: concat needs two; use an axis of size ≥ 2.
                let s = vec![2, s[1], s[2]];
                return case(
                    &[s],
                    &[],
                    &|b, x, _| {
                        let a = b.slice(x[0], 0, 0, 1)?;
                        let c = b.slice(x[0], 0, 1, 2)?;
                        let t = b.concat(&[a, c], 0)?;
                        b.unary(UnaryOp::Neg, t)
                    },
                    &|b, x, _| b.unary(UnaryOp::Neg, x[0]),
                );
            }
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let parts: Vec<Tensor> = bounds.windows(2).map(|w| b.slice(x[0], axis, w[0], w[1])).collect::<Result<_, _>>()?;
                    let t = b.concat(&parts, axis)?;
                    b.unary(UnaryOp::Neg, t)
                },
                &|b, x, _| b.unary(UnaryOp::Neg, x[0]),
            )
        }),
        ("matmul-transposed-rhs", |rng| {
            let (bt, m, k, n) = (rng.gen_range(1..4), rng.gen_range(1..6), rng.gen_range(1..7), rng.gen_range(1..6));
            if rng.gen_bool(0.5) {
                // a · permute(b [bt, n, k])  =  a · bᵀ
                case(
                    &[vec![bt, m, k], vec![bt, n, k]],
                    &[],
                    &|b, x, _| {
                        let t = b.permute(x[1], &[0, 2, 1])?;
                        b.matmul(x[0], t, false)
                    },
                    &|b, x, _| b.matmul(x[0], x[1], true),
                )
            } else {
                // a · permute(b [bt, k, n])ᵀ  =  a · b
                case(
                    &[vec![bt, m, k], vec![bt, k, n]],
                    &[],
                    &|b, x, _| {
                        let t = b.permute(x[1], &[0, 2, 1])?;
                        b.matmul(x[0], t, true)
                    },
                    &|b, x, _| b.matmul(x[0], x[1], false),
                )
            }
        }),
        ("scalar-mul-out-of-reshape", |rng| {
            let s = dims(rng, 3, 5);
            let c: f64 = rng.gen_range(-3.0..3.0);
            let swap = rng.gen_bool(0.5);
            let flat = vec![s.iter().product::<usize>()];
            let f2 = flat.clone();
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let y = p::scaled(b, x[0], c, swap)?;
                    b.reshape(y, &flat)
                },
                &|b, x, _| {
                    let r = b.reshape(x[0], &f2)?;
                    p::scaled(b, r, c, false)
                },
            )
        }),
        ("scalar-mul-out-of-permute", |rng| {
            let s = dims(rng, 3, 5);
            let c: f64 = rng.gen_range(-3.0..3.0);
            let swap = rng.gen_bool(0.5);
            let q = perm(rng, 3);
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let y = p::scaled(b, x[0], c, swap)?;
                    b.permute(y, &q)
                },
                &|b, x, _| {
                    let t = b.permute(x[0], &q)?;
                    p::scaled(b, t, c, false)
                },
            )
        }),
        // ---- simplify
        ("mul-one", |rng| identity_case(rng, BinaryOp::Mul, 1.0, true)),
        ("add-zero", |rng| identity_case(rng, BinaryOp::Add, 0.0, true)),
        ("sub-zero", |rng| identity_case(rng, BinaryOp::Sub, 0.0, false)),
        ("div-one", |rng| identity_case(rng, BinaryOp::Div, 1.0, false)),
        ("neg-neg", |rng| {
            let s = dims(rng, 2, 6);
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let n = b.unary(UnaryOp::Neg, x[0])?;
                    let n = b.unary(UnaryOp::Neg, n)?;
                    b.unary(UnaryOp::Exp, n)
                },
                &|b, x, _| b.unary(UnaryOp::Exp, x[0]),
            )
        }),
        ("cast-same", |rng| {
            let s = dims(rng, 2, 6);
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let c = b.cast(x[0], DType::F32)?;
                    b.unary(UnaryOp::Tanh, c)
                },
                &|b, x, _| b.unary(UnaryOp::Tanh, x[0]),
            )
        }),
        ("fold-unary", |rng| {
            let s = dims(rng, 2, 5);
            let ops = [
                UnaryOp::Neg,
                UnaryOp::Exp,
                UnaryOp::Log,
                UnaryOp::Tanh,
                UnaryOp::Sqrt,
                UnaryOp::Rsqrt,
                UnaryOp::Recip,
                UnaryOp::Sin,
                UnaryOp::Cos,
                UnaryOp::Abs,
                UnaryOp::Sigmoid,
                UnaryOp::Silu,
                UnaryOp::Erf,
            ];
            let u = ops[rng.gen_range(0..ops.len())];
            let c: f64 = rng.gen_range(0.1..3.0);
            let v = u.eval_f64(c);
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let k = b.scalar(c)?;
                    let f = b.unary(u, k)?;
                    b.add(x[0], f)
                },
                &|b, x, _| {
                    let k = b.scalar(v)?;
                    b.add(x[0], k)
                },
            )
        }),
        ("fold-binary", |rng| {
            let s = dims(rng, 2, 5);
            let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Max, BinaryOp::Min];
            let op = ops[rng.gen_range(0..ops.len())];
            let (c1, c2): (f64, f64) = (rng.gen_range(-3.0..3.0), rng.gen_range(0.5..3.0));
            let v = match op {
                BinaryOp::Add => c1 + c2,
                BinaryOp::Sub => c1 - c2,
                BinaryOp::Mul => c1 * c2,
                BinaryOp::Div => c1 / c2,
                BinaryOp::Max => c1.max(c2),
                _ => c1.min(c2),
            };
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let (k1, k2) = (b.scalar(c1)?, b.scalar(c2)?);
                    let k = b.binary(op, k1, k2)?;
                    b.mul(x[0], k)
                },
                &|b, x, _| {
                    let k = b.scalar(v)?;
                    b.mul(x[0], k)
                },
            )
        }),
        ("fold-scalar-mul", |rng| {
            let s = dims(rng, 3, 4);
            let (c1, c2): (f64, f64) = (rng.gen_range(-3.0..3.0), rng.gen_range(-3.0..3.0));
            let (s1, s2) = (rng.gen_bool(0.5), rng.gen_bool(0.5));
            case(
                &[s],
                &[],
                &|b, x, _| {
                    let y = p::scaled(b, x[0], c1, s1)?;
                    p::scaled(b, y, c2, s2)
                },
                &|b, x, _| p::scaled(b, x[0], c1 * c2, false),
            )
        }),
        // ---- fusion
        ("fuse-rmsnorm", |rng| {
            let rank = rng.gen_range(1..4);
            let s = dims(rng, rank, 7);
            let n = *s.last().unwrap();
            let eps: f64 = [1e-6, 1e-5, 0.5][rng.gen_range(0..3)];
            let swap = rng.gen_bool(0.5);
            let offset = rng.gen_bool(0.5); // HF checkpoints use (1 + w)
            let wshape = if rank == 1 || rng.gen_bool(0.7) { vec![n] } else { vec![1, n] };
            let weight = move |b: &mut GraphBuilder, w: Tensor| -> Result<Tensor, IrError> {
                if offset {
                    let one = b.scalar(1.0)?;
                    b.add(w, one)
                } else {
                    Ok(w)
                }
            };
            case(
                &[s],
                &[wshape],
                &|b, x, w| {
                    let w = weight(b, w[0])?;
                    let r = b.shape(x[0]).len() - 1;
                    p::rms_norm(b, x[0], w, eps, r, swap)
                },
                &|b, x, w| {
                    let w = weight(b, w[0])?;
                    p::fused(b, Op::RmsNorm { eps_bits: eps.to_bits() }, &[x[0], w])
                },
            )
        }),
        ("fuse-add-rmsnorm", |rng| {
            // Both results are read: y = rms_norm(a + b, w) · (a + b), so the case checks the
            // sum's class as well as the norm's.
            let rank = rng.gen_range(1..4);
            let s = dims(rng, rank, 7);
            let n = *s.last().unwrap();
            let eps: f64 = [1e-6, 0.5][rng.gen_range(0..2)];
            let swap = rng.gen_bool(0.5);
            let (s1, s2) = (s.clone(), s.clone());
            case(
                &[s.clone(), s],
                &[vec![n]],
                &move |b, x, w| {
                    let sum = if swap { b.add(x[1], x[0])? } else { b.add(x[0], x[1])? };
                    let y = p::fused(b, Op::RmsNorm { eps_bits: eps.to_bits() }, &[sum, w[0]])?;
                    b.mul(y, sum)
                },
                &move |b, x, w| {
                    let (a, c) = if swap { (x[1], x[0]) } else { (x[0], x[1]) };
                    let t = p::fused(b, Op::AddRmsNorm { eps_bits: eps.to_bits() }, &[a, c, w[0]])?;
                    let sum = b.slice(t, 0, 0, 1)?;
                    let sum = b.reshape(sum, &s1)?;
                    let y = b.slice(t, 0, 1, 2)?;
                    let y = b.reshape(y, &s2)?;
                    b.mul(y, sum)
                },
            )
        }),
        ("fuse-matmul-add", |rng| {
            // x [.., m, k] · W[n, k]ᵀ + c, c a bias row [n] or a residual [.., m, n].
            let (m, k, n) = (rng.gen_range(1..6), rng.gen_range(1..7), rng.gen_range(1..6));
            let batch = rng.gen_bool(0.3);
            let xs = if batch { vec![2, m, k] } else { vec![m, k] };
            let out = if batch { vec![2, m, n] } else { vec![m, n] };
            let cs = if rng.gen_bool(0.5) { vec![n] } else { out };
            let swap = rng.gen_bool(0.5);
            case(
                &[xs, cs],
                &[vec![n, k]],
                &move |b, x, w| {
                    let p = b.matmul(x[0], w[0], true)?;
                    if swap {
                        b.add(x[1], p)
                    } else {
                        b.add(p, x[1])
                    }
                },
                &|b, x, w| p::fused(b, Op::MatMulAdd { transpose_rhs: true }, &[x[0], w[0], x[1]]),
            )
        }),
        ("fuse-gelu-tanh", |rng| {
            let s = dims(rng, 2, 9);
            let swap = rng.gen_bool(0.5);
            case(&[s], &[], &|b, x, _| p::gelu(b, x[0], 0.044715, swap), &|b, x, _| p::fused(b, Op::GeluTanh, &[x[0]]))
        }),
        ("fuse-gated-gelu", |rng| {
            let s = dims(rng, 2, 9);
            let (swap, fused_gelu) = (rng.gen_bool(0.5), rng.gen_bool(0.5));
            case(
                &[s.clone(), s],
                &[],
                &|b, x, _| {
                    let g = if fused_gelu { p::fused(b, Op::GeluTanh, &[x[0]])? } else { p::gelu(b, x[0], 0.044715, swap)? };
                    p::mul(b, g, x[1], swap)
                },
                &|b, x, _| p::fused(b, Op::GatedGelu, &[x[0], x[1]]),
            )
        }),
        ("fuse-softmax", |rng| {
            let rank = rng.gen_range(1..5);
            let s = dims(rng, rank, 6);
            case(&[s], &[], &|b, x, _| p::softmax_last(b, x[0]), &|b, x, _| p::fused(b, Op::Softmax, &[x[0]]))
        }),
        ("fuse-rope-neox", |rng| {
            let (seq, heads, h) = (rng.gen_range(1..6), rng.gen_range(1..4), rng.gen_range(1..6));
            let swap = rng.gen_bool(0.5);
            let t = vec![seq, 1, h];
            case(&[vec![seq, heads, 2 * h], t.clone(), t], &[], &|b, x, _| p::rope_neox(b, x[0], x[1], x[2], swap), &|b, x, _| p::fused(b, Op::RopeNeox, &[x[0], x[1], x[2]]))
        }),
        ("fuse-rmsnorm-rope", |rng| {
            let (seq, heads, h) = (rng.gen_range(1..6), rng.gen_range(1..4), rng.gen_range(1..6));
            let eps: f64 = [1e-6, 0.5][rng.gen_range(0..2)];
            let t = vec![seq, 1, h];
            case(
                &[vec![seq, heads, 2 * h], t.clone(), t],
                &[vec![2 * h]],
                &|b, x, w| {
                    let y = p::fused(b, Op::RmsNorm { eps_bits: eps.to_bits() }, &[x[0], w[0]])?;
                    p::fused(b, Op::RopeNeox, &[y, x[1], x[2]])
                },
                &|b, x, w| p::fused(b, Op::RmsNormRopeNeox { eps_bits: eps.to_bits() }, &[x[0], w[0], x[1], x[2]]),
            )
        }),
        ("attention-seq-major", |rng| {
            let (nkv, g, sq, d) = (rng.gen_range(1..3), rng.gen_range(1..4), rng.gen_range(1..6), rng.gen_range(1..6));
            let sk = sq + rng.gen_range(0..3);
            let scale: f64 = rng.gen_range(0.1..1.0);
            let kv = vec![nkv, 1, sk, d];
            let op = Op::Attention { scale_bits: scale.to_bits() };
            case(
                &[vec![sq, nkv, g, d], kv.clone(), kv, vec![sq, sk]],
                &[],
                &move |b, x, _| {
                    let q = b.permute(x[0], &[1, 2, 0, 3])?;
                    let o = p::fused(b, op.clone(), &[q, x[1], x[2], x[3]])?;
                    b.permute(o, &[2, 0, 1, 3])
                },
                &move |b, x, _| p::fused(b, Op::AttentionSeqMajor { scale_bits: scale.to_bits() }, &[x[0], x[1], x[2], x[3]]),
            )
        }),
        ("fuse-attention", |rng| {
            let (nkv, g, sq, d) = (rng.gen_range(1..3), rng.gen_range(1..4), rng.gen_range(1..6), rng.gen_range(1..6));
            let sk = sq + rng.gen_range(0..3);
            let scale = if rng.gen_bool(0.5) { Some(rng.gen_range(0.1..1.0)) } else { None };
            let swap = rng.gen_bool(0.5);
            let causal = rng.gen_bool(0.5);
            let mshape = if rng.gen_bool(0.7) { vec![sq, sk] } else { vec![1, 1, sq, sk] };
            let kv = vec![nkv, 1, sk, d];
            let ins = if causal { vec![vec![nkv, g, sq, d], kv.clone(), kv] } else { vec![vec![nkv, g, sq, d], kv.clone(), kv, mshape] };
            let mask = move |b: &mut GraphBuilder, x: &[Tensor]| if causal { p::causal_mask(b, sq, sk) } else { Ok(x[3]) };
            case(
                &ins,
                &[],
                &|b, x, _| {
                    let m = mask(b, x)?;
                    p::attention(b, x[0], x[1], x[2], m, scale, swap)
                },
                &|b, x, _| {
                    let m = mask(b, x)?;
                    p::fused(b, Op::Attention { scale_bits: scale.unwrap_or(1.0).to_bits() }, &[x[0], x[1], x[2], m])
                },
            )
        }),
        ("attention-absorb-scale", |rng| {
            let (nkv, g, sq, d) = (rng.gen_range(1..3), rng.gen_range(1..4), rng.gen_range(1..6), rng.gen_range(1..6));
            let sk = rng.gen_range(1..6);
            let (s0, c): (f64, f64) = (rng.gen_range(0.2..1.5), rng.gen_range(-1.0..1.0));
            let swap = rng.gen_bool(0.5);
            let kv = vec![nkv, 1, sk, d];
            case(
                &[vec![nkv, g, sq, d], kv.clone(), kv, vec![sq, sk]],
                &[],
                &|b, x, _| {
                    let q = p::scaled(b, x[0], c, swap)?;
                    p::fused(b, Op::Attention { scale_bits: s0.to_bits() }, &[q, x[1], x[2], x[3]])
                },
                &|b, x, _| p::fused(b, Op::Attention { scale_bits: (s0 * c).to_bits() }, &[x[0], x[1], x[2], x[3]]),
            )
        }),
        ("fuse-attention-vt", |rng| {
            // The attention Einsums' import: q, k [b, c, t] scaled, permuted to [b, t, c].
            let (bt, c, t, sk) = (rng.gen_range(1..4), rng.gen_range(1..6), rng.gen_range(1..7), rng.gen_range(1..7));
            let (sq, sk2): (f64, f64) = (rng.gen_range(0.2..1.0), rng.gen_range(0.2..1.0));
            let swap = rng.gen_bool(0.5);
            case(
                &[vec![bt, c, t], vec![bt, c, sk], vec![bt, c, sk]],
                &[],
                &move |b, x, _| {
                    // (The scales sit after the permutes here; on the Einsum import they
                    // are before them, and the scalar-out-of-permute rule moves them.)
                    let q = b.permute(x[0], &[0, 2, 1])?;
                    let k = b.permute(x[1], &[0, 2, 1])?;
                    let q = p::scaled(b, q, sq, swap)?;
                    let k = p::scaled(b, k, sk2, swap)?;
                    let s = b.matmul(q, k, true)?;
                    let w = p::softmax_last(b, s)?;
                    b.matmul(w, x[2], true)
                },
                &move |b, x, _| {
                    let q = b.permute(x[0], &[0, 2, 1])?;
                    let q = b.reshape(q, &[bt, 1, t, c])?;
                    let k = b.permute(x[1], &[0, 2, 1])?;
                    let k = b.reshape(k, &[bt, 1, sk, c])?;
                    let v = b.permute(x[2], &[0, 2, 1])?;
                    let v = b.reshape(v, &[bt, 1, sk, c])?;
                    let z = b.scalar(0.0)?;
                    let m = b.expand(z, &[t, sk])?;
                    let a = p::fused(b, Op::Attention { scale_bits: (sq * sk2).to_bits() }, &[q, k, v, m])?;
                    b.reshape(a, &[bt, t, c])
                },
            )
        }),
        // ---- CNN fusions
        ("fuse-sigmoid", |rng| {
            let s = dims(rng, 3, 5);
            let div = rng.gen_bool(0.5);
            case(
                &[s],
                &[],
                &move |b, x, _| {
                    let n = b.unary(UnaryOp::Neg, x[0])?;
                    let e = b.unary(UnaryOp::Exp, n)?;
                    let one = b.scalar(1.0)?;
                    let d = b.add(e, one)?;
                    if div {
                        let one = b.scalar(1.0)?;
                        b.div(one, d)
                    } else {
                        b.unary(UnaryOp::Recip, d)
                    }
                },
                &|b, x, _| b.unary(UnaryOp::Sigmoid, x[0]),
            )
        }),
        ("fuse-silu", |rng| {
            let s = dims(rng, 3, 5);
            let swap = rng.gen_bool(0.5);
            case(
                &[s],
                &[],
                &move |b, x, _| {
                    let g = b.unary(UnaryOp::Sigmoid, x[0])?;
                    p::mul(b, x[0], g, swap)
                },
                &|b, x, _| b.unary(UnaryOp::Silu, x[0]),
            )
        }),
        ("fuse-conv-bias", |rng| {
            let (xs, ws, window, groups) = conv_geometry(rng);
            let m = ws[0];
            let bias = channel_shape(m, xs.len());
            let swap = rng.gen_bool(0.5);
            let (w1, w2) = (window.clone(), window.clone());
            case(
                &[xs, bias],
                &[ws],
                &move |b, x, w| {
                    let y = b.conv(x[0], w[0], w1.clone(), groups)?;
                    p::add(b, y, x[1], swap)
                },
                &move |b, x, w| p::fused(b, Op::ConvBias { window: w2.clone(), groups, act: Act::None }, &[x[0], w[0], x[1]]),
            )
        }),
        ("fuse-conv-act", |rng| {
            let (xs, ws, window, groups) = conv_geometry(rng);
            let bias = channel_shape(ws[0], xs.len());
            let act = random_act(rng);
            // With or without a residual: the activation comes after it either way.
            let out: Vec<usize> = [xs[0], ws[0]].into_iter().chain(window.output(&xs[2..]).unwrap()).collect();
            let mut inputs = vec![xs, bias];
            if rng.gen_bool(0.5) {
                inputs.push(out);
            }
            let (w1, w2) = (window.clone(), window.clone());
            case(
                &inputs,
                &[ws],
                &move |b, x, w| {
                    let ops: Vec<_> = [x[0], w[0]].into_iter().chain(x[1..].iter().copied()).collect();
                    let y = p::fused(b, Op::ConvBias { window: w1.clone(), groups, act: Act::None }, &ops)?;
                    activation(b, y, act)
                },
                &move |b, x, w| {
                    let ops: Vec<_> = [x[0], w[0]].into_iter().chain(x[1..].iter().copied()).collect();
                    p::fused(b, Op::ConvBias { window: w2.clone(), groups, act }, &ops)
                },
            )
        }),
        ("fuse-conv-residual", |rng| {
            let (xs, ws, window, groups) = conv_geometry(rng);
            let bias = channel_shape(ws[0], xs.len());
            let out: Vec<usize> = [xs[0], ws[0]].into_iter().chain(window.output(&xs[2..]).unwrap()).collect();
            let swap = rng.gen_bool(0.5);
            let (w1, w2) = (window.clone(), window.clone());
            case(
                &[xs, bias, out],
                &[ws],
                &move |b, x, w| {
                    let y = p::fused(b, Op::ConvBias { window: w1.clone(), groups, act: Act::None }, &[x[0], w[0], x[1]])?;
                    p::add(b, y, x[2], swap)
                },
                &move |b, x, w| p::fused(b, Op::ConvBias { window: w2.clone(), groups, act: Act::None }, &[x[0], w[0], x[1], x[2]]),
            )
        }),
        ("conv-im2col", |rng| {
            let (xs, ws, window, groups) = conv_geometry(rng);
            let (n, m, k) = (xs[0], ws[0], ws[1..].iter().product::<usize>());
            let out: Vec<usize> = [n, m].into_iter().chain(window.output(&xs[2..]).unwrap()).collect();
            let (w1, w2) = (window.clone(), window.clone());
            case(&[xs], &[ws], &move |b, x, w| b.conv(x[0], w[0], w1.clone(), groups), &move |b, x, w| {
                let cols = b.im2col(x[0], w2.clone(), groups)?;
                let wr = b.reshape(w[0], &[1, groups, m / groups, k])?;
                let y = b.matmul(wr, cols, false)?;
                b.reshape(y, &out)
            })
        }),
        ("im2col-pointwise", |rng| {
            let r = rng.gen_range(1..4);
            let groups = rng.gen_range(1..3);
            let mut xs = vec![rng.gen_range(1..3), groups * rng.gen_range(1..4)];
            xs.extend(dims(rng, r, 5));
            let target = vec![xs[0], groups, xs[1] / groups, xs[2..].iter().product()];
            let mut window = Window::new(vec![1; r]);
            window.dilation = (0..r).map(|_| rng.gen_range(1..3)).collect();
            case(&[xs], &[], &move |b, x, _| b.im2col(x[0], window.clone(), groups), &move |b, x, _| b.reshape(x[0], &target))
        }),
        ("fuse-group-norm", |rng| {
            let (n, g, cg) = (rng.gen_range(1..3), rng.gen_range(1..4), rng.gen_range(1..4));
            let c = g * cg;
            let rank = rng.gen_range(1..3);
            let sp = dims(rng, rank, 4);
            let mut xs = vec![n, c];
            xs.extend(&sp);
            let eps: f64 = [1e-5, 1e-6, 0.1][rng.gen_range(0..3)];
            let ch = channel_shape(c, xs.len());
            let swap = rng.gen_bool(0.5);
            let per = cg * sp.iter().product::<usize>();
            let xs2 = xs.clone();
            case(
                &[xs, ch.clone(), ch],
                &[],
                &move |b, x, _| {
                    let r = b.reshape(x[0], &[n, g, per])?;
                    let y = p::normalise_last(b, r, eps)?;
                    let y = b.reshape(y, &xs2)?;
                    let y = p::mul(b, y, x[1], swap)?;
                    p::add(b, y, x[2], swap)
                },
                &move |b, x, _| p::fused(b, Op::GroupNorm { groups: g, eps_bits: eps.to_bits(), act: Act::None }, &[x[0], x[1], x[2]]),
            )
        }),
        ("fuse-group-norm-act", |rng| {
            let (n, g, cg) = (rng.gen_range(1..3), rng.gen_range(1..4), rng.gen_range(1..4));
            let c = g * cg;
            let mut xs = vec![n, c];
            xs.extend(dims(rng, 2, 4));
            let ch = channel_shape(c, xs.len());
            let act = random_act(rng);
            let eps = 1e-5f64;
            case(
                &[xs, ch.clone(), ch],
                &[],
                &move |b, x, _| {
                    let y = p::fused(b, Op::GroupNorm { groups: g, eps_bits: eps.to_bits(), act: Act::None }, &[x[0], x[1], x[2]])?;
                    activation(b, y, act)
                },
                &move |b, x, _| p::fused(b, Op::GroupNorm { groups: g, eps_bits: eps.to_bits(), act }, &[x[0], x[1], x[2]]),
            )
        }),
        ("fold-affine-into-group-norm", |rng| {
            let (n, g, cg) = (rng.gen_range(1..4), rng.gen_range(1..4), rng.gen_range(1..4));
            let c = g * cg;
            let mut xs = vec![n, c];
            let rank = rng.gen_range(1..3);
            xs.extend(dims(rng, rank, 4));
            let ch = channel_shape(c, xs.len());
            // The scale and shift after the norm: per channel or per image and channel.
            let mut img = vec![n, c];
            img.extend(std::iter::repeat_n(1, xs.len() - 2));
            let ab = if rng.gen_bool(0.5) { img } else { ch.clone() };
            let swap = rng.gen_bool(0.5);
            let eps = [1e-5f64, 0.1][rng.gen_range(0..2)];
            let op = Op::GroupNorm { groups: g, eps_bits: eps.to_bits(), act: Act::None };
            let op2 = op.clone();
            case(
                &[xs, ch.clone(), ch, ab.clone(), ab],
                &[],
                &move |b, x, _| {
                    let y = p::fused(b, op.clone(), &[x[0], x[1], x[2]])?;
                    let y = p::mul(b, y, x[3], swap)?;
                    p::add(b, y, x[4], swap)
                },
                &move |b, x, _| {
                    let gm = b.mul(x[1], x[3])?;
                    let bm = b.mul(x[2], x[3])?;
                    let bt = b.add(bm, x[4])?;
                    p::fused(b, op2.clone(), &[x[0], gm, bt])
                },
            )
        }),
    ]
}

/// `neg(x op e)` against `neg(x)` for the identity element `e`.
fn identity_case(rng: &mut ChaCha8Rng, op: BinaryOp, e: f64, commutative: bool) -> Case {
    let s = dims(rng, 3, 5);
    let swap = commutative && rng.gen_bool(0.5);
    case(
        &[s],
        &[],
        &|b, x, _| {
            let k = b.scalar(e)?;
            let y = if swap { b.binary(op, k, x[0])? } else { b.binary(op, x[0], k)? };
            b.unary(UnaryOp::Neg, y)
        },
        &|b, x, _| b.unary(UnaryOp::Neg, x[0]),
    )
}

/// The class of `g`'s output in `eg`, if every node of `g` is in the e-graph.
fn lookup_graph(eg: &TEGraph, g: &Graph) -> Option<Id> {
    let mut map: Vec<Option<Id>> = vec![None; g.nodes.len()];
    for (i, n) in g.nodes.iter().enumerate() {
        let node = enode_of(n, &map).ok()?;
        map[i] = Some(eg.lookup(node)?);
    }
    map[g.outputs[0].1].map(|id| eg.find(id))
}

fn only(rule: &str) -> RewriteOptions {
    let mut o = RewriteOptions::default();
    for r in tg_egraph::catalog() {
        if r.name != rule {
            o.disable(r.name).unwrap();
        }
    }
    o
}

fn check_rule(rule: &str, make: CaseFn, seed: u64) {
    let mut r = rng(seed);
    let c = make(&mut r);
    let what = format!("rule {rule}, seed {seed}");
    // 1. Both sides agree on random values.
    let (inputs, weights) = random_feeds(&c.lhs, &mut r, 1.5);
    assert_same_outputs(&what, &c.lhs, &c.rhs, &inputs, &weights, TOL);
    // 2. The rule alone puts the right side into the root's class.
    let opts = only(rule);
    let mut loaded = load(&c.lhs).unwrap();
    let rep = saturate(&mut loaded, &opts).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(rep.applications.get(rule).copied().unwrap_or(0) >= 1, "{what}: the rule did not fire: {rep:?}");
    let root = loaded.roots()[0];
    let rhs = lookup_graph(&loaded.egraph, &c.rhs).unwrap_or_else(|| panic!("{what}: the right side is not in the e-graph"));
    assert_eq!(rhs, root, "{what}: the right side is in another class than the left side");
    // 3. Extraction with the rule gives a verified graph with the same values.
    let out = rewrite(&c.lhs, &opts).unwrap_or_else(|e| panic!("{what}: rewrite: {e}"));
    tg_ir::verify(&out.graph).unwrap();
    assert_same_outputs(&format!("{what} (extracted)"), &c.lhs, &out.graph, &inputs, &weights, TOL);
}

#[test]
fn every_rule_has_a_soundness_case() {
    let rules: BTreeSet<&str> = tg_egraph::catalog().iter().map(|r| r.name).collect();
    let covered: BTreeSet<&str> = cases().iter().map(|(n, _)| *n).collect();
    let missing: Vec<_> = rules.difference(&covered).collect();
    let stale: Vec<_> = covered.difference(&rules).collect();
    assert!(missing.is_empty(), "rules without a soundness case: {missing:?}");
    assert!(stale.is_empty(), "soundness cases for rules that do not exist: {stale:?}");
    assert_eq!(cases().len(), covered.len(), "a rule has two cases");
    eprintln!("{} rules, each with a soundness case", rules.len());
}

#[test]
fn every_rule_is_sound() {
    let base = base_seed("every_rule_is_sound", 0x50_0d);
    let mut by_family: HashMap<&str, usize> = HashMap::new();
    let families: HashMap<&str, &str> = tg_egraph::catalog().iter().map(|r| (r.name, r.family)).collect();
    for (name, make) in cases() {
        for s in 0..SEEDS {
            check_rule(name, make, base.wrapping_add(s).wrapping_mul(1000).wrapping_add(name.len() as u64));
        }
        *by_family.entry(families[name]).or_default() += 1;
    }
    eprintln!("sound on {SEEDS} random instances each: {by_family:?}");
}

/// A random grouped convolution: input shape, weight shape, window (1 or 2 spatial axes,
/// strides, dilations, padding) and groups.
fn conv_geometry(rng: &mut ChaCha8Rng) -> (Vec<usize>, Vec<usize>, Window, usize) {
    let r = rng.gen_range(1..3);
    let groups = rng.gen_range(1..3);
    let (c, m) = (groups * rng.gen_range(1..3), groups * rng.gen_range(1..3));
    let size: Vec<usize> = (0..r).map(|_| rng.gen_range(1..4)).collect();
    let mut w = Window::new(size.clone());
    w.stride = (0..r).map(|_| rng.gen_range(1..3)).collect();
    w.dilation = (0..r).map(|_| rng.gen_range(1..3)).collect();
    w.pad_begin = (0..r).map(|_| rng.gen_range(0..2)).collect();
    w.pad_end = (0..r).map(|_| rng.gen_range(0..2)).collect();
    let mut xs = vec![rng.gen_range(1..3), c];
    // Large enough for one output position along every axis.
    xs.extend((0..r).map(|a| w.dilation[a] * (size[a] - 1) + 1 + rng.gen_range(0..4)));
    let mut ws = vec![m, c / groups];
    ws.extend(&size);
    (xs, ws, w, groups)
}

/// `[c, 1, ..]` with rank `rank − 1`: one value per channel of an `[N, c, ..]` tensor.
fn channel_shape(c: usize, rank: usize) -> Vec<usize> {
    let mut s = vec![c];
    s.extend(std::iter::repeat_n(1, rank - 2));
    s
}

fn random_act(rng: &mut ChaCha8Rng) -> Act {
    match rng.gen_range(0..4) {
        0 => Act::Relu,
        1 => Act::LeakyRelu { alpha_bits: [0.2f64, 0.01][rng.gen_range(0..2)].to_bits() },
        2 => Act::LeakyReluFloor { alpha_bits: 0.2f64.to_bits(), floor_bits: [-0.4f64, 0.5][rng.gen_range(0..2)].to_bits() },
        _ => Act::Silu,
    }
}

/// `act(y)` written as the ONNX importer writes it.
fn activation(b: &mut GraphBuilder, y: Tensor, act: Act) -> Result<Tensor, IrError> {
    match act {
        Act::None => Ok(y),
        Act::Relu => {
            let z = b.scalar(0.0)?;
            b.binary(BinaryOp::Max, y, z)
        }
        Act::LeakyRelu { alpha_bits } => {
            let z = b.scalar(0.0)?;
            let neg = b.compare(CmpOp::Lt, y, z)?;
            let ay = b.scale(y, f64::from_bits(alpha_bits))?;
            b.select(neg, ay, y)
        }
        Act::LeakyReluFloor { alpha_bits, floor_bits } => {
            let l = activation(b, y, Act::LeakyRelu { alpha_bits })?;
            let f = b.scalar(f64::from_bits(floor_bits))?;
            b.binary(BinaryOp::Max, l, f)
        }
        Act::Silu => b.unary(UnaryOp::Silu, y),
    }
}

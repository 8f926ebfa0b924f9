//! Random graphs through the whole pipeline: every compiled plan passes the independent
//! validator and its outputs equal the reference interpreter's on random inputs.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use tg_compiler::{compile, validate, CompileOptions};
use tg_ir::{BinaryOp, CmpOp, DType, Graph, GraphBuilder, HostTensor, ReduceOp, Tensor, UnaryOp};
use tg_runtime::{CpuDevice, Device, Executable};

fn device(threads: usize) -> Arc<dyn Device> {
    Arc::new(CpuDevice::new(threads).expect("cpu device"))
}

/// Builds a random graph over f32 tensors of rank 2–3 using every op family, returning
/// the graph, its random inputs and f32 weights.
fn random_graph(rng: &mut ChaCha8Rng) -> (Graph, HashMap<String, HostTensor>, HashMap<String, Vec<u8>>) {
    let mut b = GraphBuilder::new();
    let mut inputs = HashMap::new();
    let mut weights = HashMap::new();
    let d0 = rng.gen_range(1..6);
    let d1 = rng.gen_range(1..7);
    let d2 = rng.gen_range(1..9);
    let mut pool: Vec<Tensor> = Vec::new();
    for i in 0..3 {
        let shape = [d0, d1, d2];
        let name = format!("x{i}");
        let t = b.input(&name, &shape, DType::F32).unwrap();
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-2.0..2.0)).collect();
        inputs.insert(name, HostTensor::f32(&shape, v).unwrap());
        pool.push(t);
    }
    let w = b.weight("w", &[d2, d2], DType::F32).unwrap();
    let wv: Vec<f32> = (0..d2 * d2).map(|_| rng.gen_range(-1.0..1.0)).collect();
    weights.insert("w".to_string(), tg_ir::f32_bytes(&wv));
    let steps = rng.gen_range(4..14);
    for _ in 0..steps {
        let a = pool[rng.gen_range(0..pool.len())];
        let c = pool[rng.gen_range(0..pool.len())];
        let sa = b.shape(a).to_vec();
        let r = sa.len();
        let choice = rng.gen_range(0..14);
        let t = match choice {
            0 => {
                let ops = [BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Max, BinaryOp::Min];
                if b.shape(c) == sa.as_slice() {
                    b.binary(ops[rng.gen_range(0..ops.len())], a, c).ok()
                } else {
                    None
                }
            }
            1 => {
                let ops = [UnaryOp::Neg, UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Sin, UnaryOp::Cos, UnaryOp::Abs];
                let x = b.scale(a, 0.5).unwrap();
                b.unary(ops[rng.gen_range(0..ops.len())], x).ok()
            }
            2 => {
                let ops = [ReduceOp::Sum, ReduceOp::Mean, ReduceOp::Max];
                let red = b.reduce(ops[rng.gen_range(0..3)], a, rng.gen_range(0..r)).unwrap();
                b.add(a, red).ok() // broadcast back
            }
            3 => {
                let mut perm: Vec<usize> = (0..r).collect();
                for i in (1..r).rev() {
                    perm.swap(i, rng.gen_range(0..=i));
                }
                let p = b.permute(a, &perm).unwrap();
                let back: Vec<usize> = (0..r).map(|i| perm.iter().position(|&x| x == i).unwrap()).collect();
                let e = b.unary(UnaryOp::Neg, p).unwrap();
                b.permute(e, &back).ok()
            }
            4 => {
                let ax = rng.gen_range(0..r);
                if sa[ax] >= 2 {
                    let cut = rng.gen_range(1..sa[ax]);
                    let x = b.slice(a, ax, 0, cut).unwrap();
                    let y = b.slice(a, ax, cut, sa[ax]).unwrap();
                    let y = b.scale(y, 2.0).unwrap();
                    b.concat(&[x, y], ax).ok()
                } else {
                    None
                }
            }
            5 => {
                let x = b.matmul(a, w, false).unwrap();
                Some(b.scale(x, 0.25).unwrap())
            }
            6 => {
                // Batched matmul with the transposed rhs: [.., m, k] · [.., n, k]ᵀ, then back.
                let s = b.matmul(a, c, true).ok();
                s.and_then(|s| b.matmul(s, a, false).ok()).map(|x| b.scale(x, 0.1).unwrap())
            }
            7 => {
                let z = b.scalar(0.0).unwrap();
                let cond = b.compare(CmpOp::Gt, a, z).unwrap();
                b.select(cond, a, c).ok().filter(|_| b.shape(c) == sa.as_slice())
            }
            8 => {
                let n: usize = sa.iter().product();
                let flat = b.reshape(a, &[n]).unwrap();
                let e = b.unary(UnaryOp::Abs, flat).unwrap();
                b.reshape(e, &sa).ok()
            }
            9 => {
                // Broadcast a row.
                let row = b.slice(a, 0, 0, 1).unwrap();
                b.mul(a, row).ok()
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
            12 => {
                // Softmax over the last axis.
                let m = b.reduce_last(ReduceOp::Max, a).unwrap();
                let d = b.sub(a, m).unwrap();
                let e = b.unary(UnaryOp::Exp, d).unwrap();
                let s = b.reduce_last(ReduceOp::Sum, e).unwrap();
                b.div(e, s).ok()
            }
            _ => {
                let x = b.mul(a, a).unwrap();
                let ms = b.reduce_last(ReduceOp::Mean, x).unwrap();
                let eps = b.scalar(1e-6).unwrap();
                let ms = b.add(ms, eps).unwrap();
                let rs = b.unary(UnaryOp::Rsqrt, ms).unwrap();
                b.mul(a, rs).ok()
            }
        };
        if let Some(t) = t {
            pool.push(t);
        }
    }
    let n_out = rng.gen_range(1..3).min(pool.len());
    for k in 0..n_out {
        let t = pool[pool.len() - 1 - k];
        b.output(&format!("out{k}"), t).unwrap();
    }
    (b.finish().unwrap(), inputs, weights)
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum::<f64>().max(1e-30);
    num / den
}

fn check(seed: u64, opts: &CompileOptions, threads: usize) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let (g, inputs, weights) = random_graph(&mut rng);
    let dev = device(threads);
    let c = compile(&g, std::slice::from_ref(&dev), opts).unwrap_or_else(|e| panic!("seed {seed}: compile: {e}"));
    validate(&c.plan, std::slice::from_ref(&dev)).unwrap_or_else(|e| panic!("seed {seed}: invalid plan: {e}"));
    let want = tg_ir::interp::eval(&g, &inputs, &weights).unwrap();
    let mut exe = Executable::new(c.plan, vec![dev], Arc::new(weights)).unwrap();
    exe.set_poison(true);
    // Run twice: a plan must be re-runnable with identical results.
    for _ in 0..2 {
        let got = exe.run(&inputs).unwrap();
        for (name, w) in &want {
            let g = got[name].as_f32().unwrap();
            assert_eq!(got[name].shape, w.shape, "seed {seed}: output {name} shape");
            let e = nmse(g, &w.data);
            assert!(e < 1e-10 || (e < 1e-8 && w.data.iter().all(|x| x.abs() < 1e6)), "seed {seed}: output {name}: NMSE {e:e}");
            assert!(g.iter().all(|x| x.is_finite()), "seed {seed}: non-finite output");
        }
    }
}

#[test]
fn random_graphs_match_the_reference() {
    let base: u64 = std::env::var("TG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x5eed);
    eprintln!("random graphs: base seed {base} (set TG_SEED to change)");
    for i in 0..300 {
        check(base + i, &CompileOptions::default(), 1 + (i as usize % 2));
    }
}

#[test]
fn random_graphs_with_stages_switched_off() {
    for stages in [&["views"][..], &["memory"], &["dce"], &["views", "memory", "dce"]] {
        let opts = CompileOptions::disabling(stages).unwrap();
        for i in 0..60 {
            check(1000 + i, &opts, 2);
        }
    }
}

#[test]
fn required_stages_cannot_be_switched_off() {
    assert!(CompileOptions::disabling(&["lower"]).is_err());
    assert!(CompileOptions::disabling(&["no-such-stage"]).is_err());
}

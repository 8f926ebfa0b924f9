//! Shared test helpers: random inputs for a graph, reference evaluation, comparison.
#![allow(dead_code)]

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use tg_ir::{DType, Graph, HostTensor, Op};

/// Base seed for a test, from `TG_SEED` or the default; printed so failures reproduce.
pub fn base_seed(test: &str, default: u64) -> u64 {
    let s = std::env::var("TG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(default);
    eprintln!("{test}: base seed {s} (set TG_SEED to change)");
    s
}

pub fn rng(seed: u64) -> ChaCha8Rng {
    ChaCha8Rng::seed_from_u64(seed)
}

/// Random values for every input and f32 weight of `g` (uniform in ±`scale`; i32 inputs
/// in `0..4`).
pub fn random_feeds(g: &Graph, rng: &mut ChaCha8Rng, scale: f32) -> (HashMap<String, HostTensor>, HashMap<String, Vec<u8>>) {
    let mut inputs = HashMap::new();
    let mut weights = HashMap::new();
    for n in &g.nodes {
        let count: usize = n.shape.iter().product();
        match (&n.op, n.dtype) {
            (Op::Input { name }, DType::F32) => {
                let v: Vec<f32> = (0..count).map(|_| rng.gen_range(-scale..scale)).collect();
                inputs.insert(name.clone(), HostTensor::f32(&n.shape, v).unwrap());
            }
            (Op::Input { name }, DType::I32) => {
                let v: Vec<i32> = (0..count).map(|_| rng.gen_range(0..4)).collect();
                inputs.insert(name.clone(), HostTensor::i32(&n.shape, v).unwrap());
            }
            (Op::Weight { name }, DType::F32) => {
                let v: Vec<f32> = (0..count).map(|_| rng.gen_range(-scale..scale)).collect();
                weights.insert(name.clone(), tg_ir::f32_bytes(&v));
            }
            (Op::Input { .. } | Op::Weight { .. }, d) => panic!("test feeds: unsupported {d}"),
            _ => {}
        }
    }
    (inputs, weights)
}

/// Evaluates both graphs on the same feeds and asserts every output agrees:
/// `|a − b| ≤ tol·(1 + |b|)` elementwise, and non-finite values identical.
pub fn assert_same_outputs(what: &str, a: &Graph, b: &Graph, inputs: &HashMap<String, HostTensor>, weights: &HashMap<String, Vec<u8>>, tol: f64) {
    let ra = tg_ir::interp::eval(a, inputs, weights).unwrap_or_else(|e| panic!("{what}: eval of the first graph: {e}"));
    let rb = tg_ir::interp::eval(b, inputs, weights).unwrap_or_else(|e| panic!("{what}: eval of the second graph: {e}"));
    assert_eq!(ra.len(), rb.len(), "{what}: output count");
    for (name, x) in &ra {
        let y = rb.get(name).unwrap_or_else(|| panic!("{what}: output {name} missing"));
        assert_eq!(x.shape, y.shape, "{what}: output {name} shape");
        assert_eq!(x.dtype, y.dtype, "{what}: output {name} dtype");
        for (i, (&p, &q)) in x.data.iter().zip(&y.data).enumerate() {
            let ok = if p.is_finite() && q.is_finite() { (p - q).abs() <= tol * (1.0 + q.abs()) } else { p.to_bits() == q.to_bits() || (p.is_nan() && q.is_nan()) };
            assert!(ok, "{what}: output {name}[{i}]: {p} vs {q} (tol {tol})");
        }
    }
}

/// Counts nodes of `g` whose op satisfies `pred`.
pub fn count(g: &Graph, pred: impl Fn(&Op) -> bool) -> usize {
    g.nodes.iter().filter(|n| pred(&n.op)).count()
}

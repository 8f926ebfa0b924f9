//! A measurement, not a check of speed: the executor's cost per step on a plan of one
//! device (the single-thread path), many tiny steps so the per-step overhead dominates.
//! Run: `cargo run --release -p tg-devices --example exec_overhead`.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;
use tg_compiler::{compile, CompileOptions};
use tg_ir::{DType, GraphBuilder, HostTensor, UnaryOp};
use tg_runtime::Executable;

fn main() {
    let steps = 400;
    let mut b = GraphBuilder::new();
    let mut x = b.input("x", &[64], DType::F32).unwrap();
    for i in 0..steps {
        x = b.unary(if i % 2 == 0 { UnaryOp::Tanh } else { UnaryOp::Sin }, x).unwrap();
    }
    b.output("y", x).unwrap();
    let g = b.finish().unwrap();
    let dev = tg_devices::open("cpu", 1).unwrap();
    let mut opts = CompileOptions::default();
    opts.disabled.insert("rewrite".into());
    let plan = compile(&g, std::slice::from_ref(&dev), &opts).unwrap().plan;
    let n = plan.steps.len();
    assert!(n >= steps, "{n} steps");
    let mut exe = Executable::new(plan, vec![dev], Arc::new(HashMap::<String, Vec<u8>>::new())).unwrap();
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), HostTensor::f32(&[64], (0..64).map(|i| i as f32 / 64.0).collect()).unwrap())].into();
    let want = exe.run(&inputs).unwrap();
    let mut best = f64::INFINITY;
    for _ in 0..7 {
        let runs = 300;
        let t = Instant::now();
        for _ in 0..runs {
            assert_eq!(exe.run(&inputs).unwrap()["y"], want["y"]);
        }
        best = best.min(t.elapsed().as_secs_f64() / runs as f64);
    }
    println!("single-device run: {n} steps, best of 7 x 300 runs: {:.1} us per run, {:.0} ns per step", best * 1e6, best * 1e9 / n as f64);
}

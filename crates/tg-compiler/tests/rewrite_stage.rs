//! The `rewrite` stage through the whole pipeline: random graphs full of the primitive
//! patterns the fusion rules target (with intermediates read twice) compile with rewriting
//! on, with each rule family off and with the stage off, and every plan computes what the
//! reference interpreter computes, on NaN-poisoned arenas.

#[path = "../../tg-egraph/tests/patterns/mod.rs"]
mod patterns;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use tg_compiler::{compile, CompileOptions};
use tg_ir::{DType, Graph, HostTensor, Op};
use tg_runtime::{CpuDevice, Device, Executable};

fn feeds(g: &Graph, rng: &mut ChaCha8Rng) -> (HashMap<String, HostTensor>, HashMap<String, Vec<u8>>) {
    let mut inputs = HashMap::new();
    let mut weights = HashMap::new();
    for n in &g.nodes {
        let count: usize = n.shape.iter().product();
        let v: Vec<f32> = (0..count).map(|_| rng.gen_range(-1.5..1.5)).collect();
        match (&n.op, n.dtype) {
            (Op::Input { name }, DType::F32) => {
                inputs.insert(name.clone(), HostTensor::f32(&n.shape, v).unwrap());
            }
            (Op::Weight { name }, DType::F32) => {
                weights.insert(name.clone(), tg_ir::f32_bytes(&v));
            }
            _ => {}
        }
    }
    (inputs, weights)
}

fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum::<f64>().max(1e-30);
    num / den
}

/// Compiles and runs the graph of `seed`; returns the fused steps of the plan.
fn check(seed: u64, opts: &CompileOptions, what: &str) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let g = patterns::random_graph(&mut rng);
    let (inputs, weights) = feeds(&g, &mut rng);
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(1 + (seed as usize % 2)).unwrap());
    let c = compile(&g, std::slice::from_ref(&dev), opts).unwrap_or_else(|e| panic!("{what}, seed {seed}: compile: {e}"));
    assert_eq!(c.report.rewrite.is_some(), !opts.disabled.contains("rewrite"), "{what}");
    let fused = c.plan.steps.iter().filter(|s| matches!(s.kernel.name().as_str(), "rms_norm" | "rope_neox" | "gelu_tanh" | "gated_gelu" | "softmax" | "attention")).count();
    let want = tg_ir::interp::eval(&g, &inputs, &weights).unwrap();
    let mut exe = Executable::new(c.plan, vec![dev], Arc::new(weights)).unwrap();
    exe.set_poison(true);
    let got = exe.run(&inputs).unwrap();
    for (name, w) in &want {
        let gv = got[name].as_f32().unwrap();
        assert_eq!(got[name].shape, w.shape, "{what}, seed {seed}: {name} shape");
        assert!(gv.iter().all(|x| x.is_finite()), "{what}, seed {seed}: {name} has non-finite values");
        let e = nmse(gv, &w.data);
        assert!(e < 1e-9, "{what}, seed {seed}: {name}: NMSE {e:e}\n{}", c.report);
    }
    fused
}

#[test]
fn rewritten_plans_match_the_reference() {
    let base: u64 = std::env::var("TG_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(0x7e_e5);
    eprintln!("rewrite stage: base seed {base} (set TG_SEED to change)");
    let mut fused = 0;
    for i in 0..150 {
        fused += check(base + i, &CompileOptions::default(), "all rules");
    }
    assert!(fused > 50, "only {fused} fused steps in 150 random graphs");
    for i in 0..40 {
        check(base + i, &CompileOptions::disabling(&["rewrite"]).unwrap(), "rewrite off");
    }
}

#[test]
fn each_rule_family_can_be_switched_off() {
    for fam in
        ["layout", "simplify", "fusion", "fusion.rmsnorm", "fusion.add-rmsnorm", "fusion.matmul-epilogue", "fusion.rope", "fusion.gelu", "fusion.softmax", "fusion.attention"]
    {
        let name = format!("rewrite:{fam}");
        let opts = CompileOptions::disabling(&[name.as_str()]).unwrap();
        assert!(opts.rewrite.disabled.contains(fam));
        for i in 0..25 {
            check(500 + i, &opts, &name);
        }
    }
    let opts = CompileOptions::disabling(&["rewrite:fusion"]).unwrap();
    assert_eq!(check(501, &opts, "fusion off"), 0, "no fused kernels with the fusion family off");
    assert!(CompileOptions::disabling(&["rewrite:no-such-family"]).is_err());
}

#[test]
fn report_shows_the_rewrite() {
    let mut rng = ChaCha8Rng::seed_from_u64(3);
    let g = patterns::random_graph(&mut rng);
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(1).unwrap());
    let c = compile(&g, std::slice::from_ref(&dev), &CompileOptions::default()).unwrap();
    let text = c.report.to_string();
    assert!(text.contains("rewrite") && text.contains("saturation:"), "{text}");
    let j = serde_json::to_value(&c.report).unwrap();
    assert!(j["rewrite"]["saturation"]["iterations"].is_number(), "{j}");
    let names: Vec<&str> = c.report.stages.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names[..4], ["verify", "dce", "rewrite", "lower"]);
}

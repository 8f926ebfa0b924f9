//! The planner on measured kernel times (`tg-profile`): the keys planning asks about, a
//! decision that measured times change, the prediction of a plan, and stale profiles.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::sync::Arc;
use tg_compiler::{compile, planning_keys, CompileOptions, CostSource};
use tg_ir::{DType, Graph, GraphBuilder, HostTensor, ReduceOp, UnaryOp};
use tg_profile::{Fingerprint, Measurement, Profile, ProfileKey};
use tg_runtime::{CpuDevice, Device, Executable, Kernel};

/// `y = rms_norm(x, w)` in primitives (`x [rows, n]`); the rewrite stage offers the fused
/// RMSNorm kernel as the alternative.
fn rms_graph(rows: usize, n: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[rows, n], DType::F32).unwrap();
    let w = b.input("w", &[n], DType::F32).unwrap();
    let sq = b.mul(x, x).unwrap();
    let ms = b.reduce_last(ReduceOp::Mean, sq).unwrap();
    let e = b.scalar(1e-6).unwrap();
    let ms = b.add(ms, e).unwrap();
    let r = b.unary(UnaryOp::Rsqrt, ms).unwrap();
    let y = b.mul(x, r).unwrap();
    let y = b.mul(y, w).unwrap();
    b.output("y", y).unwrap();
    b.finish().unwrap()
}

fn cpu() -> Arc<dyn Device> {
    Arc::new(CpuDevice::new(1).unwrap())
}

fn measured(ns: f64) -> Measurement {
    Measurement { median_ns: ns, min_ns: ns, p90_ns: ns, mad_ns: 0.0, reps: 5, warmup: 1, seed: 0 }
}

/// A profile that measured every key in `keys`, `slow` ones at 1 ms and the rest at 100 ns.
fn profile_with(keys: &[ProfileKey], slow: impl Fn(&Kernel) -> bool) -> Arc<Profile> {
    let mut p = Profile::new(Fingerprint::current());
    for k in keys {
        p.insert(k.clone(), measured(if slow(&k.kernel) { 1e6 } else { 100.0 }));
    }
    Arc::new(p)
}

fn kernels(g: &Graph, opts: &CompileOptions) -> (Vec<String>, tg_compiler::Compiled) {
    let c = compile(g, &[cpu()], opts).unwrap();
    (c.plan.steps.iter().map(|s| s.kernel.name()).collect(), c)
}

fn run(c: &tg_compiler::Compiled, inputs: &HashMap<String, HostTensor>) -> Vec<f32> {
    let weights: HashMap<String, Vec<u8>> = HashMap::new();
    let mut exe = Executable::new(c.plan.clone(), vec![cpu()], Arc::new(weights)).unwrap();
    exe.set_poison(true);
    exe.run(inputs).unwrap()["y"].as_f32().unwrap().to_vec()
}

#[test]
fn planning_keys_cover_every_alternative_and_every_step() {
    let g = rms_graph(8, 64);
    let keys = planning_keys(&g, &[cpu()], &CompileOptions::default()).unwrap();
    let names: Vec<String> = keys.iter().map(|k| k.kernel.name()).collect();
    // The fused kernel the estimate picks, and the primitives it replaces.
    for want in ["rms_norm", "mul", "reduce_mean", "rsqrt", "add"] {
        assert!(names.iter().any(|n| n == want), "no {want} key among {names:?}");
    }
    let (_, c) = kernels(&g, &CompileOptions::default());
    for k in ProfileKey::from_plan(&c.plan, 1) {
        assert!(keys.contains(&k), "plan step {} not among the planning keys", k.short());
    }
    assert!(keys.iter().all(|k| k.device == "cpu" && k.threads == 1));
}

#[test]
fn measured_times_change_the_choice_and_both_plans_agree() {
    let g = rms_graph(16, 96);
    let keys = planning_keys(&g, &[cpu()], &CompileOptions::default()).unwrap();
    let (estimate, ce) = kernels(&g, &CompileOptions::default());
    assert!(estimate.contains(&"rms_norm".to_string()), "the estimate fuses: {estimate:?}");
    assert!(ce.report.prediction.is_none(), "no profile, no prediction");

    // Measured: the fused kernel is slow here, the primitives fast.
    let p = profile_with(&keys, |k| matches!(k, Kernel::RmsNorm { .. }));
    let opts = CompileOptions { cost: CostSource::Profile(p.clone()), ..Default::default() };
    let (chosen, cm) = kernels(&g, &opts);
    assert!(!chosen.contains(&"rms_norm".to_string()), "the planner kept the slow fused kernel: {chosen:?}");
    let pred = cm.report.prediction.as_ref().expect("a profile predicts the plan");
    assert_eq!(pred.fallback_steps, 0, "every step of the plan was measured");
    assert_eq!(pred.steps.len(), cm.plan.steps.len());
    assert!((pred.total_ns - 100.0 * cm.plan.steps.len() as f64).abs() < 1e-6, "{pred:?}");
    assert!(cm.report.to_string().contains("measured profile"), "{}", cm.report);

    // Measured the other way round: fused again.
    let p = profile_with(&keys, |k| !matches!(k, Kernel::RmsNorm { .. }));
    let (fused, _) = kernels(&g, &CompileOptions { cost: CostSource::Profile(p), ..Default::default() });
    assert!(fused.contains(&"rms_norm".to_string()), "{fused:?}");

    // Both choices compute the same values.
    let mut rng = ChaCha8Rng::seed_from_u64(7);
    let x: Vec<f32> = (0..16 * 96).map(|_| rng.gen_range(-2.0..2.0)).collect();
    let w: Vec<f32> = (0..96).map(|_| rng.gen_range(0.5..1.5)).collect();
    let inputs = HashMap::from([("x".to_string(), HostTensor::f32(&[16, 96], x).unwrap()), ("w".to_string(), HostTensor::f32(&[96], w).unwrap())]);
    let (a, b) = (run(&ce, &inputs), run(&cm, &inputs));
    let err = a.iter().zip(&b).map(|(x, y)| (x - y).abs()).fold(0f32, f32::max);
    assert!(err < 1e-5, "fused and primitive plans differ by {err}");
}

#[test]
fn unmeasured_keys_fall_back_and_are_reported() {
    let g = rms_graph(4, 32);
    // An empty profile: every step is a fallback estimate.
    let opts = CompileOptions { cost: CostSource::Profile(Arc::new(Profile::new(Fingerprint::current()))), ..Default::default() };
    let c = compile(&g, &[cpu()], &opts).unwrap();
    let p = c.report.prediction.unwrap();
    assert_eq!(p.fallback_steps, c.plan.steps.len());
    assert!(p.total_ns > 0.0 && (p.fallback_ns - p.total_ns).abs() < 1e-6);
}

#[test]
fn a_stale_profile_is_refused_with_the_reason() {
    let dir = std::env::temp_dir().join(format!("tg-cost-profile-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("other-machine.json");
    let mut fp = Fingerprint::current();
    fp.cpu_model = "Some Other CPU @ 1.00GHz".into();
    Profile::new(fp).save(&path).unwrap();
    let e = CostSource::load(&path, &Fingerprint::current()).unwrap_err().to_string();
    assert!(e.contains("cpu_model"), "{e}");
    // Named by TG_PROFILE: not used, and the caller is told why.
    std::env::set_var("TG_PROFILE", &path);
    let (cost, why) = CostSource::for_this_machine();
    std::env::remove_var("TG_PROFILE");
    assert!(matches!(cost, CostSource::Estimate));
    assert!(why.is_some_and(|w| w.contains("cpu_model")));
    // The file is left as it was.
    assert!(Profile::load_any(&path).is_ok());
    std::fs::remove_dir_all(&dir).ok();
}

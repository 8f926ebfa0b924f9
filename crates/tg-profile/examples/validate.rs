//! Checks predictions against a real run: compiles Gemma 3 for `seq` tokens, profiles the
//! plan's keys (into a temporary profile), runs the plan with per-step timing and compares
//! the predicted and measured time per step, per kernel and in total; then drops every other
//! measurement and reports how the fallback predicts the dropped steps.
//!
//! `cargo run --release -p tg-profile --example validate -- [seq] [threads]` (model from
//! `TG_MODEL` or the default cache path).

use std::collections::{BTreeMap, HashMap};
use std::ops::ControlFlow;
use std::sync::Arc;
use tg_profile::{CpuDevices, DeviceSource, Fingerprint, Profile, ProfileKey, Profiler};

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<usize> = std::env::args().skip(1).map(|a| a.parse()).collect::<Result<_, _>>()?;
    let (seq, threads) = (args.first().copied().unwrap_or(1), args.get(1).copied().unwrap_or(2));
    let path = std::env::var("TG_MODEL").map(std::path::PathBuf::from).unwrap_or_else(|_| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_MODEL));
    let m = tg_models::LanguageModel::load(&path, threads)?;
    let graph = m.graph(seq, tg_models::Logits::Last)?;
    let mut devices = CpuDevices::default();
    let dev = devices.device("cpu", threads)?;
    let plan = tg_compiler::compile(&graph, std::slice::from_ref(&dev), &tg_compiler::CompileOptions::default())?.plan;
    let keys = ProfileKey::from_plan(&plan, threads);
    println!("{} steps, {} distinct keys", plan.steps.len(), keys.len());

    let t0 = std::time::Instant::now();
    let mut prof = Profiler::new(Profile::new(Fingerprint::current()), None);
    let report = prof.run(&keys, &mut devices, &mut |_, _, _| ControlFlow::Continue(()))?;
    println!("profiled in {:.1} s ({} measured, {} failed)", t0.elapsed().as_secs_f64(), report.measured, report.failed.len());
    for (k, e) in &report.failed {
        println!("  failed {}: {e}", k.short());
    }
    let profile = prof.into_profile();
    let r = profile.roofline("cpu", threads).ok_or("no roofline")?;
    println!("roofline: launch {:.0} ns, {:.2} GB/s, {:.1} GFLOP/s", r.launch_ns, r.bytes_per_ns, r.flops_per_ns);

    // Measured: median per step over runs.
    let weights = Arc::new(tg_models::GgufWeights::new(Arc::new(tg_gguf::GgufFile::open(&path)?)));
    let mut exe = tg_runtime::Executable::new(plan.clone(), vec![dev], weights)?;
    exe.set_profiling(true);
    let ids: Vec<i32> = (0..seq as i32).map(|i| 2 + i * 7).collect();
    let inputs = HashMap::from([("tokens".to_string(), tg_ir::HostTensor::i32(&[seq], ids)?)]);
    let reps = 9;
    let mut per_step: Vec<Vec<f64>> = vec![Vec::new(); plan.steps.len()];
    for r in 0..=reps {
        exe.run(&inputs)?;
        if r > 0 {
            for (v, &t) in per_step.iter_mut().zip(exe.step_times().ok_or("no times")?) {
                v.push(t as f64);
            }
        }
    }
    let actual: Vec<f64> = per_step
        .into_iter()
        .map(|mut v| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        })
        .collect();

    let report = |label: &str, profile: &Profile| {
        let est = profile.estimate_plan(&plan, threads);
        let total: f64 = actual.iter().sum();
        println!(
            "{label}: predicted {:.3} ms, measured {:.3} ms (ratio {:.2}); {:.1}% of the prediction rests on fallbacks ({} steps)",
            est.total_ns / 1e6,
            total / 1e6,
            est.total_ns / total,
            100.0 * est.fallback_share(),
            est.fallback_steps
        );
        let mut by: BTreeMap<String, (f64, f64, usize, f64, f64)> = BTreeMap::new();
        for (p, &a) in est.steps.iter().zip(&actual) {
            let e = by.entry(p.family.clone()).or_default();
            e.0 += p.ns;
            e.1 += a;
            e.2 += 1;
            if p.source.is_fallback() {
                e.3 += p.ns;
                e.4 += a;
            }
        }
        let mut rows: Vec<_> = by.into_iter().collect();
        rows.sort_by(|a, b| b.1 .1.total_cmp(&a.1 .1));
        for (f, (p, a, n, fp, fa)) in rows.iter().take(14) {
            let fb = if *fa > 0.0 { format!("  fallback part {:.3} vs {:.3} ms", fp / 1e6, fa / 1e6) } else { String::new() };
            println!("  {f:<28} {n:>4} steps  predicted {:>8.3} ms  measured {:>8.3} ms  ratio {:.2}{fb}", p / 1e6, a / 1e6, p / a);
        }
    };
    report("all keys measured", &profile);
    let mut half = Profile::new(profile.fingerprint().clone());
    for r in profile.rooflines() {
        half.set_roofline(r.clone());
    }
    for (i, (k, m)) in profile.entries().iter().enumerate() {
        if i % 2 == 0 {
            half.insert(k.clone(), m.clone());
        }
    }
    report("every other key measured", &half);
    Ok(())
}

//! Where an ONNX model's time goes on the CPU: imports it for the given shapes (dynamic
//! dimensions not given are 1), compiles it, runs it on random inputs with per-step timing
//! and prints the time per kernel (the kernel's name, with its attributes) summed over the
//! steps, largest first.
//!
//! `cargo run --release -p tg-onnx --example profile -- MODEL.onnx [NAME=D0,D1,...]... [--threads N] [--runs N] [--no-rules FAMILY,..]`
//!
//! It plans as the front ends do: with this machine's kernel profile (`tg profile`), another
//! named by `TG_PROFILE=PATH`, or the built-in estimate with `TG_PROFILE=off`.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let Some(path) = args.first() else {
        eprintln!("usage: profile MODEL.onnx [NAME=D0,D1,...]... [--threads N] [--runs N] [--no-rules FAMILY,..]");
        std::process::exit(2);
    };
    let (mut threads, mut runs, mut top) = (1usize, 5usize, 0usize);
    let mut disabled = std::collections::BTreeSet::new();
    let mut shapes: HashMap<String, Vec<usize>> = HashMap::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--threads" => threads = it.next().and_then(|v| v.parse().ok()).unwrap_or(1),
            "--runs" => runs = it.next().and_then(|v| v.parse().ok()).unwrap_or(5),
            "--top" => top = it.next().and_then(|v| v.parse().ok()).unwrap_or(20),
            "--no-rules" => disabled.extend(it.next().map(String::as_str).unwrap_or_default().split(',').filter(|f| !f.is_empty()).map(String::from)),
            _ => {
                let Some((n, d)) = a.split_once('=') else {
                    eprintln!("bad argument '{a}'");
                    std::process::exit(2);
                };
                shapes.insert(n.to_string(), d.split(',').filter_map(|x| x.trim().parse().ok()).collect());
            }
        }
    }
    let fail = |e: &dyn std::fmt::Display| -> ! {
        eprintln!("error: {e}");
        std::process::exit(1)
    };
    let m = tg_onnx::OnnxModel::open(path).unwrap_or_else(|e| fail(&e));
    for v in m.inputs() {
        let name = v.name.clone().unwrap_or_default();
        if let (false, Some((dims, _))) = (shapes.contains_key(&name), tg_onnx::tensor_type(v)) {
            shapes.insert(name, dims.iter().map(|d| d.unwrap_or(1)).collect());
        }
    }
    let imp = tg_onnx::import(&m, &shapes).unwrap_or_else(|e| fail(&e));
    let cpu = tg_devices::open("cpu", threads).unwrap_or_else(|e| fail(&e));
    let mut opts = tg_compiler::CompileOptions::default();
    // Kernel times as the front ends plan with: this machine's profile (`TG_PROFILE=PATH`
    // names another, `TG_PROFILE=off` the built-in estimate).
    let (cost, why) = tg_compiler::CostSource::for_this_machine();
    eprintln!("cost: {}", why.as_deref().unwrap_or(if matches!(cost, tg_compiler::CostSource::Estimate) { "the built-in estimate" } else { "this machine's profile" }));
    opts.cost = cost;
    opts.rewrite.disabled = disabled;
    let c = tg_compiler::compile(&imp.graph, std::slice::from_ref(&cpu), &opts).unwrap_or_else(|e| fail(&e));
    if let Some(r) = &c.report.rewrite {
        let s = &r.saturation;
        let fired: Vec<String> = s.applications.iter().filter(|(_, &n)| n > 0).map(|(k, n)| format!("{k} {n}")).collect();
        eprintln!("rewrite: {:?} after {} iterations, {} e-nodes, {:.0} ms; {}", s.stop_reason, s.iterations, s.enodes, s.millis, fired.join(", "));
    }
    let mut exe = tg_runtime::Executable::new(c.plan, vec![cpu], Arc::new(imp.weights)).unwrap_or_else(|e| fail(&e));
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut feeds = HashMap::new();
    for (name, shape, dtype, _) in &imp.inputs {
        let n: usize = shape.iter().product();
        let t = match dtype {
            tg_ir::DType::F32 => tg_ir::HostTensor::f32(
                shape,
                (0..n)
                    .map(|_| {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        (seed >> 40) as f32 / (1u64 << 24) as f32 - 0.5
                    })
                    .collect(),
            ),
            _ => tg_ir::HostTensor::i32(shape, vec![0; n]),
        }
        .unwrap_or_else(|e| fail(&e));
        feeds.insert(name.clone(), t);
    }
    exe.run(&feeds).unwrap_or_else(|e| fail(&e));
    let t0 = std::time::Instant::now();
    for _ in 0..runs {
        exe.run(&feeds).unwrap_or_else(|e| fail(&e));
    }
    let wall_ms = t0.elapsed().as_secs_f64() * 1e3 / runs as f64;
    exe.set_profiling(true);
    let mut per: BTreeMap<String, (u64, usize)> = BTreeMap::new();
    let mut total = 0u64;
    let mut per_step = vec![0u64; exe.plan().steps.len()];
    // Each step's fastest run: on a shared machine whose speed drifts, the sum of these
    // minima compares two builds better than the means do.
    let mut step_min = vec![u64::MAX; exe.plan().steps.len()];
    for _ in 0..runs {
        exe.run(&feeds).unwrap_or_else(|e| fail(&e));
        let times = exe.step_times().unwrap_or(&[]).to_vec();
        for ((p, m), &ns) in per_step.iter_mut().zip(step_min.iter_mut()).zip(&times) {
            *p += ns;
            *m = (*m).min(ns);
        }
        for (s, &ns) in exe.plan().steps.iter().zip(&times) {
            let e = per.entry(s.kernel.name()).or_default();
            e.0 += ns;
            e.1 += 1;
            total += ns;
        }
    }
    let mut mins: BTreeMap<String, u64> = BTreeMap::new();
    for (s, &ns) in exe.plan().steps.iter().zip(&step_min) {
        *mins.entry(s.kernel.name()).or_default() += if ns == u64::MAX { 0 } else { ns };
    }
    let min_total: u64 = mins.values().sum();
    let mut rows: Vec<(String, u64, usize)> = per.into_iter().map(|(k, (ns, n))| (k, ns, n)).collect();
    rows.sort_by_key(|r| std::cmp::Reverse(r.1));
    println!(
        "{path}: {} steps, {threads} thread(s), {:.2} ms per run (sum of steps), {:.2} ms (sum of each step's fastest run), {wall_ms:.2} ms per run unprofiled (wall)",
        exe.plan().steps.len(),
        total as f64 / runs as f64 / 1e6,
        min_total as f64 / 1e6
    );
    println!("| kernel | steps | ms per run | share | ms, fastest runs |\n|---|---:|---:|---:|---:|");
    for (k, ns, n) in rows.iter().take(20) {
        println!("| {k} | {} | {:.2} | {:.1}% | {:.2} |", n / runs, *ns as f64 / runs as f64 / 1e6, 100.0 * *ns as f64 / total as f64, mins[k] as f64 / 1e6);
    }
    if top > 0 {
        // The slowest steps, with their operands' shapes (`--top N`).
        let mut order: Vec<usize> = (0..per_step.len()).collect();
        order.sort_by_key(|&i| std::cmp::Reverse(per_step[i]));
        println!("\n| step | ms | kernel | inputs | output |\n|---:|---:|---|---|---|");
        for &i in order.iter().take(top) {
            let s = &exe.plan().steps[i];
            let ins: Vec<String> = s.inputs.iter().map(|t| if matches!(s.kernel, tg_runtime::Kernel::Copy) { format!("{:?} strides {:?}", t.layout.shape, t.layout.strides) } else { format!("{:?}", t.layout.shape) }).collect();
            let k = format!("{:?}", s.kernel);
            println!("| {i} | {:.3} | {} | {} | {:?} |", per_step[i] as f64 / runs as f64 / 1e6, &k[..k.len().min(160)], ins.join(" "), s.output.layout.shape);
        }
    }
}

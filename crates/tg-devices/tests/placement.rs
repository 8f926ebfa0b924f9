//! Plans across devices (CPU + OpenCL): the planner places ops, the plan carries an explicit
//! transfer at every cross-device edge, the validator checks devices, transfers and their
//! order, and the plan runs with the single-device results. Under CI a missing OpenCL device
//! is a failure; elsewhere these tests say SKIPPED.

use std::collections::HashMap;
use std::sync::Arc;

use rand::{Rng, SeedableRng};
use tg_compiler::{compile, validate, CompileOptions, FirstUse, PlacePin};
use tg_ir::{DType, Graph, GraphBuilder, HostTensor, UnaryOp, WeightStore};
use tg_runtime::{Device, Executable, Kernel, Storage};

mod common;

/// `y = tanh(x·w1ᵀ)·w2ᵀ + x` and `z = tanh(x·w1ᵀ)`, with f32 weights.
fn graph(rows: usize, n: usize) -> Graph {
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[rows, n], DType::F32).unwrap();
    let w1 = b.weight("w1", &[n, n], DType::F32).unwrap();
    let w2 = b.weight("w2", &[n, n], DType::F32).unwrap();
    let h = b.matmul(x, w1, true).unwrap();
    let t = b.unary(UnaryOp::Tanh, h).unwrap();
    let o = b.matmul(t, w2, true).unwrap();
    let y = b.add(o, x).unwrap();
    b.output("y", y).unwrap();
    b.output("z", t).unwrap();
    b.finish().unwrap()
}

fn weights(n: usize, seed: u64) -> HashMap<String, Vec<u8>> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut w = HashMap::new();
    for name in ["w1", "w2"] {
        let v: Vec<f32> = (0..n * n).map(|_| rng.gen_range(-0.2f32..0.2)).collect();
        w.insert(name.to_string(), tg_ir::f32_bytes(&v));
    }
    w
}

fn input(rows: usize, n: usize, seed: u64) -> HashMap<String, HostTensor> {
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let x: Vec<f32> = (0..rows * n).map(|_| rng.gen_range(-1.0f32..1.0)).collect();
    HashMap::from([("x".to_string(), HostTensor::f32(&[rows, n], x).unwrap())])
}

fn two() -> Option<Vec<Arc<dyn Device>>> {
    let cpu = common::open_or_skip("cpu")?;
    let cl = common::open_or_skip("opencl")?;
    Some(vec![cpu, cl])
}

fn pinned(pattern: &str, device: &str) -> CompileOptions {
    let mut o = CompileOptions::default();
    o.placement.pins.push(PlacePin { pattern: pattern.into(), device: device.into() });
    o
}

/// With no measured times for the second device and nothing pinned, the planner keeps every
/// step home: the plan is the one-device plan, with the same simulated cost.
#[test]
fn an_unmeasured_second_device_changes_nothing() {
    let Some(devs) = two() else { return };
    let g = graph(16, 64);
    let one = compile(&g, &devs[..1], &CompileOptions::default()).unwrap();
    let both = compile(&g, &devs, &CompileOptions::default()).unwrap();
    assert_eq!(one.plan.steps, both.plan.steps, "the steps of a one-device plan");
    assert!(both.plan.steps.iter().all(|s| s.device == 0));
    let cost = |c: &tg_compiler::Compiled| c.report.rewrite.as_ref().unwrap().cost_out_search;
    assert_eq!(cost(&one), cost(&both), "one-device makespan");
    let p = both.report.placement.as_ref().expect("a placement report");
    assert!(p.notes.iter().any(|n| n.contains("no kernel times measured") && n.contains("first-use measurement off")), "{:?}", p.notes);
    assert_eq!(CompileOptions::default().placement.first_use, FirstUse::Off, "library compiles measure nothing unless asked");
}

/// With first-use measurement on and no profile, the OpenCL device's roofline and links are
/// measured (quickly, cached in the directory given) and it is offered to the planner for
/// every op, priced by them; the report says so. The plan is valid and computes what the
/// CPU-only plan computes, wherever the planner put the ops.
#[test]
fn an_unmeasured_device_is_measured_on_first_use_and_offered() {
    let Some(devs) = two() else { return };
    let dir = std::env::temp_dir().join(format!("tg-placement-first-use-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut o = CompileOptions::default();
    o.placement.first_use = FirstUse::Measure { dir: Some(dir.clone()) };
    let (rows, n) = (16, 64);
    let g = graph(rows, n);
    let t0 = std::time::Instant::now();
    let c = compile(&g, &devs, &o).unwrap();
    let took = t0.elapsed();
    let name = devs[1].name();
    let p = c.report.placement.as_ref().expect("a placement report");
    assert!(p.notes.iter().any(|n| n.starts_with(&format!("{name}: roofline measured on first use (no kernel times)"))), "{:?}", p.notes);
    assert!(!p.notes.iter().any(|n| n.contains("only pinned ops")), "{:?}", p.notes);
    for (a, b) in [("cpu", name), (name, "cpu")] {
        assert!(p.notes.iter().any(|n| n.starts_with(&format!("{a} -> {b}:")) && n.ends_with("(measured on first use)")), "{a} -> {b}: {:?}", p.notes);
    }
    // The measurement (~1.5 s on PoCL) and the planner's budget (1 s), generously.
    assert!(took < std::time::Duration::from_secs(30), "{took:?}");
    let files: Vec<_> = std::fs::read_dir(&dir).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    assert_eq!(files.len(), 1, "one cache file: {files:?}");
    assert!(files[0].starts_with(&name.replace(':', "_")) && files[0].ends_with(".json"), "{files:?}");
    validate(&c.plan, &devs).unwrap();

    let store: Arc<dyn WeightStore + Send + Sync> = Arc::new(weights(n, 3));
    let mut placed = Executable::new(c.plan.clone(), devs.clone(), store.clone()).unwrap();
    let mut home = Executable::new(compile(&g, &devs[..1], &CompileOptions::default()).unwrap().plan, devs[..1].to_vec(), store).unwrap();
    let x = input(rows, n, 5);
    let (a, b) = (placed.run(&x).unwrap(), home.run(&x).unwrap());
    for name in ["y", "z"] {
        let (a, b) = (a[name].as_f32().unwrap(), b[name].as_f32().unwrap());
        let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(err <= 1e-4, "{name}: max |placed - cpu| = {err}");
    }
    // Switched off again, the device is back to pinned ops only.
    o.placement.first_use = FirstUse::Off;
    let off = compile(&g, &devs, &o).unwrap();
    assert!(off.plan.steps.iter().all(|s| s.device == 0));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Pinned matmuls run on OpenCL, the rest on the CPU: transfers in both directions, each
/// checked by the validator, and the outputs equal the CPU-only run's.
#[test]
fn pinned_ops_cross_devices_through_transfers() {
    let Some(devs) = two() else { return };
    let (rows, n) = (24, 96);
    let g = graph(rows, n);
    let c = compile(&g, &devs, &pinned("matmul*", "opencl")).unwrap();
    let plan = &c.plan;
    let on = |d: usize| plan.steps.iter().filter(|s| s.device == d && !matches!(s.kernel, Kernel::Transfer { .. })).count();
    assert!(on(1) >= 2, "the two matmuls on OpenCL: {}", on(1));
    assert!(plan
        .steps
        .iter()
        .filter(|s| s.device == 1)
        .all(|s| matches!(s.kernel, Kernel::MatMulQuant { .. } | Kernel::MatMulQuantAdd { .. } | Kernel::MatMul { .. } | Kernel::Transfer { .. })));
    let transfers: Vec<(usize, usize)> = plan.steps.iter().filter_map(|s| if let Kernel::Transfer { from } = s.kernel { Some((from, s.device)) } else { None }).collect();
    assert!(transfers.contains(&(0, 1)) && transfers.contains(&(1, 0)), "transfers both ways: {transfers:?}");
    // Weights are bound on the device that reads them, never transferred.
    assert!(plan.buffers.iter().all(|b| !matches!(&b.storage, Storage::Weight { device: 0, .. })), "the weights are read on OpenCL only");
    validate(plan, &devs).unwrap();
    assert!(c.report.timeline.is_some(), "a simulated timeline");

    let store: Arc<dyn WeightStore + Send + Sync> = Arc::new(weights(n, 7));
    let mut split = Executable::new(plan.clone(), devs.clone(), store.clone()).unwrap();
    split.set_poison(true);
    let mut home = Executable::new(compile(&g, &devs[..1], &CompileOptions::default()).unwrap().plan, devs[..1].to_vec(), store).unwrap();
    for seed in 0..3 {
        let x = input(rows, n, seed);
        let a = split.run(&x).unwrap();
        let b = home.run(&x).unwrap();
        for name in ["y", "z"] {
            let (a, b) = (a[name].as_f32().unwrap(), b[name].as_f32().unwrap());
            let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
            assert!(err <= 1e-4, "{name}: max |split - cpu| = {err}");
        }
    }
}

/// The validator refuses a step that reads another device's buffer without a transfer, a
/// transfer buffer sharing bytes, and a transfer before its source is written.
#[test]
fn the_validator_checks_devices_and_transfers() {
    let Some(devs) = two() else { return };
    let g = graph(8, 32);
    let good = compile(&g, &devs, &pinned("matmul*", "opencl")).unwrap().plan;
    validate(&good, &devs).unwrap();
    let ti = good.steps.iter().position(|s| matches!(s.kernel, Kernel::Transfer { from: 0 })).expect("a transfer to OpenCL");
    let (src, dst) = (good.steps[ti].inputs[0].buffer, good.steps[ti].output.buffer);

    // A reader of the copy reads the source (on the CPU) directly.
    let mut bad = good.clone();
    let reader = bad.steps.iter().position(|s| s.inputs.iter().any(|t| t.buffer == dst)).unwrap();
    for t in bad.steps[reader].inputs.iter_mut().filter(|t| t.buffer == dst) {
        t.buffer = src;
    }
    let e = validate(&bad, &devs).unwrap_err().to_string();
    assert!(e.contains("only through a transfer"), "{e}");

    // The transfer moved before the step that writes its source.
    let mut bad = good.clone();
    let w = bad.steps.iter().position(|s| s.output.buffer == src);
    if let Some(w) = w {
        let t = bad.steps.remove(ti);
        bad.steps.insert(w, t);
        let e = validate(&bad, &devs).unwrap_err().to_string();
        assert!(e.contains("before it is written"), "{e}");
    }

    // Another buffer of the same arena moved onto the transfer's destination bytes.
    let mut bad = good.clone();
    let Storage::Arena { arena, offset } = bad.buffers[dst].storage else { panic!("a transfer into an arena") };
    let other = (0..bad.buffers.len())
        .find(|&b| b != dst && matches!(bad.buffers[b].storage, Storage::Arena { arena: a, .. } if a == arena) && bad.steps.iter().any(|s| s.output.buffer == b));
    if let Some(o) = other {
        bad.buffers[o].storage = Storage::Arena { arena, offset };
        if bad.buffers[o].bytes + offset <= bad.arenas[arena].bytes {
            assert!(validate(&bad, &devs).is_err(), "a buffer sharing a transfer's bytes passed");
        }
    }
}

/// A device list naming an absent device is refused with the devices present listed, and a
/// pin naming a device outside the compile is an options error.
#[test]
fn bad_device_lists_and_pins_are_clear_errors() {
    let e = tg_devices::open_list("cpu,cuda:3", 1).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("cpu"), "lists what is present: {e}");
    let Some(devs) = two() else { return };
    let g = graph(8, 32);
    let e = compile(&g, &devs[..1], &pinned("matmul*", "opencl")).map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("opencl") && e.contains("cpu"), "{e}");
    let e = "matmul".parse::<PlacePin>().map(|_| ()).unwrap_err().to_string();
    assert!(e.contains("OP_PATTERN=DEVICE"), "{e}");
}

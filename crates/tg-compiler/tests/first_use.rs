//! Devices without measured kernel times, planned from their roofline measured on first use:
//! the cost model ([`RooflineCost`]) and a two-device compile (the second device a CPU
//! device under another name, so this runs without OpenCL; `tg-devices/tests/placement.rs`
//! does the same with OpenCL).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use tg_compiler::{compile, validate, CompileOptions, CostModel, FirstUse, KernelCost, RooflineCost};
use tg_ir::{BinaryOp, DType, Graph, GraphBuilder, HostTensor, Op, UnaryOp};
use tg_profile::Roofline;
use tg_runtime::{Arg, CpuDevice, Device, DeviceKind, Executable, Kernel, Operand};

fn roof(launch_ns: f64, bytes_per_ns: f64, flops_per_ns: f64) -> Roofline {
    Roofline { device: "dev:0".into(), threads: 1, launch_ns, bytes_per_ns, flops_per_ns }
}

fn f32op(shape: &[usize]) -> Operand<'_> {
    Operand { shape, dtype: DType::F32, weight: false }
}

fn add_cost(m: &dyn CostModel, n: usize) -> f64 {
    m.node_cost(&Op::Binary(BinaryOp::Add), (&[n], DType::F32), &[f32op(&[n]), f32op(&[n])])
}

/// `[m, k] · [n, k]ᵀ`.
fn matmul_cost(c: &dyn CostModel, m: usize, k: usize, n: usize) -> f64 {
    c.node_cost(&Op::MatMul { transpose_rhs: true }, (&[m, n], DType::F32), &[f32op(&[m, k]), f32op(&[n, k])])
}

#[test]
fn roofline_cost_is_the_estimate_formula_with_measured_figures() {
    let r = roof(20_000.0, 8.0, 40.0);
    let cost = RooflineCost::new(r.clone(), false);
    assert!(cost.name().contains("dev:0") && cost.name().contains("first use"), "{}", cost.name());
    // launch + bytes / bandwidth + flops / peak of the kernel's work, as the built-in
    // estimate computes it with its own constants.
    let same = KernelCost { launch_ns: r.launch_ns, bytes_per_ns: r.bytes_per_ns, flops_per_ns: r.flops_per_ns, view_ns: 1.0 };
    for n in [1usize, 100, 10_000, 1 << 20] {
        let (a, b) = (add_cost(&cost, n), add_cost(&same, n));
        assert!((a - b).abs() <= 1e-9 * b, "add [{n}]: {a} vs {b}");
        let l = tg_runtime::Layout::contiguous(&[n], DType::F32);
        let w = tg_runtime::work(&Kernel::Binary(BinaryOp::Add), &[l.clone(), l.clone()], &l);
        assert!((a - (r.launch_ns + w.bytes / r.bytes_per_ns + w.flops / r.flops_per_ns)).abs() <= 1e-9 * a);
    }
    for (m, k, n) in [(1, 64, 64), (16, 512, 256), (128, 1024, 1024)] {
        let (a, b) = (matmul_cost(&cost, m, k, n), matmul_cost(&same, m, k, n));
        assert!((a - b).abs() <= 1e-9 * b, "matmul {m}x{k}x{n}: {a} vs {b}");
    }
    // Sources are free, as in every cost model.
    assert_eq!(cost.node_cost(&Op::Input { name: "x".into() }, (&[4], DType::F32), &[]), 0.0);
}

#[test]
fn roofline_cost_is_monotone_in_bytes_and_flops() {
    let cost = RooflineCost::new(roof(5_000.0, 10.0, 50.0), false);
    // More bytes: every element count costs more than the last.
    let sizes = [1usize, 64, 4096, 65_536, 1 << 20, 1 << 24];
    let adds: Vec<f64> = sizes.iter().map(|&n| add_cost(&cost, n)).collect();
    assert!(adds.windows(2).all(|w| w[1] > w[0]), "{adds:?}");
    // More flops (and bytes) along every matmul dimension.
    let base = matmul_cost(&cost, 8, 256, 256);
    for (m, k, n) in [(16, 256, 256), (8, 512, 256), (8, 256, 512)] {
        assert!(matmul_cost(&cost, m, k, n) > base, "{m}x{k}x{n}");
    }
    // At equal bytes, more flops cost more: tanh (~10 flops per element) over neg (1).
    let un = |u: UnaryOp| cost.node_cost(&Op::Unary(u), (&[1 << 16], DType::F32), &[f32op(&[1 << 16])]);
    assert!(un(UnaryOp::Tanh) > un(UnaryOp::Neg));
    // A faster device is cheaper where it is faster, and only there.
    let wide = RooflineCost::new(roof(5_000.0, 100.0, 50.0), false);
    let quick = RooflineCost::new(roof(500.0, 10.0, 50.0), false);
    let strong = RooflineCost::new(roof(5_000.0, 10.0, 5_000.0), false);
    assert!(add_cost(&wide, 1 << 20) < add_cost(&cost, 1 << 20));
    assert!(add_cost(&quick, 1) < add_cost(&cost, 1));
    assert!(matmul_cost(&strong, 512, 512, 512) < matmul_cost(&cost, 512, 512, 512) / 10.0);
    assert!((add_cost(&strong, 1) - add_cost(&cost, 1)).abs() < 1.0, "peak does not change a tiny add");
}

/// A CPU device under another name (and fingerprint), standing in for a second device.
struct Renamed {
    inner: CpuDevice,
    name: String,
}

impl Device for Renamed {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }
    fn info(&self) -> tg_runtime::DeviceInfo {
        self.inner.info()
    }
    fn fingerprint(&self) -> String {
        format!("{} as {}", self.inner.fingerprint(), self.name)
    }
    fn registry(&self) -> &tg_runtime::KernelRegistry {
        self.inner.registry()
    }
    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        self.inner.scope(f)
    }
    fn alloc(&self, bytes: usize) -> Result<tg_runtime::DeviceBuffer, tg_runtime::DeviceError> {
        self.inner.alloc(bytes)
    }
    fn bind_weight(&self, store: &Arc<dyn tg_ir::WeightStore + Send + Sync>, name: &str) -> Result<Arc<tg_runtime::DeviceBuffer>, tg_runtime::DeviceError> {
        self.inner.bind_weight(store, name)
    }
    fn write(&self, dst: &tg_runtime::DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), tg_runtime::DeviceError> {
        self.inner.write(dst, offset, src)
    }
    fn read(&self, src: &tg_runtime::DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), tg_runtime::DeviceError> {
        self.inner.read(src, offset, dst)
    }
    fn copy(&self, src: &tg_runtime::DeviceBuffer, so: usize, dst: &tg_runtime::DeviceBuffer, d: usize, n: usize) -> Result<(), tg_runtime::DeviceError> {
        self.inner.copy(src, so, dst, d, n)
    }
    fn fill(&self, dst: &tg_runtime::DeviceBuffer, offset: usize, n: usize, v: u8) -> Result<(), tg_runtime::DeviceError> {
        self.inner.fill(dst, offset, n, v)
    }
    fn synchronize(&self) -> Result<(), tg_runtime::DeviceError> {
        self.inner.synchronize()
    }
    fn launch(&self, q: usize, k: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        self.inner.launch(q, k, ins, out)
    }
}

/// `y = tanh(x·w1ᵀ)·w2ᵀ + x`, `z = tanh(x·w1ᵀ)` (f32 weights).
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

#[test]
fn a_device_without_kernel_times_is_offered_after_its_first_use_measurement() {
    let dir: PathBuf = std::env::temp_dir().join(format!("tg-compiler-first-use-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let devs: Vec<Arc<dyn Device>> = vec![Arc::new(CpuDevice::new(1).unwrap()), Arc::new(Renamed { inner: CpuDevice::new(1).unwrap(), name: "second:0".into() })];
    let (rows, n) = (8, 32);
    let g = graph(rows, n);

    // Off (the default): only pinned ops may go there, and nothing is measured.
    let off = compile(&g, &devs, &CompileOptions::default()).unwrap();
    let notes = &off.report.placement.as_ref().unwrap().notes;
    assert!(notes.iter().any(|n| n.starts_with("second:0: no kernel times measured") && n.ends_with("only pinned ops go there")), "{notes:?}");
    assert!(off.plan.steps.iter().all(|s| s.device == 0));
    assert!(!dir.exists(), "measured with first-use off");

    let mut o = CompileOptions::default();
    o.placement.first_use = FirstUse::Measure { dir: Some(dir.clone()) };
    let c = compile(&g, &devs, &o).unwrap();
    let notes = &c.report.placement.as_ref().unwrap().notes;
    assert!(notes.iter().any(|n| n.starts_with("second:0: roofline measured on first use (no kernel times)")), "{notes:?}");
    assert!(!notes.iter().any(|n| n.contains("only pinned ops")), "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with("cpu -> second:0:") && n.ends_with("(measured on first use)")), "{notes:?}");
    assert!(notes.iter().any(|n| n.starts_with("second:0 -> cpu:") && n.ends_with("(measured on first use)")), "{notes:?}");
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 1, "one cache file");
    assert!(c.report.timeline.is_some());
    validate(&c.plan, &devs).unwrap();

    // Wherever the planner put the ops, the plan computes what the one-device plan does.
    let mut rng = 1u32;
    let mut next = || {
        rng = rng.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
        (rng >> 8) as f32 / (1u32 << 24) as f32 - 0.5
    };
    let weights: HashMap<String, Vec<u8>> = ["w1", "w2"].iter().map(|w| (w.to_string(), tg_ir::f32_bytes(&(0..n * n).map(|_| next() * 0.4).collect::<Vec<_>>()))).collect();
    let store: Arc<dyn tg_ir::WeightStore + Send + Sync> = Arc::new(weights);
    let x = HashMap::from([("x".to_string(), HostTensor::f32(&[rows, n], (0..rows * n).map(|_| next()).collect()).unwrap())]);
    let a = Executable::new(c.plan.clone(), devs.clone(), store.clone()).unwrap().run(&x).unwrap();
    let b = Executable::new(off.plan.clone(), devs.clone(), store).unwrap().run(&x).unwrap();
    for name in ["y", "z"] {
        let (a, b) = (a[name].as_f32().unwrap(), b[name].as_f32().unwrap());
        let err = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0f32, f32::max);
        assert!(err <= 1e-4, "{name}: {err}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

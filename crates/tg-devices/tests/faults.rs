//! Faults on devices: out of device memory, and a kernel failing in the middle of a run.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use tg_compiler::{compile, CompileOptions};
use tg_ir::{DType, GraphBuilder, HostTensor, ReduceOp, UnaryOp};
use tg_runtime::{Arg, CpuDevice, Device, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Executable, Kernel, KernelRegistry, StateSet};

mod common;

/// A plan whose arena is larger than the device's largest allocation fails when it is bound,
/// with an error naming the device, the arena's size and the device's limit.
#[test]
fn out_of_device_memory_names_the_device_the_arena_and_the_limit() {
    let Some(dev) = common::open_or_skip("opencl") else { return };
    let limit = dev.info().max_alloc_bytes.expect("OpenCL reports its largest allocation");
    // One f32 value broadcast to a tensor above the limit, then used: the arena holds it.
    let n = (limit as usize / 4) + (1 << 20);
    let mut b = GraphBuilder::new();
    let x = b.input("x", &[1], DType::F32).unwrap();
    let big = b.expand(x, &[n]).unwrap();
    let e = b.unary(UnaryOp::Exp, big).unwrap();
    let s = b.reduce(ReduceOp::Sum, e, 0).unwrap();
    b.output("s", s).unwrap();
    let g = b.finish().unwrap();
    let c = compile(&g, std::slice::from_ref(&dev), &CompileOptions::default()).unwrap();
    let arena = c.plan.arenas[0].bytes;
    assert!(arena as u64 > limit);
    let err = match Executable::new(c.plan, vec![dev.clone()], Arc::new(HashMap::<String, Vec<u8>>::new())) {
        Ok(_) => panic!("an arena of {arena} bytes was allocated above the limit {limit}"),
        Err(e) => e.to_string(),
    };
    eprintln!("{err}");
    assert!(err.contains(dev.name()) && err.contains(&arena.to_string()) && err.contains(&format!("limit {limit}")), "{err}");
}

/// A CPU device whose launches fail from launch `fail_at` on (counted over its life).
struct Failing {
    inner: CpuDevice,
    launches: AtomicUsize,
    fail_at: AtomicUsize,
}

impl Device for Failing {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> DeviceKind {
        self.inner.kind()
    }
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn registry(&self) -> &KernelRegistry {
        self.inner.registry()
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        self.inner.alloc(bytes)
    }
    fn bind_weight(&self, store: &Arc<dyn tg_ir::WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError> {
        self.inner.bind_weight(store, name)
    }
    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.inner.write(dst, offset, src)
    }
    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.inner.read(src, offset, dst)
    }
    fn copy(&self, src: &DeviceBuffer, so: usize, dst: &DeviceBuffer, d: usize, n: usize) -> Result<(), DeviceError> {
        self.inner.copy(src, so, dst, d, n)
    }
    fn fill(&self, dst: &DeviceBuffer, offset: usize, n: usize, v: u8) -> Result<(), DeviceError> {
        self.inner.fill(dst, offset, n, v)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn launch(&self, q: usize, k: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        if self.launches.fetch_add(1, Ordering::SeqCst) >= self.fail_at.load(Ordering::SeqCst) {
            return Err("injected failure".into());
        }
        self.inner.launch(q, k, ins, out)
    }
}

/// A run that fails after its state update leaves the rows before its offset as they were:
/// the session does not advance, and running the same step again gives exactly what a run
/// that never failed gives.
#[test]
fn a_kernel_failure_mid_run_leaves_the_kept_rows() {
    // state [6, 3]; each run stores one row at `pos`, then outputs exp(sum of the state).
    let mut b = GraphBuilder::new();
    let st = b.state("kv", &[6, 3], DType::F32).unwrap();
    let row = b.input("row", &[1, 3], DType::F32).unwrap();
    let pos = b.input("pos", &[1], DType::I32).unwrap();
    let s2 = b.store_rows(st, row, pos, 0).unwrap();
    let sum = b.reduce(ReduceOp::Sum, s2, 0).unwrap();
    let e = b.unary(UnaryOp::Exp, sum).unwrap();
    b.output("y", e).unwrap();
    let g = b.finish().unwrap();
    let mut opts = CompileOptions::default();
    opts.disabled.insert("rewrite".into());
    let dev = Arc::new(Failing { inner: CpuDevice::new(1).unwrap(), launches: AtomicUsize::new(0), fail_at: AtomicUsize::new(usize::MAX) });
    let d: Arc<dyn Device> = dev.clone();
    let plan = compile(&g, std::slice::from_ref(&d), &opts).unwrap().plan;
    let store_step = plan.steps.iter().position(|s| matches!(s.kernel, Kernel::StoreRows { .. })).expect("a StoreRows step");
    assert!(store_step + 1 < plan.steps.len(), "steps after the state update");
    let weights: Arc<dyn tg_ir::WeightStore + Send + Sync> = Arc::new(HashMap::<String, Vec<u8>>::new());
    let mut exe = Executable::new(plan.clone(), vec![d.clone()], weights.clone()).unwrap();
    let inputs = |r: [f32; 3], p: i32| {
        let mut m = HashMap::new();
        m.insert("row".to_string(), HostTensor::f32(&[1, 3], r.to_vec()).unwrap());
        m.insert("pos".to_string(), HostTensor::i32(&[1], vec![p]).unwrap());
        m
    };
    let mut states = StateSet::new();
    exe.run_with_states(&inputs([0.1, 0.2, 0.3], 0), &mut states).unwrap();
    let before = states.read("kv").unwrap().unwrap();
    // Fail the step right after the state update of the second run.
    let done = dev.launches.load(Ordering::SeqCst);
    dev.fail_at.store(done + store_step + 1, Ordering::SeqCst);
    let err = exe.run_with_states(&inputs([1.0, 2.0, 3.0], 1), &mut states).unwrap_err().to_string();
    assert!(err.contains("injected failure"), "{err}");
    let after = states.read("kv").unwrap().unwrap();
    assert_eq!(&after[..12], &before[..12], "row 0 (before the offset) changed");
    assert_eq!(&after[24..], &before[24..], "rows past the run's row changed");
    // Retried, the run equals one on a set that never saw the failure.
    dev.fail_at.store(usize::MAX, Ordering::SeqCst);
    let retry = exe.run_with_states(&inputs([1.0, 2.0, 3.0], 1), &mut states).unwrap();
    let mut clean = StateSet::new();
    let mut exe2 = Executable::new(plan, vec![d], weights).unwrap();
    exe2.run_with_states(&inputs([0.1, 0.2, 0.3], 0), &mut clean).unwrap();
    let want = exe2.run_with_states(&inputs([1.0, 2.0, 3.0], 1), &mut clean).unwrap();
    assert_eq!(retry["y"], want["y"]);
    assert_eq!(states.read("kv").unwrap(), clean.read("kv").unwrap());
}

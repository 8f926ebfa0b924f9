//! Plans across devices: hand-built plans on the CPU and an OpenCL device, joined by
//! `Kernel::Transfer` steps, run by the executor with one host thread per device.
//!
//! Every plan here is written step by step (the compiler does not place steps on two devices
//! yet) with each buffer owning its own arena bytes, and run with poisoned arenas, so a step
//! that read its input before the other device wrote it sees NaNs. References are the f64
//! interpreter on the same computation written as a graph. Without an OpenCL device each test
//! says `SKIPPED` (a failure under CI).

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Instant;
use tg_ir::{f32_bytes, BinaryOp, DType, GraphBuilder, HostTensor, ReduceOp, WeightStore};
use tg_runtime::{
    ArenaDesc, Arg, BufferDesc, Device, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Event, Executable, Kernel, KernelRegistry, Layout, Plan, Span, StateSet, Step, Storage,
    TensorRef,
};

mod common;

/// Builds a plan by hand: one arena per device, every arena buffer at fresh bytes (no reuse,
/// as the compiler guarantees for the buffers of a transfer).
struct PlanBuilder {
    plan: Plan,
    used: Vec<usize>,
}

impl PlanBuilder {
    fn new(devices: &[&str]) -> PlanBuilder {
        let plan =
            Plan { devices: devices.iter().map(|d| d.to_string()).collect(), arenas: (0..devices.len()).map(|device| ArenaDesc { device, bytes: 0 }).collect(), ..Plan::default() };
        PlanBuilder { plan, used: vec![0; devices.len()] }
    }

    fn buffer(&mut self, storage: Storage, layout: Layout) -> TensorRef {
        let bytes = layout.bytes_needed().expect("a plain layout");
        let node = self.plan.buffers.len();
        self.plan.buffers.push(BufferDesc { storage, bytes, node, first_step: None, last_step: None, persistent: false });
        TensorRef { buffer: node, layout }
    }

    /// Fresh bytes in `device`'s arena.
    fn fresh(&mut self, device: usize, shape: &[usize], dtype: DType) -> TensorRef {
        let layout = Layout::contiguous(shape, dtype);
        let offset = self.used[device];
        self.used[device] += layout.bytes_needed().expect("plain").div_ceil(64) * 64;
        self.buffer(Storage::Arena { arena: device, offset }, layout)
    }

    fn input(&mut self, name: &str, device: usize, shape: &[usize], dtype: DType) -> TensorRef {
        let t = self.fresh(device, shape, dtype);
        self.plan.inputs.push((name.into(), t.clone()));
        t
    }

    fn weight(&mut self, name: &str, device: usize, shape: &[usize]) -> TensorRef {
        self.buffer(Storage::Weight { name: name.into(), device }, Layout::contiguous(shape, DType::F32))
    }

    fn state(&mut self, name: &str, device: usize, shape: &[usize]) -> TensorRef {
        self.buffer(Storage::State { name: name.into(), device }, Layout::contiguous(shape, DType::F32))
    }

    /// A step writing a fresh buffer of `shape` on `device`.
    fn step(&mut self, kernel: Kernel, device: usize, inputs: &[&TensorRef], shape: &[usize], dtype: DType) -> TensorRef {
        let out = self.fresh(device, shape, dtype);
        self.push(kernel, device, inputs, &out);
        out
    }

    fn push(&mut self, kernel: Kernel, device: usize, inputs: &[&TensorRef], out: &TensorRef) {
        let node = self.plan.steps.len();
        self.plan.steps.push(Step { kernel, device, inputs: inputs.iter().map(|t| (*t).clone()).collect(), output: out.clone(), node });
    }

    fn matmul(&mut self, device: usize, a: &TensorRef, b: &TensorRef) -> TensorRef {
        let (m, n) = (a.layout.shape[0], b.layout.shape[1]);
        self.step(Kernel::MatMul { transpose_rhs: false }, device, &[a, b], &[m, n], DType::F32)
    }

    fn binary(&mut self, op: BinaryOp, device: usize, a: &TensorRef, b: &TensorRef) -> TensorRef {
        let shape = a.layout.shape.clone();
        self.step(Kernel::Binary(op), device, &[a, b], &shape, DType::F32)
    }

    /// `x` (on the device of its buffer, `from`) copied to `to`.
    fn transfer(&mut self, x: &TensorRef, from: usize, to: usize) -> TensorRef {
        let shape = x.layout.shape.clone();
        self.step(Kernel::Transfer { from }, to, &[x], &shape, x.layout.dtype)
    }

    fn output(&mut self, name: &str, t: &TensorRef) {
        self.plan.outputs.push((name.into(), t.clone()));
    }

    fn finish(mut self) -> Plan {
        for (a, used) in self.plan.arenas.iter_mut().zip(&self.used) {
            a.bytes = (*used).max(64);
        }
        self.plan
    }
}

/// Seeded values in [-1, 1).
fn values(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn open_pair() -> Option<(Arc<dyn Device>, Arc<dyn Device>)> {
    let cpu = common::open_or_skip("cpu")?;
    let cl = common::open_or_skip("opencl")?;
    Some((cpu, cl))
}

/// Largest |got - want| / (1 + |want|) over all elements; NaN if any element is NaN.
fn max_err(got: &HostTensor, want: &tg_ir::interp::Array) -> f64 {
    assert_eq!(got.shape, want.shape);
    got.to_f64().iter().zip(&want.data).map(|(g, w)| if g.is_nan() { f64::NAN } else { (g - w).abs() / (1.0 + w.abs()) }).fold(0.0, |m, e| {
        if e.is_nan() || m.is_nan() {
            f64::NAN
        } else {
            m.max(e)
        }
    })
}

fn f32_tensor(shape: &[usize], seed: u64) -> HostTensor {
    HostTensor::f32(shape, values(shape.iter().product(), seed)).unwrap()
}

/// The branch plan: `x` on the CPU; `a = x·Wc` on the CPU while `b = x·Wg` runs on OpenCL;
/// `c = b·b` (elementwise) on OpenCL; `d = a + b` on OpenCL (a sent over); then on the CPU
/// `y = a + c` and `z = d - y`. Outputs `y`, `z` on the CPU and `d` on OpenCL. `cl` is the
/// device index of the "OpenCL" steps (0 runs everything on the CPU).
fn branch_plan(devices: &[&str], cl: usize, m: usize, k: usize, n: usize) -> Plan {
    let mut p = PlanBuilder::new(devices);
    let x = p.input("x", 0, &[m, k], DType::F32);
    let wc = p.weight("wc", 0, &[k, n]);
    let wg = p.weight("wg", cl, &[k, n]);
    let a = p.matmul(0, &x, &wc);
    let xg = p.transfer(&x, 0, cl);
    let b = p.matmul(cl, &xg, &wg);
    let c = p.binary(BinaryOp::Mul, cl, &b, &b);
    let ag = p.transfer(&a, 0, cl);
    let d = p.binary(BinaryOp::Add, cl, &ag, &b);
    let cc = p.transfer(&c, cl, 0);
    let dc = p.transfer(&d, cl, 0);
    let y = p.binary(BinaryOp::Add, 0, &a, &cc);
    let z = p.binary(BinaryOp::Sub, 0, &dc, &y);
    p.output("y", &y);
    p.output("z", &z);
    p.output("d", &d);
    p.finish()
}

/// The same computation as a graph, for the interpreter.
fn branch_graph(m: usize, k: usize, n: usize) -> tg_ir::Graph {
    let mut g = GraphBuilder::new();
    let x = g.input("x", &[m, k], DType::F32).unwrap();
    let wc = g.weight("wc", &[k, n], DType::F32).unwrap();
    let wg = g.weight("wg", &[k, n], DType::F32).unwrap();
    let a = g.matmul(x, wc, false).unwrap();
    let b = g.matmul(x, wg, false).unwrap();
    let c = g.binary(BinaryOp::Mul, b, b).unwrap();
    let d = g.binary(BinaryOp::Add, a, b).unwrap();
    let y = g.binary(BinaryOp::Add, a, c).unwrap();
    let z = g.binary(BinaryOp::Sub, d, y).unwrap();
    g.output("y", y).unwrap();
    g.output("z", z).unwrap();
    g.output("d", d).unwrap();
    g.finish().unwrap()
}

fn branch_weights(k: usize, n: usize) -> Arc<dyn WeightStore + Send + Sync> {
    let mut w = HashMap::new();
    w.insert("wc".to_string(), f32_bytes(&values(k * n, 11)));
    w.insert("wg".to_string(), f32_bytes(&values(k * n, 12)));
    Arc::new(w)
}

/// Parallel branches on the CPU and OpenCL with transfers both ways equal the interpreter,
/// and the same plan run on the CPU alone (one thread, transfers as copies) agrees.
#[test]
fn parallel_branches_with_transfers_both_ways_match_the_reference() {
    let Some((cpu, cl)) = open_pair() else { return };
    let (m, k, n) = (7, 33, 19);
    let weights = branch_weights(k, n);
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[m, k], 3))].into();
    let want = tg_ir::interp::eval(&branch_graph(m, k, n), &inputs, &*weights).unwrap();

    let plan = branch_plan(&["cpu", cl.name()], 1, m, k, n);
    let mut exe = Executable::new(plan, vec![cpu.clone(), cl.clone()], weights.clone()).unwrap();
    assert_eq!(exe.threads(), 2, "one host thread per device");
    exe.set_poison(true);
    for run in 0..3 {
        let got = exe.run(&inputs).unwrap();
        for name in ["y", "z", "d"] {
            let e = max_err(&got[name], &want[name]);
            assert!(e < 1e-5, "run {run}: output {name} differs from the reference by {e}");
        }
    }

    let single = branch_plan(&["cpu"], 0, m, k, n);
    let mut one = Executable::new(single, vec![cpu], weights).unwrap();
    assert_eq!(one.threads(), 1);
    one.set_poison(true);
    let got = one.run(&inputs).unwrap();
    for name in ["y", "z", "d"] {
        let e = max_err(&got[name], &want[name]);
        assert!(e < 1e-5, "CPU alone: output {name} differs from the reference by {e}");
    }
}

/// The state plan: a row (from the CPU) stored into state `kv [4, 3]` on OpenCL at `pos`,
/// the whole state sent back to the CPU, summed over rows there. Outputs the CPU's copy of
/// the state and the sum.
fn state_plan(cl_name: &str) -> (Plan, usize) {
    let mut p = PlanBuilder::new(&["cpu", cl_name]);
    let row = p.input("row", 0, &[1, 3], DType::F32);
    let pos = p.input("pos", 0, &[1], DType::I32);
    let kv = p.state("kv", 1, &[4, 3]);
    let row_g = p.transfer(&row, 0, 1);
    let pos_g = p.transfer(&pos, 0, 1);
    p.push(Kernel::StoreRows { axis: 0 }, 1, &[&row_g, &pos_g], &kv);
    let kv_c = p.transfer(&kv, 1, 0);
    let sum = p.step(Kernel::Reduce { op: ReduceOp::Sum, axis: 0 }, 0, &[&kv_c], &[1, 3], DType::F32);
    p.output("kv", &kv_c);
    p.output("sum", &sum);
    let pos_transfer = 1;
    (p.finish(), pos_transfer)
}

fn state_inputs(row: [f32; 3], pos: i32) -> HashMap<String, HostTensor> {
    [("row".to_string(), HostTensor::f32(&[1, 3], row.to_vec()).unwrap()), ("pos".to_string(), HostTensor::i32(&[1], vec![pos]).unwrap())].into()
}

fn no_weights() -> Arc<dyn WeightStore + Send + Sync> {
    Arc::new(HashMap::<String, Vec<u8>>::new())
}

/// Rows stored into a state on OpenCL come back through a transfer, run after run.
#[test]
fn store_rows_into_an_opencl_state_read_back_through_a_transfer() {
    let Some((cpu, cl)) = open_pair() else { return };
    let (plan, _) = state_plan(cl.name());
    let mut exe = Executable::new(plan, vec![cpu, cl.clone()], no_weights()).unwrap();
    exe.set_poison(true);
    let mut states = StateSet::new();
    let mut want = [0f32; 12];
    for pos in 0..4 {
        let row = [pos as f32 + 0.5, -(pos as f32), 2.0 * pos as f32];
        want[pos * 3..pos * 3 + 3].copy_from_slice(&row);
        let got = exe.run_with_states(&state_inputs(row, pos as i32), &mut states).unwrap();
        assert_eq!(got["kv"].as_f32().unwrap(), &want, "after storing row {pos}");
        let sums: Vec<f32> = (0..3).map(|j| (0..4).map(|r| want[r * 3 + j]).sum()).collect();
        assert_eq!(got["sum"].as_f32().unwrap(), &sums[..]);
    }
    assert_eq!(states.device_of("kv"), Some(cl.name()));
    let held = states.read("kv").unwrap().unwrap();
    assert_eq!(held, f32_bytes(&want));
}

/// A device that forwards everything to a real one, and fails its `write` or `launch` at a
/// chosen call (counted over its life): a fault injector around the real device.
struct Faulty {
    inner: Arc<dyn Device>,
    writes: AtomicUsize,
    fail_write_at: AtomicUsize,
    launches: AtomicUsize,
    fail_launch_at: AtomicUsize,
}

impl Faulty {
    fn new(inner: Arc<dyn Device>) -> Arc<Faulty> {
        Arc::new(Faulty {
            inner,
            writes: AtomicUsize::new(0),
            fail_write_at: AtomicUsize::new(usize::MAX),
            launches: AtomicUsize::new(0),
            fail_launch_at: AtomicUsize::new(usize::MAX),
        })
    }
    fn heal(&self) {
        self.fail_write_at.store(usize::MAX, Ordering::SeqCst);
        self.fail_launch_at.store(usize::MAX, Ordering::SeqCst);
    }
}

impl Device for Faulty {
    fn name(&self) -> &str {
        self.inner.name()
    }
    fn kind(&self) -> DeviceKind {
        self.inner.kind()
    }
    fn info(&self) -> DeviceInfo {
        self.inner.info()
    }
    fn threads(&self) -> usize {
        self.inner.threads()
    }
    fn registry(&self) -> &KernelRegistry {
        self.inner.registry()
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        self.inner.alloc(bytes)
    }
    fn bind_weight(&self, store: &Arc<dyn WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError> {
        self.inner.bind_weight(store, name)
    }
    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        if self.writes.fetch_add(1, Ordering::SeqCst) == self.fail_write_at.load(Ordering::SeqCst) {
            return Err(DeviceError::Driver { device: self.name().into(), detail: "injected write failure".into() });
        }
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
    fn queues(&self) -> usize {
        self.inner.queues()
    }
    fn record(&self, q: usize) -> Result<Event, DeviceError> {
        self.inner.record(q)
    }
    fn wait(&self, q: usize, e: &Event) -> Result<(), DeviceError> {
        self.inner.wait(q, e)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.inner.synchronize()
    }
    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        self.inner.scope(f)
    }
    fn launch(&self, q: usize, k: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        if self.launches.fetch_add(1, Ordering::SeqCst) == self.fail_launch_at.load(Ordering::SeqCst) {
            return Err("injected launch failure".into());
        }
        self.inner.launch(q, k, ins, out)
    }
}

/// A transfer failing mid-run, on either side, returns an error naming the transfer step and
/// both devices; the kept state is as it was except the row the failed run stored at its own
/// offset; a retry equals a session that never failed.
#[test]
fn a_transfer_failing_mid_run_names_the_step_and_keeps_the_state() {
    let Some((cpu, cl)) = open_pair() else { return };
    let (fcpu, fcl) = (Faulty::new(cpu), Faulty::new(cl.clone()));
    let (dcpu, dcl): (Arc<dyn Device>, Arc<dyn Device>) = (fcpu.clone(), fcl.clone());
    let (plan, pos_transfer) = state_plan(cl.name());
    let back_transfer = 3;
    assert!(matches!(plan.steps[pos_transfer].kernel, Kernel::Transfer { from: 0 }));
    assert!(matches!(plan.steps[back_transfer].kernel, Kernel::Transfer { from: 1 }));
    let mut exe = Executable::new(plan.clone(), vec![dcpu.clone(), dcl.clone()], no_weights()).unwrap();
    exe.set_poison(true);
    let mut states = StateSet::new();
    exe.run_with_states(&state_inputs([1.0, 2.0, 3.0], 0), &mut states).unwrap();
    exe.run_with_states(&state_inputs([4.0, 5.0, 6.0], 1), &mut states).unwrap();
    let before = states.read("kv").unwrap().unwrap();

    // 1. The write into OpenCL of the `pos` transfer fails (the second write on OpenCL in a
    //    run: the row's transfer is the first): the state update never ran.
    fcl.fail_write_at.store(fcl.writes.load(Ordering::SeqCst) + 1, Ordering::SeqCst);
    let err = exe.run_with_states(&state_inputs([7.0, 8.0, 9.0], 2), &mut states).unwrap_err().to_string();
    eprintln!("{err}");
    let names = format!("step {pos_transfer} (transfer) on cpu -> {}", cl.name());
    assert!(err.contains(&names) && err.contains("injected write failure"), "{err}");
    assert_eq!(states.read("kv").unwrap().unwrap(), before, "a failed transfer before the update changed the state");
    fcl.heal();

    // 2. The write into the CPU of the state's way back fails (run on the OpenCL thread,
    //    after the update): only the failed run's own row (2) changed.
    fcpu.fail_write_at.store(fcpu.writes.load(Ordering::SeqCst) + 2, Ordering::SeqCst); // after the row and pos inputs
    let err = exe.run_with_states(&state_inputs([7.0, 8.0, 9.0], 2), &mut states).unwrap_err().to_string();
    eprintln!("{err}");
    let names = format!("step {back_transfer} (transfer) on {} -> cpu", cl.name());
    assert!(err.contains(&names) && err.contains("injected write failure"), "{err}");
    let after = states.read("kv").unwrap().unwrap();
    assert_eq!(&after[..24], &before[..24], "rows 0 and 1 (before the offset) changed");
    assert_eq!(&after[36..], &before[36..], "row 3 (past the run's row) changed");
    fcpu.heal();

    // 3. A kernel failing on the CPU thread while the OpenCL thread waits for the CPU:
    //    the CPU's reduce fails after the OpenCL side is done; and in the branch plan the
    //    CPU matmul fails while OpenCL waits for its result. Neither hangs.
    fcpu.fail_launch_at.store(fcpu.launches.load(Ordering::SeqCst), Ordering::SeqCst);
    let err = exe.run_with_states(&state_inputs([7.0, 8.0, 9.0], 2), &mut states).unwrap_err().to_string();
    assert!(err.contains("step 4 (reduce_sum) on cpu") && err.contains("injected launch failure"), "{err}");
    fcpu.heal();

    // The retry equals a session that never failed.
    let retry = exe.run_with_states(&state_inputs([7.0, 8.0, 9.0], 2), &mut states).unwrap();
    let mut clean = StateSet::new();
    let mut exe2 = Executable::new(plan, vec![dcpu.clone(), dcl.clone()], no_weights()).unwrap();
    for (i, r) in [[1.0, 2.0, 3.0], [4.0, 5.0, 6.0], [7.0, 8.0, 9.0]].into_iter().enumerate() {
        let got = exe2.run_with_states(&state_inputs(r, i as i32), &mut clean).unwrap();
        if i == 2 {
            assert_eq!(retry["sum"], got["sum"]);
            assert_eq!(retry["kv"], got["kv"]);
        }
    }
    assert_eq!(states.read("kv").unwrap(), clean.read("kv").unwrap());

    let (m, k, n) = (5, 8, 6);
    let mut exe = Executable::new(branch_plan(&["cpu", cl.name()], 1, m, k, n), vec![dcpu, dcl], branch_weights(k, n)).unwrap();
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[m, k], 3))].into();
    fcpu.fail_launch_at.store(fcpu.launches.load(Ordering::SeqCst), Ordering::SeqCst);
    let err = exe.run(&inputs).unwrap_err().to_string();
    assert!(err.contains("step 0 (matmul_f32) on cpu") && err.contains("injected launch failure"), "{err}");
    fcpu.heal();
    exe.run(&inputs).unwrap();
}

/// The two-branch plan of the overlap and ordering tests: `a = x·Wc` on the CPU (`x [mc, k]`),
/// `b = xg·Wg` on OpenCL (`xg [mg, k]`, its own input sent over), `b` sent back, each reduced
/// over its rows and summed on the CPU. `cl` is the device index of the "OpenCL" steps (0
/// runs everything on the CPU). Returns the plan and the step indices of the two matmuls.
fn two_branch_plan(devices: &[&str], cl: usize, mc: usize, mg: usize, k: usize) -> (Plan, usize, usize) {
    let mut p = PlanBuilder::new(devices);
    let x = p.input("x", 0, &[mc, k], DType::F32);
    let xgc = p.input("xg", 0, &[mg, k], DType::F32);
    let wc = p.weight("wc", 0, &[k, k]);
    let wg = p.weight("wg", cl, &[k, k]);
    let xg = p.transfer(&xgc, 0, cl);
    let a = p.matmul(0, &x, &wc);
    let b = p.matmul(cl, &xg, &wg);
    let bc = p.transfer(&b, cl, 0);
    let ra = p.step(Kernel::Reduce { op: ReduceOp::Sum, axis: 0 }, 0, &[&a], &[1, k], DType::F32);
    let rb = p.step(Kernel::Reduce { op: ReduceOp::Sum, axis: 0 }, 0, &[&bc], &[1, k], DType::F32);
    let y = p.binary(BinaryOp::Add, 0, &ra, &rb);
    p.output("y", &y);
    (p.finish(), 1, 2)
}

fn two_branch_graph(mc: usize, mg: usize, k: usize) -> tg_ir::Graph {
    let mut g = GraphBuilder::new();
    let x = g.input("x", &[mc, k], DType::F32).unwrap();
    let xg = g.input("xg", &[mg, k], DType::F32).unwrap();
    let wc = g.weight("wc", &[k, k], DType::F32).unwrap();
    let wg = g.weight("wg", &[k, k], DType::F32).unwrap();
    let a = g.matmul(x, wc, false).unwrap();
    let b = g.matmul(xg, wg, false).unwrap();
    let ra = g.reduce(ReduceOp::Sum, a, 0).unwrap();
    let rb = g.reduce(ReduceOp::Sum, b, 0).unwrap();
    let y = g.binary(BinaryOp::Add, ra, rb).unwrap();
    g.output("y", y).unwrap();
    g.finish().unwrap()
}

/// The two-branch plan bound to the CPU and OpenCL, its inputs, and the reference: the
/// interpreter's, or (`reference_on_cpu`, for sizes the f64 interpreter is slow on) the same
/// plan run on the CPU alone.
fn two_branch_setup(
    cpu: &Arc<dyn Device>,
    cl: &Arc<dyn Device>,
    (mc, mg, k): (usize, usize, usize),
    reference_on_cpu: bool,
) -> (Executable, HashMap<String, HostTensor>, tg_ir::interp::Array, usize, usize) {
    let mut w = HashMap::new();
    w.insert("wc".to_string(), f32_bytes(&values(k * k, 21)));
    w.insert("wg".to_string(), f32_bytes(&values(k * k, 22)));
    let weights: Arc<dyn WeightStore + Send + Sync> = Arc::new(w);
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[mc, k], 23)), ("xg".to_string(), f32_tensor(&[mg, k], 24))].into();
    let want = if reference_on_cpu {
        let (plan, _, _) = two_branch_plan(&["cpu"], 0, mc, mg, k);
        let y = Executable::new(plan, vec![cpu.clone()], weights.clone()).unwrap().run(&inputs).unwrap().remove("y").unwrap();
        tg_ir::interp::Array { shape: y.shape.clone(), dtype: DType::F32, data: y.to_f64() }
    } else {
        tg_ir::interp::eval(&two_branch_graph(mc, mg, k), &inputs, &*weights).unwrap().remove("y").unwrap()
    };
    let (plan, sa, sb) = two_branch_plan(&["cpu", cl.name()], 1, mc, mg, k);
    let exe = Executable::new(plan, vec![cpu.clone(), cl.clone()], weights).unwrap();
    (exe, inputs, want, sa, sb)
}

/// Busy time of each device's thread and the time both matmuls ran at once, in ms.
fn overlap_ms(spans: &[Span], sa: usize, sb: usize) -> (f64, f64, f64) {
    let (a, b) = (spans[sa], spans[sb]);
    let ms = |ns: u64| ns as f64 / 1e6;
    let both = a.end_ns.min(b.end_ns).saturating_sub(a.start_ns.max(b.start_ns));
    (ms(a.end_ns - a.start_ns), ms(b.end_ns - b.start_ns), ms(both))
}

/// Two long independent branches, one per device, overlap on the profiled timeline.
#[test]
fn independent_branches_on_two_devices_overlap_in_time() {
    let Some((cpu, cl)) = open_pair() else { return };
    // Sized to take tens of ms each on a 2-core machine running both at once (the CPU with
    // one worker; PoCL on the same cores).
    let (mut exe, inputs, want, sa, sb) = two_branch_setup(&cpu, &cl, (3072, 64, 512), true);
    exe.set_poison(true);
    exe.set_profiling(true);
    exe.run(&inputs).unwrap(); // warm-up (PoCL compiles the kernel for these sizes)
    let mut best = (0.0, 0.0, 0.0);
    for _ in 0..3 {
        let t = Instant::now();
        let got = exe.run(&inputs).unwrap();
        let wall = t.elapsed().as_secs_f64() * 1e3;
        let e = max_err(&got["y"], &want);
        assert!(e < 1e-4, "differs from the reference by {e}");
        let spans = exe.timeline().expect("profiling is on");
        assert_eq!(spans.len(), exe.plan().steps.len());
        assert!(spans.iter().enumerate().all(|(i, s)| s.step == i && s.start_ns <= s.end_ns));
        assert_eq!((spans[sa].thread, spans[sb].thread), (0, 1));
        assert_eq!((spans[0].from, spans[0].device, spans[0].thread), (Some(0), 1, 1), "the CPU -> OpenCL transfer runs on the OpenCL thread");
        let times = exe.step_times().unwrap();
        assert!(spans.iter().all(|s| times[s.step] == s.end_ns - s.start_ns));
        let (ca, cb, both) = overlap_ms(spans, sa, sb);
        let busy = |d: usize| spans.iter().filter(|s| s.thread == d).map(|s| (s.end_ns - s.start_ns) as f64 / 1e6).sum::<f64>();
        eprintln!(
            "overlap: cpu matmul {ca:.1} ms [{:.1}, {:.1}], opencl matmul {cb:.1} ms [{:.1}, {:.1}], both at once {both:.1} ms; busy cpu {:.1} ms, opencl {:.1} ms; run {wall:.1} ms",
            spans[sa].start_ns as f64 / 1e6,
            spans[sa].end_ns as f64 / 1e6,
            spans[sb].start_ns as f64 / 1e6,
            spans[sb].end_ns as f64 / 1e6,
            busy(0),
            busy(1)
        );
        if both > best.2 {
            best = (ca, cb, both);
        }
    }
    let (ca, cb, both) = best;
    assert!(both > 0.25 * ca.min(cb), "the two devices' matmuls overlapped only {both:.2} ms of {ca:.1} and {cb:.1} ms");
}

/// A consumer whose input the other device writes late (a slow producer on each side) reads
/// it only once written: 20 poisoned runs in a row equal the reference.
#[test]
fn cross_device_waits_order_late_producers() {
    let Some((cpu, cl)) = open_pair() else { return };
    // OpenCL's matmul is slow, the CPU's quick: the CPU's reduce of OpenCL's result (sent
    // back by a transfer) waits for it.
    for (mc, mg) in [(8, 128)] {
        let (mut exe, inputs, want, _, _) = two_branch_setup(&cpu, &cl, (mc, mg, 384), false);
        exe.set_poison(true);
        for run in 0..20 {
            let got = exe.run(&inputs).unwrap();
            let e = max_err(&got["y"], &want);
            assert!(e < 1e-4, "mc {mc}, mg {mg}, run {run}: differs from the reference by {e}");
        }
    }
    // The branch plan's CPU -> OpenCL edge: OpenCL's launches return at once, so its thread
    // reaches the transfer of `a` while the CPU's matmul producing it still runs.
    let (m, k, n) = (160, 384, 256);
    let weights = branch_weights(k, n);
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[m, k], 5))].into();
    let want = tg_ir::interp::eval(&branch_graph(m, k, n), &inputs, &*weights).unwrap();
    let mut exe = Executable::new(branch_plan(&["cpu", cl.name()], 1, m, k, n), vec![cpu, cl], weights).unwrap();
    exe.set_poison(true);
    for run in 0..20 {
        let got = exe.run(&inputs).unwrap();
        for name in ["y", "z", "d"] {
            let e = max_err(&got[name], &want[name]);
            assert!(e < 1e-4, "branch plan run {run}: output {name} differs from the reference by {e}");
        }
    }
}

/// A plan that breaks what the threads rely on is refused when bound: an operand on another
/// device without a transfer, and a transfer whose buffer shares arena bytes.
#[test]
fn plans_that_would_race_are_refused() {
    let Some((cpu, cl)) = open_pair() else { return };
    let mut p = PlanBuilder::new(&["cpu", cl.name()]);
    let x = p.input("x", 0, &[4], DType::F32);
    let y = p.step(Kernel::Unary(tg_ir::UnaryOp::Exp), 1, &[&x], &[4], DType::F32);
    p.output("y", &y);
    let err = Executable::new(p.finish(), vec![cpu.clone(), cl.clone()], no_weights()).err().expect("refused").to_string();
    assert!(err.contains("operand 0") && err.contains("is on cpu"), "{err}");

    let mut p = PlanBuilder::new(&["cpu", cl.name()]);
    let x = p.input("x", 0, &[4], DType::F32);
    let xg = p.transfer(&x, 0, 1);
    p.output("y", &xg);
    let mut plan = p.finish();
    // A second buffer over the transfer's source bytes.
    let mut alias = plan.buffers[x.buffer].clone();
    alias.bytes = 8;
    plan.buffers.push(alias);
    let err = Executable::new(plan, vec![cpu, cl], no_weights()).err().expect("refused").to_string();
    assert!(err.contains("shares arena bytes"), "{err}");
}

/// Two CPU devices (two pools) run the branch plan on two threads, transfers on their
/// sources' threads: the concurrent path without any OpenCL.
#[test]
fn two_cpu_devices_run_the_branches_concurrently() {
    let cpu = |_| -> Arc<dyn Device> { Arc::new(tg_runtime::CpuDevice::new(1).unwrap()) };
    let (m, k, n) = (33, 65, 17);
    let weights = branch_weights(k, n);
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[m, k], 4))].into();
    let want = tg_ir::interp::eval(&branch_graph(m, k, n), &inputs, &*weights).unwrap();
    let mut exe = Executable::new(branch_plan(&["cpu", "cpu"], 1, m, k, n), vec![cpu(0), cpu(1)], weights).unwrap();
    assert_eq!(exe.threads(), 2);
    exe.set_poison(true);
    exe.set_profiling(true);
    for run in 0..20 {
        let got = exe.run(&inputs).unwrap();
        for name in ["y", "z", "d"] {
            let e = max_err(&got[name], &want[name]);
            assert!(e < 1e-5, "run {run}: output {name} differs from the reference by {e}");
        }
    }
    let spans = exe.timeline().unwrap();
    // Transfers between two CPUs run on their source's thread.
    for s in spans {
        if let Some(from) = s.from {
            assert_eq!(s.thread, from, "step {}", s.step);
        }
    }
}

/// Two OpenCL devices (two contexts on the device) and the CPU: a transfer between the two
/// OpenCL devices runs on its source's thread; three threads, one result.
#[test]
fn a_transfer_between_two_opencl_devices_runs_on_the_source_thread() {
    let Some((cpu, a)) = open_pair() else { return };
    let Some(b) = common::open_or_skip("opencl") else { return };
    let n = 1000;
    let mut p = PlanBuilder::new(&["cpu", a.name(), b.name()]);
    let x = p.input("x", 0, &[n], DType::F32);
    let xa = p.transfer(&x, 0, 1);
    let e = p.step(Kernel::Unary(tg_ir::UnaryOp::Exp), 1, &[&xa], &[n], DType::F32);
    let eb = p.transfer(&e, 1, 2);
    let f = p.binary(BinaryOp::Mul, 2, &eb, &eb);
    let fc = p.transfer(&f, 2, 0);
    let y = p.binary(BinaryOp::Add, 0, &fc, &x);
    p.output("y", &y);
    let plan = p.finish();
    let mut g = GraphBuilder::new();
    let gx = g.input("x", &[n], DType::F32).unwrap();
    let ge = g.unary(tg_ir::UnaryOp::Exp, gx).unwrap();
    let gf = g.binary(BinaryOp::Mul, ge, ge).unwrap();
    let gy = g.binary(BinaryOp::Add, gf, gx).unwrap();
    g.output("y", gy).unwrap();
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), f32_tensor(&[n], 9))].into();
    let want = tg_ir::interp::eval(&g.finish().unwrap(), &inputs, &*no_weights()).unwrap();
    let mut exe = Executable::new(plan, vec![cpu, a, b], no_weights()).unwrap();
    assert_eq!(exe.threads(), 3);
    exe.set_poison(true);
    exe.set_profiling(true);
    for run in 0..10 {
        let got = exe.run(&inputs).unwrap();
        let e = max_err(&got["y"], &want["y"]);
        assert!(e < 1e-5, "run {run}: differs from the reference by {e}");
    }
    let threads: Vec<usize> = exe.timeline().unwrap().iter().map(|s| s.thread).collect();
    assert_eq!(threads, vec![1, 1, 1, 2, 2, 0], "x->a on a, exp on a, a->b on a (the source), mul on b, b->cpu on b, add on cpu");
}

//! The runtime without a compiler: the CPU device's memory operations and their errors, an
//! [`Executable`] over hand-made plans (two steps over one arena, run twice with poisoning
//! on), and [`StateSet`]: states created zeroed, kept between runs, resized, refused on
//! another device or at another size, and untouched by a run that fails its input check.

use std::collections::HashMap;
use std::sync::Arc;
use tg_ir::{BinaryOp, DType, HostData, HostTensor, UnaryOp, WeightStore};
use tg_runtime::{
    broadcast_layout, ArenaDesc, Arg, BufferDesc, CpuDevice, Device, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Executable, Kernel, KernelRegistry, Layout, Plan,
    RuntimeError, StateSet, Step, Storage, TensorRef,
};

fn cpu() -> Arc<dyn Device> {
    Arc::new(CpuDevice::new(1).expect("a CPU device with one thread"))
}

fn no_weights() -> Arc<dyn WeightStore + Send + Sync> {
    Arc::new(HashMap::<String, Vec<u8>>::new())
}

fn read_all(d: &dyn Device, b: &DeviceBuffer) -> Vec<u8> {
    let mut v = vec![0u8; b.bytes()];
    d.read(b, 0, &mut v).expect("read a whole buffer");
    v
}

#[test]
fn cpu_alloc_write_read_copy_fill_round_trip() {
    let d = cpu();
    let a = d.alloc(100).expect("alloc 100");
    assert_eq!(a.bytes(), 100);
    d.fill(&a, 0, 100, 0).expect("zero");
    let data: Vec<u8> = (1..=20).collect();
    d.write(&a, 10, &data).expect("write 20 bytes at 10");
    let mut back = vec![0u8; 20];
    d.read(&a, 10, &mut back).expect("read them back");
    assert_eq!(back, data);
    // Copy to another buffer at another offset, then fill part of it.
    let b = d.alloc(64).expect("alloc 64");
    d.fill(&b, 0, 64, 0xEE).expect("fill");
    d.copy(&a, 10, &b, 3, 20).expect("copy");
    d.fill(&b, 5, 4, 0xAB).expect("fill 4 bytes");
    d.synchronize().expect("synchronize");
    let got = read_all(&*d, &b);
    let mut want = vec![0xEEu8; 64];
    want[3..23].copy_from_slice(&data);
    want[5..9].fill(0xAB);
    assert_eq!(got, want);
    // The source is unchanged; a copy within one buffer (overlapping) works too.
    let mut want_a = vec![0u8; 100];
    want_a[10..30].copy_from_slice(&data);
    assert_eq!(read_all(&*d, &a), want_a);
    d.copy(&a, 10, &a, 15, 20).expect("overlapping copy");
    want_a.copy_within(10..30, 15);
    assert_eq!(read_all(&*d, &a), want_a);
    // Empty transfers at the end of a buffer are fine; a zero-byte buffer exists.
    d.write(&a, 100, &[]).expect("empty write at the end");
    let z = d.alloc(0).expect("alloc 0");
    assert_eq!(z.bytes(), 0);
}

fn is_range(e: &DeviceError, start: usize, end: usize, len: usize) -> bool {
    matches!(e, DeviceError::Range { start: s, end: en, len: l, .. } if (*s, *en, *l) == (start, end, len))
}

#[test]
fn cpu_range_errors() {
    // 128 bytes: a whole number of the CPU's 64-byte lines (see the ignored test below for
    // sizes that are not).
    let d = cpu();
    let a = d.alloc(128).expect("alloc");
    d.fill(&a, 0, 128, 7).expect("fill");
    let e = d.write(&a, 123, &[1; 10]).expect_err("write past the end");
    assert!(is_range(&e, 123, 133, 128), "{e:?}");
    assert!(e.to_string().contains("[123, 133)") && e.to_string().contains("128"), "{e}");
    let mut buf = [0u8; 8];
    let e = d.read(&a, 121, &mut buf).expect_err("read past the end");
    assert!(is_range(&e, 121, 129, 128), "{e:?}");
    let e = d.fill(&a, 128, 1, 0).expect_err("fill past the end");
    assert!(is_range(&e, 128, 129, 128), "{e:?}");
    let b = d.alloc(64).expect("alloc");
    let e = d.copy(&a, 0, &b, 60, 6).expect_err("copy past the destination's end");
    assert!(is_range(&e, 60, 66, 64), "{e:?}");
    let e = d.copy(&a, 126, &b, 0, 4).expect_err("copy past the source's end");
    assert!(is_range(&e, 126, 130, 128), "{e:?}");
    // An offset that overflows is a range error, not a wrap-around.
    let e = d.write(&a, usize::MAX, &[1]).expect_err("overflowing offset");
    assert!(matches!(e, DeviceError::Range { .. }), "{e:?}");
    let e = d.read(&a, usize::MAX, &mut buf).expect_err("overflowing offset");
    assert!(matches!(e, DeviceError::Range { .. }), "{e:?}");
    // A launch whose operand lies outside its buffer is refused.
    let l = Layout::contiguous(&[8], DType::F32);
    let e = d
        .launch(0, &Kernel::Unary(UnaryOp::Neg), &[Arg { buffer: &a, offset: 112, bytes: 32, layout: &l }], Arg { buffer: &b, offset: 0, bytes: 32, layout: &l })
        .expect_err("operand past the end");
    assert!(e.contains("outside"), "{e}");
    // Nothing was written by the failed calls.
    assert_eq!(read_all(&*d, &a), vec![7u8; 128]);
}

/// Ranges are checked against the buffer's size, not the allocation rounded up to 64-byte
/// lines: on a 100-byte buffer, bytes 100..128 cannot be read, filled or copied (this was a
/// bug of `CpuDevice::region`, found by this test).
#[test]
fn cpu_range_checks_use_the_buffer_size_not_the_allocation() {
    let d = cpu();
    let a = d.alloc(100).expect("alloc");
    let e = d.write(&a, 95, &[1; 10]).expect_err("write past the end");
    assert!(is_range(&e, 95, 105, 100), "{e:?}");
    let e = d.read(&a, 93, &mut [0u8; 8]).expect_err("read past the end");
    assert!(is_range(&e, 93, 101, 100), "{e:?}");
    let e = d.fill(&a, 100, 1, 0).expect_err("fill past the end");
    assert!(is_range(&e, 100, 101, 100), "{e:?}");
    let b = d.alloc(10).expect("alloc");
    let e = d.copy(&a, 0, &b, 5, 6).expect_err("copy past the destination's end");
    assert!(is_range(&e, 5, 11, 10), "{e:?}");
}

#[test]
fn foreign_buffer_refused() {
    let (d1, d2) = (cpu(), cpu());
    let a = d1.alloc(16).expect("alloc");
    let b = d2.alloc(16).expect("alloc");
    assert_ne!(a.device_id(), b.device_id());
    let foreign = |e: DeviceError| assert!(matches!(e, DeviceError::ForeignBuffer { .. }), "{e:?}");
    foreign(d2.write(&a, 0, &[1]).expect_err("write to a foreign buffer"));
    foreign(d2.read(&a, 0, &mut [0]).expect_err("read a foreign buffer"));
    foreign(d2.fill(&a, 0, 1, 0).expect_err("fill a foreign buffer"));
    foreign(d2.copy(&a, 0, &b, 0, 4).expect_err("copy from a foreign buffer"));
    foreign(d2.copy(&b, 0, &a, 0, 4).expect_err("copy to a foreign buffer"));
    // A launch with another device's buffer is refused too.
    let l = Layout::contiguous(&[4], DType::F32);
    let e = d2
        .launch(0, &Kernel::Unary(UnaryOp::Neg), &[Arg { buffer: &a, offset: 0, bytes: 16, layout: &l }], Arg { buffer: &b, offset: 0, bytes: 16, layout: &l })
        .expect_err("launch reading a foreign buffer");
    assert!(e.contains("another device"), "{e}");
}

fn f32s(shape: &[usize], v: Vec<f32>) -> HostTensor {
    HostTensor::f32(shape, v).expect("host tensor")
}

fn arena(offset: usize, bytes: usize, node: usize, first: Option<usize>, last: Option<usize>, persistent: bool) -> BufferDesc {
    BufferDesc { storage: Storage::Arena { arena: 0, offset }, bytes, node, first_step: first, last_step: last, persistent }
}

fn tref(buffer: usize, shape: &[usize], dtype: DType) -> TensorRef {
    TensorRef { buffer, layout: Layout::contiguous(shape, dtype) }
}

/// `y = exp(a + b)` with `a [2, 3]`, `b [3]` broadcast (stride 0), in one arena; `never`
/// is an output no step writes (it shows the poison).
fn add_exp_plan() -> Plan {
    let f = DType::F32;
    Plan {
        devices: vec!["cpu".into()],
        arenas: vec![ArenaDesc { device: 0, bytes: 256 }],
        buffers: vec![
            arena(0, 24, 0, None, Some(0), false),
            arena(64, 12, 1, None, Some(0), false),
            arena(128, 24, 2, Some(0), Some(1), false),
            arena(192, 24, 3, Some(1), None, true),
            arena(224, 24, 4, None, None, true),
        ],
        steps: vec![
            Step {
                kernel: Kernel::Binary(BinaryOp::Add),
                device: 0,
                inputs: vec![tref(0, &[2, 3], f), TensorRef { buffer: 1, layout: broadcast_layout(&Layout::contiguous(&[3], f), &[2, 3]) }],
                output: tref(2, &[2, 3], f),
                node: 2,
            },
            Step { kernel: Kernel::Unary(UnaryOp::Exp), device: 0, inputs: vec![tref(2, &[2, 3], f)], output: tref(3, &[2, 3], f), node: 3 },
        ],
        inputs: vec![("a".into(), tref(0, &[2, 3], f)), ("b".into(), tref(1, &[3], f))],
        outputs: vec![("y".into(), tref(3, &[2, 3], f)), ("never".into(), tref(4, &[2, 3], f))],
    }
}

#[test]
fn executable_two_steps_twice_with_poison() {
    let mut ex = Executable::new(add_exp_plan(), vec![cpu()], no_weights()).expect("bind the plan");
    assert_eq!(ex.arena_bytes(), 256);
    ex.set_poison(true);
    for (a, b) in [(vec![0.0f32, 0.5, -1.0, 1.0, 2.0, -3.0], vec![0.25f32, -0.5, 1.0]), (vec![-2.0, 0.0, 0.125, 3.0, -0.75, 1.5], vec![1.0, 2.0, -1.0])] {
        let inputs = HashMap::from([("a".to_string(), f32s(&[2, 3], a.clone())), ("b".to_string(), f32s(&[3], b.clone()))]);
        let out = ex.run(&inputs).expect("run");
        let y = out["y"].as_f32().expect("y is f32");
        for i in 0..6 {
            let want = (a[i] as f64 + b[i % 3] as f64).exp();
            assert!((y[i] as f64 - want).abs() <= 1e-6 * want, "y[{i}] = {}, want {want}", y[i]);
        }
        // Unwritten memory reads as the poison (NaN), in every run.
        let never = out["never"].as_f32().expect("never is f32");
        assert!(never.iter().all(|v| v.is_nan()), "{never:?}");
    }
    // Wrong shape and missing inputs are errors naming the input.
    let bad = HashMap::from([("a".to_string(), f32s(&[3, 2], vec![0.0; 6])), ("b".to_string(), f32s(&[3], vec![0.0; 3]))]);
    match ex.run(&bad) {
        Err(RuntimeError::Input { name, detail }) => assert!(name == "a" && detail.contains("[3, 2]"), "{name}: {detail}"),
        other => panic!("expected an input error, got {:?}", other.map(|_| ())),
    }
}

/// A state `kv [4, 3]` (f32) updated by one StoreRows step: `rows [1, 3]` at `pos` (i32
/// `[1]`), on device `device`; the output `kv` reads the state.
fn store_plan(device: &str) -> Plan {
    let f = DType::F32;
    Plan {
        devices: vec![device.into()],
        arenas: vec![ArenaDesc { device: 0, bytes: 128 }],
        buffers: vec![
            arena(0, 12, 0, None, Some(0), false),
            arena(64, 4, 1, None, Some(0), false),
            BufferDesc { storage: Storage::State { name: "kv".into(), device: 0 }, bytes: 48, node: 2, first_step: Some(0), last_step: None, persistent: true },
        ],
        steps: vec![Step { kernel: Kernel::StoreRows { axis: 0 }, device: 0, inputs: vec![tref(0, &[1, 3], f), tref(1, &[1], DType::I32)], output: tref(2, &[4, 3], f), node: 3 }],
        inputs: vec![("rows".into(), tref(0, &[1, 3], f)), ("pos".into(), tref(1, &[1], DType::I32))],
        outputs: vec![("kv".into(), tref(2, &[4, 3], f))],
    }
}

fn store_inputs(rows: [f32; 3], pos: i32) -> HashMap<String, HostTensor> {
    HashMap::from([("rows".to_string(), f32s(&[1, 3], rows.to_vec())), ("pos".to_string(), HostTensor::i32(&[1], vec![pos]).expect("pos"))])
}

fn state_f32(s: &StateSet, name: &str) -> Vec<f32> {
    let b = s.read(name).expect("read the state").expect("the state is held");
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

#[test]
fn states_created_zeroed_kept_and_resized() {
    let mut ex = Executable::new(store_plan("cpu"), vec![cpu()], no_weights()).expect("bind");
    ex.set_poison(true);
    assert_eq!(ex.state_sizes(), vec![("kv".to_string(), 48)]);
    let mut states = StateSet::new();
    let out = ex.run_with_states(&store_inputs([1.0, 2.0, 3.0], 2), &mut states).expect("first run");
    // Created zeroed (poisoning the arena does not reach states); only row 2 written.
    let mut want = vec![0f32; 12];
    want[6..9].copy_from_slice(&[1.0, 2.0, 3.0]);
    assert_eq!(out["kv"].as_f32().expect("f32"), &want[..]);
    assert_eq!(states.names(), vec!["kv".to_string()]);
    assert_eq!((states.state_bytes("kv"), states.device_of("kv"), states.bytes()), (Some(48), Some("cpu"), 48));
    assert_eq!(state_f32(&states, "kv"), want);
    // Kept between runs.
    ex.run_with_states(&store_inputs([4.0, 5.0, 6.0], 0), &mut states).expect("second run");
    want[0..3].copy_from_slice(&[4.0, 5.0, 6.0]);
    assert_eq!(state_f32(&states, "kv"), want);
    // Past the end: an error, and the state is as it was.
    let e = ex.run_with_states(&store_inputs([7.0, 8.0, 9.0], 4), &mut states).expect_err("rows past the end");
    assert!(e.to_string().contains("store_rows"), "{e}");
    assert_eq!(state_f32(&states, "kv"), want);

    // Grow to 6 rows: every row kept, the new ones zero; then shrink to 3.
    states.resize_rows("kv", 1, 4, 6, 12).expect("grow");
    let mut grown = want.clone();
    grown.extend([0.0; 6]);
    assert_eq!(state_f32(&states, "kv"), grown);
    // The plan wants 48 bytes: a run with the resized set is an error naming the state.
    match ex.run_with_states(&store_inputs([1.0, 1.0, 1.0], 0), &mut states) {
        Err(RuntimeError::State { name, detail }) => assert!(name == "kv" && detail.contains("72") && detail.contains("48"), "{detail}"),
        other => panic!("expected a state size error, got {:?}", other.map(|_| ())),
    }
    states.resize_rows("kv", 1, 6, 3, 12).expect("shrink");
    assert_eq!(state_f32(&states, "kv"), want[..9].to_vec());
    // Sizes that do not describe the state are refused; a state not held stays absent.
    assert!(matches!(states.resize_rows("kv", 1, 4, 8, 12), Err(RuntimeError::State { .. })));
    states.resize_rows("absent", 1, 4, 8, 12).expect("absent state: nothing to do");
    assert_eq!(states.names(), vec!["kv".to_string()]);
    // Rows of an [outer, rows, row] state keep their place within each outer slab.
    let mut s2 = StateSet::new();
    let mut ex2 = Executable::new(store_plan("cpu"), vec![cpu()], no_weights()).expect("bind");
    ex2.run_with_states(&store_inputs([1.0, 2.0, 3.0], 3), &mut s2).expect("run");
    // Seen as [2 slabs, 2 rows, 12 bytes]: old row 3 is row 1 of slab 1; grow each slab to 3
    // rows and it lands at row 1 of slab 1 = row 4.
    s2.resize_rows("kv", 2, 2, 3, 12).expect("grow slabs");
    let got = state_f32(&s2, "kv");
    let mut want2 = vec![0f32; 18];
    want2[12..15].copy_from_slice(&[1.0, 2.0, 3.0]);
    assert_eq!(got, want2);
    s2.clear();
    assert!(s2.names().is_empty() && s2.bytes() == 0);
}

/// A CPU device under another name (to hold states on "another device").
struct Renamed(CpuDevice, &'static str);

impl Device for Renamed {
    fn name(&self) -> &str {
        self.1
    }
    fn kind(&self) -> DeviceKind {
        self.0.kind()
    }
    fn info(&self) -> DeviceInfo {
        DeviceInfo { name: self.1.into(), ..self.0.info() }
    }
    fn registry(&self) -> &KernelRegistry {
        self.0.registry()
    }
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        self.0.alloc(bytes)
    }
    fn bind_weight(&self, store: &Arc<dyn WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError> {
        self.0.bind_weight(store, name)
    }
    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        self.0.write(dst, offset, src)
    }
    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        self.0.read(src, offset, dst)
    }
    fn copy(&self, src: &DeviceBuffer, so: usize, dst: &DeviceBuffer, d_o: usize, bytes: usize) -> Result<(), DeviceError> {
        self.0.copy(src, so, dst, d_o, bytes)
    }
    fn fill(&self, dst: &DeviceBuffer, offset: usize, bytes: usize, value: u8) -> Result<(), DeviceError> {
        self.0.fill(dst, offset, bytes, value)
    }
    fn synchronize(&self) -> Result<(), DeviceError> {
        self.0.synchronize()
    }
    fn launch(&self, queue: usize, kernel: &Kernel, inputs: &[Arg], output: Arg) -> Result<(), String> {
        self.0.launch(queue, kernel, inputs, output)
    }
}

#[test]
fn state_on_another_device_is_an_error() {
    let mut states = StateSet::new();
    let mut on_cpu = Executable::new(store_plan("cpu"), vec![cpu()], no_weights()).expect("bind on cpu");
    on_cpu.run_with_states(&store_inputs([1.0, 2.0, 3.0], 1), &mut states).expect("run on cpu");
    let other: Arc<dyn Device> = Arc::new(Renamed(CpuDevice::new(1).expect("cpu"), "other"));
    let mut on_other = Executable::new(store_plan("other"), vec![other], no_weights()).expect("bind on other");
    match on_other.run_with_states(&store_inputs([4.0, 5.0, 6.0], 0), &mut states) {
        Err(RuntimeError::State { name, detail }) => assert!(name == "kv" && detail.contains("cpu") && detail.contains("other"), "{detail}"),
        other => panic!("expected a state device error, got {:?}", other.map(|_| ())),
    }
    // Still on the CPU, unchanged.
    assert_eq!(states.device_of("kv"), Some("cpu"));
    assert_eq!(state_f32(&states, "kv"), [0.0, 0.0, 0.0, 1.0, 2.0, 3.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]);
    // A plan naming other devices than it is given is refused.
    assert!(matches!(Executable::new(store_plan("cpu"), vec![Arc::new(Renamed(CpuDevice::new(1).expect("cpu"), "x"))], no_weights()), Err(RuntimeError::Plan(_))));
}

#[test]
fn missing_input_is_an_error_and_leaves_states_unchanged() {
    let mut ex = Executable::new(store_plan("cpu"), vec![cpu()], no_weights()).expect("bind");
    // Before any state exists: the failed run creates none.
    let mut states = StateSet::new();
    let only_rows = HashMap::from([("rows".to_string(), f32s(&[1, 3], vec![1.0, 2.0, 3.0]))]);
    let check = |r: Result<HashMap<String, HostTensor>, RuntimeError>| match r {
        Err(e @ RuntimeError::Input { .. }) => {
            let RuntimeError::Input { name, .. } = &e else { unreachable!() };
            assert_eq!(name, "pos");
            assert!(e.to_string().contains("'pos'"), "{e}");
        }
        other => panic!("expected a missing-input error, got {:?}", other.map(|_| ())),
    };
    check(ex.run_with_states(&only_rows, &mut states));
    assert!(states.names().is_empty(), "{:?}", states.names());
    // With a state held: it keeps its contents.
    ex.run_with_states(&store_inputs([1.0, 2.0, 3.0], 0), &mut states).expect("run");
    let before = states.read("kv").expect("read").expect("held");
    let rows_only =
        HashMap::from([("rows".to_string(), f32s(&[1, 3], vec![9.0, 9.0, 9.0])), ("unrelated".to_string(), HostTensor::new(&[1], HostData::Bool(vec![1])).expect("t"))]);
    check(ex.run_with_states(&rows_only, &mut states));
    assert_eq!(states.read("kv").expect("read").expect("held"), before);
}

/// The CPU device's workers flush subnormals to zero (operands and results), so plans do not
/// slow down a hundredfold on the values a softmax or SiLU produce; the caller's thread keeps
/// gradual underflow.
#[test]
fn cpu_workers_flush_subnormals() {
    use std::hint::black_box;
    let tiny = || black_box(1e-30f32) * black_box(1e-10f32);
    let sub = f32::from_bits(1); // the smallest subnormal, as an operand
    let caller = (tiny(), black_box(sub) * black_box(2.0f32));
    assert!(caller.0 > 0.0 && caller.1 > 0.0, "the caller's thread must keep gradual underflow: {caller:?}");
    let dev = CpuDevice::new(2).unwrap();
    let mut seen = Vec::new();
    dev.scope(&mut || {
        let (a, b) = rayon::join(|| (tiny(), black_box(sub) * black_box(2.0f32)), || (tiny(), black_box(sub) * black_box(2.0f32)));
        seen = vec![a, b];
    });
    for (result, operand) in seen {
        assert_eq!(result, 0.0, "a subnormal result on a worker");
        assert_eq!(operand, 0.0, "a subnormal operand on a worker");
    }
    assert!(tiny() > 0.0, "the caller's thread is left as it was");
}

/// A multi-threaded CPU device keeps its other workers spinning while a plan runs in its
/// scope: the work split inside the scope still reaches every worker, and the spinners are
/// released when the scope's body returns and when it panics (else the next scope, or the
/// pool's drop, would wait for them forever).
#[test]
fn cpu_scope_keeps_workers_and_releases_them() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Mutex;
    let dev = tg_runtime::CpuDevice::new(2).expect("cpu device");
    let seen = Mutex::new(std::collections::BTreeSet::new());
    let runs = AtomicUsize::new(0);
    for _ in 0..3 {
        dev.scope(&mut || {
            // Many small splits, as a plan's steps make: a worker must take some of them.
            for _ in 0..200 {
                rayon::join(
                    || seen.lock().unwrap().insert(rayon::current_thread_index()),
                    || {
                        std::thread::sleep(std::time::Duration::from_micros(50));
                        seen.lock().unwrap().insert(rayon::current_thread_index())
                    },
                );
            }
            runs.fetch_add(1, Ordering::Relaxed);
        });
    }
    assert_eq!(runs.load(Ordering::Relaxed), 3);
    assert_eq!(seen.lock().unwrap().len(), 2, "both workers ran work: {:?}", seen.lock().unwrap());
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| dev.scope(&mut || panic!("a failing plan"))));
    assert!(r.is_err(), "the body's panic reaches the caller");
    // The spinners of the panicked scope were released: another scope runs and returns.
    let mut after = false;
    dev.scope(&mut || after = true);
    assert!(after);
}

//! Shared test harness: one context, queue and built program per test binary; buffers with
//! poisoned outputs and sentinel bytes; seeded random data; tolerance checks.
#![allow(dead_code)]

use std::sync::OnceLock;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device, CL_DEVICE_TYPE_ALL};
use opencl3::memory::{Buffer, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::platform::get_platforms;
use opencl3::types::CL_BLOCKING;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use tg_ir::DType;
use tg_opencl::{ClArg, ClKernels};
use tg_runtime::{Kernel, Layout};

/// The OpenCL objects every test uses.
pub struct Env {
    pub context: Context,
    pub device: Device,
    pub queue: CommandQueue,
    pub kernels: ClKernels,
}

fn first_device() -> Option<Device> {
    let platforms = get_platforms().ok()?;
    platforms.iter().find_map(|p| p.get_devices(CL_DEVICE_TYPE_ALL).ok()?.first().map(|&d| Device::new(d)))
}

fn skip() {
    if std::env::var_os("CI").is_some() {
        panic!("no OpenCL platform, and CI is set: the OpenCL tests must run");
    }
    println!("SKIPPED: no OpenCL platform");
}

/// The shared environment, or `None` (after printing SKIPPED) without an OpenCL platform.
pub fn env() -> Option<&'static Env> {
    static ENV: OnceLock<Option<Env>> = OnceLock::new();
    let e = ENV.get_or_init(|| {
        let device = first_device()?;
        let context = Context::from_device(&device).expect("context");
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0).expect("queue");
        let kernels = match ClKernels::build(&context, &device) {
            Ok(k) => k,
            Err(e) => panic!("building the kernel program failed:\n{e}"),
        };
        eprintln!("OpenCL device: {}", device.name().unwrap_or_default());
        Some(Env { context, device, queue, kernels })
    });
    if e.is_none() {
        skip();
    }
    e.as_ref()
}

/// Runs `cases` once under each launch configuration the shared kernels are tested with
/// (`tg_gpu::Tuning::test_variants`), holding a lock so no other test changes it meanwhile;
/// restores the device's starting configuration afterwards.
pub fn with_each_tuning(env: &Env, cases: impl Fn(&Env)) {
    static TUNING: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _g = TUNING.lock().unwrap_or_else(|e| e.into_inner());
    let start = env.kernels.tuning();
    for (what, tuning) in tg_gpu::Tuning::test_variants() {
        eprintln!("launch shapes: {what}");
        env.kernels.set_tuning(tuning).expect("tuning");
        cases(env);
    }
    env.kernels.set_tuning(start).expect("tuning");
}

/// Poison byte of outputs and guard bytes.
pub const POISON: u8 = 0xFF;
/// Guard bytes before and after each output.
pub const GUARD: usize = 64;

/// A device buffer holding `bytes` at byte `base`, the rest 0xA5.
pub fn upload(env: &Env, bytes: &[u8], base: usize) -> Buffer<u8> {
    let mut host = vec![0xA5u8; base + bytes.len() + GUARD];
    host[base..base + bytes.len()].copy_from_slice(bytes);
    // SAFETY: host pointer valid for host.len() bytes, only copied from.
    unsafe { Buffer::<u8>::create(&env.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, host.len(), host.as_mut_ptr().cast()) }.expect("buffer")
}

pub fn download(env: &Env, b: &Buffer<u8>, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: blocking read of len bytes (the buffer has len bytes).
    unsafe { env.queue.enqueue_read_buffer(b, CL_BLOCKING, 0, &mut v, &[]) }.expect("read");
    v
}

/// One input: bytes of its buffer, its layout in it.
pub struct In {
    pub bytes: Vec<u8>,
    pub layout: Layout,
}

pub fn f32_bytes(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn i32_bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}
pub fn to_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}
pub fn to_i32(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4).map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Runs `kernel` with inputs at byte 64 of their buffers and the output at byte GUARD of a
/// buffer poisoned with 0xFF; checks the guard bytes and returns the output bytes.
pub fn run(env: &Env, kernel: &Kernel, ins: &[In], out: &Layout) -> Result<Vec<u8>, String> {
    run_with_state(env, kernel, ins, out, None)
}

/// As [`run`]; `state` gives the output's initial bytes (else all poison).
pub fn run_with_state(env: &Env, kernel: &Kernel, ins: &[In], out: &Layout, state: Option<&[u8]>) -> Result<Vec<u8>, String> {
    // One launch at a time: the status buffer that records run-time errors is shared by
    // every launch of the program (a concurrently running test could take another's error).
    static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    let in_base = 64;
    let bufs: Vec<Buffer<u8>> = ins.iter().map(|i| upload(env, &i.bytes, in_base)).collect();
    let need = out.bytes_needed().expect("output layout");
    let init = state.map(|s| s.to_vec()).unwrap_or_else(|| vec![POISON; need]);
    assert_eq!(init.len(), need);
    let mut host = vec![POISON; GUARD + need + GUARD];
    host[GUARD..GUARD + need].copy_from_slice(&init);
    // SAFETY: as in `upload`.
    let ob = unsafe { Buffer::<u8>::create(&env.context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, host.len(), host.as_mut_ptr().cast()) }.expect("buffer");
    let args: Vec<ClArg> = ins.iter().zip(&bufs).map(|(i, b)| ClArg { mem: b, byte_offset: in_base, layout: &i.layout }).collect();
    let layouts: Vec<Layout> = ins.iter().map(|i| i.layout.clone()).collect();
    ClKernels::supports(kernel, &layouts, out)?;
    env.kernels.enqueue(&env.queue, kernel, &args, ClArg { mem: &ob, byte_offset: GUARD, layout: out })?;
    env.queue.finish().expect("finish");
    let err = env.kernels.take_error(&env.queue);
    let got = download(env, &ob, host.len());
    assert!(got[..GUARD].iter().all(|&b| b == POISON), "{}: bytes before the output were written", kernel.name());
    assert!(got[GUARD + need..].iter().all(|&b| b == POISON), "{}: bytes past the output were written", kernel.name());
    err.map(|_| got[GUARD..GUARD + need].to_vec()).map_err(|e| {
        // Return the output too, through the message, for tests that check it is untouched.
        if got[GUARD..GUARD + need] == init[..] {
            format!("{e} [output untouched]")
        } else {
            format!("{e} [output modified]")
        }
    })
}

pub fn rng(name: &str, seed: u64) -> ChaCha8Rng {
    eprintln!("{name}: seed {seed}");
    ChaCha8Rng::seed_from_u64(seed)
}

pub fn rand_f32(r: &mut ChaCha8Rng, n: usize, lo: f32, hi: f32) -> Vec<f32> {
    (0..n).map(|_| r.gen_range(lo..hi)).collect()
}

/// Layout with explicit strides and offset.
pub fn strided(shape: &[usize], strides: &[isize], offset: usize, dtype: DType) -> Layout {
    Layout { shape: shape.to_vec(), strides: strides.to_vec(), offset, dtype }
}

/// Element indices (into the buffer) of every element of `l`, in row-major order.
pub fn indices(l: &Layout) -> Vec<usize> {
    let n = l.numel();
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let mut r = i;
        let mut off = l.offset as isize;
        for d in (0..l.shape.len()).rev() {
            let ix = r % l.shape[d];
            r /= l.shape[d];
            off += ix as isize * l.strides[d];
        }
        out.push(off as usize);
    }
    out
}

/// Asserts `|got - want| <= tol(want, i)` elementwise (NaN must match NaN; infinities equal).
pub fn check(what: &str, got: &[f32], want: &[f64], tol: impl Fn(usize, f64) -> f64) {
    assert_eq!(got.len(), want.len(), "{what}: length");
    let mut worst = (0.0f64, 0usize);
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        if w.is_nan() {
            assert!(g.is_nan(), "{what}[{i}]: got {g}, want NaN");
            continue;
        }
        if w.is_infinite() {
            assert_eq!(g as f64, w, "{what}[{i}]");
            continue;
        }
        let e = (g as f64 - w).abs();
        let t = tol(i, w);
        assert!(e <= t, "{what}[{i}]: got {g}, want {w}, |err| {e:e} > tol {t:e}");
        if e / t.max(1e-300) > worst.0 {
            worst = (e / t.max(1e-300), i);
        }
    }
    eprintln!("{what}: {} values, worst err/tol {:.3} at {}", got.len(), worst.0, worst.1);
}

/// Relative-plus-absolute tolerance `rel · (1 + |want|)`.
pub fn rel(rel: f64) -> impl Fn(usize, f64) -> f64 {
    move |_, w| rel * (1.0 + w.abs())
}

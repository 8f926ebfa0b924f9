//! Profile files, staleness, the fallback's monotonicity, resumable sessions and real CPU
//! benchmarks (tiny shapes, small budgets: the suite runs in seconds).

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::HashMap;
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use tg_ir::{BinaryOp, CmpOp, DType, ReduceOp, UnaryOp};
use tg_profile::*;
use tg_quant::GgmlType;
use tg_runtime::{CpuDevice, Device, DeviceKind, Kernel, Layout};

fn f32s(s: &[usize]) -> Layout {
    Layout::contiguous(s, DType::F32)
}

fn lay(s: &[usize], d: DType) -> Layout {
    Layout::contiguous(s, d)
}

fn q(t: GgmlType) -> DType {
    DType::Quant(t)
}

fn key(kernel: Kernel, inputs: Vec<Layout>, output: Layout, threads: usize) -> ProfileKey {
    ProfileKey::new(kernel, inputs, output, "cpu", threads)
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("tg-profile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&p);
        std::fs::create_dir_all(&p).unwrap();
        TempDir(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn roof(threads: usize) -> Roofline {
    Roofline { device: "cpu".into(), threads, launch_ns: 300.0, bytes_per_ns: 15.0, flops_per_ns: 60.0 }
}

fn meas(ns: f64) -> Measurement {
    Measurement { median_ns: ns, min_ns: ns * 0.9, p90_ns: ns * 1.2, mad_ns: ns * 0.05, reps: 7, warmup: 2, seed: 1 }
}

/// One key of every kernel variant, tiny and valid for the CPU device.
fn every_kernel(threads: usize) -> Vec<ProfileKey> {
    let (s, h, d) = (3, 2, 8);
    let mask = f32s(&[4, 6]);
    vec![
        key(Kernel::Fill { bits: 1.5f64.to_bits() }, vec![], f32s(&[5, 7]), threads),
        key(Kernel::Iota { axis: 1 }, vec![], lay(&[5, 7], DType::I32), threads),
        key(Kernel::Unary(UnaryOp::Log), vec![f32s(&[5, 7])], f32s(&[5, 7]), threads),
        key(Kernel::Binary(BinaryOp::Mul), vec![f32s(&[5, 7]), Layout { shape: vec![5, 7], strides: vec![0, 1], offset: 0, dtype: DType::F32 }], f32s(&[5, 7]), threads),
        key(Kernel::Binary(BinaryOp::Div), vec![lay(&[9], DType::I32), lay(&[9], DType::I32)], lay(&[9], DType::I32), threads),
        key(Kernel::Compare(CmpOp::Lt), vec![f32s(&[9]), f32s(&[9])], lay(&[9], DType::Bool), threads),
        key(Kernel::Where, vec![lay(&[9], DType::Bool), f32s(&[9]), f32s(&[9])], f32s(&[9]), threads),
        key(Kernel::Cast, vec![lay(&[9], DType::I32)], f32s(&[9]), threads),
        key(Kernel::Reduce { op: ReduceOp::Max, axis: 1 }, vec![f32s(&[5, 7])], f32s(&[5, 1]), threads),
        key(Kernel::MatMul { transpose_rhs: true }, vec![f32s(&[2, 5, 7]), f32s(&[2, 3, 7])], f32s(&[2, 5, 3]), threads),
        key(Kernel::MatMul { transpose_rhs: false }, vec![f32s(&[5, 7]), f32s(&[7, 3])], f32s(&[5, 3]), threads),
        key(Kernel::MatMulQuant { quantize_activations: false }, vec![f32s(&[2, 256]), lay(&[5, 256], q(GgmlType::Q4_K))], f32s(&[2, 5]), threads),
        key(Kernel::MatMulQuant { quantize_activations: true }, vec![f32s(&[2, 64]), lay(&[5, 64], q(GgmlType::Q8_0))], f32s(&[2, 5]), threads),
        key(Kernel::Copy, vec![Layout { shape: vec![5, 7], strides: vec![1, 5], offset: 0, dtype: DType::F32 }], f32s(&[5, 7]), threads),
        key(Kernel::Concat { axis: 1 }, vec![f32s(&[3, 2]), f32s(&[3, 5])], f32s(&[3, 7]), threads),
        key(Kernel::Gather, vec![lay(&[11, 256], q(GgmlType::Q6_K)), lay(&[4], DType::I32)], f32s(&[4, 256]), threads),
        key(Kernel::Gather, vec![f32s(&[11, 6]), lay(&[4], DType::I32)], f32s(&[4, 6]), threads),
        key(Kernel::RmsNorm { eps_bits: 1e-6f64.to_bits() }, vec![f32s(&[3, 16]), f32s(&[16])], f32s(&[3, 16]), threads),
        key(Kernel::AddRmsNorm { eps_bits: 1e-6f64.to_bits() }, vec![f32s(&[3, 16]), f32s(&[3, 16]), f32s(&[16])], f32s(&[2, 3, 16]), threads),
        key(Kernel::RopeNeox, vec![f32s(&[s, h, d]), f32s(&[s, d / 2]), f32s(&[s, d / 2])], f32s(&[s, h, d]), threads),
        key(Kernel::RmsNormRopeNeox { eps_bits: 1e-6f64.to_bits() }, vec![f32s(&[s, h, d]), f32s(&[d]), f32s(&[s, d / 2]), f32s(&[s, d / 2])], f32s(&[s, h, d]), threads),
        key(Kernel::GeluTanh, vec![f32s(&[3, 16])], f32s(&[3, 16]), threads),
        key(Kernel::GatedGelu, vec![f32s(&[3, 16]), f32s(&[3, 16])], f32s(&[3, 16]), threads),
        key(Kernel::Softmax, vec![f32s(&[3, 16])], f32s(&[3, 16]), threads),
        key(Kernel::Attention { scale_bits: 0.3f64.to_bits() }, vec![f32s(&[2, 2, 4, 8]), f32s(&[2, 1, 6, 8]), f32s(&[2, 1, 6, 8]), mask.clone()], f32s(&[2, 2, 4, 8]), threads),
        key(Kernel::AttentionSeqMajor { scale_bits: 0.3f64.to_bits() }, vec![f32s(&[4, 2, 2, 8]), f32s(&[2, 1, 6, 8]), f32s(&[2, 1, 6, 8]), mask], f32s(&[4, 2, 2, 8]), threads),
    ]
}

#[test]
fn bench_every_kernel_on_the_cpu() {
    for threads in [1, 2] {
        let dev = CpuDevice::new(threads).unwrap();
        for k in every_kernel(threads) {
            let m = bench(&dev, &k, &BenchOptions::quick()).unwrap_or_else(|e| panic!("{}: {e}", k.short()));
            assert!(m.median_ns > 0.0 && m.min_ns <= m.median_ns && m.median_ns <= m.p90_ns, "{}: {m:?}", k.short());
            assert!(m.reps >= 3 && m.median_ns < 5e6, "{}: {m:?}", k.short());
        }
    }
}

#[test]
fn bench_times_scale_with_work() {
    let dev = CpuDevice::new(1).unwrap();
    let opts = BenchOptions { min_reps: 20, min_time: std::time::Duration::from_millis(5), max_time: std::time::Duration::from_millis(200), ..BenchOptions::quick() };
    let mm = |n: usize| key(Kernel::MatMulQuant { quantize_activations: true }, vec![f32s(&[1, 512]), lay(&[n, 512], q(GgmlType::Q4_K))], f32s(&[1, n]), 1);
    let small = bench(&dev, &mm(32), &opts).unwrap();
    let big = bench(&dev, &mm(1024), &opts).unwrap();
    // 32x the work: far more than noise can hide.
    assert!(big.median_ns > 4.0 * small.median_ns, "{small:?} vs {big:?}");
    // Seeds are per key and reproducible.
    assert_eq!(small.seed, bench(&dev, &mm(32), &opts).unwrap().seed);
    assert_ne!(small.seed, big.seed);
}

#[test]
fn cold_rotation_reads_every_copy() {
    // Operands rotate over copies spanning 1 MiB; a counting device sees distinct buffers.
    let dev = Counting { inner: CpuDevice::new(1).unwrap(), threads: 1, launches: Mutex::new(HashMap::new()), inputs_seen: Default::default() };
    let k = key(Kernel::RmsNorm { eps_bits: 0 }, vec![f32s(&[2, 64]), f32s(&[64])], f32s(&[2, 64]), 1);
    let opts = BenchOptions { cold_bytes: 1 << 20, min_reps: 2000, max_reps: 2000, max_time: std::time::Duration::from_secs(5), ..BenchOptions::quick() };
    let m = bench(&dev, &k, &opts).unwrap();
    assert_eq!(m.reps, 2000);
    assert!(m.median_ns > 0.0);
    assert_eq!(dev.launches.lock().unwrap().get(&k), Some(&2001));
    let ptrs = dev.inputs_seen.lock().unwrap();
    // (512 + 256) bytes per slot (64-aligned) -> 1366 slots; 2001 launches visit all of them.
    assert_eq!(ptrs.len(), (1usize << 20).div_ceil(512 + 256));
}

#[test]
fn bad_keys_are_errors() {
    let dev = CpuDevice::new(1).unwrap();
    let o = BenchOptions::quick();
    // k mismatch.
    let k = key(Kernel::MatMulQuant { quantize_activations: false }, vec![f32s(&[1, 128]), lay(&[4, 256], q(GgmlType::Q4_K))], f32s(&[1, 4]), 1);
    assert!(matches!(bench(&dev, &k, &o), Err(ProfileError::Unsupported { .. })));
    // A quantized row that is not whole blocks.
    let k = key(Kernel::MatMulQuant { quantize_activations: false }, vec![f32s(&[1, 100]), lay(&[4, 100], q(GgmlType::Q4_K))], f32s(&[1, 4]), 1);
    assert!(bench(&dev, &k, &o).is_err());
    // Wrong arity, another device's key.
    let k = key(Kernel::Softmax, vec![], f32s(&[4]), 1);
    assert!(matches!(bench(&dev, &k, &o), Err(ProfileError::Unsupported { .. })));
    let mut k = key(Kernel::Softmax, vec![f32s(&[4])], f32s(&[4]), 1);
    k.device = "cuda:0".into();
    let e = bench(&dev, &k, &o).unwrap_err();
    assert!(e.to_string().contains("cuda:0"), "{e}");
    // Gather from an empty table.
    let k = key(Kernel::Gather, vec![f32s(&[0, 6]), lay(&[4], DType::I32)], f32s(&[4, 6]), 1);
    assert!(bench(&dev, &k, &o).is_err());
}

#[test]
fn file_round_trip() {
    let dir = TempDir::new("roundtrip");
    let fp = Fingerprint::current();
    let mut p = Profile::new(fp.clone());
    p.set_roofline(roof(1));
    p.set_roofline(roof(2));
    for (i, k) in every_kernel(2).into_iter().enumerate() {
        p.insert(k, meas(1000.0 + 37.0 * i as f64));
    }
    p.set_link(LinkKey { src: "cpu".into(), dst: "gpu".into() }, Link { latency_ns: 5000.0, bytes_per_ns: 12.5, points: vec![(1024, meas(5100.0)), (1 << 20, meas(90000.0))] });
    let path = default_path(&fp);
    assert!(path.ends_with(format!("profiles/{}.json", fp.id())), "{}", path.display());
    let path = dir.0.join("nested").join(format!("{}.json", fp.id()));
    p.save(&path).unwrap();
    let back = Profile::load(&path, &fp).unwrap();
    assert_eq!(back.entries(), p.entries());
    assert_eq!(back.rooflines(), p.rooflines());
    assert_eq!(back.links(), p.links());
    assert_eq!(back.fingerprint(), &fp);
    assert_eq!(back.to_json(), p.to_json());
    for (k, m) in p.entries() {
        let pr = back.predict(k);
        assert_eq!((pr.ns, pr.source), (m.median_ns, Source::Measured));
    }
    assert_eq!(back.predict_copy("cpu", "gpu", 0), Some(5000.0));
    assert_eq!(back.predict_copy("gpu", "cpu", 10), None);
    assert_eq!(back.predict_copy("cpu", "cpu", 10), Some(0.0));
    // No temporary file is left behind.
    let names: Vec<_> = std::fs::read_dir(path.parent().unwrap()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn stale_and_malformed_profiles_are_rejected() {
    let dir = TempDir::new("stale");
    let fp = Fingerprint::current();
    let mut other = fp.clone();
    other.kernels_revision += 1;
    other.cpu_model = "Some Other CPU".into();
    let mut p = Profile::new(other.clone());
    p.insert(every_kernel(1).remove(0), meas(100.0));
    let path = dir.0.join(format!("{}.json", other.id()));
    p.save(&path).unwrap();
    match Profile::load(&path, &fp) {
        Err(ProfileError::Stale { diff, .. }) => {
            assert_eq!(diff.len(), 2, "{diff:?}");
            assert!(diff.iter().any(|d| d.starts_with("kernels_revision:")), "{diff:?}");
            assert!(diff.iter().any(|d| d.starts_with("cpu_model:") && d.contains("Some Other CPU")), "{diff:?}");
        }
        r => panic!("stale profile accepted: {:?}", r.map(|p| p.len())),
    }
    assert!(matches!(Profile::load_or_new(&path, &fp), Err(ProfileError::Stale { .. })));
    let stale = stale_profiles(&dir.0, &fp);
    assert_eq!(stale.len(), 1);
    assert!(stale[0].1.iter().any(|d| d.starts_with("kernels_revision:")));
    // Inspecting still works.
    assert_eq!(Profile::load_any(&path).unwrap().fingerprint(), &other);
    // Missing file: a fresh profile; garbage and other format versions: format errors.
    assert!(Profile::load_or_new(&dir.0.join("absent.json"), &fp).unwrap().is_empty());
    let junk = dir.0.join("junk.json");
    std::fs::write(&junk, "{ not json").unwrap();
    assert!(matches!(Profile::load(&junk, &fp), Err(ProfileError::Format { .. })));
    let text = Profile::new(fp.clone()).to_json().replacen(&format!("\"format\": {FORMAT_VERSION}"), "\"format\": 999", 1);
    std::fs::write(&junk, text).unwrap();
    let e = Profile::load(&junk, &fp).unwrap_err();
    assert!(matches!(e, ProfileError::Format { .. }) && e.to_string().contains("999"), "{e}");
}

/// Families with a key constructor over size parameters, and which parameters must be
/// block multiples.
type Mk = Box<dyn Fn(&[usize]) -> ProfileKey>;

fn families() -> Vec<(&'static str, Vec<usize>, Vec<usize>, Mk)> {
    vec![
        // (name, base params, step per param, constructor)
        (
            "matmul_quant_q8act:q4_k",
            vec![1, 64, 256],
            vec![1, 16, 256],
            Box::new(|p: &[usize]| {
                key(Kernel::MatMulQuant { quantize_activations: true }, vec![f32s(&[p[0], p[2]]), lay(&[p[1], p[2]], q(GgmlType::Q4_K))], f32s(&[p[0], p[1]]), 2)
            }),
        ),
        (
            "matmul_quant:q6_k",
            vec![4, 64, 256],
            vec![3, 16, 256],
            Box::new(|p: &[usize]| {
                key(Kernel::MatMulQuant { quantize_activations: false }, vec![f32s(&[p[0], p[2]]), lay(&[p[1], p[2]], q(GgmlType::Q6_K))], f32s(&[p[0], p[1]]), 2)
            }),
        ),
        (
            "matmul_nt_f32",
            vec![2, 8, 16, 32],
            vec![1, 8, 8, 8],
            Box::new(|p: &[usize]| key(Kernel::MatMul { transpose_rhs: true }, vec![f32s(&[p[0], p[1], p[3]]), f32s(&[p[0], p[2], p[3]])], f32s(&[p[0], p[1], p[2]]), 2)),
        ),
        ("rms_norm", vec![4, 640], vec![3, 64], Box::new(|p: &[usize]| key(Kernel::RmsNorm { eps_bits: 0 }, vec![f32s(&[p[0], p[1]]), f32s(&[p[1]])], f32s(&[p[0], p[1]]), 2))),
        ("add", vec![4, 640], vec![3, 64], Box::new(|p: &[usize]| key(Kernel::Binary(BinaryOp::Add), vec![f32s(&[p[0], p[1]]), f32s(&[p[0], p[1]])], f32s(&[p[0], p[1]]), 2))),
        (
            "gather:q6_k",
            vec![1000, 256, 4],
            vec![500, 256, 3],
            Box::new(|p: &[usize]| key(Kernel::Gather, vec![lay(&[p[0], p[1]], q(GgmlType::Q6_K)), lay(&[p[2]], DType::I32)], f32s(&[p[2], p[1]]), 2)),
        ),
        (
            "attention",
            vec![1, 4, 1, 16, 64],
            vec![1, 2, 5, 64, 32],
            Box::new(|p: &[usize]| {
                let (nkv, g, sq, sk, d) = (p[0], p[1], p[2], p[3], p[4]);
                key(Kernel::Attention { scale_bits: 0 }, vec![f32s(&[nkv, g, sq, d]), f32s(&[nkv, 1, sk, d]), f32s(&[nkv, 1, sk, d]), f32s(&[sq, sk])], f32s(&[nkv, g, sq, d]), 2)
            }),
        ),
        (
            "attention_seq_major",
            vec![1, 4, 1, 16, 64],
            vec![1, 2, 5, 64, 32],
            Box::new(|p: &[usize]| {
                let (nkv, g, sq, sk, d) = (p[0], p[1], p[2], p[3], p[4]);
                key(
                    Kernel::AttentionSeqMajor { scale_bits: 0 },
                    vec![f32s(&[sq, nkv, g, d]), f32s(&[nkv, 1, sk, d]), f32s(&[nkv, 1, sk, d]), f32s(&[sq, sk])],
                    f32s(&[sq, nkv, g, d]),
                    2,
                )
            }),
        ),
        ("softmax", vec![4, 100], vec![5, 50], Box::new(|p: &[usize]| key(Kernel::Softmax, vec![f32s(&[p[0], p[1]])], f32s(&[p[0], p[1]]), 2))),
        (
            "rope_neox",
            vec![3, 4, 64],
            vec![2, 2, 64],
            Box::new(|p: &[usize]| key(Kernel::RopeNeox, vec![f32s(&[p[0], p[1], p[2]]), f32s(&[p[0], p[2] / 2]), f32s(&[p[0], p[2] / 2])], f32s(&[p[0], p[1], p[2]]), 2)),
        ),
        (
            "copy:strided",
            vec![16, 24],
            vec![8, 8],
            Box::new(|p: &[usize]| {
                key(Kernel::Copy, vec![Layout { shape: vec![p[0], p[1]], strides: vec![1, p[0] as isize], offset: 0, dtype: DType::F32 }], f32s(&[p[0], p[1]]), 2)
            }),
        ),
    ]
}

#[test]
fn fallback_is_monotone_in_every_dimension() {
    let seed: u64 = std::env::var("TG_TEST_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(20260);
    println!("seed {seed}");
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    for (name, base, step, mk) in families() {
        assert_eq!(mk(&base).family(), name);
        // Three profiles: no points (plain roofline), one point (scaled), several random points
        // (fitted; random times, so the fit may want negative coefficients).
        for n_points in [0usize, 1, 6] {
            let mut p = Profile::new(Fingerprint::current());
            p.set_roofline(roof(2));
            for _ in 0..n_points {
                let params: Vec<usize> = base.iter().zip(&step).map(|(&b, &s)| b + s * rng.gen_range(0..6)).collect();
                p.insert(mk(&params), meas(rng.gen_range(500.0..500_000.0)));
            }
            for dim in 0..base.len() {
                let mut prev = p.predict(&mk(&base));
                if n_points == 0 {
                    assert_eq!(prev.source, Source::Roofline, "{name}");
                }
                for i in 1..12 {
                    let mut params = base.clone();
                    params[dim] += step[dim] * i;
                    let k = mk(&params);
                    let cur = p.predict(&k);
                    if cur.source.is_fallback() && prev.source.is_fallback() {
                        assert!(cur.ns >= prev.ns, "{name} ({n_points} points, seed {seed}): dim {dim} step {i}: {} < {}", cur.ns, prev.ns);
                    }
                    assert!(cur.ns.is_finite() && cur.ns > 0.0);
                    prev = cur;
                }
            }
        }
    }
}

#[test]
fn plan_estimate_splits_measured_and_fallback_time() {
    let mut p = Profile::new(Fingerprint::current());
    p.set_roofline(roof(1));
    let ks = every_kernel(1);
    p.insert(ks[0].clone(), meas(1000.0));
    let e = p.estimate([&ks[0], &ks[1], &ks[0]]);
    assert_eq!(e.steps.len(), 3);
    assert_eq!(e.measured_ns, 2000.0);
    assert_eq!(e.fallback_steps, 1);
    assert!((e.total_ns - e.measured_ns - e.fallback_ns).abs() < 1e-9);
    assert!(e.fallback_share() > 0.0 && e.fallback_share() < 1.0);
    // No roofline for 4 threads: a guess, flagged as such.
    assert_eq!(p.predict(&every_kernel(4)[3]).source, Source::Guess);
}

/// The methods of a wrapper device that pass through to its `inner` CPU device.
macro_rules! delegate_to_inner {
    () => {
        fn name(&self) -> &str {
            self.inner.name()
        }
        fn kind(&self) -> DeviceKind {
            self.inner.kind()
        }
        fn info(&self) -> tg_runtime::DeviceInfo {
            self.inner.info()
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
        fn bind_weight(
            &self,
            store: &std::sync::Arc<dyn tg_ir::WeightStore + Send + Sync>,
            name: &str,
        ) -> Result<std::sync::Arc<tg_runtime::DeviceBuffer>, tg_runtime::DeviceError> {
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
    };
}

/// A CPU device that counts launches per key.
struct Counting {
    inner: CpuDevice,
    threads: usize,
    launches: Mutex<HashMap<ProfileKey, usize>>,
    /// Addresses of the first operand of every launch.
    inputs_seen: Mutex<std::collections::HashSet<usize>>,
}

impl Device for Counting {
    delegate_to_inner!();
    fn launch(&self, q: usize, k: &Kernel, ins: &[tg_runtime::Arg], out: tg_runtime::Arg) -> Result<(), String> {
        let pk = ProfileKey::new(k.clone(), ins.iter().map(|i| i.layout.clone()).collect(), out.layout.clone(), "cpu", self.threads);
        *self.launches.lock().unwrap().entry(pk).or_default() += 1;
        if let Some(first) = ins.first() {
            self.inputs_seen.lock().unwrap().insert(first.buffer as *const _ as usize + first.offset);
        }
        self.inner.launch(q, k, ins, out)
    }
}

#[test]
fn interrupted_session_resumes_without_remeasuring() {
    let dir = TempDir::new("resume");
    let fp = Fingerprint::current();
    let path = dir.0.join("p.json");
    let keys: Vec<ProfileKey> = every_kernel(1).into_iter().take(8).collect();
    // `stop_after`: the progress callback stops the session at that call, by `Break` or,
    // with `crash`, by panicking (as a killed process would, nothing is saved at the end).
    let session = |stop_after: Option<usize>, crash: bool| {
        let dev = Arc::new(Counting { inner: CpuDevice::new(1).unwrap(), threads: 1, launches: Mutex::new(HashMap::new()), inputs_seen: Default::default() });
        let mut profile = Profile::load_or_new(&path, &fp).unwrap();
        // A known roofline, so the session measures only the keys.
        if profile.roofline("cpu", 1).is_none() {
            profile.set_roofline(roof(1));
        }
        let mut prof = Profiler::new(profile, Some(path.clone()));
        prof.bench_options = BenchOptions::quick();
        let d2 = dev.clone();
        let mut source = move |name: &str, threads: usize| -> Result<Arc<dyn Device>, String> {
            assert_eq!((name, threads), ("cpu", 1));
            Ok(d2.clone() as Arc<dyn Device>)
        };
        let mut calls = Vec::new();
        let report = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            prof.run(&keys, &mut source, &mut |done, total, k| {
                calls.push((done, total, k.clone()));
                match (Some(calls.len()) == stop_after, crash) {
                    (true, true) => panic!("simulated kill"),
                    (true, false) => ControlFlow::Break(()),
                    _ => ControlFlow::Continue(()),
                }
            })
            .unwrap()
        }))
        .ok();
        drop(prof); // the session ends; only the file remains
        let launched = dev.launches.lock().unwrap().clone();
        (report, calls, launched)
    };
    let (r0, _, l0) = session(Some(2), true);
    assert!(r0.is_none());
    assert_eq!(Profile::load(&path, &fp).unwrap().len(), 2, "measurements before the kill were not saved");
    let (r1, calls1, l1) = session(Some(1), false);
    let r1 = r1.unwrap();
    assert_eq!((r1.measured, r1.skipped, r1.stopped), (1, 2, true));
    assert_eq!(calls1.iter().map(|c| (c.0, c.1)).collect::<Vec<_>>(), vec![(3, 8)]);
    assert_eq!(Profile::load(&path, &fp).unwrap().len(), 3);
    let (r2, calls2, l2) = session(None, false);
    let r2 = r2.unwrap();
    assert_eq!((r2.measured, r2.skipped, r2.stopped, r2.failed.len()), (5, 3, false, 0));
    assert_eq!(calls2.first().map(|c| c.0), Some(4));
    let (r3, _, l3) = session(None, false);
    assert_eq!((r3.unwrap().measured, l3.len()), (0, 0), "third session launched {l3:?}");
    // Every key launched in exactly one session.
    for k in &keys {
        let n = [&l0, &l1, &l2].iter().filter(|l| l.contains_key(k)).count();
        assert_eq!(n, 1, "{} launched in {n} sessions", k.short());
    }
    let p = Profile::load(&path, &fp).unwrap();
    assert!(keys.iter().all(|k| p.contains(k)));
}

#[test]
fn profiler_measures_missing_rooflines_and_reports_failures() {
    let mut prof = Profiler::new(Profile::new(Fingerprint::current()), None);
    prof.bench_options = BenchOptions::quick();
    prof.roofline_options = RooflineOptions::quick();
    let good = key(Kernel::Softmax, vec![f32s(&[2, 8])], f32s(&[2, 8]), 1);
    let bad = key(Kernel::Softmax, vec![f32s(&[2, 8])], f32s(&[2, 9]), 1);
    let r = prof.run(&[good.clone(), bad.clone(), good.clone()], &mut CpuDevices::default(), &mut |_, _, _| ControlFlow::Continue(())).unwrap();
    assert_eq!((r.rooflines, r.measured, r.failed.len()), (1, 1, 1));
    assert_eq!(r.failed[0].0, bad);
    let roof = prof.profile().roofline("cpu", 1).unwrap();
    assert!(roof.launch_ns > 0.0 && roof.bytes_per_ns > 0.0 && roof.flops_per_ns > 0.0, "{roof:?}");
    // Unknown devices are errors, not panics.
    let mut k = good;
    k.device = "npu".into();
    assert!(matches!(prof.run(&[k], &mut CpuDevices::default(), &mut |_, _, _| ControlFlow::Continue(())), Err(ProfileError::Device { .. })));
}

#[test]
fn link_fit_from_a_host_copy() {
    let src = vec![7u8; 1 << 20];
    let mut dst = vec![0u8; 1 << 20];
    let mut copy = |n: usize| -> Result<(), String> {
        dst[..n].copy_from_slice(&src[..n]);
        std::hint::black_box(&dst);
        Ok(())
    };
    let l = measure_link(&mut copy, &[1 << 10, 1 << 14, 1 << 18, 1 << 20], &BenchOptions::quick()).unwrap();
    assert!(l.bytes_per_ns > 0.1 && l.latency_ns >= 0.0 && l.points.len() == 4, "{l:?}");
    assert!(l.predict(1 << 20) > l.predict(1 << 10));
    assert!(measure_link(&mut copy, &[64, 64], &BenchOptions::quick()).is_err());
}

/// Sleeps in chosen launches of chosen keys (a simulated contended window) and logs the order
/// of launches.
struct Contended {
    inner: CpuDevice,
    /// Per key: the launches (counted from 0) in this range sleep 300 µs.
    slow: HashMap<ProfileKey, std::ops::Range<usize>>,
    seen: Mutex<Vec<ProfileKey>>,
}

impl Device for Contended {
    delegate_to_inner!();
    fn launch(&self, q: usize, k: &Kernel, ins: &[tg_runtime::Arg], out: tg_runtime::Arg) -> Result<(), String> {
        let pk = ProfileKey::new(k.clone(), ins.iter().map(|i| i.layout.clone()).collect(), out.layout.clone(), "cpu", 1);
        let n = {
            let mut seen = self.seen.lock().unwrap();
            seen.push(pk.clone());
            seen.iter().filter(|s| **s == pk).count() - 1
        };
        if self.slow.get(&pk).is_some_and(|r| r.contains(&n)) {
            std::thread::sleep(std::time::Duration::from_micros(300));
        }
        self.inner.launch(q, k, ins, out)
    }
}

#[test]
fn passes_interleave_keys_and_keep_the_least_contended() {
    let a = key(Kernel::Softmax, vec![f32s(&[2, 8])], f32s(&[2, 8]), 1);
    let b = key(Kernel::GeluTanh, vec![f32s(&[3, 16])], f32s(&[3, 16]), 1);
    // 1 warm-up + 10 timed launches per pass; `a` is contended in pass 1, `b` in pass 2.
    let opts = BenchOptions { warmup: 1, min_reps: 10, max_reps: 10, max_time: std::time::Duration::from_secs(5), ..BenchOptions::quick() };
    let session = |passes: u32| {
        let dev = Arc::new(Contended { inner: CpuDevice::new(1).unwrap(), slow: HashMap::from([(a.clone(), 0..11), (b.clone(), 11..22)]), seen: Mutex::new(Vec::new()) });
        let mut profile = Profile::new(Fingerprint::current());
        profile.set_roofline(roof(1));
        let mut prof = Profiler::new(profile, None);
        prof.bench_options = BenchOptions { passes, ..opts.clone() };
        let d2 = dev.clone();
        let mut source = move |_: &str, _: usize| -> Result<Arc<dyn Device>, String> { Ok(d2.clone() as Arc<dyn Device>) };
        let mut calls = Vec::new();
        let r = prof.run(&[a.clone(), b.clone()], &mut source, &mut |done, total, _| {
            calls.push((done, total));
            ControlFlow::Continue(())
        });
        let r = r.unwrap();
        let seen = dev.seen.lock().unwrap().clone();
        (r, calls, prof.into_profile(), seen)
    };
    // One pass: `a` is measured in its contended window.
    let (r, calls, p, _) = session(1);
    assert_eq!((r.measured, calls), (2, vec![(1, 2), (2, 2)]));
    assert!(p.get(&a).unwrap().median_ns >= 300e3, "{:?}", p.get(&a));
    // Three passes: each key is timed three times, interleaved (a b a b a b), and keeps its
    // uncontended pass.
    let (r, calls, p, seen) = session(3);
    assert_eq!((r.measured, r.failed.len()), (2, 0));
    assert_eq!(calls, (1..=6).map(|d| (d, 6)).collect::<Vec<_>>());
    let order: Vec<&ProfileKey> = seen.chunks(11).map(|c| &c[0]).collect();
    assert_eq!(order, vec![&a, &b, &a, &b, &a, &b]);
    assert!(seen.chunks(11).all(|c| c.iter().all(|k| *k == c[0])), "a pass was not one key's launches back to back");
    for k in [&a, &b] {
        let m = p.get(k).unwrap();
        assert!(m.median_ns < 300e3 && m.reps == 10, "{}: {m:?}", k.short());
    }
}

//! The first-use measurement of a device without kernel times: bounded by its time budget,
//! cached per device in a file that is reused, remeasured when corrupt or stale, and taken at
//! most once per process. The "device" is a CPU device under another name that counts its
//! launches (so "measures nothing" is checkable), optionally slowed down.

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tg_profile::*;
use tg_runtime::{Arg, CpuDevice, Device, DeviceKind, Kernel};

/// A CPU device named `name` that counts launches and transfers, each launch slowed by `delay`.
struct Fake {
    inner: CpuDevice,
    name: String,
    delay: Duration,
    launches: AtomicUsize,
    transfers: AtomicUsize,
}

impl Fake {
    fn new(name: &str, delay: Duration) -> Arc<Fake> {
        Arc::new(Fake { inner: CpuDevice::new(1).unwrap(), name: name.into(), delay, launches: AtomicUsize::new(0), transfers: AtomicUsize::new(0) })
    }
    fn work(&self) -> usize {
        self.launches.load(Ordering::SeqCst) + self.transfers.load(Ordering::SeqCst)
    }
}

impl Device for Fake {
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
        format!("fake {} / {}", self.name, self.inner.fingerprint())
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
        self.transfers.fetch_add(1, Ordering::SeqCst);
        self.inner.write(dst, offset, src)
    }
    fn read(&self, src: &tg_runtime::DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), tg_runtime::DeviceError> {
        self.transfers.fetch_add(1, Ordering::SeqCst);
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
        self.launches.fetch_add(1, Ordering::SeqCst);
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        self.inner.launch(q, k, ins, out)
    }
}

/// A fresh directory under the system temp dir, removed when dropped.
struct TempDir(PathBuf);

impl TempDir {
    fn new(name: &str) -> TempDir {
        let p = std::env::temp_dir().join(format!("tg-first-use-{name}-{}", std::process::id()));
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

/// Generous: the budget is 1.2 s for the roofline and ~0.35 s for the links, on a machine
/// where another build may hold both cores.
const BOUND: Duration = Duration::from_secs(8);

#[test]
fn measured_once_within_the_budget_then_read_from_the_cache() {
    let dir = TempDir::new("cache");
    let home = CpuDevice::new(1).unwrap();
    let dev = Fake::new("fake:0", Duration::ZERO);
    let opts = FirstUseOptions::in_dir(dir.0.clone());

    let t0 = Instant::now();
    let (f, origin, path) = load_or_measure(&home, &*dev, &opts).unwrap();
    let took = t0.elapsed();
    assert_eq!(origin, Origin::Measured { replaced: None });
    assert!(took < BOUND, "first-use measurement took {took:?}");
    assert!(f.seconds > 0.0 && f.seconds <= took.as_secs_f64() + 1e-3, "{} s recorded, {took:?} taken", f.seconds);
    let r = &f.roofline;
    assert_eq!((r.device.as_str(), r.threads), ("fake:0", 1));
    assert!(r.launch_ns > 0.0 && r.bytes_per_ns > 0.01 && r.flops_per_ns > 0.01, "{r:?}");
    assert!(f.to_device.bytes_per_ns > 0.0 && f.from_device.bytes_per_ns > 0.0 && f.to_device.points.len() == 4, "{f:?}");
    assert_eq!((f.home.as_str(), f.device.as_str()), ("cpu", "fake:0"));
    assert!(f.summary().contains("GB/s") && f.summary().contains("cpu -> fake:0"), "{}", f.summary());

    // The file is in the directory asked for, named by the device, and holds the record.
    assert_eq!(path, first_use_path(&dir.0, &home, &*dev));
    assert!(path.starts_with(&dir.0) && path.file_name().unwrap().to_string_lossy().starts_with("fake_0-"), "{}", path.display());
    let on_disk: FirstUseRecord = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    assert_eq!(on_disk, f);
    // No temporary file is left beside it.
    assert_eq!(std::fs::read_dir(&dir.0).unwrap().count(), 1);

    // A second call reads the file and measures nothing.
    let before = dev.work();
    let (g, origin, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    assert_eq!(origin, Origin::Cached);
    assert_eq!(g, f);
    assert_eq!(dev.work(), before, "a cached record launched or transferred on the device");

    // Another device (another fingerprint) has its own file.
    let other = Fake::new("fake:1", Duration::ZERO);
    assert_ne!(first_use_path(&dir.0, &home, &*other), path);
}

#[test]
fn a_corrupt_or_stale_cache_file_is_measured_over() {
    let dir = TempDir::new("corrupt");
    let home = CpuDevice::new(1).unwrap();
    let dev = Fake::new("fake:2", Duration::ZERO);
    let opts = FirstUseOptions::in_dir(dir.0.clone());
    let path = first_use_path(&dir.0, &home, &*dev);
    std::fs::create_dir_all(&dir.0).unwrap();

    std::fs::write(&path, "{\"format\": 1, \"device\": tru").unwrap();
    let (f, origin, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    assert!(matches!(&origin, Origin::Measured { replaced: Some(w) } if w.starts_with("unreadable")), "{origin:?}");
    // Rewritten whole: the next call reads it.
    assert_eq!(load_or_measure(&home, &*dev, &opts).unwrap().1, Origin::Cached);

    // A record of another device build under this file name is stale.
    let mut stale = f.clone();
    stale.fingerprint = "another driver".into();
    std::fs::write(&path, serde_json::to_string(&stale).unwrap()).unwrap();
    let before = dev.work();
    let (g, origin, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    assert!(matches!(&origin, Origin::Measured { replaced: Some(w) } if w.starts_with("stale")), "{origin:?}");
    assert!(dev.work() > before, "a stale record was used without measuring");
    assert_eq!(g.fingerprint, dev.fingerprint());

    // Implausible figures and another format version are stale too.
    let mut bad = g.clone();
    bad.roofline.bytes_per_ns = f64::NAN;
    assert!(bad.stale_for(&home, &*dev).is_some());
    let mut bad = g.clone();
    bad.format += 1;
    assert!(bad.stale_for(&home, &*dev).is_some());
    assert_eq!(g.stale_for(&home, &*dev), None);
    // Another home device: the links are not its.
    let home2 = Fake::new("cpu2", Duration::ZERO);
    assert!(g.stale_for(&*home2, &*dev).is_some());
}

#[test]
fn first_use_measures_at_most_once_per_process() {
    let dir = TempDir::new("memo");
    let home = CpuDevice::new(1).unwrap();
    let dev = Fake::new("fake:3", Duration::ZERO);
    let opts = FirstUseOptions::in_dir(dir.0.clone());
    let a = first_use(&home, &*dev, &opts).unwrap();
    let after_first = dev.work();
    assert!(after_first > 0);
    // Even with the file gone, the process keeps its answer: nothing is measured again.
    std::fs::remove_dir_all(&dir.0).unwrap();
    let b = first_use(&home, &*dev, &opts).unwrap();
    assert!(Arc::ptr_eq(&a, &b));
    assert_eq!(dev.work(), after_first);
}

/// A device whose every launch takes 30 ms: the sizes stop at the first ones, every
/// benchmark is cut to the time left, and the whole measurement stays near its budget.
#[test]
fn a_slow_device_is_bounded_by_the_budget() {
    let dir = TempDir::new("slow");
    let home = CpuDevice::new(1).unwrap();
    let dev = Fake::new("slow:0", Duration::from_millis(30));
    let opts = FirstUseOptions::in_dir(dir.0.clone());
    let t0 = Instant::now();
    let (f, _, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    let took = t0.elapsed();
    assert!(took < BOUND, "{took:?}");
    assert!(f.roofline.launch_ns >= 30e6, "a 30 ms launch measured as {} ns", f.roofline.launch_ns);
    // At most a few launches per benchmark: warm-up, then until the budget's share is spent.
    assert!(dev.launches.load(Ordering::SeqCst) <= 40, "{} launches", dev.launches.load(Ordering::SeqCst));
}

/// Sizes that would grow for seconds (launches never "long enough") stop at the budget.
#[test]
fn the_budget_bounds_the_sizes() {
    let dev = Fake::new("grow:0", Duration::ZERO);
    let opts = RooflineOptions {
        stream_elems: 1 << 10,
        max_stream_elems: 1 << 24,
        matmul_dim: 16,
        max_matmul_dim: 4096,
        enough: Duration::from_secs(3600),
        budget: Some(Duration::from_millis(300)),
        ..RooflineOptions::first_use()
    };
    let t0 = Instant::now();
    let r = measure_roofline(&*dev, 1, &opts).unwrap();
    let took = t0.elapsed();
    // A 4096³ matmul alone takes seconds on one core: the budget stopped the growth.
    assert!(took < Duration::from_secs(4), "{took:?}");
    assert!(r.bytes_per_ns > 0.0 && r.flops_per_ns > 0.0);
}

/// The real thing on OpenCL (PoCL here): measured within the budget, figures plausible,
/// the second call read from the file. Under CI a missing OpenCL device is a failure;
/// elsewhere the test says SKIPPED.
#[test]
fn an_opencl_device_is_measured_within_the_budget() {
    let dev = match tg_devices::open("opencl", 1) {
        Ok(d) => d,
        Err(e) => {
            assert!(!std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false"), "no OpenCL device under CI: {e}");
            eprintln!("SKIPPED: no OpenCL device ({e})");
            return;
        }
    };
    let dir = TempDir::new("opencl");
    let home = CpuDevice::new(1).unwrap();
    let opts = FirstUseOptions::in_dir(dir.0.clone());
    let t0 = Instant::now();
    let (f, origin, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    let took = t0.elapsed();
    eprintln!("{}: {} in {:.2} s", dev.name(), f.summary(), took.as_secs_f64());
    assert_eq!(origin, Origin::Measured { replaced: None });
    assert!(took < BOUND, "{took:?}");
    let r = &f.roofline;
    // A launch costs something, and no device streams a terabyte a second through PoCL.
    assert!(r.launch_ns > 100.0 && r.bytes_per_ns > 0.01 && r.bytes_per_ns < 1e4 && r.flops_per_ns > 0.01, "{r:?}");
    let t1 = Instant::now();
    let (g, origin, _) = load_or_measure(&home, &*dev, &opts).unwrap();
    assert_eq!((origin, &g), (Origin::Cached, &f));
    assert!(t1.elapsed() < took, "reading the cache took as long as measuring");
}

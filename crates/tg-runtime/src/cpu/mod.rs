//! The CPU device: host memory (64-byte aligned allocations; weights read in place from the
//! store's mapping), one queue (launches run synchronously), the SIMD kernels of
//! `tg-kernels` on a rayon pool.

mod kernels;

use crate::device::new_device_id;
use crate::{Arg, Device, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Kernel, KernelEntry, KernelRegistry, FAMILIES};
use std::sync::{Arc, OnceLock};
use tg_ir::WeightStore;

/// 64-byte aligned storage.
#[repr(C, align(64))]
#[derive(Clone, Copy)]
struct Line([u8; 64]);

/// What a CPU buffer is: host memory of ours, or a weight read in place.
enum CpuMem {
    /// Cache lines of ours; `ptr` and `len` are taken once at allocation (the vector's heap
    /// block never moves), so threads reading and writing disjoint bytes of one arena (a
    /// transfer beside the CPU's kernels) never form references to the contents.
    Owned { ptr: *mut u8, len: usize, _lines: Vec<Line> },
    Weight {
        ptr: *const u8,
        len: usize,
        /// Keeps the mapping `ptr` points into alive.
        _store: Arc<dyn WeightStore + Send + Sync>,
    },
}

// SAFETY: owned memory is only touched through `CpuDevice`'s methods, whose callers (the
// executor, the profiler) never let a write overlap another access to the same bytes (the
// validated plan guarantees it for steps); weight memory is never written.
unsafe impl Send for CpuMem {}
unsafe impl Sync for CpuMem {}

impl CpuMem {
    fn ptr(&self) -> (*mut u8, usize, bool) {
        match self {
            CpuMem::Owned { ptr, len, .. } => (*ptr, *len, true),
            CpuMem::Weight { ptr, len, .. } => (*ptr as *mut u8, *len, false),
        }
    }
}

/// Sets the calling thread's floating-point control to treat subnormal operands as zero and
/// flush subnormal results to zero (x86-64: MXCSR's DAZ and FTZ bits; AArch64: FPCR.FZ).
///
/// Every plan step runs on the CPU device's workers ([`Device::scope`]), and each worker
/// sets this once when it starts, so a plan's numerics do not depend on which thread runs a
/// step. The reason is speed: on Intel cores an operation on a subnormal takes a microcode
/// assist of a hundred cycles or more, and networks produce them in bulk (the exponentials of
/// a softmax far below its maximum, a SiLU of a large negative input). The terrain UNet at
/// σ = 80 ran 2.8x slower on an Ice Lake-class Xeon for that alone. Values below 1.2e-38 in
/// magnitude become zero: far under every tolerance the kernels are held to. The caller's
/// own threads (Python, the CLI's main thread) keep their settings.
fn flush_subnormals() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: reads and writes this thread's MXCSR only; bits 6 (DAZ) and 15 (FTZ) exist on
    // every x86-64 CPU (SSE2 is baseline), and the exception masks are left as they were.
    unsafe {
        let mut csr: u32 = 0;
        std::arch::asm!("stmxcsr [{}]", in(reg) &mut csr, options(nostack));
        csr |= (1 << 6) | (1 << 15);
        std::arch::asm!("ldmxcsr [{}]", in(reg) &csr, options(nostack, readonly));
    }
    #[cfg(target_arch = "aarch64")]
    // SAFETY: sets FPCR.FZ (bit 24) of this thread only.
    unsafe {
        let mut fpcr: u64;
        std::arch::asm!("mrs {}, fpcr", out(reg) fpcr, options(nomem, nostack));
        fpcr |= 1 << 24;
        std::arch::asm!("msr fpcr, {}", in(reg) fpcr, options(nomem, nostack));
    }
}

/// Keeps a worker of the pool awake while a plan runs on the pool's thread `home`: it runs
/// the pool's pending jobs as they appear and spins (with `pause`) in between, until `done`.
///
/// A rayon worker with nothing to do goes to sleep after a few rounds of yielding, and waking
/// it takes tens of microseconds (about 70 µs measured on a 2-core KVM guest: a join of two
/// 50 µs halves took 120 µs after a 100 µs pause, 62 µs without one). A plan of ~900 short
/// steps, each split over the threads, would pay that on most steps. The spinning worker
/// takes a kernel's tasks at once instead, as onnxruntime's spinning thread pool does.
/// `TG_CPU_SPIN=off` turns this off (for comparisons).
fn keep_warm(done: &std::sync::atomic::AtomicBool, home: Option<usize>) {
    // The thread running the plan can pick this job up itself while it waits in a join: it
    // must return at once there, or it would spin on its own unfinished plan.
    if rayon::current_thread_index() == home {
        return;
    }
    while !done.load(std::sync::atomic::Ordering::Acquire) {
        if rayon::yield_now() != Some(rayon::Yield::Executed) {
            std::hint::spin_loop();
        }
    }
}

/// Sets its flag when dropped (the plan finished or unwound), releasing [`keep_warm`].
struct StopOnDrop<'a>(&'a std::sync::atomic::AtomicBool);

impl Drop for StopOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, std::sync::atomic::Ordering::Release);
    }
}

/// The host CPU with a fixed number of worker threads.
pub struct CpuDevice {
    id: u64,
    pool: rayon::ThreadPool,
    threads: usize,
}

impl CpuDevice {
    /// A CPU device with `threads` workers (0 = all cores).
    pub fn new(threads: usize) -> Result<CpuDevice, String> {
        let threads = if threads == 0 { std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1) } else { threads };
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("tg-cpu-{i}"))
            .start_handler(|_| flush_subnormals())
            .build()
            .map_err(|e| format!("cannot start {threads} CPU threads: {e}"))?;
        Ok(CpuDevice { id: new_device_id(), pool, threads })
    }

    /// Worker thread count.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn mem<'a>(&self, b: &'a DeviceBuffer) -> Result<&'a CpuMem, DeviceError> {
        b.memory::<CpuMem>(self.id).ok_or_else(|| DeviceError::ForeignBuffer { device: "cpu".into() })
    }

    /// The bytes `[offset, offset + len)` of `b`, checked.
    fn region(&self, b: &DeviceBuffer, offset: usize, len: usize) -> Result<(*mut u8, bool), DeviceError> {
        let (p, alloc, w) = self.mem(b)?.ptr();
        // The buffer's own size, not the allocation rounded up to whole cache lines.
        let n = b.bytes().min(alloc);
        if offset.checked_add(len).is_none_or(|e| e > n) {
            return Err(DeviceError::Range { device: "cpu".into(), start: offset, end: offset.saturating_add(len), len: n });
        }
        // SAFETY: in range (checked above).
        Ok((unsafe { p.add(offset) }, w))
    }
}

/// The CPU's contract: every well-formed launch ([`crate::contract::well_formed`]) with its
/// output at offset 0 (the kernels write their output buffer from its start).
fn cpu_contract(kernel: &Kernel, ins: &[crate::Layout], out: &crate::Layout) -> Result<(), String> {
    if out.offset != 0 {
        return Err("output must be contiguous at offset 0".into());
    }
    crate::contract::well_formed(kernel, ins, out)
}

/// The CPU's kernel registry: every family, each with [`cpu_contract`].
pub fn cpu_registry() -> &'static KernelRegistry {
    static R: OnceLock<KernelRegistry> = OnceLock::new();
    R.get_or_init(|| {
        KernelRegistry::new(
            "cpu",
            FAMILIES.iter().map(|&family| KernelEntry { family, contract: cpu_contract, note: "tg-kernels (AVX-512 / AVX2 / scalar, chosen at run time), rayon" }).collect(),
        )
    })
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("model name")).and_then(|l| l.split(':').nth(1)).map(|s| s.trim().to_string()))
        .unwrap_or_else(|| std::env::consts::ARCH.to_string())
}

fn host_memory() -> Option<u64> {
    meminfo("MemTotal:")
}

/// Bytes of host memory the kernel says can be allocated without swapping
/// (`MemAvailable`), when known.
fn available_memory() -> Option<u64> {
    meminfo("MemAvailable:")
}

fn meminfo(field: &str) -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let kb: u64 = s.lines().find(|l| l.starts_with(field))?.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

impl Device for CpuDevice {
    fn name(&self) -> &str {
        "cpu"
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cpu
    }

    fn info(&self) -> DeviceInfo {
        DeviceInfo {
            name: "cpu".into(),
            kind: DeviceKind::Cpu,
            description: cpu_model(),
            memory_bytes: host_memory(),
            max_alloc_bytes: None,
            compute_units: self.threads,
            driver: format!("tg-kernels, {:?} kernels", tg_kernels::isa()),
        }
    }

    fn threads(&self) -> usize {
        self.threads
    }

    fn registry(&self) -> &KernelRegistry {
        cpu_registry()
    }

    /// Allocates zeroed, 64-byte aligned host memory. A request larger than the memory the
    /// host has available (`MemAvailable`) is refused up front: Linux overcommits, so the
    /// reservation itself would succeed and the process be killed when the pages are touched.
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        if let Some(avail) = available_memory().filter(|&a| bytes as u64 > a) {
            return Err(DeviceError::OutOfMemory { device: "cpu".into(), bytes, limit: Some(avail) });
        }
        let oom = || DeviceError::OutOfMemory { device: "cpu".into(), bytes, limit: host_memory() };
        let n = bytes.div_ceil(64);
        let mut lines = Vec::new();
        lines.try_reserve_exact(n).map_err(|_| oom())?;
        lines.resize(n, Line([0; 64]));
        let (ptr, len) = (lines.as_mut_ptr() as *mut u8, lines.len() * 64);
        Ok(DeviceBuffer::new(self.id, bytes, Box::new(CpuMem::Owned { ptr, len, _lines: lines })))
    }

    fn bind_weight(&self, store: &Arc<dyn WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError> {
        let b = store.bytes(name).ok_or_else(|| DeviceError::MissingWeight(name.into()))?;
        let mem = CpuMem::Weight { ptr: b.as_ptr(), len: b.len(), _store: store.clone() };
        Ok(Arc::new(DeviceBuffer::new(self.id, b.len(), Box::new(mem))))
    }

    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        let (p, w) = self.region(dst, offset, src.len())?;
        if !w {
            return Err(DeviceError::Driver { device: "cpu".into(), detail: "a weight is read-only".into() });
        }
        // SAFETY: range checked; the caller does not access these bytes concurrently.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), p, src.len()) };
        Ok(())
    }

    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        let (p, _) = self.region(src, offset, dst.len())?;
        // SAFETY: range checked; no write to these bytes is in flight.
        unsafe { std::ptr::copy_nonoverlapping(p, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    fn copy(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, bytes: usize) -> Result<(), DeviceError> {
        let (s, _) = self.region(src, src_offset, bytes)?;
        let (d, w) = self.region(dst, dst_offset, bytes)?;
        if !w {
            return Err(DeviceError::Driver { device: "cpu".into(), detail: "a weight is read-only".into() });
        }
        // SAFETY: both ranges checked; `copy` tolerates overlap.
        unsafe { std::ptr::copy(s, d, bytes) };
        Ok(())
    }

    fn fill(&self, dst: &DeviceBuffer, offset: usize, bytes: usize, value: u8) -> Result<(), DeviceError> {
        let (d, w) = self.region(dst, offset, bytes)?;
        if !w {
            return Err(DeviceError::Driver { device: "cpu".into(), detail: "a weight is read-only".into() });
        }
        // SAFETY: range checked.
        unsafe { std::ptr::write_bytes(d, value, bytes) };
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        Ok(())
    }

    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        if self.threads <= 1 || std::env::var_os("TG_CPU_SPIN").is_some_and(|v| v == "off") {
            return self.pool.install(f);
        }
        self.pool.install(|| {
            // The other workers stay awake while the plan runs (see `keep_warm`); the guard
            // lets them go back to sleep when `f` returns or unwinds.
            let done = std::sync::atomic::AtomicBool::new(false);
            let home = rayon::current_thread_index();
            rayon::scope(|s| {
                for _ in 1..self.threads {
                    s.spawn(|_| keep_warm(&done, home));
                }
                let _stop = StopOnDrop(&done);
                f();
            });
        })
    }

    fn launch(&self, _queue: usize, kernel: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        let mut slices: Vec<(&[u8], &crate::Layout)> = Vec::with_capacity(ins.len());
        for a in ins {
            let (p, _) = self.region(a.buffer, a.offset, a.bytes).map_err(|e| e.to_string())?;
            // SAFETY: in range; no step writes an operand while it is read.
            slices.push((unsafe { std::slice::from_raw_parts(p as *const u8, a.bytes) }, a.layout));
        }
        let (p, w) = self.region(out.buffer, out.offset, out.bytes).map_err(|e| e.to_string())?;
        if !w {
            return Err("the output is a weight".into());
        }
        // SAFETY: in range; the validated plan never lets a live input overlap the output.
        let o = unsafe { std::slice::from_raw_parts_mut(p, out.bytes) };
        kernels::run(kernel, &slices, (o, out.layout))
    }
}

//! The CUDA device: a [`tg_runtime::Device`] over one GPU through the driver API. Its memory
//! is `cuMemAlloc` buffers; one non-blocking stream; the kernel program compiled once by
//! NVRTC (cached on disk) and loaded as a module with every function resolved at open;
//! weights uploaded once per (store, name) and kept for every plan that binds them.
//!
//! Every call makes the device's primary context current on the calling thread first (the
//! executor calls from several threads). Every driver handle is owned by a small guard that
//! frees it on drop (the context last: buffers, events and the module hold it).

use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::sys::{self, CUcontext, CUdevice, CUdeviceptr, CUevent, CUfunction, CUfunction_attribute, CUjit_option, CUmodule, CUresult, CUstream};
use tg_gpu::{Launch, Target, Tuning, KERNEL_NAMES};
use tg_ir::WeightStore;
use tg_runtime::device::{check_range, new_device_id};
use tg_runtime::{Arg, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Event, Kernel, KernelRegistry, WeightUploads};

use crate::driver::{self, check, error_text, is_sticky, Props};
use crate::marshal::{marshal, Param};
use crate::nvrtc::{nvrtc, Output};
use crate::program;

/// The primary context of one device and the device's stream. Dropped last (everything else
/// holds an `Arc` of it): destroys the stream and releases the primary context.
struct Ctx {
    name: String,
    device: CUdevice,
    ctx: CUcontext,
    stream: CUstream,
}

// SAFETY: driver handles may be used from any thread once their context is current, which
// `bind` makes it before every use; the struct is never mutated after creation.
unsafe impl Send for Ctx {}
// SAFETY: see `Send`.
unsafe impl Sync for Ctx {}

impl Ctx {
    /// Retains the primary context of `device` and creates a non-blocking stream in it.
    fn new(name: &str, device: CUdevice) -> Result<Arc<Ctx>, String> {
        let mut ctx: CUcontext = std::ptr::null_mut();
        // SAFETY: a valid out-pointer and a device handle from cuDeviceGet.
        check(unsafe { sys::cuDevicePrimaryCtxRetain(&mut ctx, device) }, || format!("{name}: cuDevicePrimaryCtxRetain"))?;
        let mut c = Ctx { name: name.to_string(), device, ctx, stream: std::ptr::null_mut() };
        c.bind()?;
        let mut stream: CUstream = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current. On error `c` releases the context.
        check(unsafe { sys::cuStreamCreate(&mut stream, sys::CUstream_flags::CU_STREAM_NON_BLOCKING as u32) }, || format!("{name}: cuStreamCreate"))?;
        c.stream = stream;
        Ok(Arc::new(c))
    }

    /// Makes the context current on this thread.
    fn bind(&self) -> Result<(), String> {
        // SAFETY: a retained primary context.
        check(unsafe { sys::cuCtxSetCurrent(self.ctx) }, || format!("{}: cuCtxSetCurrent", self.name))
    }

    /// Waits for the stream; the raw result.
    fn sync_raw(&self) -> CUresult {
        if self.bind().is_err() {
            return CUresult::CUDA_ERROR_INVALID_CONTEXT;
        }
        // SAFETY: the context's own stream, context current.
        unsafe { sys::cuStreamSynchronize(self.stream) }
    }
}

impl Drop for Ctx {
    fn drop(&mut self) {
        if self.bind().is_ok() && !self.stream.is_null() {
            // SAFETY: the context's own stream, destroyed once, after its work finished.
            unsafe {
                let _ = sys::cuStreamSynchronize(self.stream);
                let _ = sys::cuStreamDestroy_v2(self.stream);
            }
        }
        // SAFETY: releases the retain of `Ctx::new`, once.
        let _ = unsafe { sys::cuDevicePrimaryCtxRelease_v2(self.device) };
    }
}

/// Device memory from `cuMemAlloc`, freed on drop (after the stream's pending work, which may
/// still use it).
struct DevMem {
    ptr: CUdeviceptr,
    bytes: usize,
    ctx: Arc<Ctx>,
}

// SAFETY: a device address is plain data; every use goes through the driver with the
// context bound.
unsafe impl Send for DevMem {}
// SAFETY: see `Send`.
unsafe impl Sync for DevMem {}

impl DevMem {
    /// `bytes` (at least 1) of device memory; the raw driver error on failure.
    fn alloc(ctx: &Arc<Ctx>, bytes: usize) -> Result<DevMem, CUresult> {
        ctx.bind().map_err(|_| CUresult::CUDA_ERROR_INVALID_CONTEXT)?;
        let mut ptr: CUdeviceptr = 0;
        // SAFETY: a valid out-pointer; the context is current.
        let r = unsafe { sys::cuMemAlloc_v2(&mut ptr, bytes.max(1)) };
        if r != CUresult::CUDA_SUCCESS {
            return Err(r);
        }
        Ok(DevMem { ptr, bytes, ctx: ctx.clone() })
    }
}

impl Drop for DevMem {
    fn drop(&mut self) {
        let _ = self.ctx.sync_raw();
        // SAFETY: memory from cuMemAlloc in this context, freed once, no work pending on it.
        let _ = unsafe { sys::cuMemFree_v2(self.ptr) };
    }
}

/// Page-locked host memory (`cuMemAllocHost`): the staging buffer of writes and reads.
struct Pinned {
    ptr: *mut u8,
    len: usize,
    ctx: Arc<Ctx>,
}

// SAFETY: host memory owned by this struct; used only under the device's staging lock.
unsafe impl Send for Pinned {}
// SAFETY: see `Send`.
unsafe impl Sync for Pinned {}

impl Pinned {
    fn alloc(ctx: &Arc<Ctx>, len: usize) -> Result<Pinned, String> {
        ctx.bind()?;
        let mut p: *mut c_void = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        check(unsafe { sys::cuMemAllocHost_v2(&mut p, len) }, || format!("{}: cuMemAllocHost({len} bytes of staging memory)", ctx.name))?;
        Ok(Pinned { ptr: p.cast(), len, ctx: ctx.clone() })
    }
}

impl Drop for Pinned {
    fn drop(&mut self) {
        let _ = self.ctx.sync_raw();
        // SAFETY: memory from cuMemAllocHost, freed once, no copy pending on it (synced).
        let _ = unsafe { sys::cuMemFreeHost(self.ptr.cast()) };
    }
}

/// The loaded kernel program, unloaded on drop.
struct Module {
    module: CUmodule,
    ctx: Arc<Ctx>,
}

impl Drop for Module {
    fn drop(&mut self) {
        let _ = self.ctx.sync_raw();
        // SAFETY: a module loaded in this context, unloaded once, no kernel of it running.
        let _ = unsafe { sys::cuModuleUnload(self.module) };
    }
}

/// A recorded point in the device's stream ([`tg_runtime::Device::record`]).
struct CudaEvent {
    event: CUevent,
    ctx: Arc<Ctx>,
}

// SAFETY: an event handle may be used from any thread with its context current.
unsafe impl Send for CudaEvent {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaEvent {}

impl Drop for CudaEvent {
    fn drop(&mut self) {
        if self.ctx.bind().is_ok() {
            // SAFETY: an event created in this context, destroyed once.
            let _ = unsafe { sys::cuEventDestroy_v2(self.event) };
        }
    }
}

/// A kernel function of the module and the largest block it can run with (its registers).
#[derive(Clone, Copy)]
struct Function {
    f: CUfunction,
    max_threads: usize,
}

/// Bytes of the status words: four i32 (code, three details).
const STATUS_BYTES: usize = 16;
/// The staging buffer grows to this at most; longer transfers go in chunks.
const STAGING_MAX: usize = 64 << 20;
/// The staging buffer's smallest size.
const STAGING_MIN: usize = 1 << 20;

/// A CUDA GPU with its primary context, stream and loaded kernels.
pub struct CudaDevice {
    id: u64,
    name: String,
    info: DeviceInfo,
    /// The target the module was compiled for (`sm_90`, or `compute_XX` PTX).
    target: String,
    functions: HashMap<&'static str, Function>,
    status: DevMem,
    /// Scratch memory of multi-launch steps (grown on demand); locked while a step enqueues.
    scratch: Mutex<Option<DevMem>>,
    staging: Mutex<Option<Pinned>>,
    tuning: Mutex<Tuning>,
    weights: WeightUploads,
    _module: Module,
    ctx: Arc<Ctx>,
}

// SAFETY: the raw handles (`CUfunction`s) are immutable after open and usable from any thread
// with the context current, which every method makes it first; mutable state is behind locks.
unsafe impl Send for CudaDevice {}
// SAFETY: see `Send`.
unsafe impl Sync for CudaDevice {}

/// What a sticky error means, appended to its message (empty for other errors).
fn sticky_note(r: CUresult) -> &'static str {
    if is_sticky(r) {
        " (a kernel faulted: the device's context is unusable until the process ends)"
    } else {
        ""
    }
}

/// The NVRTC version for descriptions, or why there is none.
fn nvrtc_text() -> String {
    match nvrtc() {
        Ok(n) => format!("NVRTC {}.{}", n.version().0, n.version().1),
        Err(_) => "NVRTC not found (set TG_NVRTC)".into(),
    }
}

fn describe(index: usize, p: &Props, driver_version: (i32, i32)) -> DeviceInfo {
    DeviceInfo {
        name: format!("cuda:{index}"),
        kind: DeviceKind::Cuda,
        description: format!("{} (compute capability {}.{})", p.name, p.cc.0, p.cc.1),
        memory_bytes: Some(p.memory),
        max_alloc_bytes: Some(p.memory),
        compute_units: p.sms,
        driver: format!("CUDA driver {}.{}; {}", driver_version.0, driver_version.1, nvrtc_text()),
    }
}

/// Every CUDA device, or why none can be listed (no driver library, `cuInit` failed).
pub fn list() -> Result<Vec<DeviceInfo>, String> {
    let n = driver::device_count()?;
    let v = driver::driver_version()?;
    (0..n).map(|i| Ok(describe(i, &driver::props(i)?, v))).collect()
}

/// The CUDA kernel registry: every family, from the shared GPU kernels (`tg_gpu::registry`).
pub fn registry() -> &'static KernelRegistry {
    static R: OnceLock<KernelRegistry> = OnceLock::new();
    R.get_or_init(|| tg_gpu::registry("cuda"))
}

/// Loads a module image (CUBIN, or NUL-terminated PTX), with the JIT's error log on failure.
fn load_module(ctx: &Arc<Ctx>, image: &[u8]) -> Result<Module, String> {
    ctx.bind()?;
    let mut log = vec![0u8; 16 << 10];
    let mut opts = [CUjit_option::CU_JIT_ERROR_LOG_BUFFER, CUjit_option::CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES];
    // The size option's value is the size itself, cast to a pointer (the driver's convention).
    let mut vals: [*mut c_void; 2] = [log.as_mut_ptr().cast(), log.len() as *mut c_void];
    let mut module: CUmodule = std::ptr::null_mut();
    // SAFETY: `image` is a complete CUBIN or NUL-terminated PTX that outlives the call; two
    // options with their values; the log buffer has the size passed.
    let r = unsafe { sys::cuModuleLoadDataEx(&mut module, image.as_ptr().cast(), opts.len() as u32, opts.as_mut_ptr(), vals.as_mut_ptr()) };
    if r != CUresult::CUDA_SUCCESS {
        let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
        let log = String::from_utf8_lossy(&log[..end]).trim().to_string();
        return Err(format!("cuModuleLoadData: {}{}", error_text(r), if log.is_empty() { String::new() } else { format!("; JIT log:\n{log}") }));
    }
    Ok(Module { module, ctx: ctx.clone() })
}

impl CudaDevice {
    /// Opens CUDA device `index` (as [`list`] numbers them): its primary context, a stream,
    /// and the kernel program compiled by NVRTC (or read from the cache) and loaded. Errors
    /// name the device and what was looked for; never panics for a missing driver, NVRTC or
    /// device.
    pub fn open(index: usize) -> Result<CudaDevice, String> {
        let name = format!("cuda:{index}");
        let count = driver::device_count().map_err(|e| format!("{name}: {e}"))?;
        if index >= count {
            let present: Vec<String> = (0..count).map(|i| format!("cuda:{i} ({})", driver::props(i).map(|p| p.name).unwrap_or_else(|e| e))).collect();
            return Err(format!("{name}: no such CUDA device (present: {})", if present.is_empty() { "none".into() } else { present.join(", ") }));
        }
        let props = driver::props(index).map_err(|e| format!("{name}: {e}"))?;
        let drv = driver::driver_version().map_err(|e| format!("{name}: {e}"))?;
        let nv = nvrtc().map_err(|e| format!("{name}: {e}"))?;
        let ctx = Ctx::new(&name, props.device)?;

        let (mut image, target, kind) = program::device_image(&nv, props.cc).map_err(|e| format!("{name}: {e}"))?;
        if kind == Output::Ptx && image.last() != Some(&0) {
            image.push(0);
        }
        let module = match load_module(&ctx, &image) {
            Ok(m) => m,
            Err(first) => {
                // A stale or damaged cache entry: compile afresh once.
                program::forget(&nv, &target, kind);
                let mut retry = program::program(&nv, &target, kind).map_err(|e| format!("{name}: {e}"))?;
                if kind == Output::Ptx && retry.last() != Some(&0) {
                    retry.push(0);
                }
                load_module(&ctx, &retry).map_err(|e| {
                    let (nvv, hint) =
                        (nv.version(), if nv.version() > drv { "; NVRTC is newer than the driver: use an NVRTC no newer than the driver's CUDA version (TG_NVRTC)" } else { "" });
                    format!("{name}: the driver (CUDA {}.{}) cannot load the program NVRTC {}.{} compiled for {target}: {e} (first try: {first}){hint}", drv.0, drv.1, nvv.0, nvv.1)
                })?
            }
        };

        let mut functions = HashMap::new();
        for k in KERNEL_NAMES {
            let cname = CString::new(k).map_err(|_| format!("{name}: kernel name {k}"))?;
            let mut f: CUfunction = std::ptr::null_mut();
            // SAFETY: a loaded module, a NUL-terminated name, a valid out-pointer.
            check(unsafe { sys::cuModuleGetFunction(&mut f, module.module, cname.as_ptr()) }, || format!("{name}: kernel {k} missing from the program (cuModuleGetFunction)"))?;
            let mut max: i32 = 0;
            // SAFETY: a valid function handle and out-pointer.
            check(unsafe { sys::cuFuncGetAttribute(&mut max, CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, f) }, || {
                format!("{name}: kernel {k}: cuFuncGetAttribute")
            })?;
            functions.insert(k, Function { f, max_threads: (max.max(1) as usize).min(props.max_threads) });
        }

        let status = DevMem::alloc(&ctx, STATUS_BYTES).map_err(|r| format!("{name}: allocating the status words: {}", error_text(r)))?;
        // SAFETY: 16 bytes of our allocation, on our stream.
        check(unsafe { sys::cuMemsetD8Async(status.ptr, 0, STATUS_BYTES, ctx.stream) }, || format!("{name}: clearing the status words"))?;
        check(ctx.sync_raw(), || format!("{name}: cuStreamSynchronize"))?;

        let info = describe(index, &props, drv);
        Ok(CudaDevice {
            id: new_device_id(),
            name,
            info,
            target,
            functions,
            status,
            scratch: Mutex::new(None),
            staging: Mutex::new(None),
            tuning: Mutex::new(Tuning::default()),
            weights: WeightUploads::default(),
            _module: module,
            ctx,
        })
    }

    /// The target the kernels were compiled for: `sm_XX` (a CUBIN) or `compute_XX` (PTX the
    /// driver compiled for the device).
    pub fn target(&self) -> &str {
        &self.target
    }

    /// The launch shapes in use.
    pub fn tuning(&self) -> Tuning {
        self.tuning.lock().map(|t| t.clone()).unwrap_or_default()
    }

    /// Uses `tuning` for later launches (after checking it).
    pub fn set_tuning(&self, tuning: Tuning) -> Result<(), String> {
        tuning.check()?;
        *self.tuning.lock().map_err(|_| "tuning lock poisoned".to_string())? = tuning;
        Ok(())
    }

    fn buf<'a>(&self, b: &'a DeviceBuffer) -> Result<&'a DevMem, DeviceError> {
        b.memory::<DevMem>(self.id).ok_or_else(|| DeviceError::ForeignBuffer { device: self.name.clone() })
    }

    fn driver_err(&self, detail: String) -> DeviceError {
        DeviceError::Driver { device: self.name.clone(), detail }
    }

    fn bind(&self) -> Result<(), DeviceError> {
        self.ctx.bind().map_err(|e| self.driver_err(e))
    }

    /// `r` as a device error about `what`; a sticky error says the context is lost.
    fn fail(&self, r: CUresult, what: &str) -> DeviceError {
        self.driver_err(format!("{what}: {}{}", error_text(r), sticky_note(r)))
    }

    fn ok(&self, r: CUresult, what: &str) -> Result<(), DeviceError> {
        if r == CUresult::CUDA_SUCCESS {
            Ok(())
        } else {
            Err(self.fail(r, what))
        }
    }

    /// Waits for the stream.
    fn sync(&self, what: &str) -> Result<(), DeviceError> {
        let r = self.ctx.sync_raw();
        self.ok(r, what)
    }

    /// The staging buffer, grown to hold `want` bytes (at most [`STAGING_MAX`]).
    fn staging<'a>(&self, slot: &'a mut Option<Pinned>, want: usize) -> Result<&'a Pinned, DeviceError> {
        let want = want.clamp(STAGING_MIN, STAGING_MAX).next_power_of_two();
        if slot.as_ref().is_none_or(|p| p.len < want) {
            *slot = None;
            *slot = Some(Pinned::alloc(&self.ctx, want).map_err(|e| self.driver_err(e))?);
        }
        slot.as_ref().ok_or_else(|| self.driver_err("no staging buffer".into()))
    }

    /// Reads (waiting for the stream) and clears the first run-time error recorded by a
    /// kernel since the last call: a `StoreRows` offset past the state's end, or a `Gather`
    /// id outside the table.
    fn take_error(&self) -> Result<(), DeviceError> {
        let mut words = [0i32; 4];
        // SAFETY: 16 bytes from our status allocation into a 16-byte host array; a copy to
        // pageable memory returns when done, and the stream is synchronised after it.
        let r = unsafe { sys::cuMemcpyDtoHAsync_v2(words.as_mut_ptr().cast(), self.status.ptr, STATUS_BYTES, self.ctx.stream) };
        self.ok(r, "reading the status words")?;
        self.sync("reading the status words")?;
        let Some(msg) = tg_gpu::status_message(words) else { return Ok(()) };
        // SAFETY: 16 bytes of our status allocation, on our stream.
        let r = unsafe { sys::cuMemsetD8Async(self.status.ptr, 0, STATUS_BYTES, self.ctx.stream) };
        self.ok(r, "clearing the status words")?;
        self.sync("clearing the status words")?;
        Err(self.driver_err(msg))
    }

    /// Enqueues one launch of a step.
    fn run(&self, l: &Launch<DevMem>, scratch: Option<CUdeviceptr>) -> Result<(), String> {
        let k = l.kernel;
        let f = self.functions.get(k).copied().ok_or_else(|| format!("kernel {k} missing from the program"))?;
        let grid = l.groups;
        if l.group_size == 0 || l.group_size > f.max_threads {
            return Err(format!("kernel {k}: blocks of {} threads exceed its limit of {} on {}", l.group_size, f.max_threads, self.name));
        }
        if grid[0] == 0 || grid[0] > i32::MAX as usize || grid[1] == 0 || grid[1] > 65_535 || grid[2] == 0 || grid[2] > 65_535 {
            return Err(format!("kernel {k}: grid {grid:?} outside CUDA's limits"));
        }
        let mut params: Vec<Param> = marshal(k, &l.args, |m: &DevMem| m.ptr, self.status.ptr, scratch)?;
        // Pointers into `params`, which is neither moved nor changed until the launch returns
        // (the driver copies the values when the kernel is enqueued).
        let mut ptrs: Vec<*mut c_void> = params.iter_mut().map(Param::as_mut_ptr).collect();
        // SAFETY: a function of our module; `ptrs` holds one pointer per kernel parameter, in
        // order, each to a value of that parameter's size (marshal.rs; checked against the
        // PTX by `Signatures`); 1-D blocks, no dynamic shared memory; our stream.
        let r = unsafe {
            sys::cuLaunchKernel(f.f, grid[0] as u32, grid[1] as u32, grid[2] as u32, l.group_size as u32, 1, 1, 0, self.ctx.stream, ptrs.as_mut_ptr(), std::ptr::null_mut())
        };
        if r != CUresult::CUDA_SUCCESS {
            return Err(format!("{}: kernel {k} on a grid of {grid:?} blocks of {} threads: cuLaunchKernel: {}{}", self.name, l.group_size, error_text(r), sticky_note(r)));
        }
        Ok(())
    }
}

impl tg_runtime::Device for CudaDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::Cuda
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn fingerprint(&self) -> String {
        // The GPU (with its compute capability), driver and NVRTC versions, the program's
        // target, the kernel sources and the launch shapes all change kernel times.
        let h = tg_gpu::source_hash(Target::Cuda);
        format!("{} | {} | {} | kernels {h:016x} | launch {}", self.info.description, self.info.driver, self.target, self.tuning().key())
    }

    fn registry(&self) -> &KernelRegistry {
        registry()
    }

    fn launch_config(&self) -> Option<String> {
        serde_json::to_string(&self.tuning()).ok()
    }

    fn set_launch_config(&self, config: &str) -> Result<(), String> {
        let t: Tuning = serde_json::from_str(config).map_err(|e| format!("{}: launch configuration: {e}", self.name))?;
        self.set_tuning(t).map_err(|e| format!("{}: launch configuration: {e}", self.name))
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        self.bind()?;
        match DevMem::alloc(&self.ctx, bytes) {
            Ok(m) => Ok(DeviceBuffer::new(self.id, bytes, Box::new(m))),
            Err(CUresult::CUDA_ERROR_OUT_OF_MEMORY) => Err(DeviceError::OutOfMemory { device: self.name.clone(), bytes, limit: self.info.memory_bytes }),
            Err(r) => Err(self.fail(r, &format!("cuMemAlloc({bytes} bytes)"))),
        }
    }

    fn bind_weight(&self, store: &Arc<dyn WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError> {
        self.weights.get_or_upload(&self.name, store, name, |bytes| {
            let buf = self.alloc(bytes.len())?;
            self.write(&buf, 0, bytes)?;
            Ok(buf)
        })
    }

    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError> {
        check_range(&self.name, dst, offset, src.len())?;
        if src.is_empty() {
            return Ok(());
        }
        let d = self.buf(dst)?;
        self.bind()?;
        let mut slot = self.staging.lock().map_err(|_| self.driver_err("staging lock poisoned".into()))?;
        let pinned = self.staging(&mut slot, src.len())?;
        let mut done = 0usize;
        for chunk in src.chunks(pinned.len) {
            // SAFETY: the staging buffer holds `pinned.len` ≥ chunk.len() bytes and no copy
            // is pending on it (each chunk is waited for).
            unsafe { std::ptr::copy_nonoverlapping(chunk.as_ptr(), pinned.ptr, chunk.len()) };
            // SAFETY: range checked above; the source is pinned memory of ours.
            let r = unsafe { sys::cuMemcpyHtoDAsync_v2(d.ptr + (offset + done) as u64, pinned.ptr.cast(), chunk.len(), self.ctx.stream) };
            self.ok(r, &format!("write {} bytes", chunk.len()))?;
            self.sync("write")?;
            done += chunk.len();
        }
        Ok(())
    }

    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        check_range(&self.name, src, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let s = self.buf(src)?;
        self.bind()?;
        let mut slot = self.staging.lock().map_err(|_| self.driver_err("staging lock poisoned".into()))?;
        let pinned = self.staging(&mut slot, dst.len())?;
        let mut done = 0usize;
        for chunk in dst.chunks_mut(pinned.len) {
            // SAFETY: range checked above; the destination is pinned memory of ours with room
            // for the chunk.
            let r = unsafe { sys::cuMemcpyDtoHAsync_v2(pinned.ptr.cast(), s.ptr + (offset + done) as u64, chunk.len(), self.ctx.stream) };
            self.ok(r, &format!("read {} bytes", chunk.len()))?;
            self.sync("read")?;
            // SAFETY: the copy finished (synchronised); the staging buffer holds chunk.len() bytes.
            unsafe { std::ptr::copy_nonoverlapping(pinned.ptr, chunk.as_mut_ptr(), chunk.len()) };
            done += chunk.len();
        }
        Ok(())
    }

    fn copy(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, bytes: usize) -> Result<(), DeviceError> {
        check_range(&self.name, src, src_offset, bytes)?;
        check_range(&self.name, dst, dst_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let (s, d) = (self.buf(src)?, self.buf(dst)?);
        self.bind()?;
        // SAFETY: both ranges checked; in stream order.
        let r = unsafe { sys::cuMemcpyDtoDAsync_v2(d.ptr + dst_offset as u64, s.ptr + src_offset as u64, bytes, self.ctx.stream) };
        self.ok(r, &format!("copy {bytes} bytes"))
    }

    fn fill(&self, dst: &DeviceBuffer, offset: usize, bytes: usize, value: u8) -> Result<(), DeviceError> {
        check_range(&self.name, dst, offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let d = self.buf(dst)?;
        self.bind()?;
        // SAFETY: range checked; in stream order.
        let r = unsafe { sys::cuMemsetD8Async(d.ptr + offset as u64, value, bytes, self.ctx.stream) };
        self.ok(r, &format!("fill {bytes} bytes"))
    }

    fn record(&self, _queue: usize) -> Result<Event, DeviceError> {
        self.bind()?;
        let mut event: CUevent = std::ptr::null_mut();
        // SAFETY: a valid out-pointer; the context is current.
        let r = unsafe { sys::cuEventCreate(&mut event, sys::CUevent_flags::CU_EVENT_DISABLE_TIMING as u32) };
        self.ok(r, "cuEventCreate")?;
        let e = CudaEvent { event, ctx: self.ctx.clone() };
        // SAFETY: an event of this context, our stream.
        let r = unsafe { sys::cuEventRecord(e.event, self.ctx.stream) };
        self.ok(r, "cuEventRecord")?;
        Ok(Event(Box::new(e)))
    }

    fn wait(&self, _queue: usize, event: &Event) -> Result<(), DeviceError> {
        let e = event.0.downcast_ref::<CudaEvent>().ok_or_else(|| self.driver_err("event of another kind of device".into()))?;
        self.bind()?;
        // SAFETY: a live event (possibly of another CUDA device's context, which the driver
        // allows) and our stream.
        let r = unsafe { sys::cuStreamWaitEvent(self.ctx.stream, e.event, 0) };
        self.ok(r, "cuStreamWaitEvent")
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.bind()?;
        self.sync("synchronize")?;
        self.take_error()
    }

    fn launch(&self, _queue: usize, kernel: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        let kname = kernel.name();
        fn mem<'a>(dev: &CudaDevice, a: &Arg<'a>) -> Result<&'a DevMem, String> {
            a.buffer.memory::<DevMem>(dev.id).ok_or_else(|| format!("{}: buffer belongs to another device", dev.name))
        }
        let mut tins: Vec<tg_gpu::Tensor<DevMem>> = Vec::with_capacity(ins.len());
        for a in ins {
            tins.push(tg_gpu::Tensor { mem: mem(self, a)?, byte_offset: a.offset, layout: a.layout });
        }
        let tout = tg_gpu::Tensor { mem: mem(self, &out)?, byte_offset: out.offset, layout: out.layout };
        let layouts: Vec<tg_runtime::Layout> = ins.iter().map(|a| a.layout.clone()).collect();
        tg_gpu::supports(kernel, &layouts, out.layout).map_err(|e| format!("{kname}: {e}"))?;
        for (i, t) in tins.iter().chain(std::iter::once(&tout)).enumerate() {
            let need = t.layout.bytes_needed().ok_or_else(|| format!("{kname}: operand {i} reaches before its offset"))?;
            if t.byte_offset.checked_add(need).is_none_or(|end| end > t.mem.bytes) {
                return Err(format!("{kname}: operand {i} needs {need} bytes at byte {} of a {}-byte buffer", t.byte_offset, t.mem.bytes));
            }
        }
        let tuning = self.tuning();
        let plan = tg_gpu::plan(kernel, &tins, &tout, &tuning).map_err(|e| format!("{kname}: {e}"))?;
        self.ctx.bind()?;
        let mut scratch = self.scratch.lock().map_err(|_| format!("{}: scratch lock poisoned", self.name))?;
        if plan.scratch_bytes > 0 && scratch.as_ref().is_none_or(|s| s.bytes < plan.scratch_bytes) {
            let bytes = plan.scratch_bytes.next_power_of_two();
            // The old buffer is freed after the stream's pending work (DevMem's drop).
            *scratch = None;
            let m = DevMem::alloc(&self.ctx, bytes).map_err(|r| format!("{kname}: cannot allocate {bytes} bytes of scratch on {}: {}", self.name, error_text(r)))?;
            *scratch = Some(m);
        }
        let scratch_ptr = scratch.as_ref().map(|s| s.ptr);
        for launch in &plan.launches {
            self.run(launch, scratch_ptr).map_err(|e| format!("{kname}: {e}"))?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_device_is_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::CudaDevice>();
    }
}

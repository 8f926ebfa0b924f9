//! The OpenCL device: a [`tg_runtime::Device`] over one OpenCL device (a GPU, or PoCL on the
//! CPU). Its memory is `cl_mem` buffers; one in-order queue; kernels from [`ClKernels`], built
//! once per device; weights uploaded once per (store, name) and kept for every plan that
//! binds them.

use crate::{ClArg, ClError, ClKernels};
use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device as ClDevice, CL_DEVICE_TYPE_ALL};
use opencl3::memory::{Buffer, CL_MEM_READ_WRITE};
use opencl3::types::CL_BLOCKING;
use std::cell::UnsafeCell;
use std::sync::{Arc, Mutex, OnceLock};
use tg_ir::WeightStore;
use tg_runtime::device::{check_range, new_device_id};
use tg_runtime::{Arg, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Event, Kernel, KernelRegistry, WeightUploads};

/// A `cl_mem` buffer of ours. Writes go through the queue (the OpenCL runtime orders them);
/// the cell only lets the wrapper call the `&mut` methods of `opencl3`.
struct ClBuf(UnsafeCell<Buffer<u8>>);

// SAFETY: a `cl_mem` handle may be used from any thread (OpenCL objects are thread-safe apart
// from kernel argument setting, which `ClKernels` locks); the `&mut` taken from the cell is
// only passed to enqueue calls, which do not keep it.
unsafe impl Send for ClBuf {}
unsafe impl Sync for ClBuf {}

impl ClBuf {
    fn get(&self) -> &Buffer<u8> {
        // SAFETY: see the impls above.
        unsafe { &*self.0.get() }
    }
    #[allow(clippy::mut_from_ref)]
    fn get_mut(&self) -> &mut Buffer<u8> {
        // SAFETY: see the impls above.
        unsafe { &mut *self.0.get() }
    }
}


/// An OpenCL device with its context, queue and built kernels.
pub struct OpenClDevice {
    id: u64,
    name: String,
    info: DeviceInfo,
    context: Context,
    queue: CommandQueue,
    kernels: ClKernels,
    /// Weights uploaded so far, kept for every plan that binds them.
    weights: WeightUploads,
}

/// One OpenCL device found on the machine.
#[derive(Debug, Clone)]
pub struct Found {
    /// Index over all platforms' devices, in platform order (the `N` of `opencl:N`).
    pub index: usize,
    /// Platform name and version.
    pub platform: String,
    /// What the device says about itself.
    pub info: DeviceInfo,
}

fn api(what: &str) -> impl FnOnce(opencl3::error_codes::ClError) -> String + '_ {
    move |e| format!("{what}: {e}")
}

/// Serialises listing and opening devices: PoCL 3.1 fails device queries and buffer creation
/// now and then while another thread creates a context.
static DRIVER: Mutex<()> = Mutex::new(());

/// Every OpenCL device of every platform, or why none can be listed (no OpenCL library, no
/// platform).
pub fn list() -> Result<Vec<Found>, String> {
    let _g = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
    Ok(list_locked()?.into_iter().map(|(f, _)| f).collect())
}

/// [`list`] with each device's id, under [`DRIVER`].
fn list_locked() -> Result<Vec<(Found, opencl3::types::cl_device_id)>, String> {
    let platforms = opencl3::platform::get_platforms()
        .map_err(|e| format!("no OpenCL platform ({e}); looked for an OpenCL ICD loader (libOpenCL.so) and installed platforms (/etc/OpenCL/vendors)"))?;
    if platforms.is_empty() {
        return Err("no OpenCL platform installed (/etc/OpenCL/vendors is empty)".into());
    }
    let mut out = Vec::new();
    for p in platforms {
        let pname = format!("{} {}", p.name().unwrap_or_default(), p.version().unwrap_or_default());
        let Ok(ids) = p.get_devices(CL_DEVICE_TYPE_ALL) else { continue };
        for id in ids {
            let d = ClDevice::new(id);
            let index = out.len();
            out.push((Found { index, platform: pname.clone(), info: describe(&d, index, &pname) }, id));
        }
    }
    Ok(out)
}

fn describe(d: &ClDevice, index: usize, platform: &str) -> DeviceInfo {
    DeviceInfo {
        name: format!("opencl:{index}"),
        kind: DeviceKind::OpenCl,
        description: d.name().unwrap_or_else(|_| "unknown OpenCL device".into()),
        memory_bytes: d.global_mem_size().ok(),
        max_alloc_bytes: d.max_mem_alloc_size().ok(),
        compute_units: d.max_compute_units().map(|n| n as usize).unwrap_or(1),
        driver: format!("{platform}; driver {}; {}", d.driver_version().unwrap_or_default(), d.version().unwrap_or_default()),
    }
}

/// The OpenCL kernel registry: every family, from the shared GPU kernels (`tg_gpu::registry`).
pub fn registry() -> &'static KernelRegistry {
    static R: OnceLock<KernelRegistry> = OnceLock::new();
    R.get_or_init(|| tg_gpu::registry("opencl"))
}

impl OpenClDevice {
    /// Opens OpenCL device `index` (as [`list`] numbers them): a context, one in-order queue,
    /// and the kernel program built for it. Errors name the device and what was looked for;
    /// a program build failure carries the compiler log.
    pub fn open(index: usize) -> Result<OpenClDevice, String> {
        let name = format!("opencl:{index}");
        let _g = DRIVER.lock().unwrap_or_else(|e| e.into_inner());
        let found = list_locked()?;
        let (f, id) = found.get(index).ok_or_else(|| {
            let present: Vec<String> = found.iter().map(|(f, _)| format!("opencl:{} ({})", f.index, f.info.description)).collect();
            format!("{name}: no such OpenCL device (present: {})", if present.is_empty() { "none".into() } else { present.join(", ") })
        })?;
        let dev = ClDevice::new(*id);
        let context = Context::from_device(&dev).map_err(api(&format!("{name}: create context")))?;
        #[allow(deprecated)]
        let queue = CommandQueue::create_default(&context, 0).map_err(api(&format!("{name}: create queue")))?;
        let kernels = ClKernels::build(&context, &dev).map_err(|e: ClError| format!("{name}: {e}"))?;
        Ok(OpenClDevice { id: new_device_id(), name, info: f.info.clone(), context, queue, kernels, weights: WeightUploads::default() })
    }

    fn buf<'a>(&self, b: &'a DeviceBuffer) -> Result<&'a ClBuf, DeviceError> {
        b.memory::<ClBuf>(self.id).ok_or_else(|| DeviceError::ForeignBuffer { device: self.name.clone() })
    }

    fn driver(&self, detail: String) -> DeviceError {
        DeviceError::Driver { device: self.name.clone(), detail }
    }
}

impl tg_runtime::Device for OpenClDevice {
    fn name(&self) -> &str {
        &self.name
    }

    fn kind(&self) -> DeviceKind {
        DeviceKind::OpenCl
    }

    fn info(&self) -> DeviceInfo {
        self.info.clone()
    }

    fn fingerprint(&self) -> String {
        // The kernels' sources and launch shapes are part of what their times depend on.
        let h = tg_gpu::source_hash(tg_gpu::Target::OpenCl);
        format!("{} | {} | kernels {h:016x} | launch {}", self.info.description, self.info.driver, self.kernels.tuning().key())
    }

    fn registry(&self) -> &KernelRegistry {
        registry()
    }

    fn launch_config(&self) -> Option<String> {
        serde_json::to_string(&self.kernels.tuning()).ok()
    }

    fn set_launch_config(&self, config: &str) -> Result<(), String> {
        let t: tg_gpu::Tuning = serde_json::from_str(config).map_err(|e| format!("{}: launch configuration: {e}", self.name))?;
        self.kernels.set_tuning(t).map_err(|e| format!("{}: launch configuration: {e}", self.name))
    }

    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError> {
        let oom = || DeviceError::OutOfMemory { device: self.name.clone(), bytes, limit: self.info.max_alloc_bytes };
        if self.info.max_alloc_bytes.is_some_and(|m| bytes as u64 > m) {
            return Err(oom());
        }
        // SAFETY: no host pointer; the size is in bytes of u8.
        let b = unsafe { Buffer::<u8>::create(&self.context, CL_MEM_READ_WRITE, bytes.max(1), std::ptr::null_mut()) }.map_err(|_| oom())?;
        Ok(DeviceBuffer::new(self.id, bytes, Box::new(ClBuf(UnsafeCell::new(b)))))
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
        let b = self.buf(dst)?;
        // SAFETY: a blocking write from a host slice valid for the call; range checked.
        unsafe { self.queue.enqueue_write_buffer(b.get_mut(), CL_BLOCKING, offset, src, &[]) }.map_err(|e| self.driver(format!("write {} bytes: {e}", src.len())))?;
        Ok(())
    }

    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError> {
        check_range(&self.name, src, offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        let b = self.buf(src)?;
        // SAFETY: a blocking read into a host slice valid for the call; range checked.
        unsafe { self.queue.enqueue_read_buffer(b.get(), CL_BLOCKING, offset, dst, &[]) }.map_err(|e| self.driver(format!("read {} bytes: {e}", dst.len())))?;
        Ok(())
    }

    fn copy(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, bytes: usize) -> Result<(), DeviceError> {
        check_range(&self.name, src, src_offset, bytes)?;
        check_range(&self.name, dst, dst_offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let (s, d) = (self.buf(src)?, self.buf(dst)?);
        // SAFETY: ranges checked; OpenCL orders the copy in the queue.
        unsafe { self.queue.enqueue_copy_buffer(s.get(), d.get_mut(), src_offset, dst_offset, bytes, &[]) }.map_err(|e| self.driver(format!("copy {bytes} bytes: {e}")))?;
        Ok(())
    }

    fn fill(&self, dst: &DeviceBuffer, offset: usize, bytes: usize, value: u8) -> Result<(), DeviceError> {
        check_range(&self.name, dst, offset, bytes)?;
        if bytes == 0 {
            return Ok(());
        }
        let d = self.buf(dst)?;
        // SAFETY: range checked; the pattern is one byte.
        unsafe { self.queue.enqueue_fill_buffer(d.get_mut(), &[value], offset, bytes, &[]) }.map_err(|e| self.driver(format!("fill {bytes} bytes: {e}")))?;
        Ok(())
    }

    fn record(&self, _queue: usize) -> Result<Event, DeviceError> {
        // SAFETY: a marker with no wait list.
        let e = unsafe { self.queue.enqueue_marker_with_wait_list(&[]) }.map_err(|e| self.driver(format!("marker: {e}")))?;
        Ok(Event(Box::new(Mutex::new(e))))
    }

    fn wait(&self, _queue: usize, event: &Event) -> Result<(), DeviceError> {
        let e = event.0.downcast_ref::<Mutex<opencl3::event::Event>>().ok_or_else(|| self.driver("event of another device".into()))?;
        let e = e.lock().map_err(|_| self.driver("event lock poisoned".into()))?;
        // One in-order queue: everything recorded is already ahead of later work; the barrier
        // makes the dependency explicit for devices with more queues.
        // SAFETY: waits on a valid event.
        unsafe { self.queue.enqueue_barrier_with_wait_list(&[e.get()]) }.map_err(|e| self.driver(format!("barrier: {e}")))?;
        Ok(())
    }

    fn synchronize(&self) -> Result<(), DeviceError> {
        self.queue.finish().map_err(|e| self.driver(format!("finish: {e}")))?;
        self.kernels.take_error(&self.queue).map_err(|e| self.driver(e))
    }

    fn launch(&self, _queue: usize, kernel: &Kernel, ins: &[Arg], out: Arg) -> Result<(), String> {
        fn arg<'a>(dev: &OpenClDevice, a: &Arg<'a>) -> Result<ClArg<'a>, String> {
            let b = a.buffer.memory::<ClBuf>(dev.id).ok_or_else(|| format!("{}: buffer belongs to another device", dev.name))?;
            Ok(ClArg { mem: b.get(), byte_offset: a.offset, layout: a.layout })
        }
        let cl_ins: Vec<ClArg> = ins.iter().map(|a| arg(self, a)).collect::<Result<_, _>>()?;
        let cl_out = arg(self, &out)?;
        self.kernels.enqueue(&self.queue, kernel, &cl_ins, cl_out)
    }
}

//! The device layer: what the runtime needs from a device, in four small parts.
//!
//! - **Allocator**: a device owns its memory. [`Device::alloc`] returns an opaque
//!   [`DeviceBuffer`] (freed on drop); [`Device::write`] / [`Device::read`] copy between host
//!   bytes and a buffer, [`Device::copy`] copies between two buffers of the device,
//!   [`Device::fill`] sets bytes, [`Device::bind_weight`] makes a weight of a
//!   [`WeightStore`] readable by the device (the CPU reads it in place; a GPU uploads it once
//!   and keeps it for every plan that binds the same store).
//! - **Queues and events**: [`Device::queues`] queues run work in order; [`Device::record`]
//!   marks a point in a queue, [`Device::wait`] makes a queue wait for it, and
//!   [`Device::synchronize`] waits for everything.
//! - **Kernels**: [`Device::registry`] is the device's [`KernelRegistry`] (the contract of
//!   every kernel it has), read by lowering, the cost models, the profiler, the fusion
//!   guards and the plan validator; [`Device::launch`] enqueues one kernel on its own buffers.
//! - **Description**: [`Device::info`] (name, kind, memory, compute units, driver).
//!
//! No host pointer crosses the trait: kernels see [`Arg`]s, a buffer handle, a byte offset
//! and a layout. A CUDA device fits the same trait: `DeviceBuffer` wraps a `CUdeviceptr`, a
//! queue is a stream, an event a `CUevent`, and launch picks a function of a module compiled
//! once by NVRTC (see `docs/architecture.md`).

use crate::{Kernel, KernelRegistry, Layout};
use std::any::Any;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use tg_ir::WeightStore;
use thiserror::Error;

/// The family of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum DeviceKind {
    /// Host CPU.
    Cpu,
    /// An OpenCL device.
    OpenCl,
    /// A CUDA GPU.
    Cuda,
}

impl DeviceKind {
    /// Lower-case name (`cpu`, `opencl`, `cuda`), the prefix of device names.
    pub fn name(self) -> &'static str {
        match self {
            DeviceKind::Cpu => "cpu",
            DeviceKind::OpenCl => "opencl",
            DeviceKind::Cuda => "cuda",
        }
    }
}

/// What a device says about itself (`tg devices`).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct DeviceInfo {
    /// The name plans use (`cpu`, `opencl:0`).
    pub name: String,
    /// Family.
    pub kind: DeviceKind,
    /// The hardware or driver's name for it (e.g. the CPU model, the OpenCL device name).
    pub description: String,
    /// Memory the device can allocate in all, in bytes, when known.
    pub memory_bytes: Option<u64>,
    /// The largest single allocation, in bytes, when known.
    pub max_alloc_bytes: Option<u64>,
    /// Compute units (CPU: worker threads).
    pub compute_units: usize,
    /// Driver or platform and its version.
    pub driver: String,
}

/// Errors of the device layer (memory, transfers, synchronisation).
#[derive(Debug, Error)]
pub enum DeviceError {
    /// An allocation failed.
    #[error("{device}: cannot allocate {bytes} bytes{}", limit.map(|l| format!(" (limit {l} bytes)")).unwrap_or_default())]
    OutOfMemory {
        /// Device name.
        device: String,
        /// Bytes asked for.
        bytes: usize,
        /// The device's limit, when known.
        limit: Option<u64>,
    },
    /// A buffer of another device (or of another kind) was passed.
    #[error("{device}: buffer belongs to another device")]
    ForeignBuffer {
        /// Device name.
        device: String,
    },
    /// A byte range outside a buffer.
    #[error("{device}: bytes [{start}, {end}) outside a buffer of {len}")]
    Range {
        /// Device name.
        device: String,
        /// Start of the range.
        start: usize,
        /// End of the range.
        end: usize,
        /// Buffer size.
        len: usize,
    },
    /// A weight is missing from its store.
    #[error("weight '{0}' is not in the weight store")]
    MissingWeight(String),
    /// The driver reported an error.
    #[error("{device}: {detail}")]
    Driver {
        /// Device name.
        device: String,
        /// What it said.
        detail: String,
    },
}

static NEXT_DEVICE_ID: AtomicU64 = AtomicU64::new(1);

/// A process-unique id for a new device instance (buffers carry it, so a device refuses
/// another's buffers).
pub fn new_device_id() -> u64 {
    NEXT_DEVICE_ID.fetch_add(1, Ordering::Relaxed)
}

/// Memory owned by a device: an opaque handle, freed when dropped. Only the device that made
/// it can look inside ([`DeviceBuffer::memory`]).
pub struct DeviceBuffer {
    device: u64,
    bytes: usize,
    memory: Box<dyn Any + Send + Sync>,
}

impl DeviceBuffer {
    /// Wraps a device's own allocation (for device implementations).
    pub fn new(device: u64, bytes: usize, memory: Box<dyn Any + Send + Sync>) -> DeviceBuffer {
        DeviceBuffer { device, bytes, memory }
    }

    /// Size in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Id of the device that owns it.
    pub fn device_id(&self) -> u64 {
        self.device
    }

    /// The device's own allocation, if `device` made this buffer and it is a `T`.
    pub fn memory<T: 'static>(&self, device: u64) -> Option<&T> {
        if device != self.device {
            return None;
        }
        self.memory.downcast_ref::<T>()
    }
}

impl std::fmt::Debug for DeviceBuffer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceBuffer({} bytes on device #{})", self.bytes, self.device)
    }
}

/// A point in a queue ([`Device::record`]); opaque to everyone but its device.
pub struct Event(pub Box<dyn Any + Send + Sync>);

/// One kernel operand: a region of a buffer and the tensor's layout inside it (`layout.offset`
/// counts elements from `offset`).
#[derive(Clone, Copy)]
pub struct Arg<'a> {
    /// The buffer.
    pub buffer: &'a DeviceBuffer,
    /// Byte offset of the tensor's storage inside the buffer.
    pub offset: usize,
    /// Bytes of that storage.
    pub bytes: usize,
    /// Layout inside the storage.
    pub layout: &'a Layout,
}

/// What the runtime needs from a device (see the module docs). Adding a device adds one
/// folder implementing this trait and one registration line (`tg_runtime::devices`).
pub trait Device: Send + Sync {
    /// Name used in plans, e.g. `"cpu"` or `"opencl:0"`.
    fn name(&self) -> &str;

    /// Device family.
    fn kind(&self) -> DeviceKind;

    /// What the device says about itself.
    fn info(&self) -> DeviceInfo;

    /// Worker threads a kernel launch uses (kernel times depend on it; cost profiles are
    /// keyed by it). 1 unless the device says otherwise.
    fn threads(&self) -> usize {
        1
    }

    /// A string that changes whenever this device's kernel times may change (hardware,
    /// driver, kernel sources): profiles of this device are keyed by it.
    fn fingerprint(&self) -> String {
        self.info().description
    }

    /// The contracts of the device's kernels.
    fn registry(&self) -> &KernelRegistry;

    /// The device's launch configuration as JSON (GPU devices: the work-group and tile shapes
    /// of their kernels, `tg_gpu::Tuning`), if it has one. Part of what kernel times depend
    /// on: devices end their [`Device::fingerprint`] with ` | launch <key of it>`, so that
    /// the rest names the device alone (stored configurations are keyed by that rest).
    fn launch_config(&self) -> Option<String> {
        None
    }

    /// Replaces the launch configuration (`tg profile` measures candidates and stores the
    /// best; tests run kernels under each). Devices without one refuse.
    fn set_launch_config(&self, _config: &str) -> Result<(), String> {
        Err(format!("{}: has no launch configuration", self.name()))
    }

    /// `Ok(())` if this device can run `kernel` reading `inputs` and writing `output`,
    /// otherwise the reason (read from [`Device::registry`]).
    fn supports(&self, kernel: &Kernel, inputs: &[Layout], output: &Layout) -> Result<(), String> {
        self.registry().check(kernel, inputs, output).map_err(|r| r.to_string())
    }

    /// A buffer of `bytes` bytes (contents unspecified).
    fn alloc(&self, bytes: usize) -> Result<DeviceBuffer, DeviceError>;

    /// Weight `name` of `store`, readable by kernels of this device. Devices that copy it
    /// keep the copy for later calls with the same store and name.
    fn bind_weight(&self, store: &Arc<dyn WeightStore + Send + Sync>, name: &str) -> Result<Arc<DeviceBuffer>, DeviceError>;

    /// Copies host bytes into `dst` at byte `offset` (done when this returns).
    fn write(&self, dst: &DeviceBuffer, offset: usize, src: &[u8]) -> Result<(), DeviceError>;

    /// Copies bytes of `src` from byte `offset` into host memory, after all work queued
    /// before it.
    fn read(&self, src: &DeviceBuffer, offset: usize, dst: &mut [u8]) -> Result<(), DeviceError>;

    /// Copies `bytes` bytes between two buffers of this device, in queue order.
    fn copy(&self, src: &DeviceBuffer, src_offset: usize, dst: &DeviceBuffer, dst_offset: usize, bytes: usize) -> Result<(), DeviceError>;

    /// Sets `bytes` bytes of `dst` from `offset` to `value`, in queue order.
    fn fill(&self, dst: &DeviceBuffer, offset: usize, bytes: usize, value: u8) -> Result<(), DeviceError>;

    /// Number of queues (each runs its work in order; different queues may overlap).
    fn queues(&self) -> usize {
        1
    }

    /// An event marking everything queued on `queue` so far.
    fn record(&self, _queue: usize) -> Result<Event, DeviceError> {
        Ok(Event(Box::new(())))
    }

    /// Makes `queue` wait for `event` before running what is queued after this call.
    fn wait(&self, _queue: usize, _event: &Event) -> Result<(), DeviceError> {
        Ok(())
    }

    /// Waits until every queue is idle; returns the first asynchronous failure, if any.
    fn synchronize(&self) -> Result<(), DeviceError>;

    /// Runs `f` in the device's execution context (the CPU: inside its thread pool), so a
    /// whole plan pays that set-up once.
    fn scope(&self, f: &mut (dyn FnMut() + Send)) {
        f()
    }

    /// Queues one kernel on `queue`. Called only for kernels [`Device::supports`] accepted;
    /// the output never overlaps a live input.
    fn launch(&self, queue: usize, kernel: &Kernel, inputs: &[Arg], output: Arg) -> Result<(), String>;
}

/// The weights a device with its own memory has uploaded, by (store, name): what
/// [`Device::bind_weight`] keeps so that every plan binding the same weight of the same store
/// shares one copy. The store is held, so its address cannot be reused by another store while
/// an entry exists.
#[derive(Default)]
pub struct WeightUploads {
    entries: std::sync::Mutex<std::collections::HashMap<(usize, String), (Arc<dyn WeightStore + Send + Sync>, Arc<DeviceBuffer>)>>,
}

impl WeightUploads {
    /// The buffer of weight `name` of `store` on `device` (named in errors): the kept one, or
    /// a new one from `upload(bytes)` (which allocates and writes it), kept for later calls.
    pub fn get_or_upload(
        &self,
        device: &str,
        store: &Arc<dyn WeightStore + Send + Sync>,
        name: &str,
        upload: impl FnOnce(&[u8]) -> Result<DeviceBuffer, DeviceError>,
    ) -> Result<Arc<DeviceBuffer>, DeviceError> {
        let key = (Arc::as_ptr(store) as *const () as usize, name.to_string());
        let mut cache = self.entries.lock().map_err(|_| DeviceError::Driver { device: device.into(), detail: "weight cache lock poisoned".into() })?;
        if let Some((_, b)) = cache.get(&key) {
            return Ok(b.clone());
        }
        let bytes = store.bytes(name).ok_or_else(|| DeviceError::MissingWeight(name.into()))?;
        let buf = Arc::new(upload(bytes)?);
        cache.insert(key, (store.clone(), buf.clone()));
        Ok(buf)
    }
}

/// Checks that `[offset, offset + len)` lies inside `buf`.
pub fn check_range(device: &str, buf: &DeviceBuffer, offset: usize, len: usize) -> Result<(), DeviceError> {
    match offset.checked_add(len) {
        Some(end) if end <= buf.bytes() => Ok(()),
        _ => Err(DeviceError::Range { device: device.into(), start: offset, end: offset.saturating_add(len), len: buf.bytes() }),
    }
}

//! Device registration: the backends this build has, how to list their devices and open one
//! by name. Adding a device kind adds one entry to [`BACKENDS`].
//!
//! Names: `cpu`; `opencl` (the first OpenCL device) or `opencl:N` (the N-th over all
//! platforms, as `tg devices` lists them); `cuda` (the first CUDA GPU) or `cuda:N` (the
//! driver's N-th device).
#![warn(missing_docs)]

pub mod launch;

use std::sync::Arc;
use tg_runtime::{CpuDevice, Device, DeviceInfo, DeviceKind, KernelRegistry};
use thiserror::Error;

/// One device kind: how to list its devices and open one of them.
pub struct Backend {
    /// Kind name, the prefix of device names (`cpu`, `opencl`, `cuda`).
    pub kind: &'static str,
    /// The devices present, or why none can be listed.
    pub list: fn() -> Result<Vec<DeviceInfo>, String>,
    /// Opens device `index` of this kind; CPU devices run `threads` workers.
    pub open: fn(index: usize, threads: usize) -> Result<Arc<dyn Device>, String>,
    /// The kind's kernel registry (the same for all its devices).
    pub registry: fn() -> &'static KernelRegistry,
    /// Its [`DeviceKind`].
    pub device_kind: DeviceKind,
}

/// Every backend of this build (the one registration line per device kind).
pub const BACKENDS: &[Backend] = &[
    Backend { kind: "cpu", list: list_cpu, open: open_cpu, registry: tg_runtime::cpu_registry, device_kind: DeviceKind::Cpu },
    Backend { kind: "opencl", list: list_opencl, open: open_opencl, registry: tg_opencl::registry, device_kind: DeviceKind::OpenCl },
    Backend { kind: "cuda", list: tg_cuda::list, open: open_cuda, registry: tg_cuda::registry, device_kind: DeviceKind::Cuda },
];

fn list_cpu() -> Result<Vec<DeviceInfo>, String> {
    Ok(vec![CpuDevice::new(0)?.info()])
}

fn open_cpu(index: usize, threads: usize) -> Result<Arc<dyn Device>, String> {
    if index != 0 {
        return Err(format!("cpu:{index}: there is one CPU device, cpu"));
    }
    Ok(Arc::new(CpuDevice::new(threads)?))
}

fn list_opencl() -> Result<Vec<DeviceInfo>, String> {
    Ok(tg_opencl::list()?.into_iter().map(|f| f.info).collect())
}

fn open_opencl(index: usize, _threads: usize) -> Result<Arc<dyn Device>, String> {
    Ok(Arc::new(tg_opencl::OpenClDevice::open(index)?))
}

fn open_cuda(index: usize, _threads: usize) -> Result<Arc<dyn Device>, String> {
    Ok(Arc::new(tg_cuda::CudaDevice::open(index)?))
}

/// Errors finding or opening a device.
#[derive(Debug, Error)]
pub enum DevicesError {
    /// The name is not `KIND` or `KIND:N` for a kind of this build.
    #[error("unknown device '{name}' (kinds: {kinds}; present: {present})")]
    Unknown {
        /// The name given.
        name: String,
        /// The kinds of this build.
        kinds: String,
        /// The devices present.
        present: String,
    },
    /// The device could not be opened.
    #[error("{0}")]
    Open(String),
}

/// A listing of what is present: each kind with its devices or why it has none.
#[derive(Debug, Clone, serde::Serialize)]
pub struct KindListing {
    /// Kind name.
    pub kind: &'static str,
    /// Devices found.
    pub devices: Vec<DeviceInfo>,
    /// Why none could be listed (no driver, no platform), when so.
    pub error: Option<String>,
}

/// Every kind of this build with its devices.
pub fn list() -> Vec<KindListing> {
    BACKENDS
        .iter()
        .map(|b| match (b.list)() {
            Ok(devices) => KindListing { kind: b.kind, devices, error: None },
            Err(e) => KindListing { kind: b.kind, devices: vec![], error: Some(e) },
        })
        .collect()
}

/// Names of the devices present (`cpu, opencl:0`), for messages.
pub fn present() -> String {
    let names: Vec<String> = list().into_iter().flat_map(|k| k.devices.into_iter().map(|d| d.name)).collect();
    names.join(", ")
}

/// Parses `KIND` or `KIND:N`.
pub fn parse(name: &str) -> Option<(&'static Backend, usize)> {
    let (kind, index) = match name.split_once(':') {
        Some((k, n)) => (k, n.parse().ok()?),
        None => (name, 0),
    };
    BACKENDS.iter().find(|b| b.kind == kind).map(|b| (b, index))
}

/// Opens the device `name` (`cpu`, `opencl`, `opencl:N`, `cuda`, `cuda:N`); CPU devices run
/// `threads` workers (0 = all cores). An unknown name lists the devices present; an absent
/// device says what was looked for. A GPU device gets the launch configuration `tg profile`
/// stored for it ([`launch::apply_saved`]).
pub fn open(name: &str, threads: usize) -> Result<Arc<dyn Device>, DevicesError> {
    let name = name.trim();
    let Some((b, index)) = parse(name) else {
        return Err(DevicesError::Unknown { name: name.into(), kinds: BACKENDS.iter().map(|b| b.kind).collect::<Vec<_>>().join(", "), present: present() });
    };
    let dev = (b.open)(index, threads).map_err(|e| {
        // A device its backend does not list (no driver, no such index): say what is present
        // (unless the backend did).
        let listed = (b.list)().is_ok_and(|devs| devs.iter().any(|d| d.name == format!("{}:{index}", b.kind) || d.name == b.kind));
        if listed || e.contains("present:") {
            DevicesError::Open(e)
        } else {
            DevicesError::Open(format!("{e} (devices present: {})", present()))
        }
    })?;
    // A launch configuration `tg profile` measured for this device: a bad file is reported
    // and the device keeps its defaults.
    if let Err(e) = launch::apply_saved(&*dev) {
        eprintln!("warning: {}: stored launch configuration not used: {e}", dev.name());
    }
    Ok(dev)
}

/// Opens every device of a comma-separated list (`cpu,opencl`), in order.
pub fn open_list(names: &str, threads: usize) -> Result<Vec<Arc<dyn Device>>, DevicesError> {
    names.split(',').filter(|s| !s.trim().is_empty()).map(|n| open(n, threads)).collect()
}

/// The kind of a device name, if it parses.
pub fn kind_of(name: &str) -> Option<DeviceKind> {
    Some(parse(name)?.0.device_kind)
}

/// The kernel registry of a device kind of this build.
pub fn registry_of(kind: DeviceKind) -> Option<&'static KernelRegistry> {
    BACKENDS.iter().find(|b| b.device_kind == kind).map(|b| (b.registry)())
}

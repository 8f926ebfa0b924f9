//! The CUDA driver, loaded at run time through `cudarc` (dynamic loading): finding it without
//! panicking, its error names, and what each device says about itself.
//!
//! `cudarc` panics when a driver function is called and `libcuda` cannot be loaded, so
//! [`init`] checks for the library first (once per process) and every other function of this
//! crate calls the driver only after [`init`] succeeded.

use std::ffi::{c_char, c_int, CStr};
use std::sync::OnceLock;

use cudarc::driver::sys::{self, CUdevice, CUdevice_attribute, CUresult};

use crate::paths;

/// The driver's name and description of an error, e.g.
/// `CUDA_ERROR_OUT_OF_MEMORY (out of memory)`.
pub fn error_text(r: CUresult) -> String {
    let mut name: *const c_char = std::ptr::null();
    let mut desc: *const c_char = std::ptr::null();
    // SAFETY: valid out-pointers; the driver is loaded (every caller got `r` from it).
    let (rn, rd) = unsafe { (sys::cuGetErrorName(r, &mut name), sys::cuGetErrorString(r, &mut desc)) };
    let text = |ok: CUresult, p: *const c_char| {
        if ok == CUresult::CUDA_SUCCESS && !p.is_null() {
            // SAFETY: the driver returns a static NUL-terminated string.
            Some(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
        } else {
            None
        }
    };
    match (text(rn, name), text(rd, desc)) {
        (Some(n), Some(d)) => format!("{n} ({d})"),
        (Some(n), None) => n,
        _ => format!("{r:?}"),
    }
}

/// `Ok(())` on success, else `what` and the driver's error.
pub fn check(r: CUresult, what: impl FnOnce() -> String) -> Result<(), String> {
    if r == CUresult::CUDA_SUCCESS {
        Ok(())
    } else {
        Err(format!("{}: {}", what(), error_text(r)))
    }
}

/// Whether `r` is an error that leaves the context unusable (a kernel fault): every later
/// call of the context fails the same way until the process ends.
pub fn is_sticky(r: CUresult) -> bool {
    use CUresult::*;
    matches!(
        r,
        CUDA_ERROR_ILLEGAL_ADDRESS
            | CUDA_ERROR_LAUNCH_FAILED
            | CUDA_ERROR_ILLEGAL_INSTRUCTION
            | CUDA_ERROR_MISALIGNED_ADDRESS
            | CUDA_ERROR_INVALID_ADDRESS_SPACE
            | CUDA_ERROR_INVALID_PC
            | CUDA_ERROR_HARDWARE_STACK_ERROR
            | CUDA_ERROR_ASSERT
            | CUDA_ERROR_LAUNCH_TIMEOUT
            | CUDA_ERROR_ECC_UNCORRECTABLE
    )
}

/// The message for a missing driver library.
fn no_library() -> String {
    format!(
        "no CUDA driver: libcuda could not be loaded (looked for libcuda.so and libcuda.so.1 on the loader path: \
         LD_LIBRARY_PATH={}, then the system's library folders); install the NVIDIA driver, or put the folder that \
         holds its libcuda.so.1 (e.g. /usr/local/nvidia/lib64 in a container) on LD_LIBRARY_PATH",
        paths::ld_library_path()
    )
}

/// Loads the driver and calls `cuInit` (once per process); an error says what was looked for.
pub fn init() -> Result<(), String> {
    static INIT: OnceLock<Result<(), String>> = OnceLock::new();
    INIT.get_or_init(|| {
        // SAFETY: only tries to open the library (dlopen) under its usual names.
        if !unsafe { sys::is_culib_present() } {
            return Err(no_library());
        }
        // SAFETY: the library is present (checked above), so cudarc can resolve cuInit.
        let r = unsafe { sys::cuInit(0) };
        check(r, || {
            format!(
                "CUDA driver found but cuInit failed (no usable CUDA device? CUDA_VISIBLE_DEVICES={})",
                std::env::var("CUDA_VISIBLE_DEVICES").unwrap_or_else(|_| "(unset)".into())
            )
        })
    })
    .clone()
}

/// The driver's CUDA version (major, minor), e.g. (12, 9).
pub fn driver_version() -> Result<(i32, i32), String> {
    init()?;
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    check(unsafe { sys::cuDriverGetVersion(&mut v) }, || "cuDriverGetVersion".into())?;
    Ok((v / 1000, (v % 1000) / 10))
}

/// Number of CUDA devices.
pub fn device_count() -> Result<usize, String> {
    init()?;
    let mut n: c_int = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    check(unsafe { sys::cuDeviceGetCount(&mut n) }, || "cuDeviceGetCount".into())?;
    Ok(n.max(0) as usize)
}

/// What one device says about itself.
#[derive(Debug, Clone)]
pub struct Props {
    /// The driver's handle.
    pub device: CUdevice,
    /// The GPU's name, e.g. `NVIDIA H100 80GB HBM3`.
    pub name: String,
    /// Total memory in bytes.
    pub memory: u64,
    /// Compute capability (major, minor).
    pub cc: (i32, i32),
    /// Streaming multiprocessors.
    pub sms: usize,
    /// Most threads per block.
    pub max_threads: usize,
}

fn attribute(dev: CUdevice, a: CUdevice_attribute) -> Result<i32, String> {
    let mut v: c_int = 0;
    // SAFETY: a valid out-pointer and a device handle from cuDeviceGet.
    check(unsafe { sys::cuDeviceGetAttribute(&mut v, a, dev) }, || format!("cuDeviceGetAttribute({a:?})"))?;
    Ok(v)
}

/// Properties of device `ordinal` (which must exist).
pub fn props(ordinal: usize) -> Result<Props, String> {
    init()?;
    let mut dev: CUdevice = 0;
    // SAFETY: a valid out-pointer; the driver is initialised.
    check(unsafe { sys::cuDeviceGet(&mut dev, ordinal as c_int) }, || format!("cuDeviceGet({ordinal})"))?;
    let mut name = [0 as c_char; 256];
    // SAFETY: the buffer holds `len` bytes; the driver NUL-terminates within them.
    check(unsafe { sys::cuDeviceGetName(name.as_mut_ptr(), name.len() as c_int, dev) }, || "cuDeviceGetName".into())?;
    // SAFETY: NUL-terminated by the driver (the last byte is still 0 at worst).
    let name = unsafe { CStr::from_ptr(name.as_ptr()) }.to_string_lossy().trim().to_string();
    let mut memory = 0usize;
    // SAFETY: a valid out-pointer and device handle.
    check(unsafe { sys::cuDeviceTotalMem_v2(&mut memory, dev) }, || "cuDeviceTotalMem".into())?;
    use CUdevice_attribute::*;
    let cc = (attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?, attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?);
    let sms = attribute(dev, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)?.max(1) as usize;
    let max_threads = attribute(dev, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)?.max(1) as usize;
    Ok(Props { device: dev, name, memory: memory as u64, cc, sms, max_threads })
}

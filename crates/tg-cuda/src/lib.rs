//! The CUDA device: the shared GPU kernels of `tg-gpu`, compiled by NVRTC as CUDA C++, run
//! through the CUDA driver API, for every [`tg_runtime::Kernel`], with the CPU device's
//! semantics (the OpenCL device's twin: same kernels, contracts and launch geometry).
//!
//! Nothing CUDA is needed to build or test this crate: the driver (`libcuda`) is loaded at run
//! time through `cudarc` and NVRTC through `libloading`; without them [`list`] and
//! [`CudaDevice::open`] return errors saying what was looked for (never a panic).
//!
//! - [`CudaDevice`]: a [`tg_runtime::Device`] over one GPU — its
//!   primary context (made current on every call, from any thread), one non-blocking stream,
//!   `cuMemAlloc` buffers, transfers through a pinned staging buffer, CUDA events, and the
//!   kernel program loaded once with every function resolved at open. Launches follow
//!   `tg_gpu::plan` (parameters marshalled by `marshal.rs`), run-time kernel errors are read
//!   from a status word in [`tg_runtime::Device::synchronize`], and weights are uploaded once
//!   per (store, name).
//! - [`nvrtc`]: NVRTC found through `TG_NVRTC`, the loader path or known folders, with a
//!   program cache on disk (`$TG_CACHE_DIR` or `~/.cache/tensor-graphs`, then `cuda/`) keyed
//!   by the kernel source hash, the architecture and the NVRTC version.
//! - [`compile_report`]: every kernel compiled for given architectures and assembled by
//!   `ptxas -v` (registers, spills, shared memory, stack), and [`Signatures`]: every launch's
//!   parameters checked against the PTX — what CI checks without a GPU.
//!
//! `scripts/fetch_cuda_tools.py` downloads NVRTC and ptxas (PyPI wheels, never installed)
//! and prints the `TG_NVRTC` / `TG_PTXAS` lines to export.

#![warn(missing_docs)]

mod cache;
mod device;
mod driver;
mod marshal;
pub mod nvrtc;
pub mod paths;
mod program;
mod report;

pub use device::{list, registry, CudaDevice};
pub use nvrtc::{NvrtcError, Output};
pub use program::parse_arch;
pub use report::{compile_report, find_ptxas, CompileRow, Signatures};

/// The driver's CUDA version (major, minor), or why the driver cannot be used (no
/// `libcuda`, `cuInit` failed).
pub fn driver_version() -> Result<(i32, i32), String> {
    driver::driver_version()
}

//! The Tensor Graphs runtime.
//!
//! A compiled model is a [`Plan`]: plain data saying, for every step, which [`Kernel`] runs
//! on which device, reading and writing which buffers at which offsets with which layouts.
//! The runtime does not decide anything; it allocates each device's arena once, binds
//! weights and inputs, and executes the steps in order. Devices implement the small
//! [`Device`] trait; [`CpuDevice`] runs the SIMD kernels of `tg-kernels` on a thread pool.
#![warn(missing_docs)]

pub mod contract;
mod cpu;
pub mod device;
mod exec;
mod plan;
pub mod registry;

pub use contract::window_2d;
pub use cpu::{cpu_registry, CpuDevice};
pub use device::{Arg, Device, DeviceBuffer, DeviceError, DeviceInfo, DeviceKind, Event, WeightUploads};
pub use exec::{Executable, Span, StateSet};
pub use plan::{ArenaDesc, BufferDesc, Kernel, Layout, Plan, Step, Storage, TensorRef};
pub use registry::{broadcast_layout, select, work, Contract, KernelEntry, KernelRegistry, Operand, Refusal, Work, FAMILIES};

use thiserror::Error;

/// Errors raised while preparing or running a plan.
#[derive(Debug, Error)]
pub enum RuntimeError {
    /// A named input was not supplied, or has the wrong shape/dtype.
    #[error("input '{name}': {detail}")]
    Input {
        /// Input name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// A weight the plan reads is missing from the store or has the wrong size.
    #[error("weight '{name}': {detail}")]
    Weight {
        /// Weight name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// A device cannot run a step.
    #[error("step {step} ({kernel}) on {device}: {detail}")]
    Kernel {
        /// Step index.
        step: usize,
        /// Kernel name.
        kernel: String,
        /// Device name.
        device: String,
        /// What went wrong.
        detail: String,
    },
    /// The plan is malformed (buffer out of arena, unknown device...).
    #[error("invalid plan: {0}")]
    Plan(String),
    /// A kept state is missing, could not be allocated, or has another size than the plan's.
    #[error("state '{name}': {detail}")]
    State {
        /// State name.
        name: String,
        /// What is wrong.
        detail: String,
    },
    /// Memory for an arena could not be allocated.
    #[error("cannot allocate arena {arena} ({bytes} bytes) on {device}: {detail}")]
    Alloc {
        /// Arena index.
        arena: usize,
        /// Device name.
        device: String,
        /// Bytes requested.
        bytes: usize,
        /// The device's error (with its limit when known).
        detail: String,
    },
    /// A device operation (a transfer, a synchronisation) failed.
    #[error("{device}: {detail}")]
    Device {
        /// Device name.
        device: String,
        /// What went wrong.
        detail: String,
    },
}

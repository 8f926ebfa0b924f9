//! OpenCL kernels for every [`tg_runtime::Kernel`], with the CPU device's semantics.
//!
//! [`ClKernels::build`] compiles one OpenCL C program (the `.cl` sources under `src/cl/`)
//! once per context and creates every kernel object once; [`ClKernels::enqueue`] sets the
//! arguments of one kernel and enqueues it (non-blocking) on an in-order queue.
//! [`ClKernels::supports`] is the contract: what `enqueue` accepts.
//!
//! # Buffers
//! Operands are raw byte buffers ([`ClArg`]): f32/i32 elements are 4 bytes, Bool 1 byte
//! (0/1), quantized weights whole GGML blocks as stored in GGUF. A tensor starts
//! `byte_offset` bytes into its `mem` (an arena holds many buffers) and its layout offset is
//! in elements from there, as on the CPU. Offsets and strides are kernel arguments (no
//! sub-buffers, whose alignment rules do not fit arena offsets). Element accesses must be
//! aligned to the element size (intermediate buffers start at multiples of 64 bytes).
//!
//! # Run-time errors
//! Two kernels can meet bad data only at run time: [`Kernel::StoreRows`] (an offset that puts
//! the rows past the end of the state) and [`Kernel::Gather`] (an id outside the table). Both
//! check on the device, write nothing that would be out of range, and record the first such
//! error in a small status buffer; [`ClKernels::take_error`] reads (and clears) it — call it
//! after a run, where the CPU device would have returned the error from `launch`. The status
//! buffer belongs to the [`ClKernels`]: runs on several queues at once share it, and the first
//! error of any of them goes to whichever reads it first.
//!
//! # Numerics
//! f32 paths accumulate in f32 (interleaved partial sums); quantized weights are dequantized
//! bit-exactly as `tg_quant`'s reference dequantizers; `quantize_activations: true` quantizes
//! activation rows to Q8_0 (ggml's x86 rounding, as `tg_kernels`) or Q8_K and uses exact
//! integer block dot products with the CPU's float structure. The program is built with
//! `-cl-fp32-correctly-rounded-divide-sqrt` where the device supports it (the Q8 scales
//! `127 / amax` must be correctly rounded to match the CPU's quants).

#![warn(missing_docs)]

mod device;
mod launch;
mod shape;
mod supports;

pub use device::{list, registry, Found, OpenClDevice};

use std::collections::HashMap;
use std::sync::Mutex;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device, CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT};
use opencl3::kernel::Kernel as ClKernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::CL_BLOCKING;
use tg_runtime::{Kernel, Layout};

/// The OpenCL C sources of the kernel program, in build order.
pub const SOURCES: [(&str, &str); 5] = [
    ("common.cl", include_str!("cl/common.cl")),
    ("elementwise.cl", include_str!("cl/elementwise.cl")),
    ("quant.cl", include_str!("cl/quant.cl")),
    ("fused.cl", include_str!("cl/fused.cl")),
    ("window.cl", include_str!("cl/window.cl")),
];

/// Name of the kernel program (in errors).
pub const PROGRAM_NAME: &str = "tg_kernels";

/// Every kernel function of the program (created once by [`ClKernels::build`]).
pub const KERNEL_NAMES: [&str; 24] = [
    "tg_fill",
    "tg_iota",
    "tg_unary",
    "tg_binary",
    "tg_compare",
    "tg_where",
    "tg_cast",
    "tg_copy_rows",
    "tg_store_rows",
    "tg_reduce",
    "tg_mmq_f32",
    "tg_mmq_q8",
    "tg_gather",
    "tg_matmul",
    "tg_rms_norm",
    "tg_add_rms_norm",
    "tg_rope_neox",
    "tg_gelu",
    "tg_softmax",
    "tg_attention",
    "tg_conv",
    "tg_im2col",
    "tg_pool",
    "tg_group_norm",
];

/// Errors of building the program and its kernels.
#[derive(Debug, thiserror::Error)]
pub enum ClError {
    /// The OpenCL C compiler rejected a program.
    #[error("OpenCL program `{program}` failed to build ({code}); build log:\n{log}")]
    Build {
        /// Program name.
        program: String,
        /// The OpenCL error code.
        code: String,
        /// The compiler's full build log for the device.
        log: String,
    },
    /// A kernel object could not be created.
    #[error("OpenCL kernel `{kernel}` of program `{program}` cannot be created: {code}")]
    Kernel {
        /// Program name.
        program: String,
        /// Kernel function name.
        kernel: String,
        /// The OpenCL error code.
        code: String,
    },
    /// Another OpenCL call failed.
    #[error("OpenCL call failed: {what}: {code}")]
    Api {
        /// What was being done.
        what: String,
        /// The OpenCL error code.
        code: String,
    },
}

fn api(what: &str) -> impl FnOnce(opencl3::error_codes::ClError) -> ClError + '_ {
    move |e| ClError::Api { what: what.to_string(), code: e.to_string() }
}

/// One operand or result of a launch: a byte buffer, where the tensor's buffer starts in it,
/// and the tensor's layout (offset in elements from `byte_offset`).
pub struct ClArg<'a> {
    /// The OpenCL buffer (e.g. an arena, or a weight).
    pub mem: &'a Buffer<u8>,
    /// Byte offset of the tensor's buffer inside `mem`.
    pub byte_offset: usize,
    /// Layout of the tensor in its buffer.
    pub layout: &'a Layout,
}

/// Builds an OpenCL program from `sources` for `device`; a compile error returns
/// [`ClError::Build`] with the program name and the full build log.
pub fn build_program(context: &Context, device: &Device, name: &str, sources: &[&str], options: &str) -> Result<Program, ClError> {
    // One joined string: cl3 0.13's create_program_with_source passes `&str` fat pointers as
    // the C string array, which is only right for a single source.
    let joined = sources.join("\n");
    let mut program = Program::create_from_source(context, &joined).map_err(|e| ClError::Api { what: format!("create program `{name}`"), code: e.to_string() })?;
    if let Err(e) = program.build(&[device.id()], options) {
        let log = program.get_build_log(device.id()).unwrap_or_else(|l| format!("(no build log: {l})"));
        return Err(ClError::Build { program: name.to_string(), code: e.to_string(), log });
    }
    Ok(program)
}

/// The built kernel program and its kernel objects for one device; shareable between threads
/// (each kernel object is locked while its arguments are set and it is enqueued).
pub struct ClKernels {
    _program: Program,
    kernels: HashMap<&'static str, Mutex<ClKernel>>,
    status: Mutex<Buffer<u8>>,
    local_mem: u64,
    max_group: usize,
}

/// Bytes of the status buffer: four i32 words (code, three details).
const STATUS_BYTES: usize = 16;

impl ClKernels {
    /// Builds the program for `device` (once; keep the result for the context's lifetime)
    /// and creates every kernel.
    pub fn build(context: &Context, device: &Device) -> Result<ClKernels, ClError> {
        let mut options = String::from("-cl-std=CL1.2");
        let fp = device.single_fp_config().map_err(api("device fp config"))?;
        if fp & CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT != 0 {
            options.push_str(" -cl-fp32-correctly-rounded-divide-sqrt");
        }
        let sources: Vec<&str> = SOURCES.iter().map(|(_, s)| *s).collect();
        let program = build_program(context, device, PROGRAM_NAME, &sources, &options)?;
        let mut kernels = HashMap::new();
        for name in KERNEL_NAMES {
            let k = ClKernel::create(&program, name).map_err(|e| ClError::Kernel { program: PROGRAM_NAME.into(), kernel: name.into(), code: e.to_string() })?;
            kernels.insert(name, Mutex::new(k));
        }
        let mut zeros = [0u8; STATUS_BYTES];
        // SAFETY: the host pointer is valid for STATUS_BYTES bytes and only copied from.
        let status =
            unsafe { Buffer::<u8>::create(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, STATUS_BYTES, zeros.as_mut_ptr().cast()) }.map_err(api("create status buffer"))?;
        let local_mem = device.local_mem_size().map_err(api("device local memory size"))?;
        let max_group = device.max_work_group_size().map_err(api("device max work-group size"))?;
        Ok(ClKernels { _program: program, kernels, status: Mutex::new(status), local_mem, max_group })
    }

    /// The contract: `Ok(())` if [`ClKernels::enqueue`] can run `kernel` reading `ins` and
    /// writing `out`, else the reason.
    pub fn supports(kernel: &Kernel, ins: &[Layout], out: &Layout) -> Result<(), String> {
        supports::supports(kernel, ins, out)
    }

    /// Enqueues `kernel` (non-blocking) on the in-order `queue`, reading `ins` and writing
    /// `out`. Checks the contract and that every tensor lies inside its buffer first.
    pub fn enqueue(&self, queue: &CommandQueue, kernel: &Kernel, ins: &[ClArg], out: ClArg) -> Result<(), String> {
        let layouts: Vec<Layout> = ins.iter().map(|a| a.layout.clone()).collect();
        supports::supports(kernel, &layouts, out.layout).map_err(|e| format!("{}: {e}", kernel.name()))?;
        for (i, a) in ins.iter().chain(std::iter::once(&out)).enumerate() {
            let need = a.layout.bytes_needed().ok_or_else(|| format!("{}: operand {i} reaches before its offset", kernel.name()))?;
            let size = a.mem.size().map_err(|e| format!("{}: buffer size of operand {i}: {e}", kernel.name()))?;
            if a.byte_offset.checked_add(need).is_none_or(|end| end > size) {
                return Err(format!("{}: operand {i} needs {need} bytes at byte {} of a {size}-byte buffer", kernel.name(), a.byte_offset));
            }
        }
        launch::enqueue(self, queue, kernel, ins, &out).map_err(|e| format!("{}: {e}", kernel.name()))
    }

    /// Reads (blocking: waits for `queue`) and clears the first run-time error recorded by a
    /// kernel since the last call: a [`Kernel::StoreRows`] offset past the state's end, or a
    /// [`Kernel::Gather`] id outside the table.
    pub fn take_error(&self, queue: &CommandQueue) -> Result<(), String> {
        let mut status = self.status.lock().map_err(|_| "status buffer lock poisoned".to_string())?;
        let mut words = [0u8; STATUS_BYTES];
        // SAFETY: blocking read into a host array of the buffer's size.
        unsafe { queue.enqueue_read_buffer(&status, CL_BLOCKING, 0, &mut words, &[]) }.map_err(|e| format!("reading the status buffer: {e}"))?;
        let w = |i: usize| i32::from_le_bytes([words[4 * i], words[4 * i + 1], words[4 * i + 2], words[4 * i + 3]]);
        let msg = match w(0) {
            0 => return Ok(()),
            1 => format!("store_rows: rows {}..{} past the state's {} along the axis", w(1), w(1) as i64 + w(2) as i64, w(3)),
            2 => format!("gather: id {} at position {} outside the table's {} rows", w(1), w(2), w(3)),
            c => format!("unknown kernel error code {c}"),
        };
        let zeros = [0u8; STATUS_BYTES];
        // SAFETY: blocking write from a host array of the buffer's size.
        unsafe { queue.enqueue_write_buffer(&mut status, CL_BLOCKING, 0, &zeros, &[]) }.map_err(|e| format!("clearing the status buffer: {e}"))?;
        Err(msg)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn kernels_are_send_and_sync() {
        fn check<T: Send + Sync>() {}
        check::<super::ClKernels>();
    }
}

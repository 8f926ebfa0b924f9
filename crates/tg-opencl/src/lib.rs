//! The OpenCL device: the shared GPU kernels of `tg-gpu`, built as OpenCL C, for every
//! [`tg_runtime::Kernel`], with the CPU device's semantics.
//!
//! [`ClKernels::build`] compiles the program (`tg_gpu::source(Target::OpenCl)`: the OpenCL
//! dialect header and the kernel files the CUDA device compiles too) once per context and
//! creates every kernel object once; [`ClKernels::enqueue`] turns one plan step into its
//! launches (`tg_gpu::plan`), sets their arguments and enqueues them (non-blocking) on an
//! in-order queue. [`ClKernels::supports`] is the contract (`tg_gpu::supports`).
//!
//! # Buffers
//! Operands are raw byte buffers ([`ClArg`]): f32/i32 elements are 4 bytes, Bool 1 byte
//! (0/1), quantized weights whole GGML blocks as stored in GGUF. A tensor starts
//! `byte_offset` bytes into its `mem` (an arena holds many buffers) and its layout offset is
//! in elements from there, as on the CPU. Offsets and strides are kernel arguments (no
//! sub-buffers, whose alignment rules do not fit arena offsets). Element accesses must be
//! aligned to the element size (intermediate buffers start at multiples of 64 bytes).
//! Launches of one step that pass data to each other (the q8 numerics quantize the
//! activations first) use a scratch buffer the [`ClKernels`] owns and grows; a step's
//! launches are enqueued under its lock, so concurrent steps never interleave there.
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
//! f32 paths accumulate in f32 (per work-item partial sums, then work-group reductions);
//! quantized weights are dequantized bit-exactly as `tg_quant`'s reference dequantizers;
//! `quantize_activations: true` quantizes activation rows to Q8_0 (ggml's x86 rounding, as
//! `tg_kernels`) or Q8_K first. The program is built with
//! `-cl-fp32-correctly-rounded-divide-sqrt` where the device supports it (the Q8 scales
//! `127 / amax` must be correctly rounded to match the CPU's quants).

#![warn(missing_docs)]

mod device;

pub use device::{list, registry, Found, OpenClDevice};

use std::collections::HashMap;
use std::sync::Mutex;

use opencl3::command_queue::CommandQueue;
use opencl3::context::Context;
use opencl3::device::{Device, CL_FP_CORRECTLY_ROUNDED_DIVIDE_SQRT};
use opencl3::kernel::Kernel as ClKernel;
use opencl3::memory::{Buffer, ClMem, CL_MEM_COPY_HOST_PTR, CL_MEM_READ_WRITE};
use opencl3::program::Program;
use opencl3::types::{cl_mem, CL_BLOCKING};
use tg_gpu::{KArg, Target, Tuning};
use tg_runtime::{Kernel, Layout};

pub use tg_gpu::{KERNEL_NAMES, PROGRAM_NAME};

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
    /// Scratch memory of multi-launch steps (grown on demand); locked while a step enqueues.
    scratch: Mutex<Option<Buffer<u8>>>,
    tuning: Mutex<Tuning>,
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
        let source = tg_gpu::source(Target::OpenCl);
        let program = build_program(context, device, PROGRAM_NAME, &[&source], &options)?;
        let mut kernels = HashMap::new();
        for name in KERNEL_NAMES {
            let k = ClKernel::create(&program, name).map_err(|e| ClError::Kernel { program: PROGRAM_NAME.into(), kernel: name.into(), code: e.to_string() })?;
            kernels.insert(name, Mutex::new(k));
        }
        let mut zeros = [0u8; STATUS_BYTES];
        // SAFETY: the host pointer is valid for STATUS_BYTES bytes and only copied from.
        let status =
            unsafe { Buffer::<u8>::create(context, CL_MEM_READ_WRITE | CL_MEM_COPY_HOST_PTR, STATUS_BYTES, zeros.as_mut_ptr().cast()) }.map_err(api("create status buffer"))?;
        let max_group = device.max_work_group_size().map_err(api("device max work-group size"))?;
        // Work-items of a CPU device are SIMD lanes of its cores: a work-item per weight row.
        let cpu = device.dev_type().map_err(api("device type"))? & opencl3::device::CL_DEVICE_TYPE_CPU != 0;
        let tuning = if cpu { Tuning::cpu_like() } else { Tuning::default() };
        Ok(ClKernels {
            _program: program,
            kernels,
            status: Mutex::new(status),
            scratch: Mutex::new(None),
            tuning: Mutex::new(tuning),
            max_group,
        })
    }

    /// The contract: `Ok(())` if [`ClKernels::enqueue`] can run `kernel` reading `ins` and
    /// writing `out`, else the reason.
    pub fn supports(kernel: &Kernel, ins: &[Layout], out: &Layout) -> Result<(), String> {
        tg_gpu::supports(kernel, ins, out)
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

    /// Enqueues `kernel` (non-blocking) on the in-order `queue`, reading `ins` and writing
    /// `out`. Checks the contract and that every tensor lies inside its buffer first.
    pub fn enqueue(&self, queue: &CommandQueue, kernel: &Kernel, ins: &[ClArg], out: ClArg) -> Result<(), String> {
        let layouts: Vec<Layout> = ins.iter().map(|a| a.layout.clone()).collect();
        tg_gpu::supports(kernel, &layouts, out.layout).map_err(|e| format!("{}: {e}", kernel.name()))?;
        for (i, a) in ins.iter().chain(std::iter::once(&out)).enumerate() {
            let need = a.layout.bytes_needed().ok_or_else(|| format!("{}: operand {i} reaches before its offset", kernel.name()))?;
            let size = a.mem.size().map_err(|e| format!("{}: buffer size of operand {i}: {e}", kernel.name()))?;
            if a.byte_offset.checked_add(need).is_none_or(|end| end > size) {
                return Err(format!("{}: operand {i} needs {need} bytes at byte {} of a {size}-byte buffer", kernel.name(), a.byte_offset));
            }
        }
        fn tensor<'a>(a: &ClArg<'a>) -> tg_gpu::Tensor<'a, Buffer<u8>> {
            tg_gpu::Tensor { mem: a.mem, byte_offset: a.byte_offset, layout: a.layout }
        }
        let tins: Vec<tg_gpu::Tensor<Buffer<u8>>> = ins.iter().map(tensor).collect();
        let tuning = self.tuning();
        let plan = tg_gpu::plan(kernel, &tins, &tensor(&out), &tuning).map_err(|e| format!("{}: {e}", kernel.name()))?;
        let mut scratch = self.scratch.lock().map_err(|_| "scratch lock poisoned".to_string())?;
        if plan.scratch_bytes > 0 && scratch.as_ref().and_then(|s| s.size().ok()).is_none_or(|have| have < plan.scratch_bytes) {
            let bytes = plan.scratch_bytes.next_power_of_two();
            let ctx = queue.context().map_err(|e| format!("{}: the queue's context: {e}", kernel.name()))?;
            // SAFETY: a valid context, no host pointer; the buffer owns the new cl_mem.
            let mem = unsafe { opencl3::memory::create_buffer(ctx, CL_MEM_READ_WRITE, bytes, std::ptr::null_mut()) }
                .map_err(|e| format!("{}: cannot allocate {bytes} bytes of scratch: {e}", kernel.name()))?;
            *scratch = Some(Buffer::new(mem));
        }
        let scratch_mem = scratch.as_ref().map(|b| b.get());
        for launch in &plan.launches {
            self.run(queue, launch, scratch_mem).map_err(|e| format!("{}: {e}", kernel.name()))?;
        }
        Ok(())
    }

    /// Sets the arguments of one launch and enqueues it.
    fn run(&self, queue: &CommandQueue, launch: &tg_gpu::Launch<Buffer<u8>>, scratch: Option<cl_mem>) -> Result<(), String> {
        let name = launch.kernel;
        if launch.group_size > self.max_group {
            return Err(format!("kernel {name}: work-groups of {} exceed the device's {}", launch.group_size, self.max_group));
        }
        let k = self.kernels.get(name).ok_or_else(|| format!("kernel {name} missing from the program"))?;
        let k = k.lock().map_err(|_| format!("kernel {name}: lock poisoned"))?;
        let status = self.status.lock().map_err(|_| "status buffer lock poisoned".to_string())?.get();
        for (i, a) in launch.args.iter().enumerate() {
            let i = i as u32;
            // SAFETY: each argument has the size and type of the kernel's parameter `i` (the
            // signatures in tg-gpu's kernels); buffers outlive the enqueue (OpenCL retains them).
            let r = unsafe {
                match a {
                    KArg::Buf(b) => k.set_arg(i, &b.get()),
                    KArg::Status => k.set_arg(i, &status),
                    KArg::Scratch => match scratch {
                        Some(m) => k.set_arg(i, &m),
                        None => return Err(format!("kernel {name}: argument {i} is the scratch buffer, which the step did not size")),
                    },
                    KArg::I64(v) => k.set_arg(i, v),
                    KArg::I32(v) => k.set_arg(i, v),
                    KArg::U32(v) => k.set_arg(i, v),
                    KArg::F32(v) => k.set_arg(i, v),
                    KArg::Dims(v) => k.set_arg(i, v),
                }
            };
            r.map_err(|e| format!("kernel {name}: argument {i}: {e}"))?;
        }
        let g = launch.group_size;
        let global = [launch.groups[0] * g, launch.groups[1], launch.groups[2]];
        let local = [g, 1, 1];
        // SAFETY: three-entry global and local sizes; arguments are set.
        unsafe { queue.enqueue_nd_range_kernel(k.get(), 3, std::ptr::null(), global.as_ptr(), local.as_ptr(), &[]) }
            .map_err(|e| format!("kernel {name}: enqueue over {global:?} in groups of {g}: {e}"))?;
        Ok(())
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
        let Some(msg) = tg_gpu::status_message([w(0), w(1), w(2), w(3)]) else { return Ok(()) };
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

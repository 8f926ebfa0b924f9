use crate::{Kernel, Layout};

/// The family of a device.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    /// Host CPU.
    Cpu,
    /// An OpenCL device.
    OpenCl,
    /// A CUDA GPU.
    Cuda,
}

/// What the runtime needs from a device: a name, whether it can run a kernel on given
/// layouts, and a way to run it. Memory is one arena per device, allocated by the
/// executor at the size the plan says; adding a device adds one module implementing this
/// trait, not an edit in every file.
pub trait Device: Send + Sync {
    /// Display name, e.g. `"cpu"`.
    fn name(&self) -> &str;

    /// Device family.
    fn kind(&self) -> DeviceKind;

    /// Worker threads a kernel launch uses (kernel times depend on it; cost profiles are
    /// keyed by it). 1 unless the device says otherwise.
    fn threads(&self) -> usize {
        1
    }

    /// `Ok(())` if this device can run `kernel` reading `inputs` and writing `output`,
    /// otherwise the reason (used by the compiler when choosing kernels and by the plan
    /// validator).
    fn supports(&self, kernel: &Kernel, inputs: &[Layout], output: &Layout) -> Result<(), String>;

    /// Runs `f` in the device's execution context (for the CPU: inside its thread pool),
    /// so a whole plan pays that set-up once.
    fn scope(&self, f: &mut (dyn FnMut() + Send));

    /// Runs one kernel. `inputs` and `output` are the byte ranges of the buffers the
    /// layouts index into. Called only for kernels `supports` accepted.
    fn launch(&self, kernel: &Kernel, inputs: &[(&[u8], &Layout)], output: (&mut [u8], &Layout)) -> Result<(), String>;
}

//! Kernel arguments as `cuLaunchKernel` takes them: one value per parameter, each kept alive
//! while the launch is enqueued, and an array of pointers to them.
//!
//! Sizes follow the kernels' C signatures (`dialect_cuda.h`): a buffer is its `CUdeviceptr`
//! (8 bytes; its byte base follows as a separate `i64` parameter, as `tg_gpu::plan` lists
//! it), `int`/`uint`/`float` 4 bytes, `long` 8, `dims8` 64 bytes by value. The same code
//! builds the launches and [`crate::Signatures`] checks it against the PTX.

use std::ffi::c_void;

use tg_gpu::KArg;

/// One kernel parameter's value.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Param {
    /// A device pointer (`CUdeviceptr`).
    Ptr(u64),
    /// `int`.
    I32(i32),
    /// `unsigned int`.
    U32(u32),
    /// `long long`.
    I64(i64),
    /// `float`.
    F32(f32),
    /// `dims8`: eight `long long` by value.
    Dims([i64; 8]),
}

impl Param {
    /// Bytes the kernel reads for this parameter.
    pub fn size(&self) -> usize {
        match self {
            Param::Ptr(_) | Param::I64(_) => 8,
            Param::I32(_) | Param::U32(_) | Param::F32(_) => 4,
            Param::Dims(_) => 64,
        }
    }

    /// Whether the parameter is a float (PTX `.f32`).
    pub fn is_float(&self) -> bool {
        matches!(self, Param::F32(_))
    }

    /// A pointer to the value's bytes, as `cuLaunchKernel`'s `kernelParams` holds them.
    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        match self {
            Param::Ptr(v) => (v as *mut u64).cast(),
            Param::I32(v) => (v as *mut i32).cast(),
            Param::U32(v) => (v as *mut u32).cast(),
            Param::I64(v) => (v as *mut i64).cast(),
            Param::F32(v) => (v as *mut f32).cast(),
            Param::Dims(v) => v.as_mut_ptr().cast(),
        }
    }
}

/// The parameters of one launch: `ptr` gives a buffer's device pointer (its start: the byte
/// base is a parameter of its own), `status` the status words, `scratch` the scratch buffer
/// when the step has one.
pub fn marshal<M>(kernel: &str, args: &[KArg<M>], ptr: impl Fn(&M) -> u64, status: u64, scratch: Option<u64>) -> Result<Vec<Param>, String> {
    args.iter()
        .enumerate()
        .map(|(i, a)| {
            Ok(match *a {
                KArg::Buf(m) => Param::Ptr(ptr(m)),
                KArg::Status => Param::Ptr(status),
                KArg::Scratch => Param::Ptr(scratch.ok_or_else(|| format!("kernel {kernel}: argument {i} is the scratch buffer, which the step did not size"))?),
                KArg::I32(v) => Param::I32(v),
                KArg::U32(v) => Param::U32(v),
                KArg::I64(v) => Param::I64(v),
                KArg::F32(v) => Param::F32(v),
                KArg::Dims(v) => Param::Dims(v),
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_point_at_their_bytes() {
        let buf = 7u8;
        let args: Vec<KArg<u8>> =
            vec![KArg::Buf(&buf), KArg::I64(-3), KArg::Status, KArg::Scratch, KArg::I32(-5), KArg::U32(6), KArg::F32(1.5), KArg::Dims([1, 2, 3, 4, 5, 6, 7, 8])];
        let mut p = marshal("k", &args, |&m| 0x1000 + m as u64, 0x2000, Some(0x3000)).unwrap();
        assert_eq!(p.iter().map(Param::size).collect::<Vec<_>>(), [8, 8, 8, 8, 4, 4, 4, 64]);
        let ptrs: Vec<*mut c_void> = p.iter_mut().map(Param::as_mut_ptr).collect();
        // SAFETY: each pointer points at a live value of the size read.
        unsafe {
            assert_eq!(*(ptrs[0] as *const u64), 0x1007);
            assert_eq!(*(ptrs[1] as *const i64), -3);
            assert_eq!(*(ptrs[2] as *const u64), 0x2000);
            assert_eq!(*(ptrs[3] as *const u64), 0x3000);
            assert_eq!(*(ptrs[4] as *const i32), -5);
            assert_eq!(*(ptrs[5] as *const u32), 6);
            assert_eq!(*(ptrs[6] as *const f32), 1.5);
            let d = std::slice::from_raw_parts(ptrs[7] as *const u8, 64);
            assert_eq!(&d[..8], &1i64.to_ne_bytes());
            assert_eq!(&d[56..], &8i64.to_ne_bytes());
        }
        let err = marshal("k", &args, |&m| m as u64, 0, None).unwrap_err();
        assert!(err.contains("argument 3 is the scratch buffer"), "{err}");
    }
}

//! Instruction-set selection: runtime feature detection, the `TG_ISA` override, and the
//! trampolines that enter a `#[target_feature]` context for a generic kernel body.

use std::sync::OnceLock;

use crate::dequant::SimdDecode;
use crate::simd::Scalar;

/// A SIMD code path. Every kernel exists in all three; the best one the CPU supports is used
/// unless `TG_ISA` says otherwise.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Isa {
    /// Portable code (no `unsafe` intrinsics; the compiler may auto-vectorize it for the
    /// target's baseline). Always available.
    Scalar,
    /// AVX2 + FMA + F16C (256-bit vectors).
    Avx2,
    /// AVX-512 F/BW/VL/DQ + FMA + F16C (512-bit vectors, mask registers).
    Avx512,
}

impl Isa {
    /// All paths, slowest first.
    pub const ALL: [Isa; 3] = [Isa::Scalar, Isa::Avx2, Isa::Avx512];

    /// The lower-case name used by `TG_ISA` (`"scalar"`, `"avx2"`, `"avx512"`).
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Parses a `TG_ISA` value (case-insensitive; `avx-512` and `avx512f` are accepted too).
    pub fn from_name(s: &str) -> Option<Isa> {
        match s.trim().to_ascii_lowercase().as_str() {
            "scalar" | "none" | "generic" => Some(Isa::Scalar),
            "avx2" => Some(Isa::Avx2),
            "avx512" | "avx-512" | "avx512f" => Some(Isa::Avx512),
            _ => None,
        }
    }

    /// Whether this CPU can run the path (checked at run time, cached by std).
    pub fn is_available(self) -> bool {
        match self {
            Isa::Scalar => true,
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => {
                is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c")
            }
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512 => {
                Isa::Avx2.is_available()
                    && is_x86_feature_detected!("avx512f")
                    && is_x86_feature_detected!("avx512bw")
                    && is_x86_feature_detected!("avx512vl")
                    && is_x86_feature_detected!("avx512dq")
            }
            #[cfg(not(target_arch = "x86_64"))]
            _ => false,
        }
    }

    /// The best path this CPU supports, ignoring `TG_ISA`.
    pub fn detect() -> Isa {
        Isa::ALL.iter().rev().copied().find(|i| i.is_available()).unwrap_or(Isa::Scalar)
    }

    /// Every path this CPU supports, slowest first (what tests iterate over).
    pub fn available() -> Vec<Isa> {
        Isa::ALL.iter().copied().filter(|i| i.is_available()).collect()
    }
}

impl std::fmt::Display for Isa {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

static SELECTED: OnceLock<Isa> = OnceLock::new();

/// The path every public kernel uses: [`Isa::detect`], lowered by the environment variable
/// `TG_ISA=scalar|avx2|avx512` if set. A request for a path the CPU lacks falls back to the best
/// available one (with a warning on stderr); an unparsable value is ignored with a warning.
/// Computed once per process.
pub fn isa() -> Isa {
    *SELECTED.get_or_init(|| {
        let best = Isa::detect();
        match std::env::var("TG_ISA") {
            Ok(v) if !v.trim().is_empty() => match Isa::from_name(&v) {
                Some(req) if req.is_available() => req,
                Some(req) => {
                    eprintln!("tg-kernels: TG_ISA={req} is not supported by this CPU; using {best}");
                    best
                }
                None => {
                    eprintln!("tg-kernels: ignoring unknown TG_ISA={v:?}; using {best}");
                    best
                }
            },
            _ => best,
        }
    })
}

/// A one-line description of the CPU features relevant to the kernels, for logs and benches.
pub fn cpu_features() -> String {
    #[cfg(target_arch = "x86_64")]
    {
        let mut names = Vec::new();
        macro_rules! probe {
            ($($f:tt),*) => {$(
                if is_x86_feature_detected!($f) {
                    names.push($f);
                }
            )*};
        }
        probe!("avx2", "fma", "f16c", "avx512f", "avx512bw", "avx512vl", "avx512dq", "avx512vnni", "avx512bf16");
        format!("selected={} features=[{}]", isa(), names.join(","))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        format!("selected={}", isa())
    }
}

/// A kernel body generic over the SIMD implementation. [`run_on`] instantiates it inside a
/// function compiled with the matching target features, so every `#[inline(always)]` helper
/// and intrinsic it reaches is inlined and compiled for that ISA.
pub(crate) trait IsaTask {
    /// What the body returns.
    type Output;
    /// The body.
    ///
    /// # Safety
    /// The CPU must support the instruction set `S` is built on. Implementations must be
    /// `#[inline(always)]` so that they are compiled inside the trampoline.
    unsafe fn run<S: SimdDecode>(self) -> Self::Output;
}

/// Runs `task` on `isa`. The caller must have checked `isa.is_available()` (every public entry
/// point does, via [`checked`]).
#[inline]
pub(crate) fn run_on<T: IsaTask>(isa: Isa, task: T) -> T::Output {
    debug_assert!(isa.is_available());
    match isa {
        // SAFETY: availability was checked by the public entry point.
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 => unsafe { tramp_avx512(task) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { tramp_avx2(task) },
        // SAFETY: the portable path needs nothing.
        _ => unsafe { task.run::<Scalar>() },
    }
}

/// Returns `isa` if this CPU supports it.
pub(crate) fn checked(isa: Isa) -> Result<Isa, crate::KernelError> {
    if isa.is_available() {
        Ok(isa)
    } else {
        Err(crate::KernelError::IsaUnavailable(isa))
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512dq,avx2,fma,f16c")]
unsafe fn tramp_avx512<T: IsaTask>(task: T) -> T::Output {
    // SAFETY: forwarded contract of `run_on`.
    unsafe { task.run::<crate::simd::Avx512>() }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn tramp_avx2<T: IsaTask>(task: T) -> T::Output {
    // SAFETY: forwarded contract of `run_on`.
    unsafe { task.run::<crate::simd::Avx2>() }
}

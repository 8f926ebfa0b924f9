//! The kernel program compiled by NVRTC (`tg_gpu::source(Target::Cuda)`), through the disk
//! cache: a CUBIN for a device's real architecture, or PTX for a virtual one.

use tg_gpu::Target;

use crate::cache;
use crate::nvrtc::{self, Nvrtc, NvrtcError, Output};
use crate::paths;

/// An architecture name: `sm_XX` (or `sm_XXa`), `compute_XX`, or plain `XX`; returns the
/// number and any suffix letter (`"90", "a"`).
pub fn parse_arch(arch: &str) -> Result<(u32, String), String> {
    let a = arch.trim();
    let rest = a.strip_prefix("sm_").or_else(|| a.strip_prefix("compute_")).unwrap_or(a);
    let digits: String = rest.chars().take_while(|c| c.is_ascii_digit()).collect();
    let suffix = &rest[digits.len()..];
    match digits.parse::<u32>() {
        Ok(n) if n >= 10 && (suffix.is_empty() || suffix == "a" || suffix == "f") => Ok((n, suffix.to_string())),
        _ => Err(format!("`{arch}` is not a CUDA architecture (sm_80, sm_90, sm_90a, …)")),
    }
}

/// The program compiled for `target` (`sm_XX` → CUBIN, `compute_XX` → PTX), from the disk
/// cache when a good entry is there (else compiled and stored).
pub fn program(nv: &Nvrtc, target: &str, output: Output) -> Result<Vec<u8>, NvrtcError> {
    let path = cache::entry_path(&paths::program_cache_dir(), tg_gpu::source_hash(Target::Cuda), target, nv.version(), output);
    if let Some(bytes) = cache::load(&path) {
        if !bytes.is_empty() {
            return Ok(bytes);
        }
    }
    let bytes = nv.compile(tg_gpu::PROGRAM_NAME, &tg_gpu::source(Target::Cuda), target, &nvrtc::OPTIONS, output)?;
    // The cache only saves time: a folder that cannot be written is no error.
    let _ = cache::store(&path, &bytes);
    Ok(bytes)
}

/// Forgets the cached program for `target` (after the driver refused to load it).
pub fn forget(nv: &Nvrtc, target: &str, output: Output) {
    cache::remove(&cache::entry_path(&paths::program_cache_dir(), tg_gpu::source_hash(Target::Cuda), target, nv.version(), output));
}

/// The PTX of the program for `arch` (`sm_90` → `compute_90`), as text without the NUL.
pub fn ptx(nv: &Nvrtc, arch: &str) -> Result<String, NvrtcError> {
    let (n, suffix) = parse_arch(arch).map_err(|e| NvrtcError::Api { path: nv.path().into(), what: "architecture".into(), code: e })?;
    let bytes = program(nv, &format!("compute_{n}{suffix}"), Output::Ptx)?;
    let end = bytes.iter().position(|&b| b == 0).unwrap_or(bytes.len());
    Ok(String::from_utf8_lossy(&bytes[..end]).into_owned())
}

/// What a device of compute capability `cc` loads: a CUBIN for `sm_XX` when NVRTC knows that
/// architecture, else PTX for the newest architecture it knows below it (the driver compiles
/// that for the device). Returns the image, its target and kind.
pub fn device_image(nv: &Nvrtc, cc: (i32, i32)) -> Result<(Vec<u8>, String, Output), NvrtcError> {
    let arch = cc.0 * 10 + cc.1;
    let real = format!("sm_{arch}");
    match nv.supported_archs() {
        Some(list) if list.contains(&arch) => Ok((program(nv, &real, Output::Cubin)?, real, Output::Cubin)),
        Some(list) => {
            let below = list.iter().copied().filter(|&a| a <= arch).max().ok_or_else(|| NvrtcError::Api {
                path: nv.path().into(),
                what: format!("compile for {real}"),
                code: format!("NVRTC {}.{} knows no architecture at or below {real} (it knows {list:?})", nv.version().0, nv.version().1),
            })?;
            let target = format!("compute_{below}");
            Ok((program(nv, &target, Output::Ptx)?, target, Output::Ptx))
        }
        // An NVRTC that cannot list its architectures: try the real one, else PTX.
        None => match program(nv, &real, Output::Cubin) {
            Ok(b) => Ok((b, real, Output::Cubin)),
            Err(NvrtcError::Compile { code, .. }) if code.contains("INVALID_OPTION") => {
                let target = format!("compute_{arch}");
                Ok((program(nv, &target, Output::Ptx)?, target, Output::Ptx))
            }
            Err(e) => Err(e),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::parse_arch;

    #[test]
    fn architectures_parse() {
        assert_eq!(parse_arch("sm_90").unwrap(), (90, String::new()));
        assert_eq!(parse_arch("sm_90a").unwrap(), (90, "a".into()));
        assert_eq!(parse_arch("compute_80").unwrap(), (80, String::new()));
        assert_eq!(parse_arch(" 120 ").unwrap(), (120, String::new()));
        for bad in ["", "sm_", "gfx90a", "sm_9", "sm_90x"] {
            assert!(parse_arch(bad).is_err(), "{bad}");
        }
    }
}

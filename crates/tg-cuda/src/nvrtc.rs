//! NVRTC, the CUDA run-time compiler, loaded at run time from a path (`libloading`): the few
//! functions the device and the compile report need.
//!
//! [`nvrtc`] finds the library once per process: `$TG_NVRTC` (a path to a `libnvrtc.so.*`),
//! else the loader path (`libnvrtc.so`, `libnvrtc.so.13`, `libnvrtc.so.12`), else known
//! folders (`/usr/local/cuda/lib64`, the tools folder of `scripts/fetch_cuda_tools.py`,
//! Python's `nvidia/cuda_nvrtc/lib` and `nvidia/cu13/lib`). NVRTC finds its builtins library
//! (`libnvrtc-builtins.so.*`) next to itself.

use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use libloading::Library;

use crate::paths;

/// Errors of finding NVRTC and compiling with it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NvrtcError {
    /// No usable NVRTC library was found.
    #[error("{0}")]
    NotFound(String),
    /// NVRTC rejected a program.
    #[error("NVRTC: program `{program}` failed to compile for {target} ({code}); log:\n{log}")]
    Compile {
        /// Program name.
        program: String,
        /// The `--gpu-architecture` it was compiled for.
        target: String,
        /// NVRTC's error code.
        code: String,
        /// The compiler's full log.
        log: String,
    },
    /// Another NVRTC call failed.
    #[error("NVRTC ({path}): {what}: {code}")]
    Api {
        /// The library.
        path: String,
        /// What was being done.
        what: String,
        /// NVRTC's error code.
        code: String,
    },
}

/// What a compile produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Output {
    /// PTX text (NUL-terminated), for a virtual architecture `compute_XX`.
    Ptx,
    /// A CUBIN (machine code), for a real architecture `sm_XX`.
    Cubin,
}

type NvrtcResult = c_int;
type Program = *mut c_void;

/// The NVRTC functions used, resolved once when the library is loaded.
struct Fns {
    get_error_string: unsafe extern "C" fn(NvrtcResult) -> *const c_char,
    version: unsafe extern "C" fn(*mut c_int, *mut c_int) -> NvrtcResult,
    create_program: unsafe extern "C" fn(*mut Program, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> NvrtcResult,
    compile_program: unsafe extern "C" fn(Program, c_int, *const *const c_char) -> NvrtcResult,
    get_program_log_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    get_program_log: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    get_ptx_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    get_ptx: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    get_cubin_size: unsafe extern "C" fn(Program, *mut usize) -> NvrtcResult,
    get_cubin: unsafe extern "C" fn(Program, *mut c_char) -> NvrtcResult,
    destroy_program: unsafe extern "C" fn(*mut Program) -> NvrtcResult,
    /// Optional (NVRTC ≥ 11.2): the real architectures it can compile for.
    num_supported_archs: Option<unsafe extern "C" fn(*mut c_int) -> NvrtcResult>,
    supported_archs: Option<unsafe extern "C" fn(*mut c_int) -> NvrtcResult>,
}

/// A loaded NVRTC library.
pub struct Nvrtc {
    path: String,
    version: (i32, i32),
    archs: Option<Vec<i32>>,
    f: Fns,
    /// Keeps the functions of `f` valid.
    _lib: Library,
}

/// The options every program is compiled with (besides `--gpu-architecture`): C++17, device
/// code by default, the unused-function warning off, and precise division and square root
/// with denormals kept (no fast math: the Q8 scales `127 / amax` must round as on the CPU).
pub const OPTIONS: [&str; 6] = ["--std=c++17", "-default-device", "-diag-suppress=177", "--prec-div=true", "--prec-sqrt=true", "--ftz=false"];

impl Nvrtc {
    /// Loads NVRTC from `name` (a path, or a file name for the loader to find).
    pub fn open(name: &str) -> Result<Nvrtc, String> {
        // SAFETY: loading NVRTC runs its initialisers, which have no preconditions.
        let lib = unsafe { Library::new(name) }.map_err(|e| load_error(&e))?;
        macro_rules! sym {
            ($name:literal) => {
                // SAFETY: the symbol is an NVRTC function whose C signature is the field's
                // type (nvrtc.h); the pointer stays valid while `lib` is loaded (kept in the
                // returned struct).
                *unsafe { lib.get(concat!($name, "\0").as_bytes()) }.map_err(|e| format!("{name} has no {}: {}", $name, load_error(&e)))?
            };
        }
        macro_rules! opt_sym {
            ($name:literal) => {
                // SAFETY: as `sym!`.
                unsafe { lib.get(concat!($name, "\0").as_bytes()) }.ok().map(|s| *s)
            };
        }
        let f = Fns {
            get_error_string: sym!("nvrtcGetErrorString"),
            version: sym!("nvrtcVersion"),
            create_program: sym!("nvrtcCreateProgram"),
            compile_program: sym!("nvrtcCompileProgram"),
            get_program_log_size: sym!("nvrtcGetProgramLogSize"),
            get_program_log: sym!("nvrtcGetProgramLog"),
            get_ptx_size: sym!("nvrtcGetPTXSize"),
            get_ptx: sym!("nvrtcGetPTX"),
            get_cubin_size: sym!("nvrtcGetCUBINSize"),
            get_cubin: sym!("nvrtcGetCUBIN"),
            destroy_program: sym!("nvrtcDestroyProgram"),
            num_supported_archs: opt_sym!("nvrtcGetNumSupportedArchs"),
            supported_archs: opt_sym!("nvrtcGetSupportedArchs"),
        };
        let mut n = Nvrtc { path: name.to_string(), version: (0, 0), archs: None, f, _lib: lib };
        let (mut major, mut minor) = (0, 0);
        // SAFETY: two valid out-pointers.
        n.check(unsafe { (n.f.version)(&mut major, &mut minor) }, "nvrtcVersion").map_err(|e| e.to_string())?;
        n.version = (major, minor);
        n.archs = n.query_archs();
        Ok(n)
    }

    fn query_archs(&self) -> Option<Vec<i32>> {
        let (count_fn, list_fn) = (self.f.num_supported_archs?, self.f.supported_archs?);
        let mut count: c_int = 0;
        // SAFETY: a valid out-pointer.
        if unsafe { count_fn(&mut count) } != 0 || count <= 0 {
            return None;
        }
        let mut v = vec![0 as c_int; count as usize];
        // SAFETY: `v` has room for the `count` entries NVRTC writes.
        if unsafe { list_fn(v.as_mut_ptr()) } != 0 {
            return None;
        }
        Some(v)
    }

    /// Path or name the library was loaded from.
    pub fn path(&self) -> &str {
        &self.path
    }

    /// NVRTC's version (major, minor).
    pub fn version(&self) -> (i32, i32) {
        self.version
    }

    /// The real architectures (`sm_XX` as `XX`) NVRTC compiles for, when it can say.
    pub fn supported_archs(&self) -> Option<&[i32]> {
        self.archs.as_deref()
    }

    fn error_string(&self, r: NvrtcResult) -> String {
        // SAFETY: nvrtcGetErrorString returns a static string (or null) for any value.
        let p = unsafe { (self.f.get_error_string)(r) };
        if p.is_null() {
            return format!("NVRTC error {r}");
        }
        // SAFETY: a NUL-terminated static string from NVRTC.
        unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
    }

    fn check(&self, r: NvrtcResult, what: &str) -> Result<(), NvrtcError> {
        if r == 0 {
            Ok(())
        } else {
            Err(NvrtcError::Api { path: self.path.clone(), what: what.to_string(), code: self.error_string(r) })
        }
    }

    /// Compiles `source` (program name `name`, in messages and `#line`-less diagnostics) for
    /// `target` (`sm_XX` for a CUBIN, `compute_XX` for PTX) with `options` after
    /// `--gpu-architecture=<target>`. A compile error returns [`NvrtcError::Compile`] with
    /// the full log.
    pub fn compile(&self, name: &str, source: &str, target: &str, options: &[&str], output: Output) -> Result<Vec<u8>, NvrtcError> {
        let api = |what: &str, code: String| NvrtcError::Api { path: self.path.clone(), what: what.to_string(), code };
        let src = CString::new(source).map_err(|_| api("nvrtcCreateProgram", format!("program `{name}` contains a NUL byte")))?;
        let cname = CString::new(name).map_err(|_| api("nvrtcCreateProgram", format!("program name `{name}` contains a NUL byte")))?;
        let mut opts: Vec<CString> = Vec::with_capacity(options.len() + 1);
        for o in std::iter::once(format!("--gpu-architecture={target}")).chain(options.iter().map(|s| s.to_string())) {
            opts.push(CString::new(o.clone()).map_err(|_| api("nvrtcCompileProgram", format!("option `{o}` contains a NUL byte")))?);
        }
        let opt_ptrs: Vec<*const c_char> = opts.iter().map(|o| o.as_ptr()).collect();

        let mut prog: Program = std::ptr::null_mut();
        // SAFETY: NUL-terminated source and name that outlive the call; no headers.
        self.check(unsafe { (self.f.create_program)(&mut prog, src.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()) }, "nvrtcCreateProgram")?;
        let guard = ProgramGuard { nvrtc: self, prog };

        // SAFETY: a valid program; `opt_ptrs` holds `opts.len()` NUL-terminated strings that
        // outlive the call.
        let r = unsafe { (self.f.compile_program)(guard.prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr()) };
        if r != 0 {
            let log = self.log(guard.prog).unwrap_or_else(|e| format!("(no log: {e})"));
            return Err(NvrtcError::Compile { program: name.to_string(), target: target.to_string(), code: self.error_string(r), log });
        }
        let (size_fn, get_fn, what) = match output {
            Output::Ptx => (self.f.get_ptx_size, self.f.get_ptx, "nvrtcGetPTX"),
            Output::Cubin => (self.f.get_cubin_size, self.f.get_cubin, "nvrtcGetCUBIN"),
        };
        let mut size = 0usize;
        // SAFETY: a valid, compiled program and out-pointer.
        self.check(unsafe { size_fn(guard.prog, &mut size) }, what)?;
        let mut out = vec![0u8; size];
        // SAFETY: `out` has the `size` bytes NVRTC writes.
        self.check(unsafe { get_fn(guard.prog, out.as_mut_ptr().cast()) }, what)?;
        if output == Output::Cubin && out.is_empty() {
            return Err(api(what, format!("no CUBIN for {target} (a virtual architecture gives PTX only)")));
        }
        drop(guard);
        Ok(out)
    }

    fn log(&self, prog: Program) -> Result<String, NvrtcError> {
        let mut size = 0usize;
        // SAFETY: a valid program and out-pointer.
        self.check(unsafe { (self.f.get_program_log_size)(prog, &mut size) }, "nvrtcGetProgramLogSize")?;
        let mut buf = vec![0u8; size.max(1)];
        // SAFETY: `buf` has the `size` bytes (NUL included) NVRTC writes.
        self.check(unsafe { (self.f.get_program_log)(prog, buf.as_mut_ptr().cast()) }, "nvrtcGetProgramLog")?;
        let end = buf.iter().position(|&b| b == 0).unwrap_or(buf.len());
        Ok(String::from_utf8_lossy(&buf[..end]).trim_end().to_string())
    }
}

/// A `libloading` error with the system's reason (`dlerror`), which its `Display` leaves out.
fn load_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(src) => format!("{e}: {src}"),
        None => e.to_string(),
    }
}

/// Destroys an NVRTC program when dropped.
struct ProgramGuard<'a> {
    nvrtc: &'a Nvrtc,
    prog: Program,
}

impl Drop for ProgramGuard<'_> {
    fn drop(&mut self) {
        // SAFETY: a program created by nvrtcCreateProgram, destroyed once.
        let _ = unsafe { (self.nvrtc.f.destroy_program)(&mut self.prog) };
    }
}

// SAFETY: NVRTC's API is thread-safe for distinct programs (every compile creates its own);
// the struct holds only the library handle and function pointers, which are immutable.
unsafe impl Send for Nvrtc {}
// SAFETY: see `Send`.
unsafe impl Sync for Nvrtc {}

/// The NVRTC library files in `dir`, newest major version first (`libnvrtc.so.13` before
/// `libnvrtc.so.12` before `libnvrtc.so`); the `.alt` variants are skipped.
fn nvrtc_files(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<(u32, PathBuf)> = paths::read_dir_paths(dir)
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?.to_string();
            let rest = name.strip_prefix("libnvrtc.so")?;
            if rest.is_empty() {
                return Some((0, p));
            }
            let major: u32 = rest.strip_prefix('.')?.split('.').next()?.parse().ok()?;
            Some((major, p))
        })
        .collect();
    v.sort_by(|a, b| b.0.cmp(&a.0).then_with(|| a.1.cmp(&b.1)));
    v.dedup_by(|a, b| a.0 == b.0);
    v.into_iter().map(|(_, p)| p).collect()
}

/// The folders searched after the loader path, in order.
pub fn search_dirs() -> Vec<PathBuf> {
    let mut dirs = vec![PathBuf::from("/usr/local/cuda/lib64")];
    for v in paths::tools_versions() {
        dirs.push(v.join("nvidia/cuda_nvrtc/lib"));
        dirs.push(v.join("nvidia/cu13/lib"));
    }
    for site in paths::python_site_dirs().into_iter().filter(|d| d.join("nvidia").is_dir()) {
        dirs.push(site.join("nvidia/cuda_nvrtc/lib"));
        dirs.push(site.join("nvidia/cu13/lib"));
    }
    dirs
}

/// Finds and loads NVRTC (see the module docs); an error names `TG_NVRTC` and every place
/// looked.
fn search() -> Result<Nvrtc, String> {
    if let Some(p) = std::env::var_os("TG_NVRTC") {
        let s = p.to_str().ok_or_else(|| format!("TG_NVRTC={}: not a UTF-8 path", p.to_string_lossy()))?;
        return Nvrtc::open(s).map_err(|e| format!("NVRTC: cannot load TG_NVRTC={s}: {e}"));
    }
    let mut looked: Vec<String> = Vec::new();
    let mut failures: Vec<String> = Vec::new();
    for name in ["libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"] {
        match Nvrtc::open(name) {
            Ok(n) => return Ok(n),
            Err(e) => {
                looked.push(name.to_string());
                if !e.contains("cannot open shared object file") {
                    failures.push(format!("{name}: {e}"));
                }
            }
        }
    }
    // The tools folder is named even while it is empty.
    let mut folders: Vec<String> = vec![format!("{}/<version>/nvidia/cuda_nvrtc/lib", paths::tools_dir().display())];
    for dir in search_dirs() {
        folders.push(dir.display().to_string());
        for f in nvrtc_files(&dir) {
            let Some(s) = f.to_str() else { continue };
            match Nvrtc::open(s) {
                Ok(n) => return Ok(n),
                Err(e) => failures.push(format!("{s}: {e}")),
            }
        }
    }
    let mut msg = format!(
        "NVRTC not found: set TG_NVRTC to a libnvrtc.so.* (`python3 scripts/fetch_cuda_tools.py` downloads one and prints the line to export); \
         looked for {} on the loader path (LD_LIBRARY_PATH={}) and in {} (and Python's site-packages/nvidia/cuda_nvrtc/lib, nvidia/cu13/lib)",
        looked.join(", "),
        paths::ld_library_path(),
        folders.join(", ")
    );
    if !failures.is_empty() {
        msg.push_str(&format!("; found but unusable: {}", failures.join("; ")));
    }
    Err(msg)
}

/// NVRTC, found and loaded once per process (a failed search is repeated on the next call).
pub fn nvrtc() -> Result<Arc<Nvrtc>, NvrtcError> {
    static LOADED: Mutex<Option<Arc<Nvrtc>>> = Mutex::new(None);
    let mut slot = LOADED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(n) = slot.as_ref() {
        return Ok(n.clone());
    }
    let n = Arc::new(search().map_err(NvrtcError::NotFound)?);
    *slot = Some(n.clone());
    Ok(n)
}

/// Compiles `source` with [`OPTIONS`] for `target` (`sm_XX`: a CUBIN; `compute_XX`: PTX).
pub fn compile(name: &str, source: &str, target: &str, output: Output) -> Result<Vec<u8>, NvrtcError> {
    nvrtc()?.compile(name, source, target, &OPTIONS, output)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn library_files_sort_newest_major_first() {
        let dir = std::env::temp_dir().join(format!("tg-nvrtc-files-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for f in ["libnvrtc.so", "libnvrtc.so.12", "libnvrtc.so.13.0.48", "libnvrtc.alt.so.12", "libnvrtc-builtins.so.12.9", "other.so"] {
            std::fs::write(dir.join(f), b"").unwrap();
        }
        let names: Vec<String> = nvrtc_files(&dir).iter().map(|p| p.file_name().unwrap().to_string_lossy().into_owned()).collect();
        assert_eq!(names, ["libnvrtc.so.13.0.48", "libnvrtc.so.12", "libnvrtc.so"]);
        let _ = std::fs::remove_dir_all(&dir);
    }
}

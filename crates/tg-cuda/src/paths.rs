//! Where the CUDA tools and compiled programs live: the cache folder, the tools folder of
//! `scripts/fetch_cuda_tools.py`, and the other folders NVRTC and ptxas are looked for in.

use std::path::{Path, PathBuf};

/// The cache base: `$TG_CACHE_DIR`, else `$XDG_CACHE_HOME/tensor-graphs`, else
/// `~/.cache/tensor-graphs` (as the model cache).
pub fn cache_base() -> PathBuf {
    if let Some(d) = std::env::var_os("TG_CACHE_DIR") {
        return PathBuf::from(d);
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("tensor-graphs")
}

/// The compiled-program cache: `<cache base>/cuda`.
pub fn program_cache_dir() -> PathBuf {
    cache_base().join("cuda")
}

/// The tools folder of `scripts/fetch_cuda_tools.py`: `<cache base>/cuda-tools`, one
/// subfolder per CUDA version.
pub fn tools_dir() -> PathBuf {
    cache_base().join("cuda-tools")
}

/// The version folders of [`tools_dir`], newest version first.
pub fn tools_versions() -> Vec<PathBuf> {
    let mut v: Vec<(Vec<u64>, PathBuf)> = read_dir_paths(&tools_dir()).into_iter().filter(|p| p.is_dir()).map(|p| (version_key(&p), p)).collect();
    v.sort_by(|a, b| b.0.cmp(&a.0));
    v.into_iter().map(|(_, p)| p).collect()
}

/// `12.9.86` → `[12, 9, 86]` (non-numeric parts count as 0), for sorting folder names.
fn version_key(p: &Path) -> Vec<u64> {
    let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    name.split(['.', '-', '_']).map(|s| s.parse().unwrap_or(0)).collect()
}

/// Every entry of `dir` (none when it cannot be read), sorted by name.
pub fn read_dir_paths(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(rd) => rd.filter_map(|e| e.ok().map(|e| e.path())).collect(),
        Err(_) => Vec::new(),
    };
    v.sort();
    v
}

/// Python `site-packages` / `dist-packages` folders found cheaply (no Python is run): the
/// active virtual or conda environment, the user's, pyenv's versions, and the system's.
pub fn python_site_dirs() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var) {
            prefixes.push(PathBuf::from(p));
        }
    }
    if let Some(home) = std::env::var_os("HOME").map(PathBuf::from) {
        prefixes.push(home.join(".local"));
        prefixes.extend(read_dir_paths(&home.join(".pyenv").join("versions")));
    }
    prefixes.push(PathBuf::from("/usr/local"));
    prefixes.push(PathBuf::from("/usr"));
    let mut out = Vec::new();
    for p in prefixes {
        for lib in read_dir_paths(&p.join("lib")) {
            let is_python = lib.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.starts_with("python3"));
            if !is_python {
                continue;
            }
            for sub in ["site-packages", "dist-packages"] {
                let d = lib.join(sub);
                if d.is_dir() {
                    out.push(d);
                }
            }
        }
    }
    out
}

/// `$LD_LIBRARY_PATH` for messages (`(unset)` when it is not set).
pub fn ld_library_path() -> String {
    std::env::var("LD_LIBRARY_PATH").map(|v| if v.is_empty() { "(empty)".to_string() } else { v }).unwrap_or_else(|_| "(unset)".into())
}

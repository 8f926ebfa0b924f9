//! What the ONNX tests share: where the backend node tests lie.

use std::path::PathBuf;

/// The extracted node tests of onnx 1.16.2 (`TG_ONNX_TESTS`, else the cache folder
/// `scripts/fetch_onnx_tests.py` extracts to); `None` (printing `SKIPPED`) when absent, a
/// failure under CI.
pub fn cases_dir() -> Option<PathBuf> {
    let p = std::env::var_os("TG_ONNX_TESTS").map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("TG_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("tensor-graphs")
        });
        base.join("onnx/node-tests-1.16.2")
    });
    if p.join(".complete").is_file() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    assert!(!ci, "ONNX node tests not found at {} under CI (scripts/test.sh runs scripts/fetch_onnx_tests.py)", p.display());
    eprintln!("SKIPPED: ONNX node tests not found at {} (python3 scripts/fetch_onnx_tests.py)", p.display());
    None
}

/// The ONNX target models (`TG_ONNX_MODELS`, else the cache folder
/// `scripts/fetch_onnx_models.py` extracts to); `None` (printing `SKIPPED`) when absent, a
/// failure under CI.
#[allow(dead_code)]
pub fn models_dir() -> Option<PathBuf> {
    let p = std::env::var_os("TG_ONNX_MODELS").map(PathBuf::from).unwrap_or_else(|| {
        let base = std::env::var_os("TG_CACHE_DIR").map(PathBuf::from).unwrap_or_else(|| {
            std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap_or_default()).join(".cache"))
                .join("tensor-graphs")
        });
        base.join("onnx/models-1")
    });
    if p.join(".complete").is_file() {
        return Some(p);
    }
    let ci = std::env::var("CI").is_ok_and(|v| !v.is_empty() && v != "0" && v != "false");
    assert!(!ci, "ONNX target models not found at {} under CI (scripts/test.sh runs scripts/fetch_onnx_models.py)", p.display());
    eprintln!("SKIPPED: ONNX target models not found at {} (python3 scripts/fetch_onnx_models.py)", p.display());
    None
}

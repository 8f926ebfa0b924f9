//! Shared helpers for the tests that need the real Gemma 3 model file.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use tg_tokenizer::Tokenizer;

/// Default location written by `scripts/fetch_model.py`.
const DEFAULT_MODEL: &str = "/root/.cache/tensor-graphs/models/gemma-3-270m-q4_k_m.gguf";

/// The model path: `$TG_MODEL`, else the default download location.
pub fn model_path() -> PathBuf {
    std::env::var_os("TG_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(DEFAULT_MODEL))
}

/// The Gemma 3 tokenizer and how long `Tokenizer::from_gguf` took, or `None`
/// (after printing SKIPPED) when the model is absent and
/// `TG_ALLOW_MISSING_MODEL=1`. Panics with instructions otherwise.
pub fn gemma_tokenizer() -> Option<&'static (Tokenizer, Duration)> {
    static TOK: OnceLock<(Tokenizer, Duration)> = OnceLock::new();
    let path = model_path();
    if !path.exists() {
        if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
            println!(
                "SKIPPED: model file {} not found (TG_ALLOW_MISSING_MODEL=1)",
                path.display()
            );
            return None;
        }
        panic!(
            "model file {} not found: run scripts/fetch_model.py or set TG_MODEL \
             (or set TG_ALLOW_MISSING_MODEL=1 to skip the tests that need it)",
            path.display()
        );
    }
    Some(TOK.get_or_init(|| {
        let f = tg_gguf::GgufFile::open(&path)
            .unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
        let t0 = Instant::now();
        let tok = Tokenizer::from_gguf(&f)
            .unwrap_or_else(|e| panic!("tokenizer from {}: {e}", path.display()));
        (tok, t0.elapsed())
    }))
}

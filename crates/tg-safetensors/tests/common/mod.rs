//! Shared helpers for tg-safetensors integration tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// A safetensors image from a raw header text and data section (no padding, no checks).
pub fn raw(header: &str, data: &[u8]) -> Vec<u8> {
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(data);
    out
}

/// The seed for randomized tests: `TG_SEED` (decimal or 0x-hex) or `default`; printed.
pub fn seed(test: &str, default: u64) -> u64 {
    let seed = std::env::var("TG_SEED")
        .ok()
        .and_then(|s| {
            let s = s.trim();
            match s.strip_prefix("0x") {
                Some(hex) => u64::from_str_radix(hex, 16).ok(),
                None => s.parse().ok(),
            }
        })
        .unwrap_or(default);
    println!("{test}: seed {seed:#x} (set TG_SEED to change)");
    seed
}

/// The EmbeddingGemma-300M sentence-transformers folder: `$TG_EMBED_MODEL`, else
/// `~/.cache/tensor-graphs/models/embeddinggemma-300m` (scripts/fetch_embedding_model.py).
pub fn embed_model_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os("TG_EMBED_MODEL") {
        return PathBuf::from(dir);
    }
    let home = std::env::var_os("HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/root"));
    home.join(".cache/tensor-graphs/models/embeddinggemma-300m")
}

/// `rel` inside the model folder, or `None` (after printing SKIPPED) when it is missing.
pub fn embed_model_file(test: &str, rel: &str) -> Option<PathBuf> {
    let path = embed_model_dir().join(rel);
    if path.is_file() {
        Some(path)
    } else {
        println!(
            "SKIPPED {test}: {} not found (run scripts/fetch_embedding_model.py or set TG_EMBED_MODEL)",
            path.display()
        );
        None
    }
}

/// A unique scratch directory under the system temp dir (removed by the caller).
pub fn scratch_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "tg-safetensors-{test}-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0)
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

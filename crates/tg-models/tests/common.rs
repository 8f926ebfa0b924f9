//! Shared helpers for the model tests.
#![allow(dead_code)]

use std::path::PathBuf;

/// The real model: `TG_MODEL`, else the default cache path (`tg_models::cache`). `None` (with a message) only
/// when `TG_ALLOW_MISSING_MODEL=1`; otherwise a missing model fails the test.
pub fn model_path() -> Option<PathBuf> {
    let p = std::env::var_os("TG_MODEL").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_MODEL));
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: model not found at {} (TG_ALLOW_MISSING_MODEL=1)", p.display());
        return None;
    }
    panic!("model not found at {}: run `python3 scripts/fetch_model.py` or set TG_MODEL", p.display());
}

/// Repository root (for fixtures).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// Reads a little-endian f32 file.
pub fn read_f32(path: &std::path::Path) -> Vec<f32> {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Indices of the `k` largest values, largest first (ties: lower index first).
pub fn top_k(v: &[f32], k: usize) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..v.len()).collect();
    idx.sort_by(|&a, &b| v[b].total_cmp(&v[a]).then(a.cmp(&b)));
    idx.truncate(k);
    idx
}

/// Normalised mean squared error of `got` against `want`.
pub fn nmse(got: &[f32], want: &[f64]) -> f64 {
    let num: f64 = got.iter().zip(want).map(|(&g, &w)| (g as f64 - w).powi(2)).sum();
    let den: f64 = want.iter().map(|w| w * w).sum();
    num / den
}

/// The EmbeddingGemma folder: `TG_EMBED_MODEL`, else the default cache path. `None` (with a
/// message) only when `TG_ALLOW_MISSING_MODEL=1`; otherwise a missing model fails the test.
pub fn embed_model_dir() -> Option<PathBuf> {
    let p = std::env::var_os("TG_EMBED_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| tg_models::cache::cache_dir().join(tg_models::cache::DEFAULT_EMBEDDING_MODEL));
    if p.join("modules.json").is_file() {
        return Some(p);
    }
    if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: embedding model not found at {} (TG_ALLOW_MISSING_MODEL=1)", p.display());
        return None;
    }
    panic!("embedding model not found at {}: run `python3 scripts/fetch_embedding_model.py` or set TG_EMBED_MODEL", p.display());
}

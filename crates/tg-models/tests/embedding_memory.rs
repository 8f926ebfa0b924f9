//! EmbeddingGemma's F32 weights are mapped, not copied: after loading and embedding, the
//! process's anonymous (heap) memory stays far below the 1.2 GB of weights, which live in
//! file-backed pages of the map. Its own test binary, so no other test's allocations count.

mod common;

fn status_kb(key: &str) -> usize {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    s.lines()
        .find(|l| l.starts_with(key))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("{key} not in /proc/self/status"))
}

#[test]
fn weights_are_mapped_not_copied() {
    let Some(dir) = common::embed_model_dir() else { return };
    let mut m = tg_models::EmbeddingGemma::load(&dir, 2).unwrap();
    let mapped = m.weights().mapped_bytes();
    let long = "The quick brown fox jumps over the lazy dog. ".repeat(40);
    let e = m.embed(&["Which planet is known as the Red Planet?", &long], Some("query"), None).unwrap();
    assert_eq!(e.len(), 2);
    let (anon, file, hwm) = (status_kb("RssAnon:"), status_kb("RssFile:"), status_kb("VmHWM:"));
    eprintln!(
        "weights mapped: {:.1} MB; after embedding: RssAnon {:.1} MB, RssFile {:.1} MB, peak RSS {:.1} MB",
        mapped as f64 / 1e6,
        anon as f64 / 1e3,
        file as f64 / 1e3,
        hwm as f64 / 1e3
    );
    assert!(mapped > 1_200_000_000, "mapped {mapped} bytes");
    // Every layer's weights were read; a copy would put them on the heap (> 1.2 GB).
    assert!(anon * 1024 < mapped / 4, "anonymous memory {anon} kB suggests the weights were copied");
}

//! `tg run` and `tg info` on every registered model kind through the one model interface:
//! Gemma 3's logits for a token file against `tg logits`, EmbeddingGemma's embeddings for
//! padded token rows against `tg embed`, `tg info` on each kind; bad inputs (an unknown
//! file kind, a missing or unknown input, the wrong dtype or shape) named in the error,
//! with a non-zero exit, never a panic.

use std::path::{Path, PathBuf};
use std::process::Command;

fn found(env: &str, default: &str, ok: fn(&Path) -> bool, what: &str) -> Option<PathBuf> {
    let p = std::env::var_os(env).map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join(default));
    if ok(&p) {
        Some(p)
    } else if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: {what} not found at {}", p.display());
        None
    } else {
        panic!("{what} not found at {}: fetch it (scripts/) or set {env}", p.display())
    }
}

fn gemma() -> Option<PathBuf> {
    found("TG_MODEL", tg_models::cache::DEFAULT_MODEL, Path::is_file, "model")
}

fn embedding() -> Option<PathBuf> {
    found("TG_EMBED_MODEL", tg_models::cache::DEFAULT_EMBEDDING_MODEL, |p| p.join("modules.json").is_file(), "embedding model")
}

fn tg(args: &[&str]) -> (i32, String, String) {
    let o = Command::new(env!("CARGO_BIN_EXE_tg")).args(args).output().unwrap();
    (o.status.code().unwrap_or(-1), String::from_utf8_lossy(&o.stdout).into_owned(), String::from_utf8_lossy(&o.stderr).into_owned())
}

fn ok(args: &[&str]) -> String {
    let (code, out, err) = tg(args);
    assert_eq!(code, 0, "{args:?}: {err}");
    out
}

fn fail(args: &[&str], needle: &str) {
    let (code, _, err) = tg(args);
    assert_ne!(code, 0, "{args:?} should fail");
    assert!(!err.contains("panicked") && err.contains(needle), "{args:?}: stderr should mention {needle:?}: {err}");
}

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tg-run-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn npy(path: &Path, descr: &str, shape: &[usize], data: &[u8]) {
    let s = match shape.len() {
        1 => format!("({},)", shape[0]),
        _ => format!("({})", shape.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(", ")),
    };
    let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {s}, }}");
    while (10 + h.len() + 1) % 64 != 0 {
        h.push(' ');
    }
    h.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend((h.len() as u16).to_le_bytes());
    out.extend(h.as_bytes());
    out.extend(data);
    std::fs::write(path, out).unwrap();
}

fn i64_bytes(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

/// The f32 values of a `.npy` file this crate's writer made (header, then the data).
fn read_f32_npy(path: &Path) -> (String, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = String::from_utf8_lossy(&b[10..10 + hlen]).into_owned();
    (header, b[10 + hlen..].chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect())
}

#[test]
fn gemma3_logits_through_tg_run() {
    let Some(model) = gemma() else { return };
    let m = model.to_str().unwrap();
    let d = dir("gemma");
    let info = ok(&["info", m, "--json"]);
    let j: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(j["kind"], "gemma3");
    assert_eq!(j["inputs"][0]["name"], "tokens");
    assert_eq!(j["outputs"][0]["shape"][0], "tokens");
    assert!(j["capabilities"].as_array().unwrap().iter().any(|c| c == "generate"));
    assert!(ok(&["info", m]).contains("kind:    gemma3"));

    // The prompt's tokens as `tg logits` tokenizes them (BOS first).
    let prompt = "The capital of France is";
    let lj: serde_json::Value = serde_json::from_str(&ok(&["logits", "-m", m, "--prompt", prompt, "--json", "-t", "2"])).unwrap();
    let ids: Vec<i64> = lj["prompt_tokens"].as_array().unwrap().iter().map(|t| t.as_i64().unwrap()).collect();
    let want: Vec<f32> = lj["logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect();
    npy(&d.join("t.npy"), "<i8", &[ids.len()], &i64_bytes(&ids));
    let out = d.join("out");
    let run = ok(&["run", m, "--input", &format!("tokens={}", d.join("t.npy").display()), "--output-dir", out.to_str().unwrap(), "--json", "-t", "2"]);
    let rj: serde_json::Value = serde_json::from_str(&run).unwrap();
    let vocab = j["outputs"][0]["shape"][1].as_u64().unwrap() as usize;
    assert_eq!(rj["outputs"][0]["shape"], serde_json::json!([ids.len(), vocab]));
    let (header, logits) = read_f32_npy(&out.join("logits.npy"));
    assert!(header.contains("'<f4'"), "{header}");
    // The last row is the last-position logits `tg logits` prints (another plan: last row
    // sliced before the final norm), to float rounding.
    let last = &logits[(ids.len() - 1) * vocab..];
    assert_eq!(tg_models::argmax(last), lj["argmax"].as_u64().unwrap() as usize);
    let scale = want.iter().fold(0f32, |m, x| m.max(x.abs()));
    let err = last.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err <= 1e-4 * scale, "max |tg run - tg logits| = {err} (scale {scale})");

    // Bad inputs.
    npy(&d.join("f.npy"), "<f4", &[2], &[0u8; 8]);
    fail(&["run", m, "--input", &format!("tokens={}", d.join("f.npy").display())], "input 'tokens'");
    fail(&["run", m], "'tokens'");
    npy(&d.join("big.npy"), "<i8", &[1], &i64_bytes(&[vocab as i64]));
    fail(&["run", m, "--input", &format!("tokens={}", d.join("big.npy").display())], "vocabulary");
    npy(&d.join("two.npy"), "<i8", &[1, 2], &i64_bytes(&[2, 3]));
    fail(&["run", m, "--input", &format!("tokens={}", d.join("two.npy").display())], "input 'tokens'");
    fail(&["run", m, "--input", &format!("tokens={}", d.join("t.npy").display()), "--input", &format!("extra={}", d.join("t.npy").display())], "'extra'");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn embeddings_through_tg_run() {
    let Some(model) = embedding() else { return };
    let m = model.to_str().unwrap();
    let d = dir("embed");
    let j: serde_json::Value = serde_json::from_str(&ok(&["info", m, "--json"])).unwrap();
    assert_eq!(j["kind"], "embedding-gemma");
    assert_eq!(j["inputs"][1]["name"], "attention_mask");
    assert_eq!(j["inputs"][0]["dtype"], "int64");
    assert!(j["capabilities"].as_array().unwrap().iter().any(|c| c == "embed"));

    let texts = ["Mars, the red one.", "Venus is hot and bright in the evening sky."];
    let e = tg_models::EmbeddingGemma::load(&model, 1).unwrap();
    let rows: Vec<Vec<u32>> = texts.iter().map(|t| e.tokenize(t, None).unwrap()).collect();
    let len = rows.iter().map(Vec::len).max().unwrap();
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    for r in &rows {
        ids.extend(r.iter().map(|&t| t as i64).chain(std::iter::repeat_n(0, len - r.len())));
        mask.extend(std::iter::repeat_n(1i64, r.len()).chain(std::iter::repeat_n(0, len - r.len())));
    }
    npy(&d.join("ids.npy"), "<i8", &[2, len], &i64_bytes(&ids));
    npy(&d.join("mask.npy"), "<i8", &[2, len], &i64_bytes(&mask));
    let (ids_in, mask_in) = (format!("input_ids={}", d.join("ids.npy").display()), format!("attention_mask={}", d.join("mask.npy").display()));
    let out = d.join("out");
    ok(&["run", m, "--input", &ids_in, "--input", &mask_in, "--output-dir", out.to_str().unwrap(), "-t", "2"]);
    let (_, got) = read_f32_npy(&out.join("embeddings.npy"));
    let ej: serde_json::Value = serde_json::from_str(&ok(&["embed", "-m", m, "--json", "-t", "2", texts[0], texts[1]])).unwrap();
    let want: Vec<f32> = ej["embeddings"].as_array().unwrap().iter().flat_map(|r| r.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32)).collect();
    assert_eq!(got.len(), want.len());
    let err = got.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
    assert!(err <= 1e-6, "max |tg run - tg embed| = {err}");

    fail(&["run", m, "--input", &ids_in], "'attention_mask'");
    npy(&d.join("short.npy"), "<i8", &[2, len - 1], &i64_bytes(&mask[..2 * (len - 1)]));
    fail(&["run", m, "--input", &ids_in, "--input", &format!("attention_mask={}", d.join("short.npy").display())], "attention_mask");
    std::fs::remove_dir_all(&d).ok();
}

#[test]
fn unknown_files_list_the_kinds() {
    let d = dir("kinds");
    let f = d.join("weights.bin");
    std::fs::write(&f, b"not a model").unwrap();
    for cmd in ["run", "info"] {
        fail(&[cmd, f.to_str().unwrap()], "weights.bin");
        fail(&[cmd, f.to_str().unwrap()], "gemma3");
        fail(&[cmd, f.to_str().unwrap()], "onnx");
    }
    fail(&["info", d.join("nothing-here.onnx").to_str().unwrap()], "no such file");
    std::fs::remove_dir_all(&d).ok();
}

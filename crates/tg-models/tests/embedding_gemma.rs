//! EmbeddingGemma-300M through the whole pipeline against sentence-transformers' outputs on
//! the same weights (fixture `tests/fixtures/embeddinggemma/reference.json`, produced as
//! its README describes), and against the reference interpreter.

mod common;

use common::*;
use std::collections::HashMap;
use tg_models::embedding_gemma::cosine;
use tg_models::EmbeddingGemma;

struct Entry {
    id: String,
    text: String,
    prompt_name: Option<String>,
    input_ids: Vec<u32>,
    embedding: Vec<f32>,
    truncated: Vec<(usize, Vec<f32>)>,
}

fn fixture() -> (serde_json::Value, Vec<Entry>) {
    let path = repo_root().join("tests/fixtures/embeddinggemma/reference.json");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let f32s = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect::<Vec<f32>>();
    let entries = d["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| Entry {
            id: e["id"].as_str().unwrap().to_string(),
            text: e["text"].as_str().unwrap().to_string(),
            prompt_name: e["prompt_name"].as_str().map(str::to_string),
            input_ids: e["input_ids"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect(),
            embedding: f32s(&e["embedding"]),
            truncated: e["embedding_truncated"]
                .as_object()
                .map(|o| o.iter().map(|(k, v)| (k.parse().unwrap(), f32s(v))).collect())
                .unwrap_or_default(),
        })
        .collect();
    (d, entries)
}

/// Token ids equal sentence-transformers' (prompt, BOS/EOS, truncation to 2048), and every
/// embedding has cosine ≥ 0.9999 with the reference — short, long (past the 512 window,
/// up to the 2048 limit) and multilingual texts, batched by prompt name so texts are
/// packed together. Also the Matryoshka truncations.
#[test]
fn embeddings_match_sentence_transformers() {
    let Some(dir) = embed_model_dir() else { return };
    let (_, entries) = fixture();
    assert!(entries.len() >= 25, "fixture has {} entries", entries.len());
    let mut m = EmbeddingGemma::load(&dir, 2).unwrap();
    for e in &entries {
        let ids = m.tokenize(&e.text, e.prompt_name.as_deref()).unwrap();
        assert_eq!(ids, e.input_ids, "token ids of {}", e.id);
    }
    // Group by prompt name so each call packs several texts into one run.
    let mut groups: HashMap<Option<String>, Vec<&Entry>> = HashMap::new();
    for e in &entries {
        groups.entry(e.prompt_name.clone()).or_default().push(e);
    }
    let mut worst = (1.0f64, String::new());
    for (pn, es) in &groups {
        let texts: Vec<&str> = es.iter().map(|e| e.text.as_str()).collect();
        let got = m.embed(&texts, pn.as_deref(), None).unwrap();
        assert_eq!(got.dim, 768);
        for (i, e) in es.iter().enumerate() {
            let c = cosine(got.row(i), &e.embedding);
            let norm: f64 = got.row(i).iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{}: norm {norm}", e.id);
            if c < worst.0 {
                worst = (c, e.id.clone());
            }
            assert!(c >= 0.9999, "{}: cosine {c} with sentence-transformers", e.id);
        }
    }
    eprintln!("{} texts: min cosine with sentence-transformers {:.10} ({}), 1 - cos = {:.2e}", entries.len(), worst.0, worst.1, 1.0 - worst.0);

    let mut worst_t = 1.0f64;
    let mut n_t = 0;
    for e in entries.iter().filter(|e| !e.truncated.is_empty()).take(8) {
        for (dim, want) in &e.truncated {
            let got = m.embed(&[&e.text], e.prompt_name.as_deref(), Some(*dim)).unwrap();
            assert_eq!(got.dim, *dim);
            let norm: f64 = got.row(0).iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            assert!((norm - 1.0).abs() < 1e-5, "{} dim {dim}: norm {norm}", e.id);
            let c = cosine(got.row(0), want);
            worst_t = worst_t.min(c);
            n_t += 1;
            assert!(c >= 0.9999, "{} dim {dim}: cosine {c}", e.id);
        }
    }
    eprintln!("{n_t} truncated embeddings (512/256/128): min cosine {worst_t:.10}");
}

/// The model card's example: query vs four documents, cosine similarities equal to
/// sentence-transformers' to 1e-4.
#[test]
fn model_card_similarities() {
    let Some(dir) = embed_model_dir() else { return };
    let (d, entries) = fixture();
    let want: Vec<f64> = d["summary"]["model_card_similarities"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
    let q = entries.iter().find(|e| e.id == "card_query").unwrap();
    let docs: Vec<&str> = (0..4).map(|i| entries.iter().find(|e| e.id == format!("card_doc_{i}")).unwrap().text.as_str()).collect();
    let mut m = EmbeddingGemma::load(&dir, 2).unwrap();
    let qe = m.embed(&[&q.text], Some("query"), None).unwrap();
    let de = m.embed(&docs, Some("document"), None).unwrap();
    let got: Vec<f64> = (0..4).map(|i| cosine(qe.row(0), de.row(i))).collect();
    let max_diff = got.iter().zip(&want).map(|(g, w)| (g - w).abs()).fold(0f64, f64::max);
    eprintln!("model card similarities: ours {got:.5?}, sentence-transformers {want:.5?}, max |diff| {max_diff:.2e}");
    for (g, w) in got.iter().zip(&want) {
        assert!((g - w).abs() < 1e-4, "similarity {g} vs {w}");
    }
}

/// Packing texts into one run gives the same vectors as running each alone.
#[test]
fn packed_batch_equals_single_runs() {
    let Some(dir) = embed_model_dir() else { return };
    let mut m = EmbeddingGemma::load(&dir, 2).unwrap();
    let texts = ["Hi", "A longer sentence about packing several texts into one run.", "数学是科学的语言。", "x"];
    let packed = m.embed(&texts, Some("query"), None).unwrap();
    let mut max_diff = 0f32;
    for (i, t) in texts.iter().enumerate() {
        let one = m.embed(&[t], Some("query"), None).unwrap();
        for (a, b) in one.row(0).iter().zip(packed.row(i)) {
            max_diff = max_diff.max((a - b).abs());
        }
    }
    eprintln!("packed vs single: max |diff| {max_diff:e}");
    assert!(max_diff < 1e-5, "packed vs single differ by {max_diff}");
}

/// The kernel run of the whole model equals the reference interpreter (f64) on two packed
/// texts.
#[test]
fn kernels_match_reference_interpreter() {
    let Some(dir) = embed_model_dir() else { return };
    let mut m = EmbeddingGemma::load(&dir, 2).unwrap();
    let a = m.tokenize("Which planet is known as the Red Planet?", Some("query")).unwrap();
    let b = m.tokenize("Mars", Some("document")).unwrap();
    let total = a.len() + b.len();
    let got = m.embed_tokens(&[a.clone(), b.clone()], 768).unwrap();
    let g = m.graph(total, 2, 768).unwrap();
    let ids: Vec<i32> = a.iter().chain(&b).map(|&t| t as i32).collect();
    let pos: Vec<i32> = (0..a.len() as i32).chain(0..b.len() as i32).collect();
    let seg: Vec<i32> = std::iter::repeat_n(0, a.len()).chain(std::iter::repeat_n(1, b.len())).collect();
    let mut inputs = HashMap::new();
    inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[total], ids).unwrap());
    inputs.insert("positions".to_string(), tg_ir::HostTensor::i32(&[total], pos).unwrap());
    inputs.insert("segments".to_string(), tg_ir::HostTensor::i32(&[total], seg).unwrap());
    let want = tg_ir::interp::eval(&g, &inputs, m.weights()).unwrap();
    let want = &want["embeddings"].data;
    let e = nmse(&got, want);
    eprintln!("kernels vs reference interpreter ({total} tokens, 2 texts): NMSE {e:e}");
    assert!(e < 1e-10, "NMSE {e}");
}

/// Bad requests get errors, not panics.
#[test]
fn bad_requests_are_errors() {
    let Some(dir) = embed_model_dir() else { return };
    let mut m = EmbeddingGemma::load(&dir, 1).unwrap();
    let e = m.embed(&["x"], Some("no-such-prompt"), None).unwrap_err().to_string();
    assert!(e.contains("no-such-prompt") && e.contains("query"), "{e}");
    let e = m.embed(&["x"], None, Some(1000)).unwrap_err().to_string();
    assert!(e.contains("1000"), "{e}");
    let e = m.embed(&["x"], None, Some(0)).unwrap_err().to_string();
    assert!(e.contains('0'), "{e}");
    // `<image_soft_token>` is a tokenizer entry beyond the embedding table.
    let e = m.embed(&["look: <image_soft_token>"], None, None).unwrap_err().to_string();
    assert!(e.contains("262144") && e.contains("embedding table"), "{e}");
    let e = m.embed_tokens(&[vec![]], 768).unwrap_err().to_string();
    assert!(e.contains("empty"), "{e}");
    let e = m.embed_tokens(&[vec![2; 2049]], 768).unwrap_err().to_string();
    assert!(e.contains("2049") && e.contains("2048"), "{e}");
}

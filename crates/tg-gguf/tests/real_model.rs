//! Tests against the real Gemma 3 270M Q4_K_M file: header facts, and bit-exact
//! dequantization of all tensors against gguf-py (hashes from scripts/gen_quant_fixtures.py).

mod common;

use std::collections::BTreeMap;
use std::time::Instant;

use sha2::{Digest, Sha256};
use tg_gguf::{GgmlType, GgufFile, Value};

#[test]
fn real_model_header() {
    let Some(path) = common::model_path("real_model_header") else {
        return;
    };
    let t0 = Instant::now();
    let f = GgufFile::open(&path).expect("open model");
    println!("opened {} in {:?}", path.display(), t0.elapsed());
    assert_eq!(f.version(), 3);
    assert_eq!(f.alignment(), 32);
    assert_eq!(f.tensors().len(), 236);
    assert_eq!(f.metadata().len(), 33);
    assert_eq!(f.get_u32("gemma3.embedding_length").unwrap(), 640);
    assert_eq!(f.get_u64("gemma3.block_count").unwrap(), 18);
    assert_eq!(f.get_str("general.architecture").unwrap(), "gemma3");
    assert!(f.get_bool("tokenizer.ggml.add_bos_token").unwrap());
    assert_eq!(f.get_f32("gemma3.rope.freq_base").unwrap(), 1_000_000.0);
    let tokens = f.get_str_array("tokenizer.ggml.tokens").unwrap();
    assert_eq!(tokens.len(), 262144);
    assert_eq!(
        f.get_f32_array("tokenizer.ggml.scores").unwrap().len(),
        262144
    );
    assert_eq!(
        f.get_i32_array("tokenizer.ggml.token_type").unwrap().len(),
        262144
    );
    assert_eq!(f.data_offset(), 6525120);

    let e = f.tensor("token_embd.weight").unwrap();
    assert_eq!(e.ty, GgmlType::Q8_0);
    assert_eq!(e.dims, vec![640, 262144]);
    assert_eq!(
        (e.row_len(), e.n_rows(), e.n_elements()),
        (640, 262144, 640 * 262144)
    );
    assert_eq!(f.tensor_bytes(e).len(), 640 / 32 * 34 * 262144);

    let mut counts = BTreeMap::new();
    for t in f.tensors() {
        *counts.entry(t.ty.name()).or_insert(0) += 1;
        assert_eq!(f.tensor_bytes(t).len(), t.n_bytes);
        assert_eq!(t.offset % 32, 0);
    }
    let want: BTreeMap<&str, i32> = [
        ("F32", 109),
        ("Q5_0", 81),
        ("Q4_K", 27),
        ("Q8_0", 10),
        ("Q6_K", 9),
    ]
    .into();
    assert_eq!(counts, want);

    // Error paths on the real file.
    assert!(matches!(
        f.tensor("nope"),
        Err(tg_gguf::GgufError::MissingTensor { .. })
    ));
    assert!(matches!(
        f.get_u32("nope"),
        Err(tg_gguf::GgufError::MissingKey { .. })
    ));
    let err = f.get_u32("general.architecture").unwrap_err();
    assert!(matches!(err, tg_gguf::GgufError::WrongType { .. }));
    assert!(err.to_string().contains("gemma-3-270m"), "{err}");
    assert!(matches!(
        f.get("tokenizer.ggml.bos_token_id"),
        Some(Value::U32(2))
    ));
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[test]
fn real_model_dequant_bit_exact_with_gguf_py() {
    let Some(path) = common::model_path("real_model_dequant_bit_exact_with_gguf_py") else {
        return;
    };
    let fixture = common::repo_root().join("tests/fixtures/quant/model_dequant_sha256.json");
    let doc: serde_json::Value = serde_json::from_slice(
        &std::fs::read(&fixture).expect("fixture (run scripts/gen_quant_fixtures.py)"),
    )
    .unwrap();
    println!("hashes from gguf-py {}", doc["gguf_py_version"]);
    let f = GgufFile::open(&path).unwrap();
    let entries = doc["tensors"].as_array().unwrap();
    assert_eq!(entries.len(), 236);
    assert_eq!(entries.len(), f.tensors().len());
    let t0 = Instant::now();
    let mut buf: Vec<f32> = Vec::new();
    let mut bytes: Vec<u8> = Vec::new();
    let mut failures = Vec::new();
    for e in entries {
        let name = e["name"].as_str().unwrap();
        let t = f.tensor(name).unwrap();
        assert_eq!(t.ty.name(), e["type"].as_str().unwrap(), "{name}");
        let dims: Vec<u64> = e["dims"]
            .as_array()
            .unwrap()
            .iter()
            .map(|d| d.as_u64().unwrap())
            .collect();
        assert_eq!(t.dims, dims, "{name}");
        // Row by row into a poisoned buffer, hashing as we go.
        let mut h = Sha256::new();
        let row_bytes = t.row_bytes();
        buf.clear();
        buf.resize(t.row_len(), f32::NAN);
        for row in f.tensor_bytes(t).chunks_exact(row_bytes) {
            buf.fill(f32::NAN);
            tg_quant::dequantize_row(t.ty, row, &mut buf).unwrap();
            bytes.clear();
            bytes.extend(buf.iter().flat_map(|x| x.to_le_bytes()));
            h.update(&bytes);
        }
        let got = hex(&h.finalize());
        if got != e["sha256"].as_str().unwrap() {
            failures.push(format!("{name} ({})", t.ty));
        }
    }
    println!("hashed {} tensors in {:?}", entries.len(), t0.elapsed());
    assert!(
        failures.is_empty(),
        "{} tensors differ from gguf-py: {failures:?}",
        failures.len()
    );
}

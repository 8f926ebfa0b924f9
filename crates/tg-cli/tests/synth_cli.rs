//! `tg synth`: a two-layer Gemma 3 270M-shaped model with random weights is written, has
//! exactly the layout of the committed fixture (metadata, tensor table, special tokens;
//! `tg synth --dump-layout` of it equals the fixture cut to two layers), loads with
//! `LanguageModel::load` and gives finite logits for a 3-token prompt; its Hugging Face copy lists
//! every Hugging Face tensor name with the right shape (read from the safetensors header
//! alone), holds the same weights (norms minus 1) and has a config that matches the
//! GGUF metadata. A one-layer EmbeddingGemma-300M-shaped folder has the fixture's layout and
//! embeds texts to unit vectors with `tg embed`. The tiny Llama-family files (`llama3-tiny`
//! …) are the library's bytes and run with `tg logits`, whose prompt tokens and top-1 are
//! llama.cpp's (tests/fixtures/llama_cpp/synth). Bad requests fail with a message, never a
//! panic.

use std::path::{Path, PathBuf};
use std::process::Command;

use tg_models::synth::{FolderLayout, GgufLayout};
use tg_models::{LanguageModel, Logits};

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
    let d = std::env::temp_dir().join(format!("tg-synth-cli-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

/// The safetensors header (JSON) of `path`, read without mapping the data.
fn safetensors_header(path: &Path) -> serde_json::Value {
    use std::io::Read;
    let mut f = std::fs::File::open(path).unwrap();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).unwrap();
    let mut h = vec![0u8; u64::from_le_bytes(len) as usize];
    f.read_exact(&mut h).unwrap();
    serde_json::from_slice(&h).unwrap()
}

/// The f32 values of tensor `name` of the safetensors file `path` whose header is `header`.
fn safetensors_f32(path: &Path, header: &serde_json::Value, name: &str) -> Vec<f32> {
    use std::io::{Read, Seek, SeekFrom};
    let mut f = std::fs::File::open(path).unwrap();
    let mut len = [0u8; 8];
    f.read_exact(&mut len).unwrap();
    let base = 8 + u64::from_le_bytes(len);
    let off = &header[name]["data_offsets"];
    let (a, b) = (off[0].as_u64().unwrap(), off[1].as_u64().unwrap());
    f.seek(SeekFrom::Start(base + a)).unwrap();
    let mut bytes = vec![0u8; (b - a) as usize];
    f.read_exact(&mut bytes).unwrap();
    bytes.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// Hugging Face names and shapes of Gemma 3 270M with `layers` layers, written out here
/// (not derived from the code under test).
fn expected_hf(layers: usize) -> Vec<(String, Vec<u64>)> {
    let mut v = vec![("model.embed_tokens.weight".to_string(), vec![262_144, 640]), ("model.norm.weight".to_string(), vec![640])];
    for l in 0..layers {
        for (n, s) in [
            ("input_layernorm", vec![640]),
            ("self_attn.q_proj", vec![1024, 640]),
            ("self_attn.k_proj", vec![256, 640]),
            ("self_attn.v_proj", vec![256, 640]),
            ("self_attn.q_norm", vec![256]),
            ("self_attn.k_norm", vec![256]),
            ("self_attn.o_proj", vec![640, 1024]),
            ("post_attention_layernorm", vec![640]),
            ("pre_feedforward_layernorm", vec![640]),
            ("mlp.gate_proj", vec![2048, 640]),
            ("mlp.up_proj", vec![2048, 640]),
            ("mlp.down_proj", vec![640, 2048]),
            ("post_feedforward_layernorm", vec![640]),
        ] {
            v.push((format!("model.layers.{l}.{n}.weight"), s));
        }
    }
    v
}

#[test]
fn synth_gemma3_two_layers_loads_runs_and_matches_its_hf_copy() {
    let d = dir("two");
    let gguf = d.join("g.gguf");
    let hf = d.join("hf");
    let (gs, hs) = (gguf.to_str().unwrap(), hf.to_str().unwrap());
    ok(&["synth", "gemma3-270m", "--layers", "2", "--seed", "7", "--out", gs, "--hf-dir", hs]);

    // The layout of what was written is the fixture's, cut to two layers.
    let mut expected = GgufLayout::gemma3_270m().unwrap().with_layers(2).unwrap();
    let dumped = ok(&["synth", "--dump-layout", gs]);
    let mut got = GgufLayout::from_json(&dumped).unwrap();
    got.source.clear();
    expected.source.clear();
    assert_eq!(got.metadata, expected.metadata);
    assert_eq!(got.tensors, expected.tensors);
    assert_eq!(got.vocab, expected.vocab);

    // It loads as Gemma 3 and runs.
    let mut m = LanguageModel::load(&gguf, 2).unwrap();
    assert_eq!((m.arch().n_layer(), m.n_vocab(), m.config_as::<tg_models::Gemma3Config>().map(|c| c.n_embd)), (2, 262_144, Some(640)));
    assert_eq!(m.tokenizer.token_text(106).unwrap(), "<end_of_turn>");
    let ids = m.tokenizer.encode("Hi there", true, false);
    assert!(ids.len() >= 2 && ids[0] == 2, "{ids:?}");
    let logits = m.forward(&[2, ids[1], 106], Logits::Last).unwrap();
    assert_eq!(logits.len(), 262_144);
    assert!(logits.iter().all(|x| x.is_finite()));
    let rms = (logits.iter().map(|x| f64::from(*x).powi(2)).sum::<f64>() / logits.len() as f64).sqrt();
    assert!((0.1..10.0).contains(&rms), "logit rms {rms}");

    // The same seed gives the same file; another seed another.
    let again = d.join("again.gguf");
    ok(&["synth", "gemma3-270m", "--layers", "2", "--seed", "7", "-t", "1", "--out", again.to_str().unwrap()]);
    assert!(std::fs::read(&gguf).unwrap() == std::fs::read(&again).unwrap(), "same seed, different files");
    std::fs::remove_file(&again).unwrap();

    // The Hugging Face copy: every expected name with its shape, nothing else, f32.
    let st = hf.join("model.safetensors");
    let header = safetensors_header(&st);
    let obj = header.as_object().unwrap();
    let want = expected_hf(2);
    assert_eq!(obj.keys().filter(|k| *k != "__metadata__").count(), want.len());
    for (name, shape) in &want {
        let t = obj.get(name).unwrap_or_else(|| panic!("{name} missing from the safetensors header"));
        assert_eq!(t["dtype"], "F32", "{name}");
        let s: Vec<u64> = t["shape"].as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect();
        assert_eq!(&s, shape, "{name}");
    }

    // Same weights: a matrix as dequantized, a norm minus 1 (exactly).
    let f = tg_gguf::GgufFile::open(&gguf).unwrap();
    let q = safetensors_f32(&st, &header, "model.layers.1.self_attn.q_proj.weight");
    assert!(q == f.dequantize("blk.1.attn_q.weight").unwrap());
    let n = safetensors_f32(&st, &header, "model.layers.0.post_feedforward_layernorm.weight");
    let g = f.dequantize("blk.0.post_ffw_norm.weight").unwrap();
    assert!(n.iter().zip(&g).all(|(a, b)| 1.0 + a == *b && a.abs() <= 0.4), "norm weights are not GGUF - 1");
    assert!(g.iter().any(|&x| x != 1.0));

    // The config matches the GGUF metadata.
    let cfg: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(hf.join("config.json")).unwrap()).unwrap();
    assert_eq!(cfg["architectures"][0], "Gemma3ForCausalLM");
    assert_eq!(cfg["model_type"], "gemma3_text");
    for (k, v) in [
        ("vocab_size", 262_144u64),
        ("hidden_size", 640),
        ("intermediate_size", 2048),
        ("num_hidden_layers", 2),
        ("num_attention_heads", 4),
        ("num_key_value_heads", 1),
        ("head_dim", 256),
        ("sliding_window", 512),
        ("max_position_embeddings", 32768),
    ] {
        assert_eq!(cfg[k].as_u64(), Some(v), "{k}");
    }
    assert_eq!(cfg["query_pre_attn_scalar"].as_u64(), Some(256), "an integer: Transformers' config validation refuses 256.0");
    assert_eq!(cfg["rope_theta"].as_f64(), Some(1e6));
    assert_eq!(cfg["rope_local_base_freq"].as_f64(), Some(1e4));
    assert_eq!(cfg["rope_parameters"]["sliding_attention"]["rope_theta"].as_f64(), Some(1e4));
    assert_eq!(cfg["layer_types"], serde_json::json!(["sliding_attention", "sliding_attention"]));
    assert_eq!(cfg["rms_norm_eps"].as_f64().map(|e| e as f32), Some(1e-6));
    assert_eq!(cfg["tie_word_embeddings"], true);
    assert_eq!(cfg["torch_dtype"], "float32");
    assert_eq!((cfg["bos_token_id"].as_u64(), cfg["eos_token_id"].as_u64(), cfg["pad_token_id"].as_u64()), (Some(2), Some(1), Some(0)));

    // ... and reads back (with this engine's own Hugging Face reader) as the GGUF's model.
    let from_hf = tg_models::Gemma3Config::from_hf_config(&hf.join("config.json")).unwrap();
    let c = m.config_as::<tg_models::Gemma3Config>().unwrap();
    assert_eq!(
        (from_hf.n_vocab, from_hf.n_embd, from_hf.n_layer, from_hf.n_ff, from_hf.n_head, from_hf.n_head_kv, from_hf.head_dim, from_hf.sliding_window, from_hf.context_length),
        (c.n_vocab, c.n_embd, c.n_layer, c.n_ff, c.n_head, c.n_head_kv, c.head_dim, c.sliding_window, c.context_length)
    );
    assert_eq!((from_hf.rms_eps, from_hf.rope_base_global, from_hf.rope_base_local, from_hf.attn_scale), (c.rms_eps, c.rope_base_global, c.rope_base_local, c.attn_scale));
    assert!(from_hf.causal && from_hf.norm_offset == 1.0);
    assert!((0..c.n_layer).all(|l| from_hf.is_global(l) == c.is_global(l)));

    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn synth_embeddinggemma_one_layer_embeds() {
    let d = dir("emb");
    let out = d.join("emb");
    let o = out.to_str().unwrap();
    ok(&["synth", "embeddinggemma-300m", "--layers", "1", "--seed", "3", "--out", o]);
    let mut expected = FolderLayout::embeddinggemma_300m().unwrap().with_layers(1).unwrap();
    let mut got = FolderLayout::from_json(&ok(&["synth", "--dump-layout", o])).unwrap();
    got.source.clear();
    expected.source.clear();
    assert_eq!(got.files, expected.files);
    assert_eq!(got.tokenizer, expected.tokenizer);
    for (name, st) in &expected.safetensors {
        let mut want = st.tensors.clone();
        let mut have = got.safetensors[name].tensors.clone();
        want.sort_by(|a, b| a.name.cmp(&b.name));
        have.sort_by(|a, b| a.name.cmp(&b.name));
        assert_eq!(have, want, "{name}");
    }
    assert_eq!(got.files["config.json"]["num_hidden_layers"], 1);

    let v: serde_json::Value = serde_json::from_str(&ok(&["embed", "-m", o, "--json", "-t", "2", "ab cd ef", "zz"])).unwrap();
    let e = v["embeddings"].as_array().unwrap();
    assert_eq!(e.len(), 2);
    for row in e {
        let x: Vec<f64> = row.as_array().unwrap().iter().map(|x| x.as_f64().unwrap()).collect();
        assert_eq!(x.len(), 768);
        let norm = x.iter().map(|v| v * v).sum::<f64>().sqrt();
        assert!(x.iter().all(|v| v.is_finite()) && (norm - 1.0).abs() < 1e-3, "norm {norm}");
    }
    // BOS, three known words, EOS; BOS, one word, EOS.
    assert_eq!(v["token_counts"], serde_json::json!([5, 3]));
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn synth_tiny_llama_family_files_run_like_llama_cpp() {
    let d = dir("tiny");
    for model in tg_models::synth::TinyModel::ALL {
        let name = model.name();
        let out = d.join(format!("{name}.gguf"));
        let o = out.to_str().unwrap();
        ok(&["synth", name, "--seed", "1", "--out", o]);
        let lib = d.join("lib.gguf");
        tg_models::synth::write_tiny(model, 1, &lib).unwrap();
        assert!(std::fs::read(&out).unwrap() == std::fs::read(&lib).unwrap(), "{name}: tg synth and write_tiny differ");

        let fx_path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/llama_cpp/synth").join(format!("{name}.json"));
        let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&fx_path).unwrap()).unwrap();
        assert_eq!(fx["meta"]["synth_command"], format!("tg synth {name} --seed 1 --out {name}.gguf"));
        let p = &fx["prompts"][0];
        let v: serde_json::Value = serde_json::from_str(&ok(&["logits", "-m", o, "-t", "2", "--json", "-p", p["prompt"].as_str().unwrap()])).unwrap();
        assert_eq!(v["prompt_tokens"], p["prompt_tokens"], "{name}: prompt tokens");
        assert_eq!(v["n_vocab"], fx["meta"]["n_vocab"], "{name}: vocabulary size");
        assert_eq!(v["argmax"], p["default"]["argmax"], "{name}: top-1 of the final logits");
    }
    let o = d.join("x.gguf");
    let o = o.to_str().unwrap();
    fail(&["synth", "qwen3-tiny", "--layers", "1", "--out", o], "--layers is for the layouts of real models");
    fail(&["synth", "llama3-tiny", "--hf-dir", o, "--out", o], "--hf-dir");
    fail(&["synth", "mistral-tiny"], "--out FILE.gguf is required");
    std::fs::remove_dir_all(&d).unwrap();
}

#[test]
fn synth_errors_are_messages() {
    let d = dir("errors");
    let out = d.join("x.gguf");
    let o = out.to_str().unwrap();
    fail(&["synth", "llama-7b", "--out", o], "unknown model 'llama-7b'");
    fail(&["synth", "llama-7b", "--out", o], "llama3-tiny");
    fail(&["synth", "embeddinggemma-300m", "--layers", "25", "--out", o], "24 layers");
    fail(&["synth", "gemma3-270m"], "--out");
    fail(&["synth", "gemma3-270m", "--layers", "0", "--out", o], "--layers 0");
    fail(&["synth", "gemma3-270m", "--layers", "19", "--out", o], "18 layers");
    fail(&["synth", "gemma3-270m", "--layout", d.join("missing.json").to_str().unwrap(), "--out", o], "cannot read");
    std::fs::write(d.join("bad.json"), "{\"source\": 1}").unwrap();
    fail(&["synth", "gemma3-270m", "--layout", d.join("bad.json").to_str().unwrap(), "--out", o], "not a layout");
    fail(&["synth", "--dump-layout", d.join("missing.gguf").to_str().unwrap()], "missing.gguf");
    assert!(!out.exists());
    std::fs::remove_dir_all(&d).unwrap();
}

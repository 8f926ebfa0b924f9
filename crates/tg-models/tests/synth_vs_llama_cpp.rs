//! Tiny random-weight Llama-family files (`tg synth llama3-tiny` …: Llama 3 with RoPE
//! frequency factors, Mistral with a sliding window and a SentencePiece vocabulary, Qwen3,
//! Llama with linear and with YaRN RoPE scaling) through this engine against llama.cpp on
//! the same files (fixtures in tests/fixtures/llama_cpp/synth, produced as docs/fixtures.md
//! describes), and against the reference interpreter. Each file is written again here
//! with the library's writer and must have the sha256 the fixture recorded; no model
//! download and no llama.cpp are needed.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use tg_models::synth::{write_tiny, TinyModel};
use tg_models::{LanguageModel, Logits, SamplingParams};

/// Greedy steps whose top1 − top2 margin in llama.cpp's logits is below this are near ties:
/// a different choice there is not a disagreement.
const NEAR_TIE: f64 = 0.05;

/// SHA-256 of `data` (FIPS 180-4), hex.
fn sha256_hex(data: &[u8]) -> String {
    const K: [u32; 64] = [
        0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
        0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
        0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
        0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
        0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2,
    ];
    let mut h: [u32; 8] = [0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a, 0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19];
    let mut msg = data.to_vec();
    msg.push(0x80);
    while msg.len() % 64 != 56 {
        msg.push(0);
    }
    msg.extend_from_slice(&((data.len() as u64) * 8).to_be_bytes());
    for block in msg.chunks_exact(64) {
        let mut w = [0u32; 64];
        for (i, c) in block.chunks_exact(4).enumerate() {
            w[i] = u32::from_be_bytes([c[0], c[1], c[2], c[3]]);
        }
        for i in 16..64 {
            let s0 = w[i - 15].rotate_right(7) ^ w[i - 15].rotate_right(18) ^ (w[i - 15] >> 3);
            let s1 = w[i - 2].rotate_right(17) ^ w[i - 2].rotate_right(19) ^ (w[i - 2] >> 10);
            w[i] = w[i - 16].wrapping_add(s0).wrapping_add(w[i - 7]).wrapping_add(s1);
        }
        let [mut a, mut b, mut c, mut d, mut e, mut f, mut g, mut hh] = h;
        for i in 0..64 {
            let t1 = hh.wrapping_add(e.rotate_right(6) ^ e.rotate_right(11) ^ e.rotate_right(25)).wrapping_add((e & f) ^ (!e & g)).wrapping_add(K[i]).wrapping_add(w[i]);
            let t2 = (a.rotate_right(2) ^ a.rotate_right(13) ^ a.rotate_right(22)).wrapping_add((a & b) ^ (a & c) ^ (b & c));
            (hh, g, f, e, d, c, b, a) = (g, f, e, d.wrapping_add(t1), c, b, a, t1.wrapping_add(t2));
        }
        for (x, y) in h.iter_mut().zip([a, b, c, d, e, f, g, hh]) {
            *x = x.wrapping_add(y);
        }
    }
    h.iter().map(|x| format!("{x:08x}")).collect()
}

#[test]
fn sha256_known_answers() {
    assert_eq!(sha256_hex(b""), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    assert_eq!(sha256_hex(b"abc"), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    let long = b"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq";
    assert_eq!(sha256_hex(long), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
}

/// llama.cpp's results for one prompt in one variant.
struct Run {
    logits: Vec<f32>,
    tokens: Vec<u32>,
    margins: Vec<f64>,
    /// llama.cpp's top-5 `(id, logit)` at each greedy step.
    top5: Vec<Vec<(u32, f32)>>,
}

struct Prompt {
    slug: String,
    text: String,
    tokens: Vec<u32>,
    default: Run,
    nofa: Run,
}

struct Fixture {
    model: TinyModel,
    seed: u64,
    sha256: String,
    /// llama.cpp's vocabulary facts: size, add-BOS rule, BOS, EOS, end-of-generation ids.
    vocab: (usize, bool, u32, u32, Vec<u32>),
    prompts: Vec<Prompt>,
}

fn fixture_dir() -> PathBuf {
    repo_root().join("tests/fixtures/llama_cpp/synth")
}

fn load_fixture(model: TinyModel) -> Fixture {
    let path = fixture_dir().join(format!("{}.json", model.name()));
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    let run = |v: &serde_json::Value| {
        let steps = v["steps"].as_array().unwrap();
        Run {
            logits: v["final_logits"].as_array().unwrap().iter().map(|x| x.as_f64().unwrap() as f32).collect(),
            tokens: ids(&v["generated_tokens"]),
            margins: steps.iter().map(|s| s["margin"].as_f64().unwrap()).collect(),
            top5: steps.iter().map(|s| s["top5"].as_array().unwrap().iter().map(|p| (p[0].as_u64().unwrap() as u32, p[1].as_f64().unwrap() as f32)).collect()).collect(),
        }
    };
    let meta = &d["meta"];
    assert_eq!(meta["model"], model.name());
    Fixture {
        model,
        seed: meta["seed"].as_u64().unwrap(),
        sha256: meta["file_sha256"].as_str().unwrap().to_string(),
        vocab: (
            meta["n_vocab"].as_u64().unwrap() as usize,
            meta["add_bos"].as_bool().unwrap(),
            meta["bos_id"].as_u64().unwrap() as u32,
            meta["eos_id"].as_u64().unwrap() as u32,
            ids(&meta["eog_ids"]),
        ),
        prompts: d["prompts"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| Prompt {
                slug: p["slug"].as_str().unwrap().to_string(),
                text: p["prompt"].as_str().unwrap().to_string(),
                tokens: ids(&p["prompt_tokens"]),
                default: run(&p["default"]),
                nofa: run(&p["nofa_f32kv"]),
            })
            .collect(),
    }
}

/// Writes the fixture's file into `dir` and checks it is byte for byte the one llama.cpp ran.
fn regenerate(f: &Fixture, dir: &Path) -> PathBuf {
    let path = dir.join(format!("{}.gguf", f.model.name()));
    write_tiny(f.model, f.seed, &path).unwrap();
    let sha = sha256_hex(&std::fs::read(&path).unwrap());
    assert_eq!(
        sha,
        f.sha256,
        "{}: the file `tg synth {} --seed {}` writes has changed since the fixture was made (regenerate the fixture: docs/fixtures.md)",
        f.model.name(),
        f.model.name(),
        f.seed
    );
    path
}

/// Checks that `ours` (greedy tokens, possibly cut short) equals llama.cpp's `want` up to
/// its first difference, which may only come at a step where llama.cpp's margin is below
/// `tol`; returns how many tokens are equal.
fn greedy_agrees(what: &str, how: &str, ours: &[u32], want: &Run, tol: f64) -> usize {
    let equal = ours.iter().zip(&want.tokens).take_while(|(a, b)| a == b).count();
    if equal < ours.len().min(want.tokens.len()) {
        let margin = want.margins[equal];
        let theirs = want.top5[equal].iter().find(|(id, _)| *id == ours[equal]).map(|&(_, v)| want.top5[equal][0].1 - v);
        assert!(
            margin < tol,
            "{what}: {how}: token {} at step {equal} differs from llama.cpp's {} where llama.cpp's margin {margin:.4} is not within its own precision ({tol:.3}); \
             llama.cpp's logit of our token is {} below its top\nours:      {ours:?}\nllama.cpp: {:?}",
            ours[equal],
            want.tokens[equal],
            theirs.map_or("(not in its top-5)".into(), |d| format!("{d:.4}")),
            want.tokens
        );
    }
    equal
}

fn as_f64(v: &[f32]) -> Vec<f64> {
    v.iter().map(|&x| f64::from(x)).collect()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max)
}

/// Checks one file against its fixture; returns a one-line summary.
fn check_model(model: TinyModel, dir: &Path) -> String {
    let f = load_fixture(model);
    let name = model.name();
    let path = regenerate(&f, dir);
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let mut q8 = LanguageModel::load(&path, 2).unwrap();
    q8.set_compile_options(tg_compiler::CompileOptions { numerics: tg_compiler::Numerics::Q8Activations, ..Default::default() });
    let greedy = SamplingParams { temperature: 0.0, ..Default::default() };
    let t = &m.tokenizer;
    let eog: Vec<u32> = (0..t.vocab_size() as u32).filter(|&i| t.is_eog(i)).collect();
    assert_eq!(
        (t.vocab_size(), t.add_bos(), t.bos(), t.eos(), eog),
        f.vocab.clone(),
        "{name}: vocabulary size, add-BOS rule, BOS, EOS, end-of-generation ids differ from llama.cpp's"
    );
    let mut line = format!("{name}:");
    for p in &f.prompts {
        let what = format!("{name}/{}", p.slug);
        // Tokenization: the text, as llama.cpp tokenized it (BOS by the file's rule, special tokens parsed).
        let ids = m.tokenizer.encode(&p.text, true, true);
        assert_eq!(ids, p.tokens, "{what}: prompt ids differ from llama.cpp's");

        // Final prompt-position logits: the reference interpreter (f64) and llama.cpp.
        let got = m.forward(&ids, Logits::Last).unwrap();
        let g = m.graph(ids.len(), Logits::Last).unwrap();
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[ids.len()], ids.iter().map(|&t| t as i32).collect()).unwrap());
        let exact = tg_ir::interp::eval(&g, &inputs, m.weights()).unwrap();
        let e_ref = nmse(&got, &exact["logits"].data);
        let e_llama = nmse(&got, &as_f64(&p.default.logits));
        let e_nofa = nmse(&got, &as_f64(&p.nofa.logits));
        let spread = nmse(&p.nofa.logits, &as_f64(&p.default.logits));
        let ref_llama = nmse(&exact["logits"].data.iter().map(|&x| x as f32).collect::<Vec<_>>(), &as_f64(&p.default.logits));
        let top = top_k(&got, 2);
        let got_q8 = q8.forward(&ids, Logits::Last).unwrap();
        eprintln!(
            "{what}: with 8-bit activations (Numerics::Q8Activations, llama.cpp's arithmetic for quantized weights): NMSE vs llama.cpp default {:.2e}, vs nofa_f32kv {:.2e}",
            nmse(&got_q8, &as_f64(&p.default.logits)),
            nmse(&got_q8, &as_f64(&p.nofa.logits))
        );
        eprintln!(
            "{what}: {} prompt tokens; NMSE ours vs f64 reference {e_ref:.2e}; vs llama.cpp default {e_llama:.2e} (max |Δ| {:.3}), vs nofa_f32kv {e_nofa:.2e} (max |Δ| {:.3}); \
             llama.cpp default vs nofa_f32kv {spread:.2e} (max |Δ| {:.3}); f64 reference vs llama.cpp {ref_llama:.2e}; top-1 {} (llama.cpp {}), margin {:.3}",
            ids.len(),
            max_abs(&got, &p.default.logits),
            max_abs(&got, &p.nofa.logits),
            max_abs(&p.nofa.logits, &p.default.logits),
            top[0],
            top_k(&p.default.logits, 1)[0],
            got[top[0]] - got[top[1]],
        );
        assert_eq!(got.len(), p.default.logits.len(), "{what}: vocabulary size");
        assert!(e_ref < 1e-6, "{what}: NMSE vs the f64 reference {e_ref:e}");
        let bound = (10.0 * spread).max(1e-4);
        assert!(e_llama < bound, "{what}: NMSE vs llama.cpp {e_llama:e} ≥ {bound:e} (10 × llama.cpp's own default-vs-nofa spread {spread:e}, at least 1e-4)");
        assert_eq!(top[0], top_k(&p.default.logits, 1)[0], "{what}: top-1 differs from llama.cpp's");

        // Greedy steps. llama.cpp's own precision (Q8_0 / Q8_K / f16 activations in its matrix
        // products, f16 K/V) moves its logits by about `noise` (the largest change of a final
        // logit between its two attention settings); a top1 − top2 margin below `tol` is one
        // it cannot resolve itself. Our greedy tokens must equal llama.cpp's until the end or
        // until a step whose llama.cpp margin is below `tol`, where they may part.
        let noise = f64::from(max_abs(&p.nofa.logits, &p.default.logits));
        let tol = (2.0 * noise).max(NEAR_TIE);
        let tie = p.default.margins.iter().position(|&x| x < NEAR_TIE);
        // Teacher forcing: one run over the prompt and llama.cpp's tokens, every position's
        // logits (no states); up to the first difference these are our own greedy steps.
        let n_gen = p.default.tokens.len();
        let mut seq = ids.clone();
        seq.extend_from_slice(&p.default.tokens[..n_gen - 1]);
        let all = m.forward(&seq, Logits::All).unwrap();
        let v = m.n_vocab();
        let mut full = Vec::new();
        let mut worst_top5 = 0f32;
        for step in 0..n_gen {
            let l = &all[(ids.len() - 1 + step) * v..(ids.len() + step) * v];
            let tok = top_k(l, 1)[0] as u32;
            worst_top5 = p.default.top5[step].iter().map(|&(id, x)| (l[id as usize] - x).abs()).fold(worst_top5, f32::max);
            full.push(tok);
            if tok != p.default.tokens[step] {
                break;
            }
        }
        let equal = greedy_agrees(&what, "greedy (teacher-forced, all positions)", &full, &p.default, tol);
        // The engine's own generation (incremental, with its K/V states; it stops at an end-of-generation token).
        let (out, _) = m.generate_tokens(&ids, p.default.tokens.len(), &greedy, |_| true).unwrap();
        let gen_equal = greedy_agrees(&what, "generate_tokens", &out, &p.default, tol);
        let nofa_equal = p.nofa.tokens.iter().zip(&p.default.tokens).take_while(|(a, b)| a == b).count();
        eprintln!(
            "{what}: greedy: {equal} of {} tokens equal llama.cpp's (generate_tokens: {gen_equal} of {}); llama.cpp's first margin < {NEAR_TIE}: {}; \
             tolerance {tol:.3} (llama.cpp default vs nofa_f32kv max |Δ| {noise:.3}); max |Δ| on llama.cpp's top-5 logits over the steps compared {worst_top5:.3}; llama.cpp nofa_f32kv keeps {nofa_equal}",
            p.default.tokens.len(),
            out.len(),
            tie.map_or("none".into(), |t| format!("step {t} ({:.4})", p.default.margins[t])),
        );
        line.push_str(&format!(" {} NMSE {e_llama:.1e} (spread {spread:.1e}), greedy {equal}/{};", p.slug, p.default.tokens.len()));
    }
    line
}

fn run(model: TinyModel) {
    let dir = std::env::temp_dir().join(format!("tg-synth-vs-llama-{}-{}", std::process::id(), model.name()));
    std::fs::create_dir_all(&dir).unwrap();
    eprintln!("{}", check_model(model, &dir));
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn llama3_tiny_matches_llama_cpp() {
    run(TinyModel::Llama3);
}

#[test]
fn mistral_tiny_matches_llama_cpp() {
    run(TinyModel::Mistral);
}

#[test]
fn qwen3_tiny_matches_llama_cpp() {
    run(TinyModel::Qwen3);
}

#[test]
fn llama_linear_tiny_matches_llama_cpp() {
    run(TinyModel::LlamaLinear);
}

#[test]
fn llama_yarn_tiny_matches_llama_cpp() {
    run(TinyModel::LlamaYarn);
}

/// Every tiny model has a fixture and the files are distinct.
#[test]
fn every_tiny_model_has_a_fixture() {
    let mut shas: Vec<String> = TinyModel::ALL.iter().map(|&m| load_fixture(m).sha256).collect();
    shas.sort();
    shas.dedup();
    assert_eq!(shas.len(), TinyModel::ALL.len());
}

/// The linear and YaRN files hold the same weights (same seed, names and types) and differ
/// only in their RoPE scaling, so llama.cpp's logits on them differ by far more than any
/// tolerance above: the scaling is exercised, not ignored.
#[test]
fn rope_scaling_changes_llama_cpp_logits() {
    let (lin, yarn) = (load_fixture(TinyModel::LlamaLinear), load_fixture(TinyModel::LlamaYarn));
    for (a, b) in lin.prompts.iter().zip(&yarn.prompts) {
        assert_eq!(a.tokens, b.tokens);
        let e = nmse(&a.default.logits, &as_f64(&b.default.logits));
        eprintln!("{}: NMSE between llama.cpp's logits with linear and with YaRN scaling {e:.2e}", a.slug);
        assert!(e > 1e-2, "{}: linear and YaRN scaling give nearly the same logits ({e:e})", a.slug);
    }
}

/// A context length equal to a weight extent (here `n_ff`) caps the capacity of the
/// incremental session at an extent the derivation cannot tell from a feature axis: the
/// session then takes the next smaller capacity, and generation equals recomputation.
#[test]
fn context_equal_to_a_weight_extent_still_generates_incrementally() {
    let dir = std::env::temp_dir().join(format!("tg-ctx-extent-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("ctx-eq-ff.gguf");
    let mut spec = tg_models::synth::TinyModel::Llama3.spec();
    spec.context_length = spec.n_ff;
    tg_models::synth::write_tiny_spec(spec, 7, &path).unwrap();
    let mut m = tg_models::LanguageModel::load(&path, 2).unwrap();
    let prompt: Vec<u32> = (5..300).step_by(13).collect();
    let greedy = tg_models::SamplingParams { temperature: 0.0, ..Default::default() };
    let (inc, _) = m.generate_tokens(&prompt, 8, &greedy, |_| true).unwrap();
    let cap = m.session_info().capacity;
    m.set_incremental(false);
    let (full, _) = m.generate_tokens(&prompt, 8, &greedy, |_| true).unwrap();
    eprintln!("context {} = n_ff: capacity {cap}, {} tokens equal to recomputation", m.context_length(), inc.len());
    assert!(cap < m.context_length() && cap >= prompt.len() + 8, "capacity {cap}");
    assert_eq!(inc, full);
    std::fs::remove_dir_all(&dir).ok();
}

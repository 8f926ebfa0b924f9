//! Qwen2.5-Coder-0.5B-Instruct (Q4_K_M, architecture `qwen2`) through the generation
//! engine against llama.cpp on the same file (fixtures in
//! tests/fixtures/llama_cpp/qwen2.5-coder, produced as docs/fixtures.md describes), and
//! against the reference interpreter.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::PathBuf;
use tg_models::{LanguageModel, Logits, Message, SamplingParams};

/// The Qwen file: `TG_QWEN_MODEL`, else the cache. Missing is a failure unless
/// `TG_ALLOW_MISSING_MODEL=1` (then the test says it skipped).
fn qwen_path() -> Option<PathBuf> {
    let p = std::env::var_os("TG_QWEN_MODEL").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join("qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"));
    if p.is_file() {
        return Some(p);
    }
    if std::env::var("TG_ALLOW_MISSING_MODEL").as_deref() == Ok("1") {
        eprintln!("SKIPPED: Qwen model not found at {} (TG_ALLOW_MISSING_MODEL=1)", p.display());
        return None;
    }
    panic!("Qwen model not found at {}: run `python3 scripts/fetch_model.py --model qwen2.5-coder-0.5b` or set TG_QWEN_MODEL", p.display());
}

struct Case {
    slug: String,
    /// A raw prompt, or the chat's messages.
    prompt: Result<String, Vec<Message>>,
    prompt_tokens: Vec<u32>,
    tokens: Vec<u32>,
    margins: Vec<f64>,
    has_logits_file: bool,
}

fn fixtures() -> Vec<Case> {
    let dir = repo_root().join("tests/fixtures/llama_cpp/qwen2.5-coder");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(dir.join("greedy.json")).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    let case = |p: &serde_json::Value| {
        let prompt = match p["kind"].as_str() {
            Some("chat") => Err(p["messages"].as_array().unwrap().iter().map(|m| Message::new(m["role"].as_str().unwrap(), m["content"].as_str().unwrap())).collect()),
            _ => Ok(p["prompt"].as_str().unwrap().to_string()),
        };
        let slug = p["slug"].as_str().unwrap().to_string();
        Case {
            has_logits_file: dir.join(format!("{slug}.logits.f32")).is_file(),
            slug,
            prompt,
            prompt_tokens: ids(&p["prompt_tokens"]),
            tokens: ids(&p["generated_tokens"]),
            margins: p["steps"].as_array().unwrap().iter().map(|s| s["margin"].as_f64().unwrap()).collect(),
        }
    };
    d["prompts"].as_array().unwrap().iter().chain(d["chats"].as_array().unwrap()).map(case).collect()
}

/// Prompt ids equal llama.cpp's (raw prompts through the tokenizer; chats through the file's
/// template, rendered and tokenized), and greedy tokens equal llama.cpp's until its first
/// near tie (top-1 minus top-2 below 0.05 in its own logits), or our end of generation.
#[test]
fn greedy_tokens_match_llama_cpp_until_a_near_tie() {
    let Some(path) = qwen_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let greedy = SamplingParams { temperature: 0.0, ..Default::default() };
    let (mut compared, mut cases) = (0, 0);
    for c in fixtures() {
        let ids = match &c.prompt {
            Ok(text) => m.tokenizer.encode(text, true, true),
            Err(msgs) => m.chat_prompt(msgs).unwrap(),
        };
        assert_eq!(ids, c.prompt_tokens, "{}: prompt ids differ from llama.cpp's", c.slug);
        let (out, _) = m.generate_tokens(&ids, c.tokens.len(), &greedy, |_| true).unwrap();
        let tie = c.margins.iter().position(|&x| x < 0.05).unwrap_or(c.margins.len());
        let n = tie.min(out.len());
        let equal = out.iter().zip(&c.tokens).take_while(|(a, b)| a == b).count();
        eprintln!(
            "{}: {} prompt tokens equal; {equal} of {} generated tokens equal llama.cpp's (its first near tie: {}; we stopped after {})",
            c.slug,
            ids.len(),
            c.tokens.len(),
            if tie < c.margins.len() { format!("step {tie}") } else { "none".into() },
            out.len()
        );
        assert_eq!(&out[..n], &c.tokens[..n], "{}: greedy tokens differ before llama.cpp's first near tie (step {tie})", c.slug);
        compared += n;
        cases += 1;
    }
    eprintln!("{cases} prompts, {compared} generated tokens compared, all equal");
}

/// Final prompt-position logits: against the reference interpreter (f64) NMSE < 1e-6, and
/// against llama.cpp top-1 equal, top-10 overlap ≥ 8, NMSE printed.
#[test]
fn final_logits_match_the_reference_and_llama_cpp() {
    let Some(path) = qwen_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let dir = repo_root().join("tests/fixtures/llama_cpp/qwen2.5-coder");
    for c in fixtures().into_iter().filter(|c| c.has_logits_file) {
        let toks = &c.prompt_tokens;
        let got = m.forward(toks, Logits::Last).unwrap();
        let g = m.graph(toks.len(), Logits::Last).unwrap();
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[toks.len()], toks.iter().map(|&t| t as i32).collect()).unwrap());
        let exact = tg_ir::interp::eval(&g, &inputs, m.weights()).unwrap();
        let e_ref = nmse(&got, &exact["logits"].data);
        let want = read_f32(&dir.join(format!("{}.logits.f32", c.slug)));
        let wd: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        let e_llama = nmse(&got, &wd);
        let (tg, tw) = (top_k(&got, 10), top_k(&want, 10));
        let overlap = tg.iter().filter(|x| tw.contains(x)).count();
        eprintln!("{}: NMSE vs f64 reference {e_ref:.3e}, vs llama.cpp {e_llama:.3e}; top-1 {} vs {}, top-10 overlap {overlap}", c.slug, tg[0], tw[0]);
        assert!(e_ref < 1e-6, "{}: NMSE vs the reference {e_ref:e}", c.slug);
        assert!(e_llama < 1e-2, "{}: NMSE vs llama.cpp {e_llama:e}", c.slug);
        assert_eq!(tg[0], tw[0], "{}: top-1", c.slug);
        assert!(overlap >= 8, "{}: top-10 overlap {overlap}", c.slug);
    }
}

/// A chat keeps its states across turns: the second turn's prompt shares the first turn's
/// rendered prefix, so only its new tokens are processed.
#[test]
fn second_chat_turn_reuses_the_first() {
    let Some(path) = qwen_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let greedy = SamplingParams { temperature: 0.0, ..Default::default() };
    let mut msgs = vec![Message::new("user", "Name a prime number.")];
    let ids = m.chat_prompt(&msgs).unwrap();
    let (out, _) = m.generate_tokens(&ids, 12, &greedy, |_| true).unwrap();
    let reply = tg_models::cut_at_stop(&m.tokenizer.decode(&out, false).unwrap(), &[]).to_string();
    msgs.push(Message::new("assistant", reply.trim()));
    msgs.push(Message::new("user", "And another?"));
    let ids2 = m.chat_prompt(&msgs).unwrap();
    assert!(ids2.starts_with(&ids), "the second turn's prompt extends the first");
    m.generate_tokens(&ids2, 4, &greedy, |_| true).unwrap();
    let info = m.session_info();
    eprintln!("turn 2: {} prompt tokens, {} taken from the kept states", ids2.len(), info.reused);
    assert!(info.reused >= ids.len(), "reused {} of a {}-token shared prefix", info.reused, ids.len());
}

//! Gemma 3 270M through the whole pipeline against llama.cpp's outputs on the same GGUF
//! (fixtures in tests/fixtures/llama_cpp, produced as docs/fixtures.md describes), and
//! against the reference interpreter.

mod common;

use common::*;
use std::collections::HashMap;
use tg_models::{LanguageModel, Logits, SamplingParams};

struct Case {
    prompt: String,
    prompt_tokens: Vec<u32>,
    tokens: Vec<u32>,
    slug: String,
    steps: Vec<serde_json::Value>,
}

fn fixtures() -> Vec<Case> {
    let path = repo_root().join("tests/fixtures/llama_cpp/greedy.json");
    let d: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let ids = |v: &serde_json::Value| v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect::<Vec<u32>>();
    d["prompts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| Case {
            prompt: p["prompt"].as_str().unwrap().to_string(),
            prompt_tokens: ids(&p["prompt_tokens"]),
            tokens: ids(&p["generated_tokens"]),
            slug: p["slug"].as_str().unwrap().to_string(),
            steps: p["steps"].as_array().unwrap().clone(),
        })
        .collect()
}

/// Greedy 32-token continuations equal llama.cpp's. Where they part, the step must be a
/// near tie in llama.cpp's own logits (margin < 0.25) and at least 15 tokens must agree;
/// the margins are printed.
#[test]
fn greedy_continuations_match_llama_cpp() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let mut total_match = 0;
    for c in fixtures() {
        let ids = m.tokenizer.encode(&c.prompt, true, true);
        assert_eq!(ids, c.prompt_tokens, "prompt tokens of {:?}", c.prompt);
        let (out, _) = m.generate_tokens(&ids, c.tokens.len(), &SamplingParams::default(), |_| true).unwrap();
        let first_diff = out.iter().zip(&c.tokens).position(|(a, b)| a != b);
        match first_diff {
            None => {
                eprintln!("{:?}: all {} tokens equal llama.cpp's", c.prompt, out.len());
                assert_eq!(out.len(), c.tokens.len());
                total_match += out.len();
            }
            Some(i) => {
                // Our own logits at the step where we part, and llama.cpp's margin there.
                let mut seq = ids.clone();
                seq.extend_from_slice(&c.tokens[..i]);
                let ours = m.forward(&seq, Logits::Last).unwrap();
                let (a, b) = (c.tokens[i] as usize, out[i] as usize);
                let ref_margin = c.steps[i]["margin"].as_f64().unwrap();
                eprintln!(
                    "{:?}: first {i} tokens equal; at step {i} llama.cpp picks {a} (its margin {ref_margin:.4}), we pick {b}: our logits {a}={:.4} {b}={:.4} (margin {:.4})",
                    c.prompt,
                    ours[a],
                    ours[b],
                    ours[b] - ours[a]
                );
                // The exact (f64) forward pass on the same prefix sides with our kernels: the
                // flip comes from llama.cpp's rounding (8-bit activations, f16 KV), not ours.
                let g = m.graph(seq.len(), Logits::Last).unwrap();
                let mut inputs = HashMap::new();
                inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[seq.len()], seq.iter().map(|&t| t as i32).collect()).unwrap());
                let exact = &tg_ir::interp::eval(&g, &inputs, m.weights()).unwrap()["logits"].data;
                eprintln!("    reference interpreter (f64): {a}={:.4} {b}={:.4} (margin {:.4})", exact[a], exact[b], exact[b] - exact[a]);
                assert!(exact[b] > exact[a], "{:?}: the f64 reference disagrees with our kernels at step {i}", c.prompt);
                assert!(i >= 15, "{:?}: diverged from llama.cpp at step {i}", c.prompt);
                assert!(ref_margin < 0.25 && (ours[b] - ours[a]).abs() < 0.25, "{:?}: step {i} is not a near tie", c.prompt);
                total_match += i;
            }
        }
    }
    eprintln!("{total_match} of 96 generated tokens equal llama.cpp's before any divergence");
}

/// Final prompt-position logits: top-1 equal and top-10 sets overlapping in at least 8
/// against llama.cpp.
#[test]
fn final_logits_match_llama_cpp() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    for c in fixtures() {
        let want = read_f32(&repo_root().join(format!("tests/fixtures/llama_cpp/{}.logits.f32", c.slug)));
        let got = m.forward(&c.prompt_tokens, Logits::Last).unwrap();
        assert_eq!(got.len(), want.len());
        let (tg, tw) = (top_k(&got, 10), top_k(&want, 10));
        let overlap = tg.iter().filter(|x| tw.contains(x)).count();
        let wd: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        // llama.cpp's own spread: its flash-attention/f16-KV default vs its f32 attention.
        let alt = read_f32(&repo_root().join(format!("tests/fixtures/llama_cpp/{}.nofa_f32kv.logits.f32", c.slug)));
        let spread = nmse(&alt, &wd);
        let ours = nmse(&got, &wd);
        eprintln!("{:?}: top1 {} vs {}, top-10 overlap {overlap}, NMSE vs llama.cpp {ours:.3e} (llama.cpp's own f32-attention run: {spread:.3e})", c.prompt, tg[0], tw[0]);
        assert!(ours < spread, "{:?}: further from llama.cpp ({ours:e}) than llama.cpp's own configurations are from each other ({spread:e})", c.prompt);
        assert_eq!(tg[0], tw[0], "top-1 of {:?}", c.prompt);
        assert!(overlap >= 8, "top-10 overlap {overlap} for {:?}", c.prompt);
    }
}

/// The kernel run of the whole model agrees with the reference interpreter (f64) on every
/// logit of every position: NMSE < 1e-6.
#[test]
fn kernels_match_the_reference_interpreter() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let c = &fixtures()[0];
    let toks = &c.prompt_tokens;
    let got = m.forward(toks, Logits::All).unwrap();
    let g = m.graph(toks.len(), Logits::All).unwrap();
    let mut inputs = HashMap::new();
    inputs.insert("tokens".to_string(), tg_ir::HostTensor::i32(&[toks.len()], toks.iter().map(|&t| t as i32).collect()).unwrap());
    let want = tg_ir::interp::eval(&g, &inputs, m.weights()).unwrap();
    let want = &want["logits"];
    assert_eq!(want.shape, vec![toks.len(), m.n_vocab()]);
    let e = nmse(&got, &want.data);
    eprintln!("kernels vs reference interpreter, all {} positions: NMSE {e:.3e}", toks.len());
    assert!(e < 1e-6, "NMSE {e:e}");
    // Top-1 at every position agrees too.
    let v = m.n_vocab();
    for p in 0..toks.len() {
        let w: Vec<f32> = want.data[p * v..(p + 1) * v].iter().map(|&x| x as f32).collect();
        assert_eq!(top_k(&got[p * v..(p + 1) * v], 1), top_k(&w, 1), "position {p}");
    }
}

/// With 8-bit activations (`Numerics::Q8Activations`) the final logits stay close to the
/// exact run and to llama.cpp: top-1 equal, top-10 overlap ≥ 8.
#[test]
fn q8_activation_numerics_stay_close() {
    let Some(path) = model_path() else { return };
    let mut exact = LanguageModel::load(&path, 2).unwrap();
    let mut q8 = LanguageModel::load(&path, 2).unwrap();
    q8.set_compile_options(tg_compiler::CompileOptions { numerics: tg_compiler::Numerics::Q8Activations, ..Default::default() });
    for c in fixtures() {
        let want = read_f32(&repo_root().join(format!("tests/fixtures/llama_cpp/{}.logits.f32", c.slug)));
        let e = exact.forward(&c.prompt_tokens, Logits::Last).unwrap();
        let q = q8.forward(&c.prompt_tokens, Logits::Last).unwrap();
        let ed: Vec<f64> = e.iter().map(|&x| x as f64).collect();
        let wd: Vec<f64> = want.iter().map(|&x| x as f64).collect();
        let (tq, tw) = (top_k(&q, 10), top_k(&want, 10));
        let overlap = tq.iter().filter(|x| tw.contains(x)).count();
        eprintln!("{:?}: q8 vs exact NMSE {:.3e}, q8 vs llama.cpp NMSE {:.3e}, top-10 overlap with llama.cpp {overlap}", c.prompt, nmse(&q, &ed), nmse(&q, &wd));
        assert_eq!(tq[0], tw[0], "top-1 of {:?}", c.prompt);
        assert!(overlap >= 8, "top-10 overlap {overlap} for {:?}", c.prompt);
        assert!(nmse(&q, &ed) < 1e-2, "q8 drifted from the exact run");
    }
}

/// Prompts longer than the 512-token sliding window (645–1430 tokens): the local layers
/// drop old tokens, and the top-1 next token and top-5 set still agree with llama.cpp
/// (fixture: tests/fixtures/llama_cpp/long_prompts.json, gen_long_prompts.py).
#[test]
fn long_prompts_past_the_sliding_window_match_llama_cpp() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/llama_cpp/long_prompts.json")).unwrap()).unwrap();
    for p in fx["prompts"].as_array().unwrap() {
        let ids = m.tokenizer.encode(p["prompt"].as_str().unwrap(), true, true);
        assert_eq!(ids.len() as u64, p["prompt_tokens"].as_u64().unwrap());
        assert!(ids.len() > m.config_as::<tg_models::Gemma3Config>().unwrap().sliding_window);
        let got = m.forward(&ids, Logits::Last).unwrap();
        let want: Vec<usize> = p["top5"].as_array().unwrap().iter().map(|x| x[0].as_u64().unwrap() as usize).collect();
        let ours = top_k(&got, 5);
        let overlap = ours.iter().filter(|x| want.contains(x)).count();
        eprintln!("{} tokens: top-5 ours {ours:?}, llama.cpp {want:?}", ids.len());
        assert_eq!(ours[0], want[0], "top-1 at {} tokens", ids.len());
        assert!(overlap >= 4, "top-5 overlap {overlap} at {} tokens", ids.len());
    }
}

/// Relative squared error of `got` against `want`.
fn rel_err(got: &[f32], want: &[f32]) -> f64 {
    assert_eq!(got.len(), want.len());
    let num: f64 = got.iter().zip(want).map(|(&a, &b)| ((a - b) as f64).powi(2)).sum();
    let den: f64 = want.iter().map(|&b| (b as f64).powi(2)).sum();
    num / den.max(1e-30)
}

/// The incremental path (prompt once, then one token per run, with the states the
/// derivation keeps) gives the logits of recomputing the whole sequence, and the same
/// function builds both: the model graph has no state, the derived graph does.
#[test]
fn incremental_runs_equal_whole_sequence_runs() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let full = m.graph(8, Logits::Last).unwrap();
    assert!(!full.nodes.iter().any(|n| matches!(n.op, tg_ir::Op::State { .. } | tg_ir::Op::StoreRows { .. })), "the model definition keeps no state");
    let c = &fixtures()[0];
    let mut seq = c.prompt_tokens.clone();
    let got = m.prefill(&seq).unwrap();
    let info = m.session_info();
    eprintln!("{}; {} states, {} KiB", info.derivation, info.states.len(), info.bytes / 1024);
    // Keys and values of every layer, and nothing else.
    assert_eq!(info.states.len(), 2 * m.arch().n_layer());
    let want = m.forward(&seq, Logits::Last).unwrap();
    let e = rel_err(&got, &want);
    eprintln!("prompt of {}: relative error {e:.2e}", seq.len());
    assert!(e < 1e-6, "prompt: {e}");
    for &t in &c.tokens[..6] {
        seq.push(t);
        let got = m.extend(&[t]).unwrap();
        let want = m.forward(&seq, Logits::Last).unwrap();
        let e = rel_err(&got, &want);
        eprintln!("position {}: relative error {e:.2e}", seq.len() - 1);
        assert!(e < 1e-6, "position {}: {e}", seq.len() - 1);
    }
}

/// A prompt sharing a prefix with the previous sequence starts after it, and gives the
/// logits of running it from scratch; so does a prompt past the sliding window, extended
/// token by token (the local layers' window applies to kept keys too).
#[test]
fn shared_prefixes_and_long_prompts_through_the_incremental_path() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/llama_cpp/long_prompts.json")).unwrap()).unwrap();
    let p = &fx["prompts"][0];
    let ids = m.tokenizer.encode(p["prompt"].as_str().unwrap(), true, true);
    assert!(ids.len() > m.config_as::<tg_models::Gemma3Config>().unwrap().sliding_window + 8);
    let n = ids.len();
    m.prefill(&ids[..n - 4]).unwrap();
    let mut got = Vec::new();
    for &t in &ids[n - 4..] {
        got = m.extend(&[t]).unwrap();
    }
    let want: Vec<usize> = p["top5"].as_array().unwrap().iter().map(|x| x[0].as_u64().unwrap() as usize).collect();
    let ours = top_k(&got, 5);
    eprintln!("{n} tokens, last 4 one at a time: top-5 ours {ours:?}, llama.cpp {want:?}");
    assert_eq!(ours[0], want[0]);
    let whole = m.forward(&ids, Logits::Last).unwrap();
    let e = rel_err(&got, &whole);
    assert!(e < 1e-6, "long prompt: {e}");
    // Same first 100 tokens, different rest.
    let mut other = ids[..100].to_vec();
    other.extend(m.tokenizer.encode(" A different ending, about compilers that keep what they computed.", false, false));
    assert_ne!(other[100], ids[100]);
    let got = m.prefill(&other).unwrap();
    assert_eq!(m.session_info().reused, 100);
    let e = rel_err(&got, &m.forward(&other, Logits::Last).unwrap());
    eprintln!("shared prefix of 100: relative error {e:.2e}");
    assert!(e < 1e-6, "shared prefix: {e}");
}

/// Crossing a capacity step (384 rows) moves the kept rows into larger states: the logits
/// after the step equal a whole-sequence run.
#[test]
fn growing_past_the_capacity_keeps_the_rows() {
    let Some(path) = model_path() else { return };
    let mut m = LanguageModel::load(&path, 2).unwrap();
    let fx: serde_json::Value = serde_json::from_str(&std::fs::read_to_string(repo_root().join("tests/fixtures/llama_cpp/long_prompts.json")).unwrap()).unwrap();
    let ids = m.tokenizer.encode(fx["prompts"][0]["prompt"].as_str().unwrap(), true, true);
    m.prefill(&ids[..380]).unwrap();
    assert_eq!(m.session_info().capacity, 384);
    let mut got = Vec::new();
    for &t in &ids[380..390] {
        got = m.extend(&[t]).unwrap();
    }
    let info = m.session_info();
    assert_eq!((info.capacity, info.tokens), (768, 390));
    let e = rel_err(&got, &m.forward(&ids[..390], Logits::Last).unwrap());
    eprintln!("after growing 384 -> 768: relative error {e:.2e}");
    assert!(e < 1e-6, "after growing: {e}");
}

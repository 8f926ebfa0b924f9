//! The one model interface ([`tg_models::open`], [`Model::run`]) on the real models,
//! against their concrete APIs: Gemma 3's logits and generation, EmbeddingGemma's
//! embeddings, ONNX node-test models (inputs bound at import included). Bad inputs are
//! errors naming the model and the input, never panics.

mod common;

use common::*;
use std::collections::HashMap;
use std::path::PathBuf;
use tg_ir::{HostData, HostTensor};
use tg_models::{open, Dim, ElemType, EmbeddingGemma, LanguageModel, InputProblem, Logits, Model, ModelError, OpenOptions, SamplingParams};

fn opts() -> OpenOptions {
    OpenOptions::cpu(2).unwrap()
}

fn feed(pairs: Vec<(&str, HostTensor)>) -> HashMap<String, HostTensor> {
    pairs.into_iter().map(|(k, v)| (k.to_string(), v)).collect()
}

/// The problem of a failed run, checking the message names the model and `needle`.
fn problem(m: &mut dyn Model, inputs: HashMap<String, HostTensor>, needle: &str) -> InputProblem {
    match m.run(&inputs) {
        Err(e @ ModelError::Input { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&m.path().display().to_string()) && msg.contains(needle), "{msg}");
            let ModelError::Input { problem, .. } = e else { unreachable!() };
            problem
        }
        other => panic!("expected an input error naming {needle}, got {:?}", other.map(|o| o.len())),
    }
}

fn f32s(t: &HostTensor) -> &[f32] {
    match &t.data {
        HostData::F32(v) => v,
        _ => panic!("not f32"),
    }
}

#[test]
fn gemma3_through_the_interface_is_its_forward_pass() {
    let Some(path) = model_path() else { return };
    let mut m = open(&path, opts()).unwrap();
    assert_eq!(m.kind(), "gemma3");
    let mut g = LanguageModel::load(&path, 2).unwrap();
    let (ctx, vocab) = (g.context_length(), g.n_vocab());
    let ins = m.inputs();
    assert_eq!((ins.len(), ins[0].name.as_str(), ins[0].elem), (1, "tokens", ElemType::I32));
    assert_eq!(ins[0].dims, Some(vec![Dim::free("tokens", Some(ctx))]));
    assert_eq!(m.outputs()[0].dims.as_ref().unwrap()[1], Dim::Fixed(vocab));

    let ids = g.tokenizer.encode("The capital of France is", true, true);
    let want = g.forward(&ids, Logits::All).unwrap();
    let tokens = HostTensor::i32(&[ids.len()], ids.iter().map(|&t| t as i32).collect()).unwrap();
    let times = m.compile(&feed(vec![("tokens", tokens.clone())])).unwrap();
    assert_eq!(times.plans, 1);
    let out = m.run(&feed(vec![("tokens", tokens.clone())])).unwrap();
    assert_eq!(m.compile(&feed(vec![("tokens", tokens.clone())])).unwrap().plans, 0, "the plan is cached");
    assert_eq!(out.len(), 1);
    assert_eq!((out[0].0.as_str(), out[0].1.shape.as_slice()), ("logits", &[ids.len(), vocab][..]));
    assert_eq!(f32s(&out[0].1), &want[..], "the same plan, the same logits");

    // Generation through the capability is Gemma3::generate_tokens.
    let params = SamplingParams::default();
    let (toks, _) = g.generate_tokens(&ids, 8, &params, |_| true).unwrap();
    let text = m.as_generator().expect("Gemma 3 generates").generate_text("The capital of France is", 8, &params).unwrap();
    assert_eq!(text, g.tokenizer.decode(&toks, false).unwrap());
    assert!(m.as_embedder().is_none());

    // Bad inputs: named, typed, no panic.
    let m = &mut *m;
    assert_eq!(problem(m, feed(vec![]), "'tokens'"), InputProblem::Missing);
    let x = HostTensor::f32(&[2], vec![1.0, 2.0]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", x)]), "'tokens'"), InputProblem::DType);
    assert_eq!(problem(m, feed(vec![("tokens", tokens.clone()), ("extra", tokens.clone())]), "'extra'"), InputProblem::Unknown);
    let bad = HostTensor::i32(&[2], vec![2, vocab as i32]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", bad)]), "vocabulary"), InputProblem::Value);
    let neg = HostTensor::i32(&[1], vec![-1]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", neg)]), "-1"), InputProblem::Value);
    let long = HostTensor::i32(&[ctx + 1], vec![2; ctx + 1]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", long)]), "limit"), InputProblem::Shape);
    let flat = HostTensor::i32(&[1, 2], vec![2, 3]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", flat)]), "'tokens'"), InputProblem::Shape);
    let empty = HostTensor::i32(&[0], vec![]).unwrap();
    assert_eq!(problem(m, feed(vec![("tokens", empty)]), "'tokens'"), InputProblem::Shape);
}

#[test]
fn embedding_gemma_through_the_interface_is_embed() {
    let Some(dir) = embed_model_dir() else { return };
    let mut m = open(&dir, opts()).unwrap();
    assert_eq!(m.kind(), "embedding-gemma");
    let mut e = EmbeddingGemma::load(&dir, 2).unwrap();
    let texts = ["Which planet is known as the Red Planet?", "Mars, the red one.", "Venus is hot and bright in the evening sky."];
    let want = e.embed(&texts, None, None).unwrap();
    // The rows as a Hugging Face tokenizer pads them (right padding), the mask marking tokens.
    let rows: Vec<Vec<u32>> = texts.iter().map(|t| e.tokenize(t, None).unwrap()).collect();
    let len = rows.iter().map(Vec::len).max().unwrap();
    let (mut ids, mut mask) = (Vec::new(), Vec::new());
    for r in &rows {
        ids.extend(r.iter().map(|&t| t as i32).chain(std::iter::repeat_n(0, len - r.len())));
        mask.extend(std::iter::repeat_n(1, r.len()).chain(std::iter::repeat_n(0, len - r.len())));
    }
    let shape = [rows.len(), len];
    let inputs = feed(vec![("input_ids", HostTensor::i32(&shape, ids.clone()).unwrap()), ("attention_mask", HostTensor::i32(&shape, mask.clone()).unwrap())]);
    let out = m.run(&inputs).unwrap();
    assert_eq!((out[0].0.as_str(), out[0].1.shape.as_slice()), ("embeddings", &[3, want.dim][..]));
    assert_eq!(f32s(&out[0].1), &want.data[..], "the same packed plan, the same embeddings");
    let via = m.as_embedder().expect("EmbeddingGemma embeds").embed(&texts, None, None).unwrap();
    assert_eq!(via.data, want.data);
    assert!(m.as_generator().is_none());

    let m = &mut *m;
    let ids_t = HostTensor::i32(&shape, ids.clone()).unwrap();
    let zeros = HostTensor::i32(&shape, vec![0; shape[0] * shape[1]]).unwrap();
    assert_eq!(problem(m, feed(vec![("input_ids", ids_t.clone()), ("attention_mask", zeros)]), "row 0 has no tokens"), InputProblem::Value);
    let other = HostTensor::i32(&[3, len + 1], vec![1; 3 * (len + 1)]).unwrap();
    assert_eq!(problem(m, feed(vec![("input_ids", ids_t.clone()), ("attention_mask", other)]), "sequence"), InputProblem::Shape);
    let twos = HostTensor::i32(&shape, vec![2; shape[0] * shape[1]]).unwrap();
    assert_eq!(problem(m, feed(vec![("input_ids", ids_t), ("attention_mask", twos)]), "'attention_mask'"), InputProblem::Value);
}

/// The ONNX node tests (`scripts/fetch_onnx_tests.py`); missing under CI is a failure.
fn node_tests() -> Option<PathBuf> {
    let p = std::env::var_os("TG_ONNX_TESTS").map(PathBuf::from).unwrap_or_else(|| tg_models::cache::cache_dir().join("../onnx/node-tests-1.16.2"));
    if p.join(".complete").is_file() {
        return Some(p);
    }
    assert!(std::env::var("CI").map_or(true, |v| v.is_empty() || v == "0" || v == "false"), "ONNX node tests missing under CI: {}", p.display());
    eprintln!("SKIPPED: ONNX node tests not found at {}", p.display());
    None
}

#[test]
fn onnx_files_through_the_interface() {
    let Some(root) = node_tests() else { return };
    let mut m = open(root.join("test_add/model.onnx"), opts()).unwrap();
    assert_eq!(m.kind(), "onnx");
    let names: Vec<String> = m.inputs().into_iter().map(|s| s.name).collect();
    assert_eq!(names, ["x", "y"]);
    assert_eq!(m.inputs()[0].shape_text(), "[3, 4, 5]");
    let x: Vec<f32> = (0..60).map(|i| i as f32 * 0.5).collect();
    let y: Vec<f32> = (0..60).map(|i| 3.0 - i as f32).collect();
    let t = |v: &[f32]| HostTensor::f32(&[3, 4, 5], v.to_vec()).unwrap();
    let out = m.run(&feed(vec![("x", t(&x)), ("y", t(&y))])).unwrap();
    assert_eq!(out[0].0, "sum");
    assert_eq!(f32s(&out[0].1), x.iter().zip(&y).map(|(a, b)| a + b).collect::<Vec<_>>());
    let m = &mut *m;
    assert_eq!(problem(m, feed(vec![("x", t(&x))]), "'y'"), InputProblem::Missing);
    let small = HostTensor::f32(&[2, 2], vec![0.0; 4]).unwrap();
    assert_eq!(problem(m, feed(vec![("x", t(&x)), ("y", small)]), "[3, 4, 5]"), InputProblem::Shape);

    // A Reshape target given as a graph input: bound at import, one plan per value.
    let mut m = open(root.join("test_reshape_reordered_all_dims/model.onnx"), opts()).unwrap();
    let data: Vec<f32> = (0..24).map(|i| i as f32).collect();
    for shape in [[4, 2, 3], [3, 4, 2]] {
        let inputs = feed(vec![("data", HostTensor::f32(&[2, 3, 4], data.clone()).unwrap()), ("shape", HostTensor::i32(&[3], shape.to_vec()).unwrap())]);
        let out = m.run(&inputs).unwrap();
        assert_eq!(out[0].1.shape, shape.iter().map(|&d| d as usize).collect::<Vec<_>>());
        assert_eq!(f32s(&out[0].1), &data[..]);
    }
    // An op the importer does not map: refused when compiling, naming it.
    let mut m = open(root.join("test_gridsample/model.onnx"), opts()).unwrap();
    let inputs: HashMap<String, HostTensor> = m
        .inputs()
        .into_iter()
        .map(|s| {
            let shape: Vec<usize> = s.dims.unwrap().iter().map(|d| if let Dim::Fixed(n) = d { *n } else { 1 }).collect();
            let n = shape.iter().product();
            (s.name, HostTensor::f32(&shape, vec![0.0; n]).unwrap())
        })
        .collect();
    let e = m.run(&inputs).map(|o| o.len()).expect_err("GridSample is not supported");
    assert!(e.to_string().contains("GridSample"), "{e}");
}

//! A tiny random bidirectional Gemma 3 encoder with the sentence-transformers modules
//! (mean pooling, two dense layers, one with bias and tanh, normalisation), packed batches
//! and an active sliding window, through the whole pipeline. Needs no downloaded model.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use tg_compiler::{compile, CompileOptions};
use tg_ir::{DType, HostTensor};
use tg_models::embedding_gemma::{bidirectional_window, build_embedding_graph, Activation, DenseLayer, EmbeddingConfig, Pooling};
use tg_models::gemma3::{TensorNames, WeightShapes};
use tg_models::{Gemma3Config, ModelError};
use tg_runtime::{CpuDevice, Device, Executable};

struct Store(HashMap<String, (Vec<usize>, DType)>);

impl WeightShapes for Store {
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError> {
        self.0.get(name).cloned().ok_or_else(|| ModelError::Request(format!("no tensor {name}")))
    }
}

fn config(window: usize) -> EmbeddingConfig {
    let encoder = Gemma3Config {
        n_vocab: 50,
        n_embd: 32,
        n_layer: 3,
        n_ff: 48,
        n_head: 2,
        n_head_kv: 1,
        head_dim: 16,
        rms_eps: 1e-6,
        rope_base_global: 1_000_000.0,
        rope_base_local: 10_000.0,
        sliding_window: window,
        swa_pattern: 3,
        context_length: 64,
        attn_scale: 0.25,
        layer_global: Some(vec![false, true, false]),
        norm_offset: 1.0,
        causal: false,
    };
    EmbeddingConfig {
        encoder,
        max_seq_length: 64,
        pooling: Pooling::Mean,
        dense: vec![
            DenseLayer { in_features: 32, out_features: 40, weight: "2_Dense/linear.weight".into(), bias: Some("2_Dense/linear.bias".into()), activation: Activation::Tanh },
            DenseLayer { in_features: 40, out_features: 24, weight: "3_Dense/linear.weight".into(), bias: None, activation: Activation::Identity },
        ],
        normalize: true,
        prompts: BTreeMap::new(),
        default_prompt_name: None,
    }
}

fn weights(cfg: &EmbeddingConfig, names: &TensorNames, seed: u64) -> (Store, HashMap<String, Vec<u8>>) {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut all = cfg.encoder.expected_tensors_named(names, true);
    for d in &cfg.dense {
        all.push((d.weight.clone(), vec![d.out_features, d.in_features]));
        if let Some(b) = &d.bias {
            all.push((b.clone(), vec![d.out_features]));
        }
    }
    let mut shapes = HashMap::new();
    let mut bytes = HashMap::new();
    for (name, shape) in all {
        let n: usize = shape.iter().product();
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(-0.5..0.5)).collect();
        bytes.insert(name.clone(), tg_ir::f32_bytes(&v));
        shapes.insert(name, (shape, DType::F32));
    }
    (Store(shapes), bytes)
}

/// Inputs for sequences packed back to back.
fn packed(seqs: &[Vec<i32>]) -> HashMap<String, HostTensor> {
    let total: usize = seqs.iter().map(Vec::len).sum();
    let ids: Vec<i32> = seqs.iter().flatten().copied().collect();
    let pos: Vec<i32> = seqs.iter().flat_map(|s| 0..s.len() as i32).collect();
    let seg: Vec<i32> = seqs.iter().enumerate().flat_map(|(i, s)| std::iter::repeat_n(i as i32, s.len())).collect();
    let mut m = HashMap::new();
    m.insert("tokens".to_string(), HostTensor::i32(&[total], ids).unwrap());
    m.insert("positions".to_string(), HostTensor::i32(&[total], pos).unwrap());
    m.insert("segments".to_string(), HostTensor::i32(&[total], seg).unwrap());
    m
}

fn run(cfg: &EmbeddingConfig, store: &Store, bytes: &HashMap<String, Vec<u8>>, seqs: &[Vec<i32>], dim: usize, threads: usize) -> Vec<f32> {
    let names = TensorNames::HuggingFace { prefix: String::new() };
    let total: usize = seqs.iter().map(Vec::len).sum();
    let g = build_embedding_graph(cfg, store, &names, total, seqs.len(), dim).unwrap();
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).unwrap());
    let c = compile(&g, std::slice::from_ref(&dev), &CompileOptions::default()).unwrap();
    let mut exe = Executable::new(c.plan, vec![dev], Arc::new(bytes.clone())).unwrap();
    exe.set_poison(true);
    exe.run(&packed(seqs)).unwrap()["embeddings"].as_f32().unwrap().to_vec()
}

/// Kernels equal the reference interpreter on a packed batch of three sequences (lengths
/// 9, 2, 6) with a window shorter than the longest one; unit-norm outputs.
#[test]
fn tiny_encoder_kernels_match_the_reference_interpreter() {
    let seed = 23;
    eprintln!("tiny encoder: seed {seed}");
    let cfg = config(6);
    let names = TensorNames::HuggingFace { prefix: String::new() };
    let (store, bytes) = weights(&cfg, &names, seed);
    let mut rng = ChaCha8Rng::seed_from_u64(seed + 1);
    let seqs: Vec<Vec<i32>> = [9, 2, 6].iter().map(|&n| (0..n).map(|_| rng.gen_range(0..50)).collect()).collect();
    let g = build_embedding_graph(&cfg, &store, &names, 17, 3, 24).unwrap();
    let want = tg_ir::interp::eval(&g, &packed(&seqs), &bytes).unwrap()["embeddings"].data.clone();
    assert_eq!(want.len(), 3 * 24);
    for threads in [1, 2] {
        let got = run(&cfg, &store, &bytes, &seqs, 24, threads);
        let num: f64 = got.iter().zip(&want).map(|(&a, &b)| (a as f64 - b).powi(2)).sum();
        let den: f64 = want.iter().map(|b| b * b).sum();
        eprintln!("threads {threads}: NMSE {:.3e}", num / den);
        assert!(num / den < 1e-10, "NMSE {:e}", num / den);
        for r in got.chunks(24) {
            let n: f64 = r.iter().map(|&x| (x as f64).powi(2)).sum::<f64>().sqrt();
            assert!((n - 1.0).abs() < 1e-5, "norm {n}");
        }
    }
}

/// Texts packed together do not see each other: each packed row equals the same text run
/// alone (to f32 rounding), and changing one text changes only its own row.
#[test]
fn packed_texts_are_isolated() {
    let cfg = config(6);
    let names = TensorNames::HuggingFace { prefix: String::new() };
    let (store, bytes) = weights(&cfg, &names, 5);
    let seqs = vec![vec![3, 4, 5, 6, 7, 8, 9], vec![10, 11], vec![12, 13, 14, 15]];
    let all = run(&cfg, &store, &bytes, &seqs, 24, 2);
    for (i, s) in seqs.iter().enumerate() {
        let one = run(&cfg, &store, &bytes, std::slice::from_ref(s), 24, 2);
        let d = one.iter().zip(&all[i * 24..(i + 1) * 24]).map(|(a, b)| (a - b).abs()).fold(0f32, f32::max);
        assert!(d < 1e-5, "text {i}: packed vs alone differ by {d}");
    }
    let mut changed = seqs.clone();
    changed[1][0] = 40;
    let other = run(&cfg, &store, &bytes, &changed, 24, 2);
    assert_eq!(&other[..24], &all[..24]);
    assert_eq!(&other[48..], &all[48..]);
    assert_ne!(&other[24..48], &all[24..48]);
}

/// A local layer sees `|i − j| ≤ sliding_window / 2`. One local layer, window span 4: two
/// tokens at positions 0 and `p` see each other for `p ≤ 2` and only themselves for
/// `p ≥ 3`. A token that sees only itself outputs its own value vector whatever its
/// position, so for `p ≥ 3` the pooled vector no longer depends on `p`.
#[test]
fn bidirectional_window_is_split_around_the_query() {
    assert_eq!(bidirectional_window(512), 257);
    let mut cfg = config(4);
    cfg.encoder.n_layer = 1;
    cfg.encoder.layer_global = Some(vec![false]);
    let names = TensorNames::HuggingFace { prefix: String::new() };
    let (store, bytes) = weights(&cfg, &names, 9);
    let g = build_embedding_graph(&cfg, &store, &names, 2, 1, 24).unwrap();
    let at = |p: i32| {
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), HostTensor::i32(&[2], vec![7, 9]).unwrap());
        inputs.insert("positions".to_string(), HostTensor::i32(&[2], vec![0, p]).unwrap());
        inputs.insert("segments".to_string(), HostTensor::i32(&[2], vec![0, 0]).unwrap());
        tg_ir::interp::eval(&g, &inputs, &bytes).unwrap()["embeddings"].data.clone()
    };
    let diff = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0f64, f64::max);
    let (p1, p2, p3, p4, p9) = (at(1), at(2), at(3), at(4), at(9));
    assert!(diff(&p1, &p2) > 1e-6, "distance 1 and 2 are both visible, with different rotations");
    assert!(diff(&p2, &p3) > 1e-6, "distance 2 is visible, 3 is not");
    assert_eq!(diff(&p3, &p4), 0.0, "distance 3 and 4 are both out of reach");
    assert_eq!(diff(&p3, &p9), 0.0, "distance 3 and 9 are both out of reach");
    // A global layer sees everything: the vector keeps changing with the distance.
    cfg.encoder.layer_global = Some(vec![true]);
    let g = build_embedding_graph(&cfg, &store, &names, 2, 1, 24).unwrap();
    let at_g = |p: i32| {
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), HostTensor::i32(&[2], vec![7, 9]).unwrap());
        inputs.insert("positions".to_string(), HostTensor::i32(&[2], vec![0, p]).unwrap());
        inputs.insert("segments".to_string(), HostTensor::i32(&[2], vec![0, 0]).unwrap());
        tg_ir::interp::eval(&g, &inputs, &bytes).unwrap()["embeddings"].data.clone()
    };
    assert!(diff(&at_g(3), &at_g(9)) > 1e-6);
}

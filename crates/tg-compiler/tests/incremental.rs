//! The incremental derivation (`tg_compiler::incremental`) against full recomputation: small
//! causal transformers written as pure functions of the whole sequence, run chunk by chunk
//! through the derived graph with states kept between runs, must give what the full graph
//! gives on the whole prefix — in the f64 reference interpreter, and compiled (rewrite on)
//! on the CPU runtime.

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use tg_compiler::incremental::{derive, Incremental, IncrementalSpec, POS_INPUT, RULES};
use tg_compiler::{compile, CompileOptions};
use tg_egraph::KernelCost;
use tg_ir::interp::{eval, eval_with_states, Array};
use tg_ir::{f32_bytes, BinaryOp, CmpOp, DType, Graph, GraphBuilder, HostTensor, ReduceOp, Tensor, UnaryOp};
use tg_runtime::{CpuDevice, Device, Executable, StateSet};

#[derive(Clone, Copy)]
struct Cfg {
    vocab: usize,
    d: usize,
    heads: usize,
    kv: usize,
    hd: usize,
    layers: usize,
    window: Option<usize>,
    all_logits: bool,
    /// Make it non-causal: attention sees every key (must be refused).
    bidirectional: bool,
    /// Add a mean over the sequence (must be refused).
    seq_mean: bool,
}

const CFG: Cfg = Cfg { vocab: 11, d: 8, heads: 2, kv: 1, hd: 4, layers: 2, window: None, all_logits: false, bidirectional: false, seq_mean: false };

fn weights(c: &Cfg, seed: u64) -> HashMap<String, Vec<u8>> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut w = HashMap::new();
    let mut put = |name: String, n: usize, lo: f32, hi: f32| {
        let v: Vec<f32> = (0..n).map(|_| rng.gen_range(lo..hi)).collect();
        w.insert(name, f32_bytes(&v));
    };
    put("emb".into(), c.vocab * c.d, -1.0, 1.0);
    for l in 0..c.layers {
        put(format!("q{l}"), c.heads * c.hd * c.d, -0.5, 0.5);
        put(format!("k{l}"), c.kv * c.hd * c.d, -0.5, 0.5);
        put(format!("v{l}"), c.kv * c.hd * c.d, -0.5, 0.5);
        put(format!("o{l}"), c.d * c.heads * c.hd, -0.5, 0.5);
        put(format!("n{l}"), c.d, 0.5, 1.5);
        put(format!("f{l}"), 3 * c.d * c.d, -0.5, 0.5);
        put(format!("g{l}"), c.d * 3 * c.d, -0.5, 0.5);
    }
    w
}

fn rms(b: &mut GraphBuilder, x: Tensor, w: Tensor) -> Tensor {
    let sq = b.mul(x, x).unwrap();
    let ms = b.reduce_last(ReduceOp::Mean, sq).unwrap();
    let eps = b.scalar(1e-6).unwrap();
    let ms = b.add(ms, eps).unwrap();
    let r = b.unary(UnaryOp::Rsqrt, ms).unwrap();
    let y = b.mul(x, r).unwrap();
    b.mul(y, w).unwrap()
}

/// A small causal transformer over `seq` tokens, written as a pure function (no cache).
fn model(c: &Cfg, seq: usize) -> Graph {
    let (d, hd, nh, nkv) = (c.d, c.hd, c.heads, c.kv);
    let g = nh / nkv;
    let mut b = GraphBuilder::new();
    let tokens = b.input("tokens", &[seq], DType::I32).unwrap();
    let emb = b.weight("emb", &[c.vocab, d], DType::F32).unwrap();
    let mut x = b.gather(emb, tokens).unwrap();
    // RoPE tables from positions.
    let pos = b.iota(&[seq, 1, 1], 0, DType::F32).unwrap();
    let i = b.iota(&[hd / 2], 0, DType::F32).unwrap();
    let f = b.scale(i, -0.7).unwrap();
    let inv = b.unary(UnaryOp::Exp, f).unwrap();
    let ang = b.mul(pos, inv).unwrap();
    let (cos, sin) = (b.unary(UnaryOp::Cos, ang).unwrap(), b.unary(UnaryOp::Sin, ang).unwrap());
    // Causal (optionally windowed) mask.
    let ii = b.iota(&[seq, seq], 0, DType::I32).unwrap();
    let jj = b.iota(&[seq, seq], 1, DType::I32).unwrap();
    let mut allowed = if c.bidirectional { b.compare(CmpOp::Ge, jj, jj).unwrap() } else { b.compare(CmpOp::Le, jj, ii).unwrap() };
    if let Some(w) = c.window {
        let dd = b.sub(ii, jj).unwrap();
        let wc = b.constant(w as f64, DType::I32).unwrap();
        let near = b.compare(CmpOp::Lt, dd, wc).unwrap();
        allowed = b.binary(BinaryOp::And, allowed, near).unwrap();
    }
    let zero = b.scalar(0.0).unwrap();
    let ninf = b.scalar(f64::NEG_INFINITY).unwrap();
    let mask = b.select(allowed, zero, ninf).unwrap();
    for l in 0..c.layers {
        let wn = b.weight(&format!("n{l}"), &[d], DType::F32).unwrap();
        let h = rms(&mut b, x, wn);
        let wq = b.weight(&format!("q{l}"), &[nh * hd, d], DType::F32).unwrap();
        let wk = b.weight(&format!("k{l}"), &[nkv * hd, d], DType::F32).unwrap();
        let wv = b.weight(&format!("v{l}"), &[nkv * hd, d], DType::F32).unwrap();
        let q = b.matmul(h, wq, true).unwrap();
        let k = b.matmul(h, wk, true).unwrap();
        let v = b.matmul(h, wv, true).unwrap();
        let rope = |b: &mut GraphBuilder, t: Tensor, heads: usize| {
            let t = b.reshape(t, &[seq, heads, hd]).unwrap();
            let t1 = b.slice(t, 2, 0, hd / 2).unwrap();
            let t2 = b.slice(t, 2, hd / 2, hd).unwrap();
            let a = b.mul(t1, cos).unwrap();
            let s = b.mul(t2, sin).unwrap();
            let o1 = b.sub(a, s).unwrap();
            let a = b.mul(t2, cos).unwrap();
            let s = b.mul(t1, sin).unwrap();
            let o2 = b.add(a, s).unwrap();
            b.concat(&[o1, o2], 2).unwrap()
        };
        let q = rope(&mut b, q, nh);
        let k = rope(&mut b, k, nkv);
        let q = b.scale(q, 1.0 / (hd as f64).sqrt()).unwrap();
        let q = b.reshape(q, &[seq, nkv, g, hd]).unwrap();
        let q = b.permute(q, &[1, 2, 0, 3]).unwrap();
        let k = b.reshape(k, &[seq, nkv, 1, hd]).unwrap();
        let k = b.permute(k, &[1, 2, 0, 3]).unwrap();
        let v = b.reshape(v, &[seq, nkv, 1, hd]).unwrap();
        let v = b.permute(v, &[1, 2, 0, 3]).unwrap();
        let s = b.matmul(q, k, true).unwrap();
        let s = b.add(s, mask).unwrap();
        let m = b.reduce_last(ReduceOp::Max, s).unwrap();
        let s = b.sub(s, m).unwrap();
        let e = b.unary(UnaryOp::Exp, s).unwrap();
        let z = b.reduce_last(ReduceOp::Sum, e).unwrap();
        let p = b.div(e, z).unwrap();
        let o = b.matmul(p, v, false).unwrap();
        let o = b.permute(o, &[2, 0, 1, 3]).unwrap();
        let o = b.reshape(o, &[seq, nh * hd]).unwrap();
        let wo = b.weight(&format!("o{l}"), &[d, nh * hd], DType::F32).unwrap();
        let a = b.matmul(o, wo, true).unwrap();
        x = b.add(x, a).unwrap();
        let wf = b.weight(&format!("f{l}"), &[3 * d, d], DType::F32).unwrap();
        let wg = b.weight(&format!("g{l}"), &[d, 3 * d], DType::F32).unwrap();
        let h = rms(&mut b, x, wn);
        let u = b.matmul(h, wf, true).unwrap();
        let u = b.unary(UnaryOp::Tanh, u).unwrap();
        let dn = b.matmul(u, wg, true).unwrap();
        x = b.add(x, dn).unwrap();
    }
    if c.seq_mean {
        let m = b.reduce(ReduceOp::Mean, x, 0).unwrap();
        x = b.add(x, m).unwrap();
    }
    let x = if c.all_logits { x } else { b.slice(x, 0, seq - 1, seq).unwrap() };
    let out = b.matmul(x, emb, true).unwrap();
    b.output("logits", out).unwrap();
    b.finish().unwrap()
}

fn spec(k: usize, states: Option<BTreeSet<String>>, budget: Option<usize>) -> IncrementalSpec {
    IncrementalSpec { input: "tokens".into(), new_rows: k, budget, states, alternatives: false }
}

fn feed(tokens: &[u32], pos: usize) -> HashMap<String, HostTensor> {
    let mut m = HashMap::new();
    m.insert("tokens".to_string(), HostTensor::i32(&[tokens.len()], tokens.iter().map(|&t| t as i32).collect()).unwrap());
    m.insert(POS_INPUT.to_string(), HostTensor::i32(&[1], vec![pos as i32]).unwrap());
    m
}

/// The full graph's logits for the new rows `pos..m` (or the last row).
fn reference(c: &Cfg, w: &HashMap<String, Vec<u8>>, seq: &[u32], pos: usize) -> Vec<f64> {
    let g = model(c, seq.len());
    let mut inputs = feed(seq, 0);
    inputs.remove(POS_INPUT);
    let out = eval(&g, &inputs, w).unwrap().remove("logits").unwrap();
    if c.all_logits {
        out.data[pos * c.vocab..].to_vec()
    } else {
        out.data
    }
}

fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Derivations for every chunk size, sharing the states chosen for one-row runs.
fn derivations(c: &Cfg, cap: usize, ks: &[usize]) -> HashMap<usize, Incremental> {
    let full = model(c, cap);
    let one = derive(&full, &spec(1, None, None), &KernelCost::default()).unwrap();
    let names = one.state_names();
    let mut out = HashMap::new();
    for &k in ks {
        let inc = derive(&full, &spec(k, Some(names.clone()), None), &KernelCost::default()).unwrap();
        assert_eq!(inc.state_names(), names);
        out.insert(k, inc);
    }
    out.insert(1, one);
    out
}

#[test]
fn chunked_runs_equal_full_recomputation_in_the_interpreter() {
    let mut applied = BTreeSet::new();
    for (case, c) in [CFG, Cfg { window: Some(3), ..CFG }, Cfg { all_logits: true, ..CFG }, Cfg { heads: 4, kv: 2, ..CFG }].iter().enumerate() {
        let seed = 100 + case as u64;
        println!("case {case}, seed {seed}");
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let w = weights(c, seed);
        let cap = 16;
        let mut chunks = vec![];
        let mut total = 0;
        while total < cap - 3 {
            let k = rng.gen_range(1..=4usize).min(cap - total);
            chunks.push(k);
            total += k;
        }
        let ks: Vec<usize> = chunks.iter().copied().collect::<BTreeSet<_>>().into_iter().collect();
        let incs = derivations(c, cap, &ks);
        applied.extend(incs.values().flat_map(|i| i.rules.keys().copied()));
        let one = &incs[&1];
        // Every layer keeps its keys and values, nothing else.
        assert_eq!(one.states.len(), 2 * c.layers, "{}", one.summary());
        assert_eq!(one.recomputed, 0);
        let seq: Vec<u32> = (0..total).map(|_| rng.gen_range(0..c.vocab as u32)).collect();
        let mut states = HashMap::<String, Array>::new();
        let mut pos = 0;
        for &k in &chunks {
            let inc = &incs[&k];
            let got = eval_with_states(&inc.graph, &feed(&seq[pos..pos + k], pos), &w, &mut states).unwrap().remove("logits").unwrap();
            let want = reference(c, &w, &seq[..pos + k], pos);
            let diff = max_diff(&got.data, &want);
            assert!(diff < 1e-9, "case {case}: rows {pos}..{} differ by {diff}", pos + k);
            pos += k;
        }
        // A second sequence sharing a prefix reuses the kept rows (later rows are stale).
        let shared = total / 2;
        let mut other = seq[..shared].to_vec();
        other.extend((0..3).map(|_| rng.gen_range(0..c.vocab as u32)));
        let k = other.len() - shared;
        let inc = incs.get(&k).cloned().unwrap_or_else(|| derivations(c, cap, &[k]).remove(&k).unwrap());
        let got = eval_with_states(&inc.graph, &feed(&other[shared..], shared), &w, &mut states).unwrap().remove("logits").unwrap();
        let diff = max_diff(&got.data, &reference(c, &w, &other, shared));
        assert!(diff < 1e-9, "case {case}: prefix reuse differs by {diff}");
    }
    // Every rule of the table took part in a derivation checked above.
    let missing: Vec<&str> = RULES.iter().map(|(n, _)| *n).filter(|n| !applied.contains(n)).collect();
    assert!(missing.is_empty(), "rules never exercised: {missing:?}");
}

#[test]
fn a_small_budget_keeps_only_the_tokens_and_recomputes() {
    let c = CFG;
    let cap = 12;
    let w = weights(&c, 7);
    let full = model(&c, cap);
    let free = derive(&full, &spec(1, None, None), &KernelCost::default()).unwrap();
    let tight = derive(&full, &spec(1, None, Some(4 * cap)), &KernelCost::default()).unwrap();
    println!("free: {}\ntight: {}", free.summary(), tight.summary());
    assert!(free.state_bytes() > 4 * cap);
    assert_eq!(tight.states.len(), 1);
    assert_eq!(tight.states[0].op, "input:tokens");
    assert!(tight.recomputed > 0);
    assert!(tight.cost > free.cost, "recomputing must cost more: {} vs {}", tight.cost, free.cost);
    let seq: Vec<u32> = (0..cap as u32).map(|i| (i * 7 + 3) % c.vocab as u32).collect();
    let mut states = HashMap::new();
    for pos in 0..cap {
        let got = eval_with_states(&tight.graph, &feed(&seq[pos..pos + 1], pos), &w, &mut states).unwrap().remove("logits").unwrap();
        let diff = max_diff(&got.data, &reference(&c, &w, &seq[..pos + 1], pos));
        assert!(diff < 1e-9, "position {pos}: {diff}");
    }
    let none = derive(&full, &spec(1, None, Some(8)), &KernelCost::default());
    assert!(none.is_err(), "a budget below the tokens must be refused");
}

#[test]
fn graphs_that_are_not_causal_are_refused() {
    for (what, c) in [("bidirectional", Cfg { bidirectional: true, ..CFG }), ("mean over the sequence", Cfg { seq_mean: true, ..CFG })] {
        let e = derive(&model(&c, 10), &spec(1, None, None), &KernelCost::default()).unwrap_err().to_string();
        println!("{what}: {e}");
        assert!(e.contains("causal"), "{what}: {e}");
    }
    let e = derive(&model(&CFG, 10), &spec(11, None, None), &KernelCost::default()).unwrap_err().to_string();
    assert!(e.contains("capacity"), "{e}");
    // A capacity equal to a feature size is ambiguous, and refused.
    let e = derive(&model(&CFG, CFG.d), &spec(1, None, None), &KernelCost::default()).unwrap_err().to_string();
    assert!(e.contains("another capacity"), "{e}");
    let e = derive(&model(&CFG, 10), &IncrementalSpec { input: "nope".into(), new_rows: 1, budget: None, states: None, alternatives: false }, &KernelCost::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("no input"), "{e}");
}

#[test]
fn compiled_incremental_plans_match_the_reference_on_the_cpu() {
    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    for (case, (c, opts)) in
        [(CFG, CompileOptions::default()), (Cfg { window: Some(4), all_logits: true, ..CFG }, CompileOptions::default()), (CFG, CompileOptions::disabling(&["rewrite"]).unwrap())]
            .iter()
            .enumerate()
    {
        let seed = 300 + case as u64;
        println!("case {case}, seed {seed}");
        let w = weights(c, seed);
        let cap = 32;
        let incs = derivations(c, cap, &[5]);
        let store: Arc<dyn tg_ir::WeightStore + Send> = Arc::new(w.clone());
        let exe = |k: usize| {
            let compiled = compile(&incs[&k].graph, std::slice::from_ref(&dev), opts).unwrap();
            let mut e = Executable::new(compiled.plan, vec![dev.clone()], store.clone()).unwrap();
            e.set_poison(true);
            e
        };
        let (mut prompt, mut step) = (exe(5), exe(1));
        let mut rng = ChaCha8Rng::seed_from_u64(seed);
        let seq: Vec<u32> = (0..20).map(|_| rng.gen_range(0..c.vocab as u32)).collect();
        let mut states = StateSet::new();
        let mut pos = 0;
        while pos < seq.len() {
            let k = if pos == 0 { 5 } else { 1 };
            let e = if k == 5 { &mut prompt } else { &mut step };
            let out = e.run_with_states(&feed(&seq[pos..pos + k], pos), &mut states).unwrap().remove("logits").unwrap();
            let got: Vec<f64> = out.to_f64();
            let want = reference(c, &w, &seq[..pos + k], pos);
            let diff = max_diff(&got, &want);
            assert!(diff < 1e-4, "case {case}: rows {pos}..{}: {diff}", pos + k);
            pos += k;
        }
        assert_eq!(states.names().len(), 2 * c.layers);
        // Running past the capacity is an error, not a write out of bounds.
        let e = step.run_with_states(&feed(&seq[..1], cap), &mut states).unwrap_err().to_string();
        assert!(e.contains("past"), "{e}");
    }
}

/// States of a compiled plan, by name.
fn plan_states(plan: &tg_runtime::Plan) -> BTreeSet<String> {
    plan.states().map(|(name, _)| name.to_string()).collect()
}

/// With alternatives, the derivation offers both ways of every value that may be kept and
/// the compiler's extraction chooses: with no budget it keeps what the pass would (the keys
/// and values of every layer), under a cache budget it keeps less and recomputes, and the
/// plans stay correct against the full graph either way; a budget that nothing recomputable
/// can meet is refused with the bytes.
#[test]
fn the_planner_chooses_the_kept_states_under_a_cache_budget() {
    let c = CFG;
    let cap = 20;
    let w = weights(&c, 11);
    let full = model(&c, cap);
    let alt = derive(&full, &IncrementalSpec { alternatives: true, ..spec(1, None, None) }, &KernelCost::default()).unwrap();
    let dp = derive(&full, &spec(1, None, None), &KernelCost::default()).unwrap();
    println!("{}", alt.summary());
    for v in &alt.candidates {
        println!("  candidate {} {} {:?} axis {}", v.name, v.op, v.shape, v.axis);
    }
    assert!(alt.alternatives > 0 && alt.candidates.len() > alt.states.len(), "{}", alt.summary());
    assert_eq!(alt.state_names(), dp.state_names(), "the first ways are the pass's own choice");
    assert!(alt.graph.nodes.iter().any(|n| matches!(n.op, tg_ir::Op::Alternatives)));
    let seq: Vec<u32> = (0..16u32).map(|i| (i * 5 + 2) % c.vocab as u32).collect();
    // The interpreter takes the first ways.
    let mut st = HashMap::new();
    for pos in 0..4 {
        let got = eval_with_states(&alt.graph, &feed(&seq[pos..pos + 1], pos), &w, &mut st).unwrap().remove("logits").unwrap();
        assert!(max_diff(&got.data, &reference(&c, &w, &seq[..pos + 1], pos)) < 1e-9);
    }
    assert_eq!(st.keys().cloned().collect::<BTreeSet<_>>(), dp.state_names());

    let dev: Arc<dyn Device> = Arc::new(CpuDevice::new(2).unwrap());
    let store: Arc<dyn tg_ir::WeightStore + Send> = Arc::new(w.clone());
    let estimate = |g: &Graph, opts: &CompileOptions| compile(g, std::slice::from_ref(&dev), opts).unwrap().report.rewrite.unwrap().cost_out_search;
    let run = |opts: &CompileOptions| -> (BTreeSet<String>, usize) {
        let compiled = compile(&alt.graph, std::slice::from_ref(&dev), opts).unwrap();
        let rewrite = compiled.report.stages.iter().find(|s| s.name == "rewrite").unwrap();
        println!("{}", rewrite.summary);
        let names = plan_states(&compiled.plan);
        let bytes = compiled.plan.buffers.iter().filter(|b| matches!(b.storage, tg_runtime::Storage::State { .. })).map(|b| b.bytes).sum();
        let mut e = Executable::new(compiled.plan, vec![dev.clone()], store.clone()).unwrap();
        e.set_poison(true);
        let mut states = StateSet::new();
        for pos in 0..seq.len() {
            let out = e.run_with_states(&feed(&seq[pos..pos + 1], pos), &mut states).unwrap().remove("logits").unwrap();
            let diff = max_diff(&out.to_f64(), &reference(&c, &w, &seq[..pos + 1], pos));
            assert!(diff < 1e-4, "position {pos}: {diff}");
        }
        (names, bytes)
    };
    let (free, free_bytes) = run(&CompileOptions::default());
    // No budget: as many states as the pass keeps, of the same bytes (each layer's keys and
    // values, though the planner may keep them in another layout: before the permute the
    // fused attention reads through), and a plan no dearer than the pass's.
    assert_eq!(free.len(), 2 * c.layers);
    assert_eq!(free_bytes, dp.state_bytes());
    let (chosen, pass) = (estimate(&alt.graph, &CompileOptions::default()), estimate(&dp.graph, &CompileOptions::default()));
    println!("planner's choice est. {chosen:.0} ns, the pass's {pass:.0} ns");
    assert!(chosen <= pass * 1.000001, "{chosen} vs {pass}");
    let (off, _) = run(&CompileOptions::disabling(&["rewrite"]).unwrap());
    assert_eq!(off, dp.state_names(), "nothing chooses: the first ways");
    let budget = free_bytes / 2;
    let (tight, tight_bytes) = run(&CompileOptions { cache_budget: Some(budget), ..Default::default() });
    println!("budget {budget}: kept {tight:?} ({tight_bytes} bytes) of {free:?} ({free_bytes})");
    assert!(tight_bytes <= budget && tight.len() < free.len() && !tight.is_empty());
    // The prompt plan of the same session keeps exactly what the planner chose.
    let prompt = derive(&full, &spec(5, Some(tight.clone()), None), &KernelCost::default()).unwrap();
    assert_eq!(prompt.state_names(), tight);
    // Only the tokens' state cannot be recomputed (an input's rows); less than it is refused.
    let e = compile(&alt.graph, std::slice::from_ref(&dev), &CompileOptions { cache_budget: Some(8), ..Default::default() }).unwrap_err().to_string();
    println!("{e}");
    assert!(e.contains("cache budget of 8"), "{e}");
}

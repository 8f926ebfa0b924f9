//! Gemma 3 (text) as a graph of primitive ops, and a loader/runner for GGUF checkpoints.
//!
//! Architecture (per layer): pre-attention RMSNorm → q/k/v projections → per-head RMSNorm
//! of q and k → RoPE (NeoX layout; base 1e6 on global layers, 1e4 on sliding-window
//! layers; every `swa_pattern`-th layer is global) → causal attention, sliding-window on
//! local layers, grouped-query (kv heads shared by `n_head / n_head_kv` query heads),
//! queries scaled by `1/sqrt(head_dim)` → output projection → post-attention RMSNorm →
//! residual; then pre-FFN RMSNorm → GELU(tanh)(gate) · up → down → post-FFN RMSNorm →
//! residual. Embeddings are scaled by `sqrt(n_embd)`; the output head is tied to the
//! embedding table. RMSNorm weights are used as stored: GGUF conversion already folded
//! Gemma's `(1 + w)` into them.

use crate::{GgufWeights, ModelError};
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use tg_compiler::{compile, CompileOptions, CompileReport};
use tg_gguf::GgufFile;
use tg_ir::{CmpOp, DType, Graph, GraphBuilder, HostTensor, IrError, ReduceOp, Tensor, UnaryOp};
use tg_runtime::{CpuDevice, Device, Executable};
use tg_tokenizer::Tokenizer;

/// Hyper-parameters of a Gemma 3 text model, read from GGUF metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Gemma3Config {
    /// Vocabulary size.
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Number of layers.
    pub n_layer: usize,
    /// FFN inner size.
    pub n_ff: usize,
    /// Query heads.
    pub n_head: usize,
    /// Key/value heads.
    pub n_head_kv: usize,
    /// Head dimension.
    pub head_dim: usize,
    /// RMSNorm epsilon.
    pub rms_eps: f32,
    /// RoPE base of global layers.
    pub rope_base_global: f32,
    /// RoPE base of sliding-window layers.
    pub rope_base_local: f32,
    /// Sliding-window size of local layers.
    pub sliding_window: usize,
    /// Every `swa_pattern`-th layer is global.
    pub swa_pattern: usize,
    /// Maximum context length.
    pub context_length: usize,
    /// Query scale (`1/sqrt(head_dim)`).
    pub attn_scale: f32,
}

impl Gemma3Config {
    /// Reads the configuration from a GGUF file's metadata, checking the architecture.
    pub fn from_gguf(f: &GgufFile) -> Result<Gemma3Config, ModelError> {
        let arch = f.get_str("general.architecture")?;
        if arch != "gemma3" {
            return Err(ModelError::Architecture { file: f.name().to_string(), detail: format!("architecture is '{arch}', expected 'gemma3'") });
        }
        let u = |k: &str| f.get_u32(&format!("gemma3.{k}")).map(|v| v as usize);
        let n_head = u("attention.head_count")?;
        let n_embd = u("embedding_length")?;
        let head_dim = match u("attention.key_length") {
            Ok(v) => v,
            Err(_) => n_embd / n_head.max(1),
        };
        let n_vocab = f.tensor("token_embd.weight")?.dims.get(1).copied().unwrap_or(0) as usize;
        let cfg = Gemma3Config {
            n_vocab,
            n_embd,
            n_layer: u("block_count")?,
            n_ff: u("feed_forward_length")?,
            n_head,
            n_head_kv: u("attention.head_count_kv")?,
            head_dim,
            rms_eps: f.get_f32("gemma3.attention.layer_norm_rms_epsilon")?,
            rope_base_global: f.get_f32("gemma3.rope.freq_base").unwrap_or(1_000_000.0),
            // Not stored in GGUF files of this architecture; Gemma 3 uses 10k on local layers.
            rope_base_local: 10_000.0,
            sliding_window: u("attention.sliding_window")?,
            swa_pattern: 6,
            context_length: u("context_length")?,
            attn_scale: 1.0 / (head_dim as f32).sqrt(),
        };
        if cfg.n_head == 0 || cfg.n_head_kv == 0 || cfg.n_head % cfg.n_head_kv != 0 || cfg.head_dim % 2 != 0 {
            return Err(ModelError::Architecture {
                file: f.name().to_string(),
                detail: format!("unsupported head layout: {} query heads, {} kv heads, head dim {}", cfg.n_head, cfg.n_head_kv, cfg.head_dim),
            });
        }
        Ok(cfg)
    }

    /// True for layers with global (full causal) attention.
    pub fn is_global(&self, layer: usize) -> bool {
        (layer + 1) % self.swa_pattern == 0
    }

    /// Expected (row-major shape) of every tensor the model reads.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (d, hd, ff) = (self.n_embd, self.head_dim, self.n_ff);
        let mut v = vec![("token_embd.weight".to_string(), vec![self.n_vocab, d]), ("output_norm.weight".to_string(), vec![d])];
        for l in 0..self.n_layer {
            let p = |s: &str| format!("blk.{l}.{s}.weight");
            v.push((p("attn_norm"), vec![d]));
            v.push((p("attn_q"), vec![self.n_head * hd, d]));
            v.push((p("attn_k"), vec![self.n_head_kv * hd, d]));
            v.push((p("attn_v"), vec![self.n_head_kv * hd, d]));
            v.push((p("attn_q_norm"), vec![hd]));
            v.push((p("attn_k_norm"), vec![hd]));
            v.push((p("attn_output"), vec![d, self.n_head * hd]));
            v.push((p("post_attention_norm"), vec![d]));
            v.push((p("ffn_norm"), vec![d]));
            v.push((p("ffn_gate"), vec![ff, d]));
            v.push((p("ffn_up"), vec![ff, d]));
            v.push((p("ffn_down"), vec![d, ff]));
            v.push((p("post_ffw_norm"), vec![d]));
        }
        v
    }
}

/// Which logits the graph returns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Logits {
    /// Only the last position: output `logits` of shape `[1, n_vocab]`.
    Last,
    /// Every position: output `logits` of shape `[seq, n_vocab]`.
    All,
}

/// Looks up weight shapes/dtypes for the graph builder.
pub trait WeightShapes {
    /// Row-major shape and dtype of a weight, or an error naming it.
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError>;
}

impl WeightShapes for GgufFile {
    fn shape_of(&self, name: &str) -> Result<(Vec<usize>, DType), ModelError> {
        let t = self.tensor(name)?;
        let shape: Vec<usize> = t.dims.iter().rev().map(|&d| d as usize).collect();
        let dtype = match t.ty {
            tg_quant::GgmlType::F32 => DType::F32,
            ty => DType::Quant(ty),
        };
        Ok((shape, dtype))
    }
}

struct Ctx<'a> {
    b: GraphBuilder,
    cfg: &'a Gemma3Config,
    w: &'a dyn WeightShapes,
}

impl Ctx<'_> {
    fn weight(&mut self, name: &str, expect: &[usize]) -> Result<Tensor, ModelError> {
        let (shape, dtype) = self.w.shape_of(name)?;
        let shape = if shape.len() == 2 && shape[0] == 1 && expect.len() == 1 { vec![shape[1]] } else { shape };
        if shape != expect {
            return Err(ModelError::Request(format!("tensor '{name}' has shape {shape:?}, the architecture needs {expect:?}")));
        }
        Ok(self.b.weight(name, &shape, dtype)?)
    }

    /// `x · rsqrt(mean(x²) + eps) · w` over the last axis.
    fn rms_norm(&mut self, x: Tensor, w: Tensor) -> Result<Tensor, IrError> {
        let b = &mut self.b;
        let sq = b.mul(x, x)?;
        let ms = b.reduce_last(ReduceOp::Mean, sq)?;
        let eps = b.scalar(self.cfg.rms_eps as f64)?;
        let ms = b.add(ms, eps)?;
        let r = b.unary(UnaryOp::Rsqrt, ms)?;
        let y = b.mul(x, r)?;
        b.mul(y, w)
    }

    /// `0.5 · x · (1 + tanh(sqrt(2/π) · (x + 0.044715 · x³)))`
    fn gelu_tanh(&mut self, x: Tensor) -> Result<Tensor, IrError> {
        let b = &mut self.b;
        let x2 = b.mul(x, x)?;
        let x3 = b.mul(x2, x)?;
        let c3 = b.scale(x3, 0.044715)?;
        let inner = b.add(x, c3)?;
        let inner = b.scale(inner, (2.0 / std::f64::consts::PI).sqrt())?;
        let t = b.unary(UnaryOp::Tanh, inner)?;
        let one = b.scalar(1.0)?;
        let t1 = b.add(t, one)?;
        let hx = b.scale(x, 0.5)?;
        b.mul(hx, t1)
    }

    /// cos and sin tables `[seq, 1, head_dim/2]` for RoPE with `base`.
    fn rope_tables(&mut self, seq: usize, base: f32) -> Result<(Tensor, Tensor), IrError> {
        let half = self.cfg.head_dim / 2;
        let b = &mut self.b;
        let i = b.iota(&[half], 0, DType::F32)?;
        // inv_freq[i] = base^(-2i/d) = exp(i · (-2 ln(base) / d))
        let e = b.scale(i, -2.0 * (base as f64).ln() / self.cfg.head_dim as f64)?;
        let inv_freq = b.unary(UnaryOp::Exp, e)?;
        let pos = b.iota(&[seq, 1, 1], 0, DType::F32)?;
        let ang = b.mul(pos, inv_freq)?; // [seq, 1, half]
        Ok((b.unary(UnaryOp::Cos, ang)?, b.unary(UnaryOp::Sin, ang)?))
    }

    /// NeoX-style rotation of `x: [seq, heads, head_dim]`: the first and second halves of
    /// each head are the two coordinates of each rotated pair.
    fn rope(&mut self, x: Tensor, cos: Tensor, sin: Tensor) -> Result<Tensor, IrError> {
        let hd = self.cfg.head_dim;
        let b = &mut self.b;
        let x1 = b.slice(x, 2, 0, hd / 2)?;
        let x2 = b.slice(x, 2, hd / 2, hd)?;
        let a = b.mul(x1, cos)?;
        let c = b.mul(x2, sin)?;
        let o1 = b.sub(a, c)?;
        let a = b.mul(x2, cos)?;
        let c = b.mul(x1, sin)?;
        let o2 = b.add(a, c)?;
        b.concat(&[o1, o2], 2)
    }

    /// Additive mask `[seq, seq]`: 0 where key j is visible from query i (j ≤ i, and
    /// i − j < window when `window` is set), −∞ elsewhere.
    fn mask(&mut self, seq: usize, window: Option<usize>) -> Result<Tensor, IrError> {
        let b = &mut self.b;
        let i = b.iota(&[seq, seq], 0, DType::I32)?;
        let j = b.iota(&[seq, seq], 1, DType::I32)?;
        let mut allowed = b.compare(CmpOp::Le, j, i)?;
        if let Some(w) = window {
            let d = b.sub(i, j)?;
            let wc = b.constant(w as f64, DType::I32)?;
            let near = b.compare(CmpOp::Lt, d, wc)?;
            allowed = b.binary(tg_ir::BinaryOp::And, allowed, near)?;
        }
        let zero = b.scalar(0.0)?;
        let ninf = b.scalar(f64::NEG_INFINITY)?;
        b.select(allowed, zero, ninf)
    }

    fn softmax_last(&mut self, x: Tensor) -> Result<Tensor, IrError> {
        let b = &mut self.b;
        let m = b.reduce_last(ReduceOp::Max, x)?;
        let d = b.sub(x, m)?;
        let e = b.unary(UnaryOp::Exp, d)?;
        let s = b.reduce_last(ReduceOp::Sum, e)?;
        b.div(e, s)
    }
}

/// Builds the Gemma 3 forward pass for `seq` tokens: input `tokens` (i32 `[seq]`), output
/// `logits` (f32). A pure function of the tokens: no cache, no fused ops.
pub fn build_graph(cfg: &Gemma3Config, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    if seq == 0 {
        return Err(ModelError::Request("cannot run on an empty token sequence".into()));
    }
    let (d, hd, nh, nkv, ff) = (cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff);
    let g = nh / nkv;
    let mut c = Ctx { b: GraphBuilder::new(), cfg, w: weights };
    let tokens = c.b.input("tokens", &[seq], DType::I32)?;
    let emb = c.weight("token_embd.weight", &[cfg.n_vocab, d])?;
    let x0 = c.b.gather(emb, tokens)?;
    let mut x = c.b.scale(x0, (d as f64).sqrt())?;

    let (cos_g, sin_g) = c.rope_tables(seq, cfg.rope_base_global)?;
    let (cos_l, sin_l) = c.rope_tables(seq, cfg.rope_base_local)?;
    let mask_g = c.mask(seq, None)?;
    let mask_l = c.mask(seq, Some(cfg.sliding_window))?;

    for l in 0..cfg.n_layer {
        let p = |s: &str| format!("blk.{l}.{s}.weight");
        let global = cfg.is_global(l);
        let (cos, sin, mask) = if global { (cos_g, sin_g, mask_g) } else { (cos_l, sin_l, mask_l) };

        let w = c.weight(&p("attn_norm"), &[d])?;
        let h = c.rms_norm(x, w)?;
        let wq = c.weight(&p("attn_q"), &[nh * hd, d])?;
        let wk = c.weight(&p("attn_k"), &[nkv * hd, d])?;
        let wv = c.weight(&p("attn_v"), &[nkv * hd, d])?;
        let q = c.b.matmul(h, wq, true)?;
        let k = c.b.matmul(h, wk, true)?;
        let v = c.b.matmul(h, wv, true)?;
        let q = c.b.reshape(q, &[seq, nh, hd])?;
        let k = c.b.reshape(k, &[seq, nkv, hd])?;
        let wqn = c.weight(&p("attn_q_norm"), &[hd])?;
        let wkn = c.weight(&p("attn_k_norm"), &[hd])?;
        let q = c.rms_norm(q, wqn)?;
        let k = c.rms_norm(k, wkn)?;
        let q = c.rope(q, cos, sin)?;
        let k = c.rope(k, cos, sin)?;
        let q = c.b.scale(q, cfg.attn_scale as f64)?;

        // Grouped-query attention: query head h = kv·g + i uses kv head kv.
        let q = c.b.reshape(q, &[seq, nkv, g, hd])?;
        let q = c.b.permute(q, &[1, 2, 0, 3])?; // [nkv, g, seq, hd]
        let k = c.b.reshape(k, &[seq, nkv, 1, hd])?;
        let k = c.b.permute(k, &[1, 2, 0, 3])?; // [nkv, 1, seq, hd]
        let v = c.b.reshape(v, &[seq, nkv, 1, hd])?;
        let v = c.b.permute(v, &[1, 2, 0, 3])?; // [nkv, 1, seq, hd]
        let s = c.b.matmul(q, k, true)?; // [nkv, g, seq, seq]
        let s = c.b.add(s, mask)?;
        let pr = c.softmax_last(s)?;
        let o = c.b.matmul(pr, v, false)?; // [nkv, g, seq, hd]
        let o = c.b.permute(o, &[2, 0, 1, 3])?; // [seq, nkv, g, hd]
        let o = c.b.reshape(o, &[seq, nh * hd])?;
        let wo = c.weight(&p("attn_output"), &[d, nh * hd])?;
        let a = c.b.matmul(o, wo, true)?;
        let w = c.weight(&p("post_attention_norm"), &[d])?;
        let a = c.rms_norm(a, w)?;
        x = c.b.add(x, a)?;

        let w = c.weight(&p("ffn_norm"), &[d])?;
        let h = c.rms_norm(x, w)?;
        let wg = c.weight(&p("ffn_gate"), &[ff, d])?;
        let wu = c.weight(&p("ffn_up"), &[ff, d])?;
        let wd = c.weight(&p("ffn_down"), &[d, ff])?;
        let gt = c.b.matmul(h, wg, true)?;
        let up = c.b.matmul(h, wu, true)?;
        let act = c.gelu_tanh(gt)?;
        let m = c.b.mul(act, up)?;
        let dn = c.b.matmul(m, wd, true)?;
        let w = c.weight(&p("post_ffw_norm"), &[d])?;
        let dn = c.rms_norm(dn, w)?;
        x = c.b.add(x, dn)?;
    }
    let w = c.weight("output_norm.weight", &[d])?;
    let x = match logits {
        Logits::Last => c.b.slice(x, 0, seq - 1, seq)?,
        Logits::All => x,
    };
    let x = c.rms_norm(x, w)?;
    let out = c.b.matmul(x, emb, true)?;
    c.b.output("logits", out)?;
    Ok(c.b.finish()?)
}

/// A loaded Gemma 3 model: the mapped GGUF, its tokenizer, a CPU device, and compiled
/// plans cached per sequence length.
pub struct Gemma3 {
    /// Configuration read from the file.
    pub config: Gemma3Config,
    /// Tokenizer built from the file's metadata.
    pub tokenizer: Arc<Tokenizer>,
    file: Arc<GgufFile>,
    weights: Arc<GgufWeights>,
    device: Arc<dyn Device>,
    plans: HashMap<(usize, Logits), Executable>,
    options: CompileOptions,
    last_report: Option<CompileReport>,
}

impl Gemma3 {
    /// Maps `path`, reads the configuration and tokenizer, and checks every tensor the
    /// model needs (name, shape, type) before anything runs.
    pub fn load(path: impl AsRef<Path>, threads: usize) -> Result<Gemma3, ModelError> {
        let file = Arc::new(GgufFile::open(path.as_ref())?);
        let config = Gemma3Config::from_gguf(&file)?;
        for (name, shape) in config.expected_tensors() {
            let (got, dtype) = file.shape_of(&name)?;
            let got = if got.len() == 2 && got[0] == 1 && shape.len() == 1 { vec![got[1]] } else { got };
            if got != shape {
                return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has shape {got:?}, expected {shape:?}") });
            }
            if let DType::Quant(t) = dtype {
                if matches!(t, tg_quant::GgmlType::I8 | tg_quant::GgmlType::I16 | tg_quant::GgmlType::I32 | tg_quant::GgmlType::I64 | tg_quant::GgmlType::F64) {
                    return Err(ModelError::Architecture { file: file.name().to_string(), detail: format!("tensor '{name}' has unsupported type {t}") });
                }
            }
        }
        let tokenizer = Arc::new(Tokenizer::from_gguf(&file)?);
        if tokenizer.vocab_size() != config.n_vocab {
            return Err(ModelError::Architecture {
                file: file.name().to_string(),
                detail: format!("tokenizer has {} tokens, embedding table {}", tokenizer.vocab_size(), config.n_vocab),
            });
        }
        let device: Arc<dyn Device> = Arc::new(CpuDevice::new(threads).map_err(ModelError::Request)?);
        let weights = Arc::new(GgufWeights::new(file.clone()));
        Ok(Gemma3 { config, tokenizer, file, weights, device, plans: HashMap::new(), options: CompileOptions::default(), last_report: None })
    }

    /// The mapped file.
    pub fn file(&self) -> &GgufFile {
        &self.file
    }

    /// The weight store (for the reference interpreter).
    pub fn weights(&self) -> &GgufWeights {
        &self.weights
    }

    /// Sets compiler options for plans compiled from now on (clears the plan cache).
    pub fn set_compile_options(&mut self, o: CompileOptions) {
        self.options = o;
        self.plans.clear();
    }

    /// The report of the most recent compilation.
    pub fn last_report(&self) -> Option<&CompileReport> {
        self.last_report.as_ref()
    }

    /// The forward graph for `seq` tokens.
    pub fn graph(&self, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
        build_graph(&self.config, &*self.file, seq, logits)
    }

    fn check_tokens(&self, tokens: &[u32]) -> Result<(), ModelError> {
        if tokens.is_empty() {
            return Err(ModelError::Request("empty token sequence".into()));
        }
        if tokens.len() > self.config.context_length {
            return Err(ModelError::Request(format!("{} tokens exceed the model's context length of {}", tokens.len(), self.config.context_length)));
        }
        if let Some(&t) = tokens.iter().find(|&&t| t as usize >= self.config.n_vocab) {
            return Err(ModelError::Request(format!("token id {t} is outside the vocabulary of {}", self.config.n_vocab)));
        }
        Ok(())
    }

    /// Compiles (or fetches from the cache) the plan for `seq` tokens.
    pub fn prepare(&mut self, seq: usize, logits: Logits) -> Result<(), ModelError> {
        if self.plans.contains_key(&(seq, logits)) {
            return Ok(());
        }
        let graph = self.graph(seq, logits)?;
        let compiled = compile(&graph, std::slice::from_ref(&self.device), &self.options)?;
        self.last_report = Some(compiled.report);
        let exe = Executable::new(compiled.plan, vec![self.device.clone()], self.weights.clone())?;
        self.plans.insert((seq, logits), exe);
        Ok(())
    }

    /// Runs the model on `tokens` and returns the logits (`[1, n_vocab]` for
    /// [`Logits::Last`], `[seq, n_vocab]` for [`Logits::All`]) as a flat vector.
    pub fn forward(&mut self, tokens: &[u32], logits: Logits) -> Result<Vec<f32>, ModelError> {
        self.check_tokens(tokens)?;
        self.prepare(tokens.len(), logits)?;
        let exe = self.plans.get_mut(&(tokens.len(), logits)).ok_or_else(|| ModelError::Request("plan missing".into()))?;
        let ids: Vec<i32> = tokens.iter().map(|&t| t as i32).collect();
        let input = HostTensor::i32(&[ids.len()], ids)?;
        let mut inputs = HashMap::new();
        inputs.insert("tokens".to_string(), input);
        let mut out = exe.run(&inputs)?;
        let t = out.remove("logits").ok_or_else(|| ModelError::Request("plan produced no logits".into()))?;
        match t.data {
            tg_ir::HostData::F32(v) => Ok(v),
            _ => Err(ModelError::Request("logits are not f32".into())),
        }
    }

    /// Drops cached plans (e.g. to bound memory during long generations).
    pub fn clear_plans(&mut self) {
        self.plans.clear();
    }

    /// The number of cached plans.
    pub fn cached_plans(&self) -> usize {
        self.plans.len()
    }
}

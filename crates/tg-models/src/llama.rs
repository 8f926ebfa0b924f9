//! The Llama family as a graph of primitive ops: Llama 2 / 3, Mistral, Qwen2 / Qwen2.5 and
//! Qwen3 GGUF files, configured from the file's metadata.
//!
//! Architecture (per layer): RMSNorm → q/k/v projections (with biases where the file has
//! them: Qwen2) → per-head RMSNorm of q and k (Qwen3) → RoPE (the original interleaved
//! pairs for `llama`, llama.cpp's `NORM`; halves for `qwen2`/`qwen3`, `NEOX`; with the
//! scaling the file declares) → causal attention, grouped-query, sliding-window when the
//! file sets `attention.sliding_window` (Mistral), scaled by `1/sqrt(head_dim)` → output
//! projection → residual; then RMSNorm → SwiGLU(gate) · up → down → residual. A final
//! RMSNorm, then the output head: `output.weight`, or the embedding table when the file
//! has none (tied).
//!
//! Everything here comes from the shared layer builders ([`crate::layers`]); this file
//! is the configuration, the weight names and the graph. Loading, incremental generation,
//! sampling and chat come from [`crate::LanguageModel`].

use crate::decoder::DecoderArch;
use crate::gemma3::{Logits, WeightShapes};
use crate::layers::{self, RopeScaling};
use crate::{ModelError, ModelKind};
use tg_gguf::GgufFile;
use tg_ir::{Graph, GraphBuilder, Tensor};

/// How RoPE pairs the coordinates of a head.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum RopeLayout {
    /// Adjacent coordinates `(x₂ᵢ, x₂ᵢ₊₁)`: Llama and Mistral GGUF files (llama.cpp's `NORM`).
    Interleaved,
    /// The two halves `(xᵢ, x_{i+d/2})`: Qwen2, Qwen3 (llama.cpp's `NEOX`).
    Halves,
}

/// Hyper-parameters of a Llama-family model, read from GGUF metadata.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct LlamaConfig {
    /// `general.architecture`: `llama`, `qwen2` or `qwen3`.
    pub arch: &'static str,
    /// Vocabulary size (rows of the embedding table).
    pub n_vocab: usize,
    /// Hidden size.
    pub n_embd: usize,
    /// Transformer blocks.
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
    /// RoPE base.
    pub rope_base: f32,
    /// RoPE pairing.
    pub rope_layout: RopeLayout,
    /// RoPE scaling from `rope.scaling.*`.
    pub rope_scaling: RopeScaling,
    /// Per-pair frequency divisors in the `rope_freqs.weight` tensor (Llama 3.1+).
    pub rope_freq_factors: bool,
    /// Sliding-window size (Mistral), `None` for full causal attention.
    pub sliding_window: Option<usize>,
    /// Longest sequence.
    pub context_length: usize,
    /// q/k/v projections have biases (Qwen2).
    pub qkv_bias: bool,
    /// Per-head RMSNorm of queries and keys (Qwen3).
    pub qk_norm: bool,
    /// The output head is the embedding table (no `output.weight`).
    pub tied_output: bool,
}

/// What each architecture name means (the differences the metadata does not state).
struct Family {
    name: &'static str,
    rope: RopeLayout,
    qk_norm: bool,
}

const FAMILIES: &[Family] = &[
    Family { name: "llama", rope: RopeLayout::Interleaved, qk_norm: false },
    Family { name: "qwen2", rope: RopeLayout::Halves, qk_norm: false },
    Family { name: "qwen3", rope: RopeLayout::Halves, qk_norm: true },
];

/// The `{arch}.` metadata keys this file reads; any other is refused.
const KNOWN_KEYS: &[&str] = &[
    "context_length",
    "embedding_length",
    "block_count",
    "feed_forward_length",
    "attention.head_count",
    "attention.head_count_kv",
    "attention.key_length",
    "attention.value_length",
    "attention.layer_norm_rms_epsilon",
    "attention.sliding_window",
    "rope.freq_base",
    "rope.dimension_count",
    "rope.scaling.type",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.finetuned",
    "rope.scaling.yarn_ext_factor",
    "rope.scaling.yarn_attn_factor",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "vocab_size",
    "expert_count",
    "expert_used_count",
    "pooling_type",
];

fn unhandled(f: &GgufFile, key: &str, detail: &str) -> ModelError {
    let value = f.get(key).map(|v| v.describe()).unwrap_or_else(|| "(absent)".into());
    ModelError::Architecture { file: f.name().to_string(), detail: format!("metadata key '{key}' = {value} is not handled: {detail}") }
}

impl LlamaConfig {
    /// Reads the configuration of a `llama`, `qwen2` or `qwen3` file. A metadata key of the
    /// architecture this file does not handle, or a value it does not run (a mixture of
    /// experts, partial rotary dimensions, an unknown RoPE scaling), is an error naming the
    /// key and the value.
    pub fn from_gguf(f: &GgufFile) -> Result<LlamaConfig, ModelError> {
        let arch_name = f.get_str("general.architecture")?;
        let Some(family) = FAMILIES.iter().find(|fam| fam.name == arch_name) else {
            return Err(ModelError::Architecture { file: f.name().to_string(), detail: format!("architecture '{arch_name}' is not of the Llama family") });
        };
        let arch = family.name;
        let key = |k: &str| format!("{arch}.{k}");
        for (k, _) in f.metadata() {
            if let Some(rest) = k.strip_prefix(&format!("{arch}.")) {
                if !KNOWN_KEYS.contains(&rest) {
                    return Err(unhandled(f, k, "this build does not know what it changes"));
                }
            }
        }
        let u = |k: &str| f.get_u32(&key(k)).map(|v| v as usize);
        let opt_u = |k: &str| if f.get(&key(k)).is_some() { u(k).map(Some) } else { Ok(None) };
        let opt_f = |k: &str| if f.get(&key(k)).is_some() { f.get_f32(&key(k)).map(|v| Some(v as f64)) } else { Ok(None) };
        for k in ["expert_count", "expert_used_count"] {
            if opt_u(k)?.unwrap_or(0) > 0 {
                return Err(unhandled(f, &key(k), "mixtures of experts are not run"));
            }
        }
        if opt_u("pooling_type")?.unwrap_or(0) > 0 {
            return Err(unhandled(f, &key("pooling_type"), "an embedding model, not a decoder"));
        }
        let n_embd = u("embedding_length")?;
        let n_head = u("attention.head_count")?;
        let n_head_kv = opt_u("attention.head_count_kv")?.unwrap_or(n_head);
        if n_head == 0 || n_head_kv == 0 || !n_head.is_multiple_of(n_head_kv) {
            return Err(unhandled(f, &key("attention.head_count_kv"), &format!("{n_head} query heads do not share {n_head_kv} kv heads evenly")));
        }
        let head_dim = opt_u("attention.key_length")?.unwrap_or(n_embd / n_head);
        if let Some(v) = opt_u("attention.value_length")? {
            if v != head_dim {
                return Err(unhandled(f, &key("attention.value_length"), &format!("values of {v} dimensions beside keys of {head_dim}")));
            }
        }
        if head_dim == 0 || !head_dim.is_multiple_of(2) {
            return Err(unhandled(f, &key("attention.key_length"), "the head dimension must be even"));
        }
        if let Some(r) = opt_u("rope.dimension_count")? {
            if r != head_dim {
                return Err(unhandled(f, &key("rope.dimension_count"), &format!("RoPE on {r} of {head_dim} head dimensions (partial rotary) is not run")));
            }
        }
        let context_length = u("context_length")?;
        let factor = opt_f("rope.scaling.factor")?;
        let rope_scaling = match f.get(&key("rope.scaling.type")).map(|_| f.get_str(&key("rope.scaling.type"))).transpose()? {
            None | Some("none") => RopeScaling::None,
            Some("linear") => {
                RopeScaling::Linear { factor: factor.filter(|&x| x > 0.0).ok_or_else(|| unhandled(f, &key("rope.scaling.factor"), "linear scaling needs a positive factor"))? }
            }
            Some("yarn") => RopeScaling::Yarn {
                factor: factor.filter(|&x| x > 0.0).ok_or_else(|| unhandled(f, &key("rope.scaling.factor"), "YaRN needs a positive factor"))?,
                original_context: opt_u("rope.scaling.original_context_length")?.unwrap_or(context_length) as f64,
                ext_factor: opt_f("rope.scaling.yarn_ext_factor")?.filter(|&x| x >= 0.0).unwrap_or(1.0),
                attn_factor: opt_f("rope.scaling.yarn_attn_factor")?.unwrap_or(1.0),
                beta_fast: opt_f("rope.scaling.yarn_beta_fast")?.unwrap_or(32.0),
                beta_slow: opt_f("rope.scaling.yarn_beta_slow")?.unwrap_or(1.0),
            },
            Some(_) => return Err(unhandled(f, &key("rope.scaling.type"), "known types: none, linear, yarn")),
        };
        let rope_scaling = match rope_scaling {
            RopeScaling::Linear { factor: 1.0 } => RopeScaling::None,
            s => s,
        };
        let n_vocab = f.tensor("token_embd.weight")?.dims.get(1).copied().unwrap_or(0) as usize;
        let has = |name: &str| f.tensor(name).is_ok();
        let bias = ["attn_q", "attn_k", "attn_v"].map(|p| has(&format!("blk.0.{p}.bias")));
        if bias.iter().any(|&b| b) && !bias.iter().all(|&b| b) {
            return Err(ModelError::Architecture { file: f.name().to_string(), detail: "blk.0 has biases on some of q/k/v but not all".into() });
        }
        let sliding_window = opt_u("attention.sliding_window")?.filter(|&w| w > 0 && w < context_length);
        Ok(LlamaConfig {
            arch,
            n_vocab,
            n_embd,
            n_layer: u("block_count")?,
            n_ff: u("feed_forward_length")?,
            n_head,
            n_head_kv,
            head_dim,
            rms_eps: f.get_f32(&key("attention.layer_norm_rms_epsilon"))?,
            rope_base: opt_f("rope.freq_base")?.unwrap_or(10_000.0) as f32,
            rope_layout: family.rope,
            rope_scaling,
            rope_freq_factors: has("rope_freqs.weight"),
            sliding_window,
            context_length,
            qkv_bias: bias[0],
            qk_norm: family.qk_norm,
            tied_output: !has("output.weight"),
        })
    }

    /// Every tensor the model reads, with its row-major shape.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        let (d, hd, ff) = (self.n_embd, self.head_dim, self.n_ff);
        let (q, kv) = (self.n_head * hd, self.n_head_kv * hd);
        let mut v = vec![("token_embd.weight".to_string(), vec![self.n_vocab, d]), ("output_norm.weight".to_string(), vec![d])];
        if !self.tied_output {
            v.push(("output.weight".into(), vec![self.n_vocab, d]));
        }
        if self.rope_freq_factors {
            v.push(("rope_freqs.weight".into(), vec![hd / 2]));
        }
        for l in 0..self.n_layer {
            let mut w = vec![
                ("attn_norm.weight", vec![d]),
                ("attn_q.weight", vec![q, d]),
                ("attn_k.weight", vec![kv, d]),
                ("attn_v.weight", vec![kv, d]),
                ("attn_output.weight", vec![d, q]),
                ("ffn_norm.weight", vec![d]),
                ("ffn_gate.weight", vec![ff, d]),
                ("ffn_up.weight", vec![ff, d]),
                ("ffn_down.weight", vec![d, ff]),
            ];
            if self.qkv_bias {
                w.extend([("attn_q.bias", vec![q]), ("attn_k.bias", vec![kv]), ("attn_v.bias", vec![kv])]);
            }
            if self.qk_norm {
                w.extend([("attn_q_norm.weight", vec![hd]), ("attn_k_norm.weight", vec![hd])]);
            }
            v.extend(w.into_iter().map(|(n, s)| (format!("blk.{l}.{n}"), s)));
        }
        v
    }
}

/// The graph under construction, with the configuration and the file's weights.
struct Ctx<'a> {
    b: GraphBuilder,
    cfg: &'a LlamaConfig,
    w: &'a dyn WeightShapes,
}

impl Ctx<'_> {
    /// Weight `name`, which must have shape `expect` (a `[1, n]` vector reads as `[n]`).
    fn weight(&mut self, name: &str, expect: &[usize]) -> Result<Tensor, ModelError> {
        self.w.weight_in(&mut self.b, name, expect)
    }

    fn rms_norm(&mut self, x: Tensor, name: &str, dim: usize) -> Result<Tensor, ModelError> {
        let w = self.weight(name, &[dim])?;
        Ok(layers::rms_norm(&mut self.b, x, Some(w), self.cfg.rms_eps as f64)?)
    }

    /// `x · Wᵀ (+ b)` for the projection `blk.{l}.{p}`.
    fn projection(&mut self, x: Tensor, l: usize, p: &str, out: usize, bias: bool) -> Result<Tensor, ModelError> {
        let w = self.weight(&format!("blk.{l}.{p}.weight"), &[out, self.cfg.n_embd])?;
        let b = if bias { Some(self.weight(&format!("blk.{l}.{p}.bias"), &[out])?) } else { None };
        Ok(layers::linear(&mut self.b, x, w, b)?)
    }

    /// Queries or keys `[seq, heads · hd]` → per-head norm (Qwen3) → RoPE, `[seq, heads, hd]`.
    fn rotate(&mut self, x: Tensor, l: usize, which: &str, heads: usize, (cos, sin): (Tensor, Tensor)) -> Result<Tensor, ModelError> {
        let hd = self.cfg.head_dim;
        let seq = self.b.shape(x)[0];
        let mut x = self.b.reshape(x, &[seq, heads, hd])?;
        if self.cfg.qk_norm {
            x = self.rms_norm(x, &format!("blk.{l}.attn_{which}_norm.weight"), hd)?;
        }
        if self.cfg.rope_layout == RopeLayout::Interleaved {
            x = layers::deinterleave_pairs(&mut self.b, x)?;
        }
        Ok(layers::rope_neox(&mut self.b, x, cos, sin)?)
    }

    /// One transformer block on the residual stream `x: [seq, n_embd]`.
    fn block(&mut self, l: usize, x: Tensor, (cos, sin): (Tensor, Tensor), mask: Tensor) -> Result<Tensor, ModelError> {
        let cfg = self.cfg;
        let (d, hd, nh, nkv, ff) = (cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff);
        let h = self.rms_norm(x, &format!("blk.{l}.attn_norm.weight"), d)?;
        let q = self.projection(h, l, "attn_q", nh * hd, cfg.qkv_bias)?;
        let k = self.projection(h, l, "attn_k", nkv * hd, cfg.qkv_bias)?;
        let v = self.projection(h, l, "attn_v", nkv * hd, cfg.qkv_bias)?;
        let q = self.rotate(q, l, "q", nh, (cos, sin))?;
        let k = self.rotate(k, l, "k", nkv, (cos, sin))?;
        let heads = layers::Heads { n_head: nh, n_head_kv: nkv, head_dim: hd };
        let o = layers::attention(&mut self.b, q, k, v, Some(mask), heads, 1.0 / (hd as f64).sqrt())?;
        let wo = self.weight(&format!("blk.{l}.attn_output.weight"), &[d, nh * hd])?;
        let a = self.b.matmul(o, wo, true)?;
        let x = self.b.add(x, a)?;

        let h = self.rms_norm(x, &format!("blk.{l}.ffn_norm.weight"), d)?;
        let wg = self.weight(&format!("blk.{l}.ffn_gate.weight"), &[ff, d])?;
        let wu = self.weight(&format!("blk.{l}.ffn_up.weight"), &[ff, d])?;
        let wd = self.weight(&format!("blk.{l}.ffn_down.weight"), &[d, ff])?;
        let f = layers::gated_ffn(&mut self.b, h, wg, wu, wd, layers::Gate::Silu)?;
        Ok(self.b.add(x, f)?)
    }
}

/// Builds the forward pass for `seq` tokens: input `tokens` (i32 `[seq]`), output `logits`.
/// A pure function of the tokens: no cache, no fused ops.
pub fn build_graph(cfg: &LlamaConfig, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    if seq == 0 {
        return Err(ModelError::Request("cannot run on an empty token sequence".into()));
    }
    let d = cfg.n_embd;
    let mut c = Ctx { b: GraphBuilder::new(), cfg, w: weights };
    let tokens = c.b.input("tokens", &[seq], tg_ir::DType::I32)?;
    let emb = c.weight("token_embd.weight", &[cfg.n_vocab, d])?;
    let mut x = c.b.gather(emb, tokens)?;
    let factors = if cfg.rope_freq_factors { Some(c.weight("rope_freqs.weight", &[cfg.head_dim / 2])?) } else { None };
    let (cos, sin) = layers::rope_tables_scaled(&mut c.b, seq, cfg.head_dim, cfg.rope_base as f64, cfg.rope_scaling, factors)?;
    let mask = layers::causal_mask(&mut c.b, seq, cfg.sliding_window)?;
    for l in 0..cfg.n_layer {
        x = c.block(l, x, (cos, sin), mask)?;
    }
    let x = match logits {
        Logits::Last => c.b.slice(x, 0, seq - 1, seq)?,
        Logits::All => x,
    };
    let x = c.rms_norm(x, "output_norm.weight", d)?;
    let head = if cfg.tied_output { emb } else { c.weight("output.weight", &[cfg.n_vocab, d])? };
    let out = c.b.matmul(x, head, true)?;
    c.b.output("logits", out)?;
    Ok(c.b.finish()?)
}

/// A Llama-family model as a decoder architecture for the engine ([`crate::LanguageModel`]).
impl DecoderArch for LlamaConfig {
    fn kind(&self) -> &'static str {
        self.arch
    }

    fn n_vocab(&self) -> usize {
        self.n_vocab
    }

    fn context_length(&self) -> usize {
        self.context_length
    }

    fn n_layer(&self) -> usize {
        self.n_layer
    }

    fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        LlamaConfig::expected_tensors(self)
    }

    fn graph(&self, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
        build_graph(self, weights, seq, logits)
    }

    fn config_json(&self) -> serde_json::Value {
        serde_json::to_value(self).unwrap_or_default()
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

fn from_gguf(f: &GgufFile) -> Result<Box<dyn DecoderArch>, ModelError> {
    Ok(Box::new(LlamaConfig::from_gguf(f)?))
}

/// Registry entry: Llama 2 / 3 and Mistral GGUF files (`general.architecture = llama`).
pub const LLAMA: ModelKind = ModelKind {
    name: "llama",
    what: "a Llama or Mistral GGUF file (general.architecture = llama)",
    detect: crate::decoder::detect,
    open: crate::decoder::open_model,
    decoder: Some(from_gguf),
};
/// Registry entry: Qwen2 / Qwen2.5 GGUF files.
pub const QWEN2: ModelKind = ModelKind {
    name: "qwen2",
    what: "a Qwen2 or Qwen2.5 GGUF file (general.architecture = qwen2)",
    detect: crate::decoder::detect,
    open: crate::decoder::open_model,
    decoder: Some(from_gguf),
};
/// Registry entry: Qwen3 GGUF files.
pub const QWEN3: ModelKind = ModelKind {
    name: "qwen3",
    what: "a Qwen3 GGUF file (general.architecture = qwen3)",
    detect: crate::decoder::detect,
    open: crate::decoder::open_model,
    decoder: Some(from_gguf),
};

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
//!
//! This file is the architecture only (configuration, weight names, the graph); loading,
//! incremental generation, sampling and serving come from [`crate::LanguageModel`].

use crate::decoder::DecoderArch;
use crate::layers;
use crate::{ModelError, ModelKind};
use tg_gguf::GgufFile;
use tg_ir::{DType, Graph, GraphBuilder, IrError, Tensor};

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
    /// Query scale (`1/sqrt(head_dim)`, or `query_pre_attn_scalar^-1/2` in HF configs).
    pub attn_scale: f32,
    /// Explicit per-layer flags, `true` for global layers (HF `layer_types`); `None` means
    /// every `swa_pattern`-th layer is global.
    pub layer_global: Option<Vec<bool>>,
    /// Added to every RMSNorm weight before use: 0 for GGUF files (conversion already folded
    /// Gemma's `(1 + w)` into the stored weights), 1 for Hugging Face checkpoints.
    pub norm_offset: f32,
    /// Causal attention (text generation); `false` for bidirectional encoders such as
    /// EmbeddingGemma, where a local layer sees keys with `|i − j| ≤ sliding_window / 2`.
    pub causal: bool,
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
            layer_global: None,
            norm_offset: 0.0,
            causal: true,
        };
        if cfg.n_head == 0 || cfg.n_head_kv == 0 || !cfg.n_head.is_multiple_of(cfg.n_head_kv) || !cfg.head_dim.is_multiple_of(2) {
            return Err(ModelError::Architecture {
                file: f.name().to_string(),
                detail: format!("unsupported head layout: {} query heads, {} kv heads, head dim {}", cfg.n_head, cfg.n_head_kv, cfg.head_dim),
            });
        }
        Ok(cfg)
    }

    /// True for layers with global (full causal) attention.
    pub fn is_global(&self, layer: usize) -> bool {
        match &self.layer_global {
            Some(v) => v.get(layer).copied().unwrap_or(false),
            None => (layer + 1).is_multiple_of(self.swa_pattern),
        }
    }

    /// Expected (row-major shape) of every tensor the model reads, with GGUF names.
    pub fn expected_tensors(&self) -> Vec<(String, Vec<usize>)> {
        self.expected_tensors_named(&TensorNames::Gguf, true)
    }

    /// Expected (row-major shape) of every tensor the model reads, named by `names`; the
    /// final norm is included when `final_norm` is set.
    pub fn expected_tensors_named(&self, names: &TensorNames, final_norm: bool) -> Vec<(String, Vec<usize>)> {
        let (d, hd, ff) = (self.n_embd, self.head_dim, self.n_ff);
        let mut v = vec![(names.global(Role::TokenEmbd), vec![self.n_vocab, d])];
        if final_norm {
            v.push((names.global(Role::OutputNorm), vec![d]));
        }
        for l in 0..self.n_layer {
            for (role, shape) in [
                (Role::AttnNorm, vec![d]),
                (Role::Q, vec![self.n_head * hd, d]),
                (Role::K, vec![self.n_head_kv * hd, d]),
                (Role::V, vec![self.n_head_kv * hd, d]),
                (Role::QNorm, vec![hd]),
                (Role::KNorm, vec![hd]),
                (Role::AttnOut, vec![d, self.n_head * hd]),
                (Role::PostAttnNorm, vec![d]),
                (Role::FfnNorm, vec![d]),
                (Role::Gate, vec![ff, d]),
                (Role::Up, vec![ff, d]),
                (Role::Down, vec![d, ff]),
                (Role::PostFfnNorm, vec![d]),
            ] {
                v.push((names.layer(role, l), shape));
            }
        }
        v
    }
}

/// The role a weight plays in the Gemma 3 architecture.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Role {
    /// Token embedding table `[n_vocab, n_embd]` (also the tied output head).
    TokenEmbd,
    /// Final RMSNorm.
    OutputNorm,
    /// Pre-attention RMSNorm.
    AttnNorm,
    /// Query projection.
    Q,
    /// Key projection.
    K,
    /// Value projection.
    V,
    /// Per-head query RMSNorm.
    QNorm,
    /// Per-head key RMSNorm.
    KNorm,
    /// Attention output projection.
    AttnOut,
    /// RMSNorm after attention.
    PostAttnNorm,
    /// Pre-FFN RMSNorm.
    FfnNorm,
    /// FFN gate projection.
    Gate,
    /// FFN up projection.
    Up,
    /// FFN down projection.
    Down,
    /// RMSNorm after the FFN.
    PostFfnNorm,
}

/// How a checkpoint names its tensors.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TensorNames {
    /// llama.cpp's GGUF names (`blk.N.attn_q.weight`, `token_embd.weight`, ...).
    Gguf,
    /// Hugging Face names (`layers.N.self_attn.q_proj.weight`, `embed_tokens.weight`, ...),
    /// each preceded by `prefix` (e.g. `""` or `"model."`).
    HuggingFace {
        /// Prepended to every name.
        prefix: String,
    },
}

impl TensorNames {
    /// Name of a model-level weight (`TokenEmbd` or `OutputNorm`).
    pub fn global(&self, role: Role) -> String {
        match (self, role) {
            (TensorNames::Gguf, Role::TokenEmbd) => "token_embd.weight".into(),
            (TensorNames::Gguf, _) => "output_norm.weight".into(),
            (TensorNames::HuggingFace { prefix }, Role::TokenEmbd) => format!("{prefix}embed_tokens.weight"),
            (TensorNames::HuggingFace { prefix }, _) => format!("{prefix}norm.weight"),
        }
    }

    /// Name of a weight of layer `l`.
    pub fn layer(&self, role: Role, l: usize) -> String {
        match self {
            TensorNames::Gguf => {
                let s = match role {
                    Role::AttnNorm => "attn_norm",
                    Role::Q => "attn_q",
                    Role::K => "attn_k",
                    Role::V => "attn_v",
                    Role::QNorm => "attn_q_norm",
                    Role::KNorm => "attn_k_norm",
                    Role::AttnOut => "attn_output",
                    Role::PostAttnNorm => "post_attention_norm",
                    Role::FfnNorm => "ffn_norm",
                    Role::Gate => "ffn_gate",
                    Role::Up => "ffn_up",
                    Role::Down => "ffn_down",
                    Role::PostFfnNorm => "post_ffw_norm",
                    Role::TokenEmbd | Role::OutputNorm => return self.global(role),
                };
                format!("blk.{l}.{s}.weight")
            }
            TensorNames::HuggingFace { prefix } => {
                let s = match role {
                    Role::AttnNorm => "input_layernorm",
                    Role::Q => "self_attn.q_proj",
                    Role::K => "self_attn.k_proj",
                    Role::V => "self_attn.v_proj",
                    Role::QNorm => "self_attn.q_norm",
                    Role::KNorm => "self_attn.k_norm",
                    Role::AttnOut => "self_attn.o_proj",
                    Role::PostAttnNorm => "post_attention_layernorm",
                    Role::FfnNorm => "pre_feedforward_layernorm",
                    Role::Gate => "mlp.gate_proj",
                    Role::Up => "mlp.up_proj",
                    Role::Down => "mlp.down_proj",
                    Role::PostFfnNorm => "post_feedforward_layernorm",
                    Role::TokenEmbd | Role::OutputNorm => return self.global(role),
                };
                format!("{prefix}layers.{l}.{s}.weight")
            }
        }
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

    /// Weight `name` as a graph input of `b`, which must have shape `expect` (a `[1, n]`
    /// vector reads as `[n]`); any other shape is an error naming the tensor.
    fn weight_in(&self, b: &mut GraphBuilder, name: &str, expect: &[usize]) -> Result<Tensor, ModelError> {
        let (shape, dtype) = self.shape_of(name)?;
        let shape = if shape.len() == 2 && shape[0] == 1 && expect.len() == 1 { vec![shape[1]] } else { shape };
        if shape != expect {
            return Err(ModelError::Request(format!("tensor '{name}' has shape {shape:?}, the architecture needs {expect:?}")));
        }
        Ok(b.weight(name, &shape, dtype)?)
    }
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

pub(crate) struct Ctx<'a> {
    pub(crate) b: GraphBuilder,
    pub(crate) cfg: &'a Gemma3Config,
    pub(crate) w: &'a dyn WeightShapes,
    pub(crate) names: &'a TensorNames,
}

/// RoPE tables and attention mask of one layer kind (global or local).
#[derive(Clone, Copy)]
pub(crate) struct LayerInputs {
    pub(crate) cos: Tensor,
    pub(crate) sin: Tensor,
    pub(crate) mask: Tensor,
}

impl Ctx<'_> {
    /// An RMSNorm weight of `dim` elements, with the configured offset added (`1 + w` for
    /// Hugging Face checkpoints).
    pub(crate) fn norm_weight(&mut self, name: &str, dim: usize) -> Result<Tensor, ModelError> {
        let w = self.weight(name, &[dim])?;
        Ok(layers::norm_weight(&mut self.b, w, self.cfg.norm_offset as f64)?)
    }

    pub(crate) fn weight(&mut self, name: &str, expect: &[usize]) -> Result<Tensor, ModelError> {
        self.w.weight_in(&mut self.b, name, expect)
    }

    /// [`layers::rms_norm`] with the model's epsilon.
    pub(crate) fn rms_norm(&mut self, x: Tensor, w: Tensor) -> Result<Tensor, IrError> {
        layers::rms_norm(&mut self.b, x, Some(w), self.cfg.rms_eps as f64)
    }

    /// RoPE tables at positions `0..seq` ([`layers::rope_tables`]).
    fn rope_tables(&mut self, seq: usize, base: f32) -> Result<(Tensor, Tensor), IrError> {
        layers::rope_tables(&mut self.b, seq, self.cfg.head_dim, base as f64)
    }

    /// RoPE tables at the f32 positions `pos: [seq, 1, 1]` ([`layers::rope_tables_at`]).
    pub(crate) fn rope_tables_at(&mut self, pos: Tensor, base: f32) -> Result<(Tensor, Tensor), IrError> {
        layers::rope_tables_at(&mut self.b, pos, self.cfg.head_dim, base as f64)
    }

    /// One transformer block on the residual stream `x: [seq, n_embd]`.
    pub(crate) fn block(&mut self, l: usize, x: Tensor, seq: usize, li: LayerInputs) -> Result<Tensor, ModelError> {
        let cfg = self.cfg;
        let (d, hd, nh, nkv, ff) = (cfg.n_embd, cfg.head_dim, cfg.n_head, cfg.n_head_kv, cfg.n_ff);
        let names = self.names;
        let p = |r: Role| names.layer(r, l);
        let LayerInputs { cos, sin, mask } = li;

        let w = self.norm_weight(&p(Role::AttnNorm), d)?;
        let h = self.rms_norm(x, w)?;
        let wq = self.weight(&p(Role::Q), &[nh * hd, d])?;
        let wk = self.weight(&p(Role::K), &[nkv * hd, d])?;
        let wv = self.weight(&p(Role::V), &[nkv * hd, d])?;
        let q = self.b.matmul(h, wq, true)?;
        let k = self.b.matmul(h, wk, true)?;
        let v = self.b.matmul(h, wv, true)?;
        let q = self.b.reshape(q, &[seq, nh, hd])?;
        let k = self.b.reshape(k, &[seq, nkv, hd])?;
        let wqn = self.norm_weight(&p(Role::QNorm), hd)?;
        let wkn = self.norm_weight(&p(Role::KNorm), hd)?;
        let q = self.rms_norm(q, wqn)?;
        let k = self.rms_norm(k, wkn)?;
        let q = layers::rope_neox(&mut self.b, q, cos, sin)?;
        let k = layers::rope_neox(&mut self.b, k, cos, sin)?;
        let heads = layers::Heads { n_head: nh, n_head_kv: nkv, head_dim: hd };
        let o = layers::attention(&mut self.b, q, k, v, Some(mask), heads, cfg.attn_scale as f64)?; // [seq, nh * hd]
        let wo = self.weight(&p(Role::AttnOut), &[d, nh * hd])?;
        let a = self.b.matmul(o, wo, true)?;
        let w = self.norm_weight(&p(Role::PostAttnNorm), d)?;
        let a = self.rms_norm(a, w)?;
        let x = self.b.add(x, a)?;

        let w = self.norm_weight(&p(Role::FfnNorm), d)?;
        let h = self.rms_norm(x, w)?;
        let wg = self.weight(&p(Role::Gate), &[ff, d])?;
        let wu = self.weight(&p(Role::Up), &[ff, d])?;
        let wd = self.weight(&p(Role::Down), &[d, ff])?;
        let dn = layers::gated_ffn(&mut self.b, h, wg, wu, wd, layers::Gate::GeluTanh)?;
        let w = self.norm_weight(&p(Role::PostFfnNorm), d)?;
        let dn = self.rms_norm(dn, w)?;
        Ok(self.b.add(x, dn)?)
    }
}

/// Builds the Gemma 3 forward pass for `seq` tokens: input `tokens` (i32 `[seq]`), output
/// `logits` (f32). A pure function of the tokens: no cache, no fused ops.
pub fn build_graph(cfg: &Gemma3Config, weights: &dyn WeightShapes, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    build_graph_named(cfg, weights, &TensorNames::Gguf, seq, logits)
}

/// [`build_graph`] for a checkpoint whose tensors are named by `names`.
pub fn build_graph_named(cfg: &Gemma3Config, weights: &dyn WeightShapes, names: &TensorNames, seq: usize, logits: Logits) -> Result<Graph, ModelError> {
    if seq == 0 {
        return Err(ModelError::Request("cannot run on an empty token sequence".into()));
    }
    if !cfg.causal {
        return Err(ModelError::Request("a bidirectional model has no logits; use the embedding graph".into()));
    }
    let d = cfg.n_embd;
    let mut c = Ctx { b: GraphBuilder::new(), cfg, w: weights, names };
    let tokens = c.b.input("tokens", &[seq], DType::I32)?;
    let emb = c.weight(&names.global(Role::TokenEmbd), &[cfg.n_vocab, d])?;
    let x0 = c.b.gather(emb, tokens)?;
    let mut x = c.b.scale(x0, (d as f64).sqrt())?;

    let (cos, sin) = c.rope_tables(seq, cfg.rope_base_global)?;
    let mask = layers::causal_mask(&mut c.b, seq, None)?;
    let global = LayerInputs { cos, sin, mask };
    let (cos, sin) = c.rope_tables(seq, cfg.rope_base_local)?;
    let mask = layers::causal_mask(&mut c.b, seq, Some(cfg.sliding_window))?;
    let local = LayerInputs { cos, sin, mask };

    for l in 0..cfg.n_layer {
        x = c.block(l, x, seq, if cfg.is_global(l) { global } else { local })?;
    }
    let w = c.norm_weight(&names.global(Role::OutputNorm), d)?;
    let x = match logits {
        Logits::Last => c.b.slice(x, 0, seq - 1, seq)?,
        Logits::All => x,
    };
    let x = c.rms_norm(x, w)?;
    let out = c.b.matmul(x, emb, true)?;
    c.b.output("logits", out)?;
    Ok(c.b.finish()?)
}

/// Gemma 3 as a decoder architecture: the engine ([`crate::LanguageModel`]) builds its
/// graphs from this configuration and nothing else.
impl DecoderArch for Gemma3Config {
    fn kind(&self) -> &'static str {
        KIND.name
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
        Gemma3Config::expected_tensors(self)
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
    Ok(Box::new(Gemma3Config::from_gguf(f)?))
}

/// The registry entry ([`crate::KINDS`]): a GGUF file whose `general.architecture` is
/// `gemma3`, run by the generation engine ([`crate::LanguageModel`]).
pub const KIND: ModelKind = ModelKind { name: "gemma3", what: "a Gemma 3 GGUF file (general.architecture = gemma3)", detect: crate::decoder::detect, open: crate::decoder::open_model, decoder: Some(from_gguf) };
